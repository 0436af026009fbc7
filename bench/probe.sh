#!/usr/bin/env bash
# Where the decode kernels' block time goes: a `-DDEC_PHASE_PROBE=1` build (decode_common.cuh: thread 0 of every
# routing-GLU, down and decode-attention block stamps clock64() at its phases) runs `strata bench` once per depth and
# prints each kernel's last running means (cycles per block; the probe's atomics slow the step, so compare phases,
# not tok/s). Extra CUDA flags (e.g. an A/B switch) build a probe of that variant in its own directory.
#   usage: bench/probe.sh [-m MODEL] [-n N] [-d "DEPTHS"] [--cflags "FLAGS"]
#   e.g.   bench/probe.sh -d "0 16384" --cflags "-DGLU_SIDE_DOWN_PF=1"
# Default model: bench/ab.sh's (the Qwen3-30B-A3B-shaped Q4_K_M, made when missing); -n 128; depths "0 16384".
# Logs under $OUT (default /tmp/strata-probe).
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-/tmp/strata-probe}
mkdir -p "$out"
model=""; tg=128; depths="0 16384"; cflags=""
while [ $# -gt 0 ]; do
  case "$1" in
    -m) model=$2; shift ;;
    -n) tg=$2; shift ;;
    -d) depths=$2; shift ;;
    --cflags) cflags=$2; shift ;;
    -h|--help) sed -n "2,9p" "$0"; exit 0 ;;
    *) echo "probe.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
eval "$(scripts/gpu-deps.sh)"
dir=build-gpu-probe
[ -n "$cflags" ] && dir=build-gpu-probe-$(printf '%s' "$cflags" | md5sum | cut -c1-8)
OUT=$out/build STRATA_GPU_BUILD=$dir STRATA_GPU_CUDA_FLAGS="-DDEC_PHASE_PROBE=1 $cflags" STRATA_GPU_TARGETS=strata \
  tests/gpu/build.sh > "$out/build.log" 2>&1 || { tail -20 "$out/build.log"; exit 1; }
if [ -z "$model" ]; then
  model=/tmp/q30b.gguf
  [ -f "$model" ] || "$dir/bin/strata" make-model --preset qwen3-30b-a3b --type Q4_K_M --seed 1 -o "$model" \
    > "$out/make-model.log" 2>&1 || { tail -5 "$out/make-model.log"; exit 1; }
  sync
fi
echo "probe build: -DDEC_PHASE_PROBE=1 $cflags ($dir); GPU: $(nvidia-smi --query-gpu=name,clocks.max.sm \
  --format=csv,noheader 2>/dev/null | head -1)"
for d in $depths; do
  log=$out/depth-$d.log
  "$dir/bin/strata" bench -m "$model" -p 0 -n "$tg" -d "$d" -r 1 > "$log" 2>&1 || { tail -5 "$log"; exit 1; }
  echo "== depth $d: $(grep -E '^\| .*tg' "$log" | tail -1 | awk -F'|' '{print $6, $7}') tok/s (probe build)"
  for k in glu down attention; do
    grep "^phase $k" "$log" | tail -1
  done
done
