#!/usr/bin/env bash
# GPU prefill step size (-ub) on a long prompt: a 5,000-token prompt on the 8-layer Qwen3-30B-A3B-shaped test model,
# last-position logits (top 5) + 16 greedy tokens by `strata logits --last`, with every weight in VRAM and in hybrid
# placement, in 512-, 2048- (all in VRAM: the default) and 4096-token steps (hybrid: the default). Checks that the same step size gives the same bits in both
# placements (hybrid streams the experts; the arithmetic is the all-in-VRAM one), that --deterministic gives the
# all-in-VRAM default's bits, and reports how far the step sizes agree with each other (they need not be bitwise:
# cuBLAS may pick another algorithm for another size).
#   usage: tests/gpu/chunk.sh [--no-build]   (after tests/gpu/build.sh; logs under $OUT)
set -u -o pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/strata-chunk}
mkdir -p "$out"
[ "${1:-}" = --no-build ] || OUT=$out tests/gpu/build.sh || exit 1
[ -x scripts/gpu-deps.sh ] && eval "$(scripts/gpu-deps.sh)"
S=build-gpu/bin/strata
mid=/tmp/hy-q30b-8l-q4km-skew.gguf  # the same file as tests/gpu/hybrid.sh
[ -f $mid ] || "$S" make-model --preset qwen3-30b-a3b --n-layer 8 --type Q4_K_M --router-skew 0.5 --seed 7 -o $mid -q
ids=$(python3 -c 'import random,sys; r=random.Random(int(sys.argv[1])); print(",".join(str(r.randrange(4096)) for _ in range(5000)))' "${STRATA_SEED:-$RANDOM}")
G=3.9  # hybrid: ~20% of the experts as cache slots at -ub 4096 (strata info --plan)
PASSES=0; FAILS=0
pass() { echo "PASS $*"; PASSES=$((PASSES + 1)); }
fail() { echo "FAIL $*"; FAILS=$((FAILS + 1)); }
run() {  # name flags...
  local name=$1; shift
  local t0=$SECONDS
  timeout 300 "$S" logits -m $mid --tokens "$ids" --last --top 5 --greedy 16 "$@" > "$out/$name.json" 2> "$out/$name.err" ||
    { tail -3 "$out/$name.err"; fail "$name: strata logits failed"; return 1; }
  grep -q "hybrid placement:" "$out/$name.err" && echo "   $name: $(grep -o 'scratch [^)]*)' "$out/$name.err" | head -1), $((SECONDS - t0)) s"
  return 0
}
run vram512 -ub 512; run vram2048; run vram4096 -ub 4096
# (--no-prefill-cpu --pcie-frac 1: the steps of up to 1024 tokens, incl. a 4096-step run's last 904, and the decode
# would otherwise have a CPU share)
run hy4096 --gpu-mem $G --no-prefill-cpu --pcie-frac 1; run hydet --gpu-mem $G --deterministic
run hy512 --gpu-mem $G -ub 512 --no-prefill-cpu --pcie-frac 1; run hy2048 --gpu-mem $G -ub 2048 --no-prefill-cpu --pcie-frac 1
for f in hy2048 hydet hy512 hy4096; do grep -q "hybrid placement:" "$out/$f.err" || fail "$f: not in hybrid placement"; done
same() {  # a b label
  if cmp -s "$out/$1.json" "$out/$2.json"; then pass "$3"; else fail "$3"; fi
}
same hy4096 vram4096 "hybrid default (-ub 4096) == all in VRAM at -ub 4096, bitwise (top-5 logits + 16 greedy)"
same hy512 vram512 "hybrid -ub 512 == all in VRAM at -ub 512, bitwise"
same hydet vram2048 "hybrid --deterministic == all in VRAM default (2048), bitwise"
same hy2048 vram2048 "hybrid -ub 2048 == all in VRAM default, bitwise"
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
j = {n: json.load(open(f"{out}/{n}.json")) for n in ("vram512", "vram2048", "vram4096")}
for a, b in (("vram2048", "vram512"), ("vram2048", "vram4096")):
    ta, tb = j[a]["positions"][0]["top"], j[b]["positions"][0]["top"]
    d = max(abs(x[1] - y[1]) for x, y in zip(ta, tb)) if [x[0] for x in ta] == [y[0] for y in tb] else None
    g = sum(x == y for x, y in zip(j[a]["greedy"], j[b]["greedy"]))
    print(f"   {a} vs {b}: last-position top-5 ids {'equal, max |logit diff| %.2e' % d if d is not None else 'differ'}; "
          f"greedy {g} of {len(j[a]['greedy'])} equal")
PY
echo "== chunk.sh: $PASSES passed, $FAILS failed"
[ $FAILS = 0 ]
