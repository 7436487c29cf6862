"""pytest plugin (``-p rest_suite_plugin``) for runs of PyIceberg's REST-facing
test files against olympia's REST server.

Marks the cases that ``xfail_rest.tsv`` lists as ``xfail`` as expected to
fail, strictly (a listed case that passes fails the run). A test id ending in ``[*]``
stands for every parametrization of that test. Used together with
``olympia_suite_plugin`` (tests/pyiceberg_suite/), which writes the report.
"""

from __future__ import annotations

from pathlib import Path

import pytest

XFAIL_FILE = Path(__file__).with_name("xfail_rest.tsv")


def load_xfails() -> dict[str, tuple[str, str]]:
    """``{test id or pattern: (expectation, reason)}`` from ``xfail_rest.tsv``;
    the expectation is ``xfail`` or ``skip``."""
    cases: dict[str, tuple[str, str]] = {}
    for number, line in enumerate(XFAIL_FILE.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = [f.strip() for f in line.split("\t")]
        if len(fields) != 3 or not all(fields) or fields[1] not in ("xfail", "skip"):
            raise ValueError(f"{XFAIL_FILE}:{number}: expected 'test id<TAB>xfail|skip<TAB>reason'")
        cases[fields[0]] = (fields[1], fields[2])
    return cases


def expectation_for(test_id: str, xfails: dict[str, tuple[str, str]]) -> tuple[str, str] | None:
    """``(expectation, reason)`` of ``test_id``, or None when it should pass."""
    if test_id in xfails:
        return xfails[test_id]
    base = test_id.split("[", 1)[0]
    return xfails.get(base + "[*]") if "[" in test_id else None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    xfails = load_xfails()
    for item in items:
        expected = expectation_for(item.nodeid, xfails)
        if expected is not None and expected[0] == "xfail":
            item.add_marker(pytest.mark.xfail(reason=expected[1], strict=True))
