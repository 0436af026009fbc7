#!/usr/bin/env bash
# Where a decode step's time goes, per kernel class, in the captured graph (GPU machine, after a build-gpu build):
# runs bench/ab.sh (tg128, alternating rounds) with each kernel class of the one-token step left out
# (STRATA_DEC_SKIP) and, with --dup, launched twice (STRATA_DEC_DUP), then prints per class the microseconds per
# layer it takes (knockout: 1/base - 1/variant) and what a second, warm launch adds (duplicate: 1/variant - 1/base),
# both per token / n_layer. Their difference is the class's fixed cost per launch (launch, dependency wait, cold
# instruction fetch) against the work a warm repeat still does. Outputs are wrong in every variant but base.
#   usage: bench/knockout.sh [--dup] [--rounds K] [--layers N] [-m MODEL]
# Logs under $OUT (default /tmp/strata-knockout).
set -u -o pipefail
cd "$(dirname "$0")/.."
dup=0; rounds=2; layers=48; model=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dup) dup=1 ;;
    --rounds) rounds=$2; shift ;;
    --layers) layers=$2; shift ;;
    -m) model=(-m "$2"); shift ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "knockout.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
out=${OUT:-/tmp/strata-knockout}
mkdir -p "$out"
# The classes (engine/gpu.c DEC_SKIP_*): bit and name.
classes=("1 attn_norm" "2 qkv" "4 rope" "8 attention" "16 o_proj" "32 ffn_norm" "64 router" "128 glu" "256 down")
specs=(base=base)
for c in "${classes[@]}"; do
  set -- $c
  specs+=("k_$2=env:STRATA_DEC_SKIP=$1")
  [ $dup = 1 ] && specs+=("d_$2=env:STRATA_DEC_DUP=$1")
done
OUT=$out bench/ab.sh ${model[@]+"${model[@]}"} --rounds "$rounds" "${specs[@]}" | tee "$out/ab.md"
python3 - "$out/ab.md" "$layers" <<'EOF'
import sys
rows = {}
for line in open(sys.argv[1]):
    f = [x.strip() for x in line.split("|")]
    if len(f) > 4 and f[1] and f[1] not in ("variant", "---"):
        try: rows[f[1]] = float(f[4])
        except ValueError: pass
L = int(sys.argv[2])
base = rows.get("base")
if not base: sys.exit("knockout.sh: no base result")
print(f"\nbase {base:.1f} tok/s = {1e6 / base:.0f} us per token; per layer ({L} layers):")
print("| class | knockout: its share (us/layer) | duplicate: a warm second launch (us/layer) | fixed part (share - repeat) |")
print("| --- | ---: | ---: | ---: |")
for name in ["attn_norm", "qkv", "rope", "attention", "o_proj", "ffn_norm", "router", "glu", "down"]:
    k, d = rows.get("k_" + name), rows.get("d_" + name)
    share = (1e6 / base - 1e6 / k) / L if k else None
    rep = (1e6 / d - 1e6 / base) / L if d else None
    fixed = share - rep if share is not None and rep is not None else None
    fmt = lambda v: "-" if v is None else f"{v:.1f}"
    print(f"| {name} | {fmt(share)} | {fmt(rep)} | {fmt(fixed)} |")
EOF
