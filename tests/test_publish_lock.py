"""The publish lock of one host (spec/transactions.md §3.1): writers of one
machine take turns to publish, a dead holder never blocks anyone, a stuck one
delays them only for a while, and commits stay correct with or without it."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import olympia
from olympia import commit as commit_module
from olympia.conflicts import Footprint
from olympia.storage import hostlock
from olympia.storage.hostlock import FileHostLock, HostLock
from olympia.storage.local import PUBLISH_LOCK, LocalStorage

pytestmark = pytest.mark.skipif(os.name != "posix", reason="flock is POSIX")


def _lock_path(catalog_dir: Path) -> str:
    return str(catalog_dir.joinpath(*PUBLISH_LOCK.split("/")))


def _catalog(tmp_path: Path, tables: int = 1) -> tuple[str, olympia.Catalog]:
    uri = str(tmp_path / "cat")
    cat = olympia.create_catalog(uri)
    with cat.begin() as txn:
        for w in range(tables):
            txn.create_namespace(f"w{w}")
            txn.create_table(f"w{w}", "t", f"s3://data/w{w}/v0.json")
    return uri, cat


def _hold_until_killed(path: str, ready: Any) -> None:
    lock = FileHostLock(path)
    ready.put(lock.held)
    time.sleep(3600)


def _holder(path: str) -> tuple[Any, bool]:
    """A process holding the lock at ``path`` (and whether it got it)."""
    ctx = mp.get_context("spawn")
    ready = ctx.Queue()
    proc = ctx.Process(target=_hold_until_killed, args=(path, ready), daemon=True)
    proc.start()
    return proc, ready.get(timeout=120)


def test_a_holder_killed_by_sigkill_does_not_block_the_next_writer(tmp_path: Path) -> None:
    _uri, cat = _catalog(tmp_path)
    path = _lock_path(tmp_path / "cat")
    proc, held = _holder(path)
    assert held
    # While it lives, the lock is taken: asking without waiting gives nothing.
    assert not FileHostLock(path, wait_seconds=0).held
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(timeout=60)
    assert proc.exitcode == -signal.SIGKILL
    # The kernel lets the lock go with the process. Not always before join()
    # returns: the last close of a dying process's files may be left to a
    # kernel worker, which a loaded machine runs a moment later (seen with
    # both cores busy), so the next writer may wait briefly, never for long.
    lock = FileHostLock(path, wait_seconds=30)
    assert lock.held
    lock.release()
    with cat.begin() as txn:
        txn.update_table("w0", "t", metadata_location="s3://data/w0/v1.json")
    assert cat.latest().describe_table("w0", "t").metadata_location == "s3://data/w0/v1.json"


def test_a_commit_publishes_without_the_lock_when_a_live_holder_keeps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _uri, cat = _catalog(tmp_path)
    proc, held = _holder(_lock_path(tmp_path / "cat"))
    try:
        assert held
        monkeypatch.setattr(LocalStorage, "publish_lock_wait", 0.05)
        before = cat.version
        with cat.begin() as txn:
            txn.update_table("w0", "t", metadata_location="s3://data/w0/v1.json")
        assert cat.version == before + 1
        assert cat.latest().describe_table("w0", "t").metadata_location == "s3://data/w0/v1.json"
    finally:
        proc.kill()
        proc.join(timeout=60)


def test_a_stuck_holder_is_waited_for_once_not_on_every_attempt(tmp_path: Path) -> None:
    """A holder alive but stuck (stopped) made every attempt of every writer
    wait the whole limit: six writers took 2, 4, 4, 6, 6 and 8 s, one lost
    race costing another wait. The waiter that gives up marks that holder
    stuck; the next attempts, of any process, do not wait for it, until
    another holder has the lock."""
    path = _lock_path(tmp_path / "cat")
    os.makedirs(os.path.dirname(path))
    proc, held = _holder(path)
    try:
        assert held
        first = FileHostLock(path, wait_seconds=0.2)
        assert (first.held, first.waited, first.skipped) == (False, True, False)
        again = FileHostLock(path, wait_seconds=600)  # would stall the test if it waited
        assert (again.held, again.waited, again.skipped) == (False, True, True)
    finally:
        proc.kill()
        proc.join(timeout=60)
    # A new holder is waited for again: the mark names the old one only.
    lock = FileHostLock(path, wait_seconds=30)
    assert lock.held
    lock.release()
    proc, held = _holder(path)
    try:
        assert held
        waiter = FileHostLock(path, wait_seconds=0.2)
        assert (waiter.held, waiter.skipped) == (False, False)
    finally:
        proc.kill()
        proc.join(timeout=60)


def test_a_waiter_that_gave_up_is_not_taken_for_the_holder_it_gave_up_on(tmp_path: Path) -> None:
    """A waiter that gives up leaves a thread blocked in flock, which takes
    the lock when the holder lets it go, only to let it go at once. The
    holder's token was still in the file then, so a writer that found the
    lock held by that thread took it for the holder marked stuck, and went
    on without the lock (seen on a loaded machine). A holder clears its
    token when it lets the lock go."""
    path = str(tmp_path / "locks" / "publish")
    first = FileHostLock(path)
    assert first.held
    gave_up = _in_thread(lambda: FileHostLock(path, wait_seconds=0.05))
    assert gave_up.waited and not gave_up.held  # marks the holder stuck
    first.release()
    with open(path, "rb") as f:
        assert f.read(hostlock.TOKEN_BYTES) == bytes(hostlock.TOKEN_BYTES)
    # Whoever holds it now (perhaps that thread, for a moment), it is no holder marked stuck.
    for _ in range(20):
        lock = FileHostLock(path, wait_seconds=30)
        assert lock.held and not lock.skipped
        lock.release()


def test_writers_behind_a_stuck_holder_each_wait_for_it_at_most_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri, _ = _catalog(tmp_path, tables=4)
    monkeypatch.setattr(LocalStorage, "publish_lock_wait", 0.3)
    timeouts: Counter[str] = Counter()
    real = hostlock._wait

    def counted(*args: Any, **kwargs: Any) -> bool:
        got = real(*args, **kwargs)
        if not got:
            timeouts[threading.current_thread().name] += 1
        return got

    monkeypatch.setattr(hostlock, "_wait", counted)
    proc, held = _holder(_lock_path(tmp_path / "cat"))
    try:
        assert held

        def writer(w: int) -> None:
            cat = olympia.load_catalog(uri)
            for i in range(3):
                with cat.begin() as txn:
                    txn.update_table(f"w{w}", "t", metadata_location=f"s3://data/w{w}/v{i}.json")

        threads = [threading.Thread(target=writer, args=(w,), name=f"w{w}") for w in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        proc.kill()
        proc.join(timeout=60)
    latest = olympia.load_catalog(uri).latest()
    for w in range(4):
        assert latest.describe_table(f"w{w}", "t").metadata_location == f"s3://data/w{w}/v2.json"
    # 12 commits, with lost races among them; before, each attempt waited.
    assert sum(timeouts.values()) <= 4, timeouts


def _in_thread(make: Any) -> Any:
    got: list[Any] = []
    worker = threading.Thread(target=lambda: got.append(make()))
    worker.start()
    worker.join(timeout=120)
    return got[0]


def test_threads_of_one_process_exclude_each_other(tmp_path: Path) -> None:
    path = str(tmp_path / "locks" / "publish")
    first = FileHostLock(path)
    assert first.held and not first.waited
    second = _in_thread(lambda: FileHostLock(path, wait_seconds=0.05))
    assert second.waited and not second.held
    first.release()
    first.release()  # idempotent
    third = _in_thread(lambda: FileHostLock(path, wait_seconds=30))
    assert third.held
    third.release()


def test_a_thread_holding_the_lock_does_not_wait_for_itself(tmp_path: Path) -> None:
    """A commit made from inside a commit of the same thread (a hook, say)
    goes on without the lock instead of waiting for the wait limit."""
    path = str(tmp_path / "locks" / "publish")
    outer = FileHostLock(path)
    inner = FileHostLock(path, wait_seconds=3600)
    assert outer.held and not inner.held and not inner.waited
    inner.release()
    assert not _in_thread(lambda: FileHostLock(path, wait_seconds=0)).held  # outer still holds
    outer.release()
    # (the thread that gave up above may take the lock for an instant, to let
    # it go at once: a new writer may have to wait that instant)
    again = FileHostLock(path, wait_seconds=5)
    assert again.held
    again.release()


def test_a_waiter_gets_the_lock_when_the_holder_lets_it_go(tmp_path: Path) -> None:
    path = str(tmp_path / "locks" / "publish")
    first = FileHostLock(path)
    calls: list[int] = []
    got: list[FileHostLock] = []

    def waiting() -> None:
        calls.append(1)
        if len(calls) == 3:
            first.release()

    waiter = threading.Thread(
        target=lambda: got.append(FileHostLock(path, 60, waiting, interval=0.001))
    )
    waiter.start()
    waiter.join(timeout=120)
    assert got and got[0].held and got[0].waited
    assert len(calls) >= 3  # called while waiting, until the holder let go
    assert not FileHostLock(path, wait_seconds=0).held
    got[0].release()


def test_an_error_while_waiting_ends_the_wait_and_leaves_the_lock_free(tmp_path: Path) -> None:
    path = str(tmp_path / "locks" / "publish")
    first = FileHostLock(path)

    def fail() -> None:
        raise RuntimeError("conflict found while waiting")

    def wait() -> BaseException | None:
        try:
            FileHostLock(path, 60, fail, interval=0.001)
        except RuntimeError as exc:
            return exc
        return None

    assert "while waiting" in str(_in_thread(wait))
    first.release()
    # The abandoned waiter may take the lock for a moment, then lets it go.
    later = FileHostLock(path, wait_seconds=60)
    assert later.held
    later.release()


def test_the_lock_file_is_not_a_temporary_file(tmp_path: Path) -> None:
    _uri, cat = _catalog(tmp_path)
    with cat.begin() as txn:
        txn.update_table("w0", "t", metadata_location="s3://data/w0/v1.json")
    assert os.path.exists(_lock_path(tmp_path / "cat"))
    cat.store.wait_for_background_writes()  # the hint's temporary file is gone
    assert cat.store.storage.temporary_files() == []
    assert not [o for o in cat.fsck().orphans if "locks" in o]
    cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
    assert os.path.exists(_lock_path(tmp_path / "cat"))


def test_storage_without_a_host_lock_holds_nothing() -> None:
    with HostLock() as lock:
        assert not lock.held and not lock.waited
    memory = olympia.create_catalog(f"memory://publish-lock-{os.getpid()}")
    assert not memory.store.storage.publish_lock().held


def _count_footprints(monkeypatch: pytest.MonkeyPatch) -> Counter[int]:
    loads: Counter[int] = Counter()
    original = commit_module.footprint_of

    def counted(store: Any, version: int) -> Footprint:
        loads[version] += 1
        return original(store, version)

    monkeypatch.setattr(commit_module, "footprint_of", counted)
    return loads


@pytest.mark.parametrize("isolation", ["snapshot", "serializable"])
def test_a_commit_that_waited_for_the_lock_builds_on_the_latest_version_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolation: str
) -> None:
    """Versions published while a commit waits (by a writer that does not take
    the lock) are examined once each, and the commit then puts one root,
    on the latest version: it loses no race."""
    uri, cat = _catalog(tmp_path, tables=2)
    rival = olympia.load_catalog(uri)
    monkeypatch.setattr(rival.store.storage, "publish_lock", lambda *a, **k: HostLock())
    path = _lock_path(tmp_path / "cat")
    holder = FileHostLock(path)
    loads = _count_footprints(monkeypatch)
    puts: list[int] = []
    original = cat.store.commit

    def commit(version: int, *args: Any, **kwargs: Any) -> Any:
        puts.append(version)
        return original(version, *args, **kwargs)

    monkeypatch.setattr(cat.store, "commit", commit)
    txn = cat.begin(isolation)
    begin = txn.begin_version
    txn.update_table("w0", "t", metadata_location="s3://data/w0/mine.json")
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(txn.commit())
        except Exception as exc:  # reported by the assertion below
            outcome.append(exc)

    committer = threading.Thread(target=run)
    committer.start()
    for i in range(1, 6):
        with rival.begin() as t:
            t.update_table("w1", "t", metadata_location=f"s3://data/w1/v{i}.json")
    holder.release()
    committer.join(timeout=120)
    assert outcome == [begin + 6]
    assert puts == [begin + 6]
    assert sorted(loads) == list(range(begin + 1, begin + 6))
    assert set(loads.values()) == {1}
    view = cat.latest()
    assert view.describe_table("w0", "t").metadata_location == "s3://data/w0/mine.json"
    assert view.describe_table("w1", "t").metadata_location == "s3://data/w1/v5.json"


# Writers in several processes, all committing and losing nothing, are tested
# with group commit in tests/test_group_commit.py
# (test_writers_in_several_processes_share_turns_and_lose_nothing).


def test_s3_writers_of_one_host_share_a_lock_per_catalog(s3_location: Any) -> None:
    from olympia.storage import open_storage

    uri, options = s3_location
    one, two = open_storage(uri, options), open_storage(uri, options)
    elsewhere = open_storage(uri + "-other", options)
    two.publish_lock_wait = 0.05  # type: ignore[attr-defined]
    first = one.publish_lock()
    try:
        assert first.held
        second = _in_thread(two.publish_lock)
        assert second.waited and not second.held
        other = _in_thread(elsewhere.publish_lock)
        assert other.held and not other.waited
        _in_thread(other.release)
    finally:
        first.release()
    again = two.publish_lock()
    assert again.held
    again.release()
    assert isinstance(again, FileHostLock)
    folder = os.path.dirname(again.path)
    assert os.stat(folder).st_mode & 0o777 == 0o700


class _WokenWaiting:
    """A ``while_waiting`` with a wake-up descriptor (hostlock.Waiting): counts
    its calls; ``wake()`` makes the descriptor readable, as a holder's answer
    or ring does."""

    def __init__(self) -> None:
        self.read, self.write = os.pipe()
        os.set_blocking(self.read, False)
        self.calls = 0
        self.first = threading.Event()

    def __call__(self) -> None:
        self.calls += 1
        self.first.set()

    def wake_fd(self) -> int | None:
        return self.read

    def wake(self) -> None:
        os.write(self.write, b"!")


def test_a_waiter_with_a_wake_up_descriptor_sleeps_until_it_is_woken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing polls (spec §3.1 item 2): between wake-ups the waiter neither
    calls ``while_waiting`` nor tries the lock, however short ``interval``."""
    monkeypatch.setattr(hostlock, "RING_FALLBACK_SECONDS", 3600.0)  # no flock thread
    path = str(tmp_path / "locks" / "publish")
    first = FileHostLock(path)
    waiting = _WokenWaiting()
    sleeps = hostlock.WAKE_COUNTS["sleeps"]
    got: list[FileHostLock] = []
    waiter = threading.Thread(
        target=lambda: got.append(FileHostLock(path, 3600, waiting, interval=0.001))
    )
    waiter.start()
    assert waiting.first.wait(60)
    time.sleep(0.2)  # a poller would have looked ~200 times by now
    assert waiting.calls == 1
    assert hostlock.WAKE_COUNTS["sleeps"] - sleeps == 1  # asleep once, still
    first.release()
    waiting.wake()  # the holder rings once it let the lock go
    waiter.join(timeout=60)
    assert got and got[0].held and got[0].waited
    assert waiting.calls == 2
    assert hostlock.WAKE_COUNTS["sleeps"] - sleeps == 1
    got[0].release()


def test_a_waiter_that_is_never_rung_still_gets_the_lock_from_flock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A holder that lets the lock go without ringing (it died, or predates
    ringing): after the fallback delay a thread blocks in flock for the waiter."""
    monkeypatch.setattr(hostlock, "RING_FALLBACK_SECONDS", 0.01)
    path = str(tmp_path / "locks" / "publish")
    first = FileHostLock(path)
    waiting = _WokenWaiting()
    got: list[FileHostLock] = []
    waiter = threading.Thread(target=lambda: got.append(FileHostLock(path, 3600, waiting)))
    waiter.start()
    assert waiting.first.wait(60)
    first.release()  # no ring
    waiter.join(timeout=60)
    assert got and got[0].held
    got[0].release()
