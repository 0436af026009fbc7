#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, own build dir) and fuzzes each for SECONDS, starting from its committed seeds:
#   gguf      gguf_open_memory on a GGUF file's bytes           (tests/fuzz/corpus/gguf)
#   pack      st_pack_parse on a pack file's header              (tests/fuzz/corpus/pack)
#   jinja     a chat template parsed and rendered                (tests/server/jinja/templates: the real ones)
#   toolcall  the tool-call / reasoning parser on model output   (tests/fuzz/corpus/toolcall)
# Exits non-zero on the first finding (crash, sanitizer report, leak, timeout, OOM); the input that triggered it is
# saved under $BUILD/fuzz-TARGET/artifacts/.
#   usage: tests/fuzz/run.sh SECONDS [TARGET...] [-- extra libFuzzer flags]   (default: every target)
#   env:   STRATA_FUZZ_BUILD (default: <repo>/build-fuzz), STRATA_FUZZ_JOBS (ninja -j, default 2)
set -euo pipefail
secs=${1:?usage: tests/fuzz/run.sh SECONDS [TARGET...] [-- libFuzzer flags]}
shift
targets=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do targets+=("$1"); shift; done
[ "${1:-}" = -- ] && shift
[ ${#targets[@]} -gt 0 ] || targets=(gguf pack jinja toolcall)
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${STRATA_FUZZ_BUILD:-$root/build-fuzz}
CC=clang cmake -S "$root" -B "$build" -G Ninja -DSTRATA_FUZZ=ON -DSTRATA_ENABLE_CUDA=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$build" -j"${STRATA_FUZZ_JOBS:-2}" "${targets[@]/#/fuzz_}"
for t in "${targets[@]}"; do
  case $t in
    gguf) seeds=$root/tests/fuzz/corpus/gguf; max_len=4096 ;;      # every header field
    pack) seeds=$root/tests/fuzz/corpus/pack; max_len=16384 ;;
    jinja) seeds=$root/tests/server/jinja/templates; max_len=24576 ;;  # the largest real template whole
    toolcall) seeds=$root/tests/fuzz/corpus/toolcall; max_len=2048 ;;
    *) echo "tests/fuzz/run.sh: unknown target '$t' (gguf, pack, jinja, toolcall)" >&2; exit 2 ;;
  esac
  work=$build/fuzz-$t
  mkdir -p "$work/corpus" "$work/artifacts"
  # New interesting inputs go to a scratch corpus seeded from the committed one, which stays small and reviewed.
  cp -n "$seeds"/* "$work/corpus/" 2>/dev/null || true
  echo "== fuzz_$t: $secs s"
  # One process (no -jobs/-workers): the machine is shared.
  "$build/bin/fuzz_$t" -max_total_time="$secs" -max_len=$max_len -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$work/artifacts/" "$@" "$work/corpus"
done
