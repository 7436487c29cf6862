"""Maintenance never leaves a catalog unreadable (spec/transactions.md §7-8).

Pins against expiration (rollback, export), readers of expired versions,
finding the latest version while expiration runs, crash-and-restart of
expiration, and the file check (``Catalog.fsck``) that proves what is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from faulty_storage import FAIL, FaultyStorage
from fsspec.implementations.memory import MemoryFileSystem

import olympia
from olympia import layout, maintenance
from olympia.errors import (
    CommitConflictError,
    CommitTimeoutError,
    CorruptCatalogError,
    OlympiaError,
    StorageError,
    TransactionNotFoundError,
    VersionExpiredError,
    VersionNotFoundError,
)
from olympia.storage import MemoryStorage, Storage, open_storage

BIG = {"doc": "x" * 200}  # table properties large enough for a definition file


def _new(uri: str, opts: dict[str, Any] | None = None, **definition: Any) -> olympia.Catalog:
    return olympia.create_catalog(
        uri, opts or {}, node_order=3, inline_value_max_bytes=64, **definition
    )


def _fill(cat: olympia.Catalog, prefix: str, count: int = 6) -> None:
    """One version creating ``count`` tables (enough for an internal root)."""
    with cat.transaction() as t:
        if not t.namespace_exists("n"):
            t.create_namespace("n")
        for i in range(count):
            t.create_table("n", f"{prefix}{i}", f"m/{prefix}{i}", BIG)


def _replace_all(cat: olympia.Catalog, old: str, new: str, count: int = 6) -> None:
    """One version dropping the ``old`` tables and creating ``new`` ones, so
    the new tree shares no leaf with the old one."""
    with cat.transaction() as t:
        for i in range(count):
            t.drop_table("n", f"{old}{i}")
        for i in range(count):
            t.create_table("n", f"{new}{i}", f"m/{new}{i}", BIG)


def _fresh(cat: olympia.Catalog) -> olympia.Catalog:
    return olympia.load_catalog(cat.uri, cat.storage_options)


def _assert_readable(cat: olympia.Catalog) -> None:
    """Every object of every kept version can be read (fresh caches)."""
    fresh = _fresh(cat)
    for v in range(fresh.oldest_version, fresh.version + 1):
        view = fresh.at_version(v)
        for ns in view.list_namespaces():
            for table in view.list_tables(ns):
                assert view.describe_table(ns, table).name == table


# --- rollback -------------------------------------------------------------------------


def test_rollback_to_an_expired_version_is_refused_even_when_its_root_is_cached(
    any_storage_location,
):
    uri, opts = any_storage_location
    cat = _new(uri, opts)
    _fill(cat, "a")  # version 1
    _replace_all(cat, "a", "b")  # version 2
    _replace_all(cat, "b", "c")  # version 3
    other = olympia.load_catalog(uri, opts)
    assert other.at_version(1).list_tables("n") == [f"a{i}" for i in range(6)]  # cached
    cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
    with pytest.raises(VersionNotFoundError, match="expired"):
        other.rollback_to(1)
    assert other.version == 3
    assert _fresh(cat).latest().list_tables("n") == [f"c{i}" for i in range(6)]
    assert cat.store.storage.list(maintenance.PIN_DIR) == []  # the refused pin is gone
    check = cat.fsck()
    assert check.ok and check.clean, check


@pytest.mark.parametrize("frozen", [False, True])
def test_no_grace_right_after_the_commits_that_freed_files_deletes_them_all(monkeypatch, frozen):
    """Files are named with the millisecond they were made in; expiration's
    T0 is the first millisecond after its call, so a run with no grace
    period right after the commits (often in the same millisecond on memory
    storage; always, with the wall clock ``frozen`` at one instant) leaves
    no orphan."""
    if frozen:
        instant = time.time()
        monkeypatch.setattr(time, "time", lambda: instant)
        monkeypatch.setattr(time, "time_ns", lambda: int(instant * 1e9))
    for _ in range(3 if frozen else 40):
        cat = _new(f"memory://olympia-tick-{os.urandom(8).hex()}")
        _fill(cat, "a")
        _replace_all(cat, "a", "b")
        cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
        check = cat.fsck()
        assert check.ok and check.clean, check
        assert _fresh(cat).latest().list_tables("n") == [f"b{i}" for i in range(6)]


class _Clock:
    """A stand-in for the ``time`` module: the wall clock in nanoseconds
    steps through ``readings``, then stays at the last."""

    def __init__(self, readings: list[int]) -> None:
        self.readings = readings
        self.monotonic_now = 0.0

    def time_ns(self) -> int:
        return self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]

    def monotonic(self) -> float:
        self.monotonic_now += 0.0005
        return self.monotonic_now

    def sleep(self, seconds: float) -> None:
        pass


@pytest.mark.parametrize(
    ("readings", "expected"),
    [
        ([1000_400_000, 1000_900_000, 1001_000_000], 1001),  # waits for the tick
        ([1000_999_999, 1003_000_000], 1003),  # already past it: the new reading
        ([1000_400_000, 990_000_000], 1001),  # set back: the call's plus one
    ],
)
def test_expiration_clock_is_the_first_millisecond_after_the_call(monkeypatch, readings, expected):
    monkeypatch.setattr(maintenance, "time", _Clock(readings))
    assert maintenance.expiration_clock_millis() == expected


def test_rollback_removes_its_pin_and_keeps_the_version_reachable(any_storage_location):
    uri, opts = any_storage_location
    cat = _new(uri, opts)
    _fill(cat, "a")
    _replace_all(cat, "a", "b")
    assert cat.rollback_to(1) == 3
    assert cat.store.storage.list(maintenance.PIN_DIR) == []
    cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
    assert _fresh(cat).latest().list_tables("n") == [f"a{i}" for i in range(6)]
    assert cat.fsck().clean


# --- readers of an expired version ----------------------------------------------------


def test_views_and_transactions_of_an_expired_version_say_it_was_expired(
    any_storage_location,
):
    uri, opts = any_storage_location
    cat = _new(uri, opts)
    _fill(cat, "a")  # version 1
    reader = olympia.load_catalog(uri, opts)
    view = reader.at_version(1)  # only the root is read here
    txn = reader.begin()  # begins at version 1; nothing read yet
    _replace_all(cat, "a", "b")
    _replace_all(cat, "b", "c")
    cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
    for read in (
        lambda: view.list_tables("n"),
        lambda: view.describe_table("n", "a3"),
        lambda: txn.list_tables("n"),
        lambda: txn.describe_table("n", "a0"),
        lambda: reader.at_version(1),
    ):
        with pytest.raises(VersionNotFoundError, match="version 1 was expired"):
            read()
    assert reader.latest().list_tables("n") == [f"c{i}" for i in range(6)]


def test_a_missing_file_of_a_kept_version_is_corruption(tmp_path):
    cat = _new(str(tmp_path / "c"))
    _fill(cat, "a", count=30)  # more new nodes than a root carries inline
    node = cat.store.storage.list(layout.NODE_DIR)[0]
    cat.store.storage.delete(node)
    with pytest.raises(CorruptCatalogError, match="missing"):
        _fresh(cat).latest().list_tables("n")
    check = cat.fsck()
    assert not check.ok and check.missing == (node,)


# --- export -----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["full", "minimal"])
def test_export_racing_an_expiration_is_pinned_from_its_start(tmp_path, monkeypatch, mode):
    uri = str(tmp_path / "c")
    cat = _new(uri)
    _fill(cat, "a")  # version 1
    _replace_all(cat, "a", "b")  # version 2: exported
    other = olympia.load_catalog(uri)
    copy = maintenance._copy
    raced = []

    def copy_then_race(source, target, path):
        if not raced:  # while the export copies: writers move on, expiration runs
            raced.append(path)
            _replace_all(other, "b", "c")
            _replace_all(other, "c", "d")
            other.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
        copy(source, target, path)

    monkeypatch.setattr(maintenance, "_copy", copy_then_race)
    target = str(tmp_path / "export")
    assert cat.export_snapshot("snap", target, mode=mode) == 2
    monkeypatch.setattr(maintenance, "_copy", copy)
    assert raced
    exported = olympia.load_catalog(target)
    assert exported.latest().list_tables("n") == [f"b{i}" for i in range(6)]
    assert exported.fsck().clean
    assert cat.oldest_version == 4
    check = cat.fsck()  # the pinned version 2 is complete
    assert check.ok and check.kept_versions == (2, 4), check
    assert _fresh(cat).latest().list_tables("n") == [f"d{i}" for i in range(6)]
    # Later expirations keep working.
    cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
    assert cat.fsck().clean
    cat.drop_export("snap")
    cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
    assert cat.store.storage.read(layout.root_path(2)) == layout.EXPIRED_ROOT
    assert cat.fsck().clean


def test_export_record_is_written_before_copying_and_removed_on_failure(tmp_path, monkeypatch):
    cat = _new(str(tmp_path / "c"))
    _fill(cat, "a")
    seen = []

    def failing_copy(source, target, path):
        seen.append(json.loads(cat.store.storage.read("exports/snap.json")))
        raise StorageError("target unreachable")

    monkeypatch.setattr(maintenance, "_copy", failing_copy)
    with pytest.raises(StorageError):
        cat.export_snapshot("snap", str(tmp_path / "x"), mode="full")
    assert seen and seen[0]["state"] == "copying" and seen[0]["version"] == 1
    assert cat.store.storage.list(maintenance.EXPORT_DIR) == []


@pytest.mark.parametrize("mode", ["full", "minimal"])
def test_export_with_an_open_distributed_transaction(tmp_path, mode):
    cat = _new(str(tmp_path / "c"))
    _fill(cat, "a")
    txn = cat.begin()
    txn.create_table("n", "pending", "m/pending")
    txn.distribute()
    txn.create_table("n", "pending2", "m/pending2")
    target = str(tmp_path / "export")
    cat.export_snapshot("snap", target, mode=mode)
    exported = olympia.load_catalog(target)
    if mode == "full":
        assert [t.id for t in exported.list_transactions()] == [txn.id]
        resumed = exported.resume(txn.id)
        assert len(resumed.actions) == len(txn.actions)
        resumed.commit()
        tables = exported.latest().list_tables("n")
        assert "pending" in tables and "pending2" in tables
        assert exported.list_transactions() == []
        assert exported.fsck().ok
    else:
        assert exported.list_transactions() == []
        with pytest.raises(TransactionNotFoundError):
            exported.resume(txn.id)
        assert exported.latest().list_tables("n") == [f"a{i}" for i in range(6)]
        assert exported.store.storage.list(layout.DTXN_DIR) == []
        assert exported.fsck().clean
    # The source is untouched: the transaction still commits there.
    cat.resume(txn.id).commit()
    assert "pending2" in cat.latest().list_tables("n")


# --- expiration reclaims everything --------------------------------------------------


def test_roots_freed_by_drop_export_are_reclaimed(any_storage_location, tmp_path):
    uri, opts = any_storage_location
    cat = _new(uri, opts)
    _fill(cat, "a")  # version 1: exported
    cat.export_snapshot("snap", str(tmp_path / "x"), mode="minimal")
    _replace_all(cat, "a", "b")
    cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
    assert layout.root_path(1) in cat.store.storage.list(layout.VERSION_DIR)
    cat.drop_export("snap")
    result = cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
    assert result.deleted_roots == 1 and result.deleted_files > 0
    assert cat.store.storage.read(layout.root_path(1)) == layout.EXPIRED_ROOT
    check = cat.fsck()
    assert check.clean and check.kept_versions == (2,)


def test_roots_left_below_the_floor_by_a_killed_expiration_are_reclaimed(tmp_path):
    cat = _new(str(tmp_path / "c"))
    _fill(cat, "a")
    _replace_all(cat, "a", "b")
    _replace_all(cat, "b", "c")
    # A run killed right after writing the floor: nothing deleted yet.
    cat.store.storage.overwrite(layout.OLDEST_FLOOR, b"3")
    assert {o for o in cat.fsck().orphans if o.startswith("vn/")} == {
        layout.root_path(v) for v in (0, 1, 2)
    }
    result = cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
    assert result.deleted_roots == 3
    assert cat.fsck().clean


def test_temporary_files_of_killed_writers_are_removed(tmp_path):
    cat = _new(str(tmp_path / "c"))
    _fill(cat, "a")
    tmp = tmp_path / "c" / ".olympia-tmp"
    old, young = tmp / "dead.tmp", tmp / "inflight.tmp"
    old.write_bytes(b"partial")
    young.write_bytes(b"partial")
    an_hour_ago = time.time() - 3600
    os.utime(old, (an_hour_ago, an_hour_ago))
    assert {".olympia-tmp/dead.tmp", ".olympia-tmp/inflight.tmp"} <= set(cat.fsck().orphans)
    result = cat.expire_versions(keep_last=1, grace_seconds=60, allow_short_grace=True)
    assert result.deleted_temporary_files == 1
    assert not old.exists() and young.exists()
    assert (
        cat.expire_versions(
            keep_last=1, grace_seconds=0, allow_short_grace=True
        ).deleted_temporary_files
        == 1
    )
    assert cat.fsck().clean


def test_a_broken_pin_does_not_stop_expiration(tmp_path):
    cat = _new(str(tmp_path / "c"))
    _fill(cat, "a")
    _replace_all(cat, "a", "b")
    _replace_all(cat, "b", "c")
    cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
    # An export recorded by an earlier release after expiration deleted its version.
    record = {"name": "late", "version": 1, "target": "x", "mode": "full", "created_at_millis": 1}
    cat.store.storage.put_if_absent("exports/late.json", json.dumps(record).encode())
    for _ in range(2):
        result = cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
        assert result.oldest_version == 3
        assert len(result.broken_pins) == 1 and "exports/late.json" in result.broken_pins[0]
    check = cat.fsck()
    assert check.missing == (layout.root_path(1),)
    cat.drop_export("late")
    assert (
        cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True).broken_pins == ()
    )
    assert cat.fsck().clean


def test_lapsed_pins_are_ignored_and_removed(tmp_path):
    cat = _new(str(tmp_path / "c"))
    _fill(cat, "a")
    _replace_all(cat, "a", "b")
    stale = {"kind": "rollback", "from_version": 1, "version": 1, "renewed_at_millis": 1}
    live = dict(stale, renewed_at_millis=int(time.time() * 1000))
    cat.store.storage.put_if_absent("pins/stale.json", json.dumps(stale).encode())
    cat.store.storage.put_if_absent("pins/live.json", json.dumps(live).encode())
    assert "pins/stale.json" in cat.fsck().orphans
    result = cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
    assert result.deleted_pins == 1 and result.deleted_roots == 1  # version 0 only
    assert cat.store.storage.list("pins") == ["pins/live.json"]
    assert cat.fsck().kept_versions == (1, 2)
    cat.store.storage.delete("pins/live.json")
    cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
    check = cat.fsck()
    assert check.clean and check.kept_versions == (2,)


def test_fsck_reports_damaged_missing_and_orphan_files(tmp_path):
    cat = _new(str(tmp_path / "c"))
    _fill(cat, "a", count=30)  # more new nodes than a root carries inline
    storage = cat.store.storage
    assert cat.fsck().clean
    check = cat.fsck()
    assert check.kept_versions == (0, 1) and check.checked_files > 3
    nodes, defs = storage.list(layout.NODE_DIR), storage.list(layout.DEF_DIR)
    kept_def = storage.read(defs[0])
    storage.delete(defs[0])
    check = cat.fsck()
    assert check.missing == (defs[0],) and check.damaged == () and check.orphans == ()
    storage.put_if_absent(defs[0], kept_def)
    damaged = nodes[0]
    original = storage.read(damaged)
    data = bytearray(original)
    data[len(data) // 2] ^= 0xFF
    storage.delete(damaged)
    storage.put_if_absent(damaged, bytes(data))
    stray = "node/0000000000001-" + "0" * 32 + ".arrow"
    storage.put_if_absent(stray, b"junk")
    check = cat.fsck()
    assert [d.split(":")[0] for d in check.damaged] == [damaged]
    # What only the damaged node names is live, and cannot be told from a
    # stray file: no node file is called an orphan while it is damaged.
    assert check.orphans == ()
    assert not check.ok and not check.clean
    storage.delete(damaged)
    storage.put_if_absent(damaged, original)
    check = cat.fsck()
    assert check.ok and check.orphans == (stray,)


# --- crash and restart of expiration ------------------------------------------------


def _messy_catalog(cat: olympia.Catalog, tmp_path: Path, label: str) -> dict[int, list[str]]:
    """Versions, an export pinned and later dropped, an ended distributed
    transaction, an open one, leftover temporary files; return the tables of
    every version kept by ``keep_last=2``."""
    _fill(cat, "a")
    cat.export_snapshot("old", str(tmp_path / f"{label}-old"), mode="minimal")
    _replace_all(cat, "a", "b")
    done = cat.begin()
    done.create_table("n", "dt", "m/dt")
    done.distribute()
    done.commit()
    cat.export_snapshot("kept", str(tmp_path / f"{label}-kept"), mode="minimal")
    _replace_all(cat, "b", "c")
    cat.drop_export("old")
    still_open = cat.begin()
    still_open.create_table("n", "later", "m/later")
    still_open.distribute()
    _replace_all(cat, "c", "d")
    latest = cat.version
    return {v: cat.at_version(v).list_tables("n") for v in (latest - 1, latest)}


def _check_converged(cat: olympia.Catalog, expected: dict[int, list[str]]) -> None:
    fresh = _fresh(cat)
    result = fresh.expire_versions(keep_last=2, grace_seconds=0, allow_short_grace=True)
    check = fresh.fsck()
    assert check.clean, check
    assert result.broken_pins == ()
    kept = set(expected)
    assert set(check.kept_versions) >= kept
    for v, tables in expected.items():
        assert _fresh(cat).at_version(v).list_tables("n") == tables
    _assert_readable(cat)
    [txn] = fresh.list_transactions()
    fresh.resume(txn.id).commit()  # the open transaction survived every crash
    assert "later" in _fresh(cat).latest().list_tables("n")


def _clone(source: Storage, name: str) -> olympia.Catalog:
    """A copy of the catalog in ``source`` at ``memory://name``."""
    target = MemoryStorage(name)
    for folder in (*CATALOG_FOLDERS, maintenance.PIN_DIR, maintenance.EXPORT_DIR):
        for path in source.list(folder):
            target.put_if_absent(path, source.read(path))
    return olympia.load_catalog(target)


CATALOG_FOLDERS = (layout.VERSION_DIR, layout.NODE_DIR, layout.DEF_DIR, layout.DTXN_DIR)


def test_expiration_crashing_at_every_storage_call_converges(tmp_path):
    # A clean run counts the calls; then each call in turn is the crash point.
    tag = f"{os.getpid()}-{random.getrandbits(32)}"
    base = _new(f"memory://crash-base-{tag}")
    expected = _messy_catalog(base, tmp_path, "base")
    base.close()  # waits for the background hint write: every clone is the same
    counting = FaultyStorage(_clone(base.store.storage, f"crash-count-{tag}").store.storage)
    counted = olympia.load_catalog(counting)
    counting.reset()  # count the calls of the expiration only
    counted.expire_versions(keep_last=2, grace_seconds=0, allow_short_grace=True)
    calls = counting.count
    assert calls > 30
    stopped = 0
    try:
        for k in range(1, calls + 1):
            cat = _clone(base.store.storage, f"crash-{tag}-{k}")
            wrapped = FaultyStorage(cat.store.storage)
            crashing = olympia.load_catalog(wrapped)
            wrapped.arm(k, FAIL)
            try:
                crashing.expire_versions(keep_last=2, grace_seconds=0, allow_short_grace=True)
            except OlympiaError:
                stopped += 1  # the crash point: the run stops there
            assert wrapped.hit is not None and wrapped.hit.number == k
            _check_converged(cat, expected)
        # A few faults are tolerated (an unreadable state file is left for later).
        assert stopped > calls * 3 // 4
    finally:
        store = MemoryFileSystem.store
        for key in [key for key in tuple(store) if f"crash-{tag}" in key or tag in key]:
            store.pop(key, None)


_EXPIRE_CHILD = textwrap.dedent(
    """
    import sys
    import olympia
    cat = olympia.load_catalog(sys.argv[1])
    print("ready", flush=True)
    sys.stdin.readline()
    cat.expire_versions(keep_last=2, grace_seconds=0, allow_short_grace=True)
    print("done", flush=True)
    """
)


def test_expiration_killed_at_random_points_converges(tmp_path):
    uri = str(tmp_path / "c")
    cat = _new(uri)
    expected = _messy_catalog(cat, tmp_path, "kill")
    rng = random.Random(7)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    interrupted = 0
    for round_ in range(8):
        _replace_all(cat, "d" if round_ == 0 else f"r{round_ - 1}", f"r{round_}")
        expected = {v: cat.at_version(v).list_tables("n") for v in (cat.version - 1, cat.version)}
        child = subprocess.Popen(
            [sys.executable, "-c", _EXPIRE_CHILD, uri],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == b"ready"
        child.stdin.write(b"go\n")
        child.stdin.flush()
        time.sleep(rng.uniform(0, 0.03))
        child.send_signal(signal.SIGKILL)
        child.wait(60)
        rest = child.stdout.read()
        child.stdout.close()
        child.stdin.close()
        if b"done" not in rest:
            interrupted += 1
    assert interrupted > 0
    _check_converged(cat, expected)


# --- concurrency: writers, readers, rollback, export and expiration -------------------


def _run_for(seconds: float, workers: dict[str, Any]) -> dict[str, list[BaseException]]:
    """Run each worker in a loop in its own thread for ``seconds``; collect errors."""
    stop = threading.Event()
    errors: dict[str, list[BaseException]] = {name: [] for name in workers}
    counts: dict[str, int] = dict.fromkeys(workers, 0)

    def loop(name: str, work: Any) -> None:
        while not stop.is_set():
            try:
                work()
            except BaseException as exc:  # collected for the assertion
                errors[name].append(exc)
            counts[name] += 1

    threads = [threading.Thread(target=loop, args=item) for item in workers.items()]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(120)
    errors["_counts"] = [RuntimeError(str(counts))]
    return errors


def test_latest_version_is_never_missing_while_expiration_runs(tmp_path):
    uri = str(tmp_path / "c")
    olympia.create_catalog(uri)
    writers = [olympia.load_catalog(uri) for _ in range(2)]
    readers = [olympia.load_catalog(uri) for _ in range(2)]
    expirer = olympia.load_catalog(uri)
    seen: list[int] = []
    names = iter(range(10**9))

    def write(cat: olympia.Catalog) -> Any:
        def work() -> None:
            # history-expired is an allowed outcome for a writer
            with contextlib.suppress(CommitConflictError), cat.transaction() as t:
                t.create_namespace(f"n{next(names)}")

        return work

    def read(cat: olympia.Catalog) -> Any:
        def work() -> None:
            seen.append(cat.version)

        return work

    errors = _run_for(
        6.0,
        {
            "w0": write(writers[0]),
            "w1": write(writers[1]),
            "r0": read(readers[0]),
            "r1": read(readers[1]),
            "expire": lambda: expirer.expire_versions(keep_last=1, grace_seconds=3600),
        },
    )
    counts = errors.pop("_counts")
    spurious = {k: [repr(e) for e in v[:3]] for k, v in errors.items() if v}
    assert spurious == {}, (spurious, counts)
    assert len(seen) > 1000, counts
    assert olympia.load_catalog(uri).fsck().ok


def test_rollback_export_and_readers_beside_writers_and_expiration(tmp_path):
    uri = str(tmp_path / "c")
    # A commit time limit of 0.5 s lets expiration run with a grace of 1 s
    # beside the writers (spec/transactions.md §8.5).
    cat = _new(uri, commit_time_limit_millis=500)
    _fill(cat, "a")
    _fill(cat, "b")  # version 2: every version from here holds namespace n
    cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
    rng = random.Random(3)
    lock = threading.Lock()
    counter = iter(range(10**9))
    outcomes: dict[str, int] = {
        "rolled_back": 0,
        "verified": 0,
        "exported": 0,
        "refused": 0,
        "read": 0,
        "timed_out": 0,
    }
    exports: list[tuple[str, str]] = []
    writer, roller, exporter, reader, expirer = (olympia.load_catalog(uri) for _ in range(5))

    def write() -> None:
        i = next(counter)
        try:
            with contextlib.suppress(CommitConflictError), writer.transaction() as t:
                t.create_table("n", f"w{i}", f"m/w{i}", BIG)
                if i % 3 == 0:
                    for name in t.list_tables("n")[:2]:
                        t.drop_table("n", name)
        except CommitTimeoutError:  # a commit slower than the limit publishes nothing
            outcomes["timed_out"] += 1

    def rollback() -> None:
        low, high = roller.oldest_version, roller.version
        with lock:
            target = rng.randint(max(low - 2, 0), high)
        try:
            new = roller.rollback_to(target)
        except VersionNotFoundError:
            outcomes["refused"] += 1
            return
        except CommitTimeoutError:
            outcomes["timed_out"] += 1
            return
        outcomes["rolled_back"] += 1
        try:
            view = olympia.load_catalog(uri).at_version(new)  # the whole tree is readable
            for table in view.list_tables("n"):
                view.describe_table("n", table)
        except VersionNotFoundError:
            # Expiration (keep_last=2) may expire it as soon as two writers
            # publish after it, before this read (seen under load): expired
            # is not lost. Every version still kept is read at the end.
            return
        outcomes["verified"] += 1
        time.sleep(0.01)

    def export() -> None:
        i = next(counter)
        target = str(tmp_path / f"e{i}")
        mode = "full" if i % 2 else "minimal"
        try:
            exporter.export_snapshot(f"e{i}", target, mode=mode)
        except VersionNotFoundError:
            outcomes["refused"] += 1
            return
        except CommitTimeoutError:
            # A minimal export commits version 0 of the copy under the same
            # 0.5 s limit, which a busy machine can pass: nothing published,
            # and no record of it left in the source.
            assert not open_storage(target).list(layout.VERSION_DIR)
            assert not exporter.store.storage.exists(f"exports/e{i}.json")
            outcomes["timed_out"] += 1
            return
        exported = olympia.load_catalog(target)
        assert exported.fsck().ok
        exported.latest().list_tables("n")
        exports.append((f"e{i}", target))
        outcomes["exported"] += 1
        if len(exports) > 2:
            exporter.drop_export(exports[0][0])
            exports.pop(0)

    def read() -> None:
        with lock:
            low = reader.oldest_version
            v = rng.randint(max(low - 2, 0), reader.version)
        try:
            reader.at_version(v).list_tables("n")
        except VersionNotFoundError:
            return
        outcomes["read"] += 1

    errors = _run_for(
        6.0,
        {
            "write": write,
            "rollback": rollback,
            "export": export,
            "read": read,
            "expire": lambda: expirer.expire_versions(keep_last=2, grace_seconds=1),
        },
    )
    counts = errors.pop("_counts")
    spurious = {k: [repr(e) for e in v[:3]] for k, v in errors.items() if v}
    assert spurious == {}, (spurious, counts, outcomes)
    assert outcomes["verified"] > 0 and outcomes["exported"] > 0, outcomes
    assert cat.fsck().ok
    _assert_readable(cat)
    for name, _ in exports:
        cat.drop_export(name)
    time.sleep(1.1)
    cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
    check = cat.fsck()
    assert check.clean, check


def test_the_record_of_a_killed_export_lapses(tmp_path):
    cat = _new(str(tmp_path / "c"))
    _fill(cat, "a")
    _replace_all(cat, "a", "b")
    killed = {
        "name": "killed",
        "state": "copying",
        "from_version": 0,
        "version": 1,
        "created_at_millis": 1,
        "renewed_at_millis": 1,
    }
    running = dict(killed, name="running", renewed_at_millis=int(time.time() * 1000))
    cat.store.storage.put_if_absent("exports/killed.json", json.dumps(killed).encode())
    cat.store.storage.put_if_absent("exports/running.json", json.dumps(running).encode())
    result = cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
    assert result.deleted_pins == 1 and result.deleted_roots == 0  # 0 and 1 still pinned
    assert cat.store.storage.list("exports") == ["exports/running.json"]
    cat.store.storage.delete("exports/running.json")
    assert (
        cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True).deleted_roots == 2
    )
    assert cat.fsck().clean


@pytest.mark.parametrize("mode", ["full", "minimal"])
def test_an_export_failing_at_its_storage_calls_leaves_the_source_intact(tmp_path, mode):
    tag = f"{os.getpid()}-{random.getrandbits(32)}"
    base = _new(f"memory://export-base-{tag}")
    expected = _messy_catalog(base, tmp_path, "base")
    base.close()
    counting = FaultyStorage(_clone(base.store.storage, f"export-count-{tag}").store.storage)
    counted = olympia.load_catalog(counting)
    counting.reset()
    counted.export_snapshot("x", str(tmp_path / "count"), mode=mode)
    calls = counting.count
    try:
        # About 40 crash points spread over the whole export (every call of a small one).
        for k in range(1, calls + 1, max(1, calls // 40)):
            cat = _clone(base.store.storage, f"export-{tag}-{k}")
            wrapped = FaultyStorage(cat.store.storage)
            exporting = olympia.load_catalog(wrapped)
            wrapped.arm(k, FAIL)
            target = tmp_path / f"t{k}"
            try:
                exporting.export_snapshot("x", str(target), mode=mode)
            except OlympiaError:
                # Failed: no record left behind (unless the delete itself failed).
                if wrapped.hit is not None and wrapped.hit.op != "delete":
                    assert cat.store.storage.list("exports") == ["exports/kept.json"]
            else:
                assert olympia.load_catalog(str(target)).fsck().ok
            assert wrapped.hit is not None and wrapped.hit.number == k
            assert cat.fsck().ok
            for name in maintenance.exports(cat.store.storage):
                if name == "x":
                    cat.drop_export(name)
            _check_converged(cat, expected)
    finally:
        store = MemoryFileSystem.store
        for key in [key for key in tuple(store) if tag in key]:
            store.pop(key, None)


@pytest.mark.parametrize("damage", ["missing", "empty", "garbage"])
def test_a_rollback_never_publishes_a_tree_expiration_took_apart(tmp_path, damage):
    """With ``vn/oldest`` lost (read as floor 0), a root below the real floor
    that expiration kept whole (it carries inline nodes of kept trees) still
    loads, but nodes of its tree were deleted: a rollback to it must refuse
    and publish nothing, or the latest version would be unreadable."""
    cat = olympia.create_catalog(str(tmp_path / "c"), node_order=8)
    with cat.transaction() as t:
        t.create_namespace("ns")
    with cat.transaction() as t:  # version 2: a tree of node files and inline nodes
        for i in range(300):
            t.create_table("ns", f"big{i:04d}", metadata_location=f"s3://x/big{i}")
    for i in range(5):  # versions 3..7 rewrite part of it
        with cat.transaction() as t:
            t.update_table("ns", f"big{i * 60:04d}", metadata_location=f"s3://x/new{i}")
    assert (
        cat.expire_versions(keep_last=2, grace_seconds=0, allow_short_grace=True).oldest_version
        == 6
    )
    floor = tmp_path / "c" / "vn" / "oldest"
    if damage == "missing":
        floor.unlink()
    else:
        floor.write_bytes(b"" if damage == "empty" else b"\x00garbage")
    damaged = olympia.load_catalog(str(tmp_path / "c"))
    assert damaged.oldest_version == 0
    before = damaged.version
    with pytest.raises(VersionNotFoundError, match="version 2 cannot be restored: .* is missing"):
        damaged.rollback_to(2)
    again = olympia.load_catalog(str(tmp_path / "c"))
    assert again.version == before
    assert len(again.latest().list_tables("ns")) == 300
    # A kept version is restored as before.
    assert again.rollback_to(6) == before + 1
    assert again.latest().describe_table("ns", "big0000").metadata_location == "s3://x/new0"


def test_a_lost_floor_file_leaves_history_readable_and_fsck_says_what_to_write(tmp_path):
    """``vn/oldest`` lost (read as floor 0): history() raised
    VersionNotFoundError at version 0, an expired-root marker, so ``olympia
    log`` could not run, and fsck listed the markers as missing files. A
    marker proves its version was expired, whatever the floor file says:
    history lists the versions whose roots are whole, and fsck names the
    damage and the floor to write back."""
    lake = tmp_path / "c"
    cat = olympia.create_catalog(str(lake))
    for i in range(5):
        with cat.transaction() as t:
            t.create_namespace(f"n{i}")
    assert (
        cat.expire_versions(keep_last=2, grace_seconds=0, allow_short_grace=True).oldest_version
        == 4
    )
    (lake / "vn" / "oldest").unlink()
    damaged = olympia.load_catalog(str(lake))
    assert damaged.oldest_version == 0
    assert [v.version for v in damaged.history()] == [4, 5]
    with pytest.raises(VersionExpiredError, match="version 2 was expired"):
        damaged.at_version(2)
    check = damaged.fsck()
    assert not check.ok and check.missing == ()
    assert len(check.damaged) == 4  # versions 0 to 3
    assert all("the floor file was lost or rewritten" in d for d in check.damaged)
    assert "write 4 to vn/oldest" in check.damaged[0]
    (lake / "vn" / "oldest").write_text("4")
    assert olympia.load_catalog(str(lake)).fsck().ok
