"""The Iceberg rebase engine and data conflict checks (spec/iceberg.md §7, §8).

Metadata states are built by PyIceberg itself on a SqlCatalog: the table is
loaded twice, one copy commits ("theirs"), the other stages a transaction
whose updates and requirements are captured instead of committed ("ours"),
and the rebase result is read back with a scan.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import EqualTo
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestWriterV2,
    write_manifest_list,
)
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import StaticTable, Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    AssertRefSnapshotId,
    AssertTableUUID,
    SetSnapshotRefUpdate,
)
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField, StringType

from olympia.iceberg.errors import CommitConflictException
from olympia.iceberg.rebase import Rebased, ScanRecord, StagedCommit, check_scans, rebase_table

SCHEMA = Schema(
    NestedField(1, "p", StringType(), required=False),
    NestedField(2, "x", LongType(), required=False),
    NestedField(3, "note", StringType(), required=False),
)
BY_P = PartitionSpec(
    PartitionField(source_id=1, field_id=1000, transform=IdentityTransform(), name="p")
)


def rows(p: str, *xs: int) -> pa.Table:
    return pa.table(
        {
            "p": pa.array([p] * len(xs), pa.string()),
            "x": pa.array(list(xs), pa.int64()),
            "note": pa.array([f"{p}{x}" for x in xs], pa.string()),
        }
    )


def mixed(*pairs: tuple[str, int]) -> pa.Table:
    return pa.concat_tables([rows(p, x) for p, x in pairs])


@pytest.fixture
def catalog(tmp_path: Path) -> SqlCatalog:
    cat = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/cat.db", warehouse=f"file://{tmp_path}/wh")
    cat.create_namespace("ns")
    return cat


def make_table(catalog: SqlCatalog, *initial: pa.Table, partitioned: bool = True) -> Table:
    spec = BY_P if partitioned else PartitionSpec()
    table = catalog.create_table("ns.t", schema=SCHEMA, partition_spec=spec)
    if initial:
        table.append(pa.concat_tables(initial))
    return table


def stage(table: Table, build: Any, **kwargs: Any) -> StagedCommit:
    """What PyIceberg would send to commit_table for ``build(tx)``, without sending it."""
    tx = Transaction(table)
    build(tx)
    requirements = (*tx._requirements, AssertTableUUID(uuid=table.metadata.table_uuid))
    return StagedCommit(requirements=requirements, updates=tx._updates, **kwargs)


def read(catalog: SqlCatalog, metadata: TableMetadata, tmp_path: Path) -> list[tuple[str, int]]:
    """Write ``metadata`` to a file, load it back as PyIceberg would, and scan it."""
    location = f"file://{tmp_path}/check-{uuid.uuid4()}.metadata.json"
    table = catalog.load_table("ns.t")
    catalog._write_metadata(metadata, table.io, location)
    static = StaticTable.from_metadata(location)
    data = static.scan().to_arrow()
    return sorted(zip(data["p"].to_pylist(), data["x"].to_pylist(), strict=True))


def rebase(
    catalog: SqlCatalog, base: TableMetadata, *commits: StagedCommit, **kwargs: Any
) -> Rebased:
    theirs = catalog.load_table("ns.t")
    kwargs.setdefault("isolation", "serializable")
    return rebase_table(
        theirs.io, "ns.t", base, list(commits), theirs.metadata, version=7, **kwargs
    )


def lineage(metadata: TableMetadata) -> list[int]:
    ids = []
    snapshot = metadata.current_snapshot()
    while snapshot is not None:
        ids.append(snapshot.snapshot_id)
        snapshot = (
            metadata.snapshot_by_id(snapshot.parent_snapshot_id)
            if snapshot.parent_snapshot_id
            else None
        )
    return ids


def test_two_appends_both_land_with_linear_lineage(catalog: SqlCatalog, tmp_path: Path) -> None:
    make_table(catalog, rows("a", 1))
    mine = catalog.load_table("ns.t")
    other = catalog.load_table("ns.t")
    other.append(rows("a", 2))
    ours = stage(mine, lambda tx: tx.append(rows("b", 3), snapshot_properties={"job": "nightly"}))
    staged_snapshot = ours.updates[0].snapshot  # type: ignore[union-attr]

    result = rebase(catalog, mine.metadata, ours)

    theirs = catalog.load_table("ns.t").metadata
    assert read(catalog, result.metadata, tmp_path) == [("a", 1), ("a", 2), ("b", 3)]
    head = result.metadata.current_snapshot()
    assert head is not None and head.parent_snapshot_id == theirs.current_snapshot_id
    assert lineage(result.metadata)[1:] == lineage(theirs)
    assert head.snapshot_id == staged_snapshot.snapshot_id  # the id is kept when free
    assert head.summary is not None and head.summary["job"] == "nightly"
    assert head.summary["total-records"] == "3"
    # The old staged manifest list is obsolete; the new one was written by the rebase.
    assert staged_snapshot.manifest_list in result.obsolete_files
    assert head.manifest_list in result.written_files
    assert head.manifest_list not in result.obsolete_files


def test_two_staged_commits_are_rebased_in_order(catalog: SqlCatalog, tmp_path: Path) -> None:
    make_table(catalog, rows("a", 1))
    mine = catalog.load_table("ns.t")
    other = catalog.load_table("ns.t")
    other.append(rows("a", 2))
    tx = Transaction(mine)
    tx.append(rows("b", 3))
    first = StagedCommit(requirements=tx._requirements, updates=tx._updates)
    after_first = tx.table_metadata
    staged_on = Table(mine.name(), after_first, mine.metadata_location, mine.io, catalog)
    second = stage(staged_on, lambda t: t.append(rows("b", 4)))

    result = rebase(catalog, mine.metadata, first, second)

    assert read(catalog, result.metadata, tmp_path) == [("a", 1), ("a", 2), ("b", 3), ("b", 4)]
    theirs = catalog.load_table("ns.t").metadata
    assert lineage(result.metadata)[2:] == lineage(theirs)


def test_append_lands_on_a_schema_that_gained_a_column(catalog: SqlCatalog, tmp_path: Path) -> None:
    make_table(catalog, rows("a", 1))
    mine = catalog.load_table("ns.t")
    other = catalog.load_table("ns.t")
    with other.update_schema() as update:
        update.add_column("extra", StringType())
    ours = stage(mine, lambda tx: tx.append(rows("b", 2)))

    result = rebase(catalog, mine.metadata, ours)

    assert result.metadata.schema().find_field("extra") is not None
    assert read(catalog, result.metadata, tmp_path) == [("a", 1), ("b", 2)]


def test_append_refused_when_theirs_dropped_a_written_column(catalog: SqlCatalog) -> None:
    make_table(catalog, rows("a", 1))
    mine = catalog.load_table("ns.t")
    other = catalog.load_table("ns.t")
    with other.update_schema() as update:
        update.delete_column("note")
    ours = stage(mine, lambda tx: tx.append(rows("b", 2)))

    with pytest.raises(CommitConflictException, match="schema-incompatible.*note") as info:
        rebase(catalog, mine.metadata, ours)
    assert info.value.rule == "schema-incompatible"
    assert info.value.table == "ns.t" and info.value.version == 7
    assert "ns.t" in str(info.value) and "version 7" in str(info.value)


def test_copy_on_write_delete_racing_a_rewrite_of_the_same_file_is_refused(
    catalog: SqlCatalog,
) -> None:
    make_table(catalog, rows("a", 1, 2, 3))
    mine = catalog.load_table("ns.t")
    other = catalog.load_table("ns.t")
    other.delete(EqualTo("x", 1))  # rewrites the one file of partition a
    ours = stage(mine, lambda tx: tx.delete(EqualTo("x", 2)))  # rewrites the same file

    with pytest.raises(CommitConflictException, match="removed-file-gone") as info:
        rebase(catalog, mine.metadata, ours, isolation="snapshot")
    assert info.value.rule == "removed-file-gone"
    assert ".parquet" in str(info.value)


def test_conflict_leaves_no_file_written_by_the_rebase(catalog: SqlCatalog, tmp_path: Path) -> None:
    make_table(catalog, rows("a", 1, 2, 3))
    mine = catalog.load_table("ns.t")
    other = catalog.load_table("ns.t")
    other.delete(EqualTo("x", 1))
    ours = stage(mine, lambda tx: tx.delete(EqualTo("x", 2)))
    before = set((tmp_path / "wh").rglob("*"))
    with pytest.raises(CommitConflictException):
        rebase(catalog, mine.metadata, ours, isolation="snapshot")
    assert set((tmp_path / "wh").rglob("*")) == before


def test_deletes_on_different_partitions_of_one_manifest_both_land(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    # One append: both partitions' files are in the same manifest, which both deletes rewrite.
    make_table(catalog, mixed(("a", 1), ("a", 2), ("b", 3), ("b", 4)))
    mine = catalog.load_table("ns.t")
    assert len(mine.current_snapshot().manifests(mine.io)) == 1  # type: ignore[union-attr]
    other = catalog.load_table("ns.t")
    other.delete(EqualTo("x", 1))
    ours = stage(mine, lambda tx: tx.delete(EqualTo("x", 3)))

    result = rebase(catalog, mine.metadata, ours)

    assert read(catalog, result.metadata, tmp_path) == [("a", 2), ("b", 4)]
    assert lineage(result.metadata)[1:] == lineage(catalog.load_table("ns.t").metadata)


def test_whole_file_deletes_on_different_partitions_both_land(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    make_table(catalog, mixed(("a", 1), ("b", 2), ("c", 3)))
    mine = catalog.load_table("ns.t")
    other = catalog.load_table("ns.t")
    other.delete(EqualTo("p", "a"))
    ours = stage(mine, lambda tx: tx.delete(EqualTo("p", "b")))

    result = rebase(catalog, mine.metadata, ours)

    assert read(catalog, result.metadata, tmp_path) == [("c", 3)]


def test_serializable_overwrite_refused_when_an_append_lands_in_its_partition(
    catalog: SqlCatalog,
) -> None:
    make_table(catalog, mixed(("a", 1), ("b", 2)))
    mine = catalog.load_table("ns.t")
    other = catalog.load_table("ns.t")
    other.append(rows("a", 5))
    ours = stage(mine, lambda tx: tx.overwrite(rows("a", 9), overwrite_filter=EqualTo("p", "a")))

    with pytest.raises(CommitConflictException, match="added-file-matches-filter") as info:
        rebase(catalog, mine.metadata, ours, isolation="serializable")
    assert info.value.rule == "added-file-matches-filter"


def test_serializable_overwrite_with_an_explicit_filter(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    make_table(catalog, mixed(("a", 1), ("b", 2)))
    mine = catalog.load_table("ns.t")
    other = catalog.load_table("ns.t")
    other.append(rows("a", 5))
    overwrite_a = lambda tx: tx.overwrite(rows("a", 9), overwrite_filter=EqualTo("p", "a"))  # noqa: E731
    # The filter names rows theirs' file cannot hold (its x bounds are 5..5): no conflict.
    narrow = stage(mine, overwrite_a, conflict_filter=EqualTo("x", 1))
    result = rebase(catalog, mine.metadata, narrow, isolation="serializable")
    assert read(catalog, result.metadata, tmp_path) == [("a", 5), ("a", 9), ("b", 2)]
    wide = stage(mine, overwrite_a, conflict_filter=EqualTo("p", "a"))
    with pytest.raises(CommitConflictException, match="added-file-matches-filter"):
        rebase(catalog, mine.metadata, wide, isolation="serializable")


def test_serializable_overwrite_lands_when_the_append_is_in_another_partition(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    make_table(catalog, mixed(("a", 1), ("b", 2)))
    mine = catalog.load_table("ns.t")
    other = catalog.load_table("ns.t")
    other.append(rows("b", 5))
    ours = stage(mine, lambda tx: tx.overwrite(rows("a", 9), overwrite_filter=EqualTo("p", "a")))

    result = rebase(catalog, mine.metadata, ours, isolation="serializable")

    assert read(catalog, result.metadata, tmp_path) == [("a", 9), ("b", 2), ("b", 5)]


def test_snapshot_isolation_overwrite_lands_despite_an_append_in_its_partition(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    make_table(catalog, mixed(("a", 1), ("b", 2)))
    mine = catalog.load_table("ns.t")
    other = catalog.load_table("ns.t")
    other.append(rows("a", 5))
    ours = stage(mine, lambda tx: tx.overwrite(rows("a", 9), overwrite_filter=EqualTo("p", "a")))

    result = rebase(catalog, mine.metadata, ours, isolation="snapshot")

    # The overwrite removes what it read (a1); the concurrent a5 stays.
    assert read(catalog, result.metadata, tmp_path) == [("a", 5), ("a", 9), ("b", 2)]


def test_check_scans_serializable_matches_only_the_scanned_partition(catalog: SqlCatalog) -> None:
    make_table(catalog, mixed(("a", 1), ("b", 2)))
    base = catalog.load_table("ns.t").metadata
    catalog.load_table("ns.t").append(rows("a", 5))
    theirs = catalog.load_table("ns.t")

    check_scans(
        theirs.io,
        "ns.t",
        base,
        theirs.metadata,
        [ScanRecord(EqualTo("p", "b"))],
        isolation="serializable",
    )
    check_scans(
        theirs.io,
        "ns.t",
        base,
        theirs.metadata,
        [ScanRecord(EqualTo("x", 7))],
        isolation="serializable",
    )
    check_scans(
        theirs.io,
        "ns.t",
        base,
        theirs.metadata,
        [ScanRecord(EqualTo("p", "a"))],
        isolation="snapshot",
    )
    with pytest.raises(CommitConflictException, match="scan-filter-matches") as info:
        check_scans(
            theirs.io,
            "ns.t",
            base,
            theirs.metadata,
            [ScanRecord(EqualTo("p", "a"))],
            isolation="serializable",
            version=3,
        )
    assert info.value.rule == "scan-filter-matches" and info.value.version == 3


def test_check_scans_sees_removed_files(catalog: SqlCatalog) -> None:
    make_table(catalog, mixed(("a", 1), ("b", 2)))
    base = catalog.load_table("ns.t").metadata
    catalog.load_table("ns.t").delete(EqualTo("p", "b"))
    theirs = catalog.load_table("ns.t")
    check_scans(
        theirs.io,
        "ns.t",
        base,
        theirs.metadata,
        [ScanRecord(EqualTo("p", "a"))],
        isolation="serializable",
    )
    with pytest.raises(CommitConflictException, match="data file removed"):
        check_scans(
            theirs.io,
            "ns.t",
            base,
            theirs.metadata,
            [ScanRecord(EqualTo("p", "b"))],
            isolation="serializable",
        )


def test_rebase_checks_the_transactions_scans(catalog: SqlCatalog) -> None:
    make_table(catalog, mixed(("a", 1), ("b", 2)))
    mine = catalog.load_table("ns.t")
    catalog.load_table("ns.t").append(rows("a", 5))
    ours = stage(mine, lambda tx: tx.append(rows("b", 3)))
    rebase(catalog, mine.metadata, ours, scans=[ScanRecord(EqualTo("p", "b"))])
    with pytest.raises(CommitConflictException, match="scan-filter-matches"):
        rebase(catalog, mine.metadata, ours, scans=[ScanRecord(EqualTo("p", "a"))])


def test_table_uuid_requirement_failure(catalog: SqlCatalog) -> None:
    make_table(catalog, rows("a", 1))
    mine = catalog.load_table("ns.t")
    catalog.load_table("ns.t").append(rows("a", 2))
    ours = stage(mine, lambda tx: tx.set_properties(k="v"))
    wrong = StagedCommit(requirements=(AssertTableUUID(uuid=uuid.uuid4()),), updates=ours.updates)
    with pytest.raises(CommitConflictException, match="assert-table-uuid") as info:
        rebase(catalog, mine.metadata, wrong)
    assert info.value.rule == "requirement-failed"


def test_current_schema_requirement_failure(catalog: SqlCatalog) -> None:
    make_table(catalog, rows("a", 1))
    mine = catalog.load_table("ns.t")
    with catalog.load_table("ns.t").update_schema() as update:
        update.add_column("theirs", StringType())

    def add_ours(tx: Transaction) -> None:
        with tx.update_schema() as update:
            update.add_column("ours", LongType())

    ours = stage(mine, add_ours)
    with pytest.raises(
        CommitConflictException,
        match="requirement-failed.*assert-(current-schema-id|last-assigned)",
    ):
        rebase(catalog, mine.metadata, ours)


def test_property_change_lands_on_newer_metadata(catalog: SqlCatalog, tmp_path: Path) -> None:
    make_table(catalog, rows("a", 1))
    mine = catalog.load_table("ns.t")
    catalog.load_table("ns.t").append(rows("a", 2))
    ours = stage(mine, lambda tx: tx.set_properties(owner="ours"))
    result = rebase(
        catalog, mine.metadata, ours, metadata_location="file:///somewhere/v2.metadata.json"
    )
    assert result.metadata.properties["owner"] == "ours"
    assert result.obsolete_files == () and result.written_files == ()
    assert result.metadata.metadata_log[-1].metadata_file == "file:///somewhere/v2.metadata.json"
    assert read(catalog, result.metadata, tmp_path) == [("a", 1), ("a", 2)]


def test_history_rewritten_is_refused(catalog: SqlCatalog) -> None:
    table = make_table(catalog, rows("a", 1))
    first = table.metadata.current_snapshot_id
    table.append(rows("a", 2))
    mine = catalog.load_table("ns.t")
    other = catalog.load_table("ns.t")
    assert first is not None
    other.manage_snapshots().rollback_to_snapshot(first).commit()
    ours = stage(mine, lambda tx: tx.append(rows("b", 3)))
    with pytest.raises(CommitConflictException, match="history-rewritten") as info:
        rebase(catalog, mine.metadata, ours)
    assert info.value.rule == "history-rewritten"


def test_unchanged_table_keeps_the_staged_snapshot(catalog: SqlCatalog, tmp_path: Path) -> None:
    make_table(catalog, rows("a", 1))
    mine = catalog.load_table("ns.t")
    ours = stage(mine, lambda tx: tx.append(rows("b", 2)))
    result = rebase(catalog, mine.metadata, ours)
    staged = ours.updates[0].snapshot  # type: ignore[union-attr]
    assert result.metadata.current_snapshot() == staged
    assert result.obsolete_files == () and result.written_files == ()
    assert read(catalog, result.metadata, tmp_path) == [("a", 1), ("b", 2)]


def test_append_to_a_table_that_was_empty_at_base(catalog: SqlCatalog, tmp_path: Path) -> None:
    make_table(catalog, partitioned=False)
    mine = catalog.load_table("ns.t")
    catalog.load_table("ns.t").append(rows("a", 1))
    ours = stage(mine, lambda tx: tx.append(rows("b", 2)))
    result = rebase(catalog, mine.metadata, ours)
    assert read(catalog, result.metadata, tmp_path) == [("a", 1), ("b", 2)]


def test_unpartitioned_serializable_delete_conflicts_with_any_append(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    make_table(catalog, rows("a", 1), rows("b", 2), partitioned=False)
    mine = catalog.load_table("ns.t")
    catalog.load_table("ns.t").append(rows("c", 3))
    ours = stage(mine, lambda tx: tx.delete(EqualTo("p", "a")))
    with pytest.raises(CommitConflictException, match="added-file-matches-filter"):
        rebase(catalog, mine.metadata, ours, isolation="serializable")
    result = rebase(catalog, mine.metadata, ours, isolation="snapshot")
    assert read(catalog, result.metadata, tmp_path) == [("b", 2), ("c", 3)]


def test_bad_isolation_is_refused(catalog: SqlCatalog) -> None:
    table = make_table(catalog, rows("a", 1))
    with pytest.raises(ValueError, match="isolation"):
        rebase_table(
            table.io, "ns.t", table.metadata, [], table.metadata, isolation="read-committed"
        )


class _DeleteManifestWriter(ManifestWriterV2):
    """PyIceberg writes no delete files; the tests write a delete manifest with its writer."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


def commit_partition_delete_file(table: Table, partition: str) -> str:
    """Commit a DELETE snapshot adding a position delete file scoped to ``partition``."""
    meta = table.metadata
    head = meta.current_snapshot()
    assert head is not None
    snapshot_id = meta.new_snapshot_id()
    sequence_number = meta.next_sequence_number()
    delete_path = f"{table.location()}/data/p={partition}/deletes-{uuid.uuid4()}.parquet"
    delete_file = DataFile.from_args(
        content=DataFileContent.POSITION_DELETES,
        file_path=delete_path,
        file_format=FileFormat.PARQUET,
        partition=Record(partition),
        record_count=1,
        file_size_in_bytes=10,
    )
    delete_file.spec_id = meta.default_spec_id
    manifest_out = table.io.new_output(f"{table.location()}/metadata/{uuid.uuid4()}-deletes.avro")
    with _DeleteManifestWriter(
        meta.spec(), meta.schema(), manifest_out, snapshot_id, "deflate"
    ) as writer:
        writer.add(
            ManifestEntry.from_args(
                status=ManifestEntryStatus.ADDED, snapshot_id=snapshot_id, data_file=delete_file
            )
        )
    list_path = f"{table.location()}/metadata/snap-{snapshot_id}-deletes.avro"
    with write_manifest_list(
        format_version=2,
        output_file=table.io.new_output(list_path),
        snapshot_id=snapshot_id,
        parent_snapshot_id=head.snapshot_id,
        sequence_number=sequence_number,
        avro_compression="deflate",
    ) as list_writer:
        list_writer.add_manifests([*head.manifests(table.io), writer.to_manifest_file()])
    snapshot = Snapshot(
        snapshot_id=snapshot_id,
        parent_snapshot_id=head.snapshot_id,
        sequence_number=sequence_number,
        manifest_list=list_path,
        summary=Summary(Operation.DELETE),
        schema_id=meta.current_schema_id,
    )
    table.catalog.commit_table(
        table,
        (AssertRefSnapshotId(ref="main", snapshot_id=head.snapshot_id),),
        (
            AddSnapshotUpdate(snapshot=snapshot),
            SetSnapshotRefUpdate(ref_name="main", type="branch", snapshot_id=snapshot_id),
        ),
    )
    return delete_path


def test_removing_a_file_that_got_a_delete_file_is_refused(catalog: SqlCatalog) -> None:
    make_table(catalog, mixed(("a", 1), ("a", 2), ("b", 3), ("b", 4)))
    mine = catalog.load_table("ns.t")
    delete_path = commit_partition_delete_file(catalog.load_table("ns.t"), "a")
    ours = stage(mine, lambda tx: tx.delete(EqualTo("x", 1)))  # rewrites partition a's file
    with pytest.raises(CommitConflictException, match="delete-file-added") as info:
        rebase(catalog, mine.metadata, ours, isolation="snapshot")
    assert info.value.rule == "delete-file-added" and delete_path in str(info.value)
    # The same delete in the other partition is not affected by that delete file.
    other_partition = stage(mine, lambda tx: tx.delete(EqualTo("x", 3)))
    result = rebase(catalog, mine.metadata, other_partition, isolation="serializable")
    theirs = catalog.load_table("ns.t").metadata
    head = result.metadata.current_snapshot()
    assert head is not None and head.parent_snapshot_id == theirs.current_snapshot_id
    assert head.summary is not None and head.summary["deleted-records"] == "2"


def test_own_new_column_then_append_lands_beside_a_concurrent_append(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    make_table(catalog, rows("a", 1))
    mine = catalog.load_table("ns.t")
    catalog.load_table("ns.t").append(rows("a", 2))
    tx = Transaction(mine)
    with tx.update_schema() as update:
        update.add_column("score", LongType())
    first = StagedCommit(requirements=tx._requirements, updates=tx._updates)
    evolved = Table(mine.name(), tx.table_metadata, mine.metadata_location, mine.io, catalog)
    wide = rows("b", 3).append_column("score", pa.array([30], pa.int64()))
    second = stage(evolved, lambda t: t.append(wide))

    result = rebase(catalog, mine.metadata, first, second)

    assert result.metadata.schema().find_field("score") is not None
    assert read(catalog, result.metadata, tmp_path) == [("a", 1), ("a", 2), ("b", 3)]
    head = result.metadata.current_snapshot()
    assert head is not None and head.schema_id == result.metadata.current_schema_id


def test_appends_rebase_on_a_table_that_merges_manifests(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    table = make_table(catalog, rows("a", 1))
    table.transaction().set_properties(
        {"commit.manifest-merge.enabled": "true", "commit.manifest.min-count-to-merge": "2"}
    ).commit_transaction()
    mine = catalog.load_table("ns.t")
    catalog.load_table("ns.t").append(rows("a", 2))
    ours = stage(mine, lambda tx: tx.append(rows("b", 3)))
    staged = ours.updates[0].snapshot  # type: ignore[union-attr]

    result = rebase(catalog, mine.metadata, ours)

    assert read(catalog, result.metadata, tmp_path) == [("a", 1), ("a", 2), ("b", 3)]
    head = result.metadata.current_snapshot()
    assert head is not None
    referenced = {m.manifest_path for m in head.manifests(mine.io)} | {head.manifest_list}
    assert staged.manifest_list in result.obsolete_files
    assert not referenced & set(result.obsolete_files)
    for path in result.obsolete_files:  # deleting them leaves the result readable
        mine.io.delete(path)
    assert read(catalog, result.metadata, tmp_path) == [("a", 1), ("a", 2), ("b", 3)]
