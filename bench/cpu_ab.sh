#!/usr/bin/env bash
# A/B of the x86 CPU dot kernels (src/cpu/dot_x86.inc) at REV against the working tree: both compiled with the
# library's flags (-O3, AVX-512 VNNI: the kernels the engine picks on such a CPU) into one binary,
# bench/cpu_ab/cpu_ab.c, which checks that they give bitwise-equal results and times them alternately
# (PERFORMANCE.md's CPU log cites it).
# Needs a configured CPU build (default build/) for the other libraries.
#   usage: bench/cpu_ab.sh [-b BUILD] REV TYPE...      e.g. bench/cpu_ab.sh HEAD~1 IQ1_M IQ3_S IQ1_S
set -euo pipefail
cd "$(dirname "$0")/.."
build=build
if [ "${1:-}" = -b ]; then build=$2; shift 2; fi
if [ $# -lt 2 ] || [ "$1" = -h ] || [ "$1" = --help ]; then sed -n '2,7p' "$0"; exit 2; fi
rev=$1; shift
grep -q avx512_vnni /proc/cpuinfo || { echo "cpu_ab.sh: needs AVX-512 VNNI (the kernels compiled here)" >&2; exit 2; }
[ -f "$build/build.ninja" ] || cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
ninja -C "$build" strata_cpu strata_quant strata_util strata_gguf > /dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git show "$rev:src/cpu/dot_x86.inc" > "$tmp/old.inc"
cp src/cpu/dot_x86.inc "$tmp/new.inc"
flags=(-D_FILE_OFFSET_BITS=64 -D_GNU_SOURCE -Iinclude -Isrc -O3 -DNDEBUG -std=c11 -mavx2 -mfma -mf16c -mavx512f
       -mavx512bw -mavx512vl -mavx512vnni)
for v in old new; do
  printf '#define ST_SFX ab_%s\n#define ST_VNNI 1\n#include "%s/%s.inc"\n' $v "$tmp" $v > "$tmp/$v.c"
  cc "${flags[@]}" -c "$tmp/$v.c" -o "$tmp/$v.o"
done
cc "${flags[@]}" bench/cpu_ab/cpu_ab.c "$tmp/old.o" "$tmp/new.o" \
  "$build/src/cpu/libstrata_cpu.a" "$build/src/quant/libstrata_quant.a" "$build/src/gguf/libstrata_gguf.a" \
  "$build/src/util/libstrata_util.a" -lm -lpthread -o "$tmp/cpu_ab"
echo "dot_x86.inc: $rev (old) vs the working tree (new); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
"$tmp/cpu_ab" "$@"
