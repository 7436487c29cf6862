"""The single exception hierarchy of olympia.

Every error that olympia raises on purpose derives from :class:`OlympiaError`.
Errors from the libraries underneath (pyarrow, protobuf, fsspec, botocore) are
translated at the layer that calls them, so callers never need to catch them.
"""

from __future__ import annotations


class OlympiaError(Exception):
    """Root of every error raised by olympia."""


# --- storage -----------------------------------------------------------------


class StorageError(OlympiaError):
    """A storage call failed for a reason other than the ones below."""


class StorageFileNotFoundError(StorageError):
    """The file asked for does not exist."""


class StorageFileExistsError(StorageError):
    """Put-if-absent found the file already present (another writer won).

    ``existing`` holds the content found there when the backend read it (to
    tell the file from this call's own earlier write), else None.
    """

    def __init__(self, message: str, existing: bytes | None = None) -> None:
        super().__init__(message)
        self.existing = existing


class InvalidPathError(StorageError):
    """A path would leave the catalog prefix or uses a forbidden form."""


# --- format ------------------------------------------------------------------


class CorruptCatalogError(OlympiaError):
    """A catalog file is damaged, truncated, missing or not an olympia file."""


class CatalogNotFoundError(OlympiaError):
    """No catalog exists at the given location."""


class CatalogAlreadyExistsError(OlympiaError):
    """A catalog already exists at the given location."""


class VersionNotFoundError(OlympiaError):
    """The requested catalog version does not exist or has been expired."""


class VersionExpiredError(VersionNotFoundError):
    """The requested catalog version was expired: its root file is an
    expired-root marker, which only expiration writes (spec/format.md §2.3)."""


class InvalidArgumentError(OlympiaError, ValueError):
    """An argument of a public call has a bad value; the message names it.

    Also a :class:`ValueError`, so callers that validate input generically
    can catch it as one.
    """


class InvalidArgumentTypeError(InvalidArgumentError, TypeError):
    """An argument of a public call has the wrong type; the message names it.

    Also a :class:`TypeError` (and, through its base, a :class:`ValueError`).
    """


class InvalidDefinitionError(InvalidArgumentError):
    """A catalog definition option is unknown, of the wrong type or out of range."""


class InvalidNameError(InvalidArgumentError):
    """An object name is not a string, is empty, too long or uses forbidden characters."""


# --- catalog objects ---------------------------------------------------------


class NoSuchObjectError(OlympiaError):
    """Base class of the 'not found' errors for catalog objects."""


class NamespaceNotFoundError(NoSuchObjectError):
    """The namespace does not exist."""


class TableNotFoundError(NoSuchObjectError):
    """The table does not exist."""


class ViewNotFoundError(NoSuchObjectError):
    """The view does not exist."""


class TransactionNotFoundError(NoSuchObjectError):
    """No distributed transaction with this id exists."""


class ExportNotFoundError(NoSuchObjectError):
    """No export with this name exists."""


class ObjectAlreadyExistsError(OlympiaError):
    """Base class of the 'already exists' errors for catalog objects."""


class NamespaceAlreadyExistsError(ObjectAlreadyExistsError):
    """The namespace already exists."""


class ExportAlreadyExistsError(ObjectAlreadyExistsError):
    """An export with this name already exists."""


class TableAlreadyExistsError(ObjectAlreadyExistsError):
    """A table with this name already exists in the namespace."""


class ViewAlreadyExistsError(ObjectAlreadyExistsError):
    """A view with this name already exists in the namespace."""


class NamespaceNotEmptyError(OlympiaError):
    """The namespace still holds tables or views."""


# --- transactions ------------------------------------------------------------


class CommitConflictError(OlympiaError):
    """A commit lost against concurrent commits and cannot be rebased.

    ``version`` is the committed version that conflicted and ``rule`` names the
    conflict rule (see spec/transactions.md) that refused the commit.
    """

    def __init__(
        self, message: str, *, version: int | None = None, rule: str | None = None
    ) -> None:
        super().__init__(message)
        self.version = version
        self.rule = rule


class CommitFailedError(OlympiaError):
    """The commit could not be completed for a reason other than a conflict.

    The catalog holds either the old or the new version; the caller cannot
    tell which without reloading (the state of the commit is unknown).
    """


class CommitTimeoutError(CommitFailedError):
    """The commit took longer than the catalog's commit time limit between
    writing its first new file and publishing its root, so it published
    nothing (spec/transactions.md §8.5): the catalog is unchanged, and
    trying again is safe. Unlike its base class, the outcome is known."""


class TransactionClosedError(OlympiaError):
    """The transaction was already committed, rolled back or failed."""


class TransactionExpiredError(OlympiaError):
    """The distributed transaction passed its time to live."""


class ReadOnlyError(OlympiaError):
    """A write was attempted on a read-only view of the catalog."""
