"""Concurrent Iceberg commits through the PyIceberg plugin, end to end
(spec/iceberg.md §5-§8): racing appends all land, write skew across two
tables is refused under SERIALIZABLE only, copy-on-write deletes of the same
files are refused while deletes of different partitions both land, and a
failed transaction leaves no table changed."""

from __future__ import annotations

import multiprocessing as mp
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.expressions import EqualTo
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

import olympia
from olympia.iceberg.errors import CommitConflictException

IMPL = "olympia.iceberg.OlympiaCatalog"
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "part", StringType(), required=False),
)
SPEC = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "part"))


def catalog(warehouse: str) -> Any:
    return load_catalog("lake", **{"py-catalog-impl": IMPL, "warehouse": warehouse})


def batch(ids: range, part: str = "a") -> pa.Table:
    return pa.table(
        {
            "id": pa.array(list(ids), pa.int64()),
            "part": pa.array([part] * len(ids), pa.string()),
        }
    )


def ids_of(tbl: Any) -> list[int]:
    return sorted(tbl.scan().to_arrow()["id"].to_pylist())


def all_files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def _append_loop(warehouse: str, worker: int, rounds: int, out: Any) -> None:
    cat = catalog(warehouse)
    done = 0
    for i in range(rounds):
        tbl = cat.load_table(("db", "events"))
        start = (worker * rounds + i) * 10
        tbl.append(batch(range(start, start + 10)))
        done += 1
    out.put((worker, done))


def test_two_processes_appending_to_one_table_lose_no_row(tmp_path: Path) -> None:
    warehouse = f"file://{tmp_path}/lake"
    cat = catalog(warehouse)
    cat.create_namespace("db")
    cat.create_table(("db", "events"), SCHEMA)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    rounds = 15
    procs = [ctx.Process(target=_append_loop, args=(warehouse, w, rounds, out)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0, 0]  # a worker that raised exits 1
    results = dict(out.get(timeout=10) for _ in procs)
    assert results == {0: rounds, 1: rounds}
    tbl = cat.load_table(("db", "events"))
    assert ids_of(tbl) == list(range(2 * rounds * 10))
    # one snapshot per append, in one line of history
    snapshots = tbl.metadata.snapshots
    assert len(snapshots) == 2 * rounds
    chain, current = [], tbl.current_snapshot()
    while current is not None:
        chain.append(current.snapshot_id)
        current = (
            tbl.snapshot_by_id(current.parent_snapshot_id) if current.parent_snapshot_id else None
        )
    assert len(chain) == 2 * rounds


def test_racing_appends_in_one_process_both_land(tmp_path: Path) -> None:
    cat = catalog(f"file://{tmp_path}/lake")
    cat.create_namespace("db")
    cat.create_table(("db", "t"), SCHEMA)
    first = cat.load_table(("db", "t"))
    second = cat.load_table(("db", "t"))
    first.append(batch(range(0, 5)))
    second.append(batch(range(5, 10)))  # its base is stale: rebased, not refused
    assert ids_of(cat.load_table(("db", "t"))) == list(range(10))


@pytest.mark.parametrize("isolation", ["snapshot", "serializable"])
def test_write_skew_across_two_tables(tmp_path: Path, isolation: str) -> None:
    cat = catalog(f"file://{tmp_path}/lake")
    cat.create_namespace("db")
    for name in ("a", "b"):
        cat.create_table(("db", name), SCHEMA).append(batch(range(1)))
    t1 = cat.begin(isolation=isolation)
    t2 = cat.begin(isolation=isolation)
    # each reads both tables, then writes the one the other read
    for tx in (t1, t2):
        assert ids_of(tx.load_table(("db", "a"))) == [0]
        assert ids_of(tx.load_table(("db", "b"))) == [0]
    t1.load_table(("db", "a")).append(batch(range(100, 101)))
    t2.load_table(("db", "b")).append(batch(range(200, 201)))
    t1.commit()
    if isolation == "serializable":
        with pytest.raises(CommitConflictException) as info:
            t2.commit()
        assert isinstance(info.value, CommitFailedException)
        assert "db.a" in str(info.value) or "db.b" in str(info.value)
        assert info.value.rule
        assert ids_of(cat.load_table(("db", "b"))) == [0]
    else:
        t2.commit()
        assert ids_of(cat.load_table(("db", "b"))) == [0, 200]
    assert ids_of(cat.load_table(("db", "a"))) == [0, 100]


def _partitioned(cat: Any) -> Any:
    cat.create_namespace("db")
    tbl = cat.create_table(("db", "p"), SCHEMA, partition_spec=SPEC)
    # one append writes both partitions, so both deletes rewrite the same manifest
    tbl.append(pa.concat_tables([batch(range(0, 5), "a"), batch(range(5, 10), "b")]))
    return tbl


@pytest.mark.parametrize("isolation", ["snapshot", "serializable"])
def test_deletes_of_different_partitions_both_commit(tmp_path: Path, isolation: str) -> None:
    cat = catalog(f"file://{tmp_path}/lake")
    _partitioned(cat)
    t1, t2 = cat.begin(isolation=isolation), cat.begin(isolation=isolation)
    t1.load_table(("db", "p")).delete(EqualTo("part", "a"))
    t2.load_table(("db", "p")).delete(EqualTo("part", "b"))
    t1.commit()
    t2.commit()
    assert ids_of(cat.load_table(("db", "p"))) == []


@pytest.mark.parametrize("isolation", ["snapshot", "serializable"])
def test_copy_on_write_delete_racing_overwrite_of_same_files_is_refused(
    tmp_path: Path, isolation: str
) -> None:
    cat = catalog(f"file://{tmp_path}/lake")
    _partitioned(cat)
    t1, t2 = cat.begin(isolation=isolation), cat.begin(isolation=isolation)
    # a row-level delete rewrites the file of partition a (copy-on-write) ...
    t1.load_table(("db", "p")).delete(EqualTo("id", 1))
    # ... while an overwrite replaces the same file
    t2.load_table(("db", "p")).overwrite(
        batch(range(50, 52), "a"), overwrite_filter=EqualTo("part", "a")
    )
    t1.commit()
    with pytest.raises(CommitConflictException) as info:
        t2.commit()
    assert info.value.rule == "removed-file-gone"
    assert "db.p" in str(info.value)
    assert ids_of(cat.load_table(("db", "p"))) == [0, 2, 3, 4, 5, 6, 7, 8, 9]


def test_exception_in_transaction_changes_no_table_and_leaves_no_file(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    cat = catalog(f"file://{root}")
    cat.create_namespace("db")
    for name in ("a", "b"):
        cat.create_table(("db", name), SCHEMA).append(batch(range(3)))
    # The last commit's `vn/latest` hint is written in the background: let its
    # temporary file come and go before taking the picture.
    cat.olympia.store.wait_for_background_writes()
    before_files = all_files(root)
    before_version = olympia.load_catalog(str(root)).version
    with pytest.raises(RuntimeError, match="boom"), cat.transaction() as tx:
        tx.load_table(("db", "a")).append(batch(range(10, 20)))
        tx.load_table(("db", "b")).delete(EqualTo("id", 1))
        raise RuntimeError("boom")
    assert ids_of(cat.load_table(("db", "a"))) == [0, 1, 2]
    assert ids_of(cat.load_table(("db", "b"))) == [0, 1, 2]
    assert olympia.load_catalog(str(root)).version == before_version
    assert all_files(root) == before_files


def test_multi_table_commit_is_one_catalog_version(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    cat = catalog(f"file://{root}")
    cat.create_namespace("db")
    for name in ("a", "b"):
        cat.create_table(("db", name), SCHEMA)
    before = olympia.load_catalog(str(root)).version
    with cat.transaction(isolation="serializable") as tx:
        a = tx.load_table(("db", "a"))
        a.append(batch(range(3)))
        # the transaction sees its own write; outside, nobody does yet
        assert ids_of(tx.load_table(("db", "a"))) == [0, 1, 2]
        assert ids_of(cat.load_table(("db", "a"))) == []
        tx.load_table(("db", "b")).append(batch(range(7, 9)))
    assert olympia.load_catalog(str(root)).version == before + 1
    assert ids_of(cat.load_table(("db", "a"))) == [0, 1, 2]
    assert ids_of(cat.load_table(("db", "b"))) == [7, 8]


def test_failed_transaction_does_not_delete_files_of_committed_versions(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    cat = catalog(f"file://{root}")
    _partitioned(cat)
    tbl = cat.load_table(("db", "p"))
    committed = {f.file.file_path for f in tbl.scan().plan_files()}
    t1 = cat.begin(isolation="serializable")
    t1.load_table(("db", "p")).overwrite(
        batch(range(60, 61), "a"), overwrite_filter=EqualTo("part", "a")
    )
    cat.load_table(("db", "p")).overwrite(
        batch(range(70, 71), "a"), overwrite_filter=EqualTo("part", "a")
    )
    with pytest.raises(CommitConflictException):
        t1.commit()
    live = cat.load_table(("db", "p"))
    for path in {f.file.file_path for f in live.scan().plan_files()}:
        assert os.path.exists(path.removeprefix("file://"))
    assert ids_of(live) == [5, 6, 7, 8, 9, 70]
    assert committed  # the files of the first version are still there for time travel
    for path in committed:
        assert os.path.exists(path.removeprefix("file://"))


@pytest.mark.parametrize("conflicting_first", [True, False])
def test_refusal_names_the_version_that_conflicted(tmp_path: Path, conflicting_first: bool) -> None:
    cat = catalog(f"file://{tmp_path}/lake")
    _partitioned(cat)
    cat.create_table(("db", "report"), SCHEMA)
    tx = cat.begin(isolation="serializable")
    tx.load_table(("db", "p")).scan(row_filter=EqualTo("part", "a")).to_arrow()
    tx.load_table(("db", "report")).append(batch(range(1)))
    versions = {}
    for part in ("a", "b") if conflicting_first else ("b", "a"):
        cat.load_table(("db", "p")).append(batch(range(100, 101), part))
        versions[part] = olympia.load_catalog(str(tmp_path / "lake")).version
    with pytest.raises(CommitConflictException) as info:
        tx.commit()
    assert info.value.rule == "scan-filter-matches"
    assert info.value.version == versions["a"]
    assert f"version {versions['a']}" in str(info.value)
    assert info.value.table == "db.p"


def test_commit_rebased_twice_after_losing_the_race_again(tmp_path: Path) -> None:
    """A commit whose rebase is overtaken by yet another commit is rebased
    again from the metadata it was made on, and the first rebase's files go."""
    root = tmp_path / "lake"
    cat = catalog(f"file://{root}")
    cat.create_namespace("db")
    cat.create_table(("db", "t"), SCHEMA).append(batch(range(-1, 0)))  # snapshots have parents
    other = catalog(f"file://{root}")
    tx = cat.begin()
    tx.load_table(("db", "t")).append(batch(range(0, 3)))
    other.load_table(("db", "t")).append(batch(range(10, 13)))  # the first concurrent commit
    calls = []
    first_rebase = tx.merge.rebase

    def rebase_then_lose_again(latest: Any, changed: Any) -> Any:
        out = first_rebase(latest, changed)
        calls.append(latest.version)
        if len(calls) == 1:  # another commit lands before this attempt publishes
            other.load_table(("db", "t")).append(batch(range(20, 23)))
        return out

    tx.merge.rebase = rebase_then_lose_again  # type: ignore[method-assign]
    tx.commit()
    assert len(calls) == 2 and calls[1] > calls[0]
    tbl = cat.load_table(("db", "t"))
    assert ids_of(tbl) == [-1, 0, 1, 2, 10, 11, 12, 20, 21, 22]
    assert len(tbl.metadata.snapshots) == 4
    referenced = {m.manifest_path for s in tbl.metadata.snapshots for m in s.manifests(tbl.io)}
    referenced |= {s.manifest_list for s in tbl.metadata.snapshots}
    metadata_dir = root / "db.db" / "t" / "metadata"
    on_disk = {f"file://{p}" for p in metadata_dir.iterdir() if p.suffix == ".avro"}
    assert on_disk == {p if p.startswith("file://") else f"file://{p}" for p in referenced}


def _append_own_table(warehouse: str, worker: int, rounds: int) -> None:
    cat = load_catalog(
        "lake",
        **{"py-catalog-impl": IMPL, "warehouse": warehouse, "allow-overlapping-locations": "false"},
    )
    tbl = cat.load_table(("db", f"t{worker}"))
    for i in range(rounds):
        tbl.append(batch(range(i, i + 1)))


def test_group_commits_of_iceberg_appends_are_readable_roots(tmp_path: Path) -> None:
    """With the overlap rule on (olympia serve's default), the Iceberg
    layer's check of the places a transaction claims read its tables
    through the transaction while it committed, which recorded reads in its
    action log after the core had counted its actions: a group-commit
    holder then published a root whose $group counts did not add up, and
    the catalog could not be opened any more (3 runs out of 3 of 4 writers
    appending 60 times)."""
    warehouse = f"file://{tmp_path}/lake"
    cat = catalog(warehouse)
    cat.create_namespace("db")
    writers, rounds = 4, 25
    for w in range(writers):
        cat.create_table(("db", f"t{w}"), SCHEMA)
    ctx = mp.get_context("spawn")
    procs = [
        ctx.Process(target=_append_own_table, args=(warehouse, w, rounds)) for w in range(writers)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=600)
    assert [p.exitcode for p in procs] == [0] * writers
    core = olympia.load_catalog(str(tmp_path / "lake"))
    check = core.fsck()
    assert check.ok, (check.damaged, check.missing)
    for w in range(writers):
        assert ids_of(cat.load_table(("db", f"t{w}"))) == list(range(rounds))
    grouped = [v for v in core.history() if len(v.transactions) > 1]
    assert grouped, "no version held more than one transaction: group commit was not exercised"


def test_an_iceberg_commit_records_no_action_while_it_commits(tmp_path: Path) -> None:
    """The core counts a transaction's actions when its commit starts; the
    Iceberg layer's checks during the commit must not add to them."""
    cat = load_catalog(
        "lake",
        **{
            "py-catalog-impl": IMPL,
            "warehouse": f"file://{tmp_path}/lake",
            "allow-overlapping-locations": "false",
        },
    )
    cat.create_namespace("db")
    cat.create_table(("db", "a"), SCHEMA).append(batch(range(1)))
    tx = cat.begin()
    tx.load_table(("db", "a")).append(batch(range(1, 2)))
    tx.create_table(("db", "b"), SCHEMA).append(batch(range(2, 3)))
    counted = len(tx.olympia_transaction.actions)
    version = tx.commit()
    assert len(tx.olympia_transaction.actions) == counted
    published = next(v for v in cat.olympia.history() if v.version == version)
    assert len(published.actions) == counted
