#!/usr/bin/env python3
"""Checks Strata's CPU forward pass against llama.cpp goldens (made by make_goldens.py).

For every golden model: the prompt's token ids must be identical; top-1 must agree at every position for the demo
model and at >= 99% of positions for synthetic models; greedy continuations must be identical where the golden has
one. Prints a table with the largest logit difference per model (over ids in both top-5 lists).

usage: test_goldens.py --strata build/bin/strata --demo models/SmolLM2-135M-Instruct.Q4_1.gguf [--only NAMES]
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def strata_logits(strata, model, prompt, n_greedy):
    cmd = [strata, "logits", "-m", model, "-p", prompt, "--top", "5", "-ctk", "f32"]
    if n_greedy:
        cmd += ["--greedy", str(n_greedy)]
    res = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, STRATA_LOG="warn"))
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} failed ({res.returncode}): {res.stderr.strip()}")
    return json.loads(res.stdout)


def check_model(strata, model_path, golden, strict):
    positions = agree = 0
    max_diff = 0.0
    problems = []
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
                problems.append(f"case {i}: greedy continuation differs at token {k}: {g[k:k+5]} vs {case['greedy'][k:k+5]}")
    return positions, agree, max_diff, problems


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--strata", required=True)
    ap.add_argument("--demo", required=True)
    ap.add_argument("--goldens", default=os.path.join(HERE, "goldens"))
    ap.add_argument("--only", help="comma-separated golden names")
    args = ap.parse_args()
    only = set(args.only.split(",")) if args.only else None
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
                subprocess.run([args.strata, "make-model", *mm, "-o", model], check=True, capture_output=True)
            strict = name == "demo"
            positions, agree, max_diff, problems = check_model(args.strata, model, golden, strict)
            rate = agree / positions if positions else 0.0
            ok = not problems and positions > 0 and (rate == 1.0 if strict else rate >= 0.99)
            rows.append((name, positions, rate, max_diff, "ok" if ok else "FAIL"))
            if not ok:
                failed += 1
                for p in problems[:10]:
                    print(f"{name}: {p}", file=sys.stderr)
                if not problems:
                    print(f"{name}: top-1 agreement {rate:.4f} below the bound", file=sys.stderr)
            if not strict and model != args.demo:
                os.unlink(model)
    print(f"{'model':24} {'positions':>9} {'top-1 agree':>11} {'max |dlogit|':>12}  result")
    for name, positions, rate, max_diff, res in rows:
        print(f"{name:24} {positions:9d} {rate:11.4f} {max_diff:12.5f}  {res}")
    print(f"{len(rows) - failed} passed, {failed} failed")
    return 1 if failed or not rows else 0


if __name__ == "__main__":
    sys.exit(main())
