#!/usr/bin/env bash
# The whole test suite: lint, type check, tests. CI runs exactly this.
# Prints one line per step (with the time it took) on standard error.
set -euo pipefail
cd "$(dirname "$0")/.."
step() {
  local what=$1
  shift
  local start=$SECONDS
  echo "test.sh: $what ..." >&2
  "$@"
  echo "test.sh: $what: done in $((SECONDS - start)) s" >&2
}
step "setting up .venv (scripts/setup.sh)" bash scripts/setup.sh
# PyIceberg's own tests (pinned sdist, cached in .cache/), run by tests/test_pyiceberg_suite.py
step "fetching PyIceberg's test suite" .venv/bin/python scripts/fetch_pyiceberg_suite.py > /dev/null
step "ruff check" .venv/bin/ruff check olympia tests benchmarks
step "ruff format --check" .venv/bin/ruff format --check olympia tests benchmarks
step "mypy" .venv/bin/mypy
echo "test.sh: pytest ..." >&2
exec .venv/bin/pytest "$@"
