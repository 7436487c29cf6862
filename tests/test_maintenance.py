"""Time travel, history, rollback, export and expiration."""

from __future__ import annotations

import itertools
import time
from datetime import UTC, datetime, timedelta

import pytest

import olympia
from olympia import layout
from olympia.errors import (
    CatalogAlreadyExistsError,
    InvalidArgumentError,
    OlympiaError,
    VersionNotFoundError,
)


def _tables(view, ns="n"):
    return view.list_tables(ns)


@pytest.fixture
def cat(any_storage_location):
    uri, opts = any_storage_location
    cat = olympia.create_catalog(uri, opts, node_order=3)
    with cat.transaction() as t:
        t.create_namespace("n")
    for i in range(5):
        with cat.transaction() as t:
            t.create_table("n", f"t{i}", f"m/{i}")
    return cat


def test_history_and_time_travel(cat):
    history = cat.history()
    assert [h.version for h in history] == list(range(7))
    assert all(a.created_at <= b.created_at for a, b in itertools.pairwise(history))
    # create_table: the namespace and view-name checks (reads), then the write.
    assert [len(h.actions) for h in history] == [0, 1, 3, 3, 3, 3, 3]
    assert _tables(cat.at_version(3)) == ["t0", "t1"]
    # The last version created at or before version 4's time (millisecond
    # resolution: a version of the same millisecond counts too).
    last = max(h.version for h in history if h.created_at <= history[4].created_at)
    assert cat.as_of(history[4].created_at).version == last >= 4
    assert _tables(cat.as_of(history[4].created_at)) == [f"t{i}" for i in range(last - 1)]
    assert _tables(cat.as_of(datetime.now(UTC) + timedelta(days=1))) == [f"t{i}" for i in range(5)]
    with pytest.raises(VersionNotFoundError):
        cat.as_of(history[0].created_at - timedelta(days=1))


def test_rollback_rolls_forward(cat):
    new = cat.rollback_to(3)
    assert new == 7 and cat.version == 7
    assert _tables(cat.latest()) == ["t0", "t1"]
    info = cat.history()[-1]
    assert info.rollback_from == 6
    assert [a.type for a in info.actions] == [olympia.transaction.A.CATALOG_ROLLBACK]
    assert _tables(cat.at_version(6)) == [f"t{i}" for i in range(5)]  # history kept
    with cat.transaction() as t:
        t.create_table("n", "after", "m/after")
    assert _tables(cat.latest()) == ["after", "t0", "t1"]
    with pytest.raises(VersionNotFoundError):
        cat.rollback_to(100)
    for bad in (-1, "3", 2.0, None):
        with pytest.raises(InvalidArgumentError, match="non-negative integer"):
            cat.at_version(bad)
        with pytest.raises(InvalidArgumentError, match="non-negative integer"):
            cat.rollback_to(bad)


@pytest.mark.parametrize("mode", ["full", "minimal"])
def test_export(cat, tmp_path, mode):
    target = str(tmp_path / f"export-{mode}")
    assert cat.export_snapshot("snap", target, mode=mode) == 6
    exported = olympia.load_catalog(target)
    assert _tables(exported.latest()) == [f"t{i}" for i in range(5)]
    if mode == "full":
        assert exported.version == 6
        assert _tables(exported.at_version(3)) == ["t0", "t1"]
    else:
        assert exported.version == 0
    assert exported.store.check_tree(exported.store.load_root(exported.version)) == 6
    with pytest.raises(OlympiaError, match="already exists"):
        cat.export_snapshot("snap", str(tmp_path / "other"))
    with pytest.raises(CatalogAlreadyExistsError):
        cat.export_snapshot("again", target)
    with pytest.raises(OlympiaError, match="mode"):
        cat.export_snapshot("bad", str(tmp_path / "bad"), mode="partial")


def test_an_export_inside_the_catalog_or_holding_it_is_refused(tmp_path):
    """An export under the source's pins/ or exports/ read as unreadable
    records (every expiration of the source failed), under node/ or vn/ as
    the source's orphans; one holding the source would take the source's
    files for its own. Refused before anything is written."""
    source = tmp_path / "lake" / "cat"
    cat = olympia.create_catalog(str(source))
    with cat.transaction() as t:
        t.create_namespace("ns")
    (tmp_path / "link").symlink_to(source)
    for target in (
        source / "pins" / "backup",
        source / "exports" / "backup",
        source / "node" / "x",
        tmp_path / "link" / "vn" / "x",  # the same folder through a symbolic link
        tmp_path / "lake",
        f"file://{source}/def/x",
    ):
        with pytest.raises(InvalidArgumentError, match="target_uri .* lies inside"):
            cat.export_snapshot("e", str(target))
    assert not (source / "pins").exists() and not (tmp_path / "lake" / "vn").exists()
    assert not any((source / "node").glob("x*"))
    assert cat.fsck().ok and cat.export_snapshot("e", str(tmp_path / "beside")) == cat.version
    assert cat.expire_versions(keep_last=1).oldest_version <= cat.version


def test_full_export_carries_open_distributed_transactions(cat, tmp_path):
    """The transaction's id comes from its key (spec/format.md §5): its state
    files under dtxn/<id>/ are copied, so it can be resumed in the copy, and
    fsck of the copy finds every state file it lists."""
    txn = cat.begin()
    txn.create_table("n", "from_dtxn", "m/d")
    txn_id = txn.distribute()
    target = str(tmp_path / "copy")
    cat.export_snapshot("with-dtxn", target, mode="full")
    copy = olympia.load_catalog(target)
    states = copy.store.storage.list(f"dtxn/{txn_id}")
    assert states and states == cat.store.storage.list(f"dtxn/{txn_id}")
    assert [t.id for t in copy.list_transactions()] == [txn_id]
    report = copy.fsck()
    assert report.ok, report
    resumed = copy.resume(txn_id)
    resumed.commit()
    assert "from_dtxn" in _tables(copy.latest())
    assert "from_dtxn" not in _tables(cat.latest())  # the original is untouched
    txn.rollback()


def _child_refs(store, node):
    """Every child reference in the tree under ``node``."""
    if node.is_leaf:
        return []
    out = []
    for child in node.children:
        out.append(child)
        out.extend(_child_refs(store, store.load_node(child)))
    return out


def test_expire_keeps_what_is_reachable(cat):
    before = _tables(cat.latest())
    result = cat.expire_versions(keep_last=2, grace_seconds=0, allow_short_grace=True)
    assert result.oldest_version == 5 and cat.oldest_version == 5
    # Each one-table commit carried its new nodes inline in its root; the
    # roots whose inline nodes versions 5 and 6 still use stay whole below
    # the floor, the others became expired-root markers.
    storage = cat.store.storage
    whole = [v for v in range(5) if storage.read(layout.root_path(v)) != layout.EXPIRED_ROOT]
    assert result.deleted_roots == 5 - len(whole)
    used = {
        layout.file_of(p)
        for v in (5, 6)
        for p in _child_refs(cat.store, cat.store.load_root(v).node)
    }
    assert {layout.root_path(v) for v in whole} == {p for p in used if p.startswith("vn/")} - {
        layout.root_path(5),
        layout.root_path(6),
    }
    assert cat.fsck().clean
    with pytest.raises(VersionNotFoundError):
        cat.at_version(4)
    fresh = olympia.load_catalog(cat.uri, cat.storage_options)
    assert fresh.version == 6
    for v in (5, 6):  # every retained version is complete
        root = fresh.store.load_root(v)
        assert fresh.store.check_tree(root) == v - 5 + 5
    assert _tables(fresh.latest()) == before
    with fresh.transaction() as t:
        t.create_table("n", "next", "m/next")
    assert fresh.version == 7


def test_expire_respects_exports_grace_and_open_transactions(cat, tmp_path):
    cat.export_snapshot("pin", str(tmp_path / "pinned"), mode="minimal")  # pins version 6
    with cat.transaction() as t:
        t.drop_table("n", "t0")
    open_txn = cat.begin()
    open_txn.create_table("n", "pending", "m/p")
    open_txn.distribute()  # version 8 creates its object; it began at 7
    with cat.transaction() as t:
        t.drop_table("n", "t1")
    result = cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
    assert result.oldest_version == 7  # held back by the open transaction
    assert _tables(cat.at_version(7)) == ["t1", "t2", "t3", "t4"]
    assert (
        olympia.load_catalog(cat.uri, cat.storage_options).store.check_tree(
            olympia.maintenance._load_pinned(cat.store, 6)
        )
        == 6
    )  # the pinned version's files survived
    cat.resume(open_txn.id).commit()
    assert cat.store.storage.list(f"dtxn/{open_txn.id}")  # its state files are still there
    cat.drop_export("pin")
    with pytest.raises(OlympiaError, match="no export"):
        cat.drop_export("pin")
    result = cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
    assert result.oldest_version == cat.version
    assert _tables(cat.latest()) == ["pending", "t2", "t3", "t4"]
    assert cat.store.storage.list("dtxn") == []  # the ended transaction's states are gone


def test_grace_period_protects_young_files(cat):
    listed = len(cat.store.storage.list(layout.NODE_DIR))
    result = cat.expire_versions(keep_last=1, grace_seconds=3600)
    assert result.deleted_files == 0
    assert len(cat.store.storage.list(layout.NODE_DIR)) == listed


def test_expire_by_time(cat):
    history = cat.history()
    cut = history[4].created_at
    # Root times have millisecond resolution: a later version created in the
    # same millisecond as version 4 is also "created at or before" the cut.
    expected = max(h.version for h in history if h.created_at <= cut)
    time.sleep(0.002)
    result = cat.expire_versions(older_than=cut, grace_seconds=0, allow_short_grace=True)
    assert result.oldest_version == expected >= 4
    # Version k holds the tables created by versions 2 .. k.
    assert _tables(cat.at_version(expected)) == [f"t{i}" for i in range(expected - 1)]
    with pytest.raises(VersionNotFoundError):
        cat.at_version(expected - 1)


def test_stale_commit_below_a_new_floor_is_refused(tmp_path):
    olympia.create_catalog(str(tmp_path / "c"))
    # The stale writer is another process's catalog object: it holds none of
    # the roots committed after it began.
    stale = olympia.load_catalog(str(tmp_path / "c")).begin()
    stale.create_namespace("late")
    cat = olympia.load_catalog(str(tmp_path / "c"))
    for i in range(3):
        with cat.transaction() as t:
            t.create_namespace(f"n{i}")
    cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
    # Version 1, the one the stale writer would publish, is an expired-root
    # marker now: its put cannot succeed, and the versions it would have to
    # check are gone.
    assert cat.store.storage.read(layout.root_path(1)) == layout.EXPIRED_ROOT
    with pytest.raises(olympia.CommitConflictError) as info:
        stale.commit()
    assert info.value.rule == "history-expired"
    assert olympia.load_catalog(str(tmp_path / "c")).latest().list_namespaces() == [
        "n0",
        "n1",
        "n2",
    ]
    assert cat.version == 3


def test_expired_roots_become_markers_that_no_writer_can_publish_over(any_storage_location):
    uri, opts = any_storage_location
    cat = olympia.create_catalog(uri, opts)
    stale = olympia.load_catalog(uri, opts).begin()
    stale.create_namespace("late")
    for i in range(4):
        with cat.transaction() as t:
            t.create_namespace(f"n{i}")
    result = cat.expire_versions(keep_last=2, grace_seconds=0, allow_short_grace=True)
    assert (result.oldest_version, result.deleted_roots) == (3, 3)
    storage = cat.store.storage
    for v in (0, 1, 2):
        assert storage.read(layout.root_path(v)) == layout.EXPIRED_ROOT
        with pytest.raises(olympia.errors.StorageFileExistsError):
            storage.put_if_absent(layout.root_path(v), b"anything")
    # a second run finds nothing left to mark, and fsck counts markers as needed
    assert (
        cat.expire_versions(keep_last=2, grace_seconds=0, allow_short_grace=True).deleted_roots == 0
    )
    check = cat.fsck()
    assert check.clean and check.kept_versions == (3, 4), check
    with pytest.raises(olympia.VersionNotFoundError, match="expired"):
        olympia.load_catalog(uri, opts).at_version(1)
    with pytest.raises(olympia.CommitConflictError) as info:
        stale.commit()
    assert info.value.rule == "history-expired"
    assert cat.version == 4
    assert olympia.load_catalog(uri, opts).latest().list_namespaces() == [f"n{i}" for i in range(4)]


def _stale_writer_then_expiration(cat):
    """A transaction that begins, three versions committed after it, and an
    expiration that keeps only the last: the stale transaction, uncommitted."""
    stale = cat.begin()
    stale.create_namespace("late")
    for i in range(3):
        with cat.transaction() as t:
            t.create_namespace(f"n{i}")
    cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
    return stale


def test_format_version_1_catalogs_delete_expired_roots_and_check_the_floor_after_publishing(
    tmp_path,
):
    cat = olympia.create_catalog(str(tmp_path / "c"), format_version=1)
    stale = _stale_writer_then_expiration(cat)
    assert not cat.store.storage.exists(layout.root_path(1))
    # the stale writer re-creates root 1, reads the floor, and takes it back
    with pytest.raises(olympia.CommitConflictError) as info:
        stale.commit()
    assert info.value.rule == "history-expired"
    assert not cat.store.storage.exists(layout.root_path(1))
    assert olympia.load_catalog(str(tmp_path / "c")).latest().list_namespaces() == [
        "n0",
        "n1",
        "n2",
    ]


def test_stale_commit_that_still_holds_the_expired_roots_is_checked_against_them(tmp_path):
    """A writer whose process read the versions committed since it began
    (here: it committed them) checks its actions against those immutable
    roots even after expiration: nothing is lost and nothing is re-created."""
    cat = olympia.create_catalog(str(tmp_path / "c"))
    stale = _stale_writer_then_expiration(cat)
    assert stale.commit() == 4
    fresh = olympia.load_catalog(str(tmp_path / "c"))
    assert fresh.latest().list_namespaces() == ["late", "n0", "n1", "n2"]
    assert fresh.oldest_version == 3
    for v in (0, 1, 2):
        assert fresh.store.storage.read(layout.root_path(v)) == layout.EXPIRED_ROOT
    assert fresh.fsck().clean


def test_fsck_calls_nothing_an_orphan_below_a_missing_node(tmp_path):
    """A child that only a missing internal node names is live: fsck lists
    the missing node and no orphan (whoever deleted the orphans it lists
    would delete that child)."""
    root = tmp_path / "c"
    cat = olympia.create_catalog(str(root), node_order=4)
    for j in range(4):
        with cat.transaction() as t:
            if j == 0:
                t.create_namespace("ns")
            for i in range(60):
                t.create_table("ns", f"t{j}_{i}", "s3://b/" + "x" * 300 + f"{j}_{i}.json")
    check = cat.fsck()
    assert check.ok and not check.orphans
    nodes = sorted(p.name for p in (root / "node").iterdir())
    parent, children = next(
        (n, kids)
        for n in nodes
        if (
            kids := [
                m
                for m in nodes
                if m != n and m.split("-")[1][:32].encode() in (root / "node" / n).read_bytes()
            ]
        )
    )
    (root / "node" / parent).unlink()
    check = olympia.load_catalog(str(root)).fsck()
    assert check.missing == (f"node/{parent}",)
    assert check.orphans == ()
    assert all((root / "node" / child).exists() for child in children)
