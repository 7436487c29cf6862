"""Bulk-loading the peer: rows written straight into the tables PyIceberg's
SqlCatalog creates, in one SQLite transaction (shared by the benchmarks)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Sequence

#: (catalog_name, namespace, property_key, property_value)
NamespaceRow = tuple[str, str, str, str]
#: (catalog_name, table_namespace, table_name, metadata_location, previous_metadata_location)
TableRow = tuple[str, str, str, str, "str | None"]


def bulk_insert(
    db_path: str, namespaces: Sequence[NamespaceRow], tables: Sequence[TableRow]
) -> None:
    """Insert namespace property rows and table rows into SqlCatalog's tables."""
    with contextlib.closing(sqlite3.connect(db_path)) as con, con:
        con.executemany(
            "INSERT INTO iceberg_namespace_properties"
            " (catalog_name, namespace, property_key, property_value) VALUES (?, ?, ?, ?)",
            namespaces,
        )
        con.executemany(
            "INSERT INTO iceberg_tables (catalog_name, table_namespace, table_name,"
            " metadata_location, previous_metadata_location, iceberg_type)"
            " VALUES (?, ?, ?, ?, ?, 'TABLE')",
            tables,
        )
