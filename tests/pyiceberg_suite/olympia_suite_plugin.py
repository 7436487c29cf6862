"""pytest plugin (``-p olympia_suite_plugin``) for runs of PyIceberg's suite.

* Marks the cases that ``xfail.tsv`` lists as ``xfail`` for this run's
  backend as expected to fail, strictly: a listed case that passes fails.
* Lets ``load_catalog(name)`` take ``py-catalog-impl`` from the environment
  (``PYICEBERG_CATALOG__<NAME>__PY_CATALOG_IMPL``), which PyIceberg 0.12.0
  ignores (see ``_load_catalog_reads_configured_impl``).
* Writes a JSON report to ``OLYMPIA_SUITE_REPORT``: every collected test id
  and the outcome of each (``passed``, ``failed``, ``error``, ``skipped``,
  ``xfailed``), with the failure text of the ones that did not pass.
  ``tests/test_pyiceberg_suite.py`` asserts on it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

XFAIL_FILE = Path(__file__).with_name("xfail.tsv")


def load_expectations(backend: str) -> dict[str, tuple[str, str]]:
    """``{test id: (expectation, reason)}`` of the cases ``xfail.tsv`` lists for ``backend``.

    The expectation is ``xfail`` (marked here, strictly) or ``skip`` (the suite
    itself skips the case for this catalog).
    """
    cases: dict[str, tuple[str, str]] = {}
    for number, line in enumerate(XFAIL_FILE.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = [f.strip() for f in line.split("\t")]
        if len(fields) != 4 or not all(fields) or fields[2] not in ("xfail", "skip"):
            raise ValueError(
                f"{XFAIL_FILE}:{number}: expected 'backends<TAB>test id<TAB>xfail|skip<TAB>reason'"
            )
        backends, test_id, expectation, reason = fields
        if backend in backends.split(","):
            cases[test_id] = (expectation, reason)
    return cases


class _Report:
    def __init__(self, path: str, expectations: dict[str, tuple[str, str]]) -> None:
        self.path = path
        self.xfails = {k: reason for k, (kind, reason) in expectations.items() if kind == "xfail"}
        self.collected: list[str] = []
        self.outcomes: dict[str, str] = {}
        self.details: dict[str, str] = {}

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            reason = self.xfails.get(item.nodeid)
            if reason is not None:
                item.add_marker(pytest.mark.xfail(reason=reason, strict=True))

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.collected = [item.nodeid for item in session.items]

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        xfailed = hasattr(report, "wasxfail")
        if report.when == "call":
            if report.passed:
                outcome = "passed"
            elif report.skipped:
                outcome = "xfailed" if xfailed else "skipped"
            else:
                outcome = "failed"
        elif report.failed:
            outcome = "error"
        elif report.skipped:
            outcome = "xfailed" if xfailed else "skipped"
        else:
            return
        if self.outcomes.get(report.nodeid) in ("failed", "error"):
            return  # a teardown that passes does not hide a failed call
        self.outcomes[report.nodeid] = outcome
        if outcome not in ("passed", "xfailed"):
            self.details[report.nodeid] = f"[{report.when}] {report.longreprtext}"

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        data: dict[str, Any] = {
            "exitstatus": int(exitstatus),
            "collected": self.collected,
            "outcomes": self.outcomes,
            "details": self.details,
        }
        Path(self.path).write_text(json.dumps(data, indent=1))


def _load_catalog_reads_configured_impl() -> None:
    """Make ``load_catalog(name)`` honour ``py-catalog-impl`` from the catalog's configuration.

    PyIceberg 0.12.0's ``load_catalog`` looks for ``py-catalog-impl`` only among
    its keyword arguments: given in ``PYICEBERG_CATALOG__<NAME>__PY_CATALOG_IMPL``
    (or ``.pyiceberg.yaml``) it is ignored and the catalog type is inferred
    from ``uri``, which fails. ``tests/integration/test_catalog.py`` loads its
    catalog as ``load_catalog(os.environ["PYICEBERG_TEST_CATALOG"])``; this
    wrapper passes the named catalog's configuration (``py-catalog-impl``
    included) as keyword arguments, which is what ``load_catalog`` does with
    any other property. Installed before the test modules import the function.
    """
    import pyiceberg.catalog as catalogs

    original = catalogs.load_catalog

    def load_catalog(name: str | None = None, **properties: str | None) -> Any:
        if name is not None and "py-catalog-impl" not in properties:
            configured = catalogs._ENV_CONFIG.get_catalog_config(name) or {}
            if "py-catalog-impl" in configured:
                properties = {**configured, **properties}
        return original(name, **properties)

    catalogs.load_catalog = load_catalog


def pytest_configure(config: pytest.Config) -> None:
    _load_catalog_reads_configured_impl()
    backend = os.environ["OLYMPIA_SUITE_BACKEND"]
    report = _Report(os.environ["OLYMPIA_SUITE_REPORT"], load_expectations(backend))
    config.pluginmanager.register(report, "olympia_suite_report")
