#!/usr/bin/env python3
"""STRATA_ROUTE_PREDICT (src/engine/route_predict.c) on tiny make-model files: the measurement does not change the
generated tokens, prints its table only when asked, and its recalls are fractions that grow with the set size.

usage: test_route_predict.py STRATA_BINARY
"""
import os
import re
import subprocess
import sys
import tempfile

STRATA = sys.argv[1]
failures = 0


def run(*args, predict=None):
    e = dict(os.environ)
    e.pop("STRATA_ROUTE_PREDICT", None)
    if predict is not None:
        e["STRATA_ROUTE_PREDICT"] = predict
    p = subprocess.run([STRATA, *args], capture_output=True, text=True, env=e, timeout=120)
    return p.returncode, p.stdout, p.stderr


def check(cond, what, out=""):
    global failures
    if not cond:
        failures += 1
        print(f"FAIL: {what}\n{out}", file=sys.stderr)


with tempfile.TemporaryDirectory() as d:
    moe, dense = f"{d}/moe.gguf", f"{d}/dense.gguf"
    for cmd in (["make-model", "--preset", "tiny-qwen3moe", "--type", "Q4_K_M", "--router-skew", "0.5", "-o", moe],
                ["make-model", "--preset", "tiny-llama", "--type", "Q4_0", "-o", dense]):
        rc, out, err = run(*cmd, "-q", "-t", "2")
        check(rc == 0, f"{cmd}", err)
    gen = ["run", "-dev", "cpu", "-t", "2", "-p", "the router of the next layer", "-n", "24", "--temp", "0",
           "--ignore-eos", "--no-display-prompt"]

    rc0, out0, err0 = run(*gen, "-m", moe)
    rc1, out1, err1 = run(*gen, "-m", moe, predict="2")
    check(rc0 == 0 and rc1 == 0, "runs", err0 + err1)
    check(out0 == out1, "the same tokens with and without STRATA_ROUTE_PREDICT", out0 + "\n---\n" + out1)
    check("route prediction" not in err0, "no table when unset", err0)
    check("route prediction" in err1 and "top-4" in err1, "table when set", err1)

    # tiny-qwen3moe: 4 layers, top-4 of 16 experts -> prediction sets of 4, 8, 8; 23 scored steps per layer 1..3
    rows = {}
    for line in err1.splitlines():
        m = re.match(r"\s+(\(.\).*?|hottest.*?)\s+([01]\.\d{3})\s+([01]\.\d{3})\s+([01]\.\d{3})$", line)
        if m:
            rows[m.group(1)] = [float(v) for v in m.groups()[1:]]
    check(len(rows) == 4, "four predictor rows", err1)
    for name, r in rows.items():
        check(all(0 <= v <= 1 for v in r) and r[0] <= r[1] <= r[2], f"recalls of {name}", err1)
    layers = re.findall(r"^\s+([123])\s+23\s", err1, re.M)
    check(layers == ["1", "2", "3"], "per-layer rows for layers 1..3 with 23 steps", err1)

    rc, out, err = run(*gen, "-m", dense, predict="1")
    check(rc == 0 and "route prediction" not in err, "dense model: nothing measured", err)

if failures:
    print(f"{failures} failure(s)", file=sys.stderr)
    sys.exit(1)
print("ok")
