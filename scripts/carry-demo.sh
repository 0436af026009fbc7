#!/usr/bin/env bash
# The demo model (98 MB) is larger than one device call may carry (64 MiB), so it travels in two halves over two
# back-to-back calls while the GPU machine stays warm (it is released after ~30 s idle):
#   here:           scripts/carry-demo.sh --split                  (writes .carry/demo1 and .carry/demo2)
#   call 1 (carry [".carry/debs", ".carry/demo1"]):  scripts/carry-demo.sh --stash    (part 1 -> /tmp)
#   call 2 (carry [".carry/debs", ".carry/demo2"]):  scripts/carry-demo.sh --join     (models/<demo> rebuilt, md5 checked)
# after which tests/gpu/session.sh and tests/gpu/e2e.py --demo find it.
set -euo pipefail
cd "$(dirname "$0")/.."
model=models/SmolLM2-135M-Instruct.Q4_1.gguf
case "${1:-}" in
  --split)
    [ -f "$model" ] || { echo "carry-demo.sh: $model missing (scripts/demo.sh fetches it)" >&2; exit 1; }
    rm -rf .carry/demo1 .carry/demo2 && mkdir -p .carry/demo1 .carry/demo2
    split -b 55000000 "$model" /tmp/strata-demo.part.
    mv /tmp/strata-demo.part.aa .carry/demo1/part && mv /tmp/strata-demo.part.ab .carry/demo2/part
    md5sum "$model" | awk '{print $1}' > .carry/demo2/md5
    echo "carry-demo.sh: .carry/demo1 ($(stat -c %s .carry/demo1/part) B), .carry/demo2 ($(stat -c %s .carry/demo2/part) B)" ;;
  --stash)
    cp .carry/demo1/part /tmp/strata-demo.part1 && echo "carry-demo.sh: part 1 stashed in /tmp" ;;
  --join)
    [ -f /tmp/strata-demo.part1 ] || { echo "carry-demo.sh: no part 1 in /tmp (the machine went cold: start again)" >&2; exit 1; }
    mkdir -p models && cat /tmp/strata-demo.part1 .carry/demo2/part > "$model"
    [ "$(md5sum "$model" | awk '{print $1}')" = "$(cat .carry/demo2/md5)" ] || { echo "carry-demo.sh: md5 mismatch" >&2; rm -f "$model"; exit 1; }
    echo "carry-demo.sh: $model joined" ;;
  *) sed -n '2,8p' "$0"; exit 2 ;;
esac
