#!/usr/bin/env bash
# Creates .venv with the Python packages the tests compare against (numpy, the gguf reference package, jinja2).
# Idempotent: does nothing when .venv already has them.
set -euo pipefail
cd "$(dirname "$0")/.."
req=scripts/requirements-test.txt
if [ -x .venv/bin/python ] && [ .venv/.stamp -nt "$req" ]; then exit 0; fi
python3 -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -r "$req"
touch .venv/.stamp
