#!/usr/bin/env bash
# Strata vs llama.cpp on one GPU, same run, same file: builds llama-bench (CUDA) from the trimmed source that
# bench/prepare-peer.sh put in .carry/llama.cpp, builds Strata, makes a Qwen3-30B-A3B-shaped Q4_K_M model with
# `strata make-model`, runs pp512 / tg128 / tg128 at depth 16384 on both with peak VRAM sampled by nvidia-smi, and
# prints a side-by-side table with ratios (bench/peer_table.py). Results under $OUT (default /tmp/strata-peer).
#   usage: bench/peer.sh [--no-depth] [--preset NAME] [--type MIX]
set -u -o pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/strata-peer}
mkdir -p "$out"
depth=16384; preset=qwen3-30b-a3b; mix=Q4_K_M
while [ $# -gt 0 ]; do
  case "$1" in
    --no-depth) depth=0 ;;
    --preset) preset=$2; shift ;;
    --type) mix=$2; shift ;;
  esac
  shift
done
eval "$(scripts/gpu-deps.sh)"
. bench/lib.sh
export PATH="$PATH:/usr/local/cuda/bin"
t0=$SECONDS
build_llama_bench
build_strata || exit 1
model=/tmp/$preset-$mix.gguf
[ -f "$model" ] || build-gpu/bin/strata make-model --preset "$preset" --type "$mix" --seed 1 -o "$model" 2>&1 | tail -1
model_settle  # (bench/lib.sh)
wait $peer_pid || { tail -30 "$out/peer-build.log"; exit 1; }
echo "== builds done in $((SECONDS - t0)) s"
llama=$(llama_bench_path)

vram llama "$llama" -m "$model" -ngl 99 -fa 1 -p 512 -n 128 -r 3 -o json > "$out/llama.json" 2> "$out/llama.err"
vram strata build-gpu/bin/strata bench -m "$model" -p 512 -n 128 -r 3 -o json > "$out/strata.json" 2> "$out/strata.err"
if [ "$depth" -gt 0 ]; then
  vram llama-d "$llama" -m "$model" -ngl 99 -fa 1 -p 0 -n 128 -d "$depth" -r 3 -o json > "$out/llama-d.json" 2>> "$out/llama.err"
  vram strata-d build-gpu/bin/strata bench -m "$model" -p 0 -n 128 -d "$depth" -r 3 -o json > "$out/strata-d.json" 2>> "$out/strata.err"
fi
echo "== benches done in $((SECONDS - t0)) s"
python3 bench/peer_table.py "$out" "$model" | tee "$out/peer.md"
