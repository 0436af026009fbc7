#!/usr/bin/env bash
# Hybrid expert placement (issue #6, docs/HYBRID.md) on a CUDA machine: makes small and mid-size Qwen3-MoE models,
# runs them under VRAM budgets that force expert-cache misses, and checks them against the all-in-VRAM path:
#   1. test_cache_policy            slot split / swap policy (CPU unit test, also a ctest); test_cpu_experts: the CPU
#                                   miss workers and the miss split rule (also a ctest)
#   2. hybrid_decode tiny + mid     prefill logits (2 chunks, staging) and 2,100 (tiny: its context is 4,096) / 10,000
#                                   (mid) greedy decode steps bitwise equal to all-in-VRAM, misses > 0, device memory
#                                   flat over the decode; with the default lookahead prefetch (8 per layer, own
#                                   slots, one copy per layer), a prefill after the decode (the prefetch slots
#                                   reset), copies and selections served from them > 0
#   3. the same with a swap storm   STRATA_HYBRID_PERIOD=1, 32 swaps per token: table flips under load (prefetch
#                                   off); the prefetch in the prefill staging with every copy (8), 12 under a swap
#                                   storm, 6 in its own slots; up to 8 x 32 swaps after a 1,100-token prompt
#      the i-quant mix (IQ1_M)      mid-iq1m: the same bitwise checks on an 8-layer IQ1_M file (section 5 also
#                                   runs it with CPU misses, F auto)
#   4. strata logits (CLI)          --gpu-mem --no-prefill-cpu --pcie-frac 1 vs unlimited: identical JSON (tokens, top logits, 64
#                                   greedy tokens);
#                                   also --arena-mmap with a pack, --profile from `strata profile`, and a budget too
#                                   small (must fail with the minimum named)
#   5. CPU misses (--pcie-frac)     hybrid_decode on the 8-layer 30B-shape model with F = 0.5 and auto: prefill
#                                   bitwise, 2,000 teacher-forced decode positions with top-1 agreement >= 99%
#                                   (or, where the CPU engine itself agrees with the GPU engine at < 99.5% on this
#                                   random-weight model, no worse than that control - 0.5 point; both printed),
#                                   CPU misses > 0 (share 1 - F), memory flat; the same (1,000 positions) with
#                                   host nodes (STRATA_HY_HOSTNODE=1) instead of the doorbell thread and with
#                                   the lookahead prefetch;
#                                   strata logits --pcie-frac 0.5 --deterministic == unlimited; a strata bench
#                                   --pcie-frac auto line; the prefill CPU share (hybrid_decode prefill-cpu: a
#                                   600-token chunk, top-1 >= 99% or the control's rule, CPU records > 0)
#   6. --bench                      strata bench on the full Qwen3-30B-A3B Q4_K_M at unlimited / 16 / 12 / 8 GiB
#                                   with hit rate, misses/token and PCIe GB/token, and 8 GiB with --pcie-frac auto
#                                   (bench/hybrid.sh adds llama.cpp)
# Every check prints PASS or FAIL; the last line is the summary; exit status 1 on any failure.
#   usage: tests/gpu/hybrid.sh [--bench] [--no-build] [--share F] [--only REGEX]
#   (F: share of experts in the VRAM cache, 0.25; --only: the hybrid_decode cases whose label matches, and the rest)
# Environment: STRATA_GPU_BUILD (default build-gpu), OUT (logs; default /tmp/strata-hybrid-test), STRATA_SEED.
set -u -o pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUILD=${STRATA_GPU_BUILD:-$ROOT/build-gpu}
out=${OUT:-/tmp/strata-hybrid-test}
mkdir -p "$out"
bench=0; build=1; share=0.25; only=.
while [ $# -gt 0 ]; do
  case "$1" in
    --bench) bench=1 ;;
    --no-build) build=0 ;;
    --share) share=$2; shift ;;
    --only) only=$2; shift ;;
    -h|--help) sed -n '2,34p' "$0"; exit 0 ;;
  esac
  shift
done
export PATH="$PATH:/usr/local/cuda/bin"
t0=$SECONDS
[ -x scripts/gpu-deps.sh ] && eval "$(scripts/gpu-deps.sh)"  # the carried libraries (also for --no-build)
if [ $build = 1 ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_ENABLE_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="${STRATA_GPU_ARCH:-90}" ${STRATA_DEPS_PREFIX:+-DCMAKE_PREFIX_PATH="$STRATA_DEPS_PREFIX/usr"} \
    -DSTRATA_PYTHON=python3 > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; echo "FAIL: configure"; exit 1; }
  cmake --build "$BUILD" -j "$(nproc)" --target strata hybrid_decode test_cache_policy test_cpu_experts > "$out/build.log" 2>&1 ||
    { grep -E "error|Error" "$out/build.log" | head -40; echo "FAIL: build"; exit 1; }
  echo "== built in $((SECONDS - t0)) s"
fi
S=$BUILD/bin/strata
# The long runs go through `reaped`: in the background and waited for, so that a TERM to this script (an outer
# `timeout`) stops them too; a foreground child outlived the script and loaded the host for whatever ran next.
trap 'kill $(jobs -p) 2>/dev/null; echo "hybrid.sh: stopped" >&2; exit 143' TERM INT
reaped() { "$@" & wait $!; }
PASSES=0; FAILS=0; FAILED=()
pass() { echo "PASS $*"; PASSES=$((PASSES + 1)); }
fail() { echo "FAIL $*"; FAILS=$((FAILS + 1)); FAILED+=("$1"); }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null

# budget NAME MODEL CTX E [SLOTS]: GiB that gives the hybrid engine about $share of the experts as cache slots plus
# double-buffered staging (or SLOTS expert slots in all), from the planner's own sizes (strata info --plan, f32 KV as
# the tests use; UB=N: the scratch of N-token prefill steps, with HYBRID_DECODE_UBATCH=N for the engines) and
# gpu_hybrid.c's formula (fixed = dense + KV + scratch + reserve + tables; slots = share * all + 2 * (n_expert -
# share * n_expert)).
budget() {
  "$S" info -m "$2" --plan -c "$3" -ctk f32 ${UB:+-ub $UB} --json 2>/dev/null | python3 -c '
import json, sys
p = json.load(sys.stdin)
share = float(sys.argv[1])
n_all = p["n_experts"]
E = int(sys.argv[2])
fixed = (p["dense_bytes"] + p["kv_bytes"] + p["scratch_bytes"] + p["reserve_bytes"] + p["host_map_bytes"] +
         n_all * (3 * 8 + 8) + 4096)
per_layer = int(share * E)
slots = int(sys.argv[3]) if len(sys.argv) > 3 else int(share * n_all) + 2 * (E - per_layer) + 1
b = fixed + slots * p["slot_bytes"] + p["slot_bytes"] // 2
print("%.6f" % (b / 2**30 + 1e-6))' "$share" "$4" ${5:+"$5"}
}

# ---- 1. policy unit test ------------------------------------------------------------------------------------------
if "$BUILD/bin/test_cache_policy" > "$out/policy.log" 2>&1; then pass "cache policy ($(tail -1 "$out/policy.log"))"
else cat "$out/policy.log"; fail "cache_policy"; fi
if "$BUILD/bin/test_cpu_experts" > "$out/cpu_experts.log" 2>&1; then pass "CPU miss workers + split rule ($(tail -1 "$out/cpu_experts.log"))"
else cat "$out/cpu_experts.log"; fail "cpu_experts"; fi

# ---- models ---------------------------------------------------------------------------------------------------------
tiny=/tmp/hy-tiny-qwen3moe-q4km.gguf
mid=/tmp/hy-q30b-8l-q4km-skew.gguf
[ -f $tiny ] || "$S" make-model --preset tiny-qwen3moe --type Q4_K_M --router-skew 0.5 --seed 7 -o $tiny -q
[ -f $mid ] || "$S" make-model --preset qwen3-30b-a3b --n-layer 8 --type Q4_K_M --router-skew 0.5 --seed 7 -o $mid -q
# the i-quant mix of the big files (IQ1_M experts, IQ2_XXS/IQ4 elsewhere): the fused decode kernels' i-quant
# instances under misses, swaps, the prefetch and the CPU workers' i-quant dots
midiq=/tmp/hy-q30b-8l-iq1m-skew.gguf
[ -f $midiq ] || "$S" make-model --preset qwen3-30b-a3b --n-layer 8 --type IQ1_M --router-skew 0.5 --seed 7 -o $midiq -q
ls -la $tiny $mid $midiq | awk '{print "model:", $NF, $5, "bytes"}'

# ---- 2./3. bitwise equality, misses, flat memory ------------------------------------------------------------------
run_decode() {  # label model E n_prompt n_decode [env...]  (SLOTS=N: a budget of N expert slots)
  local label=$1 model=$2 E=$3 np=$4 nd=$5 t=$SECONDS; shift 5
  [[ $label =~ $only ]] || return 0
  local g; g=$(budget "$label" "$model" $((np + nd + 1)) "$E" ${SLOTS:-})
  [ -n "$g" ] || { fail "$label: no budget (strata info --plan failed)"; return; }
  echo "== $label: --gpu-mem $g GiB ($model, prompt $np, decode $nd) $*"
  if reaped env "$@" timeout 900 "$BUILD/bin/hybrid_decode" "$model" "$g" "$np" "$nd" > "$out/$label.log" 2>&1; then
    grep -E "^(PASS|FAIL)|placement|prefill:|decode:|prefetch:|device memory" "$out/$label.log" | sed 's/^/   /'
    pass "$label ($((SECONDS - t)) s)"
  else
    grep -E "^(PASS|FAIL)|placement|prefill:|decode:|device memory|error|hybrid" "$out/$label.log" | tail -20 | sed 's/^/   /'
    fail "$label" "($((SECONDS - t)) s)"
  fi
}
run_decode tiny-decode $tiny 16 600 2100
run_decode mid-decode $mid 128 600 10000  # the issue's "no leak or growth over 10,000 decoded tokens"
run_decode mid-swap-storm $mid 128 300 400 STRATA_HYBRID_PERIOD=1 STRATA_HYBRID_SWAPS=32 STRATA_HYBRID_HALFLIFE=8 \
  STRATA_HY_PREFETCH=0  # (the prefetch is on by default: this case keeps the path without it covered)
run_decode mid-no-adapt $mid 128 100 200 STRATA_HYBRID_ADAPT=0
# after a prompt of >= 1,024 tokens, batches of 32 swaps copied and flipped before the decode (STRATA_HY_PREFILL_SWAPS)
run_decode mid-prefill-refill $mid 128 1100 400 STRATA_HY_PREFILL_SWAPS=8
# the prefetch gate's rule alone (level 1; place/cache_policy.h st_hy_pf_gate_step): the branch may go off (a second
# decode graph without it) and on again; still bitwise
run_decode mid-prefetch-gate $mid 128 1100 400 STRATA_HY_PF_GATE=1
# the gate's second level: after a long prompt the own sets refilled as cache and the branch off; the second prompt
# (also long) refills them again after decode steps, from the owners the decode left; with the branch off, no
# progress word (the default, STRATA_HY_PF_LEAN=1), and with it (STRATA_HY_PF_LEAN=0)
run_decode mid-prefetch-gate2 $mid 128 1100 400 STRATA_HY_PF_GATE=2 HYBRID_DECODE_PROMPT2=1100  # (the default level)
run_decode mid-prefetch-word $mid 128 1100 400 STRATA_HY_PF_LEAN=0 HYBRID_DECODE_PROMPT2=1100
# the decode periods' read-back without a stream synchronisation (processed a step or two later); with the gate
run_decode mid-rb-async $mid 128 300 1000 STRATA_HY_RB_ASYNC=1 STRATA_HY_PF_GATE=1
# without the prefetch's branch the route in the GLU launch, a side block counting (STRATA_HY_GLU_SIDE, default 1):
# still bitwise; and the router's tail in its place (=0)
run_decode mid-glu-side $mid 128 300 400 STRATA_HY_PREFETCH=0
run_decode mid-glu-side-off $mid 128 300 400 STRATA_HY_PREFETCH=0 STRATA_HY_GLU_SIDE=0
# the side block with the prefetch's branch on too (STRATA_HY_SNAP, default 1: the router launch snapshots the layer's
# table and sets the progress word; the CPU's ranks decided from the snapshot): bitwise, and top-1 with every miss
# the CPU's; and the router's tail in its place with the branch on (=0)
run_decode mid-prefetch-snap $mid 128 300 1000  # (a short prompt: the gate keeps the branch on)
run_decode mid-prefetch-snap-off $mid 128 300 1000 STRATA_HY_SNAP=0
log_says() {  # label pattern context what: a case that ran has the pattern in its log, else fail (context lines shown)
  if [[ $1 =~ $only ]] && ! grep -q "$2" "$out/$1.log"; then
    grep -E "$3" "$out/$1.log" | sed 's/^/   /'
    fail "$1: $4"
  fi
}
snap_on() {  # label: the log says the side block took the branch-on steps too
  log_says "$1" "with and without the prefetch's branch" "hybrid decode" "the side block was not on with the branch"
}
snap_on mid-prefetch-snap
# lookahead prefetch (side-stream copies of the next layer's predicted experts): still bitwise, copies and hits > 0
run_decode mid-prefetch $mid 128 600 2000 STRATA_HY_PREFETCH=8 STRATA_HY_PF_OWN=0 STRATA_HY_PREFETCH_MAX=8
run_decode mid-prefetch-storm $mid 128 300 400 STRATA_HY_PREFETCH=12 STRATA_HYBRID_PERIOD=1 STRATA_HYBRID_SWAPS=32 \
  STRATA_HYBRID_HALFLIFE=8
# its own L x P slots out of the cache's share, one copy per layer at most
run_decode mid-prefetch-own $mid 128 300 1000 STRATA_HY_PREFETCH=6 STRATA_HY_PREFETCH_MAX=1 STRATA_HY_PF_OWN=1
# the previous token's choice before the prediction (the default; STRATA_HY_PF_PREV=0: off): still bitwise, with the
# default copy cap and with every prediction copied, over a second long prompt (the read-back zeroes the plans' view
# of the counts; after the short first prompt the second one grows the all-position logits buffer under the captured
# decode graphs, which must be captured again)
run_decode mid-prefetch-prev $mid 128 300 1000 HYBRID_DECODE_PROMPT2=1100
run_decode mid-prefetch-noprev $mid 128 300 400 STRATA_HY_PF_PREV=0
run_decode mid-prefetch-prev-all $mid 128 300 1000 STRATA_HY_PF_PREV=1 STRATA_HY_PREFETCH_MAX=16
log_says mid-prefetch-prev "previous token's choice first" "lookahead prefetch" "the previous choice was not on"
# post plans (the default, 2 per layer; cuda/hybrid.h rule 4): layer l-1's missed choice copied on a stream of its own
# after layer l's FFN norm, for the next token; still bitwise with a larger cap and over a second long prompt; and off
run_decode mid-prefetch-post $mid 128 300 1000 STRATA_HY_PF_POST=8 HYBRID_DECODE_PROMPT2=1100
run_decode mid-prefetch-nopost $mid 128 300 400 STRATA_HY_PF_POST=0
log_says mid-prefetch-post "post plans" "lookahead prefetch|post" "the post plans were not on"
# own sets left empty at load (STRATA_HY_PF_FILL=0): the second prefill reads only the copies the decode made
run_decode mid-prefetch-nofill $mid 128 300 400 STRATA_HY_PF_FILL=0
# the prefill GEMM scratch in the first own slots (the default; 128-token steps, so that the 8 layers' own sets hold
# it): the decode's copies land there, every prefill step drops them first; still bitwise over a second
# long prompt
UB=128 run_decode mid-pf-scratch $mid 128 1100 1000 HYBRID_DECODE_UBATCH=128 HYBRID_DECODE_PROMPT2=1100 \
  STRATA_HY_PF_SCRATCH=1
log_says mid-pf-scratch "GEMM scratch.*lent from" "hybrid placement" \
  "the session's scratch was not lent from the own slots"
# a step claims only the part of the scratch it uses (the default; STRATA_HY_PF_SCRATCH_STEP=0: all of it): the
# second prompt's 70-token step drops the copies under ~half of it, the prefill and the decode after it read the
# rest's copies; still bitwise
UB=128 run_decode mid-pf-scratch-step $mid 128 1100 1000 HYBRID_DECODE_UBATCH=128 HYBRID_DECODE_PROMPT2=70
log_says mid-pf-scratch-step "step drops the copies under the part it uses" "hybrid placement" \
  "the steps did not claim their part of the scratch only"
# cache slots sized per layer (the default; the 8-layer Q4_K_M mixes Q4_K and Q6_K down records): swaps, prefill
# maps in offset units, a second long prompt over the decode's copies; still bitwise. *-slot-one: one slot size
run_decode mid-slot-fit $mid 128 1100 1000 HYBRID_DECODE_PROMPT2=1100
run_decode mid-slot-fit-storm $mid 128 300 400 STRATA_HYBRID_PERIOD=1 STRATA_HYBRID_SWAPS=32 STRATA_HYBRID_HALFLIFE=8
run_decode mid-slot-one $mid 128 1100 1000 STRATA_HY_SLOT_FIT=0 HYBRID_DECODE_PROMPT2=1100
run_decode mid-iq1m $midiq 128 300 1000
# one staging buffer beside 4 own prefetch slots per layer (E + 4 L <= slots < 2 E + 4 L), which needs many layers: the
# prefill borrows the first own slots as its second buffer and drops their copies (the second phase's prefill after
# decode); still bitwise
deep=/tmp/hy-q30b-40l-small-q4km-skew.gguf
if [[ deep-borrow =~ $only ]]; then
  [ -f $deep ] || "$S" make-model --preset qwen3-30b-a3b --n-layer 40 --n-embd 512 --n-ff-exp 256 --type Q4_K_M \
    --router-skew 0.5 --seed 7 -o $deep -q
  SLOTS=$((128 + 4 * 40 + 170)) run_decode deep-borrow $deep 128 300 400  # (mid-range: 4 own per layer, one buffer)
  if grep -q "second buffer in the prefetch" "$out/deep-borrow.log"; then
    pass "deep-borrow: the prefill borrowed own slots"
  else
    grep -E "lookahead|placement" "$out/deep-borrow.log" | sed 's/^/   /'
    fail "deep-borrow: no borrowed staging buffer"
  fi
fi

# ---- 4. CLI: strata logits ------------------------------------------------------------------------------------------
ids=$(python3 -c 'import random,sys; r=random.Random(int(sys.argv[1])); print(",".join(str(r.randrange(4096)) for _ in range(130)))' "${STRATA_SEED:-$RANDOM}")
logits() {  # name model [flags...]: top-5 logits of 130 prompt tokens + 64 greedy tokens
  local name=$1 model=$2; shift 2
  reaped timeout 600 "$S" logits -m "$model" --tokens "$ids" --top 5 --greedy 64 "$@" > "$out/$name.json" 2> "$out/$name.err"
}
gmid=$(budget cli $mid 4096 128)
if logits ref $mid && logits hyb $mid --gpu-mem "$gmid" --no-prefill-cpu --pcie-frac 1; then
  if cmp -s "$out/ref.json" "$out/hyb.json"; then pass "logits CLI: --gpu-mem $gmid == unlimited (prompt + 64 greedy)"
  else fail "logits-cli: outputs differ (see $out/ref.json, $out/hyb.json)"; fi
  grep -E "hybrid placement" "$out/hyb.err" | tail -1 | sed 's/^/   /'
else tail -3 "$out/ref.err" "$out/hyb.err"; fail "logits-cli: strata logits failed"; fi
# mmap arena from a pack
if "$S" pack -m $mid -o /tmp/hy-mid.pack -q > "$out/pack.log" 2>&1 && logits mmap $mid --gpu-mem "$gmid" --no-prefill-cpu --pcie-frac 1 --arena-mmap --pack /tmp/hy-mid.pack; then
  if cmp -s "$out/ref.json" "$out/mmap.json"; then pass "logits CLI: --arena-mmap --pack == unlimited"
  else fail "logits-mmap: outputs differ"; fi
  grep -E "expert arena|cudaHostRegister|hybrid placement" "$out/mmap.err" | tail -3 | sed 's/^/   /'
else tail -5 "$out/pack.log" "$out/mmap.err"; fail "logits-mmap: failed"; fi
# profile-driven initial contents (profile recorded on the CPU engine)
printf 'The quick brown fox jumps over the lazy dog. %.0s' $(seq 1 20) > "$out/prompt.txt"
gtiny=$(budget cli-tiny $tiny 4096 16)
if "$S" profile -m $tiny -f "$out/prompt.txt" -n 32 -o "$out/tiny.profile.json" > "$out/profile.log" 2>&1 &&
   logits pref $tiny && logits pprof $tiny --gpu-mem "$gtiny" --no-prefill-cpu --pcie-frac 1 --profile "$out/tiny.profile.json"; then
  if cmp -s "$out/pref.json" "$out/pprof.json"; then pass "logits CLI: --profile initial contents == unlimited"
  else fail "logits-profile: outputs differ"; fi
else tail -5 "$out/profile.log" "$out/pprof.err"; fail "logits-profile: failed"; fi
# a budget below the dense weights + KV + scratch must fail and name the minimum
if logits small $mid --gpu-mem 0.2; then fail "small-budget: --gpu-mem 0.2 did not fail"
elif grep -q "too small\|raise --gpu-mem" "$out/small.err"; then pass "small budget refused: $(grep -o 'at least [0-9.]* GiB' "$out/small.err" | head -1)"
else cat "$out/small.err"; fail "small-budget: unexpected error"; fi

# ---- 5. CPU misses ----------------------------------------------------------------------------------------------------
run_cpumiss() {  # label model E n_prompt n_decode pcie_frac [env...]
  local label=$1 model=$2 E=$3 np=$4 nd=$5 frac=$6 t=$SECONDS; shift 6
  [[ $label =~ $only ]] || return 0
  local g; g=$(budget "$label" "$model" $((np + nd + 1)) "$E")
  [ -n "$g" ] || { fail "$label: no budget (strata info --plan failed)"; return; }
  echo "== $label: --gpu-mem $g GiB --pcie-frac $frac ($model, prompt $np, teacher-forced decode $nd) $*"
  if reaped env "$@" timeout 900 "$BUILD/bin/hybrid_decode" "$model" "$g" "$np" "$nd" "$frac" > "$out/$label.log" 2>&1; then
    grep -E "^(PASS|FAIL)|placement|pcie-frac|prefill:|decode:|prefetch:|control:|device memory" "$out/$label.log" | sed 's/^/   /'
    pass "$label ($((SECONDS - t)) s)"
  else
    grep -E "^(PASS|FAIL)|placement|pcie-frac|prefill:|decode:|device memory|error|hybrid" "$out/$label.log" | tail -20 | sed 's/^/   /'
    fail "$label" "($((SECONDS - t)) s)"
  fi
}
run_cpumiss mid-cpumiss-0.5 $mid 128 100 2000 0.5
run_cpumiss mid-cpumiss-auto $mid 128 100 2000 auto
run_cpumiss mid-cpumiss-profile $mid 128 100 300 0 STRATA_HY_CPU_PROFILE=1  # the workers' profile (printed at close)
run_cpumiss mid-cpumiss-hostnode $mid 128 100 1000 0.5 STRATA_HY_HOSTNODE=1
run_cpumiss mid-cpumiss-slot-one $mid 128 100 1000 0 STRATA_HY_SLOT_FIT=0  # (cache slots at one size)
run_cpumiss mid-cpumiss-separate $mid 128 100 1000 0.5 STRATA_HY_SPLIT_FUSED=0
run_cpumiss mid-cpumiss-prefetch $mid 128 100 1000 0.5 STRATA_HY_PREFETCH=6 STRATA_HY_PREFETCH_MAX=1 STRATA_HY_PF_OWN=1
# without the prefetch's branch the side block classifies and rings (every miss the CPU's; STRATA_HY_GLU_SIDE)
run_cpumiss mid-cpumiss-glu-side $mid 128 100 1000 0 STRATA_HY_PREFETCH=0
run_cpumiss mid-cpumiss-snap $mid 128 100 1000 0  # (with the branch: the router's snapshot, STRATA_HY_SNAP=1)
run_cpumiss mid-cpumiss-snap-off $mid 128 100 1000 0 STRATA_HY_SNAP=0  # (with the branch: the router's tail)
run_cpumiss mid-cpumiss-prev $mid 128 100 1000 0 STRATA_HY_PF_PREV=1  # (the previous choice first)
run_cpumiss mid-cpumiss-post $mid 128 100 1000 0 STRATA_HY_PF_POST=8  # (post plans with CPU misses)
# the split's gate (default with --pcie-frac auto), forced on F 0 with thresholds that flip it every few periods: the
# plain path's graph and the split's alternate (top-1 as above, misses on both paths)
run_cpumiss mid-cpumiss-gate $mid 128 100 1000 0 STRATA_HY_SPLIT_GATE=2 STRATA_HY_SPLIT_GATE_OFF=1000 \
  STRATA_HY_SPLIT_GATE_ON=0
log_says mid-cpumiss-gate "split went off" "hybrid decode" "the split's gate never went off"
snap_on mid-cpumiss-snap
# the prefill CPU share (on by default, off in every run above so that their prefill is bitwise): a 600-token chunk
# with a share of each layer's non-resident experts computed by CPU threads; top-1 checks, records > 0
run_cpumiss mid-prefill-cpu $mid 128 600 1000 prefill-cpu
run_cpumiss mid-iq1m-cpumiss-auto $midiq 128 100 1000 auto
# --deterministic overrides --pcie-frac: bitwise all-in-VRAM again (ref.json from section 4)
if logits det $mid --gpu-mem "$gmid" --pcie-frac 0.5 --deterministic; then
  if cmp -s "$out/ref.json" "$out/det.json"; then pass "logits CLI: --pcie-frac 0.5 --deterministic == unlimited"
  else fail "logits-deterministic: outputs differ"; fi
else tail -3 "$out/det.err"; fail "logits-deterministic: strata logits failed"; fi
# the CLI path with CPU misses runs and prints its split
if logits half $mid --gpu-mem "$gmid" --pcie-frac 0.5; then
  pass "logits CLI: --pcie-frac 0.5 runs ($(grep -o 'pcie-frac [^:]*: the GPU reads [0-9]*%' "$out/half.err" | head -1))"
else tail -3 "$out/half.err"; fail "logits-pcie-frac: strata logits --pcie-frac 0.5 failed"; fi
if reaped timeout 600 "$S" bench -m $mid -p 64 -n 64 -r 2 --gpu-mem "$gmid" --pcie-frac auto > "$out/bench-mid-auto.md" 2> "$out/bench-mid-auto.err"; then
  grep -E "^\|.*(pp|tg)|^hybrid" "$out/bench-mid-auto.md" | sed 's/^/   /'
  grep -E "pcie-frac" "$out/bench-mid-auto.err" | sed 's/^/   /'
  pass "bench --gpu-mem $gmid --pcie-frac auto (8-layer model)"
else tail -5 "$out/bench-mid-auto.err"; fail "bench-mid-auto"; fi

# ---- 6. bench -------------------------------------------------------------------------------------------------------
if [ $bench = 1 ]; then
  full=/tmp/q30b-q4km.gguf
  [ -f $full ] || "$S" make-model --preset qwen3-30b-a3b --type Q4_K_M --seed 1 -o $full -q
  for g in 0 16 12 8; do
    flag=(); [ $g != 0 ] && flag=(--gpu-mem $g)
    echo "== strata bench --gpu-mem $g (0: unlimited)"
    if reaped timeout 900 "$S" bench -m $full -p 512 -n 128 -r 2 "${flag[@]}" > "$out/bench-$g.md" 2> "$out/bench-$g.err"; then
      grep -E "^\|.*(pp|tg)|^hybrid" "$out/bench-$g.md" | sed 's/^/   /'
      grep -E "hybrid placement:.*device memory" "$out/bench-$g.err" | sed 's/^/   /'
      pass "bench --gpu-mem $g"
    else tail -5 "$out/bench-$g.err"; fail "bench-$g"; fi
  done
  for frac in auto 0.5; do
    echo "== strata bench --gpu-mem 8 --pcie-frac $frac"
    if reaped timeout 900 "$S" bench -m $full -p 512 -n 128 -r 2 --gpu-mem 8 --pcie-frac $frac > "$out/bench-8-$frac.md" 2> "$out/bench-8-$frac.err"; then
      grep -E "^\|.*(pp|tg)|^hybrid" "$out/bench-8-$frac.md" | sed 's/^/   /'
      grep -E "pcie-frac|hybrid placement:.*device memory" "$out/bench-8-$frac.err" | sed 's/^/   /'
      pass "bench --gpu-mem 8 --pcie-frac $frac"
    else tail -5 "$out/bench-8-$frac.err"; fail "bench-8-$frac"; fi
  done
fi

echo
echo "== hybrid.sh: $PASSES passed, $FAILS failed${FAILED[*]:+ (${FAILED[*]})} in $((SECONDS - t0)) s; logs in $out"
[ $FAILS = 0 ]
