#!/usr/bin/env python3
"""STRATA_ROUTE_PREDICT (src/engine/route_predict.c) on tiny make-model files: the measurement does not change the
generated tokens, prints its table only when asked, and its recalls are fractions that grow with the set size.

usage: test_route_predict.py STRATA_BINARY
"""
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import cli_harness  # noqa: E402
from cli_harness import check  # noqa: E402

STRATA = sys.argv[1]


def run(*args, predict=None):
    return cli_harness.run(STRATA, *args, unset=("STRATA_ROUTE_PREDICT",),
                           env={"STRATA_ROUTE_PREDICT": predict} if predict is not None else None)


with tempfile.TemporaryDirectory() as d:
    moe, dense = cli_harness.make_tiny_models(STRATA, d, 0.5)
    gen = ["run", "-dev", "cpu", "-t", "2", "-p", "the router of the next layer", "-n", "24", "--temp", "0",
           "--ignore-eos", "--no-display-prompt"]

    rc0, out0, err0 = run(*gen, "-m", moe)
    rc1, out1, err1 = run(*gen, "-m", moe, predict="2")
    check(rc0 == 0 and rc1 == 0, "runs", err0 + err1)
    check(out0 == out1, "the same tokens with and without STRATA_ROUTE_PREDICT", out0 + "\n---\n" + out1)
    check("route prediction" not in err0, "no table when unset", err0)
    check("route prediction" in err1 and "top-4" in err1, "table when set", err1)

    # tiny-qwen3moe: 4 layers, top-4 of 16 experts -> prediction sets of 4, 8, 8; 23 scored steps per layer 1..3
    # (two layers ahead: layers 2..3)
    rows = {}
    for line in err1.splitlines():
        m = re.match(r"\s+(\(.\).*?|hottest.*?)\s+([01]\.\d{3})\s+([01]\.\d{3})\s+([01]\.\d{3})(\s+\(layers .*\))?$",
                     line)
        if m:
            rows[m.group(1)] = [float(v) for v in m.groups()[1:4]]
    check(len(rows) == 5, "five predictor rows (three inputs, the hottest, two layers ahead)", err1)
    for name, r in rows.items():
        check(all(0 <= v <= 1 for v in r) and r[0] <= r[1] <= r[2], f"recalls of {name}", err1)
    layers = re.findall(r"^\s+([123])\s+23\s", err1, re.M)
    check(layers == ["1", "2", "3"], "per-layer rows for layers 1..3 with 23 steps", err1)

    rc, out, err = run(*gen, "-m", dense, predict="1")
    check(rc == 0 and "route prediction" not in err, "dense model: nothing measured", err)

if cli_harness.failures:
    print(f"{cli_harness.failures} failure(s)", file=sys.stderr)
    sys.exit(1)
print("ok")
