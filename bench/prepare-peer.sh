#!/usr/bin/env bash
# Puts a trimmed llama.cpp source tree (the peer for bench/peer.sh) in .carry/llama.cpp: only what llama-bench's
# CUDA build needs (~23 MB), taken from the llama-cpp-python source package on PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
ver=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
dst=.carry/llama.cpp
[ -f "$dst/CMakeLists.txt" ] && { echo "$dst exists"; exit 0; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps --no-binary :all: -d "$tmp" "llama-cpp-python==$ver"
tar xzf "$tmp"/llama_cpp_python-"$ver".tar.gz -C "$tmp"
src=$tmp/llama_cpp_python-$ver/vendor/llama.cpp
mkdir -p "$dst/ggml/src" "$dst/tools"
cp -r "$src"/{CMakeLists.txt,cmake,src,include,common,vendor,licenses} "$dst"/ 2>/dev/null || true
cp -r "$src"/ggml/{CMakeLists.txt,cmake,include} "$dst/ggml/"
find "$src/ggml/src" -maxdepth 1 -type f -exec cp {} "$dst/ggml/src/" \;
cp -r "$src"/ggml/src/{ggml-cuda,ggml-cpu} "$dst/ggml/src/"
cp -r "$src/tools/llama-bench" "$dst/tools/"
du -sh "$dst"
