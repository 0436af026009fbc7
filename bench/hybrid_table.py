#!/usr/bin/env python3
"""The table of bench/hybrid.sh from its JSON files (Strata `bench -o json`, llama-bench `-o json`) and the nvidia-smi
peaks (NAME.vram). With several rounds (hybrid.sh --rounds K: directories r1 .. rK under OUT) every speed is the
mean over the rounds, and each ratio, besides the ratio of the means, shows its range over the rounds' own ratios
(min-max): the peer's speed moves by 20-30% between runs on the same machine (2026-12-02b: tg128 at -ncmoe 7 114.3
then 149.5 minutes apart), so one round cannot say whether a ratio holds.
  usage: bench/hybrid_table.py OUT MODEL "BUDGETS" "NCMOE" PP TG"""
import json
import os
import sys


def main(argv):
    out, model, budgets, ncmoe, pp, tg = argv[1], argv[2], argv[3].split(), argv[4].split(), int(argv[5]), int(argv[6])
    rounds = sorted((d for d in os.listdir(out) if d[:1] == "r" and d[1:].isdigit() and
                     os.path.isdir(os.path.join(out, d))), key=lambda d: int(d[1:]))
    dirs = [os.path.join(out, d) for d in rounds] or [out]

    def load(d, name):
        try:
            with open(os.path.join(d, name + ".json")) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def peak(d, name):
        try:
            return int(open(os.path.join(d, name + ".vram")).read().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    idle = peak(out, "idle") or 0

    def strata(d, name, test):
        for r in load(d, name) or []:
            if r.get("test", "").startswith(test):
                return r
        return None

    def llama(d, name, n_prompt, n_gen):
        for r in load(d, name) or []:
            if int(r.get("n_prompt", -1)) == n_prompt and int(r.get("n_gen", -1)) == n_gen:
                return r
        return None

    def first_avg(d, name):
        j = load(d, name)
        return j[0].get("avg_ts") if j else None

    def per_round(get):  # [value of each round] (None where a round has none)
        return [get(d) for d in dirs]

    def mean(vals):
        v = [x for x in vals if x is not None]
        return sum(v) / len(v) if v else None

    def f(x, fmt="%.1f"):
        return fmt % x if x is not None else "-"

    def ratio(s, l):  # ratio of the means, and the range of the rounds' own ratios
        ms, ml = mean(s), mean(l)
        if not ms or not ml:
            return "-"
        txt = "%.2fx" % (ms / ml)
        rs = [a / b for a, b in zip(s, l) if a and b]
        if len(rs) > 1:
            txt += " (%.2f-%.2f)" % (min(rs), max(rs))
        return txt

    def peak_max(name):
        v = [p for p in per_round(lambda d: peak(d, name)) if p is not None]
        return max(v) - idle if v else None

    n_rounds = len(rounds) or 1
    rows = [("all in VRAM", "strata-all", "llama-all", "-", "strata-all-eval")]
    for i, g in enumerate(budgets):  # budget i pairs with the i-th --n-cpu-moe setting
        n = ncmoe[i] if i < len(ncmoe) else None
        rows.append((f"{g} GiB", f"strata-{g}", f"llama-{n}" if n else None, n or "-", f"strata-{g}-eval"))
    rounds_note = ", mean of %d rounds (ratios: of the means, and the rounds' range)" % n_rounds if n_rounds > 1 else ""
    print(f"# Hybrid placement: {os.path.basename(model)}, pp{pp} / tg{tg}{rounds_note}\n")
    print("| budget | Strata pp t/s | llama pp t/s (-ncmoe) | pp ratio | Strata tg t/s | llama tg t/s | tg ratio | "
          "Strata tg t/s, eval mode (ratio) | "
          "Strata peak VRAM MiB | llama peak VRAM MiB | hit rate | misses/tok | CPU misses/tok (F) | "
          "CPU job / GPU wait us | PCIe GB/tok | staged GB/tok (pp) | pp experts/chunk from copies, CPU | "
          "prefetched/tok (served) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
          "| ---: | ---: | ---: |")
    for label, sname, lname, n, ename in rows:
        sp = per_round(lambda d: (strata(d, sname, "pp") or {}).get("avg_ts"))
        st = per_round(lambda d: (strata(d, sname, "tg") or {}).get("avg_ts"))
        sev = mean(per_round(lambda d: (strata(d, ename, "tg") or {}).get("avg_ts")))
        lp = per_round(lambda d: (llama(d, lname, pp, 0) or {}).get("avg_ts") if lname else None)
        lt = per_round(lambda d: (llama(d, lname, 0, tg) or {}).get("avg_ts") if lname else None)
        hy = next((h for h in per_round(lambda d: (strata(d, sname, "tg") or {}).get("hybrid")) if h), {})
        hyp = next((h for h in per_round(lambda d: (strata(d, sname, "pp") or {}).get("hybrid")) if h), {})
        mlt = mean(lt)
        # the CPU-miss job's time and the GPU's wait for it, per layer job, mean of the rounds: the host's DRAM sets
        # them, and with them much of a budget's decode speed (2026-12-03b: 54-85 us between machines)
        job = [mean(per_round(lambda d: ((strata(d, sname, "tg") or {}).get("hybrid") or {}).get(k)))
               for k in ("cpu_job_us", "cpu_wait_us")]
        job_txt = f"{f(job[0])} / {f(job[1])}" if hy.get("cpu_threads") and job[0] is not None else "-"
        pf = hy.get("prefetch_per_token")
        pf_txt = f"{f(pf)} ({hy['prefetch_hits_per_token']:.1f})" if pf else "-"
        print(f"| {label} | {f(mean(sp))} | {f(mean(lp))} ({n}) | {ratio(sp, lp)} | {f(mean(st))} | {f(mlt)} | "
              f"{ratio(st, lt)} | "
              f"{f(sev)}{' (%.2fx)' % (sev / mlt) if sev and mlt else ''} | {f(peak_max(sname), '%d')} | "
              f"{f(peak_max(lname) if lname else None, '%d')} | "
              f"{f(100 * hy['hit_rate'] if 'hit_rate' in hy else None, '%.1f%%')} | "
              f"{f(hy.get('misses_per_token'))} | "
              f"{f(hy.get('cpu_misses_per_token'))}{' (%.2f)' % hy['pcie_frac'] if hy.get('cpu_threads') else ''} | "
              f"{job_txt} | "
              f"{f(hy.get('pcie_gb_per_token'), '%.3f')} | "
              f"{f(hyp.get('staged_gb_per_token'), '%.4f')} | "
              f"{f(hyp.get('prefill_prefetch_records_per_chunk'), '%.0f')}, "
              f"{f(hyp.get('prefill_cpu_records_per_chunk'), '%.0f')} | "
              f"{pf_txt} |")
    print("\nPeak VRAM is nvidia-smi's memory.used minus the idle reading (%d MiB), sampled every 100 ms%s; targets "
          "(issue #6): decode >= 2.5x and prefill >= 2.0x llama.cpp at each budget. Strata tg: the generation path "
          "(greedy sampling on the device, one step queued ahead, random input tokens drawn afresh for every run as "
          "llama-bench does, since 3e9c282); eval mode: one evaluation per token with the logits copied to the host "
          "and no sampling, llama-bench's own loop."
          % (idle, ", the largest of the rounds" if n_rounds > 1 else ""))
    if any(os.path.exists(os.path.join(d, f"agent-strata-{g}-pp.json")) for d in dirs for g in ["all"] + budgets):
        print("\n## Long agent prompt: 16,384 tokens of prefill, then 256 decoded at depth 16,384\n")
        print("| budget | Strata pp16384 | llama pp16384 (-ncmoe) | ratio | Strata tg256 @ d16384 "
              "| llama tg256 @ d16384 | ratio |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for i, g in enumerate(["all"] + budgets):
            n = "all" if g == "all" else (ncmoe[i - 1] if i - 1 < len(ncmoe) else None)
            sp = per_round(lambda d: first_avg(d, f"agent-strata-{g}-pp"))
            st = per_round(lambda d: first_avg(d, f"agent-strata-{g}-tg"))
            lp = per_round(lambda d: first_avg(d, f"agent-llama-{n}-pp") if n else None)
            lt = per_round(lambda d: first_avg(d, f"agent-llama-{n}-tg") if n else None)
            print(f"| {'all in VRAM' if g == 'all' else g + ' GiB'} | {f(mean(sp))} | {f(mean(lp))} ({n or '-'}) | "
                  f"{ratio(sp, lp)} | {f(mean(st))} | {f(mean(lt))} | {ratio(st, lt)} |")
        for g in budgets:  # the decode's expert counters at depth, beside the short-depth row's above
            hy = next((h for h in per_round(lambda d: (strata(d, f"agent-strata-{g}-tg", "tg") or {}).get("hybrid"))
                       if h), {})
            if hy:
                print(f"{g} GiB at depth: hit rate {f(100 * hy['hit_rate'] if 'hit_rate' in hy else None, '%.1f%%')}, "
                      f"{f(hy.get('misses_per_token'))} misses/tok, {f(hy.get('cpu_misses_per_token'))} on the CPU")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] in (["-h"], ["--help"]):
        print(__doc__)
        sys.exit(0)
    if len(sys.argv) != 7:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv))
