"""The REST server's trust boundary, over real HTTP (spec/rest.md §10).

The server trusts its operator (the command line: warehouse,
``--allowed-location``) and not its clients. Each test is one class of what
a hostile or mistaken client tried: reading files through ``register``,
deleting another table's files through purge or rollback, steering the
server's file I/O with table properties, writing outside the allowed
locations, names that are folders, unbounded server state, and requirements
that concurrent commits skipped.
"""

from __future__ import annotations

import copy
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import requests
from iceberg_helpers import files_under, ids_of, rows
from pyiceberg.manifest import clear_manifest_cache, write_manifest_list
from pyiceberg.table import StaticTable
from pyiceberg.table.snapshots import Snapshot
from rest_helpers import PREFIX, Served, change_of, serve

import olympia

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
SCHEMA_JSON = {
    "type": "struct",
    "schema-id": 0,
    "fields": [{"id": 1, "name": "id", "type": "long", "required": False}],
}
SECRET = "root:$6$not-a-real-hash:19000:0:99999:7:::"


@pytest.fixture(scope="module")
def outside(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder outside the warehouse, holding a file nobody may read through the server."""
    folder = tmp_path_factory.mktemp("outside")
    (folder / "shadow").write_text(SECRET)
    return folder


@pytest.fixture(scope="module")
def allowed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("allowed")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, allowed: Path) -> Iterator[Served]:
    with serve(tmp_path_factory.mktemp("trust"), allowed_locations=(f"file://{allowed}",)) as s:
        yield s


def error_of(response: requests.Response) -> dict[str, Any]:
    body = response.json()
    error: dict[str, Any] = body["error"]
    return error


def post(served: Served, path: str, body: Any, base: str | None = None) -> requests.Response:
    url = f"{base}/v1/{PREFIX}/{path}" if base else served.url(path)
    return requests.post(url, json=body, timeout=30)


def change(namespace: str, name: str, *updates: dict[str, Any]) -> dict[str, Any]:
    """A ``CommitTableRequest`` body with no requirements."""
    return {
        "identifier": {"namespace": [namespace], "name": name},
        "requirements": [],
        "updates": list(updates),
    }


def new_table(served: Served, namespace: str, name: str, values: list[int]) -> Any:
    client = served.client()
    if not client.namespace_exists(namespace):
        client.create_namespace(namespace)
    table = client.create_table((namespace, name), SCHEMA)
    table.append(rows(values))
    return client.load_table((namespace, name))


def warehouse_path(served: Served) -> Path:
    return Path(served.warehouse.removeprefix("file://"))


def stage_snapshot(
    served: Served, path: str, snapshot: dict[str, Any], base: str
) -> requests.Response:
    """Stage ``snapshot`` (a snapshot's JSON) on the table at ``path`` in the
    ``/txn`` transaction at ``base``, as the head of its main branch."""
    identifier = path.split("/")
    return post(
        served,
        path,
        change(
            identifier[1],
            identifier[3],
            {"action": "add-snapshot", "snapshot": snapshot},
            {
                "action": "set-snapshot-ref",
                "ref-name": "main",
                "type": "branch",
                "snapshot-id": snapshot["snapshot-id"],
            },
        ),
        base,
    )


def files_of(table: Any) -> set[str]:
    root = Path(table.metadata.location.removeprefix("file://"))
    return {str(root / f) for f in files_under(root)}


# --- 1. reading files through register ----------------------------------------------


def test_register_never_reads_outside_the_allowed_locations(served: Served, outside: Path):
    served.client().create_namespace("reg")
    for route, field in (("register", "metadata-location"), ("register-view", "metadata-location")):
        for location in (str(outside / "shadow"), f"file://{outside}/shadow", "/etc/shadow"):
            response = post(served, f"namespaces/reg/{route}", {"name": "x", field: location})
            assert response.status_code == 403, response.text
            assert error_of(response)["type"] == "ForbiddenException"
            assert location in error_of(response)["message"]
            assert SECRET not in response.text and "root:" not in response.text


def test_register_of_a_file_that_is_not_metadata_quotes_none_of_it(served: Served):
    served.client().create_namespace("reg2")
    inside = warehouse_path(served) / "notes"
    inside.mkdir(parents=True, exist_ok=True)
    (inside / "secret.json").write_text(json.dumps({"password": SECRET}))
    (inside / "secret.txt").write_text(SECRET)
    for name in ("secret.json", "secret.txt"):
        for route in ("register", "register-view"):
            location = f"{served.warehouse}/notes/{name}"
            response = post(
                served, f"namespaces/reg2/{route}", {"name": "x", "metadata-location": location}
            )
            assert response.status_code == 400, response.text
            assert "is not an Iceberg" in error_of(response)["message"]
            assert SECRET not in response.text and "password" not in response.text
    # A folder is bad input too, not a server error.
    response = post(
        served,
        "namespaces/reg2/register",
        {"name": "x", "metadata-location": f"{served.warehouse}/notes"},
    )
    assert response.status_code == 400, response.text
    assert "is a folder" in error_of(response)["message"]
    assert not served.client().table_exists(("reg2", "x"))


# --- 2 and 3. deleting another table's files ---------------------------------------


def test_locations_overlapping_a_table_staged_in_the_same_transaction_are_refused(
    served: Served,
):
    """The overlap rule compared with the tables of the latest version only:
    inside one transaction, a table created in another's folder, or given a
    write.data.path there, was accepted, and the first table's orphan
    clean-up then deleted the second's files."""
    from pyiceberg.catalog import load_catalog
    from pyiceberg.exceptions import ForbiddenError

    client = served.client()
    client.create_namespace("ovt")
    begun = requests.post(f"{served.uri}/txn", json={}, timeout=10).json()
    base = f"{served.uri}/txn/{begun['id']}"
    inside = load_catalog("in", **{"type": "rest", "uri": base})
    d = inside.create_table(("ovt", "d"), SCHEMA)
    with pytest.raises(ForbiddenError, match="where table ovt.d keeps its files"):
        inside.create_table(("ovt", "e"), SCHEMA, location=f"{d.metadata.location}/inner")
    with pytest.raises(ForbiddenError, match="property write.data.path of table ovt.f"):
        inside.create_table(
            ("ovt", "f"), SCHEMA, properties={"write.data.path": f"{d.metadata.location}/data"}
        )
    done = requests.post(f"{base}/commit", timeout=30)
    assert done.status_code == 200, done.text
    assert client.list_tables("ovt") == [("ovt", "d")]


def test_a_namespace_location_outside_the_allowed_ones_is_refused_when_set(
    served: Served, outside: Path, allowed: Path
):
    """CREATE NAMESPACE ... LOCATION outside the allowed locations was
    accepted, and every table created in it was then refused: refused when
    set (create or property update), 403 naming the namespace."""
    created = post(
        served, "namespaces", {"namespace": ["nsloc"], "properties": {"location": str(outside)}}
    )
    assert created.status_code == 403, created.text
    assert "the location of namespace nsloc" in error_of(created)["message"]
    assert not served.client().namespace_exists("nsloc")
    served.client().create_namespace("nsloc")
    updated = post(
        served, "namespaces/nsloc/properties", {"updates": {"location": f"file://{outside}/x"}}
    )
    assert updated.status_code == 403, updated.text
    assert "location" not in served.client().load_namespace_properties("nsloc")
    fine = post(
        served, "namespaces/nsloc/properties", {"updates": {"location": f"file://{allowed}/ns"}}
    )
    assert fine.status_code == 200, fine.text
    table = served.client().create_table(("nsloc", "t"), SCHEMA)
    assert table.metadata.location == f"file://{allowed}/ns/t"
    # Inside another table's folder, every table made there would overlap it.
    inside_table = post(
        served,
        "namespaces",
        {"namespace": ["nsloc2"], "properties": {"location": f"file://{allowed}/ns/t/sub"}},
    )
    assert inside_table.status_code == 403, inside_table.text
    assert "where table nsloc.t keeps its files" in error_of(inside_table)["message"]


@pytest.mark.parametrize("key", ["write.data.path", "write.metadata.path"])
def test_a_write_path_into_another_tables_location_is_refused(served: Served, key: str):
    """CREATE TABLE ... LOCATION inside table a was refused, but
    write.data.path set into a's folder was accepted: b's files landed in
    a's, where a's orphan clean-up (Spark's remove_orphan_files) deleted
    them. Refused like the location, on create and on commit."""
    a = new_table(served, "wp", "a" + key.split(".")[1], [1])
    b = new_table(served, "wp", "b" + key.split(".")[1], [2])
    inside = f"{a.metadata.location}/data"
    commit = post(
        served,
        f"namespaces/wp/tables/{b.name()[-1]}",
        change("wp", b.name()[-1], {"action": "set-properties", "updates": {key: inside}}),
    )
    assert commit.status_code == 403, commit.text
    assert f"property {key} of table wp.{b.name()[-1]}" in error_of(commit)["message"]
    assert f"where table wp.{a.name()[-1]} keeps its files" in error_of(commit)["message"]
    assert key not in served.client().load_table(b.name()).properties
    created = post(
        served,
        "namespaces/wp/tables",
        {"name": "c" + key.split(".")[1], "schema": SCHEMA_JSON, "properties": {key: inside}},
    )
    assert created.status_code == 403, created.text
    # Its own location, or a folder no table holds, is fine.
    mine = post(
        served,
        f"namespaces/wp/tables/{b.name()[-1]}",
        change(
            "wp",
            b.name()[-1],
            {"action": "set-properties", "updates": {key: f"{b.metadata.location}/elsewhere"}},
        ),
    )
    assert mine.status_code == 200, mine.text


def test_a_table_inside_another_tables_write_path_is_refused(served: Served, allowed: Path):
    """The overlap rule compared a new location with other tables' locations
    only: a table created inside the folder another table's write.data.path
    names (where its data files go) was accepted, and its orphan clean-up or
    purge then reached the other table's files. Every place a table keeps
    files (its location, each write.*.path) counts, both ways."""
    client = served.client()
    client.create_namespace("wpo")
    data_path = f"file://{allowed}/wpo/a-data"
    a = client.create_table(("wpo", "a"), SCHEMA, properties={"write.data.path": data_path})
    a.append(rows([1]))
    inside = post(
        served,
        "namespaces/wpo/tables",
        {"name": "b", "schema": SCHEMA_JSON, "location": f"{data_path}/b"},
    )
    assert inside.status_code == 403, inside.text
    assert f"overlaps {data_path}, where table wpo.a keeps its files" in error_of(inside)["message"]
    holding = post(
        served,
        "namespaces/wpo/tables",
        {"name": "c", "schema": SCHEMA_JSON, "location": f"file://{allowed}/wpo"},
    )
    assert holding.status_code == 403, holding.text
    assert "where table wpo.a keeps its files" in error_of(holding)["message"]
    assert client.list_tables("wpo") == [("wpo", "a")]
    beside = post(
        served,
        "namespaces/wpo/tables",
        {"name": "d", "schema": SCHEMA_JSON, "location": f"file://{allowed}/wpo-d"},
    )
    assert beside.status_code == 200, beside.text


def _open_txn(served: Served) -> tuple[str, Any]:
    """A ``/txn`` transaction and PyIceberg's REST client inside it."""
    from pyiceberg.catalog import load_catalog

    begun = requests.post(f"{served.uri}/txn", json={}, timeout=10).json()
    base = f"{served.uri}/txn/{begun['id']}"
    return base, load_catalog(f"in-{begun['id']}", **{"type": "rest", "uri": base})


@pytest.mark.parametrize("place", ["location", "write.data.path"])
def test_concurrent_transactions_cannot_claim_overlapping_places(
    served: Served, allowed: Path, place: str
):
    """Each transaction's overlap check saw only the tables committed when it
    staged its table: two open transactions, one creating a table at a
    location and the other a table inside it (or with its write.data.path
    there), both committed, and the first table's purge or orphan clean-up
    could then delete the second's files. The commit that comes second now
    checks the tables the versions committed meanwhile wrote (409, rule
    location-overlap; nothing of it published, its files deleted); two
    transactions whose tables do not overlap both commit."""
    client = served.client()
    ns = f"cc{place.split('.')[-1]}"
    client.create_namespace(ns)
    outer = f"file://{allowed}/{ns}-outer"
    first_base, first = _open_txn(served)
    second_base, second = _open_txn(served)
    third_base, third = _open_txn(served)
    first.create_table((ns, "outer"), SCHEMA, location=outer)
    if place == "location":
        staged = second.create_table((ns, "inner"), SCHEMA, location=f"{outer}/inner")
    else:
        staged = second.create_table(
            (ns, "inner"), SCHEMA, properties={"write.data.path": f"{outer}/data"}
        )
    staged.append(rows([7]))
    third.create_table((ns, "apart"), SCHEMA, location=f"file://{allowed}/{ns}-apart")
    assert requests.post(f"{first_base}/commit", timeout=30).status_code == 200
    # What the refused commit must delete: the metadata the server wrote for
    # the inner table and, under its own location, the client's data files.
    staged_home = Path(staged.metadata.location.removeprefix("file://"))
    assert any(f.endswith(".parquet") for f in files_under(staged_home)) == (place == "location")
    assert any(f.startswith("metadata") for f in files_under(staged_home))
    refused = requests.post(f"{second_base}/commit", timeout=30)
    assert refused.status_code == 409, refused.text
    message = error_of(refused)["message"]
    assert "rule location-overlap" in message
    assert f"overlaps {outer}, where table {ns}.outer keeps its files" in message
    assert requests.post(f"{third_base}/commit", timeout=30).status_code == 200
    assert sorted(client.list_tables(ns)) == [(ns, "apart"), (ns, "outer")]
    assert not files_under(staged_home)
    assert any(f.endswith(".metadata.json") for f in files_under(Path(outer[len("file://") :])))


@pytest.mark.parametrize("route", ["write.data.path", "location"])
def test_a_rebased_commit_cannot_take_back_a_place_another_table_took(
    served: Served, allowed: Path, route: str
):
    """A /txn transaction re-set a place its table already had (the same
    write.data.path; or set-location elsewhere and back), which was no new
    place when staged. Meanwhile the table gave the place up and another
    table was created there; the commit's rebase applied the transaction's
    updates to the newer metadata and put the place back: two tables kept
    files in one folder. What a commit claims is now what its rebased
    metadata has that the committed table has not (409, location-overlap)."""
    client = served.client()
    ns = f"rb{route.split('.')[-1]}"
    client.create_namespace(ns)
    place = f"file://{allowed}/{ns}-place"
    if route == "location":
        x = client.create_table((ns, "x"), SCHEMA, location=place)
        updates = [
            {"action": "set-location", "location": f"file://{allowed}/{ns}-elsewhere"},
            {"action": "set-location", "location": place},
        ]
        give_up = {"action": "set-location", "location": f"file://{allowed}/{ns}-moved"}
    else:
        x = client.create_table((ns, "x"), SCHEMA, properties={"write.data.path": place})
        updates = [{"action": "set-properties", "updates": {"write.data.path": place}}]
        give_up = {"action": "remove-properties", "removals": ["write.data.path"]}
    base, _ = _open_txn(served)
    staged = post(served, f"namespaces/{ns}/tables/x", change(ns, "x", *updates), base=base)
    assert staged.status_code == 200, staged.text
    moved = post(served, f"namespaces/{ns}/tables/x", change(ns, "x", give_up))
    assert moved.status_code == 200, moved.text
    taken = post(
        served, f"namespaces/{ns}/tables", {"name": "y", "schema": SCHEMA_JSON, "location": place}
    )
    assert taken.status_code == 200, taken.text
    refused = requests.post(f"{base}/commit", timeout=30)
    assert refused.status_code == 409, refused.text
    message = error_of(refused)["message"]
    assert "rule location-overlap" in message and f"table {ns}.y keeps its files" in message
    latest = client.load_table((ns, "x")).metadata
    assert place not in (latest.location, latest.properties.get("write.data.path"))
    assert x.metadata_location != client.load_table((ns, "x")).metadata_location


def test_a_table_cannot_be_registered_on_another_tables_files(served: Served):
    a = new_table(served, "own", "a", [1, 2])
    response = post(
        served, "namespaces/own/register", {"name": "b", "metadata-location": a.metadata_location}
    )
    assert response.status_code == 403, response.text
    assert "overlaps" in error_of(response)["message"]
    assert not served.client().table_exists(("own", "b"))


def test_purge_deletes_nothing_of_another_table_even_when_overlap_is_allowed(tmp_path: Path):
    with serve(tmp_path, allow_overlapping_locations=True) as lax:
        a = new_table(lax, "p", "a", [1, 2, 3])
        before = files_of(a)
        response = post(
            lax, "namespaces/p/register", {"name": "b", "metadata-location": a.metadata_location}
        )
        assert response.status_code == 200, response.text
        gone = requests.delete(lax.url("namespaces/p/tables/b?purgeRequested=true"), timeout=30)
        assert gone.status_code == 204
        lax.catalog.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
        assert files_of(a) == before
        assert ids_of(lax.client().load_table(("p", "a"))) == [1, 2, 3]
        # Purging A itself, now that it is alone, deletes its files.
        gone = requests.delete(lax.url("namespaces/p/tables/a?purgeRequested=true"), timeout=30)
        assert gone.status_code == 204
        lax.catalog.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
        assert not [f for f in before if Path(f).exists()]


def test_purge_keeps_another_tables_files_however_a_location_is_spelt(tmp_path: Path):
    """A file a kept table reaches is kept under every spelling of its
    path: "/a//metadata/x" is "/a/metadata/x" to the file system."""
    with serve(tmp_path, allow_overlapping_locations=True) as lax:
        a = new_table(lax, "sp", "a", [4, 5])
        before = files_of(a)
        respelt = a.metadata_location.replace("/metadata/", "//metadata/")
        assert respelt != a.metadata_location
        response = post(lax, "namespaces/sp/register", {"name": "c", "metadata-location": respelt})
        assert response.status_code == 200, response.text
        gone = requests.delete(lax.url("namespaces/sp/tables/c?purgeRequested=true"), timeout=30)
        assert gone.status_code == 204
        lax.catalog.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
        assert files_of(a) == before
        assert ids_of(lax.client().load_table(("sp", "a"))) == [4, 5]


def test_a_rollback_deletes_nothing_another_table_holds(served: Served):
    a = new_table(served, "rb", "a", [1])
    before = files_of(a)
    b = new_table(served, "rb", "b", [7])
    txn = requests.post(f"{served.uri}/txn", json={}, timeout=10).json()
    base = f"{served.uri}/txn/{txn['id']}"
    # Moving B onto A's location is refused ...
    moved = post(
        served,
        "namespaces/rb/tables/b",
        change("rb", "b", {"action": "set-location", "location": a.metadata.location}),
        base,
    )
    assert moved.status_code == 403, moved.text
    # ... and a snapshot of B naming A's manifest list is staged, then rolled back.
    snapshot = a.metadata.current_snapshot().model_dump(mode="json", by_alias=True)
    snapshot["snapshot-id"] = 4242
    snapshot["parent-snapshot-id"] = b.metadata.current_snapshot_id
    snapshot["sequence-number"] = b.metadata.last_sequence_number + 1
    staged = stage_snapshot(served, "namespaces/rb/tables/b", snapshot, base)
    assert staged.status_code == 200, staged.text
    assert requests.post(f"{base}/rollback", timeout=30).status_code == 204
    assert files_of(a) == before
    assert ids_of(served.client().load_table(("rb", "a"))) == [1]


def test_a_rollback_keeps_committed_files_a_staged_snapshot_says_it_added(served: Served):
    """A staged snapshot may list a data file the table already holds as
    added (``add_files`` without its duplicate check, or a hostile client):
    its rollback must not delete a file a committed snapshot reads."""
    a = new_table(served, "ca", "a", [1, 2])
    before = files_of(a)
    data_files = [task.file.file_path for task in a.scan().plan_files()]
    assert data_files
    txn = requests.post(f"{served.uri}/txn", json={}, timeout=10).json()
    inside = served.client(uri=f"{served.uri}/txn/{txn['id']}")
    inside.load_table(("ca", "a")).add_files(data_files, check_duplicate_files=False)
    staged = inside.load_table(("ca", "a"))
    assert sorted(ids_of(staged)) == [1, 1, 2, 2]
    assert requests.post(f"{served.uri}/txn/{txn['id']}/rollback", timeout=30).status_code == 204
    assert files_of(a) == before
    assert ids_of(served.client().load_table(("ca", "a"))) == [1, 2]


def table_at(served: Served, version: int, namespace: str, name: str) -> StaticTable:
    """The table as catalog version ``version`` holds it (time travel)."""
    location = served.catalog.committed_location(version, namespace, name)
    assert location is not None
    return StaticTable.from_metadata(location)


def test_a_rollback_keeps_files_only_an_older_catalog_version_reads(served: Served):
    """A table dropped without purge and created again at the same place:
    the catalog versions from before the drop still read the old table's
    files, which the new table's metadata does not reach. A transaction
    that adds one of them to the new table (``add_files``: its duplicate
    check only looks at the new table) and rolls back must leave it."""
    client = served.client()
    old = new_table(served, "dr", "a", [1, 2])
    old_files = [task.file.file_path for task in old.scan().plan_files()]
    an_hour_ago = time.time() - 3600  # as a table's older files are (the guard reads write times)
    for path in old_files:
        os.utime(path.removeprefix("file://"), (an_hour_ago, an_hour_ago))
    before = served.catalog.olympia.version
    client.drop_table(("dr", "a"))
    new = new_table(served, "dr", "a", [5])
    assert new.metadata.location == old.metadata.location  # the same folder
    txn = requests.post(f"{served.uri}/txn", json={}, timeout=10).json()
    inside = served.client(uri=f"{served.uri}/txn/{txn['id']}")
    inside.load_table(("dr", "a")).add_files(old_files)
    assert ids_of(inside.load_table(("dr", "a"))) == [1, 2, 5]
    assert requests.post(f"{served.uri}/txn/{txn['id']}/rollback", timeout=30).status_code == 204
    assert all(Path(f.removeprefix("file://")).exists() for f in old_files)
    assert ids_of(table_at(served, before, "dr", "a")) == [1, 2]
    assert ids_of(client.load_table(("dr", "a"))) == [5]


@pytest.mark.parametrize(
    ("ending", "loss"), [("rollback", "drop"), ("commit", "drop"), ("rollback", "expiry")]
)
def test_a_transaction_keeps_files_committed_after_it_began(served: Served, ending: str, loss: str):
    """Files another writer committed after a ``/txn`` transaction began,
    and which the latest version no longer reaches (the table dropped, or
    the snapshot removed from its metadata), are read by the versions in
    between: a transaction that adds one and is rolled back, or refused,
    must leave it."""
    client = served.client()
    table = f"meanwhile_{ending}_{loss}"
    new_table(served, table, "t", [])
    txn = requests.post(f"{served.uri}/txn", json={}, timeout=10).json()
    outside = client.load_table((table, "t"))
    outside.append(rows([1, 2, 3]))
    added = [task.file.file_path for task in outside.scan().plan_files()]
    between = served.catalog.olympia.version
    if loss == "drop":
        client.drop_table((table, "t"))
    else:
        snapshot = outside.metadata.current_snapshot_id
        done = post(
            served,
            f"namespaces/{table}/tables/t",
            change(
                table,
                "t",
                {"action": "remove-snapshot-ref", "ref-name": "main"},
                {"action": "remove-snapshots", "snapshot-ids": [snapshot]},
            ),
        )
        assert done.status_code == 200, done.text
    inside = served.client(uri=f"{served.uri}/txn/{txn['id']}")
    inside.load_table((table, "t")).add_files(added)
    ended = requests.post(f"{served.uri}/txn/{txn['id']}/{ending}", json={}, timeout=30)
    assert ended.status_code == (409 if ending == "commit" else 204), ended.text
    assert all(Path(f.removeprefix("file://")).exists() for f in added)
    assert ids_of(table_at(served, between, table, "t")) == [1, 2, 3]


def test_a_rollback_still_deletes_the_files_its_client_wrote(served: Served):
    """What a client wrote inside a ``/txn`` transaction is deleted when it
    rolls back: the guards above keep only files that existed before."""
    table = new_table(served, "cw", "a", [1])
    before = files_of(table)
    txn = requests.post(f"{served.uri}/txn", json={}, timeout=10).json()
    inside = served.client(uri=f"{served.uri}/txn/{txn['id']}")
    inside.load_table(("cw", "a")).append(rows([2, 3]))
    assert files_of(table) - before  # a data file, a manifest, a manifest list
    assert requests.post(f"{served.uri}/txn/{txn['id']}/rollback", timeout=30).status_code == 204
    assert files_of(table) == before
    assert ids_of(served.client().load_table(("cw", "a"))) == [1]


def forged_manifest_list(table: Any, claimed: Snapshot, snapshot_id: int) -> str:
    """A manifest list, written beside ``table``'s, listing the manifests of
    the committed snapshot ``claimed`` as added by ``snapshot_id``."""
    path = f"{table.metadata.location}/metadata/snap-forged-{snapshot_id}.avro"
    entries = [copy.copy(m) for m in claimed.manifests(table.io)]
    for m in entries:  # added_snapshot_id has no setter: its field, in a copy
        m._data = list(m._data)
        m._data[6] = snapshot_id
        assert m.added_snapshot_id == snapshot_id
    with write_manifest_list(
        format_version=2,
        output_file=table.io.new_output(path),
        snapshot_id=snapshot_id,
        parent_snapshot_id=table.metadata.current_snapshot_id,
        sequence_number=table.metadata.last_sequence_number + 1,
        avro_compression="deflate",
    ) as writer:
        writer.add_manifests(entries)
    return path


@pytest.mark.parametrize("named", ["manifest list", "manifest", "older manifest"])
def test_a_rebase_deletes_no_committed_file_a_staged_snapshot_named(served: Served, named: str):
    """A staged snapshot naming the table's committed manifest list as its
    own, or listing a committed manifest (one the head reads, or one only an
    older snapshot reads) as added by itself: when a concurrent commit makes
    the transaction rebase it, the files it replaces are committed ones, and
    stay."""
    table = "rbs" + named.replace(" ", "_")
    a = new_table(served, table, "a", [1])
    first = a.metadata.current_snapshot()
    assert first is not None
    if named == "older manifest":
        a.overwrite(rows([9]))
        a = served.client().load_table((table, "a"))
    before = files_of(a)
    txn = requests.post(f"{served.uri}/txn", json={}, timeout=10).json()
    base = f"{served.uri}/txn/{txn['id']}"
    current = a.metadata.current_snapshot()
    assert current is not None
    snapshot = current.model_dump(mode="json", by_alias=True)
    if named != "manifest list":
        snapshot["manifest-list"] = forged_manifest_list(a, first, 5151)
    snapshot["snapshot-id"] = 5151
    snapshot["parent-snapshot-id"] = a.metadata.current_snapshot_id
    snapshot["sequence-number"] = a.metadata.last_sequence_number + 1
    staged = stage_snapshot(served, f"namespaces/{table}/tables/a", snapshot, base)
    assert staged.status_code == 200, staged.text
    served.client().load_table((table, "a")).append(rows([2]))  # a concurrent commit
    # PyIceberg caches manifests by path with the fields of the list it read
    # them from first: a server that has not read them yet sees the forgery.
    clear_manifest_cache()
    done = requests.post(f"{base}/commit", json={}, timeout=30)
    assert done.status_code in (200, 204), done.text
    assert {f for f in before if not Path(f).exists()} == set()
    after = served.client().load_table((table, "a"))
    assert sorted(
        r["id"] for r in after.scan(snapshot_id=first.snapshot_id).to_arrow().to_pylist()
    ) == [1]
    assert 2 in ids_of(after)


def test_a_rebase_deletes_no_file_only_an_older_catalog_version_reads(served: Served):
    """A staged snapshot naming, as its own, the manifest list of a snapshot
    expired from the table's metadata: no snapshot of the committed metadata
    reads it, but the catalog versions from before the expiry do (time
    travel). A rebased commit must not delete it as obsolete."""
    client = served.client()
    a = new_table(served, "rbx", "a", [1])
    first = a.metadata.current_snapshot()
    assert first is not None
    a.append(rows([3]))
    before_expiry = served.catalog.olympia.version
    a.maintenance.expire_snapshots().by_id(first.snapshot_id).commit()
    a = client.load_table(("rbx", "a"))
    assert a.metadata.snapshot_by_id(first.snapshot_id) is None
    an_hour_ago = time.time() - 3600  # as a table's older files are (the guard reads write times)
    for path in files_of(a):
        os.utime(path, (an_hour_ago, an_hour_ago))
    before = files_of(a)
    txn = requests.post(f"{served.uri}/txn", json={}, timeout=10).json()
    base = f"{served.uri}/txn/{txn['id']}"
    current = a.metadata.current_snapshot()
    assert current is not None
    snapshot = current.model_dump(mode="json", by_alias=True)
    snapshot["manifest-list"] = first.manifest_list
    snapshot["snapshot-id"] = 6161
    snapshot["parent-snapshot-id"] = a.metadata.current_snapshot_id
    snapshot["sequence-number"] = a.metadata.last_sequence_number + 1
    staged = stage_snapshot(served, "namespaces/rbx/tables/a", snapshot, base)
    assert staged.status_code == 200, staged.text
    client.load_table(("rbx", "a")).append(rows([2]))  # a concurrent commit: the commit rebases
    done = requests.post(f"{base}/commit", json={}, timeout=30)
    assert done.status_code in (200, 204), done.text
    assert {f for f in before if not Path(f).exists()} == set()
    old = table_at(served, before_expiry, "rbx", "a")
    assert sorted(
        r["id"] for r in old.scan(snapshot_id=first.snapshot_id).to_arrow().to_pylist()
    ) == [1]


# --- 4. table properties never steer the server's I/O ------------------------------

#: Instances of SpyIO the server made (it runs in this process).
SPIED: list[dict[str, str]] = []


class SpyIO:
    """A FileIO class a client names in ``py-io-impl``: the server must never import it."""

    def __init__(self, properties: dict[str, str]) -> None:
        SPIED.append(dict(properties))
        raise RuntimeError("the server used a FileIO a client chose")


def test_table_properties_never_choose_the_servers_file_io(served: Served):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    hostile = {
        "py-io-impl": f"{__name__}.SpyIO",
        "s3.endpoint": f"http://127.0.0.1:{port}",
        "s3.access-key-id": "stolen",
        "s3.secret-access-key": "stolen",
    }
    table = new_table(served, "io", "t", [1])
    files = files_of(table)
    # From here on only raw requests: PyIceberg's client would itself use the
    # table's properties for its own FileIO (that is the client's business).
    for properties in (hostile, {"other": "x"}):
        update = {"action": "set-properties", "updates": properties}
        response = post(served, "namespaces/io/tables/t", change("io", "t", update))
        assert response.status_code == 200, response.text
    loaded = requests.get(served.url("namespaces/io/tables/t"), timeout=30)
    assert loaded.status_code == 200
    assert loaded.json()["metadata"]["properties"]["py-io-impl"] == f"{__name__}.SpyIO"
    gone = requests.delete(served.url("namespaces/io/tables/t?purgeRequested=true"), timeout=30)
    assert gone.status_code == 204
    assert SPIED == []
    with pytest.raises(OSError):
        listener.accept()  # nobody connected to the endpoint the client named
    listener.close()
    # The purge (run by expiration) goes through the operator's FileIO.
    served.catalog.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
    assert SPIED == []
    assert not [f for f in files if Path(f).exists()]


#: What SpyProvider was called with (the server runs in this process).
PROVIDED: list[tuple[object, ...]] = []


class SpyProvider:
    """A location provider a client names in ``write.py-location-provider.impl``:
    PyIceberg would import and call it; the server must never do so."""

    def __init__(self, *args: object) -> None:
        PROVIDED.append(args)
        raise RuntimeError("the server imported a location provider a client chose")


def test_table_properties_never_choose_code_the_server_imports(served: Served, outside: Path):
    """``write.py-location-provider.impl`` names a class PyIceberg imports
    and calls with the table's location: a client could make the server run
    any callable (``shutil.rmtree`` on a folder outside every allowed
    location). Refused with 400 on create, commit, ``/txn`` and register."""
    victim = outside / "victim"
    victim.mkdir()
    (victim / "keep").write_text("x")
    client = served.client()
    client.create_namespace("prov")
    table = client.create_table(("prov", "t"), SCHEMA)
    schema = json.loads(table.schema().model_dump_json(by_alias=True))
    for impl in (f"{__name__}.SpyProvider", "shutil.rmtree"):
        hostile = {"write.py-location-provider.impl": impl}
        created = post(
            served,
            "namespaces/prov/tables",
            {"name": "u", "schema": schema, "location": str(victim), "properties": hostile},
        )
        assert created.status_code in (400, 403), created.text
        for location in (None, str(victim)):
            updates: list[dict[str, Any]] = [{"action": "set-properties", "updates": hostile}]
            if location:
                updates.append({"action": "set-location", "location": location})
            committed = post(served, "namespaces/prov/tables/t", change("prov", "t", *updates))
            assert committed.status_code in (400, 403), committed.text
        txn = requests.post(f"{served.uri}/txn", json={}, timeout=10).json()
        staged = post(
            served,
            "namespaces/prov/tables/t",
            change("prov", "t", {"action": "set-properties", "updates": hostile}),
            f"{served.uri}/txn/{txn['id']}",
        )
        assert staged.status_code == 400, staged.text
        assert "write.py-location-provider.impl" in error_of(staged)["message"]
        assert requests.post(f"{served.uri}/txn/{txn['id']}/rollback", timeout=30).ok
    # A metadata file that names one is not registered either.
    home = f"{served.warehouse}/prov.db/r"
    metadata = client.load_table(("prov", "t")).metadata.model_copy(
        update={
            "location": home,
            "properties": {"write.py-location-provider.impl": f"{__name__}.SpyProvider"},
        }
    )
    forged = f"{home}/metadata/forged.metadata.json"
    with table.io.new_output(forged).create() as out:
        out.write(metadata.model_dump_json().encode())
    registered = post(
        served, "namespaces/prov/register", {"name": "r", "metadata-location": forged}
    )
    assert registered.status_code == 400, registered.text
    assert PROVIDED == []
    assert (victim / "keep").read_text() == "x"
    assert "write.py-location-provider.impl" not in client.load_table(("prov", "t")).properties
    assert sorted(t[-1] for t in client.list_tables("prov")) == ["t"]


# --- 5. locations outside the warehouse ---------------------------------------------


def test_locations_must_lie_under_the_warehouse_or_an_allowed_location(
    served: Served, outside: Path, allowed: Path
):
    client = served.client()
    client.create_namespace("loc")
    body = {
        "name": "t",
        "schema": json.loads(
            client.create_table(("loc", "ok"), SCHEMA).schema().model_dump_json(by_alias=True)
        ),
    }
    for location in (
        str(outside / "t"),
        f"file://{outside}/t",
        "relative/t",
        "",
        f"{served.warehouse}/../x",
        f"{served.warehouse}/vn",
        f"ftp://host{served.warehouse}/t",  # a scheme no FileIO writes
        # A host in a file URI: PyIceberg's FileIO takes "file://tmp/x" for
        # the relative path tmp/x, under the server's working directory.
        f"file:/{allowed}/t",
        f"file://localhost{allowed}/t",
        # The FileIO would end the path at "#": the file .../t.
        f"file://{allowed}/t#1",
        # The FileIO keeps white space: " /x" is a folder " " under the
        # working directory (checked, it used to be stripped first).
        f" {allowed}/t",
        f"\t{allowed}/t",
        f"{allowed}/t\n",
        f"file://{allowed}/t ",
    ):
        response = post(served, "namespaces/loc/tables", {**body, "location": location})
        assert response.status_code == 403, (location, response.text)
        assert error_of(response)["type"] == "ForbiddenException"
    for key in ("write.data.path", "write.metadata.path"):
        for value in (str(outside), f" {allowed}/m"):
            response = post(served, "namespaces/loc/tables", {**body, "properties": {key: value}})
            assert response.status_code == 403, (key, value, response.text)
    assert not list(outside.glob("t*")) and not list(outside.glob("**/*.metadata.json"))
    assert not Path(str(allowed).lstrip("/")).exists()  # relative to the working directory
    assert not list(Path().glob(" *")) and not list(Path().glob("\t*"))
    # An allowed location works.
    response = post(served, "namespaces/loc/tables", {**body, "location": f"file://{allowed}/t"})
    assert response.status_code == 200, response.text
    assert list((allowed / "t" / "metadata").glob("*.metadata.json"))
    # set-location: relative, empty and outside are refused; nothing is written.
    for location in ("rel", "", str(outside / "moved")):
        response = post(
            served,
            "namespaces/loc/tables/ok",
            change("loc", "ok", {"action": "set-location", "location": location}),
        )
        assert response.status_code == 403, (location, response.text)
    assert not Path("/metadata").exists() and not Path("rel").exists()
    assert not (outside / "moved").exists()


# --- 6 and 9. names that are folders ------------------------------------------------


def test_dot_names_are_refused(served: Served):
    client = served.client()
    client.create_namespace("dots")
    schema = json.loads(
        client.create_table(("dots", "ok"), SCHEMA).schema().model_dump_json(by_alias=True)
    )
    for name in (".", ".."):
        response = post(served, "namespaces/dots/tables", {"name": name, "schema": schema})
        assert response.status_code == 400, response.text
        assert "is not a name" in error_of(response)["message"]
    assert sorted(t[-1] for t in client.list_tables("dots")) == ["ok"]


# --- 7. a staged snapshot naming a missing file ------------------------------------


def test_a_snapshot_naming_a_missing_manifest_list_is_refused_and_rollback_works(served: Served):
    b = new_table(served, "miss", "b", [1])
    txn = requests.post(f"{served.uri}/txn", json={}, timeout=10).json()
    base = f"{served.uri}/txn/{txn['id']}"
    snapshot = b.metadata.current_snapshot().model_dump(mode="json", by_alias=True)
    snapshot.update(
        {
            "snapshot-id": 777,
            "parent-snapshot-id": b.metadata.current_snapshot_id,
            "sequence-number": b.metadata.last_sequence_number + 1,
            "manifest-list": f"{b.metadata.location}/metadata/snap-missing.avro",
        }
    )
    staged = post(
        served,
        "namespaces/miss/tables/b",
        change("miss", "b", {"action": "add-snapshot", "snapshot": snapshot}),
        base,
    )
    assert staged.status_code == 400, staged.text
    assert "does not exist" in error_of(staged)["message"]
    assert requests.post(f"{base}/rollback", timeout=30).status_code == 204
    assert requests.post(f"{base}/commit", timeout=30).status_code == 404  # it is over


# --- 8. bounded state ---------------------------------------------------------------


def test_unknown_transaction_ids_leave_nothing_behind(served: Served):
    sessions = served_sessions(served)
    before = sessions.held_state()
    for i in range(300):
        txn_id = f"{i:04d}" + "x" * 2000
        response = requests.get(f"{served.uri}/txn/{txn_id}/v1/config", timeout=10)
        assert response.status_code in (400, 404), response.text
    assert sessions.held_state() == before


def served_sessions(served: Served) -> Any:
    """The server's open transactions (olympia.rest.routes.dependencies.Served)."""
    sessions = served.server._server.config.app.state.olympia.sessions
    assert hasattr(sessions, "held_state")
    return sessions


def test_idle_transactions_are_rolled_back_and_open_ones_are_capped(tmp_path: Path):
    with serve(tmp_path, transaction_idle_seconds=1.0, max_open_transactions=2) as small:
        client = small.client()
        client.create_namespace("idle")
        first = requests.post(f"{small.uri}/txn", json={}, timeout=10).json()
        inside = f"{small.uri}/txn/{first['id']}"
        from pyiceberg.catalog import load_catalog

        in_txn = load_catalog("in", **{"type": "rest", "uri": inside})
        in_txn.create_table(("idle", "t"), SCHEMA).append(rows([1]))
        second = requests.post(f"{small.uri}/txn", json={}, timeout=10)
        assert second.status_code == 200
        third = requests.post(f"{small.uri}/txn", json={}, timeout=10)
        assert third.status_code == 503, third.text
        assert error_of(third)["type"] == "ServiceUnavailableException"
        time.sleep(1.5)
        # Beginning again finds both idle: they are rolled back, the files gone.
        again = requests.post(f"{small.uri}/txn", json={}, timeout=10)
        assert again.status_code == 200, again.text
        done = requests.post(f"{inside}/commit", timeout=10)
        assert done.status_code == 404
        # Says why it is gone, and how to keep one alive.
        message = str(error_of(done)["message"])
        assert "rolled back: no request used it for 1 s" in message
        assert "--transaction-idle-seconds" in message
        assert not client.table_exists(("idle", "t"))
        # Every file: the metadata the server wrote, and the data file,
        # manifest and manifest list the client wrote (they were left).
        assert not files_under(Path(small.warehouse.removeprefix("file://")) / "idle.db" / "t")


def test_olympia_txn_rollback_of_a_rest_transaction_deletes_its_files(tmp_path: Path):
    """The README's route for an abandoned distributed /txn transaction
    (olympia txn list, then txn rollback ID) rolled it back through the core
    alone: the metadata the server wrote, the files its clients wrote and its
    sidecar stayed for good. It now rolls back as the server's own rollback."""
    from pyiceberg.catalog import load_catalog

    from olympia.cli import main

    with serve(tmp_path) as served:
        client = served.client()
        client.create_namespace("cli")
        begun = requests.post(f"{served.uri}/txn", json={"distributed": True}, timeout=10).json()
        inside = load_catalog("in", **{"type": "rest", "uri": f"{served.uri}/txn/{begun['id']}"})
        inside.create_table(("cli", "t"), SCHEMA).append(rows([1]))
        warehouse = Path(served.warehouse.removeprefix("file://"))
        table = warehouse / "cli.db" / "t"
        assert any(f.endswith(".parquet") for f in files_under(table))
        assert (warehouse / "iceberg-txn" / f"{begun['id']}.json").exists()
        assert main(["txn", "rollback", begun["id"], "-w", str(warehouse)]) == 0
        assert not files_under(table)
        assert not (warehouse / "iceberg-txn" / f"{begun['id']}.json").exists()
        assert olympia.load_catalog(str(warehouse)).list_transactions() == []
        assert not client.table_exists(("cli", "t"))


def test_a_stopping_server_rolls_back_its_open_transactions_with_their_files(tmp_path: Path):
    """A local /txn transaction lives in the server's memory: one still open
    when the server stopped left the metadata the server wrote and the
    clients' files for good (nobody could finish it after). Stopping rolls
    each back as its client's rollback would; a distributed one stays."""
    from pyiceberg.catalog import load_catalog

    with serve(tmp_path) as first:
        client = first.client()
        client.create_namespace("stop")
        local = requests.post(f"{first.uri}/txn", json={}, timeout=10).json()
        shared = requests.post(f"{first.uri}/txn", json={"distributed": True}, timeout=10).json()
        for begun, name in ((local, "t"), (shared, "u")):
            inside = load_catalog(name, **{"type": "rest", "uri": f"{first.uri}/txn/{begun['id']}"})
            inside.create_table(("stop", name), SCHEMA).append(rows([1]))
        folder = Path(first.warehouse.removeprefix("file://")) / "stop.db"
        assert any(f.endswith(".parquet") for f in files_under(folder / "t"))
        warehouse = first.warehouse
    assert not files_under(folder / "t")
    assert any(f.endswith(".parquet") for f in files_under(folder / "u"))
    with serve(tmp_path) as second:
        assert second.warehouse == warehouse
        done = requests.post(f"{second.uri}/txn/{shared['id']}/commit", timeout=30)
        assert done.status_code == 200, done.text
        assert sorted(second.client().list_tables("stop")) == [("stop", "u")]


def test_a_transaction_used_by_its_status_request_is_not_rolled_back_as_idle(tmp_path: Path):
    """A Spark statement that runs longer than the idle limit sends the
    catalog nothing meanwhile; olympia.spark's block sends GET /txn/{id}
    every third of the limit (given by POST /txn), which keeps it open."""
    from olympia.spark import _KeepAlive

    with serve(tmp_path, transaction_idle_seconds=1.0) as small:
        client = small.client()
        client.create_namespace("alive")
        begun = requests.post(f"{small.uri}/txn", json={}, timeout=10).json()
        assert begun["idle-seconds"] == 1.0
        inside = f"{small.uri}/txn/{begun['id']}"
        status = requests.get(inside, timeout=10)
        assert status.status_code == 200 and status.json()["id"] == begun["id"]
        from pyiceberg.catalog import load_catalog

        load_catalog("in", **{"type": "rest", "uri": inside}).create_namespace(("alive", "x"))
        keep = _KeepAlive(inside, None, begun["idle-seconds"])
        try:
            for _ in range(5):  # 2.5 s of a long statement, and other begins checking idleness
                time.sleep(0.5)
                assert requests.post(f"{small.uri}/txn", json={}, timeout=10).status_code == 200
        finally:
            keep.stop()
        done = requests.post(f"{inside}/commit", timeout=10)
        assert done.status_code == 200, done.text
        assert client.namespace_exists(("alive", "x"))


# --- 10. requirements of concurrent plain commits ------------------------------------


def test_concurrent_commits_with_the_same_requirement_land_once(tmp_path: Path):
    """Four plain commits, each an append asserting the same snapshot, sent at
    once. Each root put is held back a moment, so that every request has
    checked its requirement before any of them publishes: the three that lose
    the race must then fail the requirement against the newest metadata
    (409), not be rebased past it."""
    from faulty_storage import Call, FaultyStorage

    import olympia

    with serve(tmp_path) as s:
        table = new_table(s, "req", "t", [1, 2, 3])
        inner = s.catalog.olympia
        faulty = FaultyStorage(inner.store.storage)

        def slow_publish(call: Call) -> None:
            if call.op == "put_if_absent" and call.path.startswith("vn/"):
                time.sleep(0.3)

        faulty.hook = slow_publish
        s.catalog.olympia = olympia.load_catalog(faulty)
        client = s.client()
        changes = []
        for i in range(4):
            tx = client.load_table(("req", "t")).transaction()
            tx.append(rows([10 + i]))
            changes.append(change_of(tx))
        assert all(
            any(r["type"] == "assert-ref-snapshot-id" for r in c["requirements"]) for c in changes
        )
        barrier = threading.Barrier(4)

        def send(change: dict[str, Any]) -> int:
            barrier.wait()
            return post(s, "namespaces/req/tables/t", change).status_code

        with ThreadPoolExecutor(4) as pool:
            codes = sorted(pool.map(send, changes))
        faulty.hook = None
        assert codes == [200, 409, 409, 409], codes
        landed = ids_of(client.load_table(("req", "t")))
        assert len(landed) == 4 and landed[:3] == [1, 2, 3], landed
        assert table.metadata.current_snapshot_id is not None


@pytest.mark.parametrize("how", ["expire", "txn rollback"])
def test_an_expired_rest_transaction_goes_with_the_files_its_clients_wrote(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], how: str
):
    """A distributed /txn transaction abandoned past its TTL: `olympia expire`
    dropped its object and left the metadata the server wrote, the files its
    client wrote and its sidecar for good; `olympia txn rollback ID` refused
    it as expired. Both now roll it back with them (spec/iceberg.md §6,
    "Expiry"); what other transactions committed stays."""
    from pyiceberg.catalog import load_catalog

    from olympia.cli import main

    warehouse = tmp_path / "warehouse"
    olympia.create_catalog(str(warehouse), distributed_txn_ttl_millis=2000)
    with serve(tmp_path) as served:
        client = served.client()
        client.create_namespace("gone")
        client.create_table(("gone", "kept"), SCHEMA).append(rows([1]))
        begun = requests.post(f"{served.uri}/txn", json={"distributed": True}, timeout=10).json()
        inside = load_catalog("in", **{"type": "rest", "uri": f"{served.uri}/txn/{begun['id']}"})
        inside.create_table(("gone", "t"), SCHEMA).append(rows([2]))
        inside.load_table(("gone", "kept")).append(rows([3]))
        kept_files = files_under(warehouse / "gone.db" / "kept")
        assert any(f.endswith(".parquet") for f in files_under(warehouse / "gone.db" / "t"))
        sidecar_file = warehouse / "iceberg-txn" / f"{begun['id']}.json"
        assert sidecar_file.exists()
        time.sleep(2.2)
        capsys.readouterr()
        if how == "expire":
            args = ["expire", "--keep-last", "1", "--grace-seconds", "0", "--allow-short-grace"]
            assert main([*args, "--json", "-w", str(warehouse)]) == 0
            assert json.loads(capsys.readouterr().out)["dropped_transactions"] == [begun["id"]]
        else:
            assert main(["txn", "rollback", begun["id"], "-w", str(warehouse)]) == 0
        assert not files_under(warehouse / "gone.db" / "t")
        assert not sidecar_file.exists()
        # The kept table lost only what the transaction's client wrote into it.
        left = files_under(warehouse / "gone.db" / "kept")
        assert left < kept_files
        assert ids_of(client.load_table(("gone", "kept"))) == [1]
        assert olympia.load_catalog(str(warehouse)).list_transactions(include_expired=True) == []
        late = requests.post(f"{served.uri}/txn/{begun['id']}/commit", timeout=10)
        assert late.status_code == 404 and "is not open" in late.text
        assert not client.table_exists(("gone", "t"))
