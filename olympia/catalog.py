"""The catalog API: opening and creating catalogs, transactions, time travel,
rollback, export and expiration."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from olympia import layout, maintenance, tree, validate
from olympia.codec import CommitInfo
from olympia.definition import FORMAT_VERSION, ISOLATION_LEVELS, build_definition
from olympia.errors import (
    CatalogAlreadyExistsError,
    CommitConflictError,
    CorruptCatalogError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    VersionExpiredError,
    VersionNotFoundError,
)
from olympia.layout import MAX_VERSION
from olympia.maintenance import ExpireResult, FileCheck, VersionInfo
from olympia.node import EMPTY_LEAF, Node
from olympia.objects import ObjectChange, TransactionInfo
from olympia.proto import objects_pb2 as pb
from olympia.reader import CatalogVersion
from olympia.storage import Storage, open_storage
from olympia.store import DEFAULT_CACHE_BYTES, CatalogStore
from olympia.transaction import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_RECOVER_AFTER_SECONDS,
    Transaction,
    check_isolation,
    drop_transaction_objects,
    resume,
)


class Catalog:
    """An olympia catalog at one location. Cheap to keep; every read of
    :attr:`version` probes storage afresh."""

    def __init__(
        self, store: CatalogStore, uri: str, storage_options: dict[str, Any] | None = None
    ) -> None:
        self._store = store
        self.uri = uri
        self.storage_options = storage_options

    @property
    def store(self) -> CatalogStore:
        return self._store

    @property
    def version(self) -> int:
        """The latest committed version."""
        return self._store.latest_version()

    @property
    def oldest_version(self) -> int:
        """The oldest version kept (versions below may have been expired)."""
        return self._store.oldest_version()

    @property
    def definition(self) -> pb.CatalogDefinition:
        return self._store.load_latest().definition

    # --- reading ---------------------------------------------------------------------

    def at_version(self, version: int) -> CatalogVersion:
        """A read-only view of ``version``.

        Raises:
            VersionNotFoundError: the version does not exist or was expired.
            InvalidArgumentError: ``version`` is not an integer in [0, 2**63).
        """
        validate.require_version("version", version)
        # The floor is read from storage even when the root is cached.
        return CatalogVersion(self._store, self._store.load_root(version, fresh=True))

    def latest(self) -> CatalogVersion:
        """A read-only view of the latest version."""
        # Starts over if expiration removes the version found before it is read.
        return CatalogVersion(self._store, self._store.load_latest())

    def as_of(self, when: datetime) -> CatalogVersion:
        """A read-only view of the last version created at or before ``when``.

        Raises:
            VersionNotFoundError: every retained version is newer.
            InvalidArgumentError: ``when`` is not a timezone-aware datetime.
        """
        validate.require_datetime("when", when)
        return self.at_version(maintenance.version_as_of(self._store, when))

    def history(self, since: int | None = None) -> list[VersionInfo]:
        """Every retained version (from ``since`` if given), oldest first.
        A version published by group commit holds several transactions:
        :attr:`VersionInfo.transactions` lists each with its own id, begin
        version, isolation and actions."""
        validate.require_optional_version("since", since)
        start = max(self.oldest_version, since or 0)
        out: list[VersionInfo] = []
        for v in range(start, self.version + 1):
            try:
                out.append(maintenance.version_info(self._store, self._store.load_root(v)))
            except VersionExpiredError:
                # A marker proves the version was expired, whatever vn/oldest
                # says (a floor file lost or rewritten is fsck's to report).
                continue
            except VersionNotFoundError:
                if v >= self.oldest_version:
                    raise  # not expired meanwhile: really missing
        return out

    def diff(self, from_version: int, to_version: int) -> list[ObjectChange]:
        """The objects added, removed or changed from ``from_version`` to
        ``to_version``, in key order (namespaces, tables, views, transactions).

        Reads only the tree nodes that differ between the two versions.

        Raises:
            VersionNotFoundError: a version does not exist or was expired.
            InvalidArgumentError: a version is not an integer in [0, 2**63).
        """
        validate.require_version("from_version", from_version)
        validate.require_version("to_version", to_version)
        a = self.at_version(from_version)
        b = self.at_version(to_version)
        keys = b.keys
        out: list[ObjectChange] = []
        with self._store.reading(min(from_version, to_version)):
            for key, va, vb in tree.diff(a.root.node, b.root.node, self._store.load_node):
                if va is not None and vb is not None:
                    if self._store.read_value(va) == self._store.read_value(vb):
                        continue
                    change = "changed"
                else:
                    change = "added" if va is None else "removed"
                decoded = keys.decode(key)
                out.append(ObjectChange(decoded.object_type.name.lower(), decoded.parts, change))
        return out

    # --- transactions ---------------------------------------------------------------

    def begin(
        self,
        isolation: str | None = None,
        *,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        message: str | None = None,
        author: str | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> Transaction:
        """Start a transaction at the latest version.

        ``isolation`` is ``"snapshot"`` or ``"serializable"`` (default: the
        catalog definition's ``default_isolation``). ``max_attempts`` bounds
        the attempts of its commit (1 to 2**31, default 100): a commit that
        loses the race for a new version retries at once on the newer
        version, and raises ``CommitConflictError`` with rule
        ``retries-exhausted`` only after losing ``max_attempts`` races in a
        row with nothing conflicting (spec/transactions.md §3).

        ``message``, ``author`` and ``properties`` (strings; a mapping of
        strings) are the commit metadata stored with the transaction in the
        version that commits it and returned by :meth:`history`; they can
        also be set later with :meth:`Transaction.set_commit_info`. Bounds:
        message 64 KiB, author 1 KiB, 100 properties of keys up to 256 bytes
        and values up to 4 KiB (UTF-8; spec/transactions.md §1.1).

        Raises:
            InvalidArgumentError: bad ``isolation``, ``max_attempts`` or
                commit metadata (InvalidArgumentTypeError for a value that
                is not a string).
        """
        _check_begin(isolation, max_attempts)
        info = CommitInfo.checked(message, author, properties)
        root = self._store.load_latest()
        return Transaction(
            self._store,
            root,
            check_isolation(isolation, root.definition),
            max_attempts=max_attempts,
            commit_info=info,
        )

    def transaction(
        self,
        isolation: str | None = None,
        *,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        message: str | None = None,
        author: str | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> Transaction:
        """Like :meth:`begin`, for ``with cat.transaction() as txn:`` (commits
        on a clean exit, rolls back on an exception)."""
        _check_begin(isolation, max_attempts)
        return self.begin(
            isolation,
            max_attempts=max_attempts,
            message=message,
            author=author,
            properties=properties,
        )

    def resume(
        self,
        txn_id: str,
        *,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        recover_after_seconds: float = DEFAULT_RECOVER_AFTER_SECONDS,
        expired: bool = False,
    ) -> Transaction:
        """Continue a distributed transaction, in this or any other process.

        If a process claimed its commit or rollback and died before
        publishing it, the returned handle can only finish that: ``commit()``
        (for a commit claim) or ``rollback()``; this is allowed once the claim
        is ``recover_after_seconds`` old (spec/transactions.md §6.5).

        With ``expired=True``, a transaction past its time to live (whose
        object expiration has not dropped yet) is resumed too, as a handle
        that can only ``rollback()`` it (spec/transactions.md §6.6): a layer
        above the core deletes what the transaction wrote that way.

        Raises:
            TransactionNotFoundError, TransactionExpiredError, TransactionClosedError
            (closed, or claimed by another process less than
            ``recover_after_seconds`` ago).
            InvalidNameError: ``txn_id`` is not a transaction id.
        """
        validate.require_transaction_id("txn_id", txn_id)
        validate.require_int("max_attempts", max_attempts, 1, MAX_ATTEMPTS)
        validate.require_seconds("recover_after_seconds", recover_after_seconds)
        validate.require_bool("expired", expired)
        return resume(self._store, txn_id, max_attempts, recover_after_seconds, expired)

    def list_transactions(self, include_expired: bool = False) -> list[TransactionInfo]:
        """The open distributed transactions (and, if asked, expired ones not yet removed)."""
        validate.require_bool("include_expired", include_expired)
        now = time.time() * 1000
        infos = map(TransactionInfo.from_proto, maintenance.distributed_records(self._store))
        return [t for t in infos if include_expired or t.expires_at_millis >= now]

    # --- maintenance ----------------------------------------------------------------

    def rollback_to(
        self,
        version: int,
        *,
        message: str | None = None,
        author: str | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> int:
        """Publish a new version equal to ``version``; return the new version number.

        The new version records ``version`` as its rollback target
        (``VersionInfo.rollback_to`` in :meth:`history`), and the commit
        metadata given, as a transaction's (:meth:`begin`; same bounds).

        Raises:
            VersionNotFoundError: ``version`` does not exist or was expired.
            InvalidArgumentError: ``version`` is not an integer in [0, 2**63),
                or bad commit metadata.
        """
        validate.require_version("version", version)
        info = CommitInfo.checked(message, author, properties)
        return maintenance.rollback_to(self._store, version, commit_info=info)

    def export_snapshot(
        self,
        name: str,
        target_uri: str,
        mode: str = "full",
        storage_options: dict[str, Any] | None = None,
    ) -> int:
        """Copy the latest version to a new catalog at ``target_uri`` and pin it.

        ``mode="full"`` copies every retained version; ``"minimal"`` only the
        latest tree, as the target's version 0. Returns the exported version.

        Raises:
            CatalogAlreadyExistsError: the target already holds a catalog.
            InvalidArgumentError: a bad argument (InvalidNameError for ``name``).
            OlympiaError: an export with this name exists.
        """
        validate.require_export_name("name", name)
        validate.require_location("target_uri", target_uri)
        validate.require_choice("mode", mode, ("full", "minimal"), fold_case=False)
        validate.require_storage_options("storage_options", storage_options)
        return maintenance.export_snapshot(self._store, name, target_uri, mode, storage_options)

    def drop_export(self, name: str) -> None:
        """Unpin the version of export ``name``."""
        validate.require_export_name("name", name)
        maintenance.drop_export(self._store.storage, name)

    def expire_versions(
        self,
        older_than: datetime | None = None,
        keep_last: int | None = None,
        grace_seconds: float = 3600.0,
        allow_short_grace: bool = False,
        dry_run: bool = False,
    ) -> ExpireResult:
        """Move the oldest-version floor and delete unreachable files.

        Keeps every version created at or after ``older_than`` (and the one
        in effect at that moment) and the last ``keep_last`` versions. With
        neither, the catalog definition's retention decides (spec/format.md
        §7): every version created less than ``expire_max_age_millis`` (five
        days by default) before this call, the one in effect at that moment,
        and at least the newest ``expire_min_versions`` (1 by default); so
        ``expire_versions()`` is ``expire_versions(older_than=now - max age,
        keep_last=min versions)``. Also kept: every version pinned by an
        export or a running rollback, and everything open distributed
        transactions need. Files created less than ``grace_seconds`` before
        this call started are never deleted, since they may belong to a
        commit in flight; older temporary files of killed writers and lapsed
        pins are removed. A run killed at any point is completed by the next
        one (spec/transactions.md §8.3).

        ``grace_seconds`` must be at least twice the catalog's commit time
        limit (five minutes unless the catalog was created with another
        ``commit_time_limit_millis``), which is what makes deleting safe
        beside writers (spec/transactions.md §8.5). ``allow_short_grace``
        lifts that check, for a catalog nobody writes to meanwhile.

        ``dry_run`` writes and deletes nothing: the result tells what a run
        now would do (``expired_versions``, the ``deleted_*`` counts, and
        every file in ``paths``). Distributed transactions past their TTL
        are listed in ``dropped_transactions``; a real run first publishes
        one version that drops them, so its own figures count that version.

        Raises:
            InvalidArgumentError: ``older_than`` is not a timezone-aware
                datetime, ``keep_last`` not a positive integer,
                ``grace_seconds`` not a finite number >= 0, or shorter than
                twice the commit time limit without ``allow_short_grace``,
                ``dry_run`` or ``allow_short_grace`` not a bool.
            CorruptCatalogError: a kept file is missing or damaged, or a pin
                or export record cannot be read (the error names it and how
                to fix it); nothing is deleted then.
        """
        validate.require_optional_datetime("older_than", older_than)
        if keep_last is not None:
            validate.require_int("keep_last", keep_last, 1, MAX_VERSION + 1)
        validate.require_seconds("grace_seconds", grace_seconds)
        validate.require_bool("allow_short_grace", allow_short_grace)
        validate.require_bool("dry_run", dry_run)
        # Before anything that decides what is kept is read (§8.3 step 0).
        started = maintenance.expiration_clock_millis()
        if not allow_short_grace:
            maintenance.check_grace(self._store, grace_seconds)
        listed = self.list_transactions(include_expired=True)
        now = time.time() * 1000
        expired = [t.id for t in listed if t.expires_at_millis < now]
        if expired and not dry_run:  # past their TTL: nobody may resume them any more
            drop_transaction_objects(self._store, expired)
        open_txns = {t.id: t.begin_version for t in listed if t.expires_at_millis >= now}
        return maintenance.expire_versions(
            self._store,
            older_than,
            keep_last,
            started - grace_seconds * 1000,
            open_txns,
            started_millis=started,
            dry_run=dry_run,
            dropped_transactions=expired,
        )

    def fsck(self) -> FileCheck:
        """Check the catalog's files (spec/transactions.md §8.3): every file a
        kept version, a pin or an open distributed transaction needs is present
        and undamaged (a damaged or missing root of a kept version is listed
        under ``damaged`` or ``missing`` like any file); the result also lists
        the state files of finished distributed transactions, which the next
        expiration removes (``awaiting_expiration``), and the orphans, files
        nothing kept needs."""
        return maintenance.check_files(self._store)

    # --- lifecycle -------------------------------------------------------------------

    def close(self) -> None:
        self._store.close()

    def __enter__(self) -> Catalog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Catalog({self.uri!r})"


#: Upper bound of ``max_attempts`` (any larger number means "forever" in practice).
MAX_ATTEMPTS = 1 << 31


def _check_begin(isolation: object, max_attempts: object) -> None:
    if isolation is not None:
        validate.require_choice("isolation", isolation, ISOLATION_LEVELS)
    validate.require_int("max_attempts", max_attempts, 1, MAX_ATTEMPTS)


def _check_uri(uri: object, storage_options: object) -> None:
    if not isinstance(uri, Storage):
        validate.require_location("uri", uri)
    validate.require_storage_options("storage_options", storage_options)


def create_catalog(
    uri: str | Storage,
    storage_options: dict[str, Any] | None = None,
    *,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
    **definition: Any,
) -> Catalog:
    """Create a new, empty catalog (version 0) at ``uri``.

    ``definition`` options are listed in spec/format.md §7; ``cache_bytes``
    is as for :func:`load_catalog`.

    Raises:
        CatalogAlreadyExistsError: a catalog already exists there.
        InvalidDefinitionError: a definition option is unknown or out of range.
        StorageError: the storage could not be reached.
        InvalidArgumentError: a bad ``uri`` or ``storage_options``; ``uri``
            lies in a folder of another catalog (``<catalog>/pins/x``), or
            its own catalog folders (``node/``, ``pins/``, ...) hold files.
    """
    _check_uri(uri, storage_options)
    _check_cache_bytes(cache_bytes)
    catalog_def = build_definition(definition)
    storage = uri if isinstance(uri, Storage) else open_storage(uri, storage_options)
    store = CatalogStore(storage, cache_bytes)
    if storage.list(layout.VERSION_DIR):
        raise CatalogAlreadyExistsError(f"a catalog already exists at {storage.location}")
    _check_placement(storage, storage_options)
    try:
        store.commit(0, EMPTY_LEAF, catalog_def, transaction_id=store.new_transaction_id())
    except CommitConflictError:
        raise CatalogAlreadyExistsError(f"a catalog already exists at {storage.location}") from None
    return Catalog(store, uri if isinstance(uri, str) else storage.location, storage_options)


def _check_placement(storage: Storage, storage_options: dict[str, Any] | None) -> None:
    """Refuse to create a catalog where another catalog's files would be
    taken for its own, or its files for another's (spec/format.md §2): in a
    folder of another catalog (``<other>/pins/x``: the other catalog's
    expiration would read its files as pin records, its orphan check as
    orphans to delete), or where the catalog's own folders already hold files
    (a catalog inside ``node/`` or ``pins/`` of the new one)."""
    for folder in layout.CATALOG_FOLDERS[1:]:
        if folder != layout.TMP_DIR and storage.list(folder):
            raise InvalidArgumentError(
                f"cannot create a catalog at {storage.location}: its folder {folder}/ already "
                f"holds files (another catalog's, or left from one), which this catalog would "
                f"take for its own; create it in an empty folder"
            )
    location = storage.location
    scheme, sep, rest = location.partition("://")
    if not sep:  # a local folder: symbolic links resolved, as the files are reached
        scheme, rest = "", os.path.realpath(location)
    segments = rest.split("/")
    first = 1 if sep else 0  # an S3 or memory location keeps its bucket or name
    for i in range(max(first, 1), len(segments)):
        if segments[i] not in layout.CATALOG_FOLDERS:
            continue
        parent = "/".join(segments[:i]) or "/"
        if sep:
            parent = f"{scheme}://{parent}"
        if parent != location and open_storage(parent, storage_options).list(layout.VERSION_DIR):
            raise InvalidArgumentError(
                f"cannot create a catalog at {location}: it lies in folder {segments[i]}/ of "
                f"the catalog at {parent}, whose files would be taken for that catalog's "
                f"own (or deleted as its orphans); create it outside that catalog's folders"
            )


def load_catalog(
    uri: str | Storage,
    storage_options: dict[str, Any] | None = None,
    *,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
) -> Catalog:
    """Open the catalog at ``uri``.

    ``cache_bytes`` bounds the memory the catalog object keeps for files it
    read or wrote (decoded nodes, definition files, roots; estimated, not
    measured), 256 MiB by default; 0 keeps nothing, so every read goes to
    storage. Files never change once written, so the cache holds no stale
    entries: its size trades memory for reads.

    Raises:
        CatalogNotFoundError: no catalog exists there.
        CorruptCatalogError: the latest root is damaged or of an unknown format version.
        InvalidArgumentError: a bad ``uri`` or ``storage_options``.
    """
    _check_uri(uri, storage_options)
    _check_cache_bytes(cache_bytes)
    storage = uri if isinstance(uri, Storage) else open_storage(uri, storage_options)
    store = CatalogStore(storage, cache_bytes)
    root = store.load_latest()
    if root.definition.format_version > FORMAT_VERSION:
        raise CorruptCatalogError(
            f"catalog at {storage.location} has format version {root.definition.format_version}; "
            f"this olympia reads version {FORMAT_VERSION}"
        )
    if root.definition.format_version >= 2 and _has_padded_keys(root.node):
        raise CorruptCatalogError(
            f"catalog at {storage.location} was written by a pre-release build of format "
            f"version 2, whose object keys are padded (spec/format.md §1): this olympia would "
            f"not find its objects by name and would write duplicates beside them, so it "
            f"refuses it; open it with the build that wrote it and copy its objects into a "
            f"new catalog"
        )
    return Catalog(store, uri if isinstance(uri, str) else storage.location, storage_options)


def _has_padded_keys(root: Node) -> bool:
    """Whether the keys of the latest root (its own keys: a leaf's objects or
    an internal node's pivots, which are object keys) are padded ones. A
    compact key never ends with a space nor holds two: names hold no white
    space, and transaction ids are ``[A-Za-z0-9_-]`` (spec/format.md §5)."""
    return any(key.endswith(" ") or "  " in key for key in root.keys)


def _check_cache_bytes(cache_bytes: object) -> None:
    if isinstance(cache_bytes, bool) or not isinstance(cache_bytes, int):
        raise InvalidArgumentTypeError(
            f"'cache_bytes' must be an int (bytes), got {type(cache_bytes).__name__}"
        )
    if cache_bytes < 0:
        raise InvalidArgumentError(f"'cache_bytes' must be 0 or more bytes, got {cache_bytes}")


__all__ = ["Catalog", "CatalogVersion", "create_catalog", "load_catalog"]
