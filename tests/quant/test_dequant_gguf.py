#!/usr/bin/env python3
"""Our dequantization must be bit-identical to gguf-py's (gguf.quants.dequantize) for every type.

For each type the tool writes (a) st_random_blocks output and (b) fully random bytes with finite scale fields
(every code / grid index / sign bit pattern), both with our dequantized floats; we compare the float bits with
gguf's dequantization of the same bytes. Types gguf-py does not implement (Q8_1, Q8_K, I8..I64, F64) are checked
against a direct numpy formula from the block layout. Also checks the type table against GGML_QUANT_SIZES.

usage: test_dequant_gguf.py ST_QUANT_TOOL     (seed: $STRATA_SEED or time; printed on failure)
"""
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T
from gguf import quants

TOOL = sys.argv[1]
SEED = int(os.environ.get("STRATA_SEED", time.time_ns() % (1 << 31)))
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg)


def tool(*args):
    subprocess.run([TOOL, *map(str, args)], check=True)


def types_table():
    out = subprocess.run([TOOL, "types"], check=True, capture_output=True, text=True).stdout
    rows = {}
    for line in out.splitlines():
        tid, name, bs, ts, cd, cq = line.split()
        rows[int(tid)] = (name, int(bs), int(ts), cd == "1", cq == "1")
    return rows


def numpy_dequant(qt, raw):
    """Direct formulas for the types gguf-py cannot dequantize."""
    if qt == T.Q8_1:  # d f16, s f16, 32 x int8 (ggml's 36-byte block)
        b = raw.reshape(-1, 36)
        d = b[:, 0:2].copy().view(np.float16).astype(np.float32)
        return (b[:, 4:].copy().view(np.int8).astype(np.float32) * d).reshape(-1)
    if qt == T.Q8_K:  # d f32, 256 x int8, 16 x int16 bsums
        b = raw.reshape(-1, 292)
        d = b[:, 0:4].copy().view(np.float32)
        return (d * b[:, 4:260].copy().view(np.int8).astype(np.float32)).reshape(-1)
    dt = {T.I8: np.int8, T.I16: np.int16, T.I32: np.int32, T.I64: np.int64, T.F64: np.float64}[qt]
    return raw.view(dt).astype(np.float32)


def main():
    rows = types_table()
    known = {int(t) for t in T if int(t) < 40}
    if set(rows) != known:
        fail(f"type ids differ from gguf-py: ours {sorted(rows)} gguf {sorted(known)}")
    for tid, (name, bs, ts, can_deq, _) in rows.items():
        qt = T(tid)
        if qt.name != name:
            fail(f"type {tid}: name {name} != gguf {qt.name}")
        gbs, gts = GGML_QUANT_SIZES[qt]
        if qt == T.Q8_1:
            gts = 36  # gguf-py 0.19 still lists the old 40-byte Q8_1; ggml's block is 2 x f16 + 32 (blocks.h)
        if (gbs, gts) != (bs, ts):
            fail(f"{name}: block/type size ({bs}, {ts}) != gguf ({gbs}, {gts})")
        if not can_deq:
            fail(f"{name}: cannot dequantize")

    with tempfile.TemporaryDirectory() as tmp:
        bin_p, f32_p = os.path.join(tmp, "b.bin"), os.path.join(tmp, "y.f32")
        for tid, (name, bs, ts, _, _) in sorted(rows.items()):
            qt = T(tid)
            nblocks = max(1, 8192 // bs)  # ~8K elements per type and mode: bit patterns are well covered
            for mode in ("random", "raw"):
                seed = SEED + tid * 2 + (mode == "raw")
                if mode == "random":
                    tool("random", tid, nblocks, 0.05, seed, bin_p, f32_p)
                else:
                    tool("raw", tid, nblocks, seed, bin_p, f32_p)
                raw = np.fromfile(bin_p, dtype=np.uint8)
                ours = np.fromfile(f32_p, dtype=np.float32)
                if raw.size != nblocks * ts or ours.size != nblocks * bs:
                    fail(f"{name} {mode}: wrote {raw.size} bytes / {ours.size} floats")
                    continue
                if qt in (T.Q8_1, T.Q8_K, T.I8, T.I16, T.I32, T.I64, T.F64):
                    ref = numpy_dequant(qt, raw)
                    src = "numpy formula"
                else:
                    ref = quants.dequantize(raw.reshape(nblocks, ts) if bs > 1 else raw, qt).reshape(-1)
                    ref = ref.astype(np.float32)
                    src = "gguf"
                ov, rv = ours.view(np.uint32), ref.view(np.uint32)
                bad = np.nonzero(ov != rv)[0]
                if bad.size:
                    i = bad[0]
                    fail(f"{name} {mode}: {bad.size} of {ours.size} values differ from {src}; first at element {i} "
                         f"(block {i // bs}): ours {ours[i]!r} ref {ref[i]!r}")
                if mode == "random" and not np.all(np.isfinite(ours)):
                    fail(f"{name} random: non-finite values from st_random_blocks")

    if failures:
        print(f"{len(failures)} failure(s); seed {SEED} (rerun with STRATA_SEED={SEED})")
        sys.exit(1)
    print(f"dequantization matches for {len(rows)} types (seed {SEED})")


if __name__ == "__main__":
    main()
