"""Iceberg views: created, replaced, renamed and changed as Iceberg's
reference catalog does it (spec/iceberg.md §6, spec/rest.md §3), through
olympia's own API, PyIceberg's ``load_catalog`` and the REST server over
real HTTP."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import (
    NoSuchNamespaceError,
    NoSuchViewError,
    TableAlreadyExistsError,
    ViewAlreadyExistsError,
)
from pyiceberg.schema import Schema
from pyiceberg.types import IntegerType, LongType, NestedField, StringType
from pyiceberg.view.metadata import ViewMetadata, ViewVersion
from rest_helpers import Served, serve

import olympia
from olympia.errors import ViewAlreadyExistsError as CoreViewExists
from olympia.errors import ViewNotFoundError
from olympia.iceberg import views

# A schema and version with the ids a client proposes; the catalog assigns its own.
SCHEMA = Schema(
    NestedField(3, "id", IntegerType(), required=True),
    NestedField(4, "data", StringType(), required=True),
    schema_id=5,
)
OTHER_SCHEMA = Schema(NestedField(1, "some_id", LongType(), required=True), schema_id=7)


def version(sql: str, *dialects: str, version_id: int = 1, schema_id: int = 5) -> ViewVersion:
    return ViewVersion.model_validate(
        {
            "version-id": version_id,
            "schema-id": schema_id,
            "timestamp-ms": 1_700_000_000_000,
            "summary": {"operation": "create"},
            "representations": [
                {"type": "sql", "sql": sql, "dialect": d} for d in (dialects or ("spark",))
            ],
            "default-namespace": ["ns"],
        }
    )


def replace_body(
    sql: str, *dialects: str, schema: Schema = SCHEMA, uuid: str | None = None, version_id: int = 2
) -> dict[str, Any]:
    """A view commit as Iceberg's Java client sends it for ``replaceVersion()``."""
    new = version(sql, *dialects, version_id=version_id, schema_id=-1)
    return {
        "requirements": [] if uuid is None else [{"type": "assert-view-uuid", "uuid": uuid}],
        "updates": [
            {"action": "add-schema", "schema": json.loads(schema.model_dump_json())},
            {"action": "add-view-version", "view-version": json.loads(new.model_dump_json())},
            {"action": "set-current-view-version", "view-version-id": -1},
        ],
    }


# --- the builder on its own ------------------------------------------------------


def test_new_view_metadata_assigns_schema_and_version_ids():
    metadata = views.new_view_metadata("file:///w/v", SCHEMA, version("select 1"), {"k": "v"})
    assert [s.schema_id for s in metadata.schemas] == [0]
    assert metadata.current_version_id == 1
    assert metadata.versions[0].schema_id == 0
    assert [(e.version_id, e.timestamp_ms) for e in metadata.version_log] == [
        (1, 1_700_000_000_000)
    ]
    assert metadata.properties == {"k": "v"}


def test_replacing_reuses_equal_schemas_and_versions_and_numbers_new_ones_on():
    base = views.new_view_metadata("file:///w/v", SCHEMA, version("select 1"), {})
    # A second writer built its version on the same base: both propose id 2.
    first = views.ViewBuilder(base).set_current(version("select 2", version_id=2), OTHER_SCHEMA)
    one = first.build()
    second = views.ViewBuilder(one).set_current(version("select 3", version_id=2), SCHEMA)
    two = second.build()
    assert [(v.version_id, v.schema_id) for v in two.versions] == [(1, 0), (2, 1), (3, 0)]
    assert [s.schema_id for s in two.schemas] == [0, 1]
    assert [e.version_id for e in two.version_log] == [1, 2, 3]
    # The same definition again: its version becomes current, no new version.
    again = views.ViewBuilder(two).set_current(version("select 1"), SCHEMA).build()
    assert (again.current_version_id, len(again.versions)) == (1, 3)
    assert [e.version_id for e in again.version_log] == [1, 2, 3, 1]


def test_only_the_newest_versions_are_kept_and_the_history_follows():
    metadata = views.new_view_metadata(
        "file:///w/v", SCHEMA, version("select 0"), {views.VERSION_HISTORY_SIZE: "2"}
    )
    for i in range(1, 4):
        metadata = (
            views.ViewBuilder(metadata)
            .set_current(version(f"select {i}", version_id=i + 1), SCHEMA)
            .build()
        )
    assert [v.version_id for v in metadata.versions] == [3, 4]
    assert [e.version_id for e in metadata.version_log] == [3, 4]
    with pytest.raises(views.InvalidViewError, match="must be positive but was 0"):
        views.ViewBuilder(metadata).set_properties({views.VERSION_HISTORY_SIZE: "0"}).build()


def test_bad_view_changes_are_refused_with_iceberg_words():
    base = views.new_view_metadata("file:///w/v", SCHEMA, version("select 1", "trino"), {})
    cases = [
        (
            lambda b: b.set_current(version("select 2", "trino", "Trino"), SCHEMA),
            "Invalid view version: Cannot add multiple queries for dialect trino",
        ),
        (
            lambda b: b.set_current(version("select 2", "spark"), SCHEMA),
            "loss of view dialects",
        ),
        (lambda b: b.add_version(version("x", schema_id=9)), "unknown schema: 9"),
        (lambda b: b.set_current_version(-1), "no version has been added"),
        (lambda b: b.set_current_version(42), "unknown version: 42"),
        (lambda b: b.assign_uuid("another"), "Cannot reassign uuid"),
        (lambda b: b.upgrade_format_version(2), "Unsupported view format version: v2"),
    ]
    for change, message in cases:
        with pytest.raises(views.InvalidViewError, match=message):
            change(views.ViewBuilder(base)).build()


# --- olympia's own API -----------------------------------------------------------


def test_core_rename_view_moves_the_definition_in_one_transaction(tmp_path: Path):
    cat = olympia.create_catalog(f"file://{tmp_path}/cat")
    with cat.transaction() as t:
        t.create_namespace("a")
        t.create_namespace("b")
        t.create_table("a", "t", "m")
        t.create_view("a", "v", sql_text="select 1", dialect="spark", properties={"p": "1"})
        t.create_view("a", "w", substrait_plan=b"\x01")
    with cat.transaction() as t:
        t.rename_view("a", "v", "b", "v2")
        t.rename_view("a", "w", "a", "w2")
        with pytest.raises(ViewNotFoundError):
            t.rename_view("a", "v", "a", "x")
        with pytest.raises(CoreViewExists, match="table named a.t"):
            t.rename_view("a", "w2", "a", "t")
    latest = cat.latest()
    moved = latest.describe_view("b", "v2")
    assert (moved.sql_text, moved.dialect, moved.properties) == ("select 1", "spark", {"p": "1"})
    assert latest.describe_view("a", "w2").substrait_plan == b"\x01"
    assert latest.list_views("a") == ["w2"]
    # A rolled-back rename leaves the view where it was.
    t = cat.begin()
    t.rename_view("b", "v2", "a", "v")
    t.rollback()
    assert cat.latest().list_views("b") == ["v2"]


# --- PyIceberg through load_catalog ----------------------------------------------


def test_pyiceberg_create_and_rename_view(tmp_path: Path):
    cat = load_catalog(
        "views",
        **{"py-catalog-impl": "olympia.iceberg.OlympiaCatalog", "warehouse": f"file://{tmp_path}"},
    )
    cat.create_namespace("ns")
    cat.create_namespace("other")
    cat.create_table("ns.t", OTHER_SCHEMA)
    view = cat.create_view("ns.v", SCHEMA, version("select * from ns.t"))
    assert view.schema().schema_id == 0 and view.current_version().schema_id == 0
    cat.rename_view("ns.v", "other.v")
    assert not cat.view_exists("ns.v")
    assert cat.load_view("other.v").metadata == view.metadata
    cat.create_view("ns.v2", SCHEMA, version("select 2"))
    with pytest.raises(ViewAlreadyExistsError, match=r"Cannot rename ns.v2 to other.v. View"):
        cat.rename_view("ns.v2", "other.v")
    with pytest.raises(TableAlreadyExistsError, match=r"Cannot rename ns.v2 to ns.t. Table"):
        cat.rename_view("ns.v2", "ns.t")
    with pytest.raises(ViewAlreadyExistsError, match=r"Cannot rename ns.t to ns.v2. View"):
        cat.rename_table("ns.t", "ns.v2")
    with pytest.raises(NoSuchNamespaceError, match="Namespace does not exist: missing"):
        cat.rename_view("ns.v2", "missing.v")
    with pytest.raises(NoSuchViewError, match="View does not exist: ns.gone"):
        cat.rename_view("ns.gone", "ns.x")


# --- REST over real HTTP ---------------------------------------------------------


@pytest.fixture(scope="module")
def allowed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("allowed")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, allowed: Path) -> Iterator[Served]:
    with serve(tmp_path_factory.mktemp("views"), allowed_locations=(f"file://{allowed}",)) as s:
        requests.post(s.url("namespaces"), json={"namespace": ["ns"]}, timeout=30)
        yield s


def create(served: Served, name: str, **extra: Any) -> dict[str, Any]:
    body = {
        "name": name,
        "schema": json.loads(SCHEMA.model_dump_json()),
        "view-version": json.loads(version("select * from ns.tbl", "trino").model_dump_json()),
        **extra,
    }
    response = requests.post(served.url("namespaces/ns/views"), json=body, timeout=30)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def commit(served: Served, name: str, body: dict[str, Any]) -> requests.Response:
    return requests.post(served.url(f"namespaces/ns/views/{name}"), json=body, timeout=30)


def test_rest_advertises_view_replace_and_rename(served: Served):
    endpoints = requests.get(f"{served.uri}/v1/config", timeout=30).json()["endpoints"]
    assert "POST /v1/{prefix}/namespaces/{namespace}/views/{view}" in endpoints
    assert "POST /v1/{prefix}/views/rename" in endpoints


def test_rest_replace_view_assigns_ids_and_keeps_history(served: Served):
    created = create(served, "replaced", properties={views.REPLACE_DROP_DIALECT_ALLOWED: "true"})
    metadata = created["metadata"]
    assert [s["schema-id"] for s in metadata["schemas"]] == [0]
    assert metadata["current-version-id"] == 1
    uuid = metadata["view-uuid"]
    # Two replaces built on the same base, committed one after the other.
    first = commit(served, "replaced", replace_body("select 1", "spark", schema=OTHER_SCHEMA))
    assert first.status_code == 200, first.text
    second = commit(served, "replaced", replace_body("select 2", "trino", uuid=uuid))
    assert second.status_code == 200, second.text
    result = second.json()
    got = ViewMetadata.model_validate(result["metadata"])
    assert [(v.version_id, v.schema_id) for v in got.versions] == [(1, 0), (2, 1), (3, 0)]
    assert got.current_version_id == 3
    assert [e.version_id for e in got.version_log] == [1, 2, 3]
    loaded = requests.get(served.url("namespaces/ns/views/replaced"), timeout=30).json()
    assert loaded["metadata-location"] == result["metadata-location"]
    assert loaded["metadata-location"].rsplit("/", 1)[-1].startswith("00002-")
    assert loaded["metadata"] == result["metadata"]


def test_rest_view_property_and_location_updates_leave_versions_alone(
    served: Served, allowed: Path
):
    before = create(served, "props")["metadata"]
    updates = [
        {"action": "set-properties", "updates": {"k1": "v1", "k2": "v2"}},
        {"action": "remove-properties", "removals": ["k2", "non-existing"]},
        {"action": "set-location", "location": f"file://{allowed}/moved/"},
    ]
    response = commit(served, "props", {"requirements": [], "updates": updates})
    assert response.status_code == 200, response.text
    after = response.json()["metadata"]
    assert after["properties"] == {"k1": "v1"}
    assert after["location"] == f"file://{allowed}/moved"
    assert (after["versions"], after["version-log"]) == (before["versions"], before["version-log"])


def test_rest_view_commit_errors(served: Served, tmp_path: Path):
    create(served, "errors")
    cases = [
        (
            replace_body("select 2", "trino", "trino"),
            400,
            "IllegalArgumentException",
            "Invalid view version: Cannot add multiple queries for dialect trino",
        ),
        (replace_body("select 2", "spark"), 400, "IllegalArgumentException", "loss of view"),
        (
            replace_body("select 2", "trino", uuid="00000000-0000-0000-0000-000000000000"),
            409,
            "CommitFailedException",
            "view UUID does not match",
        ),
        (
            {"updates": [{"action": "set-location", "location": f"file://{tmp_path}/out"}]},
            403,
            "ForbiddenException",
            f"file://{tmp_path}/out",
        ),
        (
            {"updates": [{"action": "frobnicate"}]},
            400,
            "BadRequestException",
            "frobnicate",
        ),
    ]
    before = requests.get(served.url("namespaces/ns/views/errors"), timeout=30).json()
    for body, code, kind, message in cases:
        response = commit(served, "errors", body)
        assert response.status_code == code, response.text
        error = response.json()["error"]
        assert error["type"] == kind and message in error["message"], error
    missing = commit(served, "missing", replace_body("select 1", "trino"))
    assert missing.status_code == 404
    assert missing.json()["error"]["message"] == "View does not exist: ns.missing"
    # None of them changed the view.
    assert requests.get(served.url("namespaces/ns/views/errors"), timeout=30).json() == before


def test_rest_write_metadata_path_is_honoured_and_bounded(served: Served, allowed: Path):
    custom = f"file://{allowed}/custom-metadata"
    created = create(
        served,
        "custom",
        location=f"file://{allowed}/custom-view",
        properties={views.WRITE_METADATA_PATH: custom},
    )
    assert created["metadata-location"].startswith(custom + "/00000-")
    assert Path(created["metadata-location"].removeprefix("file://")).is_file()
    outside = {"updates": [{"action": "set-properties", "updates": {"write.metadata.path": "/"}}]}
    response = commit(served, "custom", outside)
    assert response.status_code == 403, response.text
    assert "write.metadata.path" in response.json()["error"]["message"]


def test_rest_rename_view(served: Served):
    created = create(served, "renamed")
    requests.post(served.url("namespaces"), json={"namespace": ["ns2"]}, timeout=30)

    def rename(source: str, target: list[str]) -> requests.Response:
        body = {
            "source": {"namespace": ["ns"], "name": source},
            "destination": {"namespace": target[:-1], "name": target[-1]},
        }
        return requests.post(served.url("views/rename"), json=body, timeout=30)

    assert rename("renamed", ["ns2", "moved"]).status_code == 204
    assert requests.head(served.url("namespaces/ns/views/renamed"), timeout=30).status_code == 404
    loaded = requests.get(served.url("namespaces/ns2/views/moved"), timeout=30).json()
    assert loaded["metadata-location"] == created["metadata-location"]
    assert loaded["metadata"] == created["metadata"]
    create(served, "other")
    taken = rename("other", ["ns2", "moved"])
    assert taken.status_code == 409
    assert "Cannot rename ns.other to ns2.moved. View already exists" in taken.text
    assert rename("gone", ["ns", "x"]).status_code == 404
    no_namespace = rename("other", ["nowhere", "x"])
    assert no_namespace.status_code == 404
    assert no_namespace.json()["error"]["type"] == "NoSuchNamespaceException"
