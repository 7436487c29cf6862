"""Helpers for the Iceberg tests: catalogs loaded as PyIceberg users load them,
small Arrow tables, and the files under a warehouse."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog, load_catalog

OLYMPIA_IMPL = "olympia.iceberg.OlympiaCatalog"


def olympia_catalog(warehouse: str, **properties: Any) -> Catalog:
    return load_catalog(
        "lake", **{"py-catalog-impl": OLYMPIA_IMPL, "warehouse": warehouse, **properties}
    )


def sql_catalog(tmp_path: Path) -> Catalog:
    wh = tmp_path / "sql-warehouse"
    wh.mkdir(exist_ok=True)
    return load_catalog(
        "lake",
        **{"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{wh}"},
    )


def rows(ids: list[int], tag: str = "x") -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "v": pa.array([f"{tag}{i}" for i in ids], pa.string()),
        }
    )


def ids_of(table: Any) -> list[int]:
    return sorted(table.scan().to_arrow()["id"].to_pylist())


def files_under(root: Path) -> set[str]:
    out: set[str] = set()
    for folder, _, names in os.walk(root):
        for name in names:
            out.add(os.path.relpath(os.path.join(folder, name), root))
    return out


def table_files(root: Path) -> set[str]:
    """Files of Iceberg tables (under ``*.db/`` folders), not the catalog's own."""
    return {f for f in files_under(root) if f.split(os.sep, 1)[0].endswith(".db")}
