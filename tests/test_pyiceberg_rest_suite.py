"""PyIceberg's REST-facing test files, unmodified, against olympia's REST server.

The pinned PyIceberg sdist's tests come from ``scripts/fetch_pyiceberg_suite.py``
(cached in ``.cache/``). Each case starts an olympia REST server over a fresh
warehouse, with the namespace ``default`` that PyIceberg's docker test
environment provisions, and runs some of the suite's files in a child pytest:

* ``env``: ``tests/integration/test_catalog.py``, the cases whose catalog is
  ``load_catalog(os.environ["PYICEBERG_TEST_CATALOG"])``: a ``type=rest``
  catalog on this server (any free port), configured through
  ``PYICEBERG_CATALOG__<NAME>__*`` variables.
* ``localhost-8181``: the files and cases that expect a REST catalog at
  ``http://localhost:8181`` (the server binds 127.0.0.1:8181 for the run, or
  the case is skipped, naming the reason, when that port is taken):
  the ``rest_catalog`` cases and ``test_rest_*`` functions of
  ``tests/integration/test_catalog.py``, ``test_rest_catalog.py``,
  ``test_rest_schema.py`` and ``test_rest_scan_planning_integration.py``
  (the server does not advertise scan planning, so PyIceberg plans locally).
  Not run: ``test_rest_manifest.py``, which reads a table
  (``default.test_all_types``) that the docker environment writes with Spark
  and imports ``fastavro``, which is not a dependency of PyIceberg.

Cases expected to fail (or that the suite itself skips for a REST catalog)
are listed with their reason in ``pyiceberg_rest_suite/xfail_rest.tsv``;
listed failures are xfailed strictly. The run fails
on any other outcome than expected (a failure, an error, an unexpected skip,
a listed case that passes) and when the number of collected cases changes.
The report is written by ``pyiceberg_suite/olympia_suite_plugin.py``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from rest_helpers import PREFIX, Served

from olympia.iceberg import OlympiaCatalog
from olympia.rest import BackgroundServer, create_app, open_catalog

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
PLUGINS = (HERE / "pyiceberg_suite", HERE / "pyiceberg_rest_suite")
sys.path.insert(0, str(PLUGINS[1]))
from rest_suite_plugin import expectation_for, load_xfails  # noqa: E402

FIXED_PORT = 8181


@dataclass(frozen=True)
class Run:
    files: tuple[str, ...]
    expected: int  # cases collected
    select: str | None = None  # pytest -k expression
    port: int = 0  # 0: any free port


RUNS = {
    "env": Run(("tests/integration/test_catalog.py",), expected=40, select="rest_test_catalog"),
    "localhost-8181": Run(
        (
            "tests/integration/test_catalog.py",
            "tests/integration/test_rest_catalog.py",
            "tests/integration/test_rest_schema.py",
            "tests/integration/test_rest_scan_planning_integration.py",
        ),
        expected=44 + 6 + 348 + 7,
        select="not test_catalog.py or rest_catalog or test_rest_",
        port=FIXED_PORT,
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
    return Path(out.stdout.strip().splitlines()[-1])


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.fixture
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Served]:
    port = RUNS[request.node.callspec.params["run"]].port
    if port and not _port_free(port):
        pytest.skip(f"127.0.0.1:{port} is taken; PyIceberg's REST files expect the server there")
    warehouse = f"file://{tmp_path}/warehouse"
    catalog = open_catalog(warehouse)
    assert isinstance(catalog, OlympiaCatalog)
    with BackgroundServer(create_app(catalog, prefix=PREFIX), port=port) as background:
        served = Served(background, catalog, warehouse)
        served.client().create_namespace("default")  # as PyIceberg's docker environment has it
        yield served
    catalog.close()


def _environment(served: Served, report: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYICEBERG_", "AWS_"))}
    env["PYTHONPATH"] = os.pathsep.join([*map(str, PLUGINS), str(ROOT)])
    env["OLYMPIA_SUITE_BACKEND"] = "rest"  # no case of pyiceberg_suite/xfail.tsv is for it
    env["OLYMPIA_SUITE_REPORT"] = str(report)
    name = "olympia"
    env["PYICEBERG_TEST_CATALOG"] = name
    env[f"PYICEBERG_CATALOG__{name.upper()}__TYPE"] = "rest"
    env[f"PYICEBERG_CATALOG__{name.upper()}__URI"] = served.uri
    return env


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("run", list(RUNS))
def test_pyiceberg_rest_suite(run: str, suite_dir: Path, server: Served, tmp_path: Path) -> None:
    spec = RUNS[run]
    report_file = tmp_path / "report.json"
    command = [sys.executable, "-m", "pytest", *spec.files]
    command += ["-p", "olympia_suite_plugin", "-p", "rest_suite_plugin", "-p", "no:cacheprovider"]
    command += ["-q", "--timeout=300", f"--basetemp={tmp_path / 'run'}"]
    if spec.select:
        command += ["-k", spec.select]
    child = subprocess.run(
        command,
        cwd=suite_dir,
        env=_environment(server, report_file),
        capture_output=True,
        text=True,
    )
    assert report_file.exists(), (
        f"the {run} run wrote no report (exit {child.returncode}):\n"
        f"{child.stdout[-4000:]}\n{child.stderr[-4000:]}"
    )
    report = json.loads(report_file.read_text())
    outcomes: dict[str, str] = report["outcomes"]
    counts = Counter(outcomes.values())
    xfails = load_xfails()
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    print(f"PyIceberg REST suite, {run}: {summary} of {len(report['collected'])} collected")

    def expected(test_id: str) -> str:
        found = expectation_for(test_id, xfails)
        return "passed" if found is None else {"xfail": "xfailed", "skip": "skipped"}[found[0]]

    wrong = {t: o for t, o in sorted(outcomes.items()) if o != expected(t)}
    problems = [f"{o.upper()} (expected {expected(t)}) {t}" for t, o in wrong.items()]
    if len(report["collected"]) != spec.expected:
        problems.append(f"collected {len(report['collected'])} cases, expected {spec.expected}")
    if set(outcomes) != set(report["collected"]):
        problems.append("some collected cases did not run")
    if child.returncode != 0 and not problems:
        problems.append(f"pytest exited with {child.returncode}")
    if problems:
        details = [f"--- {t}\n{report['details'].get(t, '')[-2500:]}" for t in list(wrong)[:8]]
        pytest.fail(
            f"PyIceberg REST suite, {run}: {summary}\n"
            + "\n".join(problems)
            + "\n\n"
            + "\n\n".join(details)
            + f"\n\n--- end of the child pytest's output:\n{child.stdout[-3000:]}",
            pytrace=False,
        )
