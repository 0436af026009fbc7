#!/usr/bin/env python3
"""Where does one backend leave the other? Per-layer activation diff of two STRATA_DUMP_ACT dumps.

Runs `strata logits` on two devices (default cpu and cuda) with STRATA_DUMP_ACT set (engine/actdump.h: the residual
stream after each layer's attention 'a' and FFN 'f', every evaluated chunk), or takes two dump files (--files), and
prints per (layer, point) over all positions: the largest |a - b| relative to the largest |a| of that record, and the
RMS relative difference; then the first point whose RMS relative difference exceeds --threshold (the first place
the backends part beyond rounding noise) and the positions where it is worst. End-to-end top-1 checks (e2e.py) only
see the final logits; this names the layer and sublayer. Standard library only (runs on the GPU machines).

usage: act_diff.py --strata BIN -m MODEL (-p PROMPT | --tokens IDS) [--devices cpu,cuda] [--threshold 1e-3]
       act_diff.py --files A.act B.act [--threshold 1e-3]
Exit status: 0 when no point exceeds the threshold, 1 when one does, 2 on errors.
"""
import argparse
import array
import math
import os
import struct
import subprocess
import sys
import tempfile

MAGIC = 0x41435444


def read_dump(path):
    """{(layer, point, position): array of n_embd floats} from a dump file."""
    rows = {}
    with open(path, "rb") as f:
        while True:
            h = f.read(24)
            if not h:
                break
            if len(h) != 24:
                raise ValueError(f"{path}: truncated record header")
            magic, layer, point, pos0, n_tok, n_embd = struct.unpack("<6i", h)
            if magic != MAGIC or n_tok <= 0 or n_embd <= 0:
                raise ValueError(f"{path}: bad record header (magic {magic:#x}, {n_tok} x {n_embd})")
            data = array.array("f")
            data.frombytes(f.read(4 * n_tok * n_embd))
            if len(data) != n_tok * n_embd:
                raise ValueError(f"{path}: truncated record (layer {layer})")
            for t in range(n_tok):
                # a later record for the same position (a re-evaluation) replaces the earlier one
                rows[(layer, chr(point), pos0 + t)] = data[t * n_embd:(t + 1) * n_embd]
    return rows


def compare(a, b, threshold):
    keys = sorted(set(a) & set(b), key=lambda k: (k[0], k[1] != "a", k[2]))
    if not keys:
        print("no (layer, point, position) in common: nothing to compare", file=sys.stderr)
        return 2
    missing = len(set(a) ^ set(b))
    stats = {}  # (layer, point) -> [max_rel, sum_sq_diff, sum_sq_ref, worst positions]
    for k in keys:
        x, y = a[k], b[k]
        if len(x) != len(y):
            print(f"layer {k[0]} {k[1]} position {k[2]}: {len(x)} vs {len(y)} features", file=sys.stderr)
            return 2
        ref = max(abs(v) for v in x) or 1.0
        dmax = max(abs(p - q) for p, q in zip(x, y))
        sd = sum((p - q) * (p - q) for p, q in zip(x, y))
        sr = sum(p * p for p in x)
        s = stats.setdefault((k[0], k[1]), [0.0, 0.0, 0.0, []])
        s[0] = max(s[0], dmax / ref)
        s[1] += sd
        s[2] += sr
        s[3].append((math.sqrt(sd / sr) if sr else 0.0, k[2]))
    print(f"{'layer':>5} {'point':>5} {'max |d|/max|a|':>15} {'rms rel':>10}   worst positions (rms rel)")
    first = None
    for (layer, point), (mrel, sd, sr, per) in sorted(stats.items(), key=lambda kv: (kv[0][0], kv[0][1] != "a")):
        rms = math.sqrt(sd / sr) if sr else 0.0
        worst = ", ".join(f"{p}:{r:.1e}" for r, p in sorted(per, reverse=True)[:3])
        name = "attn" if point == "a" else "ffn"
        print(f"{layer:5d} {name:>5} {mrel:15.3e} {rms:10.3e}   {worst}")
        if first is None and rms > threshold:
            first = (layer, name, rms)
    if missing:
        print(f"({missing} (layer, point, position) records in only one of the dumps)")
    if first:
        print(f"first beyond {threshold:g}: layer {first[0]} {first[1]} (rms rel {first[2]:.3e})")
        return 1
    print(f"no point beyond {threshold:g} (rms relative difference)")
    return 0


def dump_run(strata, model, dev, args, out_dir):
    cmd = [strata, "logits", "-m", model, "--top", "1", "-dev", dev]
    cmd += ["--tokens", args.tokens] if args.tokens else ["-p", args.prompt]
    env = dict(os.environ, STRATA_DUMP_ACT=out_dir, STRATA_LOG="warn")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"{dev}: {' '.join(cmd)}: {r.stderr.strip()[-400:]}")
    path = os.path.join(out_dir, ("cuda" if dev.startswith("cuda") else "cpu") + ".act")
    if not os.path.exists(path):
        raise RuntimeError(f"{dev}: no dump at {path}")
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--strata")
    ap.add_argument("-m", "--model")
    ap.add_argument("-p", "--prompt")
    ap.add_argument("--tokens", help="comma-separated token ids (teacher-forced, as e2e.py)")
    ap.add_argument("--devices", default="cpu,cuda", help="two devices, the reference first")
    ap.add_argument("--files", nargs=2, metavar="DUMP")
    ap.add_argument("--threshold", type=float, default=1e-3)
    args = ap.parse_args()
    try:
        if args.files:
            a, b = read_dump(args.files[0]), read_dump(args.files[1])
        else:
            if not (args.strata and args.model and (args.prompt or args.tokens)):
                ap.error("--strata, -m and -p or --tokens (or --files)")
            devs = args.devices.split(",")
            if len(devs) != 2:
                ap.error("--devices takes two devices")
            with tempfile.TemporaryDirectory() as da, tempfile.TemporaryDirectory() as db:
                a = read_dump(dump_run(args.strata, args.model, devs[0], args, da))
                b = read_dump(dump_run(args.strata, args.model, devs[1], args, db))
    except (OSError, ValueError, RuntimeError) as e:
        print(f"act_diff.py: {e}", file=sys.stderr)
        return 2
    return compare(a, b, args.threshold)


if __name__ == "__main__":
    sys.exit(main())
