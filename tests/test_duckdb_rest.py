"""DuckDB as a second real client of the REST server: its iceberg extension
(loaded offline from the PyPI wheels) sends a multi-table BEGIN ... COMMIT as
one ``POST /transactions/commit``, which lands as one catalog version."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from rest_helpers import Served, serve


def extension(name: str) -> str:
    spec = importlib.util.find_spec(f"duckdb_extension_{name}")
    assert spec is not None and spec.submodule_search_locations, f"duckdb-extension-{name}"
    root = Path(next(iter(spec.submodule_search_locations)))
    return str(next(root.glob(f"extensions/*/{name}.duckdb_extension")))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve(tmp_path_factory.mktemp("duckdb")) as s:
        rest = s.client()
        rest.create_namespace("dd")
        for name in ("a", "b"):
            rest.create_table(("dd", name), pa.schema([("id", pa.int64())]))
        yield s


@pytest.fixture
def con(served: Served) -> Iterator[Any]:
    connection = duckdb.connect()
    for name in ("httpfs", "avro", "iceberg"):
        connection.execute(f"LOAD '{extension(name)}'")
    connection.execute(
        f"ATTACH '' AS lake (TYPE iceberg, ENDPOINT '{served.uri}', "
        "AUTHORIZATION_TYPE 'none', ACCESS_DELEGATION_MODE 'none')"
    )
    yield connection
    connection.close()


def ids(con: Any, table: str) -> list[int]:
    return sorted(r[0] for r in con.execute(f"SELECT id FROM {table}").fetchall())


def test_duckdb_multi_table_commit_is_one_version(served: Served, con: Any) -> None:
    before = served.catalog.olympia.version
    con.execute("BEGIN")
    con.execute("INSERT INTO lake.dd.a VALUES (1), (2)")
    con.execute("INSERT INTO lake.dd.b VALUES (3)")
    con.execute("COMMIT")
    assert served.catalog.olympia.version == before + 1
    assert ids(con, "lake.dd.a") == [1, 2] and ids(con, "lake.dd.b") == [3]
    rest = served.client()
    assert sorted(rest.load_table(("dd", "b")).scan().to_arrow()["id"].to_pylist()) == [3]


def test_duckdb_rollback_leaves_nothing(served: Served, con: Any) -> None:
    before = served.catalog.olympia.version
    a_before, b_before = ids(con, "lake.dd.a"), ids(con, "lake.dd.b")
    con.execute("BEGIN")
    con.execute("INSERT INTO lake.dd.a VALUES (9)")
    con.execute("INSERT INTO lake.dd.b VALUES (9)")
    con.execute("ROLLBACK")
    assert served.catalog.olympia.version == before
    assert ids(con, "lake.dd.a") == a_before and ids(con, "lake.dd.b") == b_before
