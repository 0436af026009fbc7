#!/usr/bin/env python3
"""STRATA_DUMP_ACT (src/engine/actdump.c) and tests/gpu/act_diff.py on the CPU backend, tiny make-model files:
  - a dump holds an 'a' and an 'f' record per layer and evaluated chunk, every position once, n_embd features;
  - the same run twice compares equal (act_diff exit 0, every difference 0);
  - two models that differ from their weights on (another seed) part at layer 0's attention (exit 1, named);
  - dumps of different depth (the same seed, --n-layer 2) compare on their common layers and say how many records
    only one of them holds;
  - an unwritable STRATA_DUMP_ACT folder is a warning, not a failure of the evaluation.
usage: test_actdump.py STRATA_BINARY"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import cli_harness as h  # noqa: E402

ACT_DIFF = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpu", "act_diff.py")
sys.path.insert(0, os.path.dirname(ACT_DIFF))
import act_diff  # noqa: E402

PROMPT = ["--tokens", "1,2,3,4,5,6,7,8,9,10,11"]


def dump(binary, model, d):
    os.makedirs(d, exist_ok=True)
    rc, out, err = h.run(binary, "logits", "-m", model, "-dev", "cpu", "--top", "1", *PROMPT, "-t", "2",
                         env={"STRATA_DUMP_ACT": d})
    h.check(rc == 0, f"logits with STRATA_DUMP_ACT on {model}", err)
    return os.path.join(d, "cpu.act")


def diff(a, b):
    p = subprocess.run([sys.executable, ACT_DIFF, "--files", a, b], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def main():
    binary = sys.argv[1]
    with tempfile.TemporaryDirectory() as d:
        models = {}
        for name, args in (("s1", ["--seed", "1"]), ("s2", ["--seed", "2"]), ("s1l2", ["--seed", "1", "--n-layer", "2"])):
            models[name] = f"{d}/{name}.gguf"
            rc, _, err = h.run(binary, "make-model", "--preset", "tiny-qwen3moe", "--type", "Q4_K_M", *args,
                               "-o", models[name], "-q", "-t", "2")
            h.check(rc == 0, f"make-model {name}", err)
        a1, a2 = dump(binary, models["s1"], f"{d}/a1"), dump(binary, models["s1"], f"{d}/a2")
        b = dump(binary, models["s2"], f"{d}/b")
        c = dump(binary, models["s1l2"], f"{d}/c")
        rows = act_diff.read_dump(a1)
        layers = {k[0] for k in rows}
        n_layer = max(layers) + 1
        h.check(layers == set(range(n_layer)) and n_layer >= 2, f"dump layers {sorted(layers)}")
        h.check(all((l, p, t) in rows for l in range(n_layer) for p in "af" for t in range(11)),
                "an 'a' and an 'f' row for every layer and position")
        rc, out = diff(a1, a2)
        h.check(rc == 0 and "0.000e+00" in out, "the same run twice compares equal", out)
        rc, out = diff(a1, b)
        h.check(rc == 1 and "first beyond" in out and "layer 0 attn" in out, "another seed parts at layer 0 attn", out)
        rc, out = diff(a1, c)
        h.check(rc in (0, 1) and f"{11 * 2 * (n_layer - 2)} (layer, point, position) records in only one" in out,
                "dumps of different depth compare their common layers", out)
        rc, out, err = h.run(binary, "logits", "-m", models["s1"], "-dev", "cpu", "--top", "1", *PROMPT,
                             env={"STRATA_DUMP_ACT": f"{d}/no/such/folder"})
        h.check(rc == 0 and "STRATA_DUMP_ACT" in err, "an unwritable dump folder is a warning", err)


main()
if h.failures:
    print(f"test_actdump: {h.failures} failure(s)", file=sys.stderr)
    sys.exit(1)
print("test_actdump: PASS")
