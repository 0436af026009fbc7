#!/usr/bin/env python3
"""bench/cache_sim.py and the routing trace it reads.

1. The trace writer (STRATA_ROUTE_PREDICT=1 STRATA_ROUTE_TRACE, engine/route_predict.c): strata bench on the CPU
   over a tiny qwen3moe writes one line per one-token step and layer, layer 0 without a ranking and the others with
   predictor (a)'s ranking of every expert (the tiny model has fewer than 64), in step order; cache_sim reads it.
2. The model's policies on synthetic traces whose answers are known: every layer choosing the same experts every
   token while the predictor names only others (base never copies them: every non-resident choice misses; prev
   copies each once and then misses nothing but in layer 0, which no plan covers, and with post plans nowhere), and a
   perfect predictor (base misses nothing after the warm-up).
3. Bad input (a missing file, a file that is not a trace): a clear message and exit status 1.

usage: test_cache_sim.py STRATA_BINARY
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
import cache_sim  # noqa: E402
import cli_harness  # noqa: E402
from cli_harness import check  # noqa: E402

STRATA = sys.argv[1]


def sim_args(path, **kw):
    argv = [path]
    for k, v in kw.items():
        argv += [f"--{k.replace('_', '-')}", str(v)]
    return cache_sim.parser().parse_args(argv)


def write_trace(path, L, E, K, steps):
    """steps: list of per-layer (chosen, ranking) lists."""
    with open(path, "w") as f:
        f.write(f"# session: layers {L}, experts {E}, top-{K}, ranking depth {E}\n")
        for layers in steps:
            for l, (chosen, ranking) in enumerate(layers):
                f.write(f"{l} | {' '.join(map(str, chosen))} | {' '.join(map(str, ranking if l else []))}\n")


with tempfile.TemporaryDirectory() as d:
    # 1. The trace of a real (tiny) model.
    moe, _ = cli_harness.make_tiny_models(STRATA, d, 0.6)
    trace = f"{d}/route.trace"
    rc, out, err = cli_harness.run(STRATA, "bench", "-dev", "cpu", "-m", moe, "-p", "0", "-n", "6", "-r", "2",
                                   "-t", "2", env={"STRATA_ROUTE_PREDICT": "1", "STRATA_ROUTE_TRACE": trace})
    check(rc == 0 and "route prediction" in err, "strata bench with the route trace", out + err)
    L, E, K, steps = cache_sim.read_trace(trace)
    with open(trace) as f:
        lines = [ln for ln in f if not ln.startswith("#")]
    check(len(steps) == 3 * 6 and len(lines) == 3 * 6 * L, "one line per step (warm-up + 2 runs of 6) and layer",
          f"{len(steps)} steps, {len(lines)} lines, {L} layers")
    ok = all(len(ch) == K and len(set(ch)) == K and all(0 <= e < E for e in ch) for layers in steps
             for ch, _ in layers)
    check(ok, "each line's choice: K distinct experts")
    ok = all(not layers[0][1] and all(sorted(r) == list(range(E)) for _, r in layers[1:]) for layers in steps)
    check(ok, "layer 0 without a ranking, every other layer ranks all experts (E < 64)")
    r = cache_sim.simulate(steps, L, E, K, "prev", sim_args(trace, resident=E // 2, per_set=4, warmup=2))
    check(r["misses"] >= 0 and r["served"] >= 0, "the simulator runs on it", str(r))

    # 2. Synthetic traces. 4 layers, 16 experts, top-2, experts 0..7 resident; each layer always chooses 8 and 9.
    L, E, K = 4, 16, 2
    same = [[([8, 9], [12, 13, 14, 15] + list(range(12))) for _ in range(L)] for _ in range(40)]
    path = f"{d}/same.trace"
    write_trace(path, L, E, K, same)
    _, _, _, steps = cache_sim.read_trace(path)
    # (no swaps: 8, 9 stay out; the even spread first, so that layer 0 is like the others but never planned)
    a = sim_args(path, resident=8, per_set=4, pred=4, warmup=10, swaps=0, first_layer=0, post=0)
    base = cache_sim.simulate(steps, L, E, K, "base", a)
    prev = cache_sim.simulate(steps, L, E, K, "prev", a)
    check(base["misses"] == L * K, "base: a predictor that never names the choice misses all of it", str(base))
    check(prev["misses"] == K and prev["served"] == (L - 1) * K,
          "prev: the previous choice copied, then served (layer 0, never planned, still misses)", str(prev))
    a1 = sim_args(path, resident=8, per_set=4, pred=4, warmup=10, swaps=0, first_layer=1, post=0)
    base = cache_sim.simulate(steps, L, E, K, "base", a1)
    prev = cache_sim.simulate(steps, L, E, K, "prev", a1)
    check(base["misses"] == (L - 1) * K and prev["misses"] == 0,
          "layer 0 whole: no miss there; prev then misses nothing", f"{base} {prev}")
    # post plans (STRATA_HY_PF_POST): layer 0, which no plan covers, is copied after its first token; prev then
    # misses nothing with the even spread too, and the post copies are kept (no further copies after the warm-up)
    a2 = sim_args(path, resident=8, per_set=4, pred=4, warmup=10, swaps=0, first_layer=0, post=2)
    prev = cache_sim.simulate(steps, L, E, K, "prev", a2)
    check(prev["misses"] == 0 and prev["served"] == L * K and prev["copies"] == 0,
          "prev + post plans: every layer served from copies, none made after the warm-up", str(prev))
    perfect = [[([8, 9], [8, 9] + list(range(10, 16)) + list(range(8))) for _ in range(L)] for _ in range(40)]
    path = f"{d}/perfect.trace"
    write_trace(path, L, E, K, perfect)
    _, _, _, steps = cache_sim.read_trace(path)
    r = cache_sim.simulate(steps, L, E, K, "base", a)
    # layer 0 has no prediction: base misses its two choices every token
    check(r["misses"] == K and r["served"] == (L - 1) * K, "base with a perfect predictor", str(r))

    # 3. Bad input: a clear message and exit status 1, no traceback.
    tool = os.path.join(HERE, "..", "..", "bench", "cache_sim.py")
    with open(f"{d}/bad.trace", "w") as f:
        f.write("x | 1 | 2\n")
    for path, want in ((f"{d}/missing.trace", "cannot read the trace"),
                       (f"{d}/bad.trace", "is not a STRATA_ROUTE_TRACE file")):
        p = subprocess.run([sys.executable, tool, path], capture_output=True, text=True, timeout=60)
        check(p.returncode == 1 and want in p.stderr and "Traceback" not in p.stderr, f"cache_sim.py on {path}",
              p.stderr)

sys.exit(1 if cli_harness.failures else 0)
