"""Rebasing a table's staged commits onto a newer committed metadata, with
Iceberg's data conflict checks (spec/iceberg.md §7, §8).

Interface fixed by the lead; the bodies are being written (issue 8).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.io import FileIO
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import TableRequirement, TableUpdate


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


@dataclass(frozen=True)
class ScanRecord:
    """A scan a transaction made of a table: its row filter and the snapshot read."""

    row_filter: BooleanExpression = field(default_factory=AlwaysTrue)
    snapshot_id: int | None = None
    case_sensitive: bool = True


@dataclass(frozen=True)
class Rebased:
    """The result of :func:`rebase_table`: the new staged metadata, built on
    ``theirs``, and the files written for the old staged snapshots that the
    new metadata no longer references (to delete once the commit is final)."""

    metadata: TableMetadata
    obsolete_files: tuple[str, ...] = ()


def rebase_table(
    io: FileIO,
    table: str,
    base: TableMetadata,
    commits: Sequence[StagedCommit],
    theirs: TableMetadata,
    *,
    isolation: str,
    scans: Sequence[ScanRecord] = (),
    version: int | None = None,
) -> Rebased:
    """Validate ``commits`` (made on ``base``) against ``theirs`` and apply them again on it.

    ``table`` is the dotted identifier and ``version`` the olympia version
    that wrote ``theirs``, both for error messages. ``scans`` are the
    transaction's scans of this table (checked under SERIALIZABLE).

    Raises:
        olympia.iceberg.errors.CommitConflictException: a rule of spec/iceberg.md §8.
    """
    raise NotImplementedError


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
    ``theirs`` can match one of ``scans``; under SNAPSHOT, do nothing."""
    raise NotImplementedError
