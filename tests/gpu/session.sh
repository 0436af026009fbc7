#!/usr/bin/env bash
# One GPU session's worth of checks, for a machine like the H200 hosts (nvcc, no -dev packages, no registry):
# unpacks the carried Debian packages, builds Strata with CUDA (sm_90 unless STRATA_GPU_ARCH), runs the kernel parity
# suite (tests/gpu/run.sh), the end-to-end CPU-vs-CUDA parity (tests/gpu/e2e.py) and, with --bench, the benchmark on
# a Qwen3-30B-A3B-shaped Q4_K_M model. Logs go to $OUT when set.
#   usage: tests/gpu/session.sh [--no-sanitizer] [--bench] [--only-bench]
set -u -o pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/strata-gpu-out}
mkdir -p "$out"
sanitize=""; bench=0; tests=1
for a in "$@"; do
  case "$a" in
    --no-sanitizer) sanitize=--no-sanitizer ;;
    --bench) bench=1 ;;
    --only-bench) bench=1; tests=0 ;;
  esac
done
t0=$SECONDS
OUT=$out tests/gpu/build.sh || exit 1
eval "$(scripts/gpu-deps.sh)"
export PATH="$PATH:/usr/local/cuda/bin"
rc=0
if [ $tests = 1 ]; then
  OUT=$out tests/gpu/run.sh --no-build $sanitize > /dev/null 2>&1 || rc=1
  grep -E "PASS|FAIL|ok |exit [0-9]|TIMEOUT|GB/s|us|µs|tok/s|TFLOP" "$out/gpu-tests.log" | tail -150
  echo "== kernel suite rc=$rc ($((SECONDS - t0)) s)"
  model=models/SmolLM2-135M-Instruct.Q4_1.gguf
  demo=(); [ -f "$model" ] && demo=(--demo "$model")
  python3 tests/gpu/e2e.py --strata build-gpu/bin/strata "${demo[@]}" \
    --vocab-from tests/tokenizer/goldens/smollm2-vocab.gguf --work /tmp/strata-e2e 2>&1 | tee "$out/e2e.log" || rc=1
  echo "== e2e done ($((SECONDS - t0)) s)"
  build-gpu/bin/test_snapshot /tmp/strata-e2e/tiny-qwen3moe-Q4_K_M.gguf cuda 2>&1 | tail -3 | tee "$out/snapshot.log" || rc=1
  for m in /tmp/strata-e2e/tiny-qwen3moe-Q4_K_M.gguf $model; do  # generation on the device, one step ahead
    [ -f "$m" ] || continue
    build-gpu/bin/test_gen "$m" cuda 2>&1 | tail -4 | tee -a "$out/gen.log" || rc=1
    # the server's decode on that path (raw HTTP; against STRATA_GEN_HOST=1's host sampling too)
    python3 tests/gpu/serve_smoke.py --strata build-gpu/bin/strata --model "$m" 2>&1 | tail -3 | tee -a "$out/gen.log" ||
      rc=1
  done
fi
if [ $bench = 1 ]; then
  m=/tmp/q30b-q4km.gguf
  [ -f $m ] || build-gpu/bin/strata make-model --preset qwen3-30b-a3b --type Q4_K_M --seed 1 -o $m 2>&1 | tail -1
  echo "== model ready ($((SECONDS - t0)) s)"
  build-gpu/bin/strata bench -m $m -dev cuda -p 512 -n 128 -r 3 2>&1 | tee "$out/bench.md" | tail -6
  echo "== bench done ($((SECONDS - t0)) s)"
fi
exit $rc
