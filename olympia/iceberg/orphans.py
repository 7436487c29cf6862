"""Removing a table's orphan files without breaking catalog history
(spec/iceberg.md §4, "Orphan files").

Iceberg's own clean-up (Spark's ``remove_orphan_files``) counts as orphans
every file under the table's location that the table's *current* metadata
does not reach. In an olympia catalog that is not enough: every kept
catalog version is readable (time travel, ``rollback_to``, exports), and a
kept version may name metadata the current one does not know: the table
before a catalog rollback, the table that was dropped and created again at
the same place, metadata files that ``write.metadata.previous-versions-max``
dropped from the log. Here a file is an orphan only when the metadata of no
table of any kept version (the floor up to the latest, and pinned versions)
reaches it, nor the staged metadata of an open distributed transaction, and
storage says it was written before ``older_than``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs
from pyiceberg.io import FileIO
from pyiceberg.typedef import Identifier

from olympia import errors as oe
from olympia import validate
from olympia.iceberg import names, purge
from olympia.iceberg.deletes import delete_file
from olympia.iceberg.locations import LocationNotAllowedError, is_under
from olympia.maintenance import read_pins
from olympia.proto.actions_pb2 import ActionType

if TYPE_CHECKING:
    from olympia.iceberg.catalog import OlympiaCatalog

logger = logging.getLogger(__name__)

#: The age below which a file is never an orphan by default, and the least
#: ``older_than`` may ask for: Iceberg's own defaults (a writer may be
#: between writing a file and committing it).
DEFAULT_AGE = timedelta(days=3)
MIN_AGE = timedelta(hours=24)

_TABLE_WRITES = (ActionType.TABLE_CREATE, ActionType.TABLE_UPDATE, ActionType.TABLE_RENAME)
_VIEW_WRITES = (ActionType.VIEW_CREATE, ActionType.VIEW_REPLACE)


@dataclass(frozen=True)
class OrphanFiles:
    """What :func:`remove_orphan_files` found: the orphan files, deleted
    unless ``dry_run``."""

    files: tuple[str, ...]
    dry_run: bool
    #: The folder that was listed.
    location: str


def remove_orphan_files(
    owner: OlympiaCatalog,
    identifier: str | Identifier,
    *,
    older_than: datetime | None = None,
    location: str | None = None,
    dry_run: bool = False,
    staged: Iterable[str] = (),
) -> OrphanFiles:
    """Delete the files under the location of table ``identifier`` (or under
    ``location``, a folder inside one of the table's places) that no kept
    catalog version and no open distributed transaction reaches, nor the
    table metadata in ``staged`` (what transactions whose state is not in
    the catalog staged: a REST server passes its open local ones), written
    before ``older_than`` (default: three days ago; at least 24 hours ago).

    Raises:
        NoSuchTableError: no such table.
        olympia.InvalidArgumentTypeError, olympia.InvalidArgumentError: an
            argument of the wrong type, a naive ``older_than``.
        ValueError: ``older_than`` is less than 24 hours ago, or
            ``location`` is not inside the table's location or a
            ``write.*.path`` of it.
        olympia.OlympiaError: the metadata of a kept table, a manifest list
            or a manifest it names cannot be read, or the files cannot be
            listed; nothing was deleted.
    """
    older_than = validate.require_optional_datetime("older_than", older_than)
    location = validate.require_optional_text("location", location, non_empty=True)
    dry_run = validate.require_bool("dry_run", dry_run)
    now = datetime.now(UTC)
    if older_than is None:
        older_than = now - DEFAULT_AGE
    if older_than > now - MIN_AGE:
        raise ValueError(
            f"older_than {older_than.isoformat()} is less than 24 hours ago: a file that young "
            f"may belong to a commit in progress"
        )
    table = owner.load_table(identifier)
    namespace, name = names.table_name(table.name())
    places = owner.table_places(table.metadata_location)
    base = location if location is not None else table.metadata.location
    try:
        where = owner.locations.check(base, "location")
    except LocationNotAllowedError as exc:  # malformed, reserved, or not allowed: says which
        raise ValueError(str(exc)) from None
    if not any(is_under(where, p) for p in places):
        raise ValueError(
            f"location {base!r} is not inside the location or a write.*.path of table "
            f"{namespace}.{name} ({', '.join(places) or 'none readable'})"
        )
    # Listed as checked: the normalised spelling, never the caller's own.
    io = owner._load_file_io(location=where)
    listed = _listing(io, where)
    cutoff = older_than.timestamp() * 1000
    candidates = [
        (path, normal)
        for path, modified in listed
        if modified is not None
        and modified < cutoff
        and (normal := purge.normal_path(owner, path)) is not None
    ]
    if not candidates:
        return OrphanFiles((), dry_run, where)
    # Every table and view of the kept versions: a table's files need not
    # lie under its own places (a write.data.path it gave up since, a table
    # dropped and another created inside its folder), so none is left out.
    catalog = owner.olympia
    in_force = time.time() * 1000
    pins = [p for p in read_pins(catalog.store.storage) if not p.lapsed(in_force)]
    versions = purge._kept_versions(owner, pins)
    staged = list(staged)  # transactions whose state is not in the catalog (a server's own)
    kept = _reached(owner, versions, staged)
    # A commit that landed meanwhile may name one of them (add_files, a
    # register of older metadata): the versions since are read once more
    # just before deleting.
    newest = catalog.version
    if newest > versions[-1]:
        kept |= _reached(owner, list(range(versions[-1], newest + 1)), staged)
    orphans = [path for path, normal in candidates if normal not in kept]
    if not dry_run:
        for path in orphans:
            try:
                delete_file(io, path)
            except FileNotFoundError:
                continue
    return OrphanFiles(tuple(orphans), dry_run, where)


def _reached(owner: OlympiaCatalog, versions: list[int], staged: list[str]) -> set[str]:
    """Every file (normalised) that a table or view of one of ``versions``
    reaches, or one staged by an open distributed transaction or named in
    ``staged`` (table metadata locations): a view its metadata file, a
    table what :func:`purge.reachable_files` lists.

    Raises:
        olympia.OlympiaError: one of them cannot be read in full.
    """
    tables, views = _metadata_locations(owner, versions)
    staged_tables, staged_views = _staged_by_open_transactions(owner)
    out = {purge.normal_path(owner, v) for v in (*views, *staged_views)}
    for metadata_location in dict.fromkeys((*tables, *staged_tables, *staged)):
        try:
            metadata = owner.read_metadata(metadata_location)
            io = owner._load_file_io(location=metadata_location)
            reached = purge.reachable_files(io, metadata, metadata_location, strict=True)
        except Exception as exc:  # whatever cannot be read may reach any file
            raise oe.OlympiaError(
                f"cannot tell which files are orphans: table metadata {metadata_location} of a "
                f"kept catalog version, or a file it names, cannot be read ({exc}); nothing "
                f"was deleted"
            ) from None
        out.update(purge.normal_path(owner, f) for f in reached)
    out.discard(None)
    return out  # type: ignore[return-value]  # None discarded


def _metadata_locations(owner: OlympiaCatalog, versions: list[int]) -> tuple[list[str], list[str]]:
    """(table metadata locations, view metadata locations) of every table
    and view of ``versions``."""
    found: dict[str, dict[str, None]] = {"table": {}, "view": {}}
    for kind, location in purge.object_metadata_locations(owner, versions, ("table", "view")):
        if location:
            found[kind][location] = None
    return list(found["table"]), list(found["view"])


def _staged_by_open_transactions(owner: OlympiaCatalog) -> tuple[list[str], list[str]]:
    """(table, view) metadata locations the open distributed transactions staged."""
    catalog = owner.olympia
    tables: list[str] = []
    views: list[str] = []
    for info in catalog.list_transactions(include_expired=True):
        try:
            txn = catalog.resume(info.id, recover_after_seconds=0, expired=True)
        except oe.TransactionNotFoundError:
            continue  # ended meanwhile: what it committed is in the latest version
        except oe.OlympiaError as exc:
            raise oe.OlympiaError(
                f"cannot tell which files are orphans: open distributed transaction "
                f"{info.id} cannot be read ({exc}); nothing was deleted"
            ) from None
        for action in txn.actions:
            if action.type in _TABLE_WRITES and action.table.metadata_location:
                tables.append(action.table.metadata_location)
            elif action.type in _VIEW_WRITES and action.view.metadata_location:
                views.append(action.view.metadata_location)
    return tables, views


def _listing(io: FileIO, location: str) -> list[tuple[str, float | None]]:
    """Every file under folder ``location`` with when storage says it was
    written (ms since the epoch; None: unknown), spelt with ``location``'s
    own prefix, but hidden ones (:func:`_hidden`) and, on a local file
    system, those whose real path lies elsewhere (a symbolic link leads
    there). Through the file system of PyIceberg's PyArrow or fsspec FileIO.

    Raises:
        olympia.OlympiaError: the FileIO cannot list, or the listing failed.
    """
    probe: Any = io.new_input(location.rstrip("/") + "/")
    try:
        if hasattr(probe, "_filesystem"):  # PyArrowFile
            fs: pafs.FileSystem = probe._filesystem
            root = probe._path.rstrip("/")
            infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
            found: Iterable[tuple[str, Any]] = (
                (i.path, i.mtime) for i in infos if i.type == pafs.FileType.File
            )
        elif hasattr(probe, "_fs"):  # FsspecInputFile
            spec = probe._fs
            root = spec._strip_protocol(location).rstrip("/")
            details = spec.find(root, detail=True)
            found = (
                (
                    p,
                    next(
                        (d[k] for k in ("mtime", "LastModified", "last_modified") if d.get(k)), None
                    ),
                )
                for p, d in details.items()
                if d.get("type", "file") == "file"
            )
        else:
            raise oe.OlympiaError(
                f"cannot list {location}: FileIO {type(io).__name__} cannot list files"
            )
        out: list[tuple[str, float | None]] = []
        prefix = location.rstrip("/")
        local = location.startswith("file:") or location.startswith("/")
        real_root = os.path.realpath(root) if local else ""
        for path, stamp in found:
            if not path.startswith(root + "/") or _hidden(path[len(root) + 1 :]):
                continue
            if local and not os.path.realpath(path).startswith(real_root + os.sep):
                continue  # reached through a symbolic link to elsewhere: not the folder's
            out.append((prefix + path[len(root) :], _millis(stamp)))
        return out
    except oe.OlympiaError:
        raise
    except Exception as exc:  # pyarrow's and fsspec's errors
        raise oe.OlympiaError(f"cannot list {location}: {exc}") from None


def _hidden(relative: str) -> bool:
    """Whether a file at ``relative`` below the listed folder is hidden, as
    Iceberg's own orphan clean-up skips it: a name (file or folder) that
    starts with "." (Hadoop's checksum files, ``.crc``) or with "_" unless it
    is a partition folder (``_key=value``)."""
    return any(
        part.startswith(".") or (part.startswith("_") and "=" not in part)
        for part in relative.split("/")
    )


def _millis(stamp: object) -> float | None:
    if isinstance(stamp, datetime):
        return stamp.timestamp() * 1000
    if isinstance(stamp, int | float) and not isinstance(stamp, bool):
        return float(stamp) * 1000
    return None


__all__ = ["DEFAULT_AGE", "MIN_AGE", "OrphanFiles", "remove_orphan_files"]
