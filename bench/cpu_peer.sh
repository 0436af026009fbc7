#!/usr/bin/env bash
# Strata vs llama.cpp on the CPU, same run, same file: `strata bench` and llama.cpp through llama-cpp-python
# (bench/llama_cpp_bench.py, same test meanings), alternating engines per test so machine noise hits both.
#   usage: bench/cpu_peer.sh MODEL.gguf [THREADS] [REPS]     (Python with llama_cpp: $STRATA_PEER_PYTHON or .venv)
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: bench/cpu_peer.sh MODEL.gguf [THREADS] [REPS]}
threads=${2:-$(nproc)}
reps=${3:-5}
py=${STRATA_PEER_PYTHON:-.venv/bin/python}
strata=${STRATA_BIN:-build/bin/strata}
echo "model: $(basename "$model"); threads $threads; reps $reps; commit $(git rev-parse --short HEAD); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo
echo "| test | llama.cpp t/s | strata t/s | ratio |"
echo "| --- | ---: | ---: | ---: |"
for t in "-p 512 -n 0" "-p 0 -n 128"; do
  l=$("$py" bench/llama_cpp_bench.py -m "$model" $t -r "$reps" -t "$threads" | tail -1)
  s=$("$strata" bench -m "$model" $t -r "$reps" -t "$threads" -dev cpu -o json 2>/dev/null | "$py" -c 'import json,sys; r=json.load(sys.stdin)[0]; print(json.dumps({"test": r["test"], "avg_ts": r["avg_ts"], "stddev_ts": r["stddev_ts"]}))')
  "$py" - "$l" "$s" <<'PY'
import json, sys
l, s = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"| {s['test']} | {l['avg_ts']:.2f} ± {l['stddev_ts']:.2f} | {s['avg_ts']:.2f} ± {s['stddev_ts']:.2f} | {s['avg_ts'] / l['avg_ts']:.2f}x |")
PY
done
