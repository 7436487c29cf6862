#!/usr/bin/env bash
# Creates .venv and installs olympia with everything its tests need.
# Safe to run again: it reinstalls only when pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
EXTRAS=${OLYMPIA_EXTRAS:-test}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=".venv/.olympia-installed"
want="$(sha256sum pyproject.toml | cut -d' ' -f1) $EXTRAS"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e ".[$EXTRAS]"
  echo "$want" > "$stamp"
fi
# Iceberg's REST Compatibility Kit (tests/test_rck.py) compiles against
# Debian's JUnit 5 and AssertJ; tests/test_picture.py renders `olympia graph`
# pictures with rsvg-convert (librsvg2-bin).
missing=""
for p in junit5 libassertj-core-java librsvg2-bin; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
# olympia.spark compiles its Spark catalog class (olympia/java/) with javac:
# a JDK, not only a Java runtime.
if ! command -v javac >/dev/null 2>&1 && [ ! -x "${JAVA_HOME:-/nonexistent}/bin/javac" ]; then
  missing="$missing openjdk-17-jdk-headless"
fi
if [ -n "$missing" ] && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "setup: apt-get install$missing" >&2
  apt-get install -y -qq $missing >/dev/null 2>&1 \
    || { apt-get update -qq && apt-get install -y -qq $missing >/dev/null; }
elif [ -n "$missing" ]; then
  echo "note: Debian packages$missing are missing (installing them needs root): Iceberg's REST Compatibility Kit installs its own when it runs; tests/test_picture.py skips its rendering test without rsvg-convert" >&2
fi
if ! command -v java >/dev/null 2>&1 && [ ! -x "${JAVA_HOME:-/nonexistent}/bin/java" ]; then
  echo "note: no Java on this machine: the Spark tests will be skipped (install a JDK 17)" >&2
fi
