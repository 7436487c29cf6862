"""Errors of the Iceberg layer: PyIceberg's exception types, so PyIceberg
users catch what they expect, that are also olympia errors."""

from __future__ import annotations

from pyiceberg.exceptions import CommitFailedException

from olympia.errors import CommitConflictError, CommitTimeoutError


class CommitConflictException(CommitFailedException, CommitConflictError):
    """A commit refused because a concurrent commit conflicts with it.

    ``table`` names the table (dotted identifier), ``version`` the olympia
    catalog version that conflicted (``None`` when no version is known, e.g.
    a requirement that failed against the transaction's own view), ``rule``
    the rule of spec/iceberg.md §8 or spec/transactions.md §4.
    """

    def __init__(self, message: str, *, table: str, version: int | None, rule: str) -> None:
        CommitConflictError.__init__(self, message, version=version, rule=rule)
        self.table = table


class CommitTimeoutException(CommitFailedException, CommitTimeoutError):
    """A commit that took longer than the catalog's commit time limit and
    therefore published nothing (spec/transactions.md §8.5): the table is
    unchanged, and committing again is safe."""
