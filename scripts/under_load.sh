#!/usr/bin/env bash
# Runs pytest RUNS times in a row while BUSY busy loops keep the cores loaded,
# the load a shared CI machine sees (issue 18: load average 8-10 was measured).
# Stops at the first failing run.
#
# Usage: bash scripts/under_load.sh [RUNS] [pytest arguments...]
#   BUSY=4 (default) busy loops; RUNS defaults to 5.
# Example: bash scripts/under_load.sh 5 tests/test_group_commit.py -q
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
shift || true
busy=${BUSY:-4}
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
for _ in $(seq "$busy"); do
  python3 -c "while True: pass" &
  pids+=($!)
done
for i in $(seq "$runs"); do
  start=$SECONDS
  echo "under_load.sh: run $i of $runs with $busy busy loops ..." >&2
  .venv/bin/pytest -p no:cacheprovider "$@"
  echo "under_load.sh: run $i passed in $((SECONDS - start)) s" >&2
done
