"""Iceberg's own REST Compatibility Kit against ``olympia serve``.

``../shared/rck/run.sh`` runs Apache Iceberg 1.10.2's conformance tests for
REST catalog servers (``CatalogTests`` and ``ViewCatalogTests`` through
Iceberg's real Java ``RESTCatalog`` client, plus Iceberg's three multi-table
``transactions/commit`` tests; 152 cases) against a URI. Here that URI is an
``olympia serve`` process (the production entry point) over a fresh local
catalog, with the system's temporary folder as an allowed location, since
the kit puts tables and views in JUnit temporary folders there.

Iceberg's reference server scores 144 successful, 0 failed, 8 aborted (the
aborted ones are assumptions such as server-side retries that the kit skips).
Olympia must score no failure and at least as many successes.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from rest_helpers import olympia_serve

ROOT = Path(__file__).resolve().parent.parent
KIT = ROOT.parent / "shared" / "rck" / "run.sh"
REFERENCE_SUCCESSFUL = 144

pytestmark = [
    pytest.mark.skipif(
        not KIT.exists(),
        reason=(
            f"Iceberg's REST Compatibility Kit is not at {KIT}: it comes with the project's "
            f"shared material (../shared beside the checkout, as CI has it)"
        ),
    ),
    pytest.mark.skipif(
        shutil.which("javac") is None, reason="the kit needs a JDK 17 (javac) on PATH"
    ),
]


def test_iceberg_rest_compatibility_kit(tmp_path: Path) -> None:
    temp = Path(tempfile.gettempdir()).resolve()
    warehouse = f"file://{tmp_path}/catalog"
    with olympia_serve(tmp_path, warehouse, "--allowed-location", f"file://{temp}") as uri:
        env = {**os.environ, "PYTHON": sys.executable, "RCK_BUILD": str(ROOT / ".cache" / "rck")}
        kit = subprocess.run(
            ["bash", str(KIT), f"{uri}/"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=1200,
        )
    found = re.search(r"^RCK (\d+) (\d+) (\d+) (\d+)", kit.stdout, re.M)
    assert found, f"the kit printed no result line:\n{kit.stdout[-4000:]}\n{kit.stderr[-2000:]}"
    successful, failed, aborted, total = map(int, found.groups())
    report = kit.stdout[-8000:]
    assert failed == 0, f"{failed} of {total} kit cases failed:\n{report}"
    assert successful >= REFERENCE_SUCCESSFUL, (
        f"{successful} successful, {aborted} aborted of {total}; Iceberg's reference server "
        f"has {REFERENCE_SUCCESSFUL} successful:\n{report}"
    )
