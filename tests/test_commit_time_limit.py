"""Files in flight and expiration: the commit time limit (spec/transactions.md §8.5).

A commit writes its new files before the root that names them. Expiration
spares files younger than its grace period, measured from the moment it
started (before it read the latest version), and a writer never puts a root
naming a file it wrote longer ago than the catalog's commit time limit ``L``;
with a grace of at least ``2 L`` no kept version can lose a file, however
slow either side is. These tests make each side slow on purpose.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from faulty_storage import Call, FaultyStorage
from test_expiration_safety import BIG
from test_expiration_safety import _fill as fill_tables

import olympia
from olympia import layout
from olympia.definition import DEFAULT_COMMIT_TIME_LIMIT_MILLIS, commit_time_limit_millis
from olympia.errors import (
    CommitConflictError,
    CommitTimeoutError,
    InvalidArgumentError,
    InvalidDefinitionError,
    VersionNotFoundError,
)


def _new(uri: str, limit_millis: int) -> olympia.Catalog:
    return olympia.create_catalog(
        uri, node_order=3, inline_value_max_bytes=64, commit_time_limit_millis=limit_millis
    )


def _fill(cat: olympia.Catalog, prefix: str, count: int = 30) -> int:
    """One version creating ``count`` tables (30: more new nodes than a root
    carries inline); returns it."""
    fill_tables(cat, prefix, count)
    return cat.version


def _wrapped(uri: str) -> tuple[olympia.Catalog, FaultyStorage]:
    """A catalog handle whose storage calls pass through a FaultyStorage."""
    inner = olympia.load_catalog(uri).store.storage
    faulty = FaultyStorage(inner)
    return olympia.load_catalog(faulty), faulty


def _new_files(cat: olympia.Catalog) -> set[str]:
    storage = cat.store.storage
    return {p for d in (layout.NODE_DIR, layout.DEF_DIR, layout.ACT_DIR) for p in storage.list(d)}


def _assert_every_kept_version_reads(uri: str) -> None:
    fresh = olympia.load_catalog(uri)
    check = fresh.fsck()
    assert check.ok, check
    for v in range(fresh.oldest_version, fresh.version + 1):
        view = fresh.at_version(v)
        for ns in view.list_namespaces():
            for table in view.list_tables(ns):
                assert view.describe_table(ns, table).name == table


# --- the expiration side -------------------------------------------------------------


def test_a_slow_expiration_spares_the_files_of_a_commit_published_after_it_started(tmp_path):
    """Expiration finds the latest version, then is slow (longer than its
    grace period) before it deletes; meanwhile a writer publishes a version
    with new files. Those files were created after expiration started, so
    they are spared (§8.3 step 0). Measured from the moment of deletion
    instead, they would look older than the grace period and be deleted."""
    uri = str(tmp_path / "c")
    cat = olympia.create_catalog(uri, node_order=3, inline_value_max_bytes=64)
    _fill(cat, "a")
    _fill(cat, "b")
    time.sleep(0.5)  # the files of versions 1 and 2 are older than the grace period
    writer = olympia.load_catalog(uri)
    expirer, faulty = _wrapped(uri)
    published: list[int] = []

    def hook(call: Call) -> None:
        # Listing the roots is step 5, after the latest version was read in step 4.
        if call.op == "list" and call.path == layout.VERSION_DIR and not published:
            published.append(_fill(writer, f"w{len(published)}"))
            time.sleep(0.6)  # longer than the grace period below

    faulty.hook = hook
    # Only expiration's own measure is under test: the writer's limit is the
    # default five minutes, so the grace period must be allowed to be short.
    result = expirer.expire_versions(keep_last=1, grace_seconds=0.4, allow_short_grace=True)
    assert published == [3]
    assert result.oldest_version == 2  # it found version 2 as the latest
    assert result.deleted_files > 0  # version 1's own files went
    latest = olympia.load_catalog(uri).latest()
    assert latest.version == 3
    assert len(latest.list_tables("n")) == 90
    _assert_every_kept_version_reads(uri)


def test_a_grace_period_shorter_than_twice_the_limit_is_refused(tmp_path):
    uri = str(tmp_path / "c")
    cat = _new(uri, limit_millis=1_000)
    _fill(cat, "a")
    _fill(cat, "b")
    before = _new_files(cat)
    with pytest.raises(
        InvalidArgumentError, match=r"grace_seconds 1\.5 .*commit time limit \(1 s\)"
    ):
        cat.expire_versions(keep_last=1, grace_seconds=1.5)
    assert cat.oldest_version == 0 and _new_files(cat) == before  # nothing written or deleted
    assert cat.expire_versions(keep_last=1, grace_seconds=2).oldest_version == 2
    # The default limit asks for at least 600 s; a catalog nobody writes to may go lower.
    other = olympia.create_catalog(str(tmp_path / "d"))
    with pytest.raises(InvalidArgumentError, match="allow_short_grace"):
        other.expire_versions(grace_seconds=599)
    assert other.expire_versions(grace_seconds=0, allow_short_grace=True).oldest_version == 0


# --- the writer side -----------------------------------------------------------------


def _slow_new_files(faulty: FaultyStorage, seconds: float, times: int) -> list[float]:
    """Make the first ``times`` commit attempts through ``faulty`` sleep
    ``seconds`` at their first write of a node file (after others may have
    been written); returns the moments each sleep ended, filled in as it
    happens. An attempt starts with its existence check of the next root
    (local storage, spec/transactions.md §3)."""
    ended: list[float] = []
    lock = threading.Lock()
    state = {"armed": False, "slowed": 0}

    def hook(call: Call) -> None:
        with lock:
            if call.op == "exists" and call.path.startswith(layout.VERSION_DIR + "/"):
                state["armed"] = True
                return
            if not (call.op == "put_if_absent" and call.path.startswith(layout.NODE_DIR + "/")):
                return
            if not state["armed"] or state["slowed"] >= times:
                return
            state["armed"] = False
            state["slowed"] += 1
        time.sleep(seconds)
        ended.append(time.time())

    faulty.hook = hook
    return ended


def test_a_commit_slower_than_the_limit_publishes_again_with_new_files(tmp_path):
    uri = str(tmp_path / "c")
    cat = _new(uri, limit_millis=1_000)
    _fill(cat, "a")
    before = _new_files(cat)
    writer, faulty = _wrapped(uri)
    ended = _slow_new_files(faulty, 1.2, times=1)
    with writer.transaction() as t:
        for i in range(30):
            t.create_table("n", f"b{i}", f"m/b{i}", BIG)
    assert len(ended) == 1 and writer.version == 2
    check = olympia.load_catalog(uri).fsck()
    assert check.ok, check
    written = _new_files(cat) - before
    published = written - set(check.orphans)
    abandoned = written & set(check.orphans)
    assert published and abandoned  # the slow attempt's files were left unnamed
    # Every new file of the published version was written after the slow
    # attempt gave up, so none was older than the limit at the put.
    assert all(layout.created_millis(p) >= int(ended[0] * 1000) - 1 for p in published)
    assert len(olympia.load_catalog(uri).latest().list_tables("n")) == 60


def test_a_commit_that_stays_slower_than_the_limit_fails_and_changes_nothing(tmp_path):
    uri = str(tmp_path / "c")
    _fill(_new(uri, limit_millis=300), "a")
    writer, faulty = _wrapped(uri)
    ended = _slow_new_files(faulty, 0.5, times=10)
    txn = writer.begin()
    for i in range(30):
        txn.create_table("n", f"b{i}", f"m/b{i}", BIG)
    with pytest.raises(CommitTimeoutError, match=r"commit time limit of 0\.3 s.*nothing changed"):
        txn.commit()
    assert len(ended) == 2  # one retry with new files, then the error
    assert txn.status == "failed"
    fresh = olympia.load_catalog(uri)
    assert fresh.version == 1 and len(fresh.latest().list_tables("n")) == 30
    assert fresh.fsck().ok


def test_a_slow_writer_and_an_expiration_that_deletes_its_files_meanwhile(tmp_path):
    """The writer is stalled after writing part of its files; meanwhile an
    expiration (grace 2 L) deletes them as orphans. The writer must not
    publish a root naming them: its attempt is past the limit, so it writes
    everything again and publishes a version whose files all exist."""
    uri = str(tmp_path / "c")
    _fill(_new(uri, limit_millis=1_000), "a")
    expirer = olympia.load_catalog(uri)
    writer, faulty = _wrapped(uri)
    deleted: list[int] = []
    lock = threading.Lock()

    def hook(call: Call) -> None:
        if call.op != "put_if_absent" or not call.path.startswith(layout.NODE_DIR + "/"):
            return
        with lock:
            if deleted:
                return
            time.sleep(2.5)  # the files written so far are older than 2 L now
            deleted.append(expirer.expire_versions(keep_last=1, grace_seconds=2).deleted_files)

    faulty.hook = hook
    with writer.transaction() as t:
        for i in range(30):
            t.create_table("n", f"b{i}", f"m/b{i}", BIG)
    assert deleted and deleted[0] > 0  # expiration did delete the stalled attempt's files
    assert olympia.load_catalog(uri).version == 2
    _assert_every_kept_version_reads(uri)


def test_distribute_refuses_to_publish_an_object_older_than_the_limit(tmp_path):
    """The state files of a distributed transaction are spared by expiration
    only while it may still publish its object: not later than the limit
    after its first state (created_at_millis)."""
    uri = str(tmp_path / "c")
    _fill(_new(uri, limit_millis=1_000), "a")
    cat, faulty = _wrapped(uri)

    def hook(call: Call) -> None:
        if call.op == "put_if_absent" and call.path.startswith("dtxn/"):
            time.sleep(1.2)

    txn = cat.begin()
    txn.create_table("n", "d", "m/d")
    faulty.hook = hook
    with pytest.raises(CommitTimeoutError):
        txn.distribute()
    faulty.hook = None
    assert olympia.load_catalog(uri).list_transactions() == []
    # Quick enough: published.
    fast = olympia.load_catalog(uri).begin()
    fast.create_table("n", "e", "m/e")
    txn_id = fast.distribute()
    assert [t.id for t in olympia.load_catalog(uri).list_transactions()] == [txn_id]


# --- the definition field ------------------------------------------------------------


def test_the_commit_time_limit_is_a_definition_option(tmp_path):
    assert commit_time_limit_millis(olympia.create_catalog(str(tmp_path / "a")).definition) == (
        DEFAULT_COMMIT_TIME_LIMIT_MILLIS
    )
    cat = _new(str(tmp_path / "b"), limit_millis=1234)
    assert olympia.load_catalog(cat.uri).definition.commit_time_limit_millis == 1234
    for bad in (0, -1, 1.5, "60", True):
        with pytest.raises(InvalidDefinitionError, match="commit_time_limit_millis"):
            olympia.create_catalog(str(tmp_path / "c"), commit_time_limit_millis=bad)


def test_a_catalog_written_before_the_field_existed_reads_with_the_default(tmp_path):
    """A stored definition without the field (0) means five minutes."""
    from olympia.definition import build_definition, stored_definition_problem

    definition = build_definition({})
    definition.ClearField("commit_time_limit_millis")
    assert stored_definition_problem(definition) is None
    assert commit_time_limit_millis(definition) == 300_000


# --- both sides slow, at random ------------------------------------------------------


def test_slow_writers_and_a_slow_expiration_never_break_a_kept_version(tmp_path):
    """Writers, a rollback loop and expiration (grace 2 L) run for a fixed
    time, each through a storage wrapper that now and then stalls a call for
    up to 1.5 L. Commits that pass the limit publish nothing; every version
    that is kept reads whole, and the file check is clean of missing files."""
    uri = str(tmp_path / "c")
    limit = 0.4
    cat = _new(uri, limit_millis=int(limit * 1000))
    _fill(cat, "a", count=8)
    rng = random.Random(18)
    rng_lock = threading.Lock()

    def stall(call: Call) -> None:
        with rng_lock:
            r = rng.random()
        if r < 0.01:
            time.sleep(limit * 1.5)
        elif r < 0.06:
            time.sleep(limit * 0.2)

    handles = []
    for _ in range(4):
        handle, faulty = _wrapped(uri)
        faulty.hook = stall
        handles.append(handle)
    writers, roller, expirer = handles[:2], handles[2], handles[3]
    counter = iter(range(10**9))
    outcomes = {"committed": 0, "timed_out": 0, "rolled_back": 0, "expired_files": 0}
    errors: list[BaseException] = []
    stop = threading.Event()

    def loop(body: Callable[[], None]) -> None:
        while not stop.is_set():
            try:
                body()
            except CommitTimeoutError:
                outcomes["timed_out"] += 1
            except (CommitConflictError, VersionNotFoundError):
                pass
            except BaseException as exc:  # collected for the assertion
                errors.append(exc)

    def write(handle: olympia.Catalog) -> Callable[[], None]:
        def body() -> None:
            i = next(counter)
            with handle.transaction() as t:
                t.create_table("n", f"w{i}", f"m/w{i}", BIG)
                for name in t.list_tables("n")[:2] if i % 2 else ():
                    t.drop_table("n", name)
            outcomes["committed"] += 1

        return body

    def rollback() -> None:
        with rng_lock:
            back = rng.randint(1, 3)
        roller.rollback_to(max(roller.version - back, roller.oldest_version, 1))
        outcomes["rolled_back"] += 1

    def expire() -> None:
        res = expirer.expire_versions(keep_last=2, grace_seconds=2 * limit)
        outcomes["expired_files"] += res.deleted_files

    bodies: list[Any] = [write(w) for w in writers] + [rollback, expire]
    threads = [threading.Thread(target=loop, args=(b,)) for b in bodies]
    for t in threads:
        t.start()
    time.sleep(6.0)
    stop.set()
    for t in threads:
        t.join(120)
    assert errors == [], errors[:3]
    assert outcomes["committed"] > 10 and outcomes["rolled_back"] > 0, outcomes
    assert outcomes["expired_files"] > 0, outcomes
    _assert_every_kept_version_reads(uri)


def test_expiration_deletes_the_files_of_a_killed_commit_once_past_the_grace(tmp_path: Path):
    """Files a commit left without publishing are reclaimed once they are
    older than the grace period when expiration starts."""
    uri = str(tmp_path / "c")
    _fill(_new(uri, limit_millis=100), "a")
    writer, faulty = _wrapped(uri)
    _slow_new_files(faulty, 0.3, times=10)
    txn = writer.begin()
    for i in range(30):
        txn.create_table("n", f"b{i}", f"m/b{i}", BIG)
    with pytest.raises(CommitTimeoutError):
        txn.commit()
    fresh = olympia.load_catalog(uri)
    orphans = set(fresh.fsck().orphans)
    assert orphans
    time.sleep(0.3)
    fresh.expire_versions(grace_seconds=0.2)
    assert fresh.fsck().clean


# --- what PyIceberg and REST clients see -------------------------------------------


def _clock_that_jumps(monkeypatch: pytest.MonkeyPatch, step_millis: int) -> None:
    """Each reading of the commit path's clock is ``step_millis`` later than the last."""
    from olympia import store as store_module

    real = store_module._now_millis
    offset = [0]

    def jumping() -> int:
        offset[0] += step_millis
        return real() + offset[0]

    monkeypatch.setattr(store_module, "_now_millis", jumping)


def test_a_pyiceberg_commit_past_the_limit_is_a_commit_failed_exception(tmp_path, monkeypatch):
    from iceberg_helpers import ids_of, olympia_catalog, rows
    from pyiceberg.exceptions import CommitFailedException

    from olympia.iceberg.errors import CommitTimeoutException

    lake = tmp_path / "lake"
    olympia.create_catalog(str(lake), commit_time_limit_millis=1_000)
    cat = olympia_catalog(f"file://{lake}")
    cat.create_namespace("n")
    table = cat.create_table("n.t", rows([1]).schema)
    table.append(rows([1]))
    files = {p for p in lake.rglob("*") if p.is_file() and "/metadata/" in str(p)}
    _clock_that_jumps(monkeypatch, 2_000)
    with pytest.raises(CommitTimeoutException, match="commit time limit") as info:
        cat.load_table("n.t").append(rows([2]))
    assert isinstance(info.value, CommitFailedException)
    monkeypatch.undo()
    assert ids_of(cat.load_table("n.t")) == [1]
    # The metadata files the failed commit wrote are deleted again (the data
    # file PyIceberg wrote before committing is left, as after any failed commit).
    assert {p for p in lake.rglob("*") if p.is_file() and "/metadata/" in str(p)} == files


def test_rest_answers_a_commit_past_the_limit_with_a_retryable_409():
    from olympia.rest.errors import classify

    error = classify(CommitTimeoutError("version 3 was not published: ..."), commit=True)
    assert (error.code, error.type) == (409, "CommitFailedException")
