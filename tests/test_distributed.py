"""Distributed transactions: persisted, resumed and committed in other processes."""

from __future__ import annotations

import multiprocessing

import pytest

import olympia
from olympia.errors import (
    CommitConflictError,
    TransactionClosedError,
    TransactionExpiredError,
    TransactionNotFoundError,
)


def _step_in_child(uri: str, opts: dict, txn_id: str, table: str, commit: bool, out) -> None:
    cat = olympia.load_catalog(uri, opts)
    txn = cat.resume(txn_id)
    txn.create_table("sales", table, f"m/{table}")
    out.put(txn.commit() if commit else len(txn.actions))


def _run_child(*args) -> object:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_step_in_child, args=(*args, out))
    proc.start()
    result = out.get(timeout=120)
    proc.join(60)
    assert proc.exitcode == 0
    return result


@pytest.mark.parametrize("any_storage_location", ["local", "s3"], indirect=True)
def test_resume_and_commit_in_other_processes(any_storage_location):
    uri, opts = any_storage_location
    cat = olympia.create_catalog(uri, opts)
    with cat.transaction() as t:
        t.create_namespace("sales")
    txn = cat.begin("serializable")
    txn.create_table("sales", "orders", "m/orders")
    txn_id = txn.distribute()
    assert txn_id == txn.id
    [info] = cat.list_transactions()
    assert (info.id, info.isolation, info.begin_version) == (txn_id, "serializable", 1)
    assert info.expires_at_millis > info.created_at_millis
    # Nobody else sees the pending table.
    assert cat.latest().list_tables("sales") == []
    # A step in another process: each create_table also records its checks as reads.
    assert _run_child(uri, opts, txn_id, "items", False) == 5
    version = _run_child(uri, opts, txn_id, "refunds", True)  # and the commit in a third
    assert cat.latest().list_tables("sales") == ["items", "orders", "refunds"]
    assert cat.list_transactions() == []
    [record] = [h for h in cat.history() if h.version == version]
    assert record.transaction_id == txn_id and record.begin_version == 1
    with pytest.raises(TransactionNotFoundError, match=txn_id):
        cat.resume(txn_id)


def test_two_processes_advancing_one_transaction(tmp_path):
    uri = str(tmp_path / "c")
    cat = olympia.create_catalog(uri)
    with cat.transaction() as t:
        t.create_namespace("sales")
    txn_id = cat.begin().distribute()
    first = cat.resume(txn_id)
    second = olympia.load_catalog(uri).resume(txn_id)
    first.create_table("sales", "a", "m/a")
    with pytest.raises(CommitConflictError, match="advanced") as info:
        second.create_table("sales", "b", "m/b")
    assert info.value.rule == "transaction-advanced"
    with pytest.raises(TransactionClosedError):
        second.create_table("sales", "b", "m/b")
    again = cat.resume(txn_id)  # sees the first process's step
    assert again.list_tables("sales") == ["a"]
    again.create_table("sales", "b", "m/b")
    again.commit()
    assert cat.latest().list_tables("sales") == ["a", "b"]


def test_double_commit_is_refused(tmp_path):
    uri = str(tmp_path / "c")
    cat = olympia.create_catalog(uri)
    with cat.transaction() as t:
        t.create_namespace("sales")
    txn = cat.begin()
    txn.create_table("sales", "a", "m/a")
    txn_id = txn.distribute()
    other = cat.resume(txn_id)
    version = txn.commit()
    with pytest.raises((CommitConflictError, TransactionClosedError)):
        other.commit()
    assert cat.version == version
    assert cat.latest().list_tables("sales") == ["a"]


def test_rollback_of_a_distributed_transaction(tmp_path):
    cat = olympia.create_catalog(str(tmp_path / "c"))
    with cat.transaction() as t:
        t.create_namespace("sales")
    txn = cat.begin()
    txn.create_table("sales", "a", "m/a")
    txn_id = txn.distribute()
    cat.resume(txn_id).rollback()
    assert cat.list_transactions() == []
    assert cat.latest().list_tables("sales") == []
    with pytest.raises(TransactionNotFoundError):
        cat.resume(txn_id)


def test_expired_transaction_cannot_be_resumed(tmp_path):
    cat = olympia.create_catalog(str(tmp_path / "c"), distributed_txn_ttl_millis=1)
    txn = cat.begin()
    txn_id = txn.distribute()
    import time

    time.sleep(0.01)
    with pytest.raises(TransactionExpiredError, match=txn_id):
        cat.resume(txn_id)
    assert cat.list_transactions() == []
    assert [t.id for t in cat.list_transactions(include_expired=True)] == [txn_id]
    with cat.transaction() as t:
        t.create_namespace("later")
    result = cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
    assert cat.list_transactions(include_expired=True) == []  # its object was dropped
    assert result.oldest_version == cat.version  # and it no longer holds the floor back
    assert cat.store.storage.list("dtxn") == []
    # Its folder goes with its state files (a soak left hundreds of empty ones).
    assert not (tmp_path / "c" / "dtxn" / txn_id).exists()


def test_distributed_transaction_conflicts_like_any_other(tmp_path):
    cat = olympia.create_catalog(str(tmp_path / "c"))
    with cat.transaction() as t:
        t.create_namespace("sales")
        t.create_table("sales", "a", "m/a0")
    txn = cat.begin()
    txn.update_table("sales", "a", metadata_location="m/a1")
    txn_id = txn.distribute()
    with cat.transaction() as t:
        t.update_table("sales", "a", metadata_location="m/a2")
    with pytest.raises(CommitConflictError) as info:
        cat.resume(txn_id).commit()
    assert info.value.rule == "write-write"
    assert cat.latest().describe_table("sales", "a").metadata_location == "m/a2"
    assert cat.list_transactions() == []  # a failed commit cleans its object up


def _old_transaction(tmp_path):
    """A catalog of a few versions and a transaction begun at the first."""
    cat = olympia.create_catalog(str(tmp_path / "c"))
    with cat.transaction() as t:
        t.create_namespace("ns")
    txn = cat.begin()
    txn.create_table("ns", "late", "s3://x/late.json")
    for i in range(3):
        with cat.transaction() as t:
            t.create_table("ns", f"t{i}", f"s3://x/{i}.json")
    return cat, txn


def test_distribute_refuses_a_transaction_whose_begin_version_was_expired(tmp_path):
    """The id distribute() returns always resumes (spec/transactions.md
    §6.2): with its begin version expired it could not, nor commit."""
    cat, txn = _old_transaction(tmp_path)
    cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
    assert cat.oldest_version > txn.begin_version
    with pytest.raises(olympia.TransactionExpiredError, match="was expired"):
        txn.distribute()
    assert cat.list_transactions() == []


def test_an_expiration_keeps_a_transaction_distributed_while_it_runs(tmp_path, monkeypatch):
    """Distributed after the expiration listed the open transactions, before
    it wrote the floor: the floor still stays at its begin version, and the
    id resumes."""
    from olympia import catalog as catalog_module

    cat, txn = _old_transaction(tmp_path)
    expire = catalog_module.maintenance.expire_versions
    ids: list[str] = []

    def distribute_first(*args, **kwargs):
        ids.append(txn.distribute())  # the open transactions were listed already
        return expire(*args, **kwargs)

    monkeypatch.setattr(catalog_module.maintenance, "expire_versions", distribute_first)
    cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
    assert cat.oldest_version <= txn.begin_version
    resumed = olympia.load_catalog(str(tmp_path / "c")).resume(ids[0])
    assert resumed.commit() == cat.version
    assert cat.latest().table_exists("ns", "late")


def test_a_catalog_rollback_never_brings_back_a_finished_transaction(tmp_path):
    """rollback_to restored the target's whole tree, distributed transactions'
    objects included: one committed (or rolled back) since came back open,
    could be rolled back after its commit was acknowledged (two outcomes for
    one id) and held the expiration floor. A rollback restores the catalog's
    objects and keeps the latest version's transaction objects: finished
    ones stay finished, an open one stays open and its commit is then
    refused (catalog-rollback)."""
    cat = olympia.create_catalog(str(tmp_path / "c"))
    with cat.transaction() as t:
        t.create_namespace("a")
    committed = cat.begin("serializable")
    committed.create_table("a", "x", "s3://b/x/v1.json")
    committed_id = committed.distribute()
    rolled_back = cat.begin()
    rolled_back.create_table("a", "y", "s3://b/y/v1.json")
    rolled_back_id = rolled_back.distribute()
    target = cat.latest().version  # both open here
    done = cat.resume(committed_id).commit()
    cat.resume(rolled_back_id).rollback()
    still_open = cat.begin()
    still_open.create_table("a", "z", "s3://b/z/v1.json")
    open_id = still_open.distribute()
    assert cat.at_version(done).list_tables("a") == ["x"]

    restored = cat.rollback_to(target)
    assert cat.latest().list_tables("a") == []  # the catalog's objects are target's
    assert [i.id for i in cat.list_transactions()] == [open_id]
    for finished in (committed_id, rolled_back_id):
        with pytest.raises(TransactionNotFoundError, match="no open distributed transaction"):
            cat.resume(finished, recover_after_seconds=0)
    with pytest.raises(CommitConflictError) as err:
        cat.resume(open_id).commit()
    assert err.value.rule == "catalog-rollback"
    assert cat.list_transactions() == []
    assert cat.latest().list_tables("a") == []
    [info] = [i for i in cat.history(since=restored) if i.version == restored]
    assert info.rollback_to == target


def test_an_expired_transaction_resumes_only_for_rollback(tmp_path):
    """``resume(id, expired=True)``: the handle a layer above the core uses to
    delete what an expired transaction wrote (spec/transactions.md §6.6)."""
    import time

    cat = olympia.create_catalog(str(tmp_path / "c"), distributed_txn_ttl_millis=300)
    with cat.transaction() as t:
        t.create_namespace("sales")
    txn = cat.begin()
    txn.create_table("sales", "a", "m/a")
    txn_id = txn.distribute()
    fresh = cat.resume(txn_id, expired=True)  # not expired yet: an ordinary handle
    assert fresh.describe_table("sales", "a").metadata_location == "m/a"
    time.sleep(0.4)
    with pytest.raises(TransactionExpiredError):
        cat.resume(txn_id)
    late = cat.resume(txn_id, expired=True)
    with pytest.raises(TransactionExpiredError, match="can only roll it back"):
        late.create_table("sales", "b", "m/b")
    with pytest.raises(TransactionExpiredError, match="can only roll it back"):
        late.commit()
    assert [a.object_key for a in late.actions] == [a.object_key for a in fresh.actions]
    late.rollback()
    assert late.status == "rolled_back"
    assert cat.list_transactions(include_expired=True) == []
    assert cat.latest().list_tables("sales") == []
    # The handle that was still open lost its transaction to the rollback.
    with pytest.raises(olympia.CommitConflictError) as lost:
        fresh.commit()
    assert lost.value.rule == "transaction-claimed"
    assert cat.latest().list_tables("sales") == []
    with pytest.raises(olympia.InvalidArgumentTypeError):
        cat.resume(txn_id, expired="yes")
