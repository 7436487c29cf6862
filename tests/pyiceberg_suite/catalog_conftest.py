"""Catalog fixtures for PyIceberg's behaviour suite, built through ``load_catalog``.

``tests/test_pyiceberg_suite.py`` copies this file to ``tests/catalog/conftest.py``
in the extracted PyIceberg suite. There it overrides the ``catalog`` and
``catalog_with_warehouse`` fixtures of PyIceberg's root conftest (which
parametrize over InMemoryCatalog and SqlCatalog) with one catalog, loaded the
way a user loads a catalog by class name. The test files themselves are used
unmodified. The catalog comes from the environment:

* ``OLYMPIA_SUITE_CATALOG_IMPL``: the ``py-catalog-impl`` class path.
* ``OLYMPIA_SUITE_PROPERTIES``: a JSON object of further catalog properties
  (``uri`` for SqlCatalog, the ``s3.*`` properties for S3).
* ``OLYMPIA_SUITE_WAREHOUSE``: empty for a ``file://`` warehouse in the test's
  own temporary folder; otherwise a base URI (``s3://bucket/prefix``) under
  which every catalog gets a fresh, empty prefix.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyiceberg.catalog import Catalog, load_catalog


def _load(folder: Path) -> Catalog:
    impl = os.environ["OLYMPIA_SUITE_CATALOG_IMPL"]
    properties: dict[str, str] = json.loads(os.environ.get("OLYMPIA_SUITE_PROPERTIES", "{}"))
    base = os.environ.get("OLYMPIA_SUITE_WAREHOUSE", "")
    warehouse = f"{base.rstrip('/')}/{uuid.uuid4().hex}" if base else f"file://{folder}"
    return load_catalog(
        "test_catalog", **{"py-catalog-impl": impl, "warehouse": warehouse, **properties}
    )


def _close(catalog: Catalog) -> None:
    if hasattr(catalog, "destroy_tables"):  # SqlCatalog: as PyIceberg's own fixture does
        catalog.destroy_tables()


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[Catalog]:
    cat = _load(tmp_path)
    yield cat
    _close(cat)


@pytest.fixture
def catalog_with_warehouse(warehouse: Path) -> Iterator[Catalog]:
    cat = _load(warehouse)
    yield cat
    _close(cat)
