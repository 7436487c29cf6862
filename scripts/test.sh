#!/usr/bin/env bash
# The whole test suite: lint, type check, tests. CI runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check olympia tests benchmarks
.venv/bin/ruff format --check olympia tests benchmarks
.venv/bin/mypy
.venv/bin/pytest "$@"
