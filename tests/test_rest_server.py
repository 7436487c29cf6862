"""The Iceberg REST server over real HTTP: PyIceberg's REST client and raw
requests against a server started on a free port (spec/rest.md)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pytest
import requests
from iceberg_helpers import ids_of, rows, table_files
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import (
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
    UnauthorizedError,
)
from rest_helpers import PREFIX, Served, change_of, serve

import olympia
from olympia.rest import BackgroundServer, create_app, open_catalog

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve(tmp_path_factory.mktemp("rest")) as s:
        yield s


def error_of(response: requests.Response) -> dict[str, object]:
    body = response.json()
    error: dict[str, object] = body["error"]
    # the wrapper; where the specification's schema is a bare ErrorModel, also its fields
    assert body in ({"error": error}, {"error": error, **error})
    assert error["code"] == response.status_code
    assert isinstance(error["message"], str) and error["message"]
    return error


# --- configuration ---------------------------------------------------------------


def test_config_advertises_prefix_and_endpoints(served: Served) -> None:
    response = requests.get(f"{served.uri}/v1/config", timeout=10)
    assert response.status_code == 200
    body = response.json()
    assert body["overrides"] == {"prefix": PREFIX}
    assert "POST /v1/{prefix}/transactions/commit" in body["endpoints"]
    assert "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}" in body["endpoints"]


# --- namespaces -------------------------------------------------------------------


@pytest.mark.parametrize("parent", ["ünï", "sl/ash", "p%25"])
def test_pyiceberg_lists_below_parents_it_encodes_twice(served: Served, parent: str) -> None:
    """PyIceberg 0.12's RestCatalog percent-encodes each level of ``parent``
    and requests encodes the query again: a parent with non-ASCII, ``/`` or
    ``%`` was "Namespace does not exist" although namespace_exists said it
    did. Iceberg's Java client, encoding once, still gets what it asks for."""
    rest = served.client()
    rest.create_namespace((parent, "child"))
    assert rest.namespace_exists((parent,))
    assert rest.list_namespaces((parent,)) == [(parent, "child")]
    once = requests.get(
        f"{served.uri}/v1/{PREFIX}/namespaces", params={"parent": parent}, timeout=10
    )
    assert once.status_code == 200 and once.json()["namespaces"] == [[parent, "child"]]
    missing = requests.get(
        f"{served.uri}/v1/{PREFIX}/namespaces", params={"parent": f"{parent}-none"}, timeout=10
    )
    assert missing.status_code == 404


def test_namespaces_nested_listing_properties_and_drop(served: Served) -> None:
    rest = served.client()
    rest.create_namespace(("ns1", "a"), {"owner": "ops"})
    rest.create_namespace(("ns1", "b"))
    rest.create_namespace(("ns1", "a", "deep"))
    assert rest.list_namespaces(("ns1",)) == [("ns1", "a"), ("ns1", "b")]
    assert rest.list_namespaces(("ns1", "a")) == [("ns1", "a", "deep")]
    assert rest.load_namespace_properties(("ns1", "a")) == {"owner": "ops"}
    assert rest.namespace_exists(("ns1", "b"))
    assert not rest.namespace_exists(("ns1", "zzz"))
    summary = rest.update_namespace_properties(("ns1", "a"), {"owner", "gone"}, {"tier": "gold"})
    assert (summary.removed, summary.updated, summary.missing) == (["owner"], ["tier"], ["gone"])
    assert rest.load_namespace_properties(("ns1", "a")) == {"tier": "gold"}
    rest.drop_namespace(("ns1", "b"))
    assert not rest.namespace_exists(("ns1", "b"))
    # what the server stored is what the olympia catalog holds
    assert served.catalog.load_namespace_properties(("ns1", "a")) == {"tier": "gold"}


def test_namespace_errors(served: Served) -> None:
    rest = served.client()
    rest.create_namespace("ns2")
    with pytest.raises(NamespaceAlreadyExistsError):
        rest.create_namespace("ns2")
    with pytest.raises(NoSuchNamespaceError):
        rest.load_namespace_properties("ns2_missing")
    with pytest.raises(NoSuchNamespaceError):
        rest.drop_namespace("ns2_missing")
    rest.create_table(("ns2", "t"), SCHEMA)
    with pytest.raises(NamespaceNotEmptyError):
        rest.drop_namespace("ns2")
    both = requests.post(
        served.url("namespaces/ns2/properties"),
        json={"removals": ["k"], "updates": {"k": "v"}},
        timeout=10,
    )
    assert both.status_code == 422
    assert error_of(both)["type"] == "UnprocessableEntityException"


def test_list_namespaces_pages(served: Served) -> None:
    for i in range(5):
        served.client().create_namespace(("pages", f"n{i}"))
    seen: list[list[str]] = []
    token = None
    while True:
        params = {"parent": "pages", "pageSize": "2", **({"pageToken": token} if token else {})}
        body = requests.get(served.url("namespaces"), params=params, timeout=10).json()
        assert len(body["namespaces"]) <= 2
        seen += body["namespaces"]
        token = body.get("next-page-token")
        if not token:
            break
    assert seen == [["pages", f"n{i}"] for i in range(5)]


# --- tables -----------------------------------------------------------------------


def test_create_append_read_through_rest_and_olympia(served: Served) -> None:
    rest = served.client()
    rest.create_namespace("t1")
    table = rest.create_table(("t1", "events"), SCHEMA)
    table.append(rows([1, 2, 3]))
    table.append(rows([4]))
    assert ids_of(rest.load_table(("t1", "events"))) == [1, 2, 3, 4]
    # the same table read directly from the olympia catalog
    assert ids_of(served.catalog.load_table(("t1", "events"))) == [1, 2, 3, 4]
    assert rest.list_tables("t1") == [("t1", "events")]
    assert rest.table_exists(("t1", "events"))
    assert not rest.table_exists(("t1", "nope"))
    location = served.catalog.olympia.latest().describe_table("t1", "events").metadata_location
    assert location == rest.load_table(("t1", "events")).metadata_location


def test_staged_create_lands_only_on_commit(served: Served) -> None:
    rest = served.client()
    rest.create_namespace("t2")
    before = served.catalog.olympia.version
    with rest.create_table_transaction(("t2", "staged"), SCHEMA) as tx:
        tx.append(rows([7, 8]))
        assert not rest.table_exists(("t2", "staged"))
        assert served.catalog.olympia.version == before
    assert served.catalog.olympia.version == before + 1
    assert ids_of(rest.load_table(("t2", "staged"))) == [7, 8]


def test_table_errors(served: Served) -> None:
    rest = served.client()
    rest.create_namespace("t3")
    rest.create_table(("t3", "x"), SCHEMA)
    with pytest.raises(TableAlreadyExistsError):
        rest.create_table(("t3", "x"), SCHEMA)
    with pytest.raises(NoSuchTableError):
        rest.load_table(("t3", "missing"))
    with pytest.raises(NoSuchNamespaceError):
        rest.create_table(("t3_missing", "x"), SCHEMA)
    missing = requests.get(served.url("namespaces/t3/tables/missing"), timeout=10)
    assert missing.status_code == 404
    assert error_of(missing)["type"] == "NoSuchTableException"


def test_stale_commit_refused_with_409(served: Served) -> None:
    rest = served.client()
    rest.create_namespace("t4")
    rest.create_table(("t4", "x"), SCHEMA).append(rows([1]))
    stale = rest.load_table(("t4", "x"))
    rest.load_table(("t4", "x")).append(rows([2]))
    tx = stale.transaction()
    tx.append(rows([3]))
    response = requests.post(served.url("namespaces/t4/tables/x"), json=change_of(tx), timeout=30)
    assert response.status_code == 409
    assert error_of(response)["type"] == "CommitFailedException"
    assert ids_of(rest.load_table(("t4", "x"))) == [1, 2]
    # PyIceberg's client retries a refused append on the refreshed table
    stale.append(rows([3]))
    assert ids_of(rest.load_table(("t4", "x"))) == [1, 2, 3]


def test_rename_drop_purge_register(served: Served) -> None:
    rest = served.client()
    rest.create_namespace("t5")
    rest.create_namespace("t5b")
    table = rest.create_table(("t5", "a"), SCHEMA)
    table.append(rows([1, 2]))
    rest.rename_table(("t5", "a"), ("t5b", "renamed"))
    assert rest.list_tables("t5") == []
    assert ids_of(rest.load_table(("t5b", "renamed"))) == [1, 2]
    location = rest.load_table(("t5b", "renamed")).metadata_location
    rest.drop_table(("t5b", "renamed"))
    assert not rest.table_exists(("t5b", "renamed"))
    registered = rest.register_table(("t5", "again"), location)
    assert ids_of(registered) == [1, 2]
    with pytest.raises(TableAlreadyExistsError):
        rest.register_table(("t5", "again"), location)
    data_files = [t.file.file_path for t in registered.scan().plan_files()]
    rest.purge_table(("t5", "again"))
    assert not rest.table_exists(("t5", "again"))
    # Kept while older versions hold the table; deleted by the expiration of
    # the last of them (spec/iceberg.md §4, Purge).
    assert data_files and all(os.path.exists(f.removeprefix("file://")) for f in data_files)
    served.catalog.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
    assert not any(os.path.exists(f.removeprefix("file://")) for f in data_files)
    with pytest.raises(NoSuchTableError):
        rest.drop_table(("t5", "again"))


def test_metrics_reports_are_accepted(served: Served) -> None:
    served.client().create_namespace("t6")
    scan = {
        "report-type": "scan-report",
        "table-name": "t6.x",
        "snapshot-id": 1,
        "filter": True,
        "schema-id": 0,
        "projected-field-ids": [1],
        "projected-field-names": ["id"],
        "metrics": {},
    }
    response = requests.post(served.url("namespaces/t6/tables/x/metrics"), json=scan, timeout=10)
    assert response.status_code == 204
    del scan["schema-id"]  # neither a complete scan report nor a commit report
    response = requests.post(served.url("namespaces/t6/tables/x/metrics"), json=scan, timeout=10)
    assert response.status_code == 400
    assert "scan report" in response.json()["error"]["message"]


# --- multi-table transactions -----------------------------------------------------


def test_transaction_commit_lands_as_one_version(served: Served) -> None:
    rest = served.client()
    rest.create_namespace("m1")
    a = rest.create_table(("m1", "a"), SCHEMA)
    b = rest.create_table(("m1", "b"), SCHEMA)
    changes = []
    for table, ids in ((a, [1, 2]), (b, [3])):
        tx = table.transaction()
        tx.append(rows(ids))
        changes.append(change_of(tx))
    before = served.catalog.olympia.version
    response = requests.post(
        served.url("transactions/commit"), json={"table-changes": changes}, timeout=30
    )
    assert response.status_code == 204, response.text
    history = served.catalog.olympia.history(since=before + 1)
    assert [h.version for h in history] == [before + 1]
    assert ids_of(rest.load_table(("m1", "a"))) == [1, 2]
    assert ids_of(rest.load_table(("m1", "b"))) == [3]
    # the version holds both tables' new metadata
    reader = olympia.load_catalog(served.warehouse.removeprefix("file://"))
    at = reader.at_version(before + 1)
    assert (
        at.describe_table("m1", "a").metadata_location
        == rest.load_table(("m1", "a")).metadata_location
    )
    assert (
        at.describe_table("m1", "b").metadata_location
        == rest.load_table(("m1", "b")).metadata_location
    )


def test_transaction_commit_failing_requirement_changes_nothing(served: Served) -> None:
    rest = served.client()
    rest.create_namespace("m2")
    a = rest.create_table(("m2", "a"), SCHEMA)
    b = rest.create_table(("m2", "b"), SCHEMA)
    stale_b = rest.load_table(("m2", "b"))
    b.append(rows([9]))  # stale_b's snapshot requirement no longer holds
    tx_a, tx_b = a.transaction(), stale_b.transaction()
    tx_a.append(rows([1]))
    tx_b.append(rows([2]))
    before = served.catalog.olympia.version
    response = requests.post(
        served.url("transactions/commit"),
        json={"table-changes": [change_of(tx_a), change_of(tx_b)]},
        timeout=30,
    )
    assert response.status_code == 409
    assert error_of(response)["type"] == "CommitFailedException"
    assert served.catalog.olympia.version == before
    assert ids_of(rest.load_table(("m2", "a"))) == []
    assert ids_of(rest.load_table(("m2", "b"))) == [9]


def test_transaction_commit_bad_requests(served: Served) -> None:
    no_identifier = requests.post(
        served.url("transactions/commit"),
        json={"table-changes": [{"requirements": [], "updates": []}]},
        timeout=10,
    )
    assert no_identifier.status_code == 400
    assert "identifier" in str(error_of(no_identifier)["message"])
    missing = requests.post(
        served.url("transactions/commit"),
        json={"table-changes": [{"identifier": {"namespace": ["m3"], "name": "x"}, "updates": []}]},
        timeout=10,
    )
    assert missing.status_code == 404


# --- bad input --------------------------------------------------------------------


def test_bad_input_gets_400_with_error_model(served: Served) -> None:
    control = requests.post(
        served.url("namespaces"), json={"namespace": ["bad\x01name"]}, timeout=10
    )
    assert control.status_code == 400
    assert "control character" in str(error_of(control)["message"])
    dotted = requests.post(served.url("namespaces"), json={"namespace": ["a.b"]}, timeout=10)
    assert dotted.status_code == 400
    empty = requests.post(served.url("namespaces"), json={"namespace": []}, timeout=10)
    assert empty.status_code == 400
    not_json = requests.post(
        served.url("namespaces"),
        data=b"{not json",
        headers={"Content-Type": "application/json"},
        timeout=10,
    )
    assert not_json.status_code == 400
    assert error_of(not_json)["type"] == "BadRequestException"
    bad_update = requests.post(
        served.url("namespaces/ns2/tables/t"),
        json={"requirements": [], "updates": [{"action": "no-such-action"}]},
        timeout=10,
    )
    assert bad_update.status_code == 400
    requests.post(served.url("namespaces"), json={"namespace": ["dup", "child"]}, timeout=10)
    for target in ("dup", "dup.child"):  # an implicit namespace, then one of its own
        twice = requests.post(
            served.url(f"namespaces/{target}/properties"),
            json={"removals": ["k", "k"], "updates": {"owner": "x"}},
            timeout=10,
        )
        assert twice.status_code == 400, twice.text
        assert "['k'] more than once" in str(error_of(twice)["message"])
    assert "owner" not in served.client().load_namespace_properties("dup.child")
    unknown = requests.get(f"{served.uri}/v1/{PREFIX}/nothing/here", timeout=10)
    assert unknown.status_code == 404
    error_of(unknown)


def test_values_pyiceberg_refuses_and_specs_that_do_not_fit_get_400(served: Served) -> None:
    """Types, transforms, partition specs and sort orders that PyIceberg's
    models or Iceberg's rules refuse: a 400 naming the value, never a 500
    (nor a table created, nor a commit whose outcome is "unknown")."""
    client = served.client()
    client.create_namespace("vals")
    client.create_table(("vals", "t"), pa.schema([("id", pa.int64()), ("s", pa.string())]))

    def field(type_: object) -> dict[str, object]:
        return {"id": 1, "name": "c", "required": False, "type": type_}

    def create(name: str, **extra: object) -> requests.Response:
        schema = {"type": "struct", "schema-id": 0, "fields": [field("long")]}
        body = {"name": name, "schema": schema, **extra}
        return requests.post(served.url("namespaces/vals/tables"), json=body, timeout=10)

    def spec(transform: str, source: int = 1) -> dict[str, object]:
        fields = [{"source-id": source, "field-id": 1000, "name": "p", "transform": transform}]
        return {"spec-id": 0, "fields": fields}

    def order(source: int) -> dict[str, object]:
        fields = [
            {
                "source-id": source,
                "transform": "identity",
                "direction": "asc",
                "null-order": "nulls-first",
            }
        ]
        return {"order-id": 1, "fields": fields}

    bad_types = ("decimal(1000, 2000)", "decimal(0, 0)", "fixed[-1]")
    refused = [
        *(create("u", schema={"type": "struct", "fields": [field(t)]}) for t in bad_types),
        create("u", **{"partition-spec": spec("bucket[-3]")}),
        create("u", **{"partition-spec": spec("truncate[0]")}),
        create("u", **{"partition-spec": spec("day")}),  # day of a long
        create("u", **{"partition-spec": spec("identity", source=77)}),
        create("u", **{"write-order": order(77)}),
    ]
    for updates in (
        [{"action": "add-schema", "schema": {"type": "struct", "fields": [field("fixed[-1]")]}}],
        # Added without being made default: PyIceberg checks only the default one.
        [{"action": "add-spec", "spec": spec("identity", source=77)}],
        [{"action": "add-spec", "spec": spec("day")}],
        [{"action": "add-sort-order", "sort-order": order(77)}],
    ):
        refused.append(
            requests.post(
                served.url("namespaces/vals/tables/t"),
                json={"requirements": [], "updates": updates},
                timeout=10,
            )
        )
    for updates in ([], [{"action": "set-properties", "updates": {"k": "v"}}]):
        # assert-create whose updates add no schema: nothing to create.
        refused.append(
            requests.post(
                served.url("namespaces/vals/tables/new"),
                json={"requirements": [{"type": "assert-create"}], "updates": updates},
                timeout=10,
            )
        )
    for response in refused:
        assert response.status_code == 400, response.text
        assert error_of(response)["type"] == "BadRequestException"
    messages = [str(error_of(r)["message"]) for r in refused]
    assert "1000" in messages[0] and "fixed[-1]" in messages[2]
    assert "truncate[0]" in messages[4] and "day" in messages[5]
    assert "without a current schema" in messages[-1]
    assert sorted(t[-1] for t in client.list_tables("vals")) == ["t"]
    table = client.load_table(("vals", "t"))
    assert len(table.specs()) == 1 and len(table.sort_orders()) == 1
    # What fits is accepted, default or not.
    ok = requests.post(
        served.url("namespaces/vals/tables/t"),
        json={"requirements": [], "updates": [{"action": "add-spec", "spec": spec("bucket[4]")}]},
        timeout=10,
    )
    assert ok.status_code == 200, ok.text
    assert len(client.load_table(("vals", "t")).specs()) == 2


def test_request_body_is_bounded(tmp_path: Path) -> None:
    with serve(tmp_path, max_body_bytes=1000) as small:
        big = {"namespace": ["n"], "properties": {"k": "x" * 2000}}
        response = requests.post(small.url("namespaces"), json=big, timeout=10)
        assert response.status_code == 413
        assert error_of(response)["type"] == "RequestTooLargeException"
        assert not small.catalog.namespace_exists("n")
        assert requests.post(small.url("namespaces"), json={"namespace": ["n"]}, timeout=10).ok


# --- authentication ---------------------------------------------------------------


def test_bearer_token_required(tmp_path: Path) -> None:
    with serve(tmp_path, token="s3cret") as locked:
        for response in (
            requests.get(f"{locked.uri}/v1/config", timeout=10),
            requests.get(
                locked.url("namespaces"), headers={"Authorization": "Bearer wrong"}, timeout=10
            ),
            requests.post(locked.url("namespaces"), json={"namespace": ["n"]}, timeout=10),
        ):
            assert response.status_code == 401
            assert error_of(response)["type"] == "NotAuthorizedException"
        assert not locked.catalog.namespace_exists("n")
        with pytest.raises(UnauthorizedError):
            locked.client()
        rest = locked.client(token="s3cret")
        rest.create_namespace("n")
        assert rest.list_namespaces() == [("n",)]
        # the transaction routes are guarded too
        assert requests.post(f"{locked.uri}/txn", json={}, timeout=10).status_code == 401
        auth = {"Authorization": "Bearer s3cret"}
        begun = requests.post(f"{locked.uri}/txn", json={}, headers=auth, timeout=10)
        assert begun.status_code == 200
        rollback = f"{locked.uri}/txn/{begun.json()['id']}/rollback"
        assert requests.post(rollback, timeout=10).status_code == 401
        assert requests.post(rollback, headers=auth, timeout=10).status_code == 204


# --- the command line -------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_cli_serve_with_token_file(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("from-file\n")
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    env.pop("OLYMPIA_TOKEN", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "olympia.cli", "serve", "--warehouse", str(tmp_path / "wh"),
         "--port", str(port), "--token-file", str(token_file)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        uri = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                status = requests.get(f"{uri}/v1/config", timeout=5).status_code
                break
            except requests.ConnectionError:
                assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
                assert time.monotonic() < deadline, "olympia serve did not start"
                time.sleep(0.2)
        assert status == 401
        rest = load_catalog("cli", **{"type": "rest", "uri": uri, "token": "from-file"})
        rest.create_namespace("cli")
        rest.create_table(("cli", "t"), SCHEMA).append(rows([5]))
        assert ids_of(rest.load_table(("cli", "t"))) == [5]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert olympia.load_catalog(str(tmp_path / "wh")).latest().list_tables("cli")


def test_cli_serve_refuses_empty_token_file(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n")
    result = subprocess.run(
        [sys.executable, "-m", "olympia.cli", "serve", "--warehouse", str(tmp_path / "wh"),
         "--token-file", str(empty)],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )  # fmt: skip
    assert result.returncode == 2
    assert "token file" in result.stderr and "empty" in result.stderr


# --- transactions over HTTP (/txn) -------------------------------------------------


def begin(served: Served, **body: object) -> dict[str, object]:
    response = requests.post(f"{served.uri}/txn", json=body, timeout=10)
    assert response.status_code == 200, response.text
    result: dict[str, object] = response.json()
    return result


def test_txn_scope_reads_own_writes_and_commits_one_version(served: Served) -> None:
    outside = served.client()
    outside.create_namespace("x1")
    outside.create_table(("x1", "a"), SCHEMA).append(rows([1]))
    txn = begin(served, isolation="serializable")
    assert txn["isolation"] == "serializable"
    assert str(txn["id"]) in requests.get(f"{served.uri}/txn", timeout=10).json()["transactions"]
    inside = load_catalog("in", **{"type": "rest", "uri": f"{served.uri}/txn/{txn['id']}"})
    inside.load_table(("x1", "a")).append(rows([2]))
    inside.create_table(("x1", "b"), SCHEMA).append(rows([3]))
    assert ids_of(inside.load_table(("x1", "a"))) == [1, 2]
    assert ids_of(outside.load_table(("x1", "a"))) == [1]
    assert not outside.table_exists(("x1", "b"))
    before = served.catalog.olympia.version
    done = requests.post(f"{served.uri}/txn/{txn['id']}/commit", timeout=30)
    assert done.status_code == 200, done.text
    assert done.json()["version"] == before + 1 == served.catalog.olympia.version
    assert ids_of(outside.load_table(("x1", "a"))) == [1, 2]
    assert ids_of(outside.load_table(("x1", "b"))) == [3]
    gone = requests.get(f"{served.uri}/txn/{txn['id']}/v1/config", timeout=10)
    assert gone.status_code == 404
    assert error_of(gone)["type"] == "NoSuchTransactionException"


def test_txn_refuses_removing_snapshots_which_the_client_deletes_at_once(served: Served) -> None:
    """Spark's expire_snapshots deletes the removed snapshots' files as soon
    as its commit is answered: inside a transaction a rollback then
    restored snapshots without files. Refused there (400); outside a
    transaction the commit is final and goes through."""
    outside = served.client()
    outside.create_namespace("x9")
    table = outside.create_table(("x9", "t"), SCHEMA)
    table.append(rows([1]))
    old = table.refresh().metadata.current_snapshot_id
    table.append(rows([2]))
    body = {"requirements": [], "updates": [{"action": "remove-snapshots", "snapshot-ids": [old]}]}
    txn = begin(served)
    inside = requests.post(
        f"{served.uri}/txn/{txn['id']}/v1/{PREFIX}/namespaces/x9/tables/t", json=body, timeout=30
    )
    assert inside.status_code == 400
    assert "removing snapshots of x9.t (expire_snapshots) is refused inside a transaction" in str(
        error_of(inside)["message"]
    )
    multi = requests.post(
        f"{served.uri}/txn/{txn['id']}/v1/{PREFIX}/transactions/commit",
        json={"table-changes": [{"identifier": {"namespace": ["x9"], "name": "t"}, **body}]},
        timeout=30,
    )
    assert multi.status_code == 400
    requests.post(f"{served.uri}/txn/{txn['id']}/rollback", timeout=30)
    assert old in [s.snapshot_id for s in outside.load_table(("x9", "t")).snapshots()]
    done = requests.post(f"{served.uri}/v1/{PREFIX}/namespaces/x9/tables/t", json=body, timeout=30)
    assert done.status_code == 200, done.text
    assert old not in [s.snapshot_id for s in outside.load_table(("x9", "t")).snapshots()]


def report_scan(base: str, table: tuple[str, str], snapshot_id: int) -> None:
    """POST a scan report of ``table`` at ``snapshot_id``, as Spark sends one
    (its filter sanitized), to the server or transaction at ``base``."""
    body = {
        "report-type": "scan-report",
        "table-name": ".".join(table),
        "snapshot-id": snapshot_id,
        "filter": True,
        "schema-id": 0,
        "projected-field-ids": [1],
        "projected-field-names": ["id"],
        "metrics": {},
    }
    response = requests.post(
        f"{base}/v1/{PREFIX}/namespaces/{table[0]}/tables/{table[1]}/metrics",
        json=body,
        timeout=30,
    )
    assert response.status_code == 204, response.text


def test_a_scan_report_in_a_serializable_txn_is_a_read_of_the_table_it_writes(
    served: Served,
) -> None:
    """Spark reads a table's files itself and says so only in its scan
    report: two SERIALIZABLE transactions that each read a table and append
    to it both committed (two rows given one id). The report now counts as
    a scan of the whole table when the transaction writes it."""
    outside = served.client()
    outside.create_namespace("x10")
    outside.create_table(("x10", "t"), SCHEMA).append(rows([1]))
    snapshot = outside.load_table(("x10", "t")).metadata.current_snapshot_id
    assert snapshot is not None
    results = []
    for isolation in ("serializable", "snapshot"):
        txn = begin(served, isolation=isolation)
        base = f"{served.uri}/txn/{txn['id']}"
        report_scan(base, ("x10", "t"), snapshot)
        inside = load_catalog("in", **{"type": "rest", "uri": base})
        inside.load_table(("x10", "t")).append(rows([2]))
        outside.load_table(("x10", "t")).append(rows([2]))  # commits first
        results.append(requests.post(f"{base}/commit", timeout=30))
        snapshot = outside.load_table(("x10", "t")).metadata.current_snapshot_id
    refused, rebased = results
    assert refused.status_code == 409
    assert "scan-filter-matches" in str(error_of(refused)["message"])
    assert rebased.status_code == 200  # SNAPSHOT checks no scans: the append is rebased


def test_a_scan_report_of_a_branch_is_checked_against_that_branch(served: Served) -> None:
    """A scan of a branch's head was taken for time travel and not recorded:
    two SERIALIZABLE transactions that read a branch and append to it both
    committed. It is now checked against the branch's own history."""
    outside = served.client()
    outside.create_namespace("x12")
    table = outside.create_table(("x12", "t"), SCHEMA)
    table.append(rows([1]))
    table.manage_snapshots().create_branch(
        table.refresh().metadata.current_snapshot_id, "audit"
    ).commit()
    table.refresh().append(rows([2]), branch="audit")
    head = outside.load_table(("x12", "t")).metadata.refs["audit"].snapshot_id
    txn = begin(served, isolation="serializable")
    base = f"{served.uri}/txn/{txn['id']}"
    report_scan(base, ("x12", "t"), head)
    inside = load_catalog("in", **{"type": "rest", "uri": base})
    inside.load_table(("x12", "t")).append(rows([3]), branch="audit")
    outside.load_table(("x12", "t")).append(rows([3]), branch="audit")  # commits first
    refused = requests.post(f"{base}/commit", timeout=30)
    assert refused.status_code == 409, refused.text
    assert "scan-filter-matches" in str(error_of(refused)["message"])


def test_a_load_of_an_empty_table_in_a_serializable_txn_is_a_read_of_it(served: Served) -> None:
    """Spark sends no scan report for a table without a snapshot: two
    'insert if absent' transactions on a new table both committed. Loading
    such a table inside a SERIALIZABLE transaction counts as reading it."""
    outside = served.client()
    outside.create_namespace("x11")
    outside.create_table(("x11", "t"), SCHEMA)
    txn = begin(served, isolation="serializable")
    base = f"{served.uri}/txn/{txn['id']}"
    inside = load_catalog("in", **{"type": "rest", "uri": base})
    inside.load_table(("x11", "t")).append(rows([7]))
    outside.load_table(("x11", "t")).append(rows([7]))  # commits first
    refused = requests.post(f"{base}/commit", timeout=30)
    assert refused.status_code == 409, refused.text
    assert "scan-filter-matches" in str(error_of(refused)["message"])
    assert ids_of(outside.load_table(("x11", "t"))) == [7]


def test_tables_created_over_rest_store_zstd_as_their_parquet_codec(served: Served) -> None:
    """Iceberg's own catalogs give a new table write.parquet.compression-codec
    = zstd (since 1.4); without it Spark's writers used gzip. A codec the
    request gives is kept."""
    client = served.client()
    client.create_namespace("codec")
    made = client.create_table(("codec", "t"), SCHEMA)
    assert made.properties["write.parquet.compression-codec"] == "zstd"
    kept = client.create_table(
        ("codec", "u"), SCHEMA, properties={"write.parquet.compression-codec": "snappy"}
    )
    assert kept.properties["write.parquet.compression-codec"] == "snappy"
    staged = client.create_table_transaction(("codec", "v"), SCHEMA)
    staged.commit_transaction()
    assert client.load_table(("codec", "v")).properties["write.parquet.compression-codec"] == "zstd"


def test_txn_rollback_leaves_nothing(served: Served) -> None:
    outside = served.client()
    outside.create_namespace("x2")
    txn = begin(served)
    inside = load_catalog("in", **{"type": "rest", "uri": f"{served.uri}/txn/{txn['id']}"})
    inside.create_table(("x2", "t"), SCHEMA).append(rows([1]))
    before = served.catalog.olympia.version
    response = requests.post(f"{served.uri}/txn/{txn['id']}/rollback", timeout=30)
    assert response.status_code == 204
    assert served.catalog.olympia.version == before
    assert not outside.table_exists(("x2", "t"))
    leftover = table_files(Path(served.warehouse.removeprefix("file://")))
    assert not [f for f in leftover if f.startswith("x2.db")]


def test_txn_conflict_is_409_and_publishes_nothing(served: Served) -> None:
    outside = served.client()
    outside.create_namespace("x3")
    outside.create_table(("x3", "t"), SCHEMA).append(rows([1, 2]))
    txn = begin(served, isolation="serializable")
    inside = load_catalog("in", **{"type": "rest", "uri": f"{served.uri}/txn/{txn['id']}"})
    inside.load_table(("x3", "t")).delete("id = 1")
    outside.load_table(("x3", "t")).delete("id = 2")
    before = served.catalog.olympia.version
    response = requests.post(f"{served.uri}/txn/{txn['id']}/commit", timeout=30)
    assert response.status_code == 409
    assert error_of(response)["type"] == "CommitFailedException"
    assert served.catalog.olympia.version == before
    assert ids_of(outside.load_table(("x3", "t"))) == [1]


def test_txn_unknown_and_bad_requests(served: Served) -> None:
    for url in (f"{served.uri}/txn/nope/commit", f"{served.uri}/txn/nope/rollback"):
        response = requests.post(url, timeout=10)
        assert response.status_code == 404
        assert error_of(response)["type"] == "NoSuchTransactionException"
    bad = requests.post(f"{served.uri}/txn", json={"isolation": "chaos"}, timeout=10)
    assert bad.status_code == 400


def test_distributed_txn_continues_on_another_server(served: Served, tmp_path: Path) -> None:
    outside = served.client()
    outside.create_namespace("x4")
    txn = begin(served, distributed=True)
    first = load_catalog("in1", **{"type": "rest", "uri": f"{served.uri}/txn/{txn['id']}"})
    first.create_table(("x4", "t"), SCHEMA).append(rows([1]))
    # a second server with its own catalog object on the same warehouse
    other_catalog = open_catalog(served.warehouse)
    with BackgroundServer(create_app(other_catalog, prefix=PREFIX)) as other:
        second = load_catalog("in2", **{"type": "rest", "uri": f"{other.uri}/txn/{txn['id']}"})
        second.load_table(("x4", "t")).append(rows([2]))
        response = requests.post(f"{other.uri}/txn/{txn['id']}/commit", timeout=30)
        assert response.status_code == 200, response.text
    assert ids_of(outside.load_table(("x4", "t"))) == [1, 2]


# --- distributed transactions as namespaces (sys.dtxns.<id>) -----------------------


def test_dtxn_namespace_begin_write_from_two_servers_commit(served: Served) -> None:
    rest = served.client()
    dtxn = ("sys", "dtxns", "dtxn_1234")
    rest.create_namespace(dtxn, {"isolation-level": "serializable"})
    assert dtxn in rest.list_namespaces(("sys", "dtxns"))
    assert rest.load_namespace_properties(dtxn)["isolation-level"] == "serializable"
    rest.create_namespace((*dtxn, "d1"))
    rest.create_table((*dtxn, "d1", "t"), SCHEMA).append(rows([1]))
    # the transaction sees the whole catalog as of its begin, plus its own writes
    inside = rest.list_namespaces(dtxn)
    assert (*dtxn, "d1") in inside and (*dtxn, "t1") in inside
    assert rest.list_tables((*dtxn, "d1")) == [(*dtxn, "d1", "t")]
    assert not rest.namespace_exists("d1")  # nothing visible outside yet
    # a second server process on the same warehouse continues the transaction
    with BackgroundServer(create_app(open_catalog(served.warehouse), prefix=PREFIX)) as other:
        second = load_catalog("second", **{"type": "rest", "uri": other.uri})
        assert ids_of(second.load_table((*dtxn, "d1", "t"))) == [1]
        second.load_table((*dtxn, "d1", "t")).append(rows([2]))
    before = served.catalog.olympia.version
    summary = rest.update_namespace_properties(dtxn, updates={"commit": "true"})
    assert summary.updated == ["commit"]
    assert served.catalog.olympia.version == before + 1
    assert ids_of(rest.load_table(("d1", "t"))) == [1, 2]
    assert dtxn not in rest.list_namespaces(("sys", "dtxns"))
    assert not rest.namespace_exists(dtxn)


def test_dtxn_namespace_drop_rolls_back(served: Served) -> None:
    rest = served.client()
    dtxn = ("sys", "dtxns", "dtxn_rb")
    rest.create_namespace(dtxn)
    rest.create_namespace((*dtxn, "d2"))
    rest.create_table((*dtxn, "d2", "t"), SCHEMA).append(rows([1]))
    namespaces = rest.list_namespaces()
    rest.drop_namespace(dtxn)
    # (dropping the transaction's record is a catalog version of its own)
    assert rest.list_namespaces() == namespaces
    assert not rest.namespace_exists("d2")
    assert not rest.namespace_exists(dtxn)
    with pytest.raises(NamespaceAlreadyExistsError):
        rest.create_namespace(dtxn)  # an id is used once


def test_dtxn_namespace_bad_requests(served: Served) -> None:
    rest = served.client()
    bad_name = requests.post(
        served.url("namespaces"), json={"namespace": ["sys", "dtxns", "no spaces"]}, timeout=10
    )
    assert bad_name.status_code == 400
    bad_isolation = requests.post(
        served.url("namespaces"),
        json={"namespace": ["sys", "dtxns", "d_iso"], "properties": {"isolation-level": "chaos"}},
        timeout=10,
    )
    assert bad_isolation.status_code == 400
    rest.create_namespace(("sys", "dtxns", "d_props"))
    other = requests.post(
        served.url("namespaces/sys\x1fdtxns\x1fd_props/properties"),
        json={"updates": {"owner": "me"}},
        timeout=10,
    )
    assert other.status_code == 400
    with pytest.raises(NoSuchNamespaceError):
        rest.load_namespace_properties(("sys", "dtxns", "never_begun"))
    with pytest.raises(NamespaceAlreadyExistsError):
        rest.create_namespace(("sys", "dtxns"))
    rest.drop_namespace(("sys", "dtxns", "d_props"))


# --- concurrency ------------------------------------------------------------------


def test_concurrent_clients_on_many_tables_all_land(served: Served) -> None:
    rest = served.client()
    rest.create_namespace("conc")
    for i in range(4):
        rest.create_table(("conc", f"t{i}"), SCHEMA)

    def work(i: int) -> None:
        client = served.client()
        for j in range(3):
            client.load_table(("conc", f"t{i % 4}")).append(rows([i * 10 + j]))

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(work, range(8)))
    found = sorted(x for i in range(4) for x in ids_of(rest.load_table(("conc", f"t{i}"))))
    assert found == sorted(i * 10 + j for i in range(8) for j in range(3))


# --- views ------------------------------------------------------------------------


def test_views_create_load_list_drop(served: Served) -> None:
    from pyiceberg.exceptions import NoSuchViewError, ViewAlreadyExistsError
    from pyiceberg.view.metadata import SQLViewRepresentation, ViewVersion

    rest = served.client()
    rest.create_namespace("vw")
    version = ViewVersion(
        version_id=1,
        schema_id=0,
        timestamp_ms=1,
        representations=[SQLViewRepresentation(type="sql", sql="SELECT 1 AS id", dialect="spark")],
        default_namespace=("vw",),
    )
    rest.create_view(("vw", "v"), SCHEMA, version)
    assert rest.list_views("vw") == [("vw", "v")]
    assert rest.view_exists(("vw", "v")) and not rest.view_exists(("vw", "nope"))
    sql = rest.load_view(("vw", "v")).sql_for("spark")
    assert sql is not None and sql.sql == "SELECT 1 AS id"
    loaded = requests.get(served.url("namespaces/vw/views/v"), timeout=10).json()
    info = served.catalog.olympia.latest().describe_view("vw", "v")
    assert loaded["metadata-location"] == info.metadata_location
    with pytest.raises(ViewAlreadyExistsError):
        rest.create_view(("vw", "v"), SCHEMA, version)
    rest.drop_view(("vw", "v"))
    assert not rest.view_exists(("vw", "v"))
    with pytest.raises(NoSuchViewError):
        rest.load_view(("vw", "v"))
    missing = requests.get(served.url("namespaces/vw/views/v"), timeout=10)
    assert missing.status_code == 404
    assert error_of(missing)["type"] == "NoSuchViewException"


def test_errors_are_worded_as_icebergs_reference_server(served: Served) -> None:
    """Iceberg's Java client and people reading Spark's errors rely on the
    wording of Iceberg's REST reference server (spec/rest.md §4)."""
    client = served.client()
    client.create_namespace("wording")
    client.create_table(("wording", "t"), SCHEMA)

    def message(response: requests.Response, status: int) -> str:
        assert response.status_code == status, response.text
        return str(error_of(response)["message"])

    got = requests.get(served.url("namespaces/nope"), timeout=10)
    assert message(got, 404) == "Namespace does not exist: nope"
    body = {"name": "t", "schema": {"type": "struct", "schema-id": 0, "fields": []}}
    got = requests.post(served.url("namespaces/wording/tables"), json=body, timeout=10)
    assert message(got, 409) == "Table already exists: wording.t"
    got = requests.get(served.url("namespaces/wording/views/v"), timeout=10)
    assert message(got, 404) == "View does not exist: wording.v"
    got = requests.get(served.url("namespaces/wording/tables/missing"), timeout=10)
    assert message(got, 404) == "Table does not exist: wording.missing"
    for requirement, wording in (
        (
            {"type": "assert-current-schema-id", "current-schema-id": 5},
            "Requirement failed: current schema changed: expected id 5 != 0",
        ),
        (
            {"type": "assert-last-assigned-field-id", "last-assigned-field-id": 9},
            "Requirement failed: last assigned field id changed: expected id 9 != 2",
        ),
        ({"type": "assert-create"}, "Requirement failed: table already exists"),
    ):
        change = {
            "identifier": {"namespace": ["wording"], "name": "t"},
            "requirements": [requirement],
            "updates": [],
        }
        got = requests.post(served.url("namespaces/wording/tables/t"), json=change, timeout=10)
        assert wording in message(got, 409)
        assert error_of(got)["type"] == "CommitFailedException"
