#!/usr/bin/env python3
"""Where does a CPU / CUDA gap of tests/gpu/e2e.py come from: the step size, a token, or a position?

For one synthetic model (made as e2e.py makes it), takes e2e's prompts (prompt + the CPU's greedy continuation, the
sequence e2e teacher-forces) and runs act_diff (CPU vs CUDA, per-layer activation dumps) on the first N tokens of
each for several N: on the GPU a prompt of at most 8 tokens is one step of N, a longer one steps of 8 (the
matrix-vector path) or, from 64 tokens, GEMM chunks. Prints per (prompt, N): the first point beyond the threshold
and the per-position RMS relative difference of layer 0's attention output. A gap present at N = 5 for the same
positions is the tokens'; one that appears only at N = 8 is the step's. Optional environment variants
(--env VAR=VAL, repeatable) run the CUDA side again with them.

usage: parity_probe.py --strata BIN --work DIR --model NAME [--vocab-from GGUF] [--cuts 5,8,9,16]
                       [--prompts 0,1] [--long] [--env STRATA_GEMM_MIN=100000 ...]
"""
import argparse
import contextlib
import io
import math
import os
import subprocess
import sys
import tempfile
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import act_diff  # noqa: E402
import e2e  # noqa: E402


def layer0_positions(ref, got):
    """{position: rms rel} of layer 0's attention output."""
    out = {}
    for k in ref:
        if k[0] == 0 and k[1] == "a" and k in got:
            x, y = ref[k], got[k]
            sr = sum(p * p for p in x)
            out[k[2]] = math.sqrt(sum((p - q) ** 2 for p, q in zip(x, y)) / sr) if sr else 0.0
    return out


def probe(strata, model, tokens, env_cuda, threshold):
    a = types.SimpleNamespace(tokens=",".join(map(str, tokens)), prompt=None)
    old = dict(os.environ)
    try:
        with tempfile.TemporaryDirectory() as dc, tempfile.TemporaryDirectory() as dg:
            ref = act_diff.read_dump(act_diff.dump_run(strata, model, "cpu", a, dc))
            os.environ.update(env_cuda)
            got = act_diff.read_dump(act_diff.dump_run(strata, model, "cuda", a, dg))
    finally:
        os.environ.clear()
        os.environ.update(old)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        act_diff.compare(ref, got, threshold)
    first = [ln for ln in buf.getvalue().splitlines() if ln.startswith(("first beyond", "no point"))]
    return first[0] if first else "?", layer0_positions(ref, got)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--strata", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--model", required=True, help="a name from e2e.SYNTH, e.g. tiny-qwen3moe-IQ3_S")
    ap.add_argument("--vocab-from")
    ap.add_argument("--cuts", default="5,8,9,16")
    ap.add_argument("--prompts", default="0,1,2,3")
    ap.add_argument("--long", action="store_true", help="also e2e's long prompt (GEMM path), whole")
    ap.add_argument("--env", action="append", default=[], help="VAR=VAL for a second CUDA run (repeatable)")
    ap.add_argument("--threshold", type=float, default=1e-3)
    args = ap.parse_args()
    spec = [s for s in e2e.SYNTH if s[0] == args.model]
    if not spec:
        sys.exit(f"parity_probe: no model {args.model} in e2e.SYNTH")
    name, arch, preset, mix, _ = spec[0]
    os.makedirs(args.work, exist_ok=True)
    path = os.path.join(args.work, name + ".gguf")
    if not os.path.exists(path):
        mm = [args.strata, "make-model", "--arch", arch, "--preset", preset, "--type", mix, "--seed", "7", "-o", path]
        if args.vocab_from:
            mm += ["--vocab-from", args.vocab_from]
        subprocess.run(mm, check=True, capture_output=True)
    variants = [("default", {})]
    for e in args.env:
        k, _, v = e.partition("=")
        variants.append((e, {k: v}))
    seqs = []
    for i in map(int, args.prompts.split(",")):
        c = e2e.logits(args.strata, path, e2e.PROMPTS[i], "cpu")
        seqs.append((f"prompt {i}", c["tokens"] + c["greedy"], [int(x) for x in args.cuts.split(",")]))
    if args.long:
        c = e2e.logits(args.strata, path, e2e.LONG_PROMPT, "cpu")
        seqs.append(("long prompt", c["tokens"], [len(c["tokens"])]))
    for label, seq, cuts in seqs:
        print(f"== {label}: {len(seq)} tokens: {seq[:24]}{' ...' if len(seq) > 24 else ''}")
        for n in cuts:
            if n > len(seq):
                continue
            for vname, env in variants:
                first, per = probe(args.strata, path, seq[:n], env, args.threshold)
                worst = sorted(((r, p) for p, r in per.items()), reverse=True)[:4]
                print(f"  N {n:4d} {vname:28s} {first}")
                print(f"         layer 0 attn per position: " +
                      " ".join(f"{p}:{per[p]:.1e}" for p in sorted(per)[:10]) +
                      f"   worst {', '.join(f'{p}:{r:.1e}' for r, p in worst)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
