#!/usr/bin/env bash
# Hybrid expert placement (issue #6) on one GPU, Strata vs llama.cpp at the same VRAM budgets, same file, same run:
# Strata `bench --gpu-mem G` for G = 16, 12, 8 GiB against llama-bench with `--n-cpu-moe N` for N = 7, 19, 31
# (the experts of the first N layers stay in host RAM): the smallest N whose peak VRAM fits each budget on the
# Qwen3-30B-A3B shape, measured 2026-11-30e (peaks 16,061 / 11,979 / 7,897 MiB; one layer's experts are 349 MiB).
# Issue #6's table used N = 12, 24, 36 (2 GiB under each budget): `--ncmoe "12 24 36"` reproduces it. Plus both
# engines with everything in VRAM. Peak VRAM of every run is sampled with nvidia-smi, so the
# table shows whether each run kept to its budget. Builds like bench/peer.sh (llama-bench from .carry/llama.cpp).
# Results (JSON, logs, table) under $OUT (default /tmp/strata-hybrid).
#   usage: bench/hybrid.sh [--preset NAME] [--type MIX] [--skew S] [-p N] [-n N] [-r N] [--threads N] [--no-llama]
#          [--budgets "16 12 8"] [--ncmoe "12 24 36"] [--pcie-frac F|auto] [--agent] [--prefetch P] [--doorbell]
#          [--no-all] [--no-eval] [--rounds K]   (the host's state before each run: $OUT/host-state.log)
#   --pcie-frac: passed to Strata's budget runs (the share of the misses the GPU reads over PCIe, the rest computed by
#   CPU threads; default: Strata's own, auto); the table shows CPU misses per token and the F in use
#   --agent: also the long agent prompt of issue #6 at every budget, both engines: a 16,384-token prefill
#   (pp16384) and 256 tokens decoded after 16,384 in the KV cache (tg256 @ d16384), in a second table
#   --prefetch P: Strata's lookahead prefetch of P experts per layer (STRATA_HY_PREFETCH=P); --host-node: the CPU-miss
#   branch through graph host nodes (STRATA_HY_HOSTNODE=1) instead of the default doorbell thread
#   --no-all: no all-in-VRAM rows (both engines); --no-eval: no eval-mode tg column (both save device time on big
#   models, whose every run loads tens of GiB)
#   --rounds K: every run K times, Strata and llama.cpp in turn (odd rounds Strata first, even rounds llama.cpp
#   first; results under $OUT/r1 .. rK); the table shows the means and each ratio's range over the rounds
#   (bench/hybrid_table.py): the peer's speed moves 20-30% between runs on one machine
# Strata's tg is its generation path (greedy sampling on the device, each step queued before the host reads the
# last token; fed llama-bench's random tokens); a second Strata tg run per row with `--tg-mode eval` (one
# evaluation per token with its logits copied to the host, no sampling: llama-bench's loop) fills the "eval" column.
set -u -o pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/strata-hybrid}
mkdir -p "$out"
preset=qwen3-30b-a3b; mix=Q4_K_M; skew=0; pp=512; tg=128; reps=3; threads=16; llama_on=1
budgets="16 12 8"; ncmoe="7 19 31"; pcie=(); agent=0; all_on=1; eval_on=1; rounds=1
while [ $# -gt 0 ]; do
  case "$1" in
    --preset) preset=$2; shift ;;
    --type) mix=$2; shift ;;
    --skew) skew=$2; shift ;;
    -p) pp=$2; shift ;;
    -n) tg=$2; shift ;;
    -r) reps=$2; shift ;;
    --threads) threads=$2; shift ;;
    --no-llama) llama_on=0 ;;
    --budgets) budgets=$2; shift ;;
    --ncmoe) ncmoe=$2; shift ;;
    --pcie-frac) pcie=(--pcie-frac "$2"); shift ;;
    --agent) agent=1 ;;
    --prefetch) export STRATA_HY_PREFETCH=$2; shift ;;
    --host-node) export STRATA_HY_HOSTNODE=1 ;;
    --no-all) all_on=0 ;;
    --no-eval) eval_on=0 ;;
    --rounds) rounds=$2; shift ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
  esac
  shift
done
[ -x scripts/gpu-deps.sh ] && eval "$(scripts/gpu-deps.sh)"
. bench/lib.sh
export PATH="$PATH:/usr/local/cuda/bin"
t0=$SECONDS
llama=""
if [ $llama_on = 1 ]; then
  if [ -d .carry/llama.cpp ] || [ -f .carry/peer-bin.tar.xz ]; then
    build_llama_bench
  else
    echo "== no .carry/llama.cpp (bench/prepare-peer.sh puts it there): Strata only"
    llama_on=0
  fi
fi
build_strata || exit 1
tag=$preset-$mix; [ "$skew" != 0 ] && tag=$tag-skew$skew
model=/tmp/$tag.gguf
[ -f "$model" ] || build-gpu/bin/strata make-model --preset "$preset" --type "$mix" --router-skew "$skew" --seed 1 \
  -o "$model" 2>&1 | tail -1
model_settle  # (bench/lib.sh)
if [ $llama_on = 1 ]; then
  wait $peer_pid || { tail -30 "$out/peer-build.log"; exit 1; }
  llama=$(llama_bench_path)
fi
echo "== builds and model ready in $((SECONDS - t0)) s: $model ($(du -h "$model" | cut -f1))"

base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
echo "$base" > "$out/idle.vram"

rc=0
all=""; [ $all_on = 1 ] && all=all
# One round's runs of each engine, into $rd ($out, or $out/rN with --rounds); vram() names are relative to $out.
strata_runs() {
  [ $all_on = 1 ] && { vram "${rp}strata-all" build-gpu/bin/strata bench -m "$model" -p "$pp" -n "$tg" -r "$reps" \
    -o json > "$rd/strata-all.json" 2> "$rd/strata-all.err" ||
    { echo "strata (all in VRAM) failed:"; tail -5 "$rd/strata-all.err"; rc=1; }; }
  for g in $budgets; do
    vram "${rp}strata-$g" build-gpu/bin/strata bench -m "$model" -p "$pp" -n "$tg" -r "$reps" --gpu-mem "$g" \
      ${pcie[@]+"${pcie[@]}"} -o json > "$rd/strata-$g.json" 2> "$rd/strata-$g.err" ||
      { echo "strata --gpu-mem $g failed:"; tail -5 "$rd/strata-$g.err"; rc=1; }
    grep -E "hybrid placement|device memory|pcie-frac" "$rd/strata-$g.err" | tail -3
  done
  [ $eval_on = 1 ] && for g in $all $budgets; do  # tg by llama-bench's loop (one eval per token, logits to the host)
    gm=(); [ "$g" != all ] && gm=(--gpu-mem "$g")
    build-gpu/bin/strata bench -m "$model" -p 0 -n "$tg" -r "$reps" --tg-mode eval ${gm[@]+"${gm[@]}"} \
      ${pcie[@]+"${pcie[@]}"} -o json > "$rd/strata-$g-eval.json" 2> "$rd/strata-$g-eval.err" ||
      { echo "strata --tg-mode eval ($g) failed"; rc=1; }
  done
  [ $agent = 1 ] && for g in $all $budgets; do  # the long agent prompt: 16K of prefill, then 256 decoded at depth
    gm=(); [ "$g" != all ] && gm=(--gpu-mem "$g")
    for t in "pp:-p 16384 -n 0" "tg:-p 0 -n 256 -d 16384"; do
      host_state "${rp}agent-strata-$g-${t%%:*}"
      # shellcheck disable=SC2086
      build-gpu/bin/strata bench -m "$model" ${t#*:} -r "$reps_a" ${gm[@]+"${gm[@]}"} ${pcie[@]+"${pcie[@]}"} -o json \
        > "$rd/agent-strata-$g-${t%%:*}.json" 2> "$rd/agent-strata-$g-${t%%:*}.err" ||
        { echo "strata agent $g ${t%%:*} failed"; rc=1; }
    done
  done
  return 0
}
llama_runs() {
  [ $llama_on = 1 ] || return 0
  [ $all_on = 1 ] && { vram "${rp}llama-all" "$llama" -m "$model" -ngl 99 -fa 1 -t "$threads" -p "$pp" -n "$tg" \
    -r "$reps" -o json > "$rd/llama-all.json" 2> "$rd/llama-all.err" || rc=1; }
  for n in $ncmoe; do
    vram "${rp}llama-$n" "$llama" -m "$model" -ngl 99 -fa 1 -t "$threads" -ncmoe "$n" -p "$pp" -n "$tg" -r "$reps" \
      -o json > "$rd/llama-$n.json" 2> "$rd/llama-$n.err" ||
      { echo "llama-bench -ncmoe $n failed"; tail -5 "$rd/llama-$n.err"; rc=1; }
  done
  [ $agent = 1 ] && for n in $all $ncmoe; do
    nc=(); [ "$n" != all ] && nc=(-ncmoe "$n")
    for t in "pp:-p 16384 -n 0" "tg:-p 0 -n 256 -d 16384"; do
      host_state "${rp}agent-llama-$n-${t%%:*}"
      # shellcheck disable=SC2086
      "$llama" -m "$model" -ngl 99 -fa 1 -t "$threads" ${nc[@]+"${nc[@]}"} ${t#*:} -r "$reps_a" -o json \
        > "$rd/agent-llama-$n-${t%%:*}.json" 2> "$rd/agent-llama-$n-${t%%:*}.err" ||
        { echo "llama agent $n ${t%%:*} failed"; rc=1; }
    done
  done
  return 0
}
reps_a=$(( reps < 2 ? reps : 2 ))
rm -rf "$out"/r[0-9]* "$out/host-state.log"  # an earlier run's (bench/hybrid_table.py reads every rN it finds)
for ((r = 1; r <= rounds; r++)); do
  rd=$out; rp=""
  [ "$rounds" -gt 1 ] && { rd=$out/r$r; rp=r$r/; mkdir -p "$rd"; echo "== round $r of $rounds"; }
  if [ $((r % 2)) = 1 ]; then strata_runs; llama_runs; else llama_runs; strata_runs; fi
done
echo "== benches done in $((SECONDS - t0)) s"

echo "strata source $(python3 scripts/src_hash.py) (scripts/src_hash.py --rev REV matches a commit)"
python3 bench/hybrid_table.py "$out" "$model" "$budgets" "$ncmoe" "$pp" "$tg" | tee "$out/hybrid.md"
echo; echo "Host state before each run ($out/host-state.log):"; cat "$out/host-state.log" 2>/dev/null
exit $rc
