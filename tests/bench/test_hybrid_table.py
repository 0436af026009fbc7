#!/usr/bin/env python3
"""bench/hybrid_table.py on synthetic JSON files whose answers are known: one round in OUT itself, then two rounds
(r1, r2) where the peer's speed moves between rounds. Checks the means, the ratio of the means, the rounds' ratio
range, the largest peak VRAM and the agent table."""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(HERE, "..", "..", "bench", "hybrid_table.py")
fails = 0


def check(cond, msg):
    global fails
    if not cond:
        print("FAIL:", msg)
        fails += 1


def write(d, name, obj):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name + ".json"), "w") as f:
        json.dump(obj, f)


def round_files(d, s_tg, l_tg, s_pp, l_pp, s_depth, l_depth, vram, job=(60.0, 50.0)):
    hy = {"hit_rate": 0.979, "misses_per_token": 8.0, "cpu_misses_per_token": 8.0, "cpu_threads": 15,
          "pcie_frac": 0.0, "pcie_gb_per_token": 0.0, "prefetch_per_token": 6.5, "prefetch_hits_per_token": 85.7,
          "cpu_job_us": job[0], "cpu_wait_us": job[1]}
    write(d, "strata-16", [{"test": "pp512", "avg_ts": s_pp, "hybrid": {"staged_gb_per_token": 0.0088}},
                           {"test": "tg128", "avg_ts": s_tg, "hybrid": hy}])
    write(d, "llama-7", [{"n_prompt": 512, "n_gen": 0, "avg_ts": l_pp}, {"n_prompt": 0, "n_gen": 128, "avg_ts": l_tg}])
    write(d, "agent-strata-16-pp", [{"test": "pp16384", "avg_ts": 12500.0}])
    write(d, "agent-strata-16-tg", [{"test": "tg256@d16384", "avg_ts": s_depth, "hybrid": hy}])
    write(d, "agent-llama-7-pp", [{"avg_ts": 2500.0}])
    write(d, "agent-llama-7-tg", [{"avg_ts": l_depth}])
    with open(os.path.join(d, "strata-16.vram"), "w") as f:
        f.write("%d\n" % vram)


def table(out):
    r = subprocess.run([sys.executable, TOOL, out, "/tmp/m.gguf", "16", "7", "512", "128"], capture_output=True,
                       text=True)
    check(r.returncode == 0, "exit %d: %s" % (r.returncode, r.stderr))
    return r.stdout


def row(text, prefix, nth=0):
    rows = [l for l in text.splitlines() if l.startswith(prefix)]
    return [c.strip() for c in rows[nth].split("|")[1:-1]] if len(rows) > nth else []


with tempfile.TemporaryDirectory() as out:  # one round, in OUT itself
    round_files(out, 360.0, 120.0, 6000.0, 2000.0, 330.0, 110.0, 16300)
    t = table(out)
    r = row(t, "| 16 GiB")
    check(r[:7] == ["16 GiB", "6000.0", "2000.0 (7)", "3.00x", "360.0", "120.0", "3.00x"], "one round: %s" % r)
    a = row(t, "| 16 GiB", 1)
    check(a == ["16 GiB", "12500.0", "2500.0 (7)", "5.00x", "330.0", "110.0", "3.00x"], "one round, agent: %s" % a)
    check("mean of" not in t, "one round called a mean")

with tempfile.TemporaryDirectory() as out:  # two rounds: the peer 100 then 150 tok/s
    round_files(os.path.join(out, "r1"), 350.0, 100.0, 6000.0, 2000.0, 330.0, 110.0, 16300)
    round_files(os.path.join(out, "r2"), 370.0, 150.0, 6200.0, 3000.0, 334.0, 140.0, 16350, job=(70.0, 40.0))
    with open(os.path.join(out, "idle.vram"), "w") as f:
        f.write("50\n")
    t = table(out)
    r = row(t, "| 16 GiB")
    # means 360 / 125 = 2.88x; rounds 3.50x and 2.47x; pp 6100 / 2500 = 2.44x, rounds 3.00 and 2.07
    check(r[1:7] == ["6100.0", "2500.0 (7)", "2.44x (2.07-3.00)", "360.0", "125.0", "2.88x (2.47-3.50)"],
          "two rounds: %s" % r)
    check(r[8] == "16300", "peak VRAM: the largest of the rounds minus idle, got %s" % r[8:9])
    check(r[12:14] == ["8.0 (0.00)", "65.0 / 45.0"], "CPU misses and the job / wait means: %s" % r[12:14])
    a = row(t, "| 16 GiB", 1)
    check(a[4:7] == ["332.0", "125.0", "2.66x (2.39-3.00)"], "two rounds, agent: %s" % a)
    check("mean of 2 rounds" in t, "the title does not say the rounds")
    check("16 GiB at depth: hit rate 97.9%" in t, "the depth counters are missing")

if fails:
    print("test_hybrid_table: %d failure(s)" % fails)
    sys.exit(1)
print("test_hybrid_table: PASS")
