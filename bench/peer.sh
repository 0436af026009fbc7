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
export PATH="$PATH:/usr/local/cuda/bin"
t0=$SECONDS
(cmake -S bench/peer -B build-peer -G Ninja -DLLAMA_SRC="$PWD/.carry/llama.cpp" -DGGML_CUDA=ON -DGGML_NATIVE=OFF \
   -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release && cmake --build build-peer -j 14 --target llama-bench) \
  > "$out/peer-build.log" 2>&1 &
peer_pid=$!
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCMAKE_PREFIX_PATH="$STRATA_DEPS_PREFIX/usr" > "$out/strata-build.log" 2>&1 &&
  cmake --build build-gpu -j 4 --target strata >> "$out/strata-build.log" 2>&1 || { tail -20 "$out/strata-build.log"; exit 1; }
model=/tmp/$preset-$mix.gguf
[ -f "$model" ] || build-gpu/bin/strata make-model --preset "$preset" --type "$mix" --seed 1 -o "$model" 2>&1 | tail -1
wait $peer_pid || { tail -30 "$out/peer-build.log"; exit 1; }
echo "== builds done in $((SECONDS - t0)) s"
llama=build-peer/bin/llama-bench
[ -x $llama ] || llama=$(find build-peer -name llama-bench -type f | head -1)

vram() {  # vram NAME CMD...: runs CMD while sampling memory.used; peak MiB into $out/NAME.vram
  local name=$1; shift
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$out/$name.vram.log" &
  local smi=$!
  "$@"
  local rc=$?
  kill $smi 2>/dev/null; wait $smi 2>/dev/null
  sort -n "$out/$name.vram.log" | tail -1 > "$out/$name.vram"
  return $rc
}
vram llama "$llama" -m "$model" -ngl 99 -fa 1 -p 512 -n 128 -r 3 -o json > "$out/llama.json" 2> "$out/llama.err"
vram strata build-gpu/bin/strata bench -m "$model" -p 512 -n 128 -r 3 -o json > "$out/strata.json" 2> "$out/strata.err"
if [ "$depth" -gt 0 ]; then
  vram llama-d "$llama" -m "$model" -ngl 99 -fa 1 -p 0 -n 128 -d "$depth" -r 3 -o json > "$out/llama-d.json" 2>> "$out/llama.err"
  vram strata-d build-gpu/bin/strata bench -m "$model" -p 0 -n 128 -d "$depth" -r 3 -o json > "$out/strata-d.json" 2>> "$out/strata.err"
fi
echo "== benches done in $((SECONDS - t0)) s"
python3 bench/peer_table.py "$out" "$model" | tee "$out/peer.md"
