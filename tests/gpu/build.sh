#!/usr/bin/env bash
# Configures (first time) and builds build-gpu on a GPU machine like the H200 hosts (nvcc, no -dev packages, no
# registry: the carried Debian packages are unpacked by scripts/gpu-deps.sh). Quiet; logs in $OUT (or /tmp).
# Prints the build time, or the first errors and exits 1.  Usage: tests/gpu/build.sh
#   STRATA_GPU_BUILD       build directory (default build-gpu); a second one holds an A/B variant, e.g.
#   STRATA_GPU_CMAKE_ARGS  extra configure arguments (first configure only; split at spaces)
#   STRATA_GPU_CUDA_FLAGS  CMAKE_CUDA_FLAGS (first configure only; may hold spaces), e.g.
#                          STRATA_GPU_BUILD=build-gpu-serial STRATA_GPU_CUDA_FLAGS="-DST_DOWN_ROWS4=0"
#   STRATA_GPU_TARGETS     targets to build (default: all)
#   STRATA_GPU_JOBS        parallel compile jobs (default: the CPU count; lower it when several builds run at once)
set -u -o pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/strata-gpu-out}
mkdir -p "$out"
eval "$(scripts/gpu-deps.sh)"
export PATH="$PATH:/usr/local/cuda/bin"
t0=$SECONDS
b=${STRATA_GPU_BUILD:-build-gpu}
if [ ! -f "$b/build.ninja" ]; then
  # shellcheck disable=SC2086
  cmake -S . -B "$b" -G Ninja ${STRATA_GPU_CMAKE_ARGS:-} ${STRATA_GPU_CUDA_FLAGS:+"-DCMAKE_CUDA_FLAGS=$STRATA_GPU_CUDA_FLAGS"} \
    -DCMAKE_BUILD_TYPE=Release -DSTRATA_ENABLE_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="${STRATA_GPU_ARCH:-90}" -DCMAKE_PREFIX_PATH="$STRATA_DEPS_PREFIX/usr" \
    -DSTRATA_PYTHON=python3 > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
fi
# shellcheck disable=SC2086
cmake --build "$b" -j "${STRATA_GPU_JOBS:-$(nproc)}" ${STRATA_GPU_TARGETS:+--target $STRATA_GPU_TARGETS} > "$out/build.log" 2>&1 || { grep -E "error|Error" "$out/build.log" | head -40; exit 1; }
echo "== built in $((SECONDS - t0)) s"
