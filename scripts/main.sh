#!/usr/bin/env bash
# The main job: a PySpark pipeline on an embedded olympia catalog
# (olympia/jobs/orders.py). Options go to it, e.g.
#   bash scripts/main.sh --batches 3 --orders-per-batch 500 --warehouse /tmp/lake
# Needs Python 3.11+ and Java 17 (or 11); installs the rest into .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
# The spark and s3 extras (--warehouse s3://... needs s3fs), unless .venv
# already has a larger set (the test suite's).
extras=${OLYMPIA_EXTRAS:-}
if [ -z "$extras" ]; then
  extras=spark,s3
  if [ -f .venv/.olympia-installed ]; then
    case "$(cut -d' ' -f2 .venv/.olympia-installed)" in
      test|dev|bench) extras=$(cut -d' ' -f2 .venv/.olympia-installed) ;;
    esac
  fi
fi
OLYMPIA_EXTRAS=$extras bash scripts/setup.sh
if ! command -v java >/dev/null 2>&1 && [ ! -x "${JAVA_HOME:-/nonexistent}/bin/java" ]; then
  echo "the main job runs Spark, which needs Java 17 (or 11): install a JDK" \
       "(e.g. apt-get install openjdk-17-jre-headless) or set JAVA_HOME" >&2
  exit 2
fi
exec .venv/bin/python -m olympia.jobs.orders "$@"
