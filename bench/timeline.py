#!/usr/bin/env python3
"""Reads the CSV that bench/timeline/inject.c writes (CUPTI kernel records) and says where a decode step's time goes.

One CUDA graph replay = one decode step (its kernels share the cudaGraphLaunch's correlation id). Per step: the span
(first kernel start to last kernel end), the gap to the next step (the host's share: sampling, launch), and for the
main chain (every kernel but the lookahead prefetch's side branch: its predicting router, plan and copy kernels)
the time some main kernel ran, the time none ran, the time two ran at once, and how much of the side branch ran beside it or after
it (the tail: side work the step's end waited for). Per main-chain kernel: launches per step, mean duration, mean
gap before it (negative: it started before its predecessor ended, PDL), and its exclusive time (the part of its
interval after every earlier main kernel ended: its cost to the chain) with and without a prefetch copy running at
the same time (mean and median: a join that waited for the CPU moves the mean only). Not the raw duration: a PDL
launch starts early and waits for its predecessor, so after a long kernel its duration grows with no cost (the FFN
norm after a CPU-waiting join read 10.9 us "beside a copy" against 4.7, both 3.2-3.5 us of chain; 2026-12-01e).

usage: bench/timeline.py TIMELINE.csv [--steps N] [--min-kernels K] [--top T]
"""
import argparse
import bisect
import csv
import re
import shutil
import statistics
import subprocess
import sys
from collections import defaultdict

SIDE_NAMES = ("k_hy_pf_plan", "k_hy_pf_copy")


def short_names(mangled):
    """Function names without parameters: c++filt when present, else the first length-prefixed identifier."""
    out = {}
    names = sorted(set(mangled))
    if shutil.which("c++filt"):
        r = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True)
        if r.returncode == 0:
            for m, d in zip(names, r.stdout.splitlines()):
                d = re.sub(r"^void ", "", d)
                d = d.split("(")[0]
                out[m] = d
            return out
    for m in names:
        g = re.match(r"_Z(?:N\d+)?(\d+)", m)
        if g:
            n = int(g.group(1))
            start = g.end()
            base = m[start:start + n]
            ints = re.findall(r"Li(\d+)E", m[start + n:start + n + 40]) if m[start + n:start + n + 1] == "I" else []
            out[m] = base + ("<" + ",".join(ints) + ">" if ints else "")
        else:
            out[m] = m
    return out


def union_length(iv):
    """Total length covered by intervals [(a, b)]."""
    total, cur_a, cur_b = 0, None, None
    for a, b in sorted(iv):
        if cur_b is None or a > cur_b:
            if cur_b is not None:
                total += cur_b - cur_a
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    if cur_b is not None:
        total += cur_b - cur_a
    return total


def overlaps(a, b, iv_sorted, starts):
    """Whether [a, b) overlaps any interval of iv_sorted (sorted by start, starts = their starts)."""
    i = bisect.bisect_left(starts, b)
    for j in range(i - 1, max(-1, i - 64), -1):
        if iv_sorted[j][1] > a:
            return True
    return False


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--steps", type=int, default=20, help="the last N graph replays (decode steps)")
    ap.add_argument("--min-kernels", type=int, default=50, help="replays with fewer kernels are not decode steps")
    ap.add_argument("--top", type=int, default=25, help="main-chain kernels listed")
    a = ap.parse_args()

    rows = []
    with open(a.csv, newline="") as f:
        for r in csv.DictReader(f):
            if r["kind"] != "K":
                continue
            rows.append((r["name"], int(r["start_ns"]), int(r["end_ns"]), int(r["stream"]), int(r["correlation"]),
                         int(r["graph_id"]), int(r["graph_node"]), int(r["grid"])))
    if not rows:
        sys.exit(f"{a.csv}: no kernel records (was the program run with CUDA_INJECTION64_PATH?)")
    names = short_names([r[0] for r in rows])
    groups = defaultdict(list)
    for r in rows:
        if r[5]:  # graph kernels only
            groups[r[4]].append(r)
    steps = [g for g in groups.values() if len(g) >= a.min_kernels]
    steps.sort(key=lambda g: min(k[1] for k in g))
    if not steps:
        sys.exit(f"{a.csv}: no graph replay with {a.min_kernels} kernels or more")
    # The gap from each step's end to the next one's start (host work between steps), before trimming.
    host_gap = {}
    for s0, s1 in zip(steps, steps[1:]):
        host_gap[id(s0)] = min(k[1] for k in s1) - max(k[2] for k in s0)
    steps = steps[-a.steps:]

    span, busy, gpos, gneg, side_busy, side_beside, tail, hgap, n_kern, streams = ([] for _ in range(10))
    per = defaultdict(lambda: {"n": 0, "dur": [], "gap": [], "with_copy": [], "alone": [], "excl": 0, "idle": 0})
    for g in steps:
        by_node = sorted(g, key=lambda k: k[6])
        side_idx = set()
        for i, k in enumerate(by_node):
            n = names[k[0]]
            if n.startswith(SIDE_NAMES):
                side_idx.add(i)
            elif n.startswith("k_router") and i + 1 < len(by_node) and names[by_node[i + 1][0]].startswith(
                    "k_hy_pf_plan"):
                side_idx.add(i)  # the predicting router: captured right before its plan
        side = [by_node[i] for i in side_idx]
        main = sorted((by_node[i] for i in range(len(by_node)) if i not in side_idx), key=lambda k: k[1])
        copies = sorted((k[1], k[2]) for k in side if names[k[0]].startswith("k_hy_pf_copy"))
        copy_starts = [c[0] for c in copies]
        t0 = min(k[1] for k in g)
        t1 = max(k[2] for k in g)
        span.append(t1 - t0)
        m_iv = [(k[1], k[2]) for k in main]
        busy.append(union_length(m_iv))
        # gap before each main kernel: its start against the latest end of every main kernel before it (negative:
        # it started while an earlier one ran, PDL); idle = main span - busy; overlap = sum of durations - busy
        # exclusive: the part of a kernel's interval after every earlier main kernel ended (its share of the span:
        # the exclusive times plus the idle gaps add up to the main chain's span); idle before: the gap it ended
        gaps, latest, excl = [], main[0][2], [main[0][2] - main[0][1]]
        for k in main[1:]:
            gaps.append(k[1] - latest)
            excl.append(max(0, k[2] - max(k[1], latest)))
            latest = max(latest, k[2])
        gpos.append(max(k[2] for k in main) - main[0][1] - busy[-1])
        gneg.append(sum(k[2] - k[1] for k in main) - busy[-1])
        s_iv = [(k[1], k[2]) for k in side]
        side_busy.append(union_length(s_iv))
        main_end = max(k[2] for k in main)
        side_beside.append(union_length([(x, min(y, main_end)) for x, y in s_iv if x < main_end]))
        tail.append(t1 - main_end)
        if id(g) in host_gap:
            hgap.append(host_gap[id(g)])
        n_kern.append((len(main), len(side)))
        streams.append(len({k[3] for k in g}))
        for i, k in enumerate(main):
            p = per[names[k[0]]]
            p["n"] += 1
            d = k[2] - k[1]
            p["dur"].append(d)
            p["excl"] += excl[i]
            if i:
                p["gap"].append(gaps[i - 1])
                p["idle"] += max(0, gaps[i - 1])
            (p["with_copy"] if copies and overlaps(k[1], k[2], copies, copy_starts) else p["alone"]).append(excl[i])

    us = lambda v: statistics.mean(v) / 1e3 if v else float("nan")
    ns = len(steps)
    print(f"# {a.csv}: the last {ns} graph replays of {len(groups)} (decode steps: >= {a.min_kernels} kernels)")
    print(f"kernels per step: main {statistics.mean(x for x, _ in n_kern):.0f}, side {statistics.mean(y for _, y in n_kern):.0f}; "
          f"streams seen per step: {sorted(set(streams))}")
    print()
    print("| per step | us |")
    print("| --- | ---: |")
    print(f"| span (first kernel start to last end) | {us(span):.1f} |")
    print(f"| host gap to the next step | {us(hgap):.1f} |")
    if hgap:  # a mean made of one long stall (a synchronous read-back) and short gaps reads differently from even ones
        hs = sorted(hgap)
        med, p90, top = hs[len(hs) // 2], hs[int(0.9 * (len(hs) - 1))], hs[-1]
        print(f"| host gap: median / p90 / max | {med / 1e3:.1f} / {p90 / 1e3:.1f} / {top / 1e3:.1f} |")
    print(f"| main chain: some kernel running | {us(busy):.1f} |")
    print(f"| main chain: idle (no main kernel running) | {us(gpos):.1f} |")
    print(f"| main chain: two or more at once (PDL overlap) | {us(gneg):.1f} |")
    print(f"| side branch: some kernel running | {us(side_busy):.1f} |")
    print(f"| side branch: of that, before the main chain's end | {us(side_beside):.1f} |")
    print(f"| tail: side work after the main chain's last kernel | {us(tail):.1f} |")
    if span and hgap:
        print(f"| step period (span + host gap) -> tok/s | {us(span) + us(hgap):.1f} -> "
              f"{1e6 / (us(span) + us(hgap)):.1f} |")
    print()
    print(f"| main-chain kernel | per step | mean us | total us per step | gap before, us | exclusive with a copy "
          f"running: mean / median us (per step) | exclusive alone: mean / median | exclusive us per step | "
          f"idle before, us per step |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    order = sorted(per.items(), key=lambda kv: -sum(kv[1]["dur"]))
    # medians too: a few long instances (a join that waited for the CPU) move a mean, not a median
    med = lambda v: statistics.median(v) / 1e3
    for n, p in order[:a.top]:
        wc = f"{us(p['with_copy']):.2f} / {med(p['with_copy']):.2f} ({len(p['with_copy']) / ns:.1f})" if p["with_copy"] else "-"
        al = f"{us(p['alone']):.2f} / {med(p['alone']):.2f} ({len(p['alone']) / ns:.1f})" if p["alone"] else "-"
        print(f"| {n} | {p['n'] / ns:.1f} | {us(p['dur']):.2f} | {sum(p['dur']) / ns / 1e3:.1f} | "
              f"{us(p['gap']):.2f} | {wc} | {al} | {p['excl'] / ns / 1e3:.1f} | {p['idle'] / ns / 1e3:.1f} |")
    side_names = defaultdict(list)
    for g in steps:
        for k in g:
            n = names[k[0]]
            if n.startswith(SIDE_NAMES):
                side_names[n].append(k[2] - k[1])
    if side_names:
        print()
        print("| side kernel | per step | mean us | p90 us |")
        print("| --- | ---: | ---: | ---: |")
        for n, v in sorted(side_names.items()):
            v = sorted(v)
            print(f"| {n} | {len(v) / ns:.1f} | {statistics.mean(v) / 1e3:.2f} | {v[int(0.9 * (len(v) - 1))] / 1e3:.2f} |")


if __name__ == "__main__":
    main()
