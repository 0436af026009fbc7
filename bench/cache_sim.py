#!/usr/bin/env python3
"""Replays a routing trace through a model of the hybrid engine's VRAM expert cache and lookahead prefetch
(src/engine/gpu_hybrid.c, src/cuda/hybrid.cu k_hy_pf_plan) and reports misses per token for prefetch policies,
so a policy can be judged on the CPU before it costs device time. It is a model: copy timing is one side stream
of fixed per-record copy time against fixed per-layer compute time, and a CPU miss is any selection not in VRAM
when the layer's MoE starts. Calibrate its times against a measured run before trusting absolute numbers; compare
policies on the same trace.

Trace: STRATA_ROUTE_PREDICT=1 STRATA_ROUTE_TRACE=FILE strata bench -dev cpu -m MODEL -p 0 -n 128 -r 3
(route_predict.c: per one-token step and layer, "layer | K chosen | ranking by the predictor (a)").

  usage: bench/cache_sim.py TRACE [--resident N] [--per-set 16] [--pred 16] [--policy NAME ...]
"""
import argparse
import re


def read_trace(path):
    """Returns (n_layer, n_expert, K, steps): steps[t][l] = (chosen list, ranking list)."""
    steps, cur, L, E, K = [], [], None, None, None
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                m = re.search(r"layers (\d+), experts (\d+), top-(\d+)", line)
                L, E, K = (int(x) for x in m.groups())
                cur = []
                continue
            if line.count("|") != 2 or not line.endswith("\n"):  # a trace still being written
                continue
            if L is None:
                raise ValueError("no header")
            a, b, c = line.split("|")
            layer = int(a)
            if layer == 0:
                cur = []
            cur.append(([int(x) for x in b.split()], [int(x) for x in c.split()]))
            if len(cur) == L:
                steps.append(cur)
                cur = []
    return L, E, K, steps


class Sim:
    """One engine: resident cache per layer, adaptive swaps, a prefetch set per layer, one copy stream."""

    def __init__(self, L, E, K, resident, per_set, args):
        self.L, self.E, self.K, self.a = L, E, K, args
        self.res = [set(range(resident)) for _ in range(L)]  # lowest ids first (the plan without a profile)
        fl = min(args.first_layer, L - 1)  # the first layers whole, their extra slots taken from the others
        for f in range(fl):                # (ST_PLAN_FIRST_LAYERS)
            self.res[f] = set(range(E))
        for i in range(fl * (E - resident)):
            layer = self.res[fl + i % (L - fl)]
            if layer:  # (a budget that the first layers take whole leaves the others empty)
                layer.discard(max(layer))
        self.owner = [[-1] * per_set for _ in range(L)]       # one set per layer
        self.ready = [[0.0] * per_set for _ in range(L)]      # time each slot's copy lands
        self.freq = [[0.0] * E for _ in range(L)]
        self.cnt = [[0] * E for _ in range(L)]
        self.prev = [[] for _ in range(L)]  # the previous token's choice per layer
        self.prev_miss = [[] for _ in range(L)]
        self.t = 0.0
        self.stream_free = 0.0
        self.post_free = 0.0  # the post plans' stream (STRATA_HY_PF_POST)
        self.tokens = self.misses = self.copies = self.late = self.served = 0  # (counted after the warm-up)
        self.layer_misses = [0] * L
        self.jobs = 0  # layers with misses (each a CPU job the GPU waits for)

    def candidates(self, policy, l, ranking):
        P = self.a.pred
        if policy == "base":  # the engine today: predictor top-P
            return ranking[:P]
        nonres = [e for e in ranking if e not in self.res[l]]
        if policy == "nonres":  # top-P among the experts not resident
            return nonres[:P]
        if policy == "prevmiss":  # the previous token's misses first, then the predictor's top-P
            return self.prev_miss[l] + [e for e in ranking[:P] if e not in self.prev_miss[l]]
        if policy == "prev":  # the previous token's choice first (keeps its copies), then the predictor's top-P
            return self.prev[l] + [e for e in ranking[:P] if e not in self.prev[l]]
        if policy == "prevkeep":  # the predictor's top-P, and the previous token's copies kept (no new ones)
            kept = [e for e in self.prev[l] if e in self.owner[l]]
            return kept + [e for e in ranking[:P] if e not in kept]
        if policy == "pred+prevmiss":  # the predictor's top-P first, then the previous token's misses
            return ranking[:P] + [e for e in self.prev_miss[l] if e not in ranking[:P]]
        if policy == "nonres+prevmiss":
            return self.prev_miss[l] + [e for e in nonres if e not in self.prev_miss[l]][:P]
        raise SystemExit(f"unknown policy {policy}")

    def plan(self, l, cands, t_fork, t_moe):
        """k_hy_pf_plan + k_hy_pf_copy for layer l: candidates in priority order (at most 32)."""
        own, rdy, per_set = self.owner[l], self.ready[l], len(self.owner[l])
        cands = cands[:32]
        keep, need = set(), []
        for e in cands:
            if e < 0 or e in self.res[l]:
                continue
            if e in own:
                keep.add(own.index(e))
            elif e not in need:
                need.append(e)
        cap = self.a.max_copies or per_set
        need = need[:cap]
        start = max(t_fork, self.stream_free)
        if start >= t_moe and self.a.skip_late:  # the plan runs after layer l's count: skipped
            self.late += 1
            return
        free = [j for j in range(per_set) if j not in keep][: len(need)]
        t = start + self.a.plan_us
        for j, e in zip(free, need):
            t += self.a.copy_us
            own[j], rdy[j] = e, t
            self.copies += 1
        self.stream_free = t

    def post(self, l, chosen, t_fork):
        """Layer l's post plan (k_hy_pf_plan in post mode): this token's choices not resident and not in the set are
        copied for the next token (at most a.post), on a stream of its own after the side stream's copies of layer l."""
        own, rdy = self.owner[l], self.ready[l]
        keep = {own.index(e) for e in chosen if e in own}
        need = [e for e in chosen if e not in self.res[l] and e not in own][: self.a.post]
        free = [j for j in range(len(own)) if j not in keep][: len(need)]
        t = max([t_fork, self.post_free] + [rdy[j] for j in range(len(own)) if own[j] >= 0]) + self.a.plan_us
        for j, e in zip(free, need):
            t += self.a.copy_us
            own[j], rdy[j] = e, t
            self.copies += 1
        self.post_free = t

    def step(self, policy, layers):
        a = self.a
        layer_us = a.step_us / self.L
        t0 = self.t
        for l, (chosen, ranking) in enumerate(layers):
            t_moe = t0 + l * layer_us + a.moe_offset_us
            if l > 0 and ranking:
                self.plan(l, self.candidates(policy, l, ranking), t_moe - layer_us + a.fork_offset_us, t_moe)
            # (no plan for layer 0: the engine forks each layer's plan during the layer before)
            miss = []
            for e in chosen:
                if e in self.res[l]:
                    continue
                if e in self.owner[l] and self.ready[l][self.owner[l].index(e)] <= t_moe:
                    self.served += 1
                    continue
                miss.append(e)
            self.misses += len(miss)
            self.layer_misses[l] += len(miss)
            self.jobs += 1 if miss else 0
            self.prev[l], self.prev_miss[l] = list(chosen), miss
            for e in chosen:
                self.cnt[l][e] += 1
            if a.post and l + 3 <= self.L:  # (the branch of layer l+1 forks it; none after the last layer's)
                self.post(l, chosen, t_moe + layer_us + a.fork_offset_us)
        self.t = t0 + a.step_us  # (the step's time is an input, not a result)
        self.tokens += 1
        if self.tokens % a.period == 0:
            self.swaps()

    def swaps(self):
        """Decayed frequency and the best-gain swaps (cache_policy.c st_hycache_pick_swaps, applied at once)."""
        a = self.a
        f = 0.5 ** (a.period / a.halflife)
        cand = []
        for l in range(self.L):
            fr, c = self.freq[l], self.cnt[l]
            for e in range(self.E):
                fr[e] = fr[e] * f + c[e]
                c[e] = 0
            out = sorted(self.res[l], key=lambda e: (fr[e], e))
            inn = sorted((e for e in range(self.E) if e not in self.res[l]), key=lambda e: (-fr[e], e))
            for i, o in zip(inn, out):
                if fr[i] > 1.5 * fr[o] + 1.0:
                    cand.append((fr[i] - fr[o], l, i, o))
                else:
                    break
        cand.sort(key=lambda x: (-x[0], x[1]))
        for g, l, i, o in cand[: a.swaps]:
            self.res[l].discard(o)
            self.res[l].add(i)
            if i in self.owner[l]:
                self.owner[l][self.owner[l].index(i)] = -1


def simulate(steps, L, E, K, policy, a):
    """Replays steps under one policy; counts after a.warmup tokens, per token: misses, served, copies, late."""
    s = Sim(L, E, K, a.resident, a.per_set, a)
    for layers in steps[: a.warmup]:
        s.step(policy, layers)
    s.misses = s.copies = s.late = s.served = s.jobs = 0
    s.layer_misses = [0] * L
    for layers in steps[a.warmup:]:
        s.step(policy, layers)
    n = max(1, len(steps) - a.warmup)
    return {"misses": s.misses / n, "jobs": s.jobs / n, "served": s.served / n, "copies": s.copies / n,
            "late": s.late / n,
            "layer_misses": [m / n for m in s.layer_misses]}


def parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--resident", type=int, default=100,
                    help="cache slots per layer (100 reproduces the 16 GiB run's misses and copies: docs/HYBRID.md)")
    ap.add_argument("--per-set", type=int, default=16, help="prefetch slots per layer")
    ap.add_argument("--pred", type=int, default=16, help="predictions per plan (STRATA_HY_PREFETCH)")
    ap.add_argument("--max-copies", type=int, default=1,
                    help="records copied per plan at most (STRATA_HY_PREFETCH_MAX, default 1; 0: per-set)")
    ap.add_argument("--step-us", type=float, default=2600.0, help="decode step time (model input)")
    ap.add_argument("--copy-us", type=float, default=65.0, help="one record's copy on the side stream")
    ap.add_argument("--plan-us", type=float, default=3.0)
    ap.add_argument("--fork-offset-us", type=float, default=25.0, help="plan fork after the layer before starts")
    ap.add_argument("--moe-offset-us", type=float, default=30.0, help="MoE start after its layer starts")
    ap.add_argument("--no-skip-late", dest="skip_late", action="store_false")
    ap.add_argument("--post", type=int, default=2,
                    help="post plans' copies per layer (STRATA_HY_PF_POST, default 2 since 2026-12-04c; 0: off)")
    ap.add_argument("--first-layer", type=int, default=3,
                    help="layers (from 0) that hold every expert (ST_PLAN_FIRST_LAYERS, 3 since 2026-12-04; 0: the "
                         "even spread)")
    ap.add_argument("--per-layer", action="store_true", help="also each layer's misses per token")
    ap.add_argument("--period", type=int, default=16)
    ap.add_argument("--swaps", type=int, default=4)
    ap.add_argument("--halflife", type=float, default=256.0)
    ap.add_argument("--warmup", type=int, default=128, help="tokens replayed before counting")
    ap.add_argument("--policy", nargs="+", default=["base", "prev", "prevkeep", "prevmiss"],
                    help="base (the engine), prev (STRATA_HY_PF_PREV), prevkeep, prevmiss, pred+prevmiss, nonres, "
                         "nonres+prevmiss")
    return ap


def main():
    a = parser().parse_args()
    try:
        L, E, K, steps = read_trace(a.trace)
    except OSError as e:
        raise SystemExit(f"cache_sim.py: cannot read the trace {a.trace}: {e.strerror}")
    except (ValueError, AttributeError):
        raise SystemExit(f"cache_sim.py: {a.trace} is not a STRATA_ROUTE_TRACE file (a '# session: layers L, experts "
                         f"E, top-K' header, then 'layer | chosen | ranking' lines)")
    if not steps:
        raise SystemExit(f"cache_sim.py: {a.trace} holds no complete one-token step")
    print(f"trace {a.trace}: {len(steps)} one-token steps, {L} layers, {E} experts, top-{K}; resident {a.resident}"
          f"/layer, prefetch {a.per_set}/layer, step {a.step_us:.0f} us, copy {a.copy_us:.0f} us/record")
    print("| policy | misses/token | layers with misses/token | served by copies/token | copies/token | "
          "late plans/token |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for pol in a.policy:
        r = simulate(steps, L, E, K, pol, a)
        print(f"| {pol} | {r['misses']:.2f} | {r['jobs']:.2f} | {r['served']:.1f} | {r['copies']:.1f} | "
              f"{r['late']:.2f} |")
        if a.per_layer:
            print("|  | per layer: " + " ".join(f"{m:.2f}" for m in r["layer_misses"]) + " | | | | |")


if __name__ == "__main__":
    main()
