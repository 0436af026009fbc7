#!/usr/bin/env bash
# Builds the GGUF fuzzer (clang, own build dir) and fuzzes gguf_open_memory for SECONDS, starting from the
# committed seed corpus. Exits non-zero on any finding (crash, sanitizer report, leak, timeout, OOM); the input
# that triggered it is saved under $BUILD/fuzz-gguf/artifacts/.
#   usage: tests/fuzz/run.sh SECONDS [extra libFuzzer flags]
#   env:   STRATA_FUZZ_BUILD (default: <repo>/build-fuzz), STRATA_FUZZ_JOBS (ninja -j, default 2)
set -euo pipefail
secs=${1:?usage: tests/fuzz/run.sh SECONDS [libFuzzer flags]}
shift
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${STRATA_FUZZ_BUILD:-$root/build-fuzz}
CC=clang cmake -S "$root" -B "$build" -G Ninja -DSTRATA_FUZZ=ON -DSTRATA_ENABLE_CUDA=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$build" -j"${STRATA_FUZZ_JOBS:-2}" fuzz_gguf
work=$build/fuzz-gguf
mkdir -p "$work/corpus" "$work/artifacts"
# New interesting inputs go to a scratch corpus seeded from the committed one, which stays small and reviewed.
cp -n "$root"/tests/fuzz/corpus/gguf/* "$work/corpus/" 2>/dev/null || true
# One process (no -jobs/-workers): the machine is shared. Inputs up to 4 KiB exercise every header field.
exec "$build/bin/fuzz_gguf" -max_total_time="$secs" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix="$work/artifacts/" "$@" "$work/corpus"
