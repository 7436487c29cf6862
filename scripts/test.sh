#!/usr/bin/env bash
# The whole test suite: lint, type check, tests. CI runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# PyIceberg's own tests (pinned sdist, cached in .cache/), run by tests/test_pyiceberg_suite.py
.venv/bin/python scripts/fetch_pyiceberg_suite.py > /dev/null
.venv/bin/ruff check olympia tests benchmarks
.venv/bin/ruff format --check olympia tests benchmarks
.venv/bin/mypy
.venv/bin/pytest "$@"
