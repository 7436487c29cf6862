#!/usr/bin/env bash
# The main job. Today: a short demonstration of the catalog core.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python -m olympia.demo "$@"
