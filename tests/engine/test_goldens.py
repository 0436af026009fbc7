#!/usr/bin/env python3
"""Checks Strata's CPU forward pass against llama.cpp goldens (made by make_goldens.py).

For every golden model: the prompt's token ids must be identical; top-1 must agree at every position for the demo
model and at >= 99% of positions for synthetic models; greedy continuations must be identical where the golden has
one. Prints a table with the largest logit difference per model (over ids in both top-5 lists).

ISA: the goldens come from llama.cpp's AVX-512 CPU build, and Strata's AVX-512 kernels reproduce that arithmetic
(its element-wise and attention ops give the same bits on every ISA; its matmul kernels do so only on AVX-512). So
the strata runs are pinned to STRATA_CPU_ISA=avx512 when this CPU has it (strict mode, above). Elsewhere, or with
--isa avx2/portable, the demo is held to the synthetic bound (>= 99% top-1) and greedy differences are reported but
do not fail: last-bit differences legitimately flip near-ties and then the continuation.

usage: test_goldens.py --strata build/bin/strata --demo models/SmolLM2-135M-Instruct.Q4_1.gguf [--only NAMES]
                       [--isa auto|avx512|avx2|portable]
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


ENV = dict(os.environ, STRATA_LOG="warn")


def cpu_has_avx512():
    """The AVX-512 subset Strata's avx512 kernels need (F, BW, VL, VNNI), from /proc/cpuinfo (Linux x86)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return False
    return all(x in flags for x in ("avx512f", "avx512bw", "avx512vl", "avx512_vnni"))


def strata_logits(strata, model, prompt, n_greedy, last=False):
    cmd = [strata, "logits", "-m", model, "-p", prompt, "--top", "5", "-ctk", "f32"] + (["--last"] if last else [])
    if n_greedy:
        cmd += ["--greedy", str(n_greedy)]
    res = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} failed ({res.returncode}): {res.stderr.strip()}")
    return json.loads(res.stdout)


# Measured gaps to llama.cpp that are not fixed yet (issue "CPU inference"): the model is still checked for identical
# tokens and >= 97% top-1 agreement, and the gap is printed; a model listed here that passes fully is reported, so
# the entry can go.
KNOWN_GAPS = {}


def check_model(strata, model_path, golden, strict, greedy_strict):
    positions = agree = 0
    max_diff = 0.0
    problems = []
    notes = []
    for i, case in enumerate(golden["cases"]):
        out = strata_logits(strata, model_path, case["prompt"], len(case["greedy"]))
        if out["tokens"] != case["tokens"]:
            problems.append(f"case {i}: token ids differ: strata {out['tokens'][:20]}... vs llama.cpp {case['tokens'][:20]}...")
            continue
        for p, (ours, ref) in enumerate(zip(out["positions"], case["top"])):
            positions += 1
            ours_top = ours["top"]
            if ours_top[0][0] == ref[0][0]:
                agree += 1
            elif strict:
                problems.append(f"case {i} position {p}: top-1 {ours_top[0]} vs llama.cpp {ref[0]}")
            ref_map = {t: v for t, v in ref}
            for t, v in ours_top:
                if t in ref_map:
                    max_diff = max(max_diff, abs(v - ref_map[t]))
        if case["greedy"]:
            g = out.get("greedy", [])[: len(case["greedy"])]
            if g != case["greedy"]:
                k = next((j for j, (a, b) in enumerate(zip(g, case["greedy"])) if a != b), len(g))
                msg = f"case {i}: greedy continuation differs at token {k}: {g[k:k+5]} vs {case['greedy'][k:k+5]}"
                (problems if greedy_strict else notes).append(msg)
        if i == 0:  # --last: the same last position and continuation as the all-position run
            last = strata_logits(strata, model_path, case["prompt"], len(case["greedy"]), last=True)
            if last["positions"] != out["positions"][-1:] or last.get("greedy") != out.get("greedy"):
                problems.append(f"case {i}: logits --last differs from the last position of the full run")
    return positions, agree, max_diff, problems, notes


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--strata", required=True)
    ap.add_argument("--demo", required=True)
    ap.add_argument("--goldens", default=os.path.join(HERE, "goldens"))
    ap.add_argument("--only", help="comma-separated golden names")
    ap.add_argument("--isa", default="auto", choices=["auto", "avx512", "avx2", "portable"],
                    help="STRATA_CPU_ISA for the strata runs (auto: avx512 when the CPU has it, else Strata's best)")
    args = ap.parse_args()
    only = set(args.only.split(",")) if args.only else None
    isa = args.isa
    if isa == "auto":
        isa = "avx512" if cpu_has_avx512() else None
    if isa:
        ENV["STRATA_CPU_ISA"] = isa
    else:
        ENV.pop("STRATA_CPU_ISA", None)
    exact = isa == "avx512"  # the ISA whose arithmetic reproduces the goldens bit for bit
    print(f"ISA: {isa or 'best available (no AVX-512)'}; {'strict' if exact else 'relaxed'} mode")
    failed = 0
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in sorted(glob.glob(os.path.join(args.goldens, "*.json"))):
            golden = json.load(open(path))
            name = golden["model"]
            if only and name not in only:
                continue
            if name == "demo":
                model = args.demo
            else:
                model = os.path.join(tmp, name + ".gguf")
                mm = [args.demo if a == "DEMO" else a for a in golden["make_model"]]
                subprocess.run([args.strata, "make-model", *mm, "-o", model], check=True, capture_output=True, env=ENV)
            strict = name == "demo" and exact
            positions, agree, max_diff, problems, notes = check_model(args.strata, model, golden, strict, exact)
            for n in notes:
                print(f"{name}: note (not a failure off AVX-512): {n}", file=sys.stderr)
            rate = agree / positions if positions else 0.0
            ok = not problems and positions > 0 and (rate == 1.0 if strict else rate >= 0.99)
            result = "ok" if ok else "FAIL"
            if name in KNOWN_GAPS:
                if ok:
                    print(f"{name}: passes fully now; remove it from KNOWN_GAPS", file=sys.stderr)
                else:
                    tokens_ok = not any("token ids differ" in p for p in problems)
                    ok = tokens_ok and rate >= 0.97
                    result = "known gap" if ok else "FAIL"
                    for p in problems[:3]:
                        print(f"{name}: known gap ({KNOWN_GAPS[name]}): {p}", file=sys.stderr)
                    problems = [] if ok else problems
            rows.append((name, positions, rate, max_diff, result))
            if not ok:
                failed += 1
                for p in problems[:10]:
                    print(f"{name}: {p}", file=sys.stderr)
                if not problems:
                    print(f"{name}: top-1 agreement {rate:.4f} below the bound", file=sys.stderr)
            if name != "demo" and model != args.demo:
                os.unlink(model)
    print(f"{'model':24} {'positions':>9} {'top-1 agree':>11} {'max |dlogit|':>12}  result")
    for name, positions, rate, max_diff, res in rows:
        print(f"{name:24} {positions:9d} {rate:11.4f} {max_diff:12.5f}  {res}")
    print(f"{len(rows) - failed} passed, {failed} failed")
    return 1 if failed or not rows else 0


if __name__ == "__main__":
    sys.exit(main())
