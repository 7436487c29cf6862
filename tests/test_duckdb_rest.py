"""DuckDB as a second real client of the REST server, with multi-table transactions.

DuckDB 1.5.5 and its ``iceberg``, ``avro`` and ``httpfs`` extensions come from
PyPI (the ``duckdb-extension-*`` wheels of the ``test`` extra); each extension
is ``LOAD``-ed from the file inside its wheel, with automatic installation
and loading off, so nothing is fetched at run time. DuckDB attaches the
server as an Iceberg REST catalog::

    ATTACH '' AS lake (TYPE iceberg, ENDPOINT 'http://127.0.0.1:PORT',
                       AUTHORIZATION_TYPE 'none', ACCESS_DELEGATION_MODE 'none')

A DuckDB transaction that writes two tables sends one
``POST /v1/{prefix}/transactions/commit`` at COMMIT, which the server applies
as one olympia catalog version; a ROLLBACK sends nothing. The server's
requests are recorded by a small ASGI wrapper around the application.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog, load_catalog

import olympia
from olympia.iceberg import OlympiaCatalog
from olympia.rest import BackgroundServer, create_app, open_catalog

duckdb = pytest.importorskip("duckdb", reason="duckdb is in the test extra")

PREFIX = "olympia"
SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("item", pa.string())])


@dataclass
class Recorder:
    """ASGI wrapper that records ``(method, path)`` of every HTTP request."""

    app: Any
    requests: list[tuple[str, str]] = field(default_factory=list)

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:
        if scope["type"] == "http":
            self.requests.append((scope["method"], scope["path"]))
        await self.app(scope, receive, send)

    def posts(self, suffix: str) -> list[str]:
        return [p for m, p in self.requests if m == "POST" and p.endswith(suffix)]

    def table_commits(self) -> list[str]:
        """``POST .../namespaces/{ns}/tables/{t}`` (single-table commits)."""
        return [
            p
            for m, p in self.requests
            if m == "POST" and "/tables/" in p and not p.endswith(("/metrics", "/tables"))
        ]


@dataclass
class Lake:
    warehouse: str
    recorder: Recorder
    duck: Any  # a DuckDB connection with the catalog attached as ``lake``
    rest: Catalog  # PyIceberg's REST client on the same server

    def versions(self) -> list[int]:
        return [v.version for v in olympia.load_catalog(self.warehouse).history()]

    def metadata_location(self, namespace: str, name: str) -> str:
        cat = olympia.load_catalog(self.warehouse)
        return cat.latest().describe_table(namespace, name).metadata_location

    def rows(self, table: str) -> list[tuple[Any, ...]]:
        return sorted(self.duck.execute(f"SELECT id, item FROM lake.{table}").fetchall())

    def pyiceberg_rows(self, table: str) -> list[tuple[Any, ...]]:
        data = self.rest.load_table(table).scan().to_arrow().to_pylist()
        return sorted((r["id"], r["item"]) for r in data)


def _extension(name: str) -> Path:
    """The ``.duckdb_extension`` file inside the ``duckdb-extension-<name>`` wheel."""
    package = importlib.import_module(f"duckdb_extension_{name}")
    assert package.__file__ is not None
    found = sorted(Path(package.__file__).parent.rglob(f"{name}.duckdb_extension"))
    assert found, f"no {name}.duckdb_extension in {package.__file__}"
    return found[-1]


def _connect(uri: str) -> Any:
    con = duckdb.connect()
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    for name in ("httpfs", "avro", "iceberg"):
        con.execute(f"LOAD '{_extension(name)}'")
    con.execute(
        f"ATTACH '' AS lake (TYPE iceberg, ENDPOINT '{uri}', "
        "AUTHORIZATION_TYPE 'none', ACCESS_DELEGATION_MODE 'none')"
    )
    return con


@pytest.fixture
def lake(tmp_path: Path) -> Iterator[Lake]:
    warehouse = f"file://{tmp_path}/warehouse"
    catalog = open_catalog(warehouse)
    assert isinstance(catalog, OlympiaCatalog)
    recorder = Recorder(create_app(catalog, prefix=PREFIX))
    with BackgroundServer(recorder) as server:  # type: ignore[arg-type]
        rest = load_catalog("rest", type="rest", uri=server.uri)
        rest.create_namespace("shop")
        rest.create_table("shop.orders", SCHEMA)
        rest.create_table("shop.audit", SCHEMA)
        con = _connect(server.uri)
        yield Lake(warehouse, recorder, con, rest)
        con.close()
    catalog.close()


def test_extensions_load_from_the_wheels_offline(lake: Lake) -> None:
    loaded = dict(
        lake.duck.execute(
            "SELECT extension_name, loaded FROM duckdb_extensions() "
            "WHERE extension_name IN ('iceberg', 'avro', 'httpfs')"
        ).fetchall()
    )
    assert loaded == {"iceberg": True, "avro": True, "httpfs": True}
    assert lake.duck.execute("SELECT version()").fetchone()[0] == "v1.5.5"
    tables = lake.duck.execute(
        "SELECT schema_name, table_name FROM duckdb_tables() WHERE database_name = 'lake'"
    ).fetchall()
    assert sorted(tables) == [("shop", "audit"), ("shop", "orders")]


def test_two_table_transaction_is_one_commit_request_and_one_version(lake: Lake) -> None:
    before = lake.versions()
    locations = {t: lake.metadata_location("shop", t) for t in ("orders", "audit")}
    lake.recorder.requests.clear()

    lake.duck.execute("BEGIN")
    lake.duck.execute("INSERT INTO lake.shop.orders VALUES (1, 'tea'), (2, 'jam')")
    lake.duck.execute("INSERT INTO lake.shop.audit VALUES (1, 'sold tea')")
    assert lake.recorder.posts("/transactions/commit") == []  # nothing sent before COMMIT
    assert lake.versions() == before
    lake.duck.execute("COMMIT")

    assert lake.recorder.posts("/transactions/commit") == [f"/v1/{PREFIX}/transactions/commit"]
    assert lake.recorder.table_commits() == []
    after = lake.versions()
    assert after == [*before, before[-1] + 1]  # exactly one new catalog version
    for table, old in locations.items():
        assert lake.metadata_location("shop", table) != old
    assert lake.rows("shop.orders") == [(1, "tea"), (2, "jam")]
    assert lake.rows("shop.audit") == [(1, "sold tea")]
    assert lake.pyiceberg_rows("shop.orders") == [(1, "tea"), (2, "jam")]
    assert lake.pyiceberg_rows("shop.audit") == [(1, "sold tea")]


def test_rollback_leaves_nothing(lake: Lake) -> None:
    lake.duck.execute("INSERT INTO lake.shop.orders VALUES (1, 'tea')")
    before = lake.versions()
    locations = {t: lake.metadata_location("shop", t) for t in ("orders", "audit")}
    lake.recorder.requests.clear()

    lake.duck.execute("BEGIN")
    lake.duck.execute("INSERT INTO lake.shop.orders VALUES (2, 'jam')")
    lake.duck.execute("INSERT INTO lake.shop.audit VALUES (2, 'sold jam')")
    assert lake.rows("shop.orders") == [(1, "tea"), (2, "jam")]  # its own writes
    lake.duck.execute("ROLLBACK")

    assert lake.recorder.posts("/transactions/commit") == []
    assert lake.recorder.table_commits() == []
    assert lake.versions() == before
    assert {t: lake.metadata_location("shop", t) for t in locations} == locations
    assert lake.rows("shop.orders") == [(1, "tea")]
    assert lake.rows("shop.audit") == []
    assert lake.pyiceberg_rows("shop.orders") == [(1, "tea")]
    assert lake.pyiceberg_rows("shop.audit") == []


def test_a_commit_that_conflicts_is_refused_and_publishes_nothing(lake: Lake) -> None:
    """Another client commits to one of the tables between DuckDB's reads and
    its COMMIT: the server answers 409 for the whole transaction."""
    lake.duck.execute("BEGIN")
    lake.duck.execute("INSERT INTO lake.shop.orders VALUES (1, 'tea')")
    lake.duck.execute("INSERT INTO lake.shop.audit VALUES (1, 'sold tea')")
    lake.rest.load_table("shop.orders").append(
        pa.table({"id": [9], "item": ["other"]}, schema=SCHEMA)
    )
    before = lake.versions()
    with pytest.raises(duckdb.Error, match="(?i)commit|conflict|409"):
        lake.duck.execute("COMMIT")
    assert lake.versions() == before
    assert lake.pyiceberg_rows("shop.orders") == [(9, "other")]
    assert lake.pyiceberg_rows("shop.audit") == []
