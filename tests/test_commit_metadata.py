"""Rollback targets and commit metadata (spec/format.md §3.2 "Rollback
roots", §3.7; spec/transactions.md §1.1, §6.1, §7; spec/rest.md §3, §8, §9):
what a rollback restored, and the message, author and properties of each
transaction, are stored in the version and returned by ``history()``, on
every surface that commits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import requests
from iceberg_helpers import olympia_catalog
from rest_helpers import PREFIX, Served, serve

import olympia
from olympia import group
from olympia.codec import (
    K_COMMIT_INFO,
    K_ROLLBACK_TO_VERSION,
    CommitInfo,
    NodeFile,
    RootInfo,
    decode_node,
    encode_node,
)
from olympia.definition import build_definition
from olympia.errors import CorruptCatalogError, InvalidArgumentError, InvalidArgumentTypeError
from olympia.node import EMPTY_LEAF
from olympia.proto import actions_pb2 as apb

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = pa.schema([("id", pa.int64())])


def _catalog(tmp_path: Path) -> olympia.Catalog:
    return olympia.create_catalog(str(tmp_path / "cat"))


# --- A. rollbacks record their target ---------------------------------------------


def test_rollback_records_the_version_it_restored(tmp_path: Path) -> None:
    cat = _catalog(tmp_path)
    for ns in ("a", "b", "c"):
        with cat.transaction() as txn:
            txn.create_namespace(ns)
    assert cat.version == 3
    new = cat.rollback_to(1)
    assert new == 4
    info = cat.history(since=4)[0]
    assert (info.rollback_to, info.rollback_from) == (1, 3)
    assert cat.store.load_root(4).info.rollback_to_version == 1
    assert cat.latest().list_namespaces() == ["a"]
    # ordinary versions have no target
    assert [h.rollback_to for h in cat.history()[:4]] == [None] * 4
    # a rollback to the rollback: the target is the version named, not the latest
    cat.rollback_to(2)
    assert (cat.history(since=5)[0].rollback_to, cat.history(since=5)[0].rollback_from) == (2, 4)


def test_a_rollback_stores_its_commit_metadata(tmp_path: Path) -> None:
    cat = _catalog(tmp_path)
    for ns in ("a", "b"):
        with cat.transaction() as txn:
            txn.create_namespace(ns)
    new = cat.rollback_to(1, message="undo the bad load", author="ops", properties={"ticket": "7"})
    (info,) = cat.history(since=new)
    assert (info.rollback_to, info.message, info.author) == (1, "undo the bad load", "ops")
    assert dict(info.properties) == {"ticket": "7"}
    again = olympia.load_catalog(str(tmp_path / "cat")).history(since=new)[0]
    assert (again.message, again.author) == ("undo the bad load", "ops")
    # bad metadata: refused before anything is written
    with pytest.raises(InvalidArgumentError, match="message"):
        cat.rollback_to(1, message="x" * (64 * 1024 + 1))
    with pytest.raises(InvalidArgumentTypeError, match="author"):
        cat.rollback_to(1, author=3)  # type: ignore[arg-type]
    assert cat.version == new
    # the CLI's rollback takes them too
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "olympia.cli",
            "rollback",
            "2",
            "-w",
            str(tmp_path / "cat"),
            "-m",
            "back again",
            "--author",
            "cli",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"rolled_back_to": 2, "version": new + 1}
    last = cat.history(since=new + 1)[0]
    assert (last.rollback_to, last.message, last.author) == (2, "back again", "cli")


def test_a_rollback_root_written_before_the_target_existed_reads_with_none(
    tmp_path: Path,
) -> None:
    cat = _catalog(tmp_path)
    with cat.transaction() as txn:
        txn.create_namespace("a")
    store = cat.store
    latest = store.load_latest()
    source = store.load_root(0)
    action = apb.Action(type=apb.CATALOG_ROLLBACK, object_key="")
    # the rollback root as earlier builds wrote it: no $rollback_to_version
    store.commit(
        2,
        source.node,
        latest.definition,
        store.new_transaction_id(),
        actions=[("", action.SerializeToString())],
        previous_root=latest.path,
        rollback_from_root=latest.path,
        begin_version=1,
    )
    reader = olympia.load_catalog(str(tmp_path / "cat"))
    info = reader.history(since=2)[0]
    assert (info.rollback_to, info.rollback_from) == (None, 1)
    assert info.message is None and info.author is None and dict(info.properties) == {}
    assert reader.latest().list_namespaces() == []


def _root_bytes(extra: dict[str, bytes], **root: Any) -> bytes:
    cat_def = build_definition({})
    info = RootInfo(
        version=5,
        catalog_def=cat_def.SerializeToString(deterministic=True),
        transaction_id="t1",
        **root,
    )
    return encode_node(NodeFile(EMPTY_LEAF, 1_700_000_000_000, info, extra=extra))


@pytest.mark.parametrize(
    ("extra", "root", "why"),
    [
        ({K_ROLLBACK_TO_VERSION: b"2"}, {}, "without \\$rollback_from_root"),
        ({K_ROLLBACK_TO_VERSION: b"5"}, {"rollback_from_root": "vn/x"}, "not below"),
        ({K_ROLLBACK_TO_VERSION: b"-1"}, {"rollback_from_root": "vn/x"}, "integer"),
        ({K_COMMIT_INFO: b"\xff\xff"}, {}, "VersionCommitInfo"),
        (
            {
                K_COMMIT_INFO: apb.VersionCommitInfo(
                    transactions=[apb.CommitInfo(transaction_id="other", message="m")]
                ).SerializeToString()
            },
            {},
            "does not hold",
        ),
        ({K_COMMIT_INFO: apb.VersionCommitInfo().SerializeToString()}, {}, "no entry"),
        (
            {
                K_COMMIT_INFO: apb.VersionCommitInfo(
                    transactions=[
                        apb.CommitInfo(transaction_id="t1", message="a"),
                        apb.CommitInfo(transaction_id="t1", message="b"),
                    ]
                ).SerializeToString()
            },
            {},
            "twice",
        ),
    ],
)
def test_damaged_rollback_targets_and_commit_metadata_are_refused(
    extra: dict[str, bytes], root: dict[str, Any], why: str
) -> None:
    data = _root_bytes(extra, **root)
    with pytest.raises(CorruptCatalogError, match=why):
        decode_node(data, "vn/test")


def test_valid_root_keys_decode() -> None:
    data = _root_bytes(
        {},
        rollback_from_root="vn/x",
        rollback_to_version=2,
        commit_infos=(("t1", CommitInfo("m", None, {"k": "v"})),),
    )
    root = decode_node(data, "vn/test").root
    assert root is not None
    assert root.rollback_to_version == 2
    assert root.commit_infos == (("t1", CommitInfo("m", None, {"k": "v"})),)


# --- B. commit metadata --------------------------------------------------------------


def test_a_plain_commit_stores_its_metadata(tmp_path: Path) -> None:
    cat = _catalog(tmp_path)
    txn = cat.begin(message="first load", author="ann", properties={"job": "nightly", "n": "1"})
    txn.create_namespace("a")
    version = txn.commit()
    (info,) = cat.history(since=version)
    assert (info.message, info.author, dict(info.properties)) == (
        "first load",
        "ann",
        {"job": "nightly", "n": "1"},
    )
    (record,) = info.transactions
    assert (record.transaction_id, record.message, record.author) == (txn.id, "first load", "ann")
    assert dict(record.properties) == {"job": "nightly", "n": "1"}
    # a fresh reader (no cache) reads it from the root
    again = olympia.load_catalog(str(tmp_path / "cat")).history(since=version)[0]
    assert again.transactions[0].message == "first load"


def test_a_with_block_and_set_commit_info(tmp_path: Path) -> None:
    cat = _catalog(tmp_path)
    with cat.transaction(isolation="serializable", message="", author="bot") as txn:
        txn.create_namespace("a")
    first = cat.history(since=cat.version)[0]
    # an empty message is a value, not "none"
    assert (first.message, first.author, dict(first.properties)) == ("", "bot", {})
    with cat.transaction(message="will be replaced") as txn:
        txn.create_namespace("b")
        assert txn.commit_info == CommitInfo("will be replaced")
        txn.set_commit_info(author="carl", properties={"ticket": "OPS-1"})
    second = cat.history(since=cat.version)[0]
    assert (second.message, second.author, dict(second.properties)) == (
        None,
        "carl",
        {"ticket": "OPS-1"},
    )
    with cat.transaction(message="dropped") as txn:
        txn.create_namespace("c")
        txn.set_commit_info()  # all None: no metadata
    third = cat.history(since=cat.version)[0]
    assert (third.message, third.author, dict(third.properties)) == (None, None, {})
    assert cat.store.load_root(cat.version).info.commit_infos == ()


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"message": 5}, InvalidArgumentTypeError, "'message' must be a string"),
        ({"author": b"x"}, InvalidArgumentTypeError, "'author' must be a string"),
        ({"properties": ["a"]}, InvalidArgumentTypeError, "'properties' must be a mapping"),
        ({"properties": {"a": 1}}, InvalidArgumentTypeError, "'properties'"),
        ({"properties": {1: "a"}}, InvalidArgumentTypeError, "'properties'"),
        ({"message": "x" * (64 * 1024 + 1)}, InvalidArgumentError, "'message' is 65537 bytes"),
        ({"author": "é" * 513}, InvalidArgumentError, "'author' is 1026 bytes"),
        ({"message": "\ud800"}, InvalidArgumentError, "surrogate"),
        ({"properties": {"": "v"}}, InvalidArgumentError, "empty key"),
        ({"properties": {"k" * 257: "v"}}, InvalidArgumentError, "'properties' \\(key\\)"),
        ({"properties": {"k": "v" * 4097}}, InvalidArgumentError, "4097 bytes"),
        ({"properties": {str(i): "v" for i in range(101)}}, InvalidArgumentError, "at most 100"),
    ],
)
def test_bad_commit_metadata_is_refused_before_anything_is_written(
    tmp_path: Path, kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    cat = _catalog(tmp_path)
    with pytest.raises(error, match=match):
        cat.begin(**kwargs)
    with pytest.raises(error, match=match):
        cat.transaction(**kwargs)
    txn = cat.begin()
    with pytest.raises(error, match=match):
        txn.set_commit_info(**kwargs)
    assert txn.commit_info is None
    assert cat.version == 0


def test_the_bounds_themselves_are_accepted(tmp_path: Path) -> None:
    cat = _catalog(tmp_path)
    props = {f"{i:0>256}": "v" * 4096 for i in range(100)}
    with cat.transaction(message="m" * 65536, author="a" * 1024, properties=props) as txn:
        txn.create_namespace("a")
    info = cat.history(since=1)[0]
    assert len(info.message or "") == 65536 and dict(info.properties) == props


_RESUME_AND_COMMIT = """
import sys, olympia
cat = olympia.load_catalog(sys.argv[1])
txn = cat.resume(sys.argv[2])
info = txn.commit_info
print(info.message if info else None, info.author if info else None, flush=True)
txn.create_namespace("from_child")
print(txn.commit(), flush=True)
"""


def _in_child(script: str, *args: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_a_distributed_transaction_commits_its_metadata_in_another_process(
    tmp_path: Path,
) -> None:
    uri = str(tmp_path / "cat")
    cat = olympia.create_catalog(uri)
    txn = cat.begin(message="set at begin", author="dora", properties={"step": "0"})
    txn.create_namespace("a")
    txn_id = txn.distribute()
    printed = _in_child(_RESUME_AND_COMMIT, uri, txn_id)
    assert printed[0] == "set at begin dora"
    version = int(printed[1])
    info = cat.history(since=version)[0]
    assert info.transaction_id == txn_id
    assert (info.message, info.author, dict(info.properties)) == (
        "set at begin",
        "dora",
        {"step": "0"},
    )
    assert cat.latest().list_namespaces() == ["a", "from_child"]


def test_metadata_set_on_a_distributed_handle_is_stored_at_once(tmp_path: Path) -> None:
    uri = str(tmp_path / "cat")
    cat = olympia.create_catalog(uri)
    txn = cat.begin()
    txn.create_namespace("a")
    txn_id = txn.distribute()
    resumed = cat.resume(txn_id)
    assert resumed.commit_info is None
    resumed.set_commit_info(message="set after distribute", author="eve")
    # a step of its state holds it: another handle taken now sees it ...
    assert cat.resume(txn_id).commit_info == CommitInfo("set after distribute", "eve")
    # ... and the handle that set it was not overtaken by its own step
    resumed.set_commit_info(message="again", author="eve")
    printed = _in_child(_RESUME_AND_COMMIT, uri, txn_id)
    assert printed[0] == "again eve"
    info = cat.history(since=int(printed[1]))[0]
    assert (info.message, info.author) == ("again", "eve")


def test_metadata_cleared_on_a_distributed_handle_stays_cleared(tmp_path: Path) -> None:
    cat = _catalog(tmp_path)
    txn = cat.begin(message="first")
    txn.create_namespace("a")
    txn_id = txn.distribute()
    txn.set_commit_info()
    resumed = cat.resume(txn_id)
    assert resumed.commit_info is None
    version = resumed.commit()
    assert cat.store.load_root(version).info.commit_infos == ()


def test_a_group_committed_version_keeps_each_transactions_metadata(tmp_path: Path) -> None:
    from test_group_commit import _catalog as group_catalog
    from test_group_commit import _commit_while_held

    uri = str(tmp_path / "cat")
    cat = group_catalog(uri, tables=3)
    base = cat.version
    txns = []
    for w in range(3):
        given = {} if w == 1 else {"message": f"writer {w}", "properties": {"w": str(w)}}
        txn = olympia.load_catalog(uri).begin(**given)  # type: ignore[arg-type]
        txn.update_table(f"w{w}", "t", metadata_location=f"s3://data/w{w}/v1.json")
        txns.append(txn)
    threads = _commit_while_held(cat, txns)
    assert [t.outcome for t in threads] == [base + 1] * 3
    (info,) = cat.history(since=base + 1)
    assert len(info.transactions) == 3
    by_id = {r.transaction_id: r for r in info.transactions}
    for w, txn in enumerate(txns):
        record = by_id[txn.id]
        if w == 1:
            assert (record.message, record.author, dict(record.properties)) == (None, None, {})
        else:
            assert (record.message, dict(record.properties)) == (f"writer {w}", {"w": str(w)})
    # stored once per transaction that has any, in the version's serial order
    root = cat.store.load_root(base + 1).info
    order = [e.transaction_id for e in root.group]
    assert [i for i, _ in root.commit_infos] == [i for i in order if i != txns[1].id]
    assert info.message == info.transactions[0].message


def test_group_requests_carry_metadata_in_a_format_earlier_holders_refuse() -> None:
    action = apb.Action(type=apb.NAMESPACE_CREATE, object_key="AAABx")
    plain = group.Request("t1", 3, 4, "snapshot", (action,), "b")
    assert group.encode(plain).startswith(b'{"v":2,')
    assert group.decode(group.encode(plain)) == plain
    given = group.Request("t1", 3, 4, "snapshot", (action,), "b", CommitInfo("m", "a", {"k": "v"}))
    data = group.encode(given)
    assert data.startswith(b'{"v":3,')
    assert group.decode(data) == given


def test_pyiceberg_plugin_passes_commit_metadata(tmp_path: Path) -> None:
    cat = olympia_catalog(f"file://{tmp_path}/wh")
    with cat.transaction(message="iceberg load", author="pyiceberg", properties={"a": "b"}) as tx:
        tx.create_namespace("sales")
        tx.create_table(("sales", "orders"), SCHEMA)
    tx2 = cat.begin(message="second")
    tx2.set_commit_info(message="second, edited")
    tx2.create_namespace("more")
    tx2.commit()
    history = cat.olympia.history()  # type: ignore[attr-defined]
    assert (history[-2].message, history[-2].author, dict(history[-2].properties)) == (
        "iceberg load",
        "pyiceberg",
        {"a": "b"},
    )
    assert history[-1].message == "second, edited"
    with pytest.raises(InvalidArgumentError, match="'author'"):
        cat.begin(author="x" * 2000)


# --- over HTTP ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve(tmp_path_factory.mktemp("rest-meta")) as s:
        yield s


def _last(served: Served) -> Any:
    core = served.catalog.olympia
    return core.history(since=core.version)[0]


def test_rest_txn_begin_and_commit_carry_metadata(served: Served) -> None:
    body = {"message": "over http", "author": "curl", "properties": {"a": "1"}}
    begun = requests.post(f"{served.uri}/txn", json=body, timeout=10)
    assert begun.status_code == 200, begun.text
    txn_id = begun.json()["id"]
    inside = served.client(uri=f"{served.uri}/txn/{txn_id}")
    inside.create_namespace("h1")
    extra = {"author": "curl 2", "properties": {"b": "2"}}
    done = requests.post(f"{served.uri}/txn/{txn_id}/commit", json=extra, timeout=30)
    assert done.status_code == 200, done.text
    info = _last(served)
    assert info.version == done.json()["version"]
    # the commit's values were added: author replaced, properties merged
    assert (info.message, info.author, dict(info.properties)) == (
        "over http",
        "curl 2",
        {"a": "1", "b": "2"},
    )


def test_rest_txn_bad_metadata_is_400(served: Served) -> None:
    for body in (
        {"message": 5},
        {"properties": {"k": 1}},
        {"author": "x" * 2000},
        {"properties": {"": "v"}},
    ):
        response = requests.post(f"{served.uri}/txn", json=body, timeout=10)
        assert response.status_code == 400, (body, response.text)
    begun = requests.post(f"{served.uri}/txn", json={}, timeout=10).json()
    bad = requests.post(
        f"{served.uri}/txn/{begun['id']}/commit", json={"message": "x" * 70000}, timeout=10
    )
    assert bad.status_code == 400
    assert "message" in bad.json()["error"]["message"]
    # nothing committed; the transaction is still open
    assert begun["id"] in requests.get(f"{served.uri}/txn", timeout=10).json()["transactions"]
    requests.post(f"{served.uri}/txn/{begun['id']}/rollback", timeout=10)


def _append_change(served: Served, name: str) -> dict[str, Any]:
    from rest_helpers import change_of

    rest = served.client()
    rest.create_namespace_if_not_exists("h1t")
    table = rest.create_table(("h1t", name), SCHEMA)
    tx = table.transaction()
    tx.append(pa.table({"id": pa.array([1], pa.int64())}))
    return change_of(tx)


def test_rest_multi_table_commit_takes_commit_fields(served: Served) -> None:
    change = _append_change(served, "a")
    body = {
        "table-changes": [change],
        "commit-message": "duckdb batch",
        "commit-author": "duck",
        "commit-properties": {"rows": "1"},
    }
    response = requests.post(served.url("transactions/commit"), json=body, timeout=30)
    assert response.status_code == 204, response.text
    info = _last(served)
    assert (info.message, info.author, dict(info.properties)) == (
        "duckdb batch",
        "duck",
        {"rows": "1"},
    )
    # without the fields, as Iceberg clients send it: no metadata
    plain = requests.post(
        served.url("transactions/commit"),
        json={"table-changes": [_append_change(served, "b")]},
        timeout=30,
    )
    assert plain.status_code == 204, plain.text
    assert _last(served).message is None
    change = _append_change(served, "c")
    before = served.catalog.olympia.version
    bad = requests.post(
        served.url("transactions/commit"),
        json={"table-changes": [change], "commit-properties": {"k": 5}},
        timeout=30,
    )
    assert bad.status_code == 400
    assert served.catalog.olympia.version == before


def test_rest_commit_fields_inside_a_transaction_are_refused(served: Served) -> None:
    change = _append_change(served, "d")
    txn_id = requests.post(f"{served.uri}/txn", json={}, timeout=10).json()["id"]
    response = requests.post(
        f"{served.uri}/txn/{txn_id}/v1/{PREFIX}/transactions/commit",
        json={"table-changes": [change], "commit-message": "no"},
        timeout=30,
    )
    assert response.status_code == 400
    assert "POST /txn" in response.json()["error"]["message"]
    requests.post(f"{served.uri}/txn/{txn_id}/rollback", timeout=10)


def test_dtxn_namespace_properties_carry_metadata(served: Served) -> None:
    rest = served.client()
    dtxn = ("sys", "dtxns", "dtxn_meta")
    rest.create_namespace(
        dtxn,
        {
            "isolation-level": "serializable",
            "commit.message": "from SQL",
            "commit.author": "spark",
            "commit.property.job.id": "42",
        },
    )
    props = rest.load_namespace_properties(dtxn)
    assert props["commit.message"] == "from SQL"
    assert props["commit.property.job.id"] == "42"
    rest.create_namespace((*dtxn, "dm"))
    rest.update_namespace_properties(dtxn, updates={"commit": "true", "commit.property.rows": "0"})
    info = _last(served)
    assert info.transaction_id == "dtxn_meta"
    assert (info.message, info.author, dict(info.properties)) == (
        "from SQL",
        "spark",
        {"job.id": "42", "rows": "0"},
    )


def test_dtxn_namespace_bad_metadata_is_400(served: Served) -> None:
    url = served.url("namespaces")
    for props in ({"commit.mesage": "typo"}, {"commit.author": "x" * 2000}):
        response = requests.post(
            url, json={"namespace": ["sys", "dtxns", "dtxn_bad"], "properties": props}, timeout=10
        )
        assert response.status_code == 400, response.text
    assert "dtxn_bad" not in requests.get(f"{served.uri}/txn", timeout=10).json()["transactions"]
    rest = served.client()
    dtxn = ("sys", "dtxns", "dtxn_bad2")
    rest.create_namespace(dtxn)
    response = requests.post(
        served.url("namespaces/sys%1Fdtxns%1Fdtxn_bad2/properties"),
        json={"removals": [], "updates": {"rollback": "true", "commit.message": "x"}},
        timeout=10,
    )
    assert response.status_code == 400
    rest.drop_namespace(dtxn)


def test_commit_metadata_is_read_by_another_process(tmp_path: Path) -> None:
    uri = str(tmp_path / "cat")
    cat = olympia.create_catalog(uri)
    with cat.transaction(message="persisted", properties={"x": "y"}) as txn:
        txn.create_namespace("a")
    out = _in_child(
        "import sys, olympia\n"
        "h = olympia.load_catalog(sys.argv[1]).history()[-1]\n"
        "print(h.message, dict(h.properties))",
        uri,
    )
    assert out == ["persisted {'x': 'y'}"]
