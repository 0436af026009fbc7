#!/usr/bin/env bash
# For GPU machines without -dev packages or a registry (the H200 hosts): unpacks the Debian packages carried in
# .carry/debs (fetch them here with scripts/gpu-deps.sh --download) into a prefix and prints the environment that
# lets CMake and pkg-config find them. Usage on the GPU machine:  eval "$(scripts/gpu-deps.sh)"
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs="libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libjansson-dev libjansson4
      libutf8proc-dev libutf8proc2 libmicrohttpd-dev libmicrohttpd12"
if [ "${1:-}" = "--download" ]; then
  mkdir -p .carry/debs
  (cd .carry/debs && apt-get download $pkgs)
  exit 0
fi
prefix=${STRATA_DEPS_PREFIX:-/tmp/strata-deps}
if [ ! -d "$prefix/usr/include" ]; then
  mkdir -p "$prefix"
  for f in .carry/debs/*.deb; do dpkg -x "$f" "$prefix"; done
fi
lib=$prefix/usr/lib/x86_64-linux-gnu
echo "export STRATA_DEPS_PREFIX=$prefix"
echo "export PKG_CONFIG_PATH=$lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$prefix"
echo "export CMAKE_PREFIX_PATH=$prefix/usr LIBRARY_PATH=$lib LD_LIBRARY_PATH=$lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
echo "export CPATH=$prefix/usr/include"
