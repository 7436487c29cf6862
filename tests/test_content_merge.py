"""The content-merge hook of a transaction (spec/transactions.md §4.3).

The fake hook treats a table's metadata_location as a comma-separated set of
parts and merges two changes by union, recording every call.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path

import pytest

import olympia
from olympia.errors import CommitConflictError, OlympiaError, TransactionNotFoundError
from olympia.proto import actions_pb2 as apb
from olympia.reader import CatalogReader
from olympia.transaction import ContentMerge, Transaction, footprint_of


class Refused(CommitConflictError):
    """The hook's own conflict."""


class UnionMerge:
    """Judges ``tables``; merges the transaction's staged location of each
    table it updates with the newest committed one by union of their parts."""

    def __init__(
        self,
        txn: Transaction,
        tables: Collection[tuple[str, str]],
        refuse: Collection[str] = (),
        during: object = None,
    ) -> None:
        self.names = {txn.keys.table(ns, n): (ns, n) for ns, n in tables}
        self.txn = txn
        #: Keys whose change the hook refuses (e.g. a table the transaction read).
        self.refuse = {txn.keys.table(*t.split(".")) for t in refuse}
        #: Called on the first call (to lose a race on purpose).
        self.during = during
        self.calls: list[tuple[int, frozenset[str]]] = []

    def keys(self) -> Collection[str]:
        return self.names.keys()

    def _ours(self, key: str) -> str | None:
        locations = [
            a.table.metadata_location
            for a in self.txn.actions
            if a.type == apb.TABLE_UPDATE and a.object_key == key
        ]
        return locations[-1] if locations else None

    def rebase(self, latest: CatalogReader, changed: frozenset[str]) -> Mapping[str, str]:
        self.calls.append((latest.version, changed))  # type: ignore[attr-defined]
        if self.during is not None and len(self.calls) == 1:
            self.during()  # type: ignore[operator]
        for key in changed & self.refuse:
            raise Refused(f"{self.names[key]} changed", rule="merge-refused")
        out = {}
        for key in changed:
            ns, name = self.names[key]
            ours = self._ours(key)
            if ours is None or not latest.table_exists(ns, name):
                continue  # leave reads and missing tables to the core
            theirs = latest.describe_table(ns, name).metadata_location
            out[key] = ",".join(sorted(set(theirs.split(",")) | set(ours.split(","))))
        return out


def _catalog(tmp_path: Path) -> olympia.Catalog:
    cat = olympia.create_catalog(str(tmp_path / "c"))
    with cat.transaction() as t:
        t.create_namespace("a")
        t.create_namespace("b")
        t.create_table("a", "x", "x0")
        t.create_table("a", "y", "y0")
        t.create_table("b", "z", "z0")
    return cat


def _append(t: Transaction, name: str, part: str) -> None:
    """Read the table and add ``part`` to its location, as an Iceberg append does."""
    ns, n = name.split(".")
    current = t.describe_table(ns, n).metadata_location
    t.update_table(ns, n, metadata_location=f"{current},{part}")


def _location(cat: olympia.Catalog, name: str) -> str:
    return cat.latest().describe_table(*name.split(".")).metadata_location


def test_merge_hook_is_a_content_merge(tmp_path: Path) -> None:
    cat = _catalog(tmp_path)
    t = cat.begin()
    hook: ContentMerge = UnionMerge(t, [("a", "x")])
    t.set_content_merge(hook)
    t.set_content_merge(None)
    with pytest.raises(olympia.InvalidArgumentTypeError, match="ContentMerge"):
        t.set_content_merge("not a hook")  # type: ignore[arg-type]
    assert olympia.ContentMerge is ContentMerge


@pytest.mark.parametrize("isolation", ["snapshot", "serializable"])
def test_two_appends_both_commit_with_the_hook(tmp_path: Path, isolation: str) -> None:
    cat = _catalog(tmp_path)
    first, second = cat.begin(isolation=isolation), cat.begin(isolation=isolation)
    _append(first, "a.x", "p1")
    _append(second, "a.x", "p2")
    hook = UnionMerge(second, [("a", "x")])
    second.set_content_merge(hook)
    v1 = first.commit()
    v2 = second.commit()
    assert v2 == v1 + 1
    assert _location(cat, "a.x") == "p1,p2,x0"
    assert hook.calls == [(v1, frozenset({second.keys.table("a", "x")}))]
    # Without the hook, first committer wins as before.
    third, fourth = cat.begin(isolation=isolation), cat.begin(isolation=isolation)
    _append(third, "a.x", "p3")
    _append(fourth, "a.x", "p4")
    third.commit()
    with pytest.raises(CommitConflictError) as err:
        fourth.commit()
    assert err.value.rule == "write-write"


def test_patched_location_is_what_the_version_holds_and_records(tmp_path: Path) -> None:
    cat = _catalog(tmp_path)
    first, second = cat.begin(), cat.begin()
    _append(first, "a.x", "p1")
    _append(second, "a.x", "p2")
    second.set_content_merge(UnionMerge(second, [("a", "x")]))
    first.commit()
    version = second.commit()
    assert cat.at_version(version).describe_table("a", "x").metadata_location == "p1,p2,x0"
    [info] = cat.history(since=version)
    updates = [a for a in info.actions if a.type == apb.TABLE_UPDATE]
    assert [a.table.metadata_location for a in updates] == ["p1,p2,x0"]
    assert list(updates[0].update_fields) == ["metadata_location"]
    fp = footprint_of(cat.store, version)
    assert fp.writes == {second.keys.table("a", "x"): False}


def test_hook_refusing_publishes_nothing(tmp_path: Path) -> None:
    cat = _catalog(tmp_path)
    first, second = cat.begin(), cat.begin()
    _append(first, "a.x", "p1")
    _append(second, "a.x", "p2")
    second.set_content_merge(UnionMerge(second, [("a", "x")], refuse=["a.x"]))
    v1 = first.commit()
    with pytest.raises(Refused):
        second.commit()
    assert second.status == "failed"
    assert cat.version == v1
    assert _location(cat, "a.x") == "x0,p1"


def test_other_errors_of_the_hook_fail_the_commit(tmp_path: Path) -> None:
    cat = _catalog(tmp_path)

    class Broken(UnionMerge):
        def rebase(self, latest: CatalogReader, changed: frozenset[str]) -> Mapping[str, str]:
            raise ValueError("broken hook")

    class Stray(UnionMerge):
        def rebase(self, latest: CatalogReader, changed: frozenset[str]) -> Mapping[str, str]:
            return {self.txn.keys.table("a", "y"): "elsewhere"}

    for hook, error in ((Broken, ValueError), (Stray, OlympiaError)):
        first, second = cat.begin(), cat.begin()
        _append(first, "a.x", "p1")
        _append(second, "a.x", "p2")
        second.set_content_merge(hook(second, [("a", "x"), ("a", "y")]))
        version = first.commit()
        with pytest.raises(error):
            second.commit()
        assert second.status == "failed"
        assert cat.version == version


def test_a_hook_reading_through_its_transaction_fails_the_commit(tmp_path: Path) -> None:
    """A hook that reads through the transaction while it commits recorded
    an action after the core had counted and checked them (the Iceberg
    layer's place check did: group-commit roots did not add up). The core
    now refuses to record anything while it commits, and says so."""
    cat = _catalog(tmp_path)

    class ReadsThrough(UnionMerge):
        def rebase(self, latest: CatalogReader, changed: frozenset[str]) -> Mapping[str, str]:
            self.txn.describe_table("a", "y")
            return super().rebase(latest, changed)

    first, second = cat.begin(), cat.begin()
    _append(first, "a.x", "p1")
    _append(second, "a.x", "p2")
    second.set_content_merge(ReadsThrough(second, [("a", "x")]))
    counted = len(second.actions)
    version = first.commit()
    with pytest.raises(olympia.TransactionClosedError, match="is committing"):
        second.commit()
    assert len(second.actions) == counted
    assert second.status == "failed"
    assert cat.version == version
    assert _location(cat, "a.x") == "x0,p1"


def test_hook_sees_each_new_version_once_and_only_changed_keys(tmp_path: Path) -> None:
    cat = _catalog(tmp_path)
    pending = cat.begin()
    _append(pending, "a.x", "p")
    pending.describe_table("a", "y")  # a content read of a merged key
    keys = pending.keys
    # Versions after the begin version: one writes a.x, one b.z (not judged),
    # one a.y (read by pending).
    for name, part in (("a.x", "c1"), ("b.z", "c2"), ("a.y", "c3")):
        with cat.transaction() as t:
            _append(t, name, part)
    racer_versions: list[int] = []

    def race() -> None:  # commits the version pending is about to publish
        with cat.transaction() as t:
            _append(t, "a.x", "r")
        racer_versions.append(cat.version)

    hook = UnionMerge(pending, [("a", "x"), ("a", "y")], during=race)
    pending.set_content_merge(hook)
    version = pending.commit()
    before = racer_versions[0] - 1
    assert hook.calls == [
        (before, frozenset({keys.table("a", "x"), keys.table("a", "y")})),
        (racer_versions[0], frozenset({keys.table("a", "x")})),
    ]
    assert version == racer_versions[0] + 1
    assert _location(cat, "a.x") == "c1,p,r,x0"
    assert _location(cat, "a.y") == "y0,c3"


def test_versions_writing_no_merged_key_do_not_call_the_hook(tmp_path: Path) -> None:
    cat = _catalog(tmp_path)
    pending = cat.begin()
    _append(pending, "a.x", "p")
    with cat.transaction() as t:
        _append(t, "b.z", "c")
    hook = UnionMerge(pending, [("a", "x")])
    pending.set_content_merge(hook)
    pending.commit()
    assert hook.calls == []
    assert _location(cat, "a.x") == "x0,p"


@pytest.mark.parametrize("isolation", ["snapshot", "serializable"])
def test_concurrent_drop_or_rename_of_a_merged_table_still_conflicts(
    tmp_path: Path, isolation: str
) -> None:
    cat = _catalog(tmp_path)
    for change in (
        lambda t: t.drop_table("a", "x"),
        lambda t: t.rename_table("a", "x", "a", "w"),
    ):
        pending = cat.begin(isolation=isolation)
        _append(pending, "a.x", "p")
        hook = UnionMerge(pending, [("a", "x")])
        pending.set_content_merge(hook)
        with cat.transaction() as t:
            change(t)
        with pytest.raises(CommitConflictError) as err:
            pending.commit()
        assert err.value.rule == "structural"
        assert hook.calls == [(cat.version, frozenset({pending.keys.table("a", "x")}))]
        with cat.transaction() as t:  # put a.x back for the next case
            if t.table_exists("a", "w"):
                t.rename_table("a", "w", "a", "x")
            else:
                t.create_table("a", "x", "x0")


def test_serializable_drop_of_a_merged_read_is_still_seen(tmp_path: Path) -> None:
    """The pending transaction's content read of a.x counts as a membership
    read: a concurrent drop of a.x is an rw edge, a content update is not."""
    cat = _catalog(tmp_path)
    for change, refused in (
        (lambda t: t.update_table("a", "x", metadata_location="x1"), False),
        (lambda t: t.drop_table("a", "x"), True),
    ):
        pending = cat.begin(isolation="serializable")
        pending.describe_table("a", "x")
        _append(pending, "b.z", "p")
        pending.set_content_merge(UnionMerge(pending, [("a", "x"), ("b", "z")]))
        committed = cat.begin(isolation="serializable")
        committed.describe_table("b", "z")  # so committed must precede pending
        change(committed)
        committed.commit()
        if refused:
            with pytest.raises(CommitConflictError) as err:
                pending.commit()
            assert err.value.rule == "serializable-cycle"
        else:
            pending.commit()


@pytest.mark.parametrize("hook_refuses", [False, True])
def test_serializable_write_skew_is_judged_by_the_hook(tmp_path: Path, hook_refuses: bool) -> None:
    """Committed: reads a.x, writes b.z. Pending: reads b.z, writes a.x. The
    core alone refuses (write skew); with the hook the pending's read of b.z
    is the hook's to judge."""
    cat = _catalog(tmp_path)
    committed = cat.begin(isolation="serializable")
    committed.describe_table("a", "x")
    _append(committed, "b.z", "c")
    pending = cat.begin(isolation="serializable")
    pending.describe_table("b", "z")
    _append(pending, "a.x", "p")
    hook = UnionMerge(pending, [("a", "x"), ("b", "z")], refuse=["b.z"] if hook_refuses else [])
    pending.set_content_merge(hook)
    v = committed.commit()
    if hook_refuses:
        with pytest.raises(Refused):
            pending.commit()
        assert cat.version == v
    else:
        assert pending.commit() == v + 1
        assert _location(cat, "a.x") == "x0,p"
        # Committed read a.x, which pending wrote: it precedes pending, no cycle.
        assert cat.history(since=v + 1)[0].serialized_before == ()
    assert hook.calls == [(v, frozenset({pending.keys.table("b", "z")}))]
    # The same two without the hook: write skew, refused by the core.
    again = cat.begin(isolation="serializable")
    again.describe_table("a", "x")
    _append(again, "b.z", "c2")
    other = cat.begin(isolation="serializable")
    other.describe_table("b", "z")
    _append(other, "a.x", "q")
    again.commit()
    with pytest.raises(CommitConflictError) as err:
        other.commit()
    assert err.value.rule == "serializable-cycle"


def test_merged_write_still_has_edges_into_the_pending_transaction(tmp_path: Path) -> None:
    """A committed transaction that read a.x (which pending updates, merged)
    must precede pending: with pending also reading what it wrote, a cycle."""
    cat = _catalog(tmp_path)
    committed = cat.begin(isolation="serializable")
    committed.describe_table("a", "x")
    _append(committed, "b.z", "c")
    pending = cat.begin(isolation="serializable")
    pending.describe_table("b", "z")  # not judged by the hook
    _append(pending, "a.x", "p")
    pending.set_content_merge(UnionMerge(pending, [("a", "x")]))
    committed.commit()
    with pytest.raises(CommitConflictError) as err:
        pending.commit()
    assert err.value.rule == "serializable-cycle"


def test_membership_writes_stay_under_the_core_rules(tmp_path: Path) -> None:
    """A table the pending transaction creates is not merged, even if the hook names it."""
    cat = _catalog(tmp_path)
    pending = cat.begin()
    pending.create_table("a", "n", "n0")
    hook = UnionMerge(pending, [("a", "n")])
    pending.set_content_merge(hook)
    with cat.transaction() as t:
        t.create_table("a", "n", "other")
    with pytest.raises(CommitConflictError) as err:
        pending.commit()
    assert err.value.rule == "write-write"
    assert hook.calls == []


def test_distributed_transaction_with_the_hook(tmp_path: Path) -> None:
    cat = _catalog(tmp_path)
    t = cat.begin()
    _append(t, "a.x", "p")
    txn_id = t.distribute()
    with cat.transaction() as other:
        _append(other, "a.x", "c")
    resumed = cat.resume(txn_id)
    hook = UnionMerge(resumed, [("a", "x")])
    resumed.set_content_merge(hook)
    resumed.commit()
    assert _location(cat, "a.x") == "c,p,x0"
    assert len(hook.calls) == 1
    # A refusal fails it like any conflict: its catalog object is dropped.
    t = cat.begin()
    _append(t, "a.x", "q")
    txn_id = t.distribute()
    with cat.transaction() as other:
        _append(other, "a.x", "d")
    resumed = cat.resume(txn_id)
    resumed.set_content_merge(UnionMerge(resumed, [("a", "x")], refuse=["a.x"]))
    with pytest.raises(Refused):
        resumed.commit()
    assert resumed.status == "failed"
    with pytest.raises(TransactionNotFoundError):
        cat.resume(txn_id)
    assert _location(cat, "a.x") == "c,p,x0,d"


class WindowCheck(UnionMerge):
    """A hook that also checks every version committed since the begin
    version (the optional ``checks_window`` / ``check_window`` pair), refusing
    when one of them wrote a key of ``forbidden``."""

    def __init__(self, txn: Transaction, forbidden: Collection[str], active: bool = True) -> None:
        super().__init__(txn, [])
        self.forbidden = {txn.keys.table(*t.split(".")) for t in forbidden}
        self.active = active
        self.window_calls: list[tuple[int, frozenset[str]]] = []

    def checks_window(self) -> bool:
        return self.active

    def check_window(self, latest: CatalogReader, written: frozenset[str]) -> None:
        self.window_calls.append((latest.version, written))  # type: ignore[attr-defined]
        if written & self.forbidden:
            raise Refused("a forbidden table was written", rule="window-refused")


def test_a_window_check_sees_every_version_committed_since_the_begin(tmp_path: Path) -> None:
    cat = _catalog(tmp_path)
    t = cat.begin()
    t.create_table("a", "mine", "m0")
    hook = WindowCheck(t, ["b.w"])
    t.set_content_merge(hook)
    with cat.transaction() as other:
        other.create_table("b", "v", "v0")
    with cat.transaction() as other:
        other.create_table("b", "w", "w0")
    before = cat.latest().version
    with pytest.raises(Refused) as err:
        t.commit()
    assert err.value.rule == "window-refused"
    keys = cat.begin().keys
    assert hook.window_calls == [(before, frozenset({keys.table("b", "v"), keys.table("b", "w")}))]
    assert cat.latest().version == before
    assert not cat.latest().table_exists("a", "mine")
    # Nothing committed meanwhile: no call. A hook with nothing to check when
    # the commit starts is still asked about every window (a claim can come
    # from a rebase of a table it writes).
    quiet = cat.begin()
    quiet.create_table("a", "q", "q0")
    hook = WindowCheck(quiet, ["b.w"])
    quiet.set_content_merge(hook)
    quiet.commit()
    assert hook.window_calls == []
    idle = cat.begin()
    idle.create_table("a", "r", "r0")
    hook = WindowCheck(idle, ["b.w"], active=False)
    idle.set_content_merge(hook)
    with cat.transaction() as other:
        other.update_table("b", "w", metadata_location="w1")
    with pytest.raises(Refused):
        idle.commit()
    assert hook.window_calls == [(cat.latest().version, frozenset({keys.table("b", "w")}))]


def test_a_transaction_with_a_window_check_leaves_no_group_commit_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer's group commit checks only object keys (§3.2): a
    transaction whose hook checks the window publishes itself."""
    import olympia.commit as commit_module

    made: list[str] = []
    real = commit_module.group.Member

    def member(folder: object, txn_id: str) -> object:
        made.append(txn_id)
        return real(folder, txn_id)  # type: ignore[arg-type]

    monkeypatch.setattr(commit_module.group, "Member", member)
    cat = _catalog(tmp_path)
    plain = cat.begin()
    plain.create_table("a", "p", "p0")
    plain.commit()
    grouped = bool(made) and made[-1] == plain.id
    checked = cat.begin()
    checked.create_table("a", "c", "c0")
    checked.set_content_merge(WindowCheck(checked, []))
    made.clear()
    checked.commit()
    assert made == []
    assert cat.latest().table_exists("a", "c")
    if commit_module.GROUP_COMMIT:
        assert grouped, "a plain transaction may leave a request on this platform"
        # Nothing to check when its commit starts: it may leave one.
        idle = cat.begin()
        idle.create_table("a", "i", "i0")
        idle.set_content_merge(WindowCheck(idle, [], active=False))
        made.clear()
        idle.commit()
        assert made == [idle.id]
