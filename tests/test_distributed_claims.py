"""Distributed transactions under concurrency, crashes and storage faults
(spec/transactions.md §6): unique claims, recovery of an unfinished claim,
failed steps without effect, idempotent distribute() and delta steps."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from typing import Any

import pytest
from faulty_storage import FAIL, MODES, Call, FaultyStorage

import olympia
from olympia import layout
from olympia.errors import (
    CommitConflictError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    OlympiaError,
    StorageError,
    TableAlreadyExistsError,
    TransactionClosedError,
    TransactionNotFoundError,
)
from olympia.proto import actions_pb2 as apb
from olympia.storage import Storage, open_storage

COMMITTING = apb.TRANSACTION_OUTCOME_COMMITTING


def _catalog_with_namespace(uri: str, opts: dict[str, Any] | None = None) -> olympia.Catalog:
    cat = olympia.create_catalog(uri, opts)
    with cat.transaction() as t:
        t.create_namespace("sales")
    return cat


def _commits_of(cat: olympia.Catalog, txn_id: str) -> list[int]:
    """The versions whose root names ``txn_id`` as the committing transaction."""
    return [h.version for h in cat.history() if h.transaction_id == txn_id]


# --- two processes committing one transaction at the same moment ----------------------


def _commit_at_the_barrier(uri: str, opts: dict, txn_ids: list[str], barrier, out) -> None:
    cat = olympia.load_catalog(uri, opts)
    for txn_id in txn_ids:
        txn = cat.resume(txn_id)
        barrier.wait(60)
        try:
            out.put((txn_id, "committed", txn.commit(), ""))
        except CommitConflictError as exc:
            out.put((txn_id, exc.rule, exc.version, str(exc)))
        except Exception as exc:  # reported, so the test can name it
            out.put((txn_id, type(exc).__name__, None, str(exc)))
        barrier.wait(60)  # the next round starts when both are done


@pytest.mark.parametrize("any_storage_location", ["local", "s3"], indirect=True)
def test_two_processes_committing_one_transaction_at_once(any_storage_location):
    uri, opts = any_storage_location
    cat = _catalog_with_namespace(uri, opts)
    rounds = 4
    txn_ids = []
    for i in range(rounds):
        txn = cat.begin()
        txn.create_table("sales", f"t{i}", f"m/t{i}")
        txn_ids.append(txn.distribute())
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_commit_at_the_barrier, args=(uri, opts, txn_ids, barrier, out))
        for _ in range(2)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in range(2 * rounds)]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    for i, txn_id in enumerate(txn_ids):
        mine = [r for r in results if r[0] == txn_id]
        winners = [r for r in mine if r[1] == "committed"]
        assert len(winners) == 1, f"round {i}: {mine}"
        [(_, _, version, _)] = winners
        [(_, rule, lost_version, message)] = [r for r in mine if r[1] != "committed"]
        assert rule == "transaction-claimed", f"round {i}: {mine}"
        assert "another process" in message
        if lost_version is None:
            assert "not published yet" in message
        else:
            assert lost_version == version
            assert f"committed by another process as version {version}" in message
        assert _commits_of(cat, txn_id) == [version]
    assert cat.latest().list_tables("sales") == [f"t{i}" for i in range(rounds)]
    assert cat.list_transactions() == []


def test_a_second_claimant_never_shares_the_winners_bytes(tmp_path, monkeypatch):
    """Two handles at the same step commit at the same millisecond: the second
    commits while the first is about to put its root. Only one is told it
    committed, even though everything but the claim is identical."""
    uri = str(tmp_path / "c")
    _catalog_with_namespace(uri)
    faulty = FaultyStorage(open_storage(uri))
    cat = olympia.load_catalog(faulty)
    txn = cat.begin()
    txn.create_table("sales", "a", "m/a")
    txn_id = txn.distribute()
    first = cat.resume(txn_id)
    second = olympia.load_catalog(uri).resume(txn_id)
    frozen = time.time()
    monkeypatch.setattr(time, "time", lambda: frozen)  # one clock reading for everyone
    results: list[object] = []

    def interleave(call: Call) -> None:
        if call.op == "put_if_absent" and call.path.startswith("vn/") and not results:
            try:
                results.append(second.commit())
            except CommitConflictError as exc:
                results.append(exc)

    faulty.hook = interleave
    version = first.commit()
    faulty.hook = None
    [other] = results
    assert isinstance(other, CommitConflictError), f"both were told they committed {other}"
    assert other.rule == "transaction-claimed"
    assert "another process" in str(other)
    assert _commits_of(olympia.load_catalog(uri), txn_id) == [version]


# --- a claimant killed between its claim and publishing ---------------------------------


class _DieAfterClaim(FaultyStorage):
    """Kills its process right after a COMMITTING step lands."""

    def _put_if_absent(self, path: str, data: bytes) -> None:
        super()._put_if_absent(path, data)
        dtxn = path.startswith(f"{layout.DTXN_DIR}/")
        if dtxn and apb.TransactionState.FromString(data).outcome == COMMITTING:
            os.kill(os.getpid(), signal.SIGKILL)


def _commit_and_die(uri: str, opts: dict, txn_id: str) -> None:
    storage: Storage = _DieAfterClaim(open_storage(uri, opts))
    olympia.load_catalog(storage).resume(txn_id).commit()


def _claimant_killed_after_its_claim(uri: str, opts: dict) -> tuple[olympia.Catalog, str]:
    cat = _catalog_with_namespace(uri, opts)
    txn = cat.begin()
    txn.create_table("sales", "a", "m/a")
    txn_id = txn.distribute()
    txn.create_table("sales", "b", "m/b")
    ctx = multiprocessing.get_context("spawn")
    proc = ctx.Process(target=_commit_and_die, args=(uri, opts, txn_id))
    proc.start()
    proc.join(120)
    assert proc.exitcode == -signal.SIGKILL
    return cat, txn_id


@pytest.mark.parametrize("any_storage_location", ["local", "s3"], indirect=True)
def test_a_commit_killed_after_its_claim_is_finished_by_another_process(any_storage_location):
    uri, opts = any_storage_location
    cat, txn_id = _claimant_killed_after_its_claim(uri, opts)
    before = cat.version
    # The claim is unfinished: still listed, and a young claim is left alone.
    assert [t.id for t in cat.list_transactions()] == [txn_id]
    with pytest.raises(TransactionClosedError, match="being committed by another process"):
        cat.resume(txn_id)
    other = olympia.load_catalog(uri, opts)
    finisher = cat.resume(txn_id, recover_after_seconds=0)
    late = other.resume(txn_id, recover_after_seconds=0)
    with pytest.raises(TransactionClosedError, match="can only"):
        finisher.create_table("sales", "c", "m/c")
    version = finisher.commit()
    assert version == before + 1
    assert cat.latest().list_tables("sales") == ["a", "b"]
    assert cat.list_transactions() == []
    assert _commits_of(cat, txn_id) == [version]
    # A second recoverer that resumed at the same time cannot publish it again.
    with pytest.raises(CommitConflictError) as info:
        late.commit()
    assert info.value.rule == "transaction-claimed"
    assert info.value.version == version
    assert f"committed by another process as version {version}" in str(info.value)
    assert cat.version == version
    with pytest.raises(TransactionNotFoundError):
        cat.resume(txn_id, recover_after_seconds=0)


def test_a_commit_killed_after_its_claim_can_be_abandoned(tmp_path):
    uri = str(tmp_path / "c")
    cat, txn_id = _claimant_killed_after_its_claim(uri, {})
    before = cat.version
    cat.resume(txn_id, recover_after_seconds=0).rollback()
    assert cat.version == before + 1  # one version, which only drops the object
    assert cat.latest().list_tables("sales") == []
    assert cat.list_transactions() == []
    assert _commits_of(cat, txn_id) == []
    [drop] = cat.history()[-1].actions
    assert drop.type == apb.TRANSACTION_DROP and drop.claim
    with pytest.raises(TransactionNotFoundError):
        cat.resume(txn_id, recover_after_seconds=0)


def test_a_live_claimant_and_a_recoverer_publish_one_outcome(tmp_path):
    """A recoverer finishes the commit while the claimant, alive after all, is
    about to publish: the claimant learns that another process committed it."""
    uri = str(tmp_path / "c")
    _catalog_with_namespace(uri)
    faulty = FaultyStorage(open_storage(uri))
    txn = olympia.load_catalog(faulty).begin()
    txn.create_table("sales", "a", "m/a")
    txn_id = txn.distribute()
    recovered: list[int] = []

    def recover_first(call: Call) -> None:
        if call.op == "put_if_absent" and call.path.startswith("vn/") and not recovered:
            recovered.append(
                olympia.load_catalog(uri).resume(txn_id, recover_after_seconds=0).commit()
            )

    faulty.hook = recover_first
    with pytest.raises(CommitConflictError) as info:
        txn.commit()
    faulty.hook = None
    [version] = recovered
    assert info.value.rule == "transaction-claimed"
    assert info.value.version == version
    assert f"committed by another process as version {version}" in str(info.value)
    cat = olympia.load_catalog(uri)
    assert _commits_of(cat, txn_id) == [version]
    assert cat.version == version
    assert cat.latest().list_tables("sales") == ["a"]


def test_an_unfinished_rollback_can_only_be_rolled_back(tmp_path):
    uri = str(tmp_path / "c")
    cat = _catalog_with_namespace(uri)
    faulty = FaultyStorage(open_storage(uri))
    txn = olympia.load_catalog(faulty).begin()
    txn.create_table("sales", "a", "m/a")
    txn_id = txn.distribute()

    def no_new_versions(call: Call) -> None:
        if call.op == "put_if_absent" and call.path.startswith("vn/"):
            raise StorageError(f"injected: {call}")

    faulty.hook = no_new_versions
    txn.rollback()  # the claim lands, dropping the object does not
    faulty.hook = None
    assert txn.status == "rolled_back"
    assert [t.id for t in cat.list_transactions()] == [txn_id]
    with pytest.raises(TransactionClosedError, match="being rolled back by another process"):
        cat.resume(txn_id)
    finisher = cat.resume(txn_id, recover_after_seconds=0)
    with pytest.raises(TransactionClosedError, match="rollback"):
        finisher.commit()
    before = cat.version
    finisher.rollback()
    assert cat.version == before + 1
    assert cat.list_transactions() == []
    assert cat.latest().list_tables("sales") == []
    assert _commits_of(cat, txn_id) == []


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (-1, InvalidArgumentError),
        (float("nan"), InvalidArgumentError),
        ("5", InvalidArgumentTypeError),
        (True, InvalidArgumentTypeError),
    ],
)
def test_recover_after_seconds_must_be_a_duration(tmp_path, value, error):
    cat = _catalog_with_namespace(str(tmp_path / "c"))
    txn_id = cat.begin().distribute()
    with pytest.raises(error, match="recover_after_seconds"):
        cat.resume(txn_id, recover_after_seconds=value)
    assert cat.resume(txn_id).distributed


# --- a step that cannot be written has no effect -------------------------------------------


def _fail_step_puts(faulty: FaultyStorage, puts: int, reads: int = 0) -> list[Call]:
    """Make the next ``puts`` step writes (and ``reads`` reads of steps) fail."""
    hit: list[Call] = []
    left = {"put_if_absent": puts, "read": reads}

    def hook(call: Call) -> None:
        if call.path.startswith(f"{layout.DTXN_DIR}/") and left.get(call.op, 0) > 0:
            left[call.op] -= 1
            hit.append(call)
            raise StorageError(f"injected: {call}")

    faulty.hook = hook
    return hit


def test_a_step_that_fails_to_be_written_has_no_effect(tmp_path):
    uri = str(tmp_path / "c")
    cat = _catalog_with_namespace(uri)
    with cat.transaction() as t:
        t.create_table("sales", "old", "m/old")
    faulty = FaultyStorage(open_storage(uri))
    txn = olympia.load_catalog(faulty).begin()
    txn.create_table("sales", "a", "m/a")
    txn_id = txn.distribute()
    before = [a.SerializeToString() for a in txn.actions]

    # A write, a read and a write whose precondition fails: each step write fails.
    hit = _fail_step_puts(faulty, puts=3)
    with pytest.raises(StorageError):
        txn.create_table("sales", "b", "m/b")
    with pytest.raises(StorageError):
        txn.describe_table("sales", "old")
    with pytest.raises(StorageError):
        txn.create_table("sales", "old", "m/other")
    assert len(hit) == 3
    faulty.hook = None
    assert [a.SerializeToString() for a in txn.actions] == before
    assert txn.status == "open"
    assert txn.list_tables("sales") == ["a", "old"]  # b is not pending
    # The same operation again works, once.
    txn.create_table("sales", "b", "m/b")
    with pytest.raises(TableAlreadyExistsError):
        txn.create_table("sales", "b", "m/b2")
    stored = olympia.load_catalog(uri).resume(txn_id).actions  # what another process sees
    assert [a.table.name for a in stored if a.type == apb.TABLE_CREATE] == ["a", "b"]
    version = txn.commit()
    latest = cat.latest()
    assert latest.list_tables("sales") == ["a", "b", "old"]
    assert latest.describe_table("sales", "b").metadata_location == "m/b"
    [record] = [h for h in cat.history() if h.version == version]
    creates = [a.table.name for a in record.actions if a.type == apb.TABLE_CREATE]
    assert creates == ["a", "b"]


def test_a_step_of_unknown_outcome_closes_the_handle(tmp_path):
    uri = str(tmp_path / "c")
    _catalog_with_namespace(uri)
    faulty = FaultyStorage(open_storage(uri))
    txn = olympia.load_catalog(faulty).begin()
    txn_id = txn.distribute()
    _fail_step_puts(faulty, puts=1, reads=3)  # neither the put nor its read-back answers
    with pytest.raises(StorageError, match="unknown"):
        txn.create_table("sales", "a", "m/a")
    faulty.hook = None
    assert txn.status == "failed"
    with pytest.raises(TransactionClosedError):
        txn.create_table("sales", "a", "m/a")
    again = olympia.load_catalog(uri).resume(txn_id)  # the put never landed
    assert again.list_tables("sales") == []
    again.create_table("sales", "a", "m/a")
    again.commit()


def test_a_failed_commit_claim_can_be_retried(tmp_path):
    uri = str(tmp_path / "c")
    cat = _catalog_with_namespace(uri)
    faulty = FaultyStorage(open_storage(uri))
    txn = olympia.load_catalog(faulty).begin()
    txn.create_table("sales", "a", "m/a")
    txn_id = txn.distribute()
    _fail_step_puts(faulty, puts=1)
    with pytest.raises(StorageError):
        txn.commit()
    faulty.hook = None
    assert txn.status == "open"
    version = txn.commit()
    assert cat.latest().list_tables("sales") == ["a"]
    assert _commits_of(cat, txn_id) == [version]


# --- distribute() failing at each of its storage calls ----------------------------------


def _distribute_with_fault(
    root: str, at: int | None, mode: str, then: str = "retry"
) -> tuple[str, list[Call], str, int | None]:
    """Distribute with a fault at call ``at``; if it fails, make another change
    and then retry distribute() (``then="retry"``) or commit at once
    (``then="commit"``, which returns the version)."""
    uri = f"{root}/{at}-{mode}-{then}"
    _catalog_with_namespace(uri)
    faulty = FaultyStorage(open_storage(uri))
    cat = olympia.load_catalog(faulty)
    txn = cat.begin()
    txn.create_table("sales", "a", "m/a")
    if at is None:
        faulty.reset()
    else:
        faulty.arm(at, mode)
    error = ""
    version = None
    try:
        txn_id = txn.distribute()
    except OlympiaError as exc:
        error = f"{type(exc).__name__}: {exc}"
        faulty.reset()
        txn.create_table("sales", "between", "m/between")
        if then == "commit":
            version = txn.commit()
        else:
            txn_id = txn.distribute()
            assert txn_id == txn.id
    calls = faulty.calls
    cat.close()
    return uri, calls, error, version


def test_distribute_failing_at_each_storage_call_can_be_retried(tmp_path):
    _, clean, error, _ = _distribute_with_fault(str(tmp_path), None, FAIL)
    assert not error
    assert any(c.op == "put_if_absent" and c.path.startswith("dtxn/") for c in clean)
    assert any(c.op == "put_if_absent" and c.path.startswith("vn/") for c in clean)
    problems = []
    failures = 0
    for at in range(1, len(clean) + 1):
        for mode in MODES:
            for then in ("retry", "commit"):
                case = f"call {at} {mode}, then {then}"
                try:
                    uri, _, error, version = _distribute_with_fault(str(tmp_path), at, mode, then)
                    failures += bool(error)
                    tables = ["a", "between"] if error else ["a"]
                    cat = olympia.load_catalog(uri)
                    if version is None:  # distributed: resume and commit elsewhere
                        [txn_id] = [t.id for t in cat.list_transactions()]
                        resumed = cat.resume(txn_id)
                        assert resumed.list_tables("sales") == tables
                        assert cat.latest().list_tables("sales") == []
                        version = resumed.commit()
                    assert cat.version == version
                    assert cat.latest().list_tables("sales") == tables
                    assert cat.list_transactions() == []  # no object left behind
                except (AssertionError, OlympiaError, ValueError) as exc:
                    problems.append(f"{case} ({error}): {type(exc).__name__}: {exc}")
    assert failures > 0
    assert not problems, "\n".join(problems)


class _PublishButLoseTheRootReply(FaultyStorage):
    """When armed, the next root put lands but its reply is lost, and the
    next two reads of that root fail."""

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self.armed = False
        self.root = ""
        self.failed_reads = 0

    def _put_if_absent(self, path: str, data: bytes) -> None:
        super()._put_if_absent(path, data)
        if self.armed and path.startswith("vn/") and not self.root:
            self.root = path
            raise StorageError(f"injected: the reply to the put of {path} was lost")

    def _read(self, path: str) -> bytes:
        if path == self.root and self.failed_reads < 2:
            self.failed_reads += 1
            raise StorageError(f"injected: reading {path} failed")
        return super()._read(path)


@pytest.mark.parametrize("end", ["commit", "rollback"])
def test_a_distribute_that_published_its_object_but_failed_leaves_no_object(tmp_path, end):
    uri = str(tmp_path / "c")
    cat = _catalog_with_namespace(uri)
    storage = _PublishButLoseTheRootReply(open_storage(uri))
    txn = olympia.load_catalog(storage).begin()
    txn.create_table("sales", "a", "m/a")
    storage.armed = True
    with pytest.raises(OlympiaError):
        txn.distribute()
    assert storage.failed_reads == 2
    assert not txn.distributed  # not until both the step and the object are known to be there
    assert [t.id for t in cat.list_transactions()] == [txn.id]  # it did land
    if end == "commit":
        version = txn.commit()
        assert cat.latest().list_tables("sales") == ["a"]
        assert _commits_of(cat, txn.id) == [version]
    else:
        txn.rollback()
        assert cat.latest().list_tables("sales") == []
    assert cat.list_transactions() == []


# --- state size --------------------------------------------------------------------------


def test_state_bytes_grow_linearly_with_the_operations(tmp_path):
    uri = str(tmp_path / "c")
    cat = _catalog_with_namespace(uri)
    txn = cat.begin()
    txn_id = txn.distribute()
    n = 1000
    for i in range(n):
        txn.create_table("sales", f"t{i:04d}", f"m/t{i:04d}")
    storage = cat.store.storage
    paths = storage.list(f"{layout.DTXN_DIR}/{txn_id}")
    total = sum(len(storage.read(p)) for p in paths)
    action_bytes = sum(len(a.SerializeToString()) for a in txn.actions)
    # Every action is stored once, plus a small fixed cost per step. Storing
    # every action in every step (the old scheme) needs about n / 2 times that.
    assert len(paths) == n + 1
    assert total < 2 * action_bytes, (total, action_bytes)
    resumed = olympia.load_catalog(uri).resume(txn_id)
    assert [a.SerializeToString() for a in resumed.actions] == [
        a.SerializeToString() for a in txn.actions
    ]
    resumed.create_table("sales", "last", "m/last")
    resumed.commit()
    assert len(cat.latest().list_tables("sales")) == n + 1
