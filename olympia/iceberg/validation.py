"""What changed in a table between two of its snapshots, and the predicates
the data conflict rules of spec/iceberg.md §8 are built from.

Everything here reads manifests through a PyIceberg ``FileIO`` and judges
files by their metadata only (partition values, column bounds): never by
reading data files.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pyiceberg.exceptions import ResolveError
from pyiceberg.expressions import BooleanExpression
from pyiceberg.expressions.visitors import (
    ROWS_CANNOT_MATCH,
    _InclusiveMetricsEvaluator,
    expression_evaluator,
    inclusive_projection,
)
from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile, DataFileContent, ManifestEntryStatus
from pyiceberg.schema import Schema, index_by_id, promote
from pyiceberg.table.delete_file_index import _referenced_data_file_path
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Operation, Snapshot
from pyiceberg.types import PrimitiveType


@dataclass(frozen=True)
class ChangedFile:
    """A data or delete file that one snapshot added or removed."""

    snapshot_id: int
    operation: Operation
    file: DataFile

    @property
    def is_data(self) -> bool:
        return self.file.content == DataFileContent.DATA


@dataclass(frozen=True)
class SnapshotChanges:
    """The files a sequence of snapshots added and removed (their own manifest
    entries with status ADDED or DELETED), in snapshot order."""

    added: tuple[ChangedFile, ...] = ()
    removed: tuple[ChangedFile, ...] = ()

    @property
    def added_data(self) -> tuple[ChangedFile, ...]:
        return tuple(c for c in self.added if c.is_data)

    @property
    def added_deletes(self) -> tuple[ChangedFile, ...]:
        return tuple(c for c in self.added if not c.is_data)

    @property
    def removed_data(self) -> tuple[ChangedFile, ...]:
        return tuple(c for c in self.removed if c.is_data)

    @property
    def removed_deletes(self) -> tuple[ChangedFile, ...]:
        return tuple(c for c in self.removed if not c.is_data)


def snapshots_after(
    metadata: TableMetadata, head_id: int | None, since_id: int | None
) -> list[Snapshot] | None:
    """The snapshots from ``head_id`` back to ``since_id`` (excluded), oldest first.

    ``since_id`` None: the whole history of ``head_id``. Returns None when
    ``since_id`` is not an ancestor of (or equal to) ``head_id`` in
    ``metadata``: the history between them was rewritten or expired.
    """
    if head_id == since_id:
        return []
    found: list[Snapshot] = []
    snapshot = metadata.snapshot_by_id(head_id) if head_id is not None else None
    seen: set[int] = set()
    while snapshot is not None and snapshot.snapshot_id not in seen:
        if snapshot.snapshot_id == since_id:
            return list(reversed(found))
        seen.add(snapshot.snapshot_id)
        found.append(snapshot)
        parent = snapshot.parent_snapshot_id
        snapshot = metadata.snapshot_by_id(parent) if parent is not None else None
    return list(reversed(found)) if since_id is None else None


def snapshot_changes(io: FileIO, snapshots: Iterable[Snapshot]) -> SnapshotChanges:
    """Read what each snapshot added and removed from its own manifests."""
    added: list[ChangedFile] = []
    removed: list[ChangedFile] = []
    for snapshot in snapshots:
        operation = (
            snapshot.summary.operation if snapshot.summary is not None else Operation.OVERWRITE
        )
        for manifest in snapshot.manifests(io):
            if manifest.added_snapshot_id != snapshot.snapshot_id:
                continue
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=False):
                if entry.snapshot_id != snapshot.snapshot_id:
                    continue
                changed = ChangedFile(snapshot.snapshot_id, operation, entry.data_file)
                if entry.status == ManifestEntryStatus.ADDED:
                    added.append(changed)
                elif entry.status == ManifestEntryStatus.DELETED:
                    removed.append(changed)
    return SnapshotChanges(tuple(added), tuple(removed))


def filter_matcher(
    metadata: TableMetadata, row_filter: BooleanExpression, case_sensitive: bool = True
) -> Callable[[DataFile], bool]:
    """A predicate telling whether a file can hold rows matching ``row_filter``.

    A file can match unless its partition values (through the inclusive
    projection of the filter on the file's partition spec) or its column
    lower/upper bounds, null and value counts rule it out. The filter is
    bound to ``metadata``'s current schema; a filter that cannot be bound (a
    column it names is gone) or a file whose spec is unknown can match
    everything (the conservative answer).
    """
    schema = metadata.schema()
    specs = metadata.specs()
    try:
        metrics = _InclusiveMetricsEvaluator(schema, row_filter, case_sensitive)
    except ValueError:
        return lambda _file: True
    partition_evaluators: dict[int, Callable[[DataFile], bool]] = {}

    def partition_evaluator(spec_id: int) -> Callable[[DataFile], bool]:
        if spec_id not in partition_evaluators:
            spec = specs.get(spec_id)
            if spec is None or spec.is_unpartitioned():
                partition_evaluators[spec_id] = lambda _file: True
            else:
                try:
                    projected = inclusive_projection(schema, spec, case_sensitive)(row_filter)
                    partition_schema = Schema(*spec.partition_type(schema).fields)
                    evaluate = expression_evaluator(partition_schema, projected, case_sensitive)
                    partition_evaluators[spec_id] = lambda file: evaluate(file.partition)
                except ValueError:
                    partition_evaluators[spec_id] = lambda _file: True
        return partition_evaluators[spec_id]

    def may_match(file: DataFile) -> bool:
        if not partition_evaluator(file.spec_id)(file):
            return False
        if file.content != DataFileContent.DATA:
            # A delete file's column bounds describe file paths and positions,
            # not the table's columns: only its partition can rule it out.
            return True
        return metrics.eval(file) is not ROWS_CANNOT_MATCH

    return may_match


def partition_matcher(
    metadata: TableMetadata, removed: Iterable[DataFile]
) -> Callable[[DataFile], bool]:
    """The conflict filter derived from the files an operation removes.

    A file matches when it lies in one of their partitions: same partition
    spec and equal partition values. A removed file of an unpartitioned
    spec, or a file of a spec none of the removed files uses, matches
    everything (no partition comparison is possible).
    """
    specs = metadata.specs()
    partitions: set[tuple[int, object]] = set()
    spec_ids: set[int] = set()
    everything = False
    for file in removed:
        spec_ids.add(file.spec_id)
        spec = specs.get(file.spec_id)
        if spec is None or spec.is_unpartitioned():
            everything = True
        partitions.add((file.spec_id, file.partition))

    def may_match(file: DataFile) -> bool:
        if everything or file.spec_id not in spec_ids:
            return True
        return (file.spec_id, file.partition) in partitions

    return may_match


def delete_applies(metadata: TableMetadata, delete_file: DataFile, data_file: DataFile) -> bool:
    """Whether a delete file can delete rows of ``data_file``.

    A position delete file that names one data file (its ``referenced_data_file``
    or equal bounds of the file-path column) applies to that file only. Any
    other delete file applies to the data files of its partition (same spec
    and partition values), and one of an unpartitioned spec to every file.
    """
    referenced = _referenced_data_file_path(delete_file)
    if referenced is not None:
        return referenced == data_file.file_path
    spec = metadata.specs().get(delete_file.spec_id)
    if spec is None or spec.is_unpartitioned():
        return True
    return delete_file.spec_id == data_file.spec_id and delete_file.partition == data_file.partition


def incompatible_fields(written: Schema, base: Schema, theirs: Schema) -> list[str]:
    """Fields of ``written`` (the schema files were written with) that
    ``theirs`` dropped, changed to a type files of the old type cannot be
    read as, or made required, among the fields that ``base`` has (fields
    the writer added itself are its own business)."""
    in_base = index_by_id(base)
    in_theirs = index_by_id(theirs)
    problems: list[str] = []
    for field_id, field in sorted(index_by_id(written).items()):
        if field_id not in in_base:
            continue
        name = written.find_column_name(field_id) or field.name
        now = in_theirs.get(field_id)
        if now is None:
            problems.append(f"{name} (id {field_id}) was dropped")
            continue
        if isinstance(field.field_type, PrimitiveType) and field.field_type != now.field_type:
            try:
                promote(field.field_type, now.field_type)
            except ResolveError:
                problems.append(
                    f"{name} (id {field_id}) changed type from {field.field_type} to {now.field_type}"
                )
                continue
        elif type(field.field_type) is not type(now.field_type):
            problems.append(
                f"{name} (id {field_id}) changed type from {field.field_type} to {now.field_type}"
            )
            continue
        if now.required and not field.required:
            problems.append(f"{name} (id {field_id}) became required")
    return problems
