"""Names holding ``/`` (spec/format.md §5.1): the core API, default table
locations through PyIceberg (spec/iceberg.md §2), the REST server over real
HTTP with ``%2F`` in paths (spec/rest.md §5) and the command line."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pytest
import requests
from iceberg_helpers import files_under, ids_of, olympia_catalog, rows
from pyiceberg.exceptions import NoSuchTableError
from rest_helpers import Served, serve
from test_cli import run_json

import olympia
from olympia.errors import InvalidNameError
from olympia.iceberg.locations import path_segment
from olympia.keys import KeyCodec, validate_name
from olympia.rest.app import routing_path

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


# --- names ------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["new/db", "/x", "x/", "a//b", "/", "a/./b", "%2F", "a/.b"])
def test_names_with_slash_are_valid(name: str) -> None:
    assert validate_name("table", name, 16) == name


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("a/../b", "'..'"),
        ("../x", "'..'"),
        ("x/..", "'..'"),
        ("a\\b", "forbidden character"),
        ("a/\\b", "forbidden character"),
    ],
)
def test_dot_dot_and_backslash_stay_refused(name: str, reason: str) -> None:
    with pytest.raises(InvalidNameError, match=reason):
        validate_name("table", name, 16)


@pytest.mark.parametrize("compact", [True, False], ids=["compact", "padded"])
def test_keys_of_names_with_slash_stay_apart(compact: bool) -> None:
    keys = KeyCodec(namespace_max=8, table_max=8, view_max=8, compact=compact)
    assert keys.decode(keys.table("new/db", "tab/le")).parts == ("new/db", "tab/le")
    # the tables of namespace "a" are not those of namespace "a/b"
    assert keys.table("a/b", "t").startswith(keys.tables_prefix("a/b"))
    assert not keys.table("a/b", "t").startswith(keys.tables_prefix("a"))
    assert sorted([keys.namespace("a/b"), keys.namespace("a"), keys.namespace("a0")]) == [
        keys.namespace("a"),
        keys.namespace("a/b"),
        keys.namespace("a0"),
    ]


@pytest.fixture(params=[2, 1], ids=["format2", "format1"])
def cat(request: pytest.FixtureRequest, tmp_path: Path) -> olympia.Catalog:
    return olympia.create_catalog(str(tmp_path / "cat"), format_version=request.param)


def test_core_lifecycle(cat: olympia.Catalog) -> None:
    with cat.transaction() as t:
        t.create_namespace("new/db", {"k": "v"})
        t.create_namespace("new")
        t.create_table("new/db", "tab/le", "s3://b/t/m1.json")
        t.create_table("new", "db", "s3://b/other/m1.json")
        t.create_view("new/db", "vi/ew", sql_text="select 1", dialect="spark")
    view = cat.latest()
    assert view.list_namespaces() == ["new", "new/db"]
    assert view.describe_namespace("new/db").properties == {"k": "v"}
    assert view.list_tables("new/db") == ["tab/le"]
    assert view.list_tables("new") == ["db"]
    assert view.describe_table("new/db", "tab/le").metadata_location == "s3://b/t/m1.json"
    assert view.list_views("new/db") == ["vi/ew"]
    assert view.describe_view("new/db", "vi/ew").sql_text == "select 1"
    with cat.transaction() as t:
        t.rename_table("new/db", "tab/le", "new", "x/y")
        t.rename_view("new/db", "vi/ew", "new", "/v/")
    view = cat.latest()
    assert view.list_tables("new") == ["db", "x/y"]
    assert view.describe_table("new", "x/y").name == "x/y"
    assert view.list_views("new") == ["/v/"] and view.list_views("new/db") == []
    assert [(c.kind, c.parts, c.change) for c in cat.diff(1, 2)] == [
        ("table", ("new", "x/y"), "added"),
        ("table", ("new/db", "tab/le"), "removed"),
        ("view", ("new", "/v/"), "added"),
        ("view", ("new/db", "vi/ew"), "removed"),
    ]
    with cat.transaction() as t:
        t.drop_table("new", "x/y")
        t.drop_view("new", "/v/")
        t.drop_namespace("new/db")
    assert cat.latest().list_namespaces() == ["new"]
    assert cat.latest().list_tables("new") == ["db"]


def test_core_refuses_dot_dot_before_writing(cat: olympia.Catalog) -> None:
    txn = cat.begin()
    with pytest.raises(InvalidNameError, match="'..'"):
        txn.create_namespace("a/../b")
    with pytest.raises(InvalidNameError, match="'..'"):
        txn.create_table("ns", "../escape", "s3://b/m.json")
    assert txn.actions == []


# --- default locations ------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "segment"),
    [
        ("tab/le", "tab%2Fle"),
        ("/x", "%2Fx"),
        ("x/", "x%2F"),
        ("a//b", "a%2F%2Fb"),
        ("a%2Fb", "a%252Fb"),
        ("100%", "100%25"),
        (".", "%2E"),
        (".x", ".x"),
        ("a/./b", "a%2F.%2Fb"),
        ("t#1", "t%231"),
        ("q?x", "q%3Fx"),
        ("%23", "%2523"),
        ("plain", "plain"),
    ],
)
def test_path_segment(name: str, segment: str) -> None:
    assert path_segment(name) == segment
    assert "/" not in segment and segment not in (".", "..")


def test_path_segments_of_distinct_names_differ() -> None:
    names = [
        "a/b",
        "a%2Fb",
        "a%252Fb",
        "a%2fb",
        "a%b",
        "a%25b",
        ".",
        "%2E",
        "%",
        "a#b",
        "a%23b",
        "a?b",
    ]
    assert len({path_segment(n) for n in names}) == len(names)


def test_tables_whose_names_hold_hash_or_question_mark_keep_apart(tmp_path: Path) -> None:
    """PyIceberg's FileIO parses a location as a URL: a table at .../t#1
    wrote its metadata to the file .../t, which t#2 overwrote."""
    cat = olympia_catalog(f"file://{tmp_path}/lake")
    cat.create_namespace("ns")
    for i, name in enumerate(["t#1", "t#2", "q?x"]):
        table = cat.create_table(("ns", name), SCHEMA)
        table.append(rows([i]))
    for i, name in enumerate(["t#1", "t#2", "q?x"]):
        assert ids_of(cat.load_table(("ns", name))) == [i]
    folders = sorted(p.name for p in (tmp_path / "lake" / "ns.db").iterdir())
    assert folders == ["q%3Fx", "t%231", "t%232"]


def test_pyiceberg_table_with_slash_lives_in_one_folder(tmp_path: Path) -> None:
    cat = olympia_catalog(f"file://{tmp_path}/lake")
    cat.create_namespace("ns")
    table = cat.create_table(("ns", "tab/le"), SCHEMA)
    assert table.location() == f"file://{tmp_path}/lake/ns.db/tab%2Fle"
    table.append(rows([1, 2]))
    assert ids_of(cat.load_table("ns.tab/le")) == [1, 2]
    assert cat.list_tables("ns") == [("ns", "tab/le")]
    files = files_under(tmp_path / "lake" / "ns.db")
    assert files and all(f.startswith("tab%2Fle" + os.sep) for f in files)
    assert any(f.startswith(os.path.join("tab%2Fle", "data", "")) for f in files)
    assert not (tmp_path / "lake" / "ns.db" / "tab").exists()
    cat.drop_table(("ns", "tab/le"))
    with pytest.raises(NoSuchTableError):
        cat.load_table(("ns", "tab/le"))


def test_pyiceberg_namespace_with_slash_and_look_alike_names(tmp_path: Path) -> None:
    cat = olympia_catalog(f"file://{tmp_path}/lake")
    cat.create_namespace(("new/db",))
    assert cat.list_namespaces() == [("new/db",)]
    slash = cat.create_table(("new/db", "a/b"), SCHEMA)
    escaped = cat.create_table(("new/db", "a%2Fb"), SCHEMA)
    dot = cat.create_table(("new/db", "."), SCHEMA)
    base = f"file://{tmp_path}/lake/new%2Fdb.db"
    assert slash.location() == f"{base}/a%2Fb"
    assert escaped.location() == f"{base}/a%252Fb"
    assert dot.location() == f"{base}/%2E"
    slash.append(rows([1]))
    escaped.append(rows([2]))
    assert ids_of(cat.load_table(("new/db", "a/b"))) == [1]
    assert ids_of(cat.load_table(("new/db", "a%2Fb"))) == [2]
    assert [n for n in os.listdir(tmp_path / "lake") if n.endswith(".db")] == ["new%2Fdb.db"]
    assert sorted(os.listdir(tmp_path / "lake" / "new%2Fdb.db")) == ["%2E", "a%252Fb", "a%2Fb"]


def test_pyiceberg_namespace_location_property(tmp_path: Path) -> None:
    cat = olympia_catalog(f"file://{tmp_path}/lake")
    cat.create_namespace("ns", {"location": f"file://{tmp_path}/elsewhere/"})
    with pytest.raises(ValueError, match="'..'"):
        cat.create_table(("ns", "../up"), SCHEMA)
    table = cat.create_table(("ns", "x/y"), SCHEMA)
    assert table.location() == f"file://{tmp_path}/elsewhere/x%2Fy"


# --- REST over HTTP ---------------------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve(tmp_path_factory.mktemp("rest-slash")) as s:
        yield s


def _create_table(served: Served, namespace: str, name: str) -> requests.Response:
    schema = {"type": "struct", "schema-id": 0, "fields": [
        {"id": 1, "name": "id", "type": "long", "required": False},
    ]}  # fmt: skip
    return requests.post(
        served.url(f"namespaces/{namespace}/tables"),
        json={"name": name, "schema": schema},
        timeout=10,
    )


def test_rest_namespace_with_slash(served: Served) -> None:
    created = requests.post(served.url("namespaces"), json={"namespace": ["new/db"]}, timeout=10)
    assert created.status_code == 200, created.text
    assert created.json()["namespace"] == ["new/db"]
    assert requests.head(served.url("namespaces/new%2Fdb"), timeout=10).status_code == 204
    assert requests.head(served.url("namespaces/new%2fdb"), timeout=10).status_code == 204
    assert requests.head(served.url("namespaces/new"), timeout=10).status_code == 404
    loaded = requests.get(served.url("namespaces/new%2Fdb"), timeout=10)
    assert loaded.status_code == 200 and loaded.json()["namespace"] == ["new/db"]
    listed = requests.get(served.url("namespaces"), timeout=10).json()["namespaces"]
    assert ["new/db"] in listed
    # an unencoded "/" still separates path segments: no such route
    assert requests.get(served.url("namespaces/new/db"), timeout=10).status_code in (400, 404)
    dropped = requests.delete(served.url("namespaces/new%2Fdb"), timeout=10)
    assert dropped.status_code == 204
    assert requests.head(served.url("namespaces/new%2Fdb"), timeout=10).status_code == 404


def test_rest_table_with_slash(served: Served) -> None:
    requests.post(served.url("namespaces"), json={"namespace": ["ns"]}, timeout=10)
    assert requests.head(served.url("namespaces/ns/tables/tab%2Fle"), timeout=10).status_code == 404
    created = _create_table(served, "ns", "tab/le")
    assert created.status_code == 200, created.text
    assert created.json()["metadata"]["location"] == f"{served.warehouse}/ns.db/tab%2Fle"
    assert requests.head(served.url("namespaces/ns/tables/tab%2Fle"), timeout=10).status_code == 204
    loaded = requests.get(served.url("namespaces/ns/tables/tab%2Fle"), timeout=10)
    assert loaded.status_code == 200
    info = served.catalog.olympia.latest().describe_table("ns", "tab/le")
    assert loaded.json()["metadata-location"] == info.metadata_location
    listed = requests.get(served.url("namespaces/ns/tables"), timeout=10).json()
    assert {"namespace": ["ns"], "name": "tab/le"} in listed["identifiers"]
    # "%252F" is the three characters "%2F", another name
    assert (
        requests.head(served.url("namespaces/ns/tables/tab%252Fle"), timeout=10).status_code == 404
    )
    assert requests.head(served.url("namespaces/ns/tables/tab/le"), timeout=10).status_code == 404
    dropped = requests.delete(served.url("namespaces/ns/tables/tab%2Fle"), timeout=10)
    assert dropped.status_code == 204
    assert requests.head(served.url("namespaces/ns/tables/tab%2Fle"), timeout=10).status_code == 404


def test_rest_multi_level_namespace_with_slash(served: Served) -> None:
    created = requests.post(
        served.url("namespaces"), json={"namespace": ["lvl", "a/b"]}, timeout=10
    )
    assert created.status_code == 200, created.text
    assert _create_table(served, "lvl%1Fa%2Fb", "t/1").status_code == 200
    assert served.catalog.olympia.latest().list_tables("lvl.a/b") == ["t/1"]
    children = requests.get(served.url("namespaces"), params={"parent": "lvl"}, timeout=10)
    assert children.json()["namespaces"] == [["lvl", "a/b"]]
    got = requests.get(served.url("namespaces/lvl%1Fa%2Fb/tables/t%2F1"), timeout=10)
    assert got.status_code == 200
    assert got.json()["metadata"]["location"].endswith("/lvl.a%2Fb.db/t%2F1")


def test_rest_client_round_trip(served: Served) -> None:
    rest = served.client()
    rest.create_namespace(("py/ns",))
    assert rest.namespace_exists(("py/ns",))
    table = rest.create_table(("py/ns", "tab/le"), SCHEMA)
    table.append(rows([3, 4]))
    assert ids_of(rest.load_table(("py/ns", "tab/le"))) == [3, 4]
    assert rest.list_tables(("py/ns",)) == [("py/ns", "tab/le")]
    assert rest.table_exists(("py/ns", "tab/le"))
    rest.drop_table(("py/ns", "tab/le"))
    assert not rest.table_exists(("py/ns", "tab/le"))
    rest.drop_namespace(("py/ns",))
    assert not rest.namespace_exists(("py/ns",))


def test_rest_view_with_slash(served: Served) -> None:
    # Raw requests: PyIceberg 0.12's create_view puts the name into the body
    # percent-encoded ("vi%2Few"), as it does in paths.
    requests.post(served.url("namespaces"), json={"namespace": ["vw/ns"]}, timeout=10)
    body = {
        "name": "vi/ew",
        "schema": {"type": "struct", "schema-id": 0, "fields": []},
        "view-version": {
            "version-id": 1,
            "schema-id": 0,
            "timestamp-ms": 1,
            "summary": {},
            "representations": [{"type": "sql", "sql": "SELECT 1", "dialect": "spark"}],
            "default-namespace": ["vw/ns"],
        },
        "properties": {},
    }
    created = requests.post(served.url("namespaces/vw%2Fns/views"), json=body, timeout=10)
    assert created.status_code == 200, created.text
    assert served.catalog.olympia.latest().list_views("vw/ns") == ["vi/ew"]
    assert (
        requests.head(served.url("namespaces/vw%2Fns/views/vi%2Few"), timeout=10).status_code == 204
    )
    got = requests.get(served.url("namespaces/vw%2Fns/views/vi%2Few"), timeout=10)
    assert got.status_code == 200
    assert "/vw%2Fns.db/vi%2Few/" in got.json()["metadata-location"]
    dropped = requests.delete(served.url("namespaces/vw%2Fns/views/vi%2Few"), timeout=10)
    assert dropped.status_code == 204
    assert (
        requests.head(served.url("namespaces/vw%2Fns/views/vi%2Few"), timeout=10).status_code == 404
    )


def test_rest_transaction_routes_with_slash(served: Served) -> None:
    requests.post(served.url("namespaces"), json={"namespace": ["tx/ns"]}, timeout=10)
    txn = requests.post(f"{served.uri}/txn", json={}, timeout=10).json()["id"]
    inside = f"{served.uri}/txn/{txn}/v1/olympia"
    created = requests.post(
        f"{inside}/namespaces/tx%2Fns/tables",
        json={"name": "in/txn", "schema": {"type": "struct", "schema-id": 0, "fields": []}},
        timeout=10,
    )
    assert created.status_code == 200, created.text
    assert (
        requests.head(f"{inside}/namespaces/tx%2Fns/tables/in%2Ftxn", timeout=10).status_code == 204
    )
    assert (
        requests.head(served.url("namespaces/tx%2Fns/tables/in%2Ftxn"), timeout=10).status_code
        == 404
    )
    assert requests.post(f"{served.uri}/txn/{txn}/commit", timeout=10).status_code == 200
    assert served.catalog.olympia.latest().list_tables("tx/ns") == ["in/txn"]


def test_rest_refuses_dot_dot_in_a_name(served: Served) -> None:
    requests.post(served.url("namespaces"), json={"namespace": ["dd"]}, timeout=10)
    refused = _create_table(served, "dd", "a/../b")
    assert refused.status_code == 400
    assert "'..'" in refused.json()["error"]["message"]
    assert (
        requests.head(served.url("namespaces/dd/tables/a%2F..%2Fb"), timeout=10).status_code == 400
    )


@pytest.mark.parametrize(
    ("raw", "decoded"),
    [
        ("/v1/p/namespaces/new%2Fdb", "/v1/p/namespaces/new%2Fdb"),
        ("/v1/p/namespaces/new%2fdb/tables/t%41", "/v1/p/namespaces/new%2Fdb/tables/tA"),
        ("/a%1Fb%2Fc", "/a\x1fb%2Fc"),
        ("/a%252F", "/a%252F"),
        ("/a%2%46", "/a%252F"),  # a "%" that starts no escape is kept as "%25"
        ("/caf%C3%A9%2Fx", "/café%2Fx"),
    ],
)
def test_routing_path(raw: str, decoded: str) -> None:
    path = routing_path(raw)
    assert path == decoded
    # decoding the kept escapes gives what the server decodes the path to
    assert re.sub("%2F|%25", lambda m: unquote(m.group()), path) == unquote(raw)


# --- command line -----------------------------------------------------------------


def test_cli_shows_and_lists_names_with_slash(tmp_path: Path) -> None:
    uri = str(tmp_path / "lake")
    cat = olympia.create_catalog(uri)
    with cat.transaction() as t:
        t.create_namespace("new/db")
        t.create_table("new/db", "tab/le", "s3://b/m.json")
    listing = run_json("ls", "new/db", warehouse=uri)
    assert listing["tables"] == ["tab/le"]
    shown = run_json("show", "table", "new/db", "tab/le", warehouse=uri)
    assert (shown["namespace"], shown["name"]) == ("new/db", "tab/le")
    assert shown["metadata_location"] == "s3://b/m.json"
