#!/usr/bin/env python3
"""Side-by-side table of bench/peer.sh results: llama-bench JSON vs `strata bench -o json`, with ratios and VRAM."""
import json
import os
import subprocess
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return []


def vram(out, name):
    try:
        return int(open(os.path.join(out, name + ".vram")).read().strip() or 0)
    except (OSError, ValueError):
        return 0


def main():
    out, model = sys.argv[1], sys.argv[2]
    llama = {}
    for r in load(os.path.join(out, "llama.json")) + load(os.path.join(out, "llama-d.json")):
        test = (f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}") + (f" @ d{r['n_depth']}" if r.get("n_depth") else "")
        llama[test] = (r["avg_ts"], r["stddev_ts"])
    strata = {}
    for r in load(os.path.join(out, "strata.json")) + load(os.path.join(out, "strata-d.json")):
        strata[r["test"]] = (r["avg_ts"], r["stddev_ts"], r.get("gbps", 0))
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    src = subprocess.run([sys.executable, os.path.join(here, "scripts", "src_hash.py"), here], capture_output=True,
                         text=True).stdout.strip()
    print(f"model: {os.path.basename(model)} ({os.path.getsize(model) / 2**30:.2f} GiB); GPU: {gpu}; strata source "
          f"{src} (scripts/src_hash.py --rev REV matches a commit; git HEAD here: {commit})")
    print()
    print("| test | llama.cpp t/s | strata t/s | ratio | strata GB/s |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for test in sorted(set(llama) | set(strata), key=lambda t: (t.startswith("tg"), t)):
        l, s = llama.get(test), strata.get(test)
        ls = f"{l[0]:.1f} ± {l[1]:.1f}" if l else "-"
        ss = f"{s[0]:.1f} ± {s[1]:.1f}" if s else "-"
        ratio = f"{s[0] / l[0]:.2f}x" if l and s and l[0] else "-"
        gb = f"{s[2]:.0f}" if s and s[2] else "-"
        print(f"| {test} | {ls} | {ss} | {ratio} | {gb} |")
    print()
    for a, b, what in (("llama", "strata", "pp512/tg128"), ("llama-d", "strata-d", "depth run")):
        va, vb = vram(out, a), vram(out, b)
        if va or vb:
            print(f"peak VRAM ({what}): llama.cpp {va} MiB, strata {vb} MiB" + (f" ({vb / va:.2f}x)" if va else ""))


if __name__ == "__main__":
    main()
