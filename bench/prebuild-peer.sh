#!/usr/bin/env bash
# Builds the peer (llama.cpp's llama-bench, CUDA for sm_90) on a machine without a GPU and packs it as
# .carry/peer-bin.tar.xz, so the GPU sessions carry a ready binary instead of spending ~290 s of device time on the
# build (bench/lib.sh unpacks it). Shared libraries with the CPU backend in every x86 variant, chosen at run time
# (GGML_BACKEND_DL + GGML_CPU_ALL_VARIANTS, as llama.cpp's release builds do): the peer's CPU expert layers use the
# best ISA of the GPU host (AVX-512 where it has it), not this machine's. Needs nvcc (CUDA 13, as on the GPU hosts)
# and .carry/llama.cpp (bench/prepare-peer.sh). ~45 min on 2 cores.
#   usage: bench/prebuild-peer.sh [-j N]
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
[ "${1:-}" = "-j" ] && jobs=$2
[ -f .carry/llama.cpp/CMakeLists.txt ] || bench/prepare-peer.sh
export PATH="$PATH:/usr/local/cuda/bin"
b=build-peer-dl
cmake -S bench/peer -B $b -G Ninja -DLLAMA_SRC="$PWD/.carry/llama.cpp" -DGGML_CUDA=ON -DGGML_NATIVE=OFF \
  -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DBUILD_SHARED_LIBS=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_BUILD_RPATH='$ORIGIN' > /tmp/prebuild-peer-configure.log
cmake --build $b -j "$jobs" > /tmp/prebuild-peer-build.log 2>&1 ||
  { tail -30 /tmp/prebuild-peer-build.log; exit 1; }
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin"
cp "$(find $b -name llama-bench -type f | head -1)" "$stage/bin/"
find $b -name '*.so*' \( -type f -o -type l \) -exec cp -P {} "$stage/bin/" \;
# Not the Sapphire Rapids variant: on the CPU host it died with an illegal instruction although the CPU reports AMX
# and AVX-512 FP16 (AMX needs the kernel's per-process permission); the Ice Lake / Cooper Lake variants carry the
# AVX-512 VNNI / VBMI / BF16 paths the k-quant dot products use.
rm -f "$stage/bin/libggml-cpu-sapphirerapids.so"
strip --strip-unneeded "$stage"/bin/*.so* "$stage/bin/llama-bench" 2>/dev/null || true
# Smoke test on this host: the binary, its libraries and the CPU variant the loader picks must run.
if [ -f models/SmolLM2-135M-Instruct.Q4_1.gguf ]; then
  "$stage/bin/llama-bench" -m models/SmolLM2-135M-Instruct.Q4_1.gguf -p 16 -n 8 -r 1 > /tmp/prebuild-peer-smoke.log 2>&1 ||
    { tail -5 /tmp/prebuild-peer-smoke.log; echo "prebuild-peer.sh: the packed llama-bench does not run here" >&2; exit 1; }
fi
tar -C "$stage" -cJf .carry/peer-bin.tar.xz bin
ls -la .carry/peer-bin.tar.xz
echo "carry it with .carry/debs: run(carry=[\".carry/debs\", \".carry/peer-bin.tar.xz\"])"
