#!/usr/bin/env bash
# Kernel-by-kernel profile of Strata's one-token decode step with Nsight Compute (GPU machine, after a build-gpu
# build): runs `strata bench -p 0 -n N` on a Qwen3-30B-A3B-shaped Q4_K_M model cut to a few layers (same layer
# shapes and types, so per-layer kernels are representative), skips the first decode steps and records one
# step's kernels (graph nodes profiled one by one: durations exclude launch gaps). Prints per kernel: duration,
# DRAM bytes read, DRAM throughput (% of peak), achieved occupancy, grid, registers; then the sum per layer.
#   usage: bench/profile_decode.sh [--layers N] [--depth D] [--detail KERNEL_REGEX] [--source KERNEL_REGEX]
#   --detail: also a full-section report (warp stall reasons, memory chart) of the first launch of each kernel
#             whose name matches, written to $OUT/ncu-detail.txt.
#   --source: per-instruction warp stall samples (SASS) of one launch of the matching kernel: $OUT/ncu-source.csv,
#             the 40 instructions with the most samples printed.
set -u -o pipefail
cd "$(dirname "$0")/.."
layers=4; depth=0; detail=""; source=""
while [ $# -gt 0 ]; do
  case "$1" in
    --layers) layers=$2; shift ;;
    --depth) depth=$2; shift ;;
    --detail) detail=$2; shift ;;
    --source) source=$2; shift ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "profile_decode.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
out=${OUT:-/tmp/strata-profile}
eval "$(scripts/gpu-deps.sh)"  # the build links libmicrohttpd from the carried packages
mkdir -p "$out"
export PATH="$PATH:/usr/local/cuda/bin"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "profile_decode.sh: ncu not found" >&2; exit 1; }
bin=build-gpu/bin/strata
m=/tmp/q30b-${layers}l.gguf
[ -f "$m" ] || $bin make-model --preset qwen3-30b-a3b --n-layer "$layers" --type Q4_K_M --seed 1 -o "$m" > /dev/null
# Kernels per decode step: ~9 per layer + embedding + head + sampling; skip 3 steps' worth, take a bit over one.
per_step=$((layers * 9 + 8))
metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
metrics=$metrics,sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__registers_per_thread
"$NCU" --clock-control none --graph-profiling node --launch-skip $((per_step * 3 + 40)) --launch-count $((per_step + 4)) \
  --metrics "$metrics" --csv $bin bench -m "$m" -p 0 -n 12 -d "$depth" -r 1 > "$out/ncu-decode.csv" 2> "$out/ncu.err"
python3 - "$out/ncu-decode.csv" "$layers" <<'EOF'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
hdr, rows = rows[0], rows[1:]
ix = {h: i for i, h in enumerate(hdr)}
k = collections.OrderedDict()
for r in rows:
    key = (r[ix["ID"]], r[ix["Kernel Name"]].split("(")[0][:40])
    k.setdefault(key, {})[r[ix["Metric Name"]]] = r[ix["Metric Value"]].replace(",", "")
tot = 0.0
print(f"{'kernel':40s} {'us':>8s} {'MB read':>8s} {'dram%':>6s} {'occ%':>6s} {'grid':>6s} {'regs':>5s}")
per = collections.defaultdict(float)
for (i, name), m in k.items():
    us = float(m.get("gpu__time_duration.sum", 0)) / 1e3
    mb = float(m.get("dram__bytes_read.sum", 0)) / 1e6
    tot += us
    per[name] += us
    print(f"{name:40s} {us:8.2f} {mb:8.2f} {float(m.get('dram__throughput.avg.pct_of_peak_sustained_elapsed', 0)):6.1f} "
          f"{float(m.get('sm__warps_active.avg.pct_of_peak_sustained_active', 0)):6.1f} {m.get('launch__grid_size', '?'):>6s} "
          f"{m.get('launch__registers_per_thread', '?'):>5s}")
print(f"sum of kernel durations: {tot:.1f} us over {len(k)} launches")
for n, us in sorted(per.items(), key=lambda a: -a[1]):
    print(f"  {n:40s} {us:8.2f} us")
EOF
if [ -n "$detail" ]; then
  # Per-issue stall cycles by reason (the WarpStateStats section prints only their total).
  stalls=""
  for r in long_scoreboard short_scoreboard wait math_pipe_throttle mio_throttle lg_throttle barrier membar \
           no_instruction dispatch_stall not_selected selected branch_resolving drain sleeping tex_throttle misc; do
    stalls=$stalls${stalls:+,}smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio
  done
  # (with -k, --launch-skip counts only the matching launches: skip the first 3 steps' worth of them)
  "$NCU" --clock-control none --graph-profiling node --launch-skip $((layers * 3)) -k "regex:$detail" \
    --launch-count 6 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
    --section LaunchStats --section Occupancy --section SourceCounters --metrics "$stalls" $bin bench -m "$m" -p 0 -n 12 -d "$depth" -r 1 > "$out/ncu-detail.txt" 2>&1
  grep -E "^  [a-z_]+.*\(|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Stall|stalled|Warp Cycles|Registers|Theoretical Occ|L2 Hit|Block Limit" \
    "$out/ncu-detail.txt" | head -${STRATA_PROFILE_LINES:-120}
fi
if [ -n "$source" ]; then
  "$NCU" --clock-control none --graph-profiling node --launch-skip $((layers * 3)) -k "regex:$source" --launch-count 1 \
    --section WarpStateStats --section SourceCounters -f -o "$out/ncu-source" $bin bench -m "$m" -p 0 -n 12 -d "$depth" \
    -r 1 > "$out/ncu-source.log" 2>&1 || { tail -5 "$out/ncu-source.log"; exit 1; }
  "$NCU" --import "$out/ncu-source.ncu-rep" --page source --csv --print-source sass > "$out/ncu-source.csv" 2>&1 ||
    { head -5 "$out/ncu-source.csv"; exit 1; }
  python3 - "$out/ncu-source.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hdr_i = next((i for i, r in enumerate(rows) if any("Stall Sampling" in c for c in r)), None)
if hdr_i is None:
    print("no stall-sampling column; first lines:"); [print(",".join(r)[:160]) for r in rows[:5]]; sys.exit(0)
hdr, body = rows[hdr_i], rows[hdr_i + 1:]
cols = [i for i, c in enumerate(hdr) if "Stall Sampling" in c]
col = next((i for i in cols if "(All" in hdr[i]), cols[0])
src = next((i for i, c in enumerate(hdr) if c.strip() in ("Source", "SASS")), 1)
addr = next((i for i, c in enumerate(hdr) if "Address" in c), 0)
def num(v):
    try: return float(v.replace(",", ""))
    except ValueError: return 0.0
tot = sum(num(r[col]) for r in body if len(r) > col)
print(f"stall samples: {tot:.0f} over {len(body)} instructions (column '{hdr[col]}')")
for r in sorted((r for r in body if len(r) > col), key=lambda r: -num(r[col]))[:40]:
    print(f"{num(r[col]) / max(tot, 1) * 100:5.1f}%  {r[addr]:>6s}  {r[src][:90]}")
PY
fi
