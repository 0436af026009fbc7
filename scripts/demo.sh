#!/usr/bin/env bash
# The README's first quick-start command: builds Strata and runs it on the demo model (SmolLM2-135M-Instruct).
set -euo pipefail
cd "$(dirname "$0")/.."
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)"
model=$(scripts/fetch-demo-model.sh)
build/bin/strata info -m "$model"
