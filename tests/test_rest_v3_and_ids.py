"""Format-version 3 tables, and the ids a commit's ``add-schema`` /
``add-spec`` / ``add-sort-order`` get (spec/iceberg.md §10, spec/rest.md §3),
over real HTTP and through PyIceberg's ``load_catalog``."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import requests
from iceberg_helpers import olympia_catalog, rows
from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.sorting import SortDirection, SortField, SortOrder
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    AddSortOrderUpdate,
    SetDefaultSortOrderUpdate,
    SetSnapshotRefUpdate,
    UpgradeFormatVersionUpdate,
)
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import IntegerType, LongType, NestedField, StringType
from rest_helpers import Served, serve

from olympia.iceberg import CommitConflictException
from olympia.iceberg.updates import assign_ids

SCHEMA_JSON: dict[str, Any] = {
    "type": "struct",
    "schema-id": 0,
    "fields": [
        {"id": 1, "name": "id", "type": "long", "required": True},
        {"id": 2, "name": "v", "type": "string", "required": False},
    ],
}

DEFAULTS_SCHEMA_JSON: dict[str, Any] = {
    "type": "struct",
    "schema-id": 0,
    "fields": [
        {
            "id": 1,
            "name": "col",
            "type": "int",
            "required": True,
            "initial-default": 12,
            "write-default": 10,
        }
    ],
}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve(tmp_path_factory.mktemp("v3")) as s:
        requests.post(s.url("namespaces"), json={"namespace": ["v3"]}, timeout=30)
        requests.post(s.url("namespaces"), json={"namespace": ["ids"]}, timeout=30)
        yield s


def create(served: Served, ns: str, name: str, **body: Any) -> dict[str, Any]:
    response = requests.post(
        served.url(f"namespaces/{ns}/tables"),
        json={"name": name, "schema": SCHEMA_JSON, **body},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def commit(
    served: Served, ns: str, name: str, *updates: dict[str, Any], requirements: Any = ()
) -> requests.Response:
    return requests.post(
        served.url(f"namespaces/{ns}/tables/{name}"),
        json={
            "identifier": {"namespace": [ns], "name": name},
            "requirements": list(requirements),
            "updates": list(updates),
        },
        timeout=30,
    )


def load(served: Served, ns: str, name: str) -> dict[str, Any]:
    response = requests.get(served.url(f"namespaces/{ns}/tables/{name}"), timeout=30)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def snapshot_json(metadata: dict[str, Any], snapshot_id: int, **fields: Any) -> dict[str, Any]:
    """A snapshot on the head of main of ``metadata``; its manifest list is an
    empty file (the server checks that it exists, and reads nothing from it)."""
    manifest_list = f"{metadata['location']}/metadata/snap-{snapshot_id}.avro"
    path = Path(manifest_list.removeprefix("file://"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()
    return {
        "snapshot-id": snapshot_id,
        **(
            {"parent-snapshot-id": metadata["current-snapshot-id"]}
            if metadata.get("current-snapshot-id") not in (None, -1)
            else {}
        ),
        "sequence-number": metadata["last-sequence-number"] + 1,
        "timestamp-ms": int(time.time() * 1000),
        "manifest-list": manifest_list,
        "summary": {"operation": "append"},
        "schema-id": metadata["current-schema-id"],
        **fields,
    }


def append(snapshot: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    return (
        {"action": "add-snapshot", "snapshot": snapshot},
        {
            "action": "set-snapshot-ref",
            "ref-name": "main",
            "type": "branch",
            "snapshot-id": snapshot["snapshot-id"],
        },
    )


def order_json(order_id: int, source_id: int, direction: str) -> dict[str, Any]:
    return {
        "order-id": order_id,
        "fields": [
            {
                "transform": "identity",
                "source-id": source_id,
                "direction": direction,
                "null-order": "nulls-first",
            }
        ],
    }


def fields_by_id(objects: list[dict[str, Any]], key: str) -> dict[int, Any]:
    return {o[key]: o["fields"] for o in objects}


# --- format version 3 -------------------------------------------------------------


def test_v3_table_with_column_defaults_is_created_loaded_and_written(served: Served) -> None:
    result = create(
        served,
        "v3",
        "defaults",
        schema=DEFAULTS_SCHEMA_JSON,
        properties={"format-version": "3"},
    )
    metadata = result["metadata"]
    assert metadata["format-version"] == 3
    assert metadata["next-row-id"] == 0
    field = metadata["schemas"][0]["fields"][0]
    assert (field["initial-default"], field["write-default"]) == (12, 10)
    # the metadata file holds the same
    on_disk = json.loads(Path(result["metadata-location"].removeprefix("file://")).read_text())
    assert on_disk["format-version"] == 3 and on_disk["next-row-id"] == 0
    assert on_disk["schemas"][0]["fields"][0]["initial-default"] == 12
    assert load(served, "v3", "defaults")["metadata"] == on_disk
    # PyIceberg's REST client reads it
    table = served.client().load_table(("v3", "defaults"))
    assert table.format_version == 3
    column = table.schema().find_field("col")
    assert (column.initial_default, column.write_default) == (12, 10)


def test_v3_staged_create_then_create_commit(served: Served) -> None:
    staged = requests.post(
        served.url("namespaces/v3/tables"),
        json={
            "name": "staged",
            "schema": SCHEMA_JSON,
            "stage-create": True,
            "properties": {"format-version": "3"},
        },
        timeout=30,
    )
    assert staged.status_code == 200, staged.text
    metadata = staged.json()["metadata"]
    assert metadata["format-version"] == 3
    assert "metadata-location" not in staged.json()
    # what Iceberg's Java client sends to land a create transaction
    response = commit(
        served,
        "v3",
        "staged",
        {"action": "assign-uuid", "uuid": metadata["table-uuid"]},
        {"action": "upgrade-format-version", "format-version": 3},
        {"action": "add-schema", "schema": SCHEMA_JSON},
        {"action": "set-current-schema", "schema-id": -1},
        {"action": "add-spec", "spec": {"spec-id": 0, "fields": []}},
        {"action": "set-default-spec", "spec-id": -1},
        {"action": "add-sort-order", "sort-order": {"order-id": 0, "fields": []}},
        {"action": "set-default-sort-order", "sort-order-id": -1},
        {"action": "set-location", "location": metadata["location"]},
        {"action": "set-properties", "updates": {"owner": "rck"}},
        requirements=[{"type": "assert-create"}],
    )
    assert response.status_code == 200, response.text
    loaded = load(served, "v3", "staged")["metadata"]
    assert loaded["format-version"] == 3
    assert loaded["next-row-id"] == 0
    assert loaded["table-uuid"] == metadata["table-uuid"]
    assert loaded["properties"]["owner"] == "rck"


def test_v3_commits_keep_row_lineage(served: Served) -> None:
    metadata = create(served, "v3", "lineage", properties={"format-version": "3"})["metadata"]
    first = snapshot_json(metadata, 101, **{"first-row-id": 0, "added-rows": 5})
    response = commit(served, "v3", "lineage", *append(first))
    assert response.status_code == 200, response.text
    metadata = response.json()["metadata"]
    assert metadata["next-row-id"] == 5
    (kept,) = metadata["snapshots"]
    assert (kept["first-row-id"], kept["added-rows"]) == (0, 5)
    refused = {
        "first-row-id below next-row-id": snapshot_json(
            metadata, 102, **{"first-row-id": 3, "added-rows": 1}
        ),
        "no added-rows": snapshot_json(metadata, 103, **{"first-row-id": 5}),
        "no first-row-id": snapshot_json(metadata, 104, **{"added-rows": 1}),
        "stale sequence number": snapshot_json(
            metadata, 105, **{"first-row-id": 5, "added-rows": 1, "sequence-number": 1}
        ),
    }
    for why, snapshot in refused.items():
        response = commit(served, "v3", "lineage", *append(snapshot))
        assert response.status_code == 400, (why, response.text)
        assert response.json()["error"]["type"] == "BadRequestException"
    assert load(served, "v3", "lineage")["metadata"]["next-row-id"] == 5
    second = snapshot_json(metadata, 106, **{"first-row-id": 7, "added-rows": 2})
    response = commit(served, "v3", "lineage", *append(second))
    assert response.status_code == 200, response.text
    loaded = load(served, "v3", "lineage")["metadata"]
    assert loaded["next-row-id"] == 9
    assert loaded["current-snapshot-id"] == 106
    assert [(s["first-row-id"], s["added-rows"]) for s in loaded["snapshots"]] == [(0, 5), (7, 2)]


def test_upgrade_v2_to_v3_starts_row_lineage(served: Served) -> None:
    metadata = create(served, "v3", "upgraded")["metadata"]
    assert metadata["format-version"] == 2
    v2_snapshot = snapshot_json(metadata, 201)
    response = commit(served, "v3", "upgraded", *append(v2_snapshot))
    assert response.status_code == 200, response.text
    response = commit(
        served, "v3", "upgraded", {"action": "upgrade-format-version", "format-version": 3}
    )
    assert response.status_code == 200, response.text
    metadata = response.json()["metadata"]
    assert (metadata["format-version"], metadata["next-row-id"]) == (3, 0)
    v3_snapshot = snapshot_json(metadata, 202, **{"first-row-id": 0, "added-rows": 4})
    response = commit(served, "v3", "upgraded", *append(v3_snapshot))
    assert response.status_code == 200, response.text
    assert response.json()["metadata"]["next-row-id"] == 4
    down = commit(
        served, "v3", "upgraded", {"action": "upgrade-format-version", "format-version": 2}
    )
    assert down.status_code == 400
    beyond = commit(
        served, "v3", "upgraded", {"action": "upgrade-format-version", "format-version": 4}
    )
    assert beyond.status_code == 400


def test_v3_metadata_file_written_elsewhere_is_registered_and_read(served: Served) -> None:
    location = f"{served.warehouse}/java-table"
    folder = Path(location.removeprefix("file://")) / "metadata"
    folder.mkdir(parents=True)
    (folder / "snap-7.avro").touch()
    written = {
        "format-version": 3,
        "table-uuid": "9c12d441-03fe-4693-9a96-a0705ddf69c1",
        "location": location,
        "last-sequence-number": 1,
        "last-updated-ms": 1700000000000,
        "last-column-id": 1,
        "current-schema-id": 0,
        "schemas": [DEFAULTS_SCHEMA_JSON],
        "default-spec-id": 0,
        "partition-specs": [{"spec-id": 0, "fields": []}],
        "last-partition-id": 999,
        "default-sort-order-id": 0,
        "sort-orders": [{"order-id": 0, "fields": []}],
        "properties": {},
        "current-snapshot-id": 7,
        "next-row-id": 30,
        "refs": {"main": {"snapshot-id": 7, "type": "branch"}},
        "snapshots": [
            {
                "snapshot-id": 7,
                "sequence-number": 1,
                "timestamp-ms": 1700000000000,
                "manifest-list": f"{location}/metadata/snap-7.avro",
                "summary": {"operation": "append"},
                "schema-id": 0,
                "first-row-id": 0,
                "added-rows": 30,
            }
        ],
        "snapshot-log": [{"snapshot-id": 7, "timestamp-ms": 1700000000000}],
        "metadata-log": [],
    }
    path = folder / "00003-java.metadata.json"
    path.write_text(json.dumps(written))
    response = requests.post(
        served.url("namespaces/v3/register"),
        json={"name": "registered", "metadata-location": f"file://{path}"},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    metadata = load(served, "v3", "registered")["metadata"]
    assert metadata["format-version"] == 3
    assert metadata["next-row-id"] == 30
    assert metadata["snapshots"][0]["first-row-id"] == 0
    assert metadata["snapshots"][0]["added-rows"] == 30
    assert metadata["schemas"][0]["fields"][0]["initial-default"] == 12
    # a commit on it continues its row ids
    response = commit(
        served,
        "v3",
        "registered",
        *append(snapshot_json(metadata, 8, **{"first-row-id": 30, "added-rows": 3})),
    )
    assert response.status_code == 200, response.text
    assert response.json()["metadata"]["next-row-id"] == 33


# --- format version 3 through PyIceberg (load_catalog) ----------------------------


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    cat = olympia_catalog(f"file://{tmp_path}/warehouse")
    cat.create_namespace("ns")
    return cat


def test_pyiceberg_creates_loads_and_upgrades_v3_tables(catalog: Catalog) -> None:
    schema = Schema(
        NestedField(1, "col", IntegerType(), required=False, initial_default=12, write_default=10)
    )
    created = catalog.create_table(("ns", "t"), schema, properties={"format-version": "3"})
    assert created.format_version == 3
    loaded = catalog.load_table(("ns", "t"))
    assert loaded.format_version == 3
    assert loaded.metadata.next_row_id == 0
    assert loaded.schema().find_field("col").initial_default == 12
    v2 = catalog.create_table(("ns", "v2"), Schema(NestedField(1, "id", LongType())))
    response = catalog.commit_table(v2, (), (UpgradeFormatVersionUpdate(format_version=3),))
    assert (response.metadata.format_version, response.metadata.next_row_id) == (3, 0)
    assert catalog.load_table(("ns", "v2")).format_version == 3


def test_pyiceberg_cannot_write_data_to_v3_tables_and_says_so(catalog: Catalog) -> None:
    table = catalog.create_table(
        ("ns", "t"), Schema(NestedField(1, "id", LongType())), properties={"format-version": "3"}
    )
    with pytest.raises(ValueError, match="Cannot write manifest for table version: 3"):
        table.append(pa.table({"id": pa.array([1, 2], pa.int64())}))
    assert catalog.load_table(("ns", "t")).metadata.snapshots == []


def test_a_v3_snapshot_is_not_rebased(catalog: Catalog) -> None:
    """When a concurrent commit moved the branch, a staged v3 snapshot
    cannot be produced again (its row ids would change): the commit is
    refused with rule cannot-rebase, not a traceback."""
    table = catalog.create_table(("ns", "t"), pa.schema([("id", pa.int64()), ("v", pa.string())]))
    table.append(rows([1, 2]))
    catalog.commit_table(
        catalog.load_table(("ns", "t")), (), (UpgradeFormatVersionUpdate(format_version=3),)
    )
    head = catalog.load_table(("ns", "t")).metadata

    def on_head(snapshot_id: int) -> tuple[AddSnapshotUpdate, SetSnapshotRefUpdate]:
        parent = head.current_snapshot()
        assert parent is not None
        snapshot = Snapshot(
            snapshot_id=snapshot_id,
            parent_snapshot_id=parent.snapshot_id,
            sequence_number=head.next_sequence_number(),
            timestamp_ms=int(time.time() * 1000),
            manifest_list=parent.manifest_list,
            summary=Summary(Operation.APPEND),
            schema_id=head.current_schema_id,
            first_row_id=0,
            added_rows=0,
        )
        ref = SetSnapshotRefUpdate(ref_name="main", type="branch", snapshot_id=snapshot_id)
        return AddSnapshotUpdate(snapshot=snapshot), ref

    tx = catalog.begin()  # type: ignore[attr-defined]
    staged = tx.load_table(("ns", "t"))
    tx.catalog.commit_table(staged, (), on_head(301))
    catalog.commit_table(catalog.load_table(("ns", "t")), (), on_head(302))
    with pytest.raises(CommitConflictException, match="format-version 3") as refused:
        tx.commit()
    assert refused.value.rule == "cannot-rebase"
    assert catalog.load_table(("ns", "t")).metadata.current_snapshot_id == 302


# --- ids of added schemas, specs and sort orders ------------------------------------


def test_two_commits_proposing_the_same_sort_order_id_both_land(served: Served) -> None:
    """Iceberg's concurrent replace transactions: each proposes order 1."""
    base = create(served, "ids", "orders")["metadata"]
    uuid = {"type": "assert-table-uuid", "uuid": base["table-uuid"]}
    first = commit(
        served,
        "ids",
        "orders",
        {"action": "add-sort-order", "sort-order": order_json(1, 1, "desc")},
        {"action": "set-default-sort-order", "sort-order-id": -1},
        requirements=[uuid],
    )
    assert first.status_code == 200, first.text
    second = commit(
        served,
        "ids",
        "orders",
        {"action": "add-sort-order", "sort-order": order_json(1, 2, "asc")},
        {"action": "set-default-sort-order", "sort-order-id": -1},
        requirements=[uuid],
    )
    assert second.status_code == 200, second.text
    metadata = load(served, "ids", "orders")["metadata"]
    orders = fields_by_id(metadata["sort-orders"], "order-id")
    assert sorted(orders) == [0, 1, 2]
    assert orders[1][0]["source-id"] == 1 and orders[1][0]["direction"] == "desc"
    assert orders[2][0]["source-id"] == 2 and orders[2][0]["direction"] == "asc"
    assert metadata["default-sort-order-id"] == 2
    # an explicit id that an addition of the same commit proposed names what it got
    third = commit(
        served,
        "ids",
        "orders",
        {"action": "add-sort-order", "sort-order": order_json(1, 1, "asc")},
        {"action": "set-default-sort-order", "sort-order-id": 1},
    )
    assert third.status_code == 200, third.text
    metadata = third.json()["metadata"]
    assert metadata["default-sort-order-id"] == 3
    assert fields_by_id(metadata["sort-orders"], "order-id")[3][0]["direction"] == "asc"
    # an order the table has keeps its id and is not added twice
    again = commit(
        served,
        "ids",
        "orders",
        {"action": "add-sort-order", "sort-order": order_json(9, 1, "desc")},
        {"action": "set-default-sort-order", "sort-order-id": -1},
    )
    assert again.status_code == 200, again.text
    metadata = again.json()["metadata"]
    assert sorted(o["order-id"] for o in metadata["sort-orders"]) == [0, 1, 2, 3]
    assert metadata["default-sort-order-id"] == 1
    # -1 with nothing added is refused
    nothing = commit(
        served, "ids", "orders", {"action": "set-default-sort-order", "sort-order-id": -1}
    )
    assert nothing.status_code == 400


def test_two_commits_proposing_the_same_spec_and_schema_ids_both_land(served: Served) -> None:
    create(served, "ids", "specs")
    for name, source in (("id_b", 1), ("v_b", 2)):
        response = commit(
            served,
            "ids",
            "specs",
            {
                "action": "add-spec",
                "spec": {
                    "spec-id": 1,
                    "fields": [
                        {
                            "source-id": source,
                            "field-id": 1000,
                            "name": name,
                            "transform": "bucket[4]",
                        }
                    ],
                },
            },
            {"action": "set-default-spec", "spec-id": -1},
        )
        assert response.status_code == 200, response.text
    for name in ("extra_a", "extra_b"):
        schema = {
            **SCHEMA_JSON,
            "schema-id": 1,
            "fields": [
                *SCHEMA_JSON["fields"],
                {"id": 3, "name": name, "type": "int", "required": False},
            ],
        }
        response = commit(
            served,
            "ids",
            "specs",
            {"action": "add-schema", "schema": schema},
            {"action": "set-current-schema", "schema-id": -1},
        )
        assert response.status_code == 200, response.text
    metadata = load(served, "ids", "specs")["metadata"]
    specs = fields_by_id(metadata["partition-specs"], "spec-id")
    assert sorted(specs) == [0, 1, 2]
    assert [specs[1][0]["name"], specs[2][0]["name"]] == ["id_b", "v_b"]
    assert metadata["default-spec-id"] == 2
    schemas = {s["schema-id"]: s["fields"][-1]["name"] for s in metadata["schemas"]}
    assert schemas == {0: "v", 1: "extra_a", 2: "extra_b"}
    assert metadata["current-schema-id"] == 2
    # the first schema again: its id, not a copy
    response = commit(
        served,
        "ids",
        "specs",
        {"action": "add-schema", "schema": {**SCHEMA_JSON, "schema-id": 5}},
        {"action": "set-current-schema", "schema-id": -1},
    )
    assert response.status_code == 200, response.text
    metadata = response.json()["metadata"]
    assert [s["schema-id"] for s in metadata["schemas"]] == [0, 1, 2]
    assert metadata["current-schema-id"] == 0


def _order(order_id: int, source_id: int, direction: SortDirection) -> SortOrder:
    return SortOrder(SortField(source_id, IdentityTransform(), direction), order_id=order_id)


def test_pyiceberg_commits_get_sort_order_ids_as_in_iceberg(catalog: Catalog) -> None:
    table = catalog.create_table(
        ("ns", "t"), Schema(NestedField(1, "id", LongType()), NestedField(2, "v", StringType()))
    )
    for source, direction in ((1, SortDirection.DESC), (2, SortDirection.ASC)):
        catalog.commit_table(
            table,
            (),
            (
                AddSortOrderUpdate(sort_order=_order(1, source, direction)),
                SetDefaultSortOrderUpdate(sort_order_id=-1),
            ),
        )
    metadata = catalog.load_table(("ns", "t")).metadata
    assert [o.order_id for o in metadata.sort_orders] == [0, 1, 2]
    assert metadata.sort_order_by_id(2) == _order(2, 2, SortDirection.ASC)
    assert metadata.default_sort_order_id == 2


def test_a_rebased_commit_gets_a_fresh_sort_order_id(catalog: Catalog) -> None:
    """A transaction's sort order, rebased onto a concurrent commit that took
    the id it proposed, gets the next id instead of failing."""
    catalog.create_table(
        ("ns", "t"), Schema(NestedField(1, "id", LongType()), NestedField(2, "v", StringType()))
    )
    updates = (
        AddSortOrderUpdate(sort_order=_order(1, 1, SortDirection.ASC)),
        SetDefaultSortOrderUpdate(sort_order_id=-1),
    )
    tx = catalog.begin()  # type: ignore[attr-defined]
    tx.catalog.commit_table(tx.load_table(("ns", "t")), (), updates)
    theirs = (
        AddSortOrderUpdate(sort_order=_order(1, 2, SortDirection.DESC)),
        SetDefaultSortOrderUpdate(sort_order_id=-1),
    )
    catalog.commit_table(catalog.load_table(("ns", "t")), (), theirs)
    tx.commit()
    metadata = catalog.load_table(("ns", "t")).metadata
    assert metadata.sort_order_by_id(1) == _order(1, 2, SortDirection.DESC)
    assert metadata.sort_order_by_id(2) == _order(2, 1, SortDirection.ASC)
    assert metadata.default_sort_order_id == 2


def test_assign_ids_reuses_the_unsorted_order_and_refuses_a_last_added_without_one(
    catalog: Catalog,
) -> None:
    metadata = catalog.create_table(("ns", "t"), Schema(NestedField(1, "id", LongType()))).metadata
    unsorted = AddSortOrderUpdate(sort_order=SortOrder(order_id=4))
    assert assign_ids(metadata, (unsorted, SetDefaultSortOrderUpdate(sort_order_id=-1))) == (
        SetDefaultSortOrderUpdate(sort_order_id=0),
    )
    with pytest.raises(ValueError, match="no sort order was added"):
        assign_ids(metadata, (SetDefaultSortOrderUpdate(sort_order_id=-1),))
