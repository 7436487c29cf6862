"""PyIceberg's own catalog tests, unmodified, against olympia's PyIceberg catalog.

``scripts/fetch_pyiceberg_suite.py`` brings the tests of the pinned PyIceberg
sdist into ``.cache/``. Each case here runs one of its test files in a child
pytest and asserts on the outcome of every collected case:

* ``behaviors``: ``tests/catalog/test_catalog_behaviors.py``, whose
  ``catalog`` fixtures are replaced by ``pyiceberg_suite/catalog_conftest.py``
  (a catalog built with ``load_catalog`` and ``py-catalog-impl``).
* ``integration``: the cases of ``tests/integration/test_catalog.py`` that
  take their catalog from ``PYICEBERG_TEST_CATALOG`` and
  ``PYICEBERG_CATALOG__<NAME>__...`` environment variables.

Backends: ``local`` and ``s3`` (moto's server, with PyIceberg's ``s3.*``
properties) run olympia; ``sql`` runs SqlCatalog on SQLite loaded the same
way, a control that proves the harness (every case passes there). A case
that is expected to fail (or that the suite itself skips for a catalog) is
listed, with its reason, in ``pyiceberg_suite/xfail.tsv``; listed failures are
xfailed strictly. The run fails when any case has another outcome than
expected (a failure, an error, an unlisted skip or xfail, a listed case that
passes), when a listed case is not collected, or when fewer or more cases are
collected than expected.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import MotoS3

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent / "pyiceberg_suite"

sys.path.insert(0, str(HERE))
from olympia_suite_plugin import load_expectations  # noqa: E402

OLYMPIA_IMPL = "olympia.iceberg.OlympiaCatalog"
SQL_IMPL = "pyiceberg.catalog.sql.SqlCatalog"
DETAILS_SHOWN = 10  # failure texts shown in full; every unexpected outcome is listed


@dataclass(frozen=True)
class Suite:
    path: str
    expected: int  # cases collected
    select: str | None = None  # pytest -k expression


SUITES = {
    "behaviors": Suite("tests/catalog/test_catalog_behaviors.py", expected=237),
    "integration": Suite(
        "tests/integration/test_catalog.py", expected=40, select="rest_test_catalog"
    ),
}


@pytest.fixture(scope="module")
def suite_dir() -> Path:
    """The extracted PyIceberg suite (fetched and cached on first use)."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "fetch_pyiceberg_suite.py")],
        check=True,
        capture_output=True,
        text=True,
    )
    folder = Path(out.stdout.strip().splitlines()[-1])
    shutil.copyfile(HERE / "catalog_conftest.py", folder / "tests" / "catalog" / "conftest.py")
    return folder


def _catalog(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> tuple[str, dict[str, str]]:
    """``(py-catalog-impl, properties)`` of ``backend``; the warehouse is a base URI or empty."""
    if backend == "sql":
        return SQL_IMPL, {"uri": f"sqlite:///{tmp_path}/sql-catalog.db", "warehouse": ""}
    if backend == "local":
        return OLYMPIA_IMPL, {"warehouse": ""}
    moto: MotoS3 = request.getfixturevalue("moto_server")
    uri, _ = moto.location(request.node.name)
    return OLYMPIA_IMPL, {
        "warehouse": uri,
        "s3.endpoint": moto.endpoint_url,
        "s3.region": "us-east-1",
        "s3.access-key-id": "testing",
        "s3.secret-access-key": "testing",
    }


def _environment(
    suite: str, backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> dict[str, str]:
    impl, properties = _catalog(backend, tmp_path, request)
    warehouse = properties.pop("warehouse")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYICEBERG_", "AWS_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(ROOT)])
    env["OLYMPIA_SUITE_BACKEND"] = backend
    env["OLYMPIA_SUITE_REPORT"] = str(tmp_path / "report.json")
    if suite == "behaviors":
        if backend == "sql":
            properties["uri"] = "sqlite:///:memory:"  # as PyIceberg's own fixture
        env["OLYMPIA_SUITE_CATALOG_IMPL"] = impl
        env["OLYMPIA_SUITE_PROPERTIES"] = json.dumps(properties)
        env["OLYMPIA_SUITE_WAREHOUSE"] = warehouse
    else:
        name = "olympia"  # no "_": PyIceberg reads it from variable names as "-"
        env["PYICEBERG_TEST_CATALOG"] = name
        prefix = f"PYICEBERG_CATALOG__{name.upper()}__"
        env[prefix + "PY_CATALOG_IMPL"] = impl
        env[prefix + "WAREHOUSE"] = warehouse or f"file://{tmp_path / 'warehouse'}"
        (tmp_path / "warehouse").mkdir()
        for key, value in properties.items():
            env[prefix + key.replace(".", "__").replace("-", "_").upper()] = value
    return env


def _summary(counts: Counter[str]) -> str:
    order = ("passed", "xfailed", "failed", "error", "skipped")
    return ", ".join(f"{counts[k]} {k}" for k in order if counts[k])


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("backend", ["sql", "local", "s3"])
@pytest.mark.parametrize("suite", list(SUITES))
def test_pyiceberg_suite(
    suite: str, backend: str, suite_dir: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    spec = SUITES[suite]
    env = _environment(suite, backend, tmp_path, request)
    command = [sys.executable, "-m", "pytest", spec.path, "-p", "olympia_suite_plugin"]
    command += ["-p", "no:cacheprovider", "-q", "--timeout=300", f"--basetemp={tmp_path / 'run'}"]
    if spec.select:
        command += ["-k", spec.select]
    run = subprocess.run(command, cwd=suite_dir, env=env, capture_output=True, text=True)
    report_file = tmp_path / "report.json"
    assert report_file.exists(), (
        f"the {suite} run on {backend} wrote no report (exit {run.returncode}):\n"
        f"{run.stdout[-4000:]}\n{run.stderr[-4000:]}"
    )
    report = json.loads(report_file.read_text())
    outcomes: dict[str, str] = report["outcomes"]
    counts = Counter(outcomes.values())
    expected = {
        test_id: kind
        for test_id, (kind, _) in load_expectations(backend).items()
        if test_id.startswith(spec.path + "::")
    }
    print(f"{suite} on {backend}: {_summary(counts)} of {len(report['collected'])} collected")

    want = {"xfail": "xfailed", "skip": "skipped"}
    wrong = {
        test_id: (outcome, want.get(expected.get(test_id, ""), "passed"))
        for test_id, outcome in sorted(outcomes.items())
        if outcome != want.get(expected.get(test_id, ""), "passed")
    }
    problems = [
        f"{got.upper()} (expected {exp}) {test_id}" for test_id, (got, exp) in wrong.items()
    ]
    problems += [
        f"listed in xfail.tsv but not collected: {test_id}"
        for test_id in sorted(set(expected) - set(report["collected"]))
    ]
    if len(report["collected"]) != spec.expected:
        problems.append(f"collected {len(report['collected'])} cases, expected {spec.expected}")
    if set(outcomes) != set(report["collected"]):
        problems.append(
            f"{len(set(report['collected']) - set(outcomes))} collected cases did not run"
        )
    if run.returncode != 0 and not problems:
        problems.append(f"pytest exited with {run.returncode}")
    if problems:
        shown = list(wrong)[:DETAILS_SHOWN]
        details = [
            f"--- {test_id}\n{report['details'].get(test_id, '')[-3000:]}" for test_id in shown
        ]
        pytest.fail(
            f"PyIceberg {suite} suite on {backend}: {_summary(counts)} "
            f"of {len(report['collected'])} collected\n"
            + "\n".join(problems)
            + f"\n\nDetails of the first {len(shown)} (all in {report_file}):\n"
            + "\n\n".join(details)
            + f"\n\n--- end of the child pytest's output:\n{run.stdout[-3000:]}\n{run.stderr[-2000:]}",
            pytrace=False,
        )
