"""Group commit among the writers of one host (spec/transactions.md §3.2).

A writer waiting for the publish lock leaves its transaction for the holder,
which publishes it in its own next version (one version holding several
transactions, ``$group``, spec/format.md §3.2), or refuses it; either way
every transaction is published at most once, every conflict rule still
holds, and the history shows each transaction with its own begin version,
isolation and actions."""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import olympia
from olympia import commit as commit_module
from olympia import group, layout
from olympia.definition import key_codec
from olympia.proto import actions_pb2 as apb
from olympia.storage import hostlock
from olympia.storage.hostlock import HostLock
from olympia.storage.local import LocalStorage
from olympia.store import CatalogStore, Root

pytestmark = pytest.mark.skipif(os.name != "posix", reason="flock is POSIX")


def _catalog(
    uri: str, tables: int = 2, options: dict[str, Any] | None = None, **kw: Any
) -> olympia.Catalog:
    cat = (
        olympia.create_catalog(uri, storage_options=options, **kw)
        if options
        else olympia.create_catalog(uri, **kw)
    )
    with cat.begin() as txn:
        for w in range(tables):
            txn.create_namespace(f"w{w}")
            txn.create_table(f"w{w}", "t", f"s3://data/w{w}/v0.json")
    return cat


def _updaters(
    uri: str, count: int, options: dict[str, Any] | None = None
) -> list[olympia.Transaction]:
    """``count`` open transactions, each of its own catalog handle, the i-th
    updating table ``w<i>.t``."""
    return _update_each([olympia.load_catalog(uri, options) for _ in range(count)])


def _update_each(handles: list[olympia.Catalog]) -> list[olympia.Transaction]:
    """An open transaction on each of ``handles``, the i-th updating table
    ``w<i>.t`` to ``v1.json``."""
    txns = []
    for w, handle in enumerate(handles):
        txn = handle.begin()
        txn.update_table(f"w{w}", "t", metadata_location=f"s3://data/w{w}/v1.json")
        txns.append(txn)
    return txns


def _assert_sees_every_update(handle: olympia.Catalog, version: int, tables: int) -> None:
    """The latest version of ``handle`` is ``version`` and holds the update of
    :func:`_update_each` of each of the first ``tables`` tables."""
    view = handle.latest()
    assert view.version == version
    for w in range(tables):
        assert view.describe_table(f"w{w}", "t").metadata_location == f"s3://data/w{w}/v1.json"


def _hold(cat: olympia.Catalog) -> HostLock:
    lock = cat.store.storage.publish_lock()
    assert lock.held
    return lock


def _folder(cat: olympia.Catalog) -> str:
    folder = cat.store.storage.group_dir()
    assert folder is not None
    return folder


def _ask(folder: str, txn: olympia.Transaction, last: Root) -> group.Member:
    """``txn``'s writer leaves its request, based on ``last``, in ``folder``."""
    request = group.Request(
        txn.id, last.version, last.version, "snapshot", tuple(txn.actions), last.info.transaction_id
    )
    member = group.Member(folder, txn.id)
    assert member.ask(request)
    return member


def _requests(folder: str) -> set[str]:
    try:
        return {n[: -len(".req")] for n in os.listdir(folder) if n.endswith(".req")}
    except FileNotFoundError:
        return set()


def _wait_for(check: Callable[[], bool], what: str, seconds: float = 30.0) -> None:
    end = time.monotonic() + seconds
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


class _Committer(threading.Thread):
    """Commits ``txn`` in a thread; ``outcome`` is the version or the error."""

    def __init__(self, txn: olympia.Transaction) -> None:
        super().__init__(daemon=True)
        self.txn = txn
        self.outcome: Any = None

    def run(self) -> None:
        try:
            self.outcome = self.txn.commit()
        except Exception as exc:  # compared by the tests
            self.outcome = exc


def _commit_holding_the_lock(
    cat: olympia.Catalog, txns: list[olympia.Transaction], while_held: Callable[[], None]
) -> list[_Committer]:
    """Commit ``txns`` in threads while this thread holds the publish lock,
    which it lets go once ``while_held`` returned."""
    lock = _hold(cat)
    threads = [_Committer(t) for t in txns]
    try:
        for t in threads:
            t.start()
        while_held()
    finally:
        lock.release()
    for t in threads:
        t.join(timeout=120)
        assert not t.is_alive()
    return threads


def _commit_while_held(
    cat: olympia.Catalog,
    txns: list[olympia.Transaction],
    before_release: Callable[[], None] | None = None,
) -> list[_Committer]:
    """Commit ``txns`` while holding the publish lock; let it go once each
    has left its request (and ``before_release`` ran)."""
    folder = _folder(cat)
    ids = {t.id for t in txns}

    def wait() -> None:
        _wait_for(lambda: ids <= _requests(folder), "the requests of every waiting writer")
        if before_release is not None:
            before_release()

    return _commit_holding_the_lock(cat, txns, wait)


def _commit_leaving_no_request(
    cat: olympia.Catalog, txns: list[olympia.Transaction], no_request: Callable[[], bool]
) -> list[_Committer]:
    """Commit ``txns`` while holding the publish lock; before letting it go,
    check (``no_request``) that none left a request."""

    def look() -> None:
        time.sleep(0.3)  # long enough for requests to appear, if any were left
        assert no_request()

    return _commit_holding_the_lock(cat, txns, look)


def _hot_updaters(handles: list[olympia.Catalog]) -> list[olympia.Transaction]:
    """A snapshot transaction on each of ``handles`` that read table ``w0.t``
    and moved it to a location of its own (``writer<i>.json``): read-modify-write
    of one hot table, every pair in write-write conflict."""
    txns = []
    for i, h in enumerate(handles):
        txn = h.begin("snapshot")
        txn.describe_table("w0", "t")
        txn.update_table("w0", "t", metadata_location=f"s3://data/w0/writer{i}.json")
        txns.append(txn)
    return txns


def _versions_of(cat: olympia.Catalog, since: int) -> Counter[str]:
    """Transaction id -> how many versions since ``since`` hold it."""
    return Counter(t.transaction_id for info in cat.history(since=since) for t in info.transactions)


def test_waiting_writers_are_published_with_the_holder_in_one_version(tmp_path: Path) -> None:
    cat = _catalog(str(tmp_path / "cat"), tables=3)
    base = cat.version
    txns = _updaters(str(tmp_path / "cat"), 3)
    threads = _commit_while_held(cat, txns)
    assert [t.outcome for t in threads] == [base + 1] * 3
    # The first to get the lock published its own transaction and the others'.
    assert sum(t.txn.published_by_holder for t in threads) == 2
    assert all(t.txn.status == "committed" for t in threads)
    assert cat.version == base + 1
    (info,) = cat.history(since=base + 1)
    holder = next(t.txn for t in threads if not t.txn.published_by_holder)
    # The holder's transaction first, then the requests, each with its own
    # begin version, isolation and actions.
    assert info.transactions[0].transaction_id == holder.id == info.transaction_id
    assert {r.transaction_id for r in info.transactions} == {t.id for t in txns}
    for r in info.transactions:
        assert (r.begin_version, r.isolation) == (base, "snapshot")
        assert [a.type for a in r.actions if not a.read_only] == [apb.TABLE_UPDATE]
        (write,) = (a for a in r.actions if a.type == apb.TABLE_UPDATE)
        assert write.table.metadata_location == f"s3://data/{write.table.namespace}/v1.json"
    assert list(info.actions) == [a for r in info.transactions for a in r.actions]
    # On storage: one root whose $group names the three, in that order.
    group_entries = cat.store.load_root(base + 1).info.group
    assert [e.transaction_id for e in group_entries] == [
        r.transaction_id for r in info.transactions
    ]
    assert [e.n_actions for e in group_entries] == [len(r.actions) for r in info.transactions]
    view = cat.latest()
    for w in range(3):
        assert view.describe_table(f"w{w}", "t").metadata_location == f"s3://data/w{w}/v1.json"
    # Every request was answered and its files removed.
    assert not os.path.exists(_folder(cat))  # emptied, then removed


def test_a_request_that_conflicts_is_refused_and_its_writer_reports_the_conflict(
    tmp_path: Path,
) -> None:
    uri = str(tmp_path / "cat")
    cat = _catalog(uri)
    base = cat.version
    txns = []
    for i in range(2):
        txn = olympia.load_catalog(uri).begin("snapshot")
        txn.update_table("w0", "t", metadata_location=f"s3://data/w0/writer{i}.json")
        txns.append(txn)
    threads = _commit_while_held(cat, txns)
    won = [t for t in threads if isinstance(t.outcome, int)]
    lost = [t for t in threads if isinstance(t.outcome, olympia.CommitConflictError)]
    assert len(won) == 1 and len(lost) == 1
    assert won[0].outcome == base + 1 and not won[0].txn.published_by_holder
    assert lost[0].outcome.rule == "write-write"
    assert lost[0].outcome.version == base + 1
    assert cat.version == base + 1
    expected = f"s3://data/w0/writer{threads.index(won[0])}.json"
    assert cat.latest().describe_table("w0", "t").metadata_location == expected


@pytest.mark.parametrize("isolation", ["snapshot", "serializable"])
def test_write_skew_handed_to_the_holder_follows_the_isolation_level(
    tmp_path: Path, isolation: str
) -> None:
    uri = str(tmp_path / "cat")
    cat = _catalog(uri)
    base = cat.version
    one = olympia.load_catalog(uri).begin(isolation)
    one.describe_table("w0", "t")
    one.update_table("w1", "t", metadata_location="s3://data/w1/one.json")
    two = olympia.load_catalog(uri).begin(isolation)
    two.describe_table("w1", "t")
    two.update_table("w0", "t", metadata_location="s3://data/w0/two.json")
    threads = _commit_while_held(cat, [one, two])
    outcomes = [t.outcome for t in threads]
    if isolation == "snapshot":
        assert sorted(outcomes) == [base + 1, base + 2]
        # The holder refuses a request that read what a version since its base
        # wrote (§3.2); its writer rebases, which SNAPSHOT allows, and then
        # publishes it itself or leaves a new request on the newer base.
        assert sum(t.txn.published_by_holder for t in threads) <= 1
        by_id = {info.transaction_id: info for info in cat.history(since=base + 1)}
        assert set(by_id) == {one.id, two.id}
    else:
        assert sum(isinstance(o, int) for o in outcomes) == 1
        errors = [o for o in outcomes if isinstance(o, olympia.CommitConflictError)]
        assert [e.rule for e in errors] == ["serializable-cycle"]
        assert cat.version == base + 1


def test_a_serializable_read_only_transaction_is_published_by_the_holder(tmp_path: Path) -> None:
    uri = str(tmp_path / "cat")
    cat = _catalog(uri)
    base = cat.version
    reader = olympia.load_catalog(uri).begin("serializable")
    assert reader.describe_table("w0", "t").metadata_location == "s3://data/w0/v0.json"
    writer = olympia.load_catalog(uri).begin("serializable")
    writer.update_table("w1", "t", metadata_location="s3://data/w1/v1.json")
    threads = _commit_while_held(cat, [reader, writer])
    assert [t.outcome for t in threads] == [base + 1, base + 1]
    (info,) = cat.history(since=base + 1)
    reads = {r.transaction_id: r for r in info.transactions}
    assert [a.type for a in reads[reader.id].actions] == [apb.TABLE_DESCRIBE]
    assert reads[reader.id].isolation == "serializable"


def test_a_claimed_request_never_answered_is_published_by_its_writer_once(tmp_path: Path) -> None:
    """The holder died between claiming a request and publishing it."""
    uri = str(tmp_path / "cat")
    cat = _catalog(uri)
    base = cat.version
    txn = olympia.load_catalog(uri).begin()
    txn.update_table("w0", "t", metadata_location="s3://data/w0/v1.json")
    claimed: list[str] = []

    def claim_and_die() -> None:
        claimed.extend(i for i, _ in group.Holder(_folder(cat)).claim(""))

    threads = _commit_while_held(cat, [txn], before_release=claim_and_die)
    assert claimed == [txn.id]
    assert threads[0].outcome == base + 1
    assert not txn.published_by_holder
    assert _versions_of(cat, base + 1) == {txn.id: 1}


def test_a_request_published_but_not_answered_is_found_by_its_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The holder died after publishing a request and before answering it: its
    writer finds its own id in the versions and publishes nothing again."""
    uri = str(tmp_path / "cat")
    cat = _catalog(uri)
    base = cat.version
    monkeypatch.setattr(group.Holder, "publish", lambda self, *answer: None)
    txns = _updaters(uri, 2)
    threads = _commit_while_held(cat, txns)
    assert [t.outcome for t in threads] == [base + 1, base + 1]
    assert sum(t.txn.published_by_holder for t in threads) == 1
    assert _versions_of(cat, base + 1) == {txns[0].id: 1, txns[1].id: 1}
    assert cat.version == base + 1


def test_an_unreadable_request_is_refused(tmp_path: Path) -> None:
    uri = str(tmp_path / "cat")
    cat = _catalog(uri)
    folder = _folder(cat)
    os.makedirs(folder, exist_ok=True)
    Path(folder, "garbage.req").write_bytes(b"not a request")
    Path(folder, "other.req").write_bytes(b'{"id": "someone-else", "begin": 0}\n')
    # Well formed, but of an earlier build (no request format "v").
    old = group.encode(group.Request("old-build", 0, 0, "snapshot", ()))
    Path(folder, "old-build.req").write_bytes(old.replace(b'"v":2,', b""))
    with cat.begin() as txn:  # the lock is free: this writer holds it and looks
        txn.update_table("w0", "t", metadata_location="s3://data/w0/v1.json")
    # Not known to be requests of this catalog: plain refusals, although the
    # holder's put won (a version named would be taken as the writer's own).
    for name in ("garbage", "other", "old-build"):
        assert Path(folder, f"{name}.out").read_text() == "refused"
    assert not _requests(folder)


def test_a_request_on_a_base_too_old_is_refused_and_its_writer_rebases(tmp_path: Path) -> None:
    uri = str(tmp_path / "cat")
    cat = _catalog(uri)
    stale = olympia.load_catalog(uri).begin()
    stale.update_table("w0", "t", metadata_location="s3://data/w0/stale.json")
    base = cat.version
    for i in range(70):  # more than the holder examines for a request
        with cat.begin() as txn:
            txn.update_table("w1", "t", metadata_location=f"s3://data/w1/v{i}.json")
    fresh = olympia.load_catalog(uri).begin()
    fresh.update_table("w1", "t", metadata_location="s3://data/w1/fresh.json")
    threads = _commit_while_held(cat, [stale, fresh])
    outcomes = sorted(t.outcome for t in threads)
    # Nothing conflicted. If the fresh one held the lock first, the stale
    # request was refused by it, and its writer rebased and published it
    # (itself, or through a new request on the newer base, in the holder's
    # next version); if the stale one held it, it published the fresh one
    # in its own version.
    assert outcomes in ([base + 71, base + 72], [base + 71, base + 71])
    assert stale.status == "committed"
    assert cat.latest().describe_table("w0", "t").metadata_location == "s3://data/w0/stale.json"


def test_distributed_transactions_leave_no_request(tmp_path: Path) -> None:
    uri = str(tmp_path / "cat")
    cat = _catalog(uri)
    folder = _folder(cat)
    txn = olympia.load_catalog(uri).begin()
    txn.update_table("w0", "t", metadata_location="s3://data/w0/v1.json")
    txn.distribute()
    (committer,) = _commit_leaving_no_request(cat, [txn], lambda: not _requests(folder))
    assert isinstance(committer.outcome, int)
    assert not txn.published_by_holder
    assert cat.latest().describe_table("w0", "t").metadata_location == "s3://data/w0/v1.json"


def test_writers_of_a_format_1_catalog_leave_no_request_and_both_commit(tmp_path: Path) -> None:
    uri = str(tmp_path / "cat")
    cat = _catalog(uri, format_version=1)
    base = cat.version
    folder = _folder(cat)
    threads = _commit_leaving_no_request(cat, _updaters(uri, 2), lambda: not _requests(folder))
    assert sorted(t.outcome for t in threads) == [base + 1, base + 2]
    assert not any(t.txn.published_by_holder for t in threads)


def test_s3_writers_of_one_host_are_published_by_the_holder(s3_location: Any) -> None:
    uri, options = s3_location
    cat = _catalog(uri, tables=3, options=options)
    base = cat.version
    txns = _updaters(uri, 3, options)
    threads = _commit_while_held(cat, txns)
    assert [t.outcome for t in threads] == [base + 1] * 3
    assert sum(t.txn.published_by_holder for t in threads) == 2
    assert _versions_of(olympia.load_catalog(uri, options), base + 1) == {t.id: 1 for t in txns}


def _writer(uri: str, w: int, seconds: float, start: Any, out: Any) -> None:
    cat = olympia.load_catalog(uri)
    failures: Counter[str] = Counter()
    commits = by_holder = 0
    start.wait()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        txn = cat.begin()
        try:
            txn.update_table(f"w{w}", "t", metadata_location=f"s3://data/w{w}/v{commits + 1}.json")
            txn.commit()
        except olympia.OlympiaError as exc:
            failures[type(exc).__name__ + ":" + str(getattr(exc, "rule", ""))] += 1
            continue
        commits += 1
        by_holder += txn.published_by_holder
    cat.close()
    out.put((w, commits, by_holder, dict(failures)))


def test_writers_in_several_processes_share_turns_and_lose_nothing(tmp_path: Path) -> None:
    procs, seconds = 4, 2.0
    uri = str(tmp_path / "cat")
    cat = _catalog(uri, tables=procs)
    base = cat.version
    ctx = mp.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    workers = [
        ctx.Process(target=_writer, args=(uri, w, seconds, start, out)) for w in range(procs)
    ]
    for p in workers:
        p.start()
    start.set()
    results = sorted(out.get(timeout=300) for _ in workers)
    for p in workers:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert [r[3] for r in results] == [{}] * procs
    counts = [r[1] for r in results]
    assert min(counts) >= 1
    # Some commits were published by another process: the group commit ran.
    assert sum(r[2] for r in results) > 0
    latest = olympia.load_catalog(uri)
    # Versions holding several transactions: fewer versions than commits.
    assert latest.version < base + sum(counts)
    view = latest.latest()
    for w, commits, _, _ in results:
        assert (
            view.describe_table(f"w{w}", "t").metadata_location == f"s3://data/w{w}/v{commits}.json"
        )
    # Each transaction holds one update of its writer's table, and each is
    # in exactly one version.
    updated: Counter[str] = Counter()
    ids: Counter[str] = Counter()
    for info in latest.history(since=base + 1):
        for r in info.transactions:
            writes = [a for a in r.actions if a.type == apb.TABLE_UPDATE]
            assert len(writes) == 1
            updated[writes[0].table.namespace] += 1
            ids[r.transaction_id] += 1
    assert updated == {f"w{w}": commits for w, commits, _, _ in results}
    assert set(ids.values()) == {1}
    assert sum(ids.values()) == sum(counts)
    # Every file is sound, and the chains left nothing behind.
    check = latest.fsck()
    assert (check.missing, check.damaged, check.orphans) == ((), (), ())
    assert _requests(_folder(latest)) == set()
    assert not os.path.exists(_folder(latest)) or os.listdir(_folder(latest)) == []


def test_a_dead_writer_request_is_removed_by_the_next_holder(tmp_path: Path) -> None:
    uri = str(tmp_path / "cat")
    cat = _catalog(uri)
    folder = _folder(cat)
    os.makedirs(folder, exist_ok=True)
    old = Path(folder, "dead.req")
    old.write_bytes(b"x")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    with cat.begin() as txn:
        txn.update_table("w0", "t", metadata_location="s3://data/w0/v1.json")
    # The holder looked (a request was there) and removed the stale one unanswered.
    assert not old.exists()
    assert not Path(folder, "dead.out").exists()


def test_a_chain_put_with_an_unknown_outcome_is_left_to_its_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The put of the version holding the holder's transaction and a request
    fails and reading it back fails too: the holder reports an unknown
    outcome, leaves the request unanswered, and its writer, once it holds the
    lock, finds its id in no version and publishes it itself, once."""
    from olympia import layout
    from olympia.errors import StorageError
    from olympia.storage.local import LocalStorage

    uri = str(tmp_path / "cat")
    cat = _catalog(uri)
    base = cat.version
    doomed = layout.root_path(base + 1)
    failures: list[str] = []
    put_staged, read = LocalStorage.put_staged, LocalStorage.read

    def failing_put(self: LocalStorage, path: str, staged: Any, placed: Any = None) -> None:
        if path == doomed and not failures:
            failures.append(path)
            staged.discard()
            raise StorageError(f"injected: the put of {path} timed out")
        put_staged(self, path, staged, placed)

    def failing_read(self: LocalStorage, path: str) -> bytes:
        if path == doomed and len(failures) == 1:
            failures.append("read back")
            raise StorageError(f"injected: cannot read {path}")
        return read(self, path)

    monkeypatch.setattr(LocalStorage, "put_staged", failing_put)
    monkeypatch.setattr(LocalStorage, "read", failing_read)
    txns = _updaters(uri, 2)
    threads = _commit_while_held(cat, txns)
    assert failures == [doomed, "read back"]
    failed = [t for t in threads if isinstance(t.outcome, olympia.CommitFailedError)]
    (holder,) = failed
    assert "unknown" in str(holder.outcome)
    (member,) = (t for t in threads if t is not holder)
    assert member.outcome == base + 1 and not member.txn.published_by_holder
    assert _versions_of(cat, base + 1) == {member.txn.id: 1}
    assert not _requests(_folder(cat))


def test_a_version_begin_never_hides_what_a_member_read(tmp_path: Path) -> None:
    """A version of several transactions records the smallest begin version
    of its transactions (format.md §3.2). A request whose reads saw a version
    above that begin must not join it: the checks of later committers would
    take what it saw for a write after its snapshot, turning the dependency
    around, and miss a cycle (spec/transactions.md §3.2, item 2)."""
    uri = str(tmp_path / "cat")
    cat = _catalog(uri, tables=4)
    base = cat.version
    # ``old`` and ``late`` begin before ``s`` writes w2.
    old = olympia.load_catalog(uri).begin("snapshot")
    old.update_table("w0", "t", metadata_location="s3://data/w0/old.json")
    late = olympia.load_catalog(uri).begin("serializable")
    late.describe_table("w2", "t")
    late.update_table("w3", "t", metadata_location="s3://data/w3/late.json")
    with cat.begin() as s:
        s.update_table("w2", "t", metadata_location="s3://data/w2/s.json")
    # ``reader`` saw s's write of w2, and read w3, which ``late`` writes.
    reader = olympia.load_catalog(uri).begin("serializable")
    assert reader.describe_table("w2", "t").metadata_location == "s3://data/w2/s.json"
    reader.describe_table("w3", "t")
    reader.update_table("w1", "t", metadata_location="s3://data/w1/reader.json")
    threads = _commit_while_held(cat, [old, reader])
    assert all(isinstance(t.outcome, int) for t in threads)
    # Whichever held the lock, the two could not share a version: old's
    # begin (base) is below s (base + 1), which reader's reads saw.
    assert sorted(t.outcome for t in threads) == [base + 2, base + 3]
    infos = cat.history(since=base + 2)
    assert [len(i.transactions) for i in infos] == [1, 1]
    # The real dependencies: late -> s (late did not see s's write of w2),
    # s -> reader (reader saw it), reader -> late (late's write of w3 came
    # after reader's snapshot): a cycle, which the check of late finds.
    with pytest.raises(olympia.CommitConflictError) as caught:
        late.commit()
    assert caught.value.rule == "serializable-cycle"


def test_the_request_folder_is_private_and_belongs_to_one_catalog(tmp_path: Path) -> None:
    one = _catalog(str(tmp_path / "one"))
    two = _catalog(str(tmp_path / "two"))
    os.symlink(tmp_path / "one", tmp_path / "link")
    same = olympia.load_catalog(str(tmp_path / "link"))
    assert _folder(same) == _folder(one) != _folder(two)
    # Off the catalog's disk (a memory file system where the host has one),
    # in a folder only this user can enter.
    if os.path.isdir("/dev/shm"):
        assert _folder(one).startswith("/dev/shm/")
    top = os.stat(os.path.dirname(_folder(one)))
    assert top.st_uid == os.getuid() and top.st_mode & 0o777 == 0o700
    # Writers reaching the catalog by another path still share a turn.
    txns = [_updaters(str(tmp_path / "one"), 1)[0], _updaters(str(tmp_path / "link"), 2)[1]]
    base = one.version
    threads = _commit_while_held(one, txns)
    assert [t.outcome for t in threads] == [base + 1, base + 1]


def test_no_group_commit_in_a_folder_another_user_could_enter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from olympia.storage import hostlock

    monkeypatch.setattr(hostlock, "_SHARED_MEMORY", str(tmp_path / "shm"))
    planted = tmp_path / "shm" / f"olympia-groups-{os.getuid()}"
    planted.mkdir(parents=True)
    planted.chmod(0o777)
    cat = _catalog(str(tmp_path / "cat"))
    assert cat.store.storage.group_dir() is None
    base = cat.version
    txns = _updaters(str(tmp_path / "cat"), 2)
    threads = _commit_leaving_no_request(cat, txns, lambda: list(planted.iterdir()) == [])
    assert sorted(t.outcome for t in threads) == [base + 1, base + 2]
    assert not any(t.txn.published_by_holder for t in threads)


def test_a_request_of_another_catalog_is_refused(tmp_path: Path) -> None:
    """A request folder can outlive its catalog, and a new catalog whose
    folders reuse the inode numbers finds it: the holder admits a request
    only when the root of its base version is the one its writer saw."""
    uri = str(tmp_path / "cat")
    cat = _catalog(uri)
    base = cat.version
    other = _catalog(str(tmp_path / "other"))
    stranger = other.begin()
    stranger.update_table("w0", "t", metadata_location="s3://data/w0/stranger.json")
    seen = other.store.load_root(other.version).info.transaction_id
    request = group.Request(
        stranger.id, other.version, other.version, "snapshot", tuple(stranger.actions), seen
    )
    folder = _folder(cat)
    os.makedirs(folder, exist_ok=True)
    Path(folder, f"{stranger.id}.req").write_bytes(group.encode(request))
    # The same request naming this catalog's base root would be admitted.
    mine = cat.store.load_root(base).info.transaction_id
    twin = olympia.load_catalog(uri).begin()
    twin.update_table("w1", "t", metadata_location="s3://data/w1/twin.json")
    Path(folder, f"{twin.id}.req").write_bytes(
        group.encode(group.Request(twin.id, base, base, "snapshot", tuple(twin.actions), mine))
    )
    with cat.begin() as txn:  # the lock is free: this writer holds it and looks
        txn.update_table("w0", "t", metadata_location="s3://data/w0/mine.json")
    assert Path(folder, f"{stranger.id}.out").read_text() == "refused"
    assert Path(folder, f"{twin.id}.out").read_text().startswith(f"committed {base + 1} ")
    view = cat.latest()
    assert view.describe_table("w0", "t").metadata_location == "s3://data/w0/mine.json"
    assert view.describe_table("w1", "t").metadata_location == "s3://data/w1/twin.json"
    assert _versions_of(cat, base + 1) == {txn.id: 1, twin.id: 1}


def test_a_transaction_too_large_for_a_request_publishes_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = str(tmp_path / "cat")
    cat = _catalog(uri)
    base = cat.version
    small = _updaters(uri, 1)[0]
    large = olympia.load_catalog(uri).begin()
    for i in range(40):
        large.create_table("w1", f"x{i}", f"s3://data/w1/x{i}.json")
    size = len(group.encode(group.Request(large.id, base, base, "snapshot", tuple(large.actions))))
    monkeypatch.setattr(group, "MAX_REQUEST_BYTES", size - 1)  # the small one still fits
    folder = _folder(cat)

    def only_the_small_one_asks() -> None:
        _wait_for(lambda: small.id in _requests(folder), "the small transaction's request")
        time.sleep(0.3)  # long enough for the large one's request, if it left one
        assert _requests(folder) == {small.id}

    threads = _commit_holding_the_lock(cat, [small, large], only_the_small_one_asks)
    assert not large.published_by_holder
    assert sorted(t.outcome for t in threads) in ([base + 1, base + 1], [base + 1, base + 2])
    assert _versions_of(cat, base + 1) == {small.id: 1, large.id: 1}
    assert len(cat.latest().list_tables("w1")) == 41


def test_waiting_writers_are_woken_by_the_ring_and_the_answer_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No waiter polls or falls back to a thread blocked in flock (spec §3.1
    item 2): the holder that lets the lock go rings them, the one that takes
    it publishes the other's request and its answer wakes that one."""
    monkeypatch.setattr(hostlock, "RING_FALLBACK_SECONDS", 3600.0)
    monkeypatch.setattr(LocalStorage, "publish_lock_wait", 3600.0)
    started: list[str] = []
    real_start = hostlock._Wait._start_thread

    def start_thread(self: Any) -> None:
        started.append(threading.current_thread().name)
        real_start(self)

    monkeypatch.setattr(hostlock._Wait, "_start_thread", start_thread)
    uri = str(tmp_path / "cat")
    cat = _catalog(uri)
    base = cat.version
    txns = _updaters(uri, 2)
    folder = _folder(cat)
    lock = _hold(cat)
    threads = [_Committer(t) for t in txns]
    for t in threads:
        t.start()
    _wait_for(lambda: {t.id for t in txns} <= _requests(folder), "both requests")
    commit_module._releaser(lock, folder)()  # let go, then ring the waiters
    for t in threads:
        t.join(timeout=60)
        assert not t.is_alive(), "a waiter was never woken"
    assert [t.outcome for t in threads] == [base + 1, base + 1]
    assert sum(t.txn.published_by_holder for t in threads) == 1
    assert started == []


def test_requests_of_a_hot_object_are_refused_one_at_a_time_after_the_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writers that all updated one table: the holder publishes its own, and
    refuses the others only once that version is out, the oldest first and
    the rest when its turn ends (held back, spec §3.2 item 4), so that they
    do not all begin again at once; each reports write-write, nothing lost."""
    events: list[str] = []
    texts: list[str] = []
    real_answer = group.Holder._answer
    real_chain = CatalogStore.publish_chain

    def answer(self: group.Holder, txn_id: str, text: str) -> None:
        events.append(f"{text.split()[0]} {txn_id}")
        texts.append(text)
        real_answer(self, txn_id, text)

    def chain(
        self: CatalogStore, base: Any, links: Any, placed: Any = None, encoded: Any = None
    ) -> Any:
        def in_place(won: bool) -> None:  # may be called more than once
            if not any(e.startswith("in place") for e in events):
                events.append(f"in place {won}")
            if placed is not None:
                placed(won)

        outcome = real_chain(self, base, links, in_place, encoded)
        events.append(f"published {len(outcome.published)}")
        return outcome

    monkeypatch.setattr(group.Holder, "_answer", answer)
    monkeypatch.setattr(CatalogStore, "publish_chain", chain)
    uri = str(tmp_path / "cat")
    cat = _catalog(uri)
    base = cat.version
    txns = _hot_updaters([olympia.load_catalog(uri) for _ in range(4)])
    threads = _commit_while_held(cat, txns)
    won = [t for t in threads if isinstance(t.outcome, int)]
    lost = [t for t in threads if isinstance(t.outcome, olympia.CommitConflictError)]
    assert len(won) == 1 and len(lost) == 3
    assert won[0].outcome == base + 1 and not won[0].txn.published_by_holder
    assert {t.outcome.rule for t in lost} == {"write-write"}
    assert cat.version == base + 1
    assert cat.latest().describe_table("w0", "t").metadata_location == (
        f"s3://data/w0/writer{threads.index(won[0])}.json"
    )
    # The holder's version went out first; every refusal came after it, the
    # first one as soon as the root was in place, before publishing ended
    # (the folder's fsync), the others one by one after it.
    assert events[0] == "in place True"
    assert events[1].startswith("refused") and events[2] == "published 1"
    refusals = [e for e in events if e.startswith("refused")]
    assert len(refusals) == 3 and events[3:] == refusals[1:]
    assert sorted(e.split()[1] for e in refusals) == sorted(t.txn.id for t in lost)
    # Every refusal names the version in place, the storage having said the
    # holder's put won, and the verdict: that version wrote the table each
    # writer changes (spec §3.2 item 4, verdicts).
    key = key_codec(cat.store.load_latest().definition).table("w0", "t").encode().hex()
    assert texts == [f"refused {base + 1} conflict {base + 1} write-write {key}"] * 3
    assert {(t.outcome.version, t.outcome.rule) for t in lost} == {(base + 1, "write-write")}


@pytest.mark.parametrize("verdicts", [True, False])
def test_a_refused_writer_decodes_the_root_it_was_previewed_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, verdicts: bool
) -> None:
    """Writers that all updated one table: each refused writer decodes the
    new version's root once, from the preview, read while the holder made
    the put durable or once answered: every refusal names that version, so
    the preview is its root and the rebase reads no root file (spec §3.2
    item 4); the holder decodes none. Without verdicts (as for a writer
    with a content-merge hook) every refused writer rebases, on that
    decode."""
    from olympia import store as store_module

    if not verdicts:
        monkeypatch.setattr(commit_module.Commit, "_take_verdict", lambda self, verdict: None)

    uri = str(tmp_path / "cat")
    cat = _catalog(uri)
    base = cat.version
    new_root = layout.root_path(base + 1)
    decodes: Counter[str] = Counter()
    real_decode = store_module.decode_node

    def decode(data: bytes, path: str) -> Any:
        if path == new_root:
            decodes[threading.current_thread().name] += 1
        return real_decode(data, path)

    monkeypatch.setattr(store_module, "decode_node", decode)
    txns = _hot_updaters([olympia.load_catalog(uri) for _ in range(4)])
    threads = _commit_while_held(cat, txns)
    lost = [t for t in threads if isinstance(t.outcome, olympia.CommitConflictError)]
    won = [t for t in threads if isinstance(t.outcome, int)]
    assert len(won) == 1 and len(lost) == 3
    assert decodes[won[0].name] == 0
    if verdicts:
        # At most once: a refused writer that came with a verdict does not
        # rebase, and decodes the root only if it read the preview.
        assert {decodes[t.name] for t in lost} <= {0, 1}
    else:
        assert {decodes[t.name] for t in lost} == {1}
    # A preview is checked as the root of the version it claims to be.
    fresh = olympia.load_catalog(uri)
    other = cat.store.storage.read(layout.root_path(base))
    with pytest.raises(olympia.CorruptCatalogError):
        fresh.store.decode_root_apart(base + 1, other)


def test_requests_of_a_version_that_lost_its_race_go_back_to_the_next_holder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer elsewhere takes the version the holder was putting: the
    requests it claimed for that version are given back unanswered (never
    refused: nothing conflicted), and the next holder publishes them; every
    transaction is in exactly one version."""
    uri = str(tmp_path / "cat")
    cat = _catalog(uri, tables=3)
    base = cat.version
    elsewhere = olympia.load_catalog(uri)
    taken: list[str] = []
    events: list[str] = []
    put_staged = LocalStorage.put_staged
    give_back, refuse = group.Holder.give_back, group.Holder.refuse

    def racing_put(self: LocalStorage, path: str, staged: Any, placed: Any = None) -> None:
        if path.startswith("vn/") and not taken:
            taken.append(path)
            # Another host's writer wins this version first (this thread
            # holds the publish lock, so that commit does not wait for it).
            with elsewhere.begin() as txn:
                txn.update_table("w2", "t", metadata_location="s3://data/w2/elsewhere.json")
        put_staged(self, path, staged, placed)

    def recording_give_back(self: group.Holder, txn_id: str) -> None:
        events.append(f"given back {txn_id}")
        give_back(self, txn_id)

    def recording_refuse(self: group.Holder, txn_id: str) -> None:
        events.append(f"refused {txn_id}")
        refuse(self, txn_id)

    monkeypatch.setattr(LocalStorage, "put_staged", racing_put)
    monkeypatch.setattr(group.Holder, "give_back", recording_give_back)
    monkeypatch.setattr(group.Holder, "refuse", recording_refuse)
    txns = _updaters(uri, 2)
    threads = _commit_while_held(cat, txns)
    assert len(taken) == 1
    assert all(isinstance(t.outcome, int) and t.outcome > base + 1 for t in threads)
    (given,) = [e.split()[-1] for e in events if e.startswith("given back")]
    assert given in {t.id for t in txns}
    assert not [e for e in events if e.startswith("refused")]
    assert _versions_of(cat, base + 1) == {
        txns[0].id: 1,
        txns[1].id: 1,
        elsewhere.history(since=base + 1)[0].transactions[0].transaction_id: 1,
    }
    latest = cat.latest()
    assert latest.describe_table("w0", "t").metadata_location == "s3://data/w0/v1.json"
    assert latest.describe_table("w1", "t").metadata_location == "s3://data/w1/v1.json"
    assert latest.describe_table("w2", "t").metadata_location == "s3://data/w2/elsewhere.json"
    assert not _requests(_folder(cat))


def test_a_claimed_request_goes_back_only_while_its_writer_waits(tmp_path: Path) -> None:
    """``give_back`` puts a claimed request back byte for byte, unanswered;
    once its writer withdrew it (it went on without the holder), it does not."""
    cat = _catalog(str(tmp_path / "cat"))
    folder = _folder(cat)
    request = group.Request("t1", 1, 1, "snapshot", (), "base-id")
    for withdrawn in (False, True):
        member = group.Member(folder, "t1")
        assert member.ask(request)
        holder = group.Holder(folder)
        ((txn_id, claimed),) = list(holder.claim("holder"))
        assert txn_id == "t1" and claimed == request and not _requests(folder)
        if withdrawn:
            member.withdraw()
        holder.give_back("t1")
        if withdrawn:
            assert not _requests(folder)
            assert not os.path.exists(os.path.join(folder, "t1.claimed"))
        else:
            assert _requests(folder) == {"t1"}
            assert Path(folder, "t1.req").read_bytes() == group.encode(request)
            assert member.pending and member.answer() is None
            member.withdraw()
        member.close()


def test_a_turn_with_nothing_held_back_ends_after_its_first_version(tmp_path: Path) -> None:
    """§3.2 item 4: further versions of a turn only pace the refusals of
    requests held back; with none, the holder leaves the waiting requests to
    the next holder (its own next transaction meets them there)."""
    uri = str(tmp_path / "cat")
    cat = _catalog(uri)
    folder = _folder(cat)
    store = cat.store
    last = store.load_root(cat.version)
    waiting = _updaters(uri, 1)[0]
    member = _ask(folder, waiting, last)
    leader = commit_module._Leader(store, key_codec(last.definition), "holder", lambda: iter(()))
    holder = group.Holder(folder)
    leader.lead(holder, last, commit_module._GROUP_ROUNDS - 1)
    assert _requests(folder) == {waiting.id} and cat.version == last.version
    # With one held back (its refusal to pace), the next round publishes it.
    leader.held_back.append(commit_module._HeldBack("someone-refused", None))
    leader.lead(holder, last, commit_module._GROUP_ROUNDS - 1)
    leader.refuse_all(holder)
    assert member.answer() == last.version + 1
    assert _versions_of(cat, last.version + 1) == {waiting.id: 1}
    member.close()


@pytest.mark.parametrize("table", ["w0", "w1"])
def test_a_request_held_back_waits_while_a_writer_answered_writes_what_it_depends_on(
    tmp_path: Path, table: str
) -> None:
    """§3.2 item 4: after a version holding a request that wrote what the
    oldest request held back depends on, that one is not refused: the
    request's writer, answered, begins again on that version and on a hot
    object would collide with it. It is refused when the turn ends. After a
    version whose requests wrote nothing it depends on, it is refused at
    once, as after the holder's own version (its refusal carries its
    verdict either way)."""
    uri = str(tmp_path / "cat")
    cat = _catalog(uri)
    folder = _folder(cat)
    store = cat.store
    last = store.load_root(cat.version)
    keys = key_codec(last.definition)
    # The writer of ``table`` leaves a request; ``held``, whose request was
    # claimed before, updated w0.t and waits, held back with a verdict.
    waiting = _updaters(uri, 2)[int(table[1])]
    member = _ask(folder, waiting, last)
    held = group.Member(folder, "held")
    w0 = keys.table("w0", "t")
    verdict = group.Verdict(last.version, "write-write", w0)
    leader = commit_module._Leader(store, keys, "holder", lambda: iter(()))
    leader.held_back.append(commit_module._HeldBack("held", verdict, (frozenset({w0}), ())))
    holder = group.Holder(folder)
    outcome, links = leader.lead_round(holder, last)
    assert links == 1 and [r.version for r in outcome.published] == [last.version + 1]
    assert member.answer() == last.version + 1
    refused_at_once = Path(folder, "held.out").exists()
    assert refused_at_once == (table == "w1")
    assert [h.txn_id for h in leader.held_back] == ([] if table == "w1" else ["held"])
    leader.refuse_all(holder)
    assert held.answer() is None and held.verdict == verdict
    assert held.latest == last.version + 1  # the version in place
    member.close()
    held.close()


def test_a_preview_wakes_the_writers_named_and_refusals_name_the_version_in_place(
    tmp_path: Path,
) -> None:
    """The protocol of previews (spec §3.2 item 4): the holder leaves the
    root it is putting and rings the writers it names; a writer reads each
    preview once; a refusal names the version the holder put in place."""
    folder = str(tmp_path / "requests")
    early, late = group.Member(folder, "early"), group.Member(folder, "late")
    assert early.ask(group.Request("early", 3, 3, "snapshot", ()))
    holder = group.Holder(folder)
    assert [txn_id for txn_id, _ in holder.claim("holder")] == ["early"]
    holder.refuse("early")  # nothing placed yet: a plain refusal
    assert early.answer() is None and not early.pending and early.latest == -1
    assert late.ask(group.Request("late", 3, 3, "snapshot", ()))
    assert [txn_id for txn_id, _ in holder.claim("holder")] == ["late"]
    wake = late.wake_fd()
    assert wake is not None
    hostlock.drain(wake)
    root = b"4\nroot bytes\nwith newlines"
    holder.preview(4, root, ["late"])
    assert hostlock.sleep_on([wake], 10.0) == [wake]
    assert late.preview() == (4, root)
    assert late.preview() is None  # read once
    assert late.answer() is None and late.pending  # not answered yet
    holder.placed = 4
    holder.refuse("late")
    assert late.answer() is None and not late.pending and late.latest == 4
    assert late.preview() is None
    holder.preview(5, b"next", [])
    assert late.preview() == (5, b"next")
    holder.preview(6, b"x" * (group.MAX_REQUEST_BYTES + 1), [])  # too large: none
    assert late.preview() is None
    holder.tidy()
    assert not os.path.exists(os.path.join(folder, "root.preview"))


def _counting_root_reads(cat: olympia.Catalog, version: int) -> list[int]:
    """A counter (one element) of the reads of the root file of ``version``
    from storage by ``cat`` that found it."""
    count = [0]
    storage = cat.store.storage
    real = storage.read

    def read(path: str) -> bytes:
        data = real(path)  # a probe before the version exists raises
        if path == layout.root_path(version):
            count[0] += 1
        return data

    storage.read = read  # type: ignore[method-assign]
    return count


def test_writers_published_by_the_holder_take_the_new_root_from_its_preview(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writers the holder published take the new version's root from its
    preview: none reads that root file, and each sees the whole version."""
    uri = str(tmp_path / "cat")
    cat = _catalog(uri, tables=3)
    base = cat.version
    handles = [olympia.load_catalog(uri) for _ in range(3)]
    reads = [_counting_root_reads(h, base + 1) for h in handles]
    settled: list[str] = []
    real_settle = commit_module.Commit._settle_answer

    def settle(self: commit_module.Commit) -> None:
        try:
            real_settle(self)
        finally:
            assert self.member is not None
            if not self.member.pending:
                settled.append(self.id)

    real_tidy = group.Holder.tidy

    def tidy(self: group.Holder) -> None:
        # The preview stays until both writers read their answers (the
        # writers' threads are slower than the holder's now and then).
        _wait_for(lambda: len(settled) >= 2, "both answers read")
        real_tidy(self)

    monkeypatch.setattr(commit_module.Commit, "_settle_answer", settle)
    monkeypatch.setattr(group.Holder, "tidy", tidy)
    txns = _update_each(handles)
    threads = _commit_while_held(cat, txns)
    assert [t.outcome for t in threads] == [base + 1] * 3
    assert sum(t.txn.published_by_holder for t in threads) == 2
    for h, count in zip(handles, reads, strict=True):
        _assert_sees_every_update(h, base + 1, 3)
        assert set(h.store.load_root(base + 1).info.transaction_ids) == {t.id for t in txns}
        assert count == [0]
    assert not os.path.exists(_folder(cat))


@pytest.mark.parametrize("kind", ["garbage", "another version's root"])
def test_a_preview_that_is_not_the_version_root_is_never_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """A preview whose bytes are not the root the holder put (damaged, or
    the root of another version under the new version's number) is dropped:
    the writers it named read the root file and see what it holds."""
    uri = str(tmp_path / "cat")
    cat = _catalog(uri, tables=3)
    base = cat.version
    old_root = cat.store.storage.read(layout.root_path(base))
    real_preview = group.Holder.preview

    def preview(self: group.Holder, version: int, root: bytes, txn_ids: Any) -> None:
        real_preview(self, version, b"\x00garbage" if kind == "garbage" else old_root, txn_ids)

    monkeypatch.setattr(group.Holder, "preview", preview)
    handles = [olympia.load_catalog(uri) for _ in range(3)]
    reads = [_counting_root_reads(h, base + 1) for h in handles]
    txns = _update_each(handles)
    threads = _commit_while_held(cat, txns)
    assert [t.outcome for t in threads] == [base + 1] * 3
    for t, h, count in zip(threads, handles, reads, strict=True):
        _assert_sees_every_update(h, base + 1, 3)
        # The holder cached the root it put; the others read it from storage.
        assert count == [1 if t.txn.published_by_holder else 0]


def test_refused_writers_never_take_a_preview_of_a_version_that_lost_its_race(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writers updating one table while a writer elsewhere takes the version
    the holder was putting: the refusal sent as the put ends names no
    version the holder did not put, so no refused writer takes the holder's
    preview for that version's root; each sees the winner's root."""
    uri = str(tmp_path / "cat")
    cat = _catalog(uri)
    base = cat.version
    elsewhere = olympia.load_catalog(uri)
    taken: list[str] = []
    texts: list[str] = []
    put_staged = LocalStorage.put_staged
    real_answer = group.Holder._answer

    def racing_put(self: LocalStorage, path: str, staged: Any, placed: Any = None) -> None:
        if path.startswith("vn/") and not taken:
            taken.append(path)
            with elsewhere.begin() as txn:  # wins the version first
                txn.update_table("w0", "t", metadata_location="s3://data/w0/elsewhere.json")
        put_staged(self, path, staged, placed)

    def answer(self: group.Holder, txn_id: str, text: str) -> None:
        texts.append(text)
        real_answer(self, txn_id, text)

    monkeypatch.setattr(LocalStorage, "put_staged", racing_put)
    monkeypatch.setattr(group.Holder, "_answer", answer)
    handles = [olympia.load_catalog(uri) for _ in range(3)]
    txns = _hot_updaters(handles)
    threads = _commit_while_held(cat, txns)
    assert len(taken) == 1
    assert all(isinstance(t.outcome, olympia.CommitConflictError) for t in threads)
    assert texts and all(t.startswith("refused") for t in texts)
    assert f"refused {base + 1}" not in texts
    winner = elsewhere.history(since=base + 1)[0].transactions[0].transaction_id
    for h in handles:
        assert tuple(h.store.load_root(base + 1).info.transaction_ids) == (winner,)
        assert h.latest().describe_table("w0", "t").metadata_location == (
            "s3://data/w0/elsewhere.json"
        )


def test_files_planted_in_the_folder_never_block_or_lead_a_writer_elsewhere(
    tmp_path: Path,
) -> None:
    """The folder's small files are read without blocking and without
    following a link: a FIFO planted where an answer or a preview goes reads
    as no answer and no preview at once (a plain ``open`` would wait for a
    writer forever), and a symbolic link there is not followed, however
    well-formed the file it names."""
    folder = str(tmp_path / "g")
    os.makedirs(folder, mode=0o700)
    member = group.Member(folder, "a" * 32)
    os.mkfifo(os.path.join(folder, "a" * 32 + ".out"))
    os.mkfifo(os.path.join(folder, "root.preview"))
    got: list[Any] = []
    reader = threading.Thread(
        target=lambda: got.extend([member.answer(), member.preview()]), daemon=True
    )
    reader.start()
    reader.join(10)
    assert not reader.is_alive() and got == [None, None]
    assert member.latest == -1
    for name in ("a" * 32 + ".out", "root.preview"):
        os.unlink(os.path.join(folder, name))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "answer").write_bytes(b"committed 7 7 2")
    (elsewhere / "preview").write_bytes(b"7\nroot bytes")
    os.symlink(elsewhere / "answer", os.path.join(folder, "a" * 32 + ".out"))
    os.symlink(elsewhere / "preview", os.path.join(folder, "root.preview"))
    assert member.answer() is None and member.preview() is None
    # The same content as regular files of the folder is read.
    for name, target in (("a" * 32 + ".out", "answer"), ("root.preview", "preview")):
        os.unlink(os.path.join(folder, name))
        Path(folder, name).write_bytes((elsewhere / target).read_bytes())
    assert member.preview() == (7, b"root bytes")
    assert member.answer() == 7 and member.latest == 7


def test_a_holder_sweeps_stray_files_every_few_seconds_and_old_requests_always(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files left by writers that died: a request is removed by the first
    claim that sees it, other files (an answer never read, a FIFO) by the
    first claim of a holder of this process in a while, not by every claim
    (each one a stat per file)."""
    folder = str(tmp_path / "g")
    os.makedirs(folder, mode=0o700)
    old = time.time() - 2 * group.STALE_SECONDS

    def plant(name: str) -> Path:
        path = Path(folder, name)
        path.write_bytes(b"x")
        os.utime(path, (old, old))
        return path

    holder = group.Holder(folder)
    first = [plant("dead1.req"), plant("dead1.out")]
    assert list(holder.claim("me")) == []
    assert not any(p.exists() for p in first)
    second = [plant("dead2.req"), plant("dead2.out")]
    assert list(group.Holder(folder).claim("me")) == []
    assert [p.exists() for p in second] == [False, True]
    now = time.time()
    monkeypatch.setattr(group.time, "time", lambda: now + group._SWEEP_SECONDS + 1)
    assert list(group.Holder(folder).claim("me")) == []
    assert not second[1].exists()


def test_answers_and_requests_are_written_whole_and_leave_no_temporary_file(
    tmp_path: Path,
) -> None:
    folder = str(tmp_path / "g")
    os.makedirs(folder, mode=0o700)
    path = os.path.join(folder, "x.out")
    group._write_atomically(path, b"committed 3 3 2")
    group._write_atomically(path, b"refused")
    assert Path(path).read_bytes() == b"refused" and os.listdir(folder) == ["x.out"]
    os.mkdir(os.path.join(folder, "dir.out"))  # cannot be replaced by a file
    with pytest.raises(OSError):
        group._write_atomically(os.path.join(folder, "dir.out"), b"refused")
    assert sorted(os.listdir(folder)) == ["dir.out", "x.out"]


def test_a_writer_woken_for_another_reason_skips_a_preview_not_naming_it(
    tmp_path: Path,
) -> None:
    """A preview names the writers it is for (spec §3.2 item 4): a waiting
    writer woken by something else (the holder letting the lock go, say)
    does not read and decode a root it will not be told about, and can still
    read it once an answer names its version; a preview of a holder of an
    earlier build, naming nobody, is everyone's."""
    folder = str(tmp_path / "requests")
    named, other = group.Member(folder, "named"), group.Member(folder, "other")
    for member in (named, other):
        assert member.ask(group.Request(member.txn_id, 3, 3, "snapshot", ()))
    holder = group.Holder(folder)
    assert sorted(txn_id for txn_id, _ in holder.claim("holder")) == ["named", "other"]
    holder.preview(4, b"root four", ["named"])
    assert Path(folder, "root.preview").read_bytes() == b"4 named\nroot four"
    assert other.preview(named_only=True) is None
    assert named.preview(named_only=True) == (4, b"root four")
    assert other.preview() == (4, b"root four")  # its answer named version 4
    Path(folder, "root.preview").write_bytes(b"5\nroot five")  # an earlier build's
    assert other.preview(named_only=True) == (5, b"root five")
    # An id that cannot be named (a space, a line break, not ASCII) is left
    # out of the line rather than breaking it; its writer reads the preview
    # once answered.
    holder.preview(6, b"root six", ["named", "odd id", "line\nbreak", "caf\u00e9"])
    assert Path(folder, "root.preview").read_bytes() == b"6 named\nroot six"
    assert named.preview(named_only=True) == (6, b"root six")
    holder.refuse("named")
    holder.refuse("other")
    holder.tidy()


def test_refusals_carry_a_verdict_that_writers_read_only_when_well_formed(
    tmp_path: Path,
) -> None:
    """The words of a verdict (spec §3.2 item 4, verdicts): a holder adds one
    only about a version it placed and only for a request of its catalog;
    a writer reads one only when every word is what the spec allows."""
    folder = str(tmp_path / "requests")
    key = "w0 t"
    holder = group.Holder(folder)
    member = group.Member(folder, "writer")
    os.makedirs(folder, mode=0o700)

    def refused_with(text: str) -> group.Member:
        Path(folder, "writer.out").write_text(text)
        assert member.answer() is None and not member.pending
        return member

    verdict = group.Verdict(4, "write-write", key)
    holder.placed = 3
    assert holder._refusal(verdict) == "refused 3"  # about a version not placed
    holder.placed = 4
    hexed = key.encode().hex()
    assert holder._refusal(verdict) == f"refused 4 conflict 4 write-write {hexed}"
    rollback = group.Verdict(2, "catalog-rollback")
    assert holder._refusal(rollback) == "refused 4 conflict 2 catalog-rollback -"
    holder.refuse("writer", verdict, ours=False)  # not known to be of this catalog
    assert Path(folder, "writer.out").read_text() == "refused"
    holder.refuse("writer", verdict)
    assert member.answer() is None and member.verdict == verdict and member.latest == 4
    assert refused_with("refused 4 conflict 2 catalog-rollback -").verdict == rollback
    for bad in (
        f"refused 4 conflict 5 write-write {hexed}",  # above the version named
        f"refused 4 conflict 0 write-write {hexed}",
        f"refused 4 conflict 4 read-write {hexed}",  # not a rule a verdict names
        "refused 4 conflict 4 write-write -",  # write-write names a key
        f"refused 4 conflict 4 catalog-rollback {hexed}",  # a rollback names none
        "refused 4 conflict 4 write-write zz",  # not hexadecimal
        "refused 4 conflict 4 write-write ff",  # not UTF-8
        f"refused 4 verdict 4 write-write {hexed}",
        f"refused 4 conflict x4 write-write {hexed}",
    ):
        assert refused_with(bad).verdict is None, bad
        assert member.latest == 4
    assert refused_with(f"refused 4 conflict 4 write-write {hexed} more").verdict is None
    assert member.latest == -1  # not a refusal this build knows: nothing taken from it
    assert refused_with("refused 4").verdict is None and member.latest == 4


@pytest.mark.parametrize(
    ("forged", "fails"),
    [("its own key", True), ("another key", False), ("its base", False)],
)
def test_a_writer_takes_a_verdict_only_about_what_it_wrote_after_its_base(
    tmp_path: Path, forged: str, fails: bool
) -> None:
    """A refusal whose verdict names a version above the writer's base and a
    key the writer writes makes it fail as its rebase would, without reading
    the versions (trusted as far as a request is); any other verdict is
    ignored: the writer rebases on what was published and commits."""
    from olympia.definition import key_codec

    uri = str(tmp_path / "cat")
    cat = _catalog(uri, tables=3)
    base = cat.version
    keys = key_codec(cat.store.load_latest().definition)
    txn = olympia.load_catalog(uri).begin("snapshot")
    txn.update_table("w0", "t", metadata_location="s3://data/w0/mine.json")
    folder = _folder(cat)
    windows: list[str] = []
    real_window = commit_module.Commit._window

    def window(self: commit_module.Commit, checked: int, latest: int) -> Any:
        windows.append(threading.current_thread().name)
        return real_window(self, checked, latest)

    lock = _hold(cat)
    committer = _Committer(txn)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(commit_module.Commit, "_window", window)
            committer.start()
            _wait_for(lambda: txn.id in _requests(folder), "the writer's request")
            holder = group.Holder(folder)
            assert [t for t, _ in holder.claim("test")] == [txn.id]
            # A version the writer does not conflict with, published meanwhile
            # (this thread holds the lock, so it publishes without it).
            with olympia.load_catalog(uri).begin() as other:
                other.update_table("w2", "t", metadata_location="s3://data/w2/other.json")
            holder.placed = base + 1
            key = {"its own key": "w0", "another key": "w2", "its base": "w0"}[forged]
            version = base if forged == "its base" else base + 1
            holder.refuse(txn.id, group.Verdict(version, "write-write", keys.table(key, "t")))
            if fails:
                _wait_for(lambda: not committer.is_alive(), "the writer to fail")
    finally:
        lock.release()
    committer.join(timeout=60)
    assert not committer.is_alive()
    view = cat.latest()
    if fails:
        assert isinstance(committer.outcome, olympia.CommitConflictError)
        assert (committer.outcome.rule, committer.outcome.version) == ("write-write", base + 1)
        assert "w0" in str(committer.outcome)
        assert committer.name not in windows  # failed without reading the versions
        assert view.version == base + 1
    else:
        assert committer.outcome == base + 2
        assert view.describe_table("w0", "t").metadata_location == "s3://data/w0/mine.json"
    assert view.describe_table("w2", "t").metadata_location == "s3://data/w2/other.json"


@pytest.mark.parametrize("isolation", ["snapshot", "serializable"])
def test_writers_with_a_content_merge_hook_ignore_verdicts_and_all_commit(
    tmp_path: Path, isolation: str
) -> None:
    """Appends to one hot table by writers with a content-merge hook: the
    holder holds their requests back and refuses them with a write-write
    verdict, which the hook could overturn, so each writer rebases and its
    hook merges: every append is in the table, none fails."""
    from test_content_merge import UnionMerge

    uri = str(tmp_path / "cat")
    cat = _catalog(uri)
    base = cat.version
    texts: list[str] = []
    real_answer = group.Holder._answer

    def answer(self: group.Holder, txn_id: str, text: str) -> None:
        texts.append(text)
        real_answer(self, txn_id, text)

    txns = []
    for i in range(3):
        txn = olympia.load_catalog(uri).begin(isolation)
        current = txn.describe_table("w0", "t").metadata_location
        txn.update_table("w0", "t", metadata_location=f"{current},p{i}")
        txn.set_content_merge(UnionMerge(txn, [("w0", "t")]))
        txns.append(txn)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(group.Holder, "_answer", answer)
        threads = _commit_while_held(cat, txns)
    assert all(isinstance(t.outcome, int) for t in threads), [t.outcome for t in threads]
    assert sorted(t.outcome for t in threads) == [base + 1, base + 2, base + 3]
    parts = cat.latest().describe_table("w0", "t").metadata_location.split(",")
    assert sorted(parts) == ["p0", "p1", "p2", "s3://data/w0/v0.json"]
    assert any(" conflict " in text for text in texts)  # verdicts were sent, and ignored


def test_a_writer_gets_its_fifo_when_the_folder_comes_and_goes_under_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writers remove the request folder when they leave it empty and make it
    again when they need it. A writer whose FIFO could not be made because
    the folder was gone, and which then finds the folder there again (another
    writer made it meanwhile), makes the FIFO again rather than waiting
    without one: a waiter without a FIFO is never rung (spec §3.1 item 2).
    The holder's bell is made the same way."""
    folder = str(tmp_path / "requests")
    real_open = group._open_fifo
    failed: list[str] = []

    def open_fifo(path: str) -> int | None:
        if os.path.basename(path) not in {os.path.basename(p) for p in failed}:
            failed.append(path)
            # As if the folder vanished just before and another writer made
            # it again just after: this try fails, the folder is there.
            os.makedirs(folder, mode=0o700, exist_ok=True)
            return None
        return real_open(path)

    monkeypatch.setattr(group, "_open_fifo", open_fifo)
    member = group.Member(folder, "t1")
    assert member.ask(group.Request("t1", 1, 1, "snapshot", ()))
    wake = member.wake_fd()
    assert wake is not None
    group._ring(os.path.join(folder, "t1.wake"))
    assert hostlock.sleep_on([wake], 1.0) == [wake]  # rung through it
    holder = group.Holder(folder)
    assert holder.wait_for_requests(0.0, 1) == 1
    assert holder._bell is not None
    assert [os.path.basename(p) for p in failed] == ["t1.wake", "bell"]
    holder.close_bell()
    member.close()


def test_a_lone_writer_sweeps_what_dead_writers_left_in_its_group_folder(tmp_path: Path) -> None:
    """Only a holder that claimed requests swept the folder: after writers
    were killed, a catalog that one writer goes on using kept their requests,
    FIFOs and answers in /dev/shm for good (58 files after 10 rounds of
    killing 4 writers). Every holder sweeps now, requests waiting or not."""
    cat = olympia.create_catalog(str(tmp_path / "c"))
    with cat.transaction() as t:
        t.create_namespace("ns")
    folder = cat.store.storage.group_dir()
    if folder is None or not commit_module.GROUP_COMMIT:
        pytest.skip("no group commit on this platform")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    old = time.time() - 2 * group.STALE_SECONDS
    planted = []
    for name in ("dead.out", "dead.wake", "dead.claimed"):
        path = Path(folder, name)
        path.write_bytes(b"x")
        os.utime(path, (old, old))
        planted.append(path)
    fresh = Path(folder, "alive.out")
    fresh.write_bytes(b"x")
    group._SWEPT.pop(folder, None)
    with cat.transaction() as t:
        t.create_table("ns", "t", "s3://b/t.json")
    assert [p.name for p in planted if p.exists()] == []
    assert fresh.exists()
