#!/usr/bin/env bash
# Builds Strata (CPU) and runs every test. The README's second quick-start command.
#   scripts/test.sh              release build + all tests (ctest)
#   scripts/test.sh --sanitize   the same under AddressSanitizer + UndefinedBehaviorSanitizer (separate build dir)
# Environment: STRATA_JOBS (parallel build/test jobs, default: CPU count), STRATA_SEED (fix random test seeds).
set -euo pipefail
cd "$(dirname "$0")/.."

sanitize=0
for arg in "$@"; do
  case "$arg" in
    --sanitize) sanitize=1 ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) echo "test.sh: unknown option '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

jobs=${STRATA_JOBS:-$(nproc)}
scripts/setup-python.sh
scripts/fetch-demo-model.sh >/dev/null
py="$PWD/.venv/bin/python"

if [ "$sanitize" = 1 ]; then
  build=build-asan
  extra=(-DSTRATA_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo)
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
else
  build=build
  extra=(-DCMAKE_BUILD_TYPE=Release)
fi
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S . -B "$build" "${generator[@]}" -DSTRATA_ENABLE_CUDA=OFF -DSTRATA_PYTHON="$py" "${extra[@]}"
cmake --build "$build" -j "$jobs"
ctest --test-dir "$build" -j "$jobs" --output-on-failure
