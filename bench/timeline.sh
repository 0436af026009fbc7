#!/usr/bin/env bash
# Where a decode step's time goes on the GPU: runs `strata bench` once under the CUPTI injection library
# (bench/timeline/inject.c: every kernel's start and end, graph replays included) and reads the trace with
# bench/timeline.py (span, main-chain busy / idle / PDL overlap, the prefetch side branch beside and after the main
# chain, per-kernel durations with and without a prefetch copy running).
#   usage: bench/timeline.sh [-m MODEL] [-n N] [--steps S] [-- STRATA-BENCH-ARGS...]
#   e.g.   bench/timeline.sh -- --gpu-mem 16
# Default model: bench/ab.sh's (the Qwen3-30B-A3B-shaped Q4_K_M, made when missing); -n 32 tokens, the last 20
# graph replays read. CUPTI's records add a little time per kernel: compare steps within one trace, not against
# `strata bench`'s tok/s. Output under $OUT (default /tmp/strata-timeline): timeline.csv, bench.log, report.md.
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-/tmp/strata-timeline}
mkdir -p "$out"
model=""; tg=32; steps=20; extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    -m) model=$2; shift ;;
    -n) tg=$2; shift ;;
    --steps) steps=$2; shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n "2,10p" "$0"; exit 0 ;;
    *) echo "timeline.sh: unknown argument $1 (strata bench arguments go after --)" >&2; exit 2 ;;
  esac
  shift
done
eval "$(scripts/gpu-deps.sh)"
OUT=$out STRATA_GPU_TARGETS="strata strata_timeline" tests/gpu/build.sh || exit 1
lib=$(find build-gpu -name libstrata_timeline.so | head -1)
[ -n "$lib" ] || { echo "timeline.sh: libstrata_timeline.so was not built (the toolkit has no CUPTI?)" >&2; exit 1; }
if [ -z "$model" ]; then
  model=/tmp/q30b.gguf
  [ -f "$model" ] || build-gpu/bin/strata make-model --preset qwen3-30b-a3b --type Q4_K_M --seed 1 -o "$model" \
    > "$out/make-model.log" 2>&1 || { tail -5 "$out/make-model.log"; exit 1; }
  sync
fi
CUDA_INJECTION64_PATH=$PWD/$lib STRATA_TIMELINE_OUT=$out/timeline.csv \
  build-gpu/bin/strata bench -m "$model" -p 0 -n "$tg" -r 1 ${extra[@]+"${extra[@]}"} > "$out/bench.log" 2>&1 ||
  { tail -20 "$out/bench.log"; exit 1; }
grep -E "strata timeline|^\| |^hybrid tg" "$out/bench.log" | tail -8
python3 bench/timeline.py "$out/timeline.csv" --steps "$steps" | tee "$out/report.md"
