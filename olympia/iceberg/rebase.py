"""Rebasing a table's staged commits onto a newer committed metadata, with
Iceberg's data conflict checks (spec/iceberg.md §7, §8).

A transaction staged ``commits`` on ``base``; meanwhile ``theirs`` was
committed. :func:`rebase_table` checks the rules of §8 between ``base`` and
``theirs`` and builds the transaction's result again on ``theirs``: each
snapshot the transaction added is produced again (new manifests, new manifest
list) on the newest snapshot of its branch with the same data files, removed
files, operation and summary properties; every other update is applied again
after its requirements are checked against the running metadata.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from pyiceberg.catalog.noop import NoopCatalog
from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile, ManifestEntryStatus, ManifestFile
from pyiceberg.table import Table, Transaction
from pyiceberg.table import snapshots as _snapshots
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import CHANGED_PARTITION_PREFIX, Operation, Snapshot
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    AssertRefSnapshotId,
    RemovePartitionStatisticsUpdate,
    RemoveSnapshotsUpdate,
    RemoveStatisticsUpdate,
    SetSnapshotRefUpdate,
    SetStatisticsUpdate,
    TableRequirement,
    TableUpdate,
    _update_table_metadata_log,
)
from pyiceberg.table.update.snapshot import _OverwriteFiles, _SnapshotProducer

from olympia.iceberg import filetimes
from olympia.iceberg.deletes import delete_file
from olympia.iceberg.errors import CommitConflictException
from olympia.iceberg.expressions import to_sql
from olympia.iceberg.locations import without_provider_impl
from olympia.iceberg.metadata import ROW_LINEAGE_FORMAT_VERSION
from olympia.iceberg.reads import MetadataReads, check_metadata_reads
from olympia.iceberg.updates import apply_updates
from olympia.iceberg.validation import (
    ChangedFile,
    SnapshotChanges,
    delete_applies,
    filter_matcher,
    incompatible_fields,
    partition_matcher,
    snapshot_changes,
    snapshots_after,
)

logger = logging.getLogger(__name__)

ISOLATION_LEVELS = ("snapshot", "serializable")

# Summary keys that a snapshot producer computes from the files; every other
# key of a staged snapshot's summary is a user property carried over.
_COMPUTED_SUMMARY_KEYS = frozenset(
    getattr(_snapshots, name)
    for name in (
        "ADDED_DATA_FILES",
        "ADDED_DELETE_FILES",
        "ADDED_EQUALITY_DELETES",
        "ADDED_FILE_SIZE",
        "ADDED_POSITION_DELETES",
        "ADDED_POSITION_DELETE_FILES",
        "ADDED_RECORDS",
        "DELETED_DATA_FILES",
        "DELETED_RECORDS",
        "ADDED_EQUALITY_DELETE_FILES",
        "REMOVED_DELETE_FILES",
        "REMOVED_EQUALITY_DELETES",
        "REMOVED_EQUALITY_DELETE_FILES",
        "REMOVED_FILE_SIZE",
        "REMOVED_POSITION_DELETES",
        "REMOVED_POSITION_DELETE_FILES",
        "TOTAL_EQUALITY_DELETES",
        "TOTAL_POSITION_DELETES",
        "TOTAL_DATA_FILES",
        "TOTAL_DELETE_FILES",
        "TOTAL_RECORDS",
        "TOTAL_FILE_SIZE",
        "CHANGED_PARTITION_COUNT_PROP",
        "PARTITION_SUMMARY_PROP",
        "OPERATION",
    )
)


@dataclass(frozen=True)
class StagedCommit:
    """One ``commit_table`` call staged by a transaction, in order.

    ``conflict_filter`` is the row filter of an overwrite or delete when the
    layer knows it (None: derive it from the partitions and bounds of the
    files the commit removes).
    """

    requirements: tuple[TableRequirement, ...]
    updates: tuple[TableUpdate, ...]
    conflict_filter: BooleanExpression | None = None
    #: Requirements hold against the newest metadata, as the REST
    #: specification asks of a plain commit: a rebase never carries the
    #: commit past an ``assert-ref-snapshot-id`` that no longer holds.
    strict: bool = False


@dataclass(frozen=True)
class ScanRecord:
    """A scan a transaction made of a table: its row filter and the snapshot read.

    ``snapshot_id`` None means the current snapshot of the ``base`` metadata
    given to :func:`check_scans` / :func:`rebase_table`.
    """

    row_filter: BooleanExpression = field(default_factory=AlwaysTrue)
    snapshot_id: int | None = None
    case_sensitive: bool = True
    #: Who reported the scan when its filter is not known ("" for a scan
    #: made through PyIceberg, whose filter is ``row_filter``).
    reported_by: str = ""
    #: The branch read, when not ``main``: changes are then looked for in
    #: that branch's history (``snapshot_id`` is its head when read).
    ref: str | None = None

    def described(self) -> str:
        """The scan in words, for conflict messages."""
        if self.reported_by:
            return (
                f"a scan {self.reported_by} reported (its filter is not known, so it counts as "
                f"reading every row)"
            )
        return f"a scan with filter {to_sql(self.row_filter)}"


@dataclass(frozen=True)
class Rebased:
    """The result of :func:`rebase_table`: the new staged metadata, built on
    ``theirs``, and the files written for the old staged snapshots that the
    new metadata no longer references (to delete once the commit is final).

    ``written_files`` are the manifests and manifest lists the rebase itself
    wrote (all referenced by ``metadata``): the caller deletes them if it
    does not publish ``metadata`` (a later rebase or a rollback).
    """

    metadata: TableMetadata
    obsolete_files: tuple[str, ...] = ()
    written_files: tuple[str, ...] = ()
    #: The updates that turn ``theirs`` into ``metadata``: the commits' own,
    #: with each snapshot produced again in place of the staged one.
    updates: tuple[TableUpdate, ...] = ()


def rebase_table(
    io: FileIO,
    table: str,
    base: TableMetadata,
    commits: Sequence[StagedCommit],
    theirs: TableMetadata,
    *,
    isolation: str,
    scans: Sequence[ScanRecord] = (),
    reads: MetadataReads | None = None,
    version: int | None = None,
    metadata_location: str | None = None,
) -> Rebased:
    """Validate ``commits`` (made on ``base``) against ``theirs`` and apply them again on it.

    ``table`` is the dotted identifier and ``version`` the olympia version
    that wrote ``theirs``, both for error messages. ``scans`` are the
    transaction's scans of this table (checked under SERIALIZABLE), ``reads``
    what it read of the table's metadata (:mod:`olympia.iceberg.reads`).
    ``metadata_location`` is the location of ``theirs``' metadata file: when
    given and the result differs from ``theirs``, it is appended to the
    result's metadata log, as a catalog commit does.

    On a conflict nothing the rebase wrote is left behind.

    Raises:
        olympia.iceberg.errors.CommitConflictException: a rule of spec/iceberg.md §8.
        ValueError: ``isolation`` is not ``snapshot`` or ``serializable``.
    """
    _check_isolation(isolation)
    if reads:
        updates = [u for commit in commits for u in commit.updates]
        check_metadata_reads(
            table, base, theirs, reads, updates, isolation=isolation, version=version
        )
    check_scans(io, table, base, theirs, scans, isolation=isolation, version=version)
    rebaser = _Rebaser(io, table, base, theirs, isolation, version)
    try:
        metadata = rebaser.run(commits)
    except BaseException:
        rebaser.delete_written()
        raise
    if metadata_location and metadata is not theirs:
        metadata = _update_table_metadata_log(metadata, metadata_location, theirs.last_updated_ms)
    return Rebased(
        metadata=metadata,
        obsolete_files=rebaser.obsolete_files(metadata),
        written_files=tuple(rebaser.written),
        updates=tuple(rebaser.applied),
    )


def check_scans(
    io: FileIO,
    table: str,
    base: TableMetadata,
    theirs: TableMetadata,
    scans: Sequence[ScanRecord],
    *,
    isolation: str,
    version: int | None = None,
) -> None:
    """For a table the transaction read but did not write: under SERIALIZABLE,
    refuse (rule ``scan-filter-matches``) if a change from ``base`` to
    ``theirs`` can match one of ``scans``; under SNAPSHOT, do nothing.

    A change is a data file added or removed, or a delete file added, by a
    snapshot of ``theirs``' main branch after the snapshot the scan read
    (REPLACE snapshots, which rewrite files without changing rows, are not
    changes). If the scanned snapshot is no longer in the main branch's
    history, the scan conflicts.

    Raises:
        olympia.iceberg.errors.CommitConflictException: rule ``scan-filter-matches``.
        ValueError: ``isolation`` is not ``snapshot`` or ``serializable``.
    """
    _check_isolation(isolation)
    if isolation != "serializable" or not scans:
        return
    by_start: dict[tuple[str | None, int | None], SnapshotChanges] = {}
    for scan in scans:
        start = scan.snapshot_id if scan.snapshot_id is not None else base.current_snapshot_id
        branch = scan.ref or "main"
        ref = theirs.refs.get(scan.ref) if scan.ref else None
        head = ref.snapshot_id if ref is not None else theirs.current_snapshot_id
        if scan.ref and ref is None:
            raise _conflict(
                table,
                version,
                "scan-filter-matches",
                f"branch {scan.ref} that {scan.described()} read no longer exists",
            )
        if (scan.ref, start) not in by_start:
            window = snapshots_after(theirs, head, start)
            if window is None:
                raise _conflict(
                    table,
                    version,
                    "scan-filter-matches",
                    f"snapshot {start} that {scan.described()} read is no longer "
                    f"in the history of the {branch} branch (now at snapshot {head})",
                )
            by_start[(scan.ref, start)] = snapshot_changes(
                io, (s for s in window if _operation(s) != Operation.REPLACE)
            )
        changes = by_start[(scan.ref, start)]
        matches = filter_matcher(theirs, scan.row_filter, scan.case_sensitive)
        for changed, what in _scan_changes(changes):
            if matches(changed.file):
                raise _conflict(
                    table,
                    version,
                    "scan-filter-matches",
                    f"{what} {changed.file.file_path} by snapshot {changed.snapshot_id} "
                    f"({changed.operation.value}) can match "
                    + (
                        f"{scan.described()}, of snapshot {start}"
                        if scan.reported_by
                        else f"the filter {to_sql(scan.row_filter)} of a scan of snapshot {start}"
                    ),
                )


def _scan_changes(changes: SnapshotChanges) -> Iterable[tuple[ChangedFile, str]]:
    for changed in changes.added_data:
        yield changed, "data file added"
    for changed in changes.removed_data:
        yield changed, "data file removed"
    for changed in changes.added_deletes:
        yield changed, "delete file added"


def _check_isolation(isolation: str) -> None:
    if isolation not in ISOLATION_LEVELS:
        raise ValueError(
            f"isolation must be one of {', '.join(ISOLATION_LEVELS)}, not {isolation!r}"
        )


def _conflict(table: str, version: int | None, rule: str, detail: str) -> CommitConflictException:
    where = f"version {version}" if version is not None else "the table's newer metadata"
    return CommitConflictException(
        f"Commit to table {table} conflicts with {where} (rule {rule}): {detail}",
        table=table,
        version=version,
        rule=rule,
    )


def _operation(snapshot: Snapshot) -> Operation:
    return snapshot.summary.operation if snapshot.summary is not None else Operation.OVERWRITE


def _user_summary_properties(snapshot: Snapshot) -> dict[str, str]:
    if snapshot.summary is None:
        return {}
    return {
        key: value
        for key, value in snapshot.summary.additional_properties.items()
        if key not in _COMPUTED_SUMMARY_KEYS and not key.startswith(CHANGED_PARTITION_PREFIX)
    }


def branch_targets(updates: Iterable[TableUpdate]) -> dict[int, str]:
    """Snapshot id -> branch, for the snapshots a commit adds and points a branch at."""
    added = {u.snapshot.snapshot_id for u in updates if isinstance(u, AddSnapshotUpdate)}
    targets: dict[int, str] = {}
    for update in updates:
        if (
            isinstance(update, SetSnapshotRefUpdate)
            and update.type == SnapshotRefType.BRANCH
            and update.snapshot_id in added
            and update.snapshot_id not in targets
        ):
            targets[update.snapshot_id] = update.ref_name
    return targets


def _written_by(manifest: ManifestFile, snapshot_id: int, io: FileIO) -> bool:
    """Whether the entries of ``manifest`` say snapshot ``snapshot_id`` wrote
    it: at least one entry it added or deleted, and every such entry, names
    that snapshot. A staged manifest list can claim any committed manifest
    as added by its snapshot, but not change the manifest: one written by a
    committed snapshot names that snapshot in its entries (an entry without
    a snapshot id, inherited from the list, proves nothing and keeps it)."""
    # Read without the list's added snapshot id, which PyIceberg would give
    # every entry that has none (the list is the staged, untrusted part).
    raw = ManifestFile.from_args(
        manifest_path=manifest.manifest_path,
        manifest_length=manifest.manifest_length,
        partition_spec_id=manifest.partition_spec_id,
        content=manifest.content,
        sequence_number=manifest.sequence_number,
        min_sequence_number=manifest.min_sequence_number,
    )
    try:
        entries = raw.fetch_manifest_entry(io, discard_deleted=False)
    except FileNotFoundError:
        return False
    changed = [e.snapshot_id for e in entries if e.status != ManifestEntryStatus.EXISTING]
    return bool(changed) and all(s == snapshot_id for s in changed)


class _Rebaser:
    """The state of one rebase: the running metadata ``M`` starts at ``theirs``."""

    def __init__(
        self,
        io: FileIO,
        table: str,
        base: TableMetadata,
        theirs: TableMetadata,
        isolation: str,
        version: int | None,
    ) -> None:
        self.io = io
        self.table = table
        self.base = base
        self.theirs = theirs
        self.isolation = isolation
        self.version = version
        self.written: list[str] = []
        self.applied: list[TableUpdate] = []
        self.staged: list[Snapshot] = []
        self.produced: list[int] = []
        self.id_map: dict[int, int] = {}
        self.rebuilt = False
        self._windows: dict[str, SnapshotChanges] = {}

    def conflict(self, rule: str, detail: str) -> CommitConflictException:
        return _conflict(self.table, self.version, rule, detail)

    # -- the walk over the commits -------------------------------------------------

    def run(self, commits: Sequence[StagedCommit]) -> TableMetadata:
        running = self.theirs
        ours = self.base
        for commit in commits:
            running = self.apply_commit(commit, running, ours)
            ours = apply_updates(ours, commit.updates)
        return running

    def apply_commit(
        self, commit: StagedCommit, running: TableMetadata, ours: TableMetadata
    ) -> TableMetadata:
        targets = branch_targets(commit.updates)
        rebased = set() if commit.strict else set(targets.values())
        self.check_requirements(commit.requirements, rebased, running)
        pending: list[TableUpdate] = []
        handled_refs: set[tuple[str, int]] = set()
        for index, update in enumerate(commit.updates):
            if isinstance(update, AddSnapshotUpdate):
                snapshot = update.snapshot
                self.staged.append(snapshot)
                branch = targets.get(snapshot.snapshot_id)
                current = self.apply(running, pending)
                ours_before = apply_updates(ours, commit.updates[:index]) if index else ours
                if branch is None or self.can_keep(snapshot, branch, current, ours_before):
                    pending.append(update)
                    self.produced.append(snapshot.snapshot_id)
                    continue
                pending.extend(
                    self.reproduce(snapshot, branch, current, ours_before, commit.conflict_filter)
                )
                handled_refs.add((branch, snapshot.snapshot_id))
            elif (
                isinstance(update, SetSnapshotRefUpdate)
                and (update.ref_name, update.snapshot_id) in handled_refs
            ):
                continue
            else:
                pending.append(self.remap(update))
        self.applied.extend(pending)
        return self.apply(running, pending)

    def apply(self, running: TableMetadata, updates: list[TableUpdate]) -> TableMetadata:
        if not updates:
            return running
        try:
            return apply_updates(running, updates)
        except (ValueError, CommitFailedException) as e:
            raise self.conflict(
                "update-failed", f"an update cannot be applied to the newer metadata: {e}"
            ) from e

    def check_requirements(
        self,
        requirements: Iterable[TableRequirement],
        rebased_branches: set[str],
        running: TableMetadata,
    ) -> None:
        for requirement in requirements:
            if isinstance(requirement, AssertRefSnapshotId):
                if requirement.ref in rebased_branches:
                    # The rebase puts this commit's snapshot on the newest head of
                    # the branch; the history and data rules stand in for it.
                    continue
                if requirement.snapshot_id is not None:
                    requirement = requirement.model_copy(
                        update={
                            "snapshot_id": self.id_map.get(
                                requirement.snapshot_id, requirement.snapshot_id
                            )
                        }
                    )
            try:
                requirement.validate(running)
            except CommitFailedException as e:
                raise self.conflict(
                    "requirement-failed", f"requirement {requirement.type} failed: {e}"
                ) from e

    def remap(self, update: TableUpdate) -> TableUpdate:
        """Point an update at the new id of a snapshot the rebase produced again."""
        if not self.id_map:
            return update
        get = self.id_map.get
        if isinstance(update, SetSnapshotRefUpdate):
            return update.model_copy(
                update={"snapshot_id": get(update.snapshot_id, update.snapshot_id)}
            )
        if isinstance(update, RemoveSnapshotsUpdate):
            return update.model_copy(
                update={"snapshot_ids": [get(i, i) for i in update.snapshot_ids]}
            )
        if isinstance(update, (RemoveStatisticsUpdate, RemovePartitionStatisticsUpdate)):
            return update.model_copy(
                update={"snapshot_id": get(update.snapshot_id, update.snapshot_id)}
            )
        if isinstance(update, SetStatisticsUpdate):
            new_id = get(update.statistics.snapshot_id, update.statistics.snapshot_id)
            statistics = update.statistics.model_copy(update={"snapshot_id": new_id})
            return update.model_copy(update={"statistics": statistics, "snapshot_id": new_id})
        return update

    # -- one staged snapshot ---------------------------------------------------------

    def can_keep(
        self, snapshot: Snapshot, branch: str, current: TableMetadata, ours_before: TableMetadata
    ) -> bool:
        """A staged snapshot stays as it is when nothing it was built on changed."""
        head = current.snapshot_by_name(branch)
        return (
            not self.rebuilt
            and (head.snapshot_id if head is not None else None) == snapshot.parent_snapshot_id
            and current.snapshot_by_id(snapshot.snapshot_id) is None
            and current.next_sequence_number() == ours_before.next_sequence_number()
            and getattr(current, "next_row_id", None) == getattr(ours_before, "next_row_id", None)
            and current.current_schema_id == ours_before.current_schema_id
            and current.default_spec_id == ours_before.default_spec_id
        )

    def window(self, branch: str) -> SnapshotChanges:
        """What theirs committed to ``branch`` after base's head of it (rule history-rewritten)."""
        if branch not in self._windows:
            since = self.base.refs.get(branch)
            head = self.theirs.refs.get(branch)
            since_id = since.snapshot_id if since is not None else None
            head_id = head.snapshot_id if head is not None else None
            snapshots = snapshots_after(self.theirs, head_id, since_id)
            if snapshots is None:
                raise self.conflict(
                    "history-rewritten",
                    f"snapshot {since_id}, the head of branch {branch} this commit was made on, is not an "
                    f"ancestor of the branch's head {head_id} in the newer metadata",
                )
            self._windows[branch] = snapshot_changes(self.io, snapshots)
        return self._windows[branch]

    def reproduce(
        self,
        snapshot: Snapshot,
        branch: str,
        current: TableMetadata,
        ours_before: TableMetadata,
        conflict_filter: BooleanExpression | None,
    ) -> tuple[TableUpdate, ...]:
        theirs_changes = self.window(branch)
        mine = snapshot_changes(self.io, [snapshot])
        operation = _operation(snapshot)
        if mine.added_deletes or mine.removed_deletes:
            raise self.conflict(
                "cannot-rebase",
                f"snapshot {snapshot.snapshot_id} adds or removes delete files, which the rebase cannot produce again",
            )
        added = [c.file for c in mine.added_data]
        removed = [c.file for c in mine.removed_data]
        self.validate(
            snapshot,
            operation,
            added,
            removed,
            theirs_changes,
            current,
            ours_before,
            conflict_filter,
        )
        if current.format_version >= ROW_LINEAGE_FORMAT_VERSION:
            # Its manifest list holds row ids that follow from the base, and
            # PyIceberg 0.12 cannot write version-3 manifests to produce it again.
            raise self.conflict(
                "cannot-rebase",
                f"snapshot {snapshot.snapshot_id} of a format-version {current.format_version} "
                f"table cannot be produced again on the newer metadata (its row ids would change)",
            )
        updates = self.produce(snapshot, operation, branch, added, removed, current)
        self.rebuilt = True
        return updates

    def validate(
        self,
        snapshot: Snapshot,
        operation: Operation,
        added: list[DataFile],
        removed: list[DataFile],
        theirs_changes: SnapshotChanges,
        current: TableMetadata,
        ours_before: TableMetadata,
        conflict_filter: BooleanExpression | None,
    ) -> None:
        gone = {c.file.file_path: c for c in theirs_changes.removed_data}
        for file in removed:
            if file.file_path in gone:
                by = gone[file.file_path]
                raise self.conflict(
                    "removed-file-gone",
                    f"data file {file.file_path}, which snapshot {snapshot.snapshot_id} ({operation.value}) removes, "
                    f"was already removed by snapshot {by.snapshot_id} ({by.operation.value})",
                )
        for delete in theirs_changes.added_deletes:
            for file in removed:
                if delete_applies(self.theirs, delete.file, file):
                    raise self.conflict(
                        "delete-file-added",
                        f"delete file {delete.file.file_path} added by snapshot {delete.snapshot_id} "
                        f"applies to data file {file.file_path}, which snapshot {snapshot.snapshot_id} removes",
                    )
        if self.isolation == "serializable" and operation in (
            Operation.OVERWRITE,
            Operation.DELETE,
        ):
            matches: Callable[[DataFile], bool]
            if conflict_filter is not None:
                matches = filter_matcher(self.theirs, conflict_filter)
                described = f"the filter {to_sql(conflict_filter)}"
            else:
                matches = partition_matcher(self.theirs, removed)
                described = "the partitions of the files it removes"
            for changed in theirs_changes.added_data:
                if changed.operation in (Operation.APPEND, Operation.OVERWRITE) and matches(
                    changed.file
                ):
                    raise self.conflict(
                        "added-file-matches-filter",
                        f"data file {changed.file.file_path} added by snapshot {changed.snapshot_id} "
                        f"({changed.operation.value}) can match {described} of snapshot "
                        f"{snapshot.snapshot_id} ({operation.value}), under serializable isolation",
                    )
        if added:
            written = (
                ours_before.schema_by_id(snapshot.schema_id)
                if snapshot.schema_id is not None
                else None
            )
            problems = incompatible_fields(
                written or ours_before.schema(), self.base.schema(), self.theirs.schema()
            )
            if problems:
                raise self.conflict(
                    "schema-incompatible",
                    f"snapshot {snapshot.snapshot_id} adds data files written with fields that the newer "
                    f"schema {self.theirs.current_schema_id} no longer has as written: {'; '.join(problems)}",
                )
            for file in added:
                if file.spec_id != current.default_spec_id:
                    raise self.conflict(
                        "partition-spec-changed",
                        f"data file {file.file_path} was written for partition spec {file.spec_id}, but the "
                        f"newer metadata's default partition spec is {current.default_spec_id}",
                    )

    def produce(
        self,
        snapshot: Snapshot,
        operation: Operation,
        branch: str,
        added: list[DataFile],
        removed: list[DataFile],
        current: TableMetadata,
    ) -> tuple[TableUpdate, ...]:
        """Produce the snapshot again on ``current`` with PyIceberg's own snapshot producers."""
        # PyIceberg's producers take the table's location provider from its
        # properties, which may name a class to import: never on a server.
        safe = without_provider_impl(current.properties)
        table = Table(
            identifier=tuple(self.table.split(".")),
            metadata=current
            if safe is current.properties
            else current.model_copy(update={"properties": safe}),
            metadata_location="",
            io=self.io,
            catalog=NoopCatalog("olympia-rebase"),
        )
        transaction = Transaction(table)
        properties = _user_summary_properties(snapshot)
        producer: _SnapshotProducer[object]
        if operation == Operation.APPEND and not removed:
            producer = transaction._append_snapshot_producer(properties, branch=branch)  # type: ignore[assignment]
        else:
            producer = _OverwriteFiles(  # type: ignore[assignment]
                operation=operation,
                transaction=transaction,
                io=self.io,
                branch=branch,
                snapshot_properties=properties,
            )
            # Look into every manifest: which files go is decided by the explicit list.
            producer.delete_by_predicate(AlwaysTrue())
        if current.snapshot_by_id(snapshot.snapshot_id) is None:
            producer._snapshot_id = snapshot.snapshot_id
        for file in added:
            producer.append_data_file(file)
        for file in removed:
            producer.delete_data_file(file)
        try:
            updates, _requirements = producer._commit()
        except ValidationException as e:
            # The producer found a file to remove that is not live on the branch head.
            raise self.conflict(
                "removed-file-gone",
                f"snapshot {snapshot.snapshot_id} ({operation.value}) cannot be produced again: {e}",
            ) from e
        finally:
            self.written.extend(producer._written_manifests)
            self.written.extend(producer._written_manifest_lists)
        self.id_map[snapshot.snapshot_id] = producer.snapshot_id
        self.produced.append(producer.snapshot_id)
        return updates

    # -- files -------------------------------------------------------------------------

    def obsolete_files(self, metadata: TableMetadata) -> tuple[str, ...]:
        """Manifest lists and manifests of the staged snapshots that ``metadata`` no longer references.

        Staged metadata may come from a REST client, and a staged snapshot
        can name a committed file as its own (its manifest list, or a
        manifest it lists as added by itself): so every manifest list of
        ``metadata``'s snapshots, and every manifest of the snapshots its
        branches and tags point to (besides the produced ones), is
        referenced too; and a file that storage says was written before the
        base was committed is kept (a snapshot expired from the metadata
        wrote it, and the catalog versions from before the expiry read it)."""
        if not self.rebuilt:
            return ()
        referenced = {snapshot.manifest_list for snapshot in metadata.snapshots}
        heads = {ref.snapshot_id for ref in metadata.refs.values()}
        for snapshot_id in [*self.produced, *sorted(heads - set(self.produced))]:
            snapshot = metadata.snapshot_by_id(snapshot_id)
            if snapshot is not None:
                referenced.update(m.manifest_path for m in snapshot.manifests(self.io))
        obsolete: list[str] = []
        for snapshot in self.staged:
            own = [snapshot.manifest_list]
            own += [
                m.manifest_path
                for m in snapshot.manifests(self.io)
                if m.added_snapshot_id == snapshot.snapshot_id
                and m.manifest_path not in referenced
                and _written_by(m, snapshot.snapshot_id, self.io)
            ]
            obsolete += [path for path in own if path not in referenced and path not in obsolete]
        if obsolete:
            # A file only an older catalog version reads (a snapshot expired
            # from the metadata) was written before the base was committed.
            older = filetimes.written_before(self.io, obsolete, self.base.last_updated_ms)
            obsolete = [path for path in obsolete if path not in older]
        return tuple(obsolete)

    def delete_written(self) -> None:
        for path in self.written:
            try:
                delete_file(self.io, path)
            except Exception:  # best effort: an orphan file is harmless
                logger.warning(
                    "could not delete %s written by an abandoned rebase", path, exc_info=True
                )
        self.written.clear()
