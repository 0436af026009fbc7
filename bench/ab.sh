#!/usr/bin/env bash
# A/B of Strata variants on one GPU machine, alternating runs so that drift hits every variant alike: each variant
# is the default build with environment variables, or a second build with extra CUDA compiler flags. Prints, per
# variant, the tok/s of every round and the mean (one `strata bench` test per run).
#   usage: bench/ab.sh [-m MODEL] [-p N] [-n N] [-d DEPTH] [-r REPS] [--rounds K] [--gpu-mem G] [-x "ARGS"] NAME=SPEC...
#   -x: more `strata bench` arguments for every variant (e.g. "--pcie-frac 0.5")
#   SPEC: base | env:VAR=VAL[,VAR=VAL...] | args:BENCH-ARGS[;env:...] (e.g. "args:-ub 4096") |
#         cflags:FLAGS[;env:VAR=VAL,...] | src:DIR[;env:...] (another source tree, e.g. an earlier commit carried to
#         the GPU machine: `mkdir -p .carry/ab-base && git archive REV | tar -x -C .carry/ab-base`, carry it)
#   e.g.  bench/ab.sh base=base switch=env:STRATA_DEC_SWITCH=1 serial="cflags:-DST_DOWN_ROWS4=0"
# The model defaults to the Qwen3-30B-A3B-shaped Q4_K_M file (made when missing); -p 0 -n 128 -r 3 by default, so
# the number is tg128. Logs under $OUT (default /tmp/strata-ab).
set -u -o pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/strata-ab}
mkdir -p "$out"
model=""; pp=0; tg=128; depth=0; reps=3; rounds=2; gpumem=(); extra=
specs=()
while [ $# -gt 0 ]; do
  case "$1" in
    -m) model=$2; shift ;;
    -p) pp=$2; shift ;;
    -n) tg=$2; shift ;;
    -d) depth=$2; shift ;;
    -r) reps=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --gpu-mem) gpumem=(--gpu-mem "$2"); shift ;;
    -x) extra=$2; shift ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *=*) specs+=("$1") ;;
    *) echo "ab.sh: unknown argument $1 (variants are NAME=SPEC)" >&2; exit 2 ;;
  esac
  shift
done
[ ${#specs[@]} -ge 1 ] || { echo "ab.sh: no variants (NAME=SPEC ...)" >&2; exit 2; }
eval "$(scripts/gpu-deps.sh)"

# Per variant: build directory and environment.
names=(); dirs=(); envs=(); vargs=(); builds=(); srcdirs=(); srcbuilds=()
for sp in "${specs[@]}"; do
  name=${sp%%=*}; spec=${sp#*=}
  dir=build-gpu; env=""; va=""
  case "$spec" in
    base) ;;
    env:*) env=${spec#env:} ;;
    args:*)
      rest=${spec#args:}; va=${rest%%;env:*}
      [ "$rest" != "$va" ] && env=${rest#*;env:} ;;
    cflags:*)
      rest=${spec#cflags:}; flags=${rest%%;env:*}
      [ "$rest" != "$flags" ] && env=${rest#*;env:}
      dir=build-gpu-$name
      mkdir -p "$out/build-$name"
      (OUT=$out/build-$name STRATA_GPU_BUILD=$dir STRATA_GPU_CUDA_FLAGS="$flags" STRATA_GPU_TARGETS=strata \
        tests/gpu/build.sh > "$out/build-$name/result" 2>&1 || echo "ab.sh: build of $name failed" >> "$out/build-$name/result") &
      builds+=("$name") ;;
    src:*)
      rest=${spec#src:}; srcdir=${rest%%;env:*}; dir=$PWD/build-gpu-$name
      [ "$rest" != "$srcdir" ] && env=${rest#*;env:}
      [ -x "$srcdir/tests/gpu/build.sh" ] || { echo "ab.sh: $srcdir is not a Strata source tree" >&2; exit 2; }
      # One build per tree: a later variant of the same tree (other environment) runs the first one's binary.
      seen=""
      for ((k = 0; k < ${#srcdirs[@]}; k++)); do [ "${srcdirs[$k]}" = "$srcdir" ] && seen=${srcbuilds[$k]}; done
      if [ -n "$seen" ]; then
        names+=("$name"); dirs+=("$seen"); envs+=("${env//,/ }"); vargs+=("$va")
        continue
      fi
      srcdirs+=("$srcdir"); srcbuilds+=("$dir")
      mkdir -p "$out/build-$name"
      (cd "$srcdir" && OUT=$out/build-$name STRATA_GPU_BUILD="$dir" STRATA_GPU_TARGETS=strata tests/gpu/build.sh \
        > "$out/build-$name/result" 2>&1 || echo "ab.sh: build of $name ($srcdir) failed" >> "$out/build-$name/result") &
      builds+=("$name") ;;
    *) echo "ab.sh: variant $name: unknown spec $spec" >&2; exit 2 ;;
  esac
  names+=("$name"); dirs+=("$dir"); envs+=("${env//,/ }"); vargs+=("$va")
done
# Variant builds run in the background, alongside the default build (nvcc compiles one file per core; several
# builds keep a 16-core machine busier than one).
OUT=$out tests/gpu/build.sh || exit 1
wait
for name in ${builds[@]+"${builds[@]}"}; do
  sed "s/^/[$name] /" "$out/build-$name/result"
  grep -q "failed" "$out/build-$name/result" && exit 1
done
if [ -z "$model" ]; then
  model=/tmp/q30b.gguf
  [ -f "$model" ] || build-gpu/bin/strata make-model --preset qwen3-30b-a3b --type Q4_K_M --seed 1 -o "$model" \
    > "$out/make-model.log" 2>&1 || { tail -5 "$out/make-model.log"; exit 1; }
  sync  # a new model's writeback running under the first runs slows them (bench/lib.sh model_settle)
fi

declare -A results
for ((round = 1; round <= rounds; round++)); do
  for i in "${!names[@]}"; do
    log="$out/${names[$i]}-$round.log"
    # shellcheck disable=SC2086
    env ${envs[$i]} "${dirs[$i]}/bin/strata" bench -m "$model" -p "$pp" -n "$tg" -d "$depth" -r "$reps" \
      ${gpumem[@]+"${gpumem[@]}"} $extra ${vargs[$i]} > "$log" 2>&1
    v=$(grep -E '^\| ' "$log" | grep -vE '^\| (model|---)' | tail -1 | awk -F'|' '{print $7}' | awk '{print $1}')
    results[$i]="${results[$i]:-} ${v:-fail}"
  done
done
test_name=$(grep -E '^\| ' "$out/${names[0]}-1.log" | grep -vE '^\| (model|---)' | tail -1 | awk -F'|' '{print $6}' | xargs)
echo "| variant | spec | ${test_name:-test} t/s per round | mean |"
echo "| --- | --- | --- | ---: |"
for i in "${!names[@]}"; do
  mean=$(echo "${results[$i]}" | awk '{s = 0; n = 0; for (k = 1; k <= NF; k++) if ($k != "fail") { s += $k; n++ } printf n ? "%.2f" : "-", n ? s / n : 0}')
  echo "| ${names[$i]} | ${specs[$i]#*=} | ${results[$i]# } | $mean |"
done
echo "(strata source $(python3 scripts/src_hash.py): scripts/src_hash.py --rev REV matches a commit)"
# Hybrid runs: each variant's counters from its first round (misses, CPU jobs, prefetch), beside the speed; the logs
# under $OUT often do not travel back from the GPU machine (too many files).
for i in "${!names[@]}"; do
  hy=$(grep -E "^hybrid (tg|pp)[0-9]+( @ d[0-9]+)?:|pcie-frac auto ->" "$out/${names[$i]}-1.log" 2>/dev/null | cut -c1-170)
  [ -n "$hy" ] && { echo "${names[$i]} (round 1):"; echo "$hy" | sed 's/^/  /'; }
done
exit 0
