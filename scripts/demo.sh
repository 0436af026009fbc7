#!/usr/bin/env bash
# The README's first quick-start command: builds Strata, shows the demo model (SmolLM2-135M-Instruct) and chats
# with it on the CPU. An optional argument replaces the prompt.
set -euo pipefail
cd "$(dirname "$0")/.."
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)"
model=$(scripts/fetch-demo-model.sh)
build/bin/strata info -m "$model" | head -20
echo
build/bin/strata run -m "$model" --chat -p "${1:-Explain in three sentences why the sky is blue.}" -n 160 --seed 42
