#!/usr/bin/env bash
# Builds and runs every GPU test (tests/gpu/test_gpu_*) on a CUDA machine, then runs each again under
# compute-sanitizer memcheck with --quick (small sizes), and prints a summary table. Exits non-zero on any failure.
#
# Usage: tests/gpu/run.sh [--no-sanitizer] [--no-build] [NAME_FILTER...]
#   NAME_FILTER: run only tests whose name contains one of these (e.g. "mmvq"). Benchmarks (bench_gpu_*) run only
#   when a filter matches them (e.g. "bench_gpu_decode"), and never under the sanitizer.
# Environment:
#   OUT                  if set, the whole output is also written to $OUT/gpu-tests.log
#   STRATA_DEPS_PREFIX   prefix(es, ':'-separated) of unpacked -dev packages (e.g. PCRE2/jansson headers from .deb
#                        files: dpkg-deb -x pkg.deb PREFIX); their include/lib dirs (PREFIX/usr/... too) are added to
#                        CMAKE_PREFIX_PATH, the compiler/linker search paths, PKG_CONFIG_PATH and LD_LIBRARY_PATH
#   STRATA_GPU_BUILD     build directory (default: build-gpu in the repository root)
#   STRATA_GPU_ARCH      CMAKE_CUDA_ARCHITECTURES (default 90)
#   STRATA_GPU_CMAKE_ARGS extra arguments for the cmake configure step
#   STRATA_GPU_TIMEOUT   seconds per test run (default 480); memcheck runs get the same limit
#   STRATA_SEED          forwarded to the tests (fixed seed); otherwise each test picks and prints its own
set -u -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${STRATA_GPU_BUILD:-$ROOT/build-gpu}"
ARCH="${STRATA_GPU_ARCH:-90}"
TMO="${STRATA_GPU_TIMEOUT:-480}"
SANITIZE=1
DO_BUILD=1
FILTERS=()
for a in "$@"; do
  case "$a" in
    --no-sanitizer) SANITIZE=0 ;;
    --no-build) DO_BUILD=0 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) FILTERS+=("$a") ;;
  esac
done

if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  exec > >(tee "$OUT/gpu-tests.log") 2>&1
fi

echo "== Strata GPU tests: $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname)"
export PATH="$PATH:/usr/local/cuda/bin"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
NVCC="$(command -v nvcc || true)"
[ -n "$NVCC" ] || { echo "FAIL: nvcc not found (looked in PATH and /usr/local/cuda/bin)"; exit 1; }
"$NVCC" --version | tail -1

# ---- dependency prefix hook ---------------------------------------------------------------------------------
CMAKE_PREFIXES=()
if [ -n "${STRATA_DEPS_PREFIX:-}" ]; then
  IFS=':' read -r -a DEPS <<< "$STRATA_DEPS_PREFIX"
  for p in "${DEPS[@]}"; do
    for q in "$p" "$p/usr" "$p/usr/local"; do
      [ -d "$q" ] || continue
      CMAKE_PREFIXES+=("$q")
      [ -d "$q/include" ] && export CPATH="$q/include${CPATH:+:$CPATH}"
      for l in "$q/lib" "$q/lib/x86_64-linux-gnu" "$q/lib64"; do
        [ -d "$l" ] || continue
        export LIBRARY_PATH="$l${LIBRARY_PATH:+:$LIBRARY_PATH}"
        export LD_LIBRARY_PATH="$l${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        [ -d "$l/pkgconfig" ] && export PKG_CONFIG_PATH="$l/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
      done
      [ -d "$q/share/pkgconfig" ] && export PKG_CONFIG_PATH="$q/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
    done
  done
  echo "deps prefix: ${CMAKE_PREFIXES[*]}"
fi
PREFIX_ARG=()
if [ ${#CMAKE_PREFIXES[@]} -gt 0 ]; then
  PREFIX_ARG=("-DCMAKE_PREFIX_PATH=$(IFS=';'; echo "${CMAKE_PREFIXES[*]}")")
fi

# ---- configure and build ------------------------------------------------------------------------------------
mapfile -t SRCS < <(find "$ROOT/tests/gpu" -maxdepth 1 \( -name 'test_gpu_*.c' -o -name 'test_gpu_*.cu' -o -name 'bench_gpu_*.c' \) | sort)
TESTS=()
for s in "${SRCS[@]}"; do
  n="$(basename "$s")"; n="${n%.*}"
  [[ "$n" == bench_* && ${#FILTERS[@]} -eq 0 ]] && continue
  if [ ${#FILTERS[@]} -gt 0 ]; then
    keep=0; for f in "${FILTERS[@]}"; do [[ "$n" == *"$f"* ]] && keep=1; done
    [ $keep = 1 ] || continue
  fi
  TESTS+=("$n")
done
[ ${#TESTS[@]} -gt 0 ] || { echo "FAIL: no tests/gpu/test_gpu_* sources match"; exit 1; }

JOBS="$(nproc 2>/dev/null || echo 4)"
if [ $DO_BUILD = 1 ]; then
  GEN=()
  command -v ninja >/dev/null && [ ! -f "$BUILD/Makefile" ] && GEN=(-G Ninja)
  read -r -a EXTRA_ARGS <<< "${STRATA_GPU_CMAKE_ARGS:-}"
  echo "== configure $BUILD (CUDA arch $ARCH)"
  cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DSTRATA_ENABLE_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DCMAKE_CUDA_COMPILER="$NVCC" "${PREFIX_ARG[@]}" "${EXTRA_ARGS[@]}" || { echo "FAIL: cmake configure (see above)"; exit 1; }
  # The CPU-side check of the kernels' block math, if tests/CMakeLists.txt builds it.
  EXTRA=()
  cmake --build "$BUILD" --target help 2>/dev/null | grep -q "test_cuda_qblock" && EXTRA=(test_cuda_qblock)
  echo "== build ${TESTS[*]} ${EXTRA[*]}"
  cmake --build "$BUILD" -j "$JOBS" --target "${TESTS[@]}" "${EXTRA[@]}" || { echo "FAIL: build (see above)"; exit 1; }
fi

# ---- run ----------------------------------------------------------------------------------------------------
SAN="$(command -v compute-sanitizer || true)"
declare -A RUN_RC RUN_T SAN_RC SAN_T
FAILED=0

run_one() {  # label cmd...; sets LAST_RC, LAST_T
  local label="$1"; shift
  echo
  echo "== $label: $*"
  local t0=$SECONDS
  timeout "$TMO" "$@"
  local rc=$?
  [ $rc = 124 ] && echo "TIMEOUT after ${TMO}s"
  echo "== $label: exit $rc ($((SECONDS - t0)) s)"
  LAST_RC=$rc
  LAST_T=$((SECONDS - t0))
}

if [ -x "$BUILD/bin/test_cuda_qblock" ]; then
  run_one "test_cuda_qblock (CPU)" "$BUILD/bin/test_cuda_qblock"
  RUN_RC[test_cuda_qblock]=$LAST_RC; RUN_T[test_cuda_qblock]=$LAST_T
  [ $LAST_RC = 0 ] || FAILED=1
fi
for n in "${TESTS[@]}"; do
  bin="$BUILD/bin/$n"
  if [ ! -x "$bin" ]; then
    echo "FAIL: $bin was not built"; RUN_RC[$n]=missing; FAILED=1; continue
  fi
  run_one "$n" "$bin"
  RUN_RC[$n]=$LAST_RC; RUN_T[$n]=$LAST_T
  [ $LAST_RC = 0 ] || FAILED=1
done
if [ $SANITIZE = 1 ]; then
  if [ -z "$SAN" ]; then
    echo "FAIL: compute-sanitizer not found (pass --no-sanitizer to skip)"; FAILED=1
  else
    for n in "${TESTS[@]}"; do
      [ -x "$BUILD/bin/$n" ] || continue
      [[ "$n" == bench_* ]] && continue
      run_one "memcheck $n" "$SAN" --tool memcheck --report-api-errors no --error-exitcode 99 --print-limit 20 "$BUILD/bin/$n" --quick
      SAN_RC[$n]=$LAST_RC; SAN_T[$n]=$LAST_T
      [ $LAST_RC = 0 ] || FAILED=1
    done
  fi
fi

# ---- summary ------------------------------------------------------------------------------------------------
word() { case "$1" in 0) echo PASS ;; "") echo "-" ;; missing) echo MISSING ;; 124) echo TIMEOUT ;; 99) echo "MEMERR" ;; *) echo "FAIL($1)" ;; esac; }
echo
echo "== summary"
printf '%-28s %-10s %7s   %-10s %7s\n' test run secs memcheck secs
ALL=("${TESTS[@]}")
[ -n "${RUN_RC[test_cuda_qblock]:-}" ] && ALL=(test_cuda_qblock "${ALL[@]}")
for n in "${ALL[@]}"; do
  printf '%-28s %-10s %7s   %-10s %7s\n' "$n" "$(word "${RUN_RC[$n]:-}")" "${RUN_T[$n]:--}" \
         "$(word "${SAN_RC[$n]:-}")" "${SAN_T[$n]:--}"
done
if [ $FAILED = 0 ]; then echo "GPU TESTS: PASS"; else echo "GPU TESTS: FAIL"; fi
exit $FAILED
