#!/usr/bin/env python3
"""bench/timeline.py on a synthetic CUPTI timeline whose answers are known: three decode steps (graph replays) of four
main-chain kernels and a prefetch side branch (predicting router, plan, copy) that ends after the main chain, 5 us
of host work between steps. Checks the span, busy time, gaps, PDL overlap, side time, tail, host gap, the side
branch's detection and the with-a-copy split (of exclusive times), with c++filt and with the built-in name reader (PATH without it)."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(HERE, "..", "..", "bench", "timeline.py")

# (mangled name, start us, end us, graph node) within a step; node order = capture order.
STEP = [
    ("_Z7kmain_av", 0, 10, 1),
    ("_Z7kmain_bv", 12, 20, 2),
    ("_Z8k_routerIfEvPKT_", 11, 15, 3),           # the predicting router (right before the plan)
    ("_Z12k_hy_pf_plan8st_hy_pfi", 15, 18, 4),
    ("_Z12k_hy_pf_copy8st_hy_pfi", 18, 40, 5),
    ("_Z8k_routerIfEvPKT_", 20.5, 21, 6),        # the main router (not before a plan): main chain
    ("_Z7kmain_cv", 21, 30, 7),
    ("_Z7kmain_dv", 29, 35, 8),
]
PERIOD = 45  # 40 us of step + 5 us of host gap


def write_csv(path):
    with open(path, "w") as f:
        f.write("kind,name,start_ns,end_ns,stream,correlation,graph_id,graph_node,grid,block\n")
        f.write("C,copy1,0,1000,7,1,0,0,4096,0\n")  # an eager copy: not part of any step
        for s in range(3):
            t0 = 1_000_000 + s * PERIOD * 1000
            for name, a, b, node in STEP:
                f.write(f'K,"{name}",{int(t0 + a * 1000)},{int(t0 + b * 1000)},7,{100 + s},3,{node + 10 * s},64,256\n')
            for i in range(60):  # enough kernels to count as a decode step: tiny ones inside kmain_a's time
                f.write(f'K,"_Z5kfillv",{t0 + 100 + i},{t0 + 101 + i},7,{100 + s},3,{1000 + i},1,32\n')


def row(out, label):
    for line in out.splitlines():
        if line.startswith("| " + label):
            return line.split("|")[-2].strip()
    raise AssertionError(f"no row '{label}' in:\n{out}")


def check(out, why):
    bad = []
    want = {
        "span (first kernel start to last end)": "40.0",
        "host gap to the next step": "5.0",
        "host gap: median / p90 / max": "5.0 / 5.0 / 5.0",
        "main chain: some kernel running": "32.5",   # 0-10, 12-20, 20.5-35
        "main chain: idle (no main kernel running)": "2.5",  # A -> B 2, B -> router 0.5
        "main chain: two or more at once (PDL overlap)": "1.1",  # C / D 1 us, the fillers inside A 0.06
        "side branch: some kernel running": "29.0",  # 11-40
        "side branch: of that, before the main chain's end": "24.0",  # 11-35
        "tail: side work after the main chain's last kernel": "5.0",
    }
    for k, v in want.items():
        got = row(out, k)
        if got != v:
            bad.append(f"{k}: {got}, want {v}")
    if "main 65, side 3" not in out:
        bad.append("kernels per step: want main 65, side 3")
    # kmain_b (12-20) and kmain_c, kmain_d overlap the copy (18-40); kmain_a does not. Exclusive times: kmain_d runs
    # 29-35 but its chain share starts when kmain_c ends (30): 5, not its 6 us of duration
    for name, wc, alone in (("kmain_a", "-", "10.00 / 10.00 (1.0)"), ("kmain_b", "8.00 / 8.00 (1.0)", "-"),
                            ("kmain_c", "9.00 / 9.00 (1.0)", "-"), ("kmain_d", "5.00 / 5.00 (1.0)", "-")):
        line = next(l for l in out.splitlines() if l.startswith(f"| {name} |"))
        c = [x.strip() for x in line.strip("|").split("|")]
        if c[5] != wc or c[6] != alone:
            bad.append(f"{name}: with a copy {c[5]}, alone {c[6]}; want {wc}, {alone}")
    for name, gap in (("kmain_b", "2.00"), ("kmain_c", "0.00"), ("kmain_d", "-1.00")):  # against the latest end
        line = next(l for l in out.splitlines() if l.startswith(f"| {name} |"))
        if line.strip("|").split("|")[4].strip() != gap:
            bad.append(f"{name}: gap before {line.strip('|').split('|')[4].strip()}, want {gap}")
    # exclusive share and idle before: 10 + 8 + 0.5 + 9 + 5 + idle 2 + 0.5 = the main span 35
    for name, excl, idle in (("kmain_a", "10.0", "0.0"), ("kmain_b", "8.0", "2.0"), ("kmain_c", "9.0", "0.0"),
                             ("kmain_d", "5.0", "0.0"), ("k_router", "0.5", "0.5")):
        line = next(l for l in out.splitlines() if l.startswith(f"| {name}"))
        c = [x.strip() for x in line.strip("|").split("|")]
        if c[7] != excl or c[8] != idle:
            bad.append(f"{name}: exclusive {c[7]}, idle before {c[8]}; want {excl}, {idle}")
    if "| k_hy_pf_copy | 1.0 | 22.00 |" not in out:
        bad.append("side kernel row of k_hy_pf_copy")
    if bad:
        print(f"FAIL ({why}):\n  " + "\n  ".join(bad) + "\n" + out)
        return 1
    print(f"PASS timeline on a synthetic trace ({why})")
    return 0


def main():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.csv")
        write_csv(path)
        fails = 0
        for why, env in (("names by c++filt when present", dict(os.environ)),
                         ("names by the built-in reader", dict(os.environ, PATH=""))):
            r = subprocess.run([sys.executable, TOOL, path, "--steps", "2"], capture_output=True, text=True, env=env)
            if r.returncode:
                print(f"FAIL ({why}): exit {r.returncode}\n{r.stderr}")
                fails += 1
                continue
            fails += check(r.stdout, why)
        r = subprocess.run([sys.executable, TOOL, os.path.join(d, "missing.csv")], capture_output=True, text=True)
        if r.returncode == 0:
            print("FAIL: a missing file should be an error")
            fails += 1
        with open(os.path.join(d, "empty.csv"), "w") as f:
            f.write("kind,name,start_ns,end_ns,stream,correlation,graph_id,graph_node,grid,block\n")
        r = subprocess.run([sys.executable, TOOL, os.path.join(d, "empty.csv")], capture_output=True, text=True)
        if r.returncode == 0 or "no kernel records" not in r.stderr:
            print(f"FAIL: an empty trace should say so: {r.stderr}")
            fails += 1
    print("test_timeline:", "FAIL" if fails else "PASS")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
