#!/usr/bin/env python3
"""strata pack / profile / info --plan on tiny models made with make-model: exit codes, messages, outputs.

usage: test_place_cli.py STRATA_BINARY
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import cli_harness  # noqa: E402
from cli_harness import check  # noqa: E402

STRATA = sys.argv[1]


def run(*args, env=None):
    return cli_harness.run(STRATA, *args, unset=("STRATA_ARENA_MMAP",), env=env)


with tempfile.TemporaryDirectory() as d:
    moe, dense = cli_harness.make_tiny_models(STRATA, d, 0.6)
    pack = f"{d}/moe.pack"

    for sub in (["pack"], ["profile"], ["info", "--plan"]):
        rc, out, err = run(*sub, "--help")
        check(rc == 0 and "usage: strata" in out, f"{sub} --help", out + err)

    rc, out, err = run("pack", "-m", moe, "-o", pack)
    check(rc == 0 and "wrote" in out and os.path.getsize(pack) % 4096 == 0, "pack", out + err)
    check(not os.path.exists(pack + ".tmp"), "pack leaves no .tmp file")
    rc, out, err = run("pack", "-m", dense, "-o", f"{d}/dense.pack")
    check(rc == 1 and "dense model" in err and not os.path.exists(f"{d}/dense.pack"), "pack of a dense model", err)
    rc, out, err = run("pack", "-m", moe)
    check(rc == 2 and "-o FILE.pack" in err, "pack without -o", err)

    # Plans: unlimited, hybrid, too small, mmap without / with a pack, a preset without a file, dense.
    rc, out, err = run("info", "-m", moe, "--plan")
    check(rc == 0 and "all experts in VRAM" in out, "unlimited plan", out + err)
    rc, out, err = run("info", "-m", moe, "--plan", "--gpu-mem", "0.02", "--reserve", "0", "-c", "512", "-ub", "512", "--json")
    j = json.loads(out) if rc == 0 else {}
    check(rc == 0 and not j.get("all_in_vram") and 0 < j.get("n_slots", 0) < 64 and j.get("arena_mode") == "anonymous"
          and sum(j.get("resident_per_layer", [])) == j.get("n_slots") and j.get("prefill_chunk") == 512, "hybrid plan json",
          out + err)
    rc, out, err = run("info", "-m", moe, "--plan", "--gpu-mem", "1", "--json")
    j = json.loads(out) if rc == 0 else {}
    check(rc == 0 and j.get("prefill_chunk") == 4096, "default hybrid prefill chunk", out + err)
    rc, out, err = run("info", "-m", moe, "--plan", "--gpu-mem", "0.001", "--reserve", "0")
    check(rc == 1 and "too small" in err and "at least" in err and "dense weights" in err, "too small", err)
    rc, out, err = run("info", "-m", moe, "--plan", "--gpu-mem", "0.02", "--reserve", "0", "-c", "512", "-ub", "512",
                       env={"STRATA_ARENA_MMAP": "1"})
    check(rc != 0 and "strata pack" in err, "mmap arena without a pack", err)
    rc, out, err = run("info", "-m", moe, "--plan", "--gpu-mem", "0.02", "--reserve", "0", "-c", "512", "-ub", "512",
                       "--arena-mmap", "--pack", pack)
    check(rc == 0 and "mapped read-only" in out and "resident/layer" in out, "mmap plan", out + err)
    rc, out, err = run("info", "--plan", "--preset", "qwen3-30b-a3b", "--type", "Q4_K_M", "--gpu-mem", "12",
                       "-c", "4096")
    check(rc == 0 and "expert cache" in out and "6144 experts" in out, "preset plan", out + err)
    rc, out, err = run("info", "-m", dense, "--plan", "--gpu-mem", "1")
    check(rc == 0 and "dense model" in out, "dense plan", out + err)
    # The lookahead prefetch is off where the cache alone (its own slots counted in, the lent scratch's not) would hold
    # >= 77% of the experts (ST_PLAN_PREFETCH_MAX_SHARE), unless STRATA_HY_PREFETCH names P.
    share = ("info", "--plan", "--preset", "qwen3-30b-a3b", "--type", "Q4_K_M", "-c", "2048")
    for gib, env, off in (("18.9", None, True), ("17", None, True), ("16", None, False), ("12", None, False),
                          ("18.9", {"STRATA_HY_PREFETCH": "16"}, False)):
        rc, out, err = cli_harness.run(STRATA, *share, "--gpu-mem", gib, "--json", env=env,
                                       unset=("STRATA_ARENA_MMAP",) + (() if env else ("STRATA_HY_PREFETCH",)))
        j = json.loads(out) if rc == 0 else {}
        slot = j.get("slot_bytes", 1) or 1
        without = j.get("n_slots", 0) + j.get("n_prefetch", 0) - j.get("scratch_lent_bytes", 0) // slot
        check(rc == 0 and j.get("prefetch_share_off") is off and (j.get("prefetch_per_layer") == 0) is off and
              (env is not None or (without >= 0.77 * j.get("n_experts", 1)) is off),
              f"prefetch at --gpu-mem {gib} {env or ''}: off {j.get('prefetch_share_off')}, "
              f"{j.get('prefetch_per_layer')} per layer, {j.get('n_slots')} of {j.get('n_experts')} cached", out + err)
    # The lent prefill scratch's line sits under the prefetch's own slots, and only where they hold it
    for env, lent in ((None, True), ({"STRATA_HY_PF_SCRATCH": "0"}, False)):
        rc, out, err = cli_harness.run(STRATA, *share, "--gpu-mem", "16", env=env,
                                       unset=("STRATA_ARENA_MMAP", "STRATA_HY_PREFETCH")
                                       + (() if env else ("STRATA_HY_PF_SCRATCH",)))
        check(rc == 0 and ("hold the prefill GEMM scratch" in out) is lent and "768 slots: the lookahead" in out and
              "in the prefill staging slots" not in out, f"16 GiB plan text, lent scratch {lent}", out + err)
    rc, out, err = cli_harness.run(STRATA, *share, "--gpu-mem", "18.9", unset=("STRATA_ARENA_MMAP", "STRATA_HY_PREFETCH"))
    check(rc == 0 and "the lookahead prefetch is off from 77%" in out, "prefetch off in the plan's text", out + err)

    # Profile over two prompts, then a plan from it; a profile of another model is refused.
    p1, p2, prof = f"{d}/p1.txt", f"{d}/p2.txt", f"{d}/prof.json"
    open(p1, "w").write("<|im_start|>user\nName three rivers in Europe.<|im_end|>\n")
    open(p2, "w").write("The quick brown fox jumps over the lazy dog. " * 8)
    rc, out, err = run("profile", "-m", moe, "-f", p1, "-f", p2, "-o", prof, "-n", "4", "-t", "2")
    pj = json.load(open(prof)) if rc == 0 else {}
    ok = rc == 0 and pj.get("format") == "strata-profile" and len(pj.get("counts", [])) == 4
    ok = ok and all(sum(row) == pj["n_tokens"] * pj["n_expert_used"] for row in pj["counts"])
    check(ok, "profile", out + err)
    rc, out, err = run("info", "-m", moe, "--plan", "--gpu-mem", "0.02", "--reserve", "0", "-c", "512", "-ub", "512",
                       "--profile", prof)
    check(rc == 0 and "hottest first" in out, "plan from a profile", out + err)
    other = f"{d}/other.gguf"
    run("make-model", "--preset", "tiny-qwen3moe", "--type", "Q4_K_M", "--seed", "7", "-o", other, "-q", "-t", "2")
    rc, out, err = run("info", "-m", other, "--plan", "--gpu-mem", "0.02", "--reserve", "0", "-c", "512", "-ub", "512", "--profile", prof)
    check(rc == 1 and "different model" in err, "profile of another model", err)
    rc, out, err = run("info", "-m", other, "--plan", "--gpu-mem", "0.02", "--reserve", "0", "-c", "512", "-ub", "512", "--arena-mmap",
                       "--pack", pack)
    check(rc == 1 and "fingerprint" in err, "pack of another model", err)

    # --pcie-frac is parsed alike by every command that loads an engine (serve included)
    for cmd in ("run", "bench", "serve"):
        rc, out, err = run(cmd, "-m", moe, "--pcie-frac", "1.5")
        check(rc == 2 and "--pcie-frac takes a share from 0 to 1 or 'auto'" in err, f"{cmd} --pcie-frac 1.5", err)
        rc, out, err = run(cmd, "--help")
        check(rc == 0 and "--pcie-frac F|auto" in out, f"{cmd} --help lists --pcie-frac", out + err)

    # strata bench draws fresh tokens for every run (llama-bench's way) unless --repeat-tokens
    for extra, want in (((), "fresh"), (("--repeat-tokens",), "repeated")):
        rc, out, err = run("bench", "-m", moe, "-dev", "cpu", "-t", "2", "-p", "8", "-n", "4", "-r", "2", "-o", "json",
                           *extra)
        check(rc == 0 and out.count(f'"tokens": "{want}"') == 2, f"bench {' '.join(extra)} reports {want} tokens",
              out + err)

print("test_place_cli:", "FAIL" if cli_harness.failures else "PASS")
sys.exit(1 if cli_harness.failures else 0)
