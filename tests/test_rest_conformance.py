"""The REST server against the Iceberg REST OpenAPI file, with schemathesis
(spec/rest.md): generated requests never get a 5xx and every response fits
the schema. One bounded run (fixed seed, a few examples per operation)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from rest_helpers import PREFIX, serve

SPEC = (
    Path(__file__).resolve().parents[2] / "shared" / "iceberg-rest" / "rest-catalog-open-api.yaml"
)

if not SPEC.is_file():
    pytest.skip(f"the Iceberg REST OpenAPI file is not at {SPEC}", allow_module_level=True)


def test_generated_requests_get_no_5xx_and_fit_the_schema(tmp_path: Path) -> None:
    config = tmp_path / "schemathesis.toml"
    config.write_text(f'[parameters]\n"path.prefix" = "{PREFIX}"\n')
    with serve(tmp_path) as served:
        result = subprocess.run(
            [
                sys.executable, "-m", "schemathesis.cli", "--config-file", str(config),
                "run", str(SPEC), "--url", served.uri,
                "--checks", "not_a_server_error,response_schema_conformance",
                "--phases", "examples,fuzzing", "--max-examples", "8", "--seed", "7",
                "--exclude-deprecated", "--continue-on-failure",
                "--suppress-health-check", "filter_too_much,too_slow",
                "--workers", "1", "--no-color",
            ],
            capture_output=True, text=True, timeout=900, cwd=tmp_path,
        )  # fmt: skip
    summary = result.stdout[-4000:]
    assert "Server error" not in result.stdout, summary
    assert "Response violates schema" not in result.stdout, summary
    assert result.returncode == 0, summary
    assert " passed" in summary
