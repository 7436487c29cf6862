"""Purging Iceberg tables without breaking history (spec/iceberg.md §4, "Purge").

Every catalog version is kept until it is expired, and a version from before
a purge still holds the table: ``at_version``, ``rollback_to`` and exports
read it. So ``purge_table`` drops the table at once but deletes its files
only when no kept version can reach the table any more. The purge leaves a
record, ``iceberg-purge/<version>-<id>.json`` beside the catalog's own
folders, naming the table, its location, its metadata file and the version
that dropped it. Expiration through the Iceberg layer
(``OlympiaCatalog.expire_versions``, ``olympia expire``) then runs the
records that are due: those whose dropping version is at or below the
oldest kept version, with no pin keeping an older version.

A due record deletes the files its table's metadata reaches (data files,
manifests, manifest lists, metadata files) that lie under the table's own
location, except every file that the metadata of a table in a kept version
reaches when that table's metadata lies under the same location: a table
created again at the same place, or the purged table brought back by
``rollback_to`` or ``register_table``, keeps what it needs.

A register of files a purge would delete and the run of that purge exclude
each other through the record's *claim*, ``<record>.claim``, written with
put-if-absent: a run claims each due record (``purge``) before it decides
what to keep, and skips a record a register claimed first (``cancel``); a
register that finds the run's claim, or the record gone after claiming it,
is refused. A committed register deletes the records it cancelled (the
purge is undone).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING
from uuid import uuid4

from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestFile
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata

from olympia import errors as oe
from olympia import maintenance
from olympia.iceberg.deletes import delete_file
from olympia.iceberg.locations import LocationNotAllowedError, is_under, overlap
from olympia.maintenance import Pin, read_pins
from olympia.storage import Storage

if TYPE_CHECKING:
    from olympia.iceberg.catalog import OlympiaCatalog

logger = logging.getLogger(__name__)

#: The folder of purge records, under the warehouse.
FOLDER = "iceberg-purge"
FORMAT = 1


#: What a purge's claim file holds (:func:`claim`): a run deleting the
#: files, or a transaction registering a table that uses them.
PURGING = b"purge"
CANCELLED = b"cancel"
_CLAIM = ".claim"
_HOLD = ".hold-"


@dataclass(frozen=True)
class PurgeIntent:
    """A purge staged by a transaction: recorded when it commits."""

    table: str
    location: str
    metadata_location: str

    @staticmethod
    def of(table: Table) -> PurgeIntent:
        return PurgeIntent(".".join(table.name()), table.metadata.location, table.metadata_location)


@dataclass(frozen=True)
class PurgeRecord:
    path: str
    table: str
    location: str
    metadata_location: str
    #: The version whose commit dropped the table.
    version: int


@dataclass(frozen=True)
class PurgeResult:
    """What a run of the due purges did."""

    purged_tables: int
    pending_tables: int
    deleted_files: int
    #: Records that could not be read (named); they are left in place.
    damaged: tuple[str, ...] = ()


@dataclass(frozen=True)
class ExpireResult(maintenance.ExpireResult):
    """What ``OlympiaCatalog.expire_versions`` did: the catalog's expiration,
    then the purges it made due."""

    purges: PurgeResult = PurgeResult(0, 0, 0)


def record(owner: OlympiaCatalog, intent: PurgeIntent, version: int) -> str:
    """Record the purge ``intent``, its table dropped by ``version``; returns the record's path."""
    path = f"{FOLDER}/{version:020d}-{uuid4().hex}.json"
    doc = {
        "format": FORMAT,
        "table": intent.table,
        "location": intent.location,
        "metadata-location": intent.metadata_location,
        "version": version,
    }
    owner.olympia.store.storage.put_if_absent(path, json.dumps(doc).encode())
    return path


def _parse(path: str, data: bytes) -> PurgeRecord:
    doc = json.loads(data)
    if doc.get("format") != FORMAT:
        raise ValueError(f"unknown format {doc.get('format')!r}")
    version = doc["version"]
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise ValueError(f"bad version {version!r}")
    return PurgeRecord(
        path,
        str(doc["table"]),
        str(doc["location"]),
        str(doc["metadata-location"]),
        version,
    )


def records(owner: OlympiaCatalog) -> tuple[list[PurgeRecord], list[str]]:
    """The purge records, oldest first, and the paths of damaged ones."""
    storage = owner.olympia.store.storage
    found: list[PurgeRecord] = []
    damaged: list[str] = []
    for path in sorted(storage.list(FOLDER)):
        if path.endswith(_CLAIM):
            continue
        try:
            found.append(_parse(path, storage.read(path)))
        except (ValueError, KeyError, TypeError, oe.StorageError) as exc:
            logger.warning("purge record %s cannot be read (%s); it is left alone", path, exc)
            damaged.append(path)
    return found, damaged


@dataclass(frozen=True)
class PurgePlan:
    """The purge records a run would carry out, and why the others wait."""

    #: Records whose tables' files a run deletes now.
    due: tuple[PurgeRecord, ...]
    #: Records a kept version (or a pin) still holds back.
    pending: tuple[PurgeRecord, ...]
    #: Records that cannot be read (named); they are left in place.
    damaged: tuple[str, ...]
    #: The pins in force (not lapsed) that were read.
    pins: tuple[Pin, ...] = ()


def plan(owner: OlympiaCatalog, floor: int | None = None) -> PurgePlan:
    """Which purges are due once the oldest kept version is ``floor`` (by
    default the catalog's floor now): those dropped at or below it with no
    pin in force keeping an older version (a lapsed pin keeps nothing: the
    expiration that runs first deletes it). Deletes nothing.

    Raises:
        CorruptCatalogError: a pin record cannot be read.
    """
    found, damaged = records(owner)
    if not found:
        return PurgePlan((), (), tuple(damaged))
    catalog = owner.olympia
    floor = catalog.oldest_version if floor is None else floor
    now = time.time() * 1000
    pins = tuple(p for p in read_pins(catalog.store.storage) if not p.lapsed(now))
    lowest_pin = min((p.from_version for p in pins), default=None)
    due = tuple(
        r
        for r in found
        if r.version <= floor
        and (lowest_pin is None or lowest_pin >= r.version)
        and not _cancelled(catalog.store.storage, r)
    )
    pending = tuple(r for r in found if r not in due)
    return PurgePlan(due, pending, tuple(damaged), pins)


def claim_path(rec: PurgeRecord) -> str:
    return rec.path.removesuffix(".json") + _CLAIM


def claim(storage: Storage, rec: PurgeRecord, content: bytes) -> tuple[bool, bytes]:
    """Claim ``rec`` with put-if-absent: (whether this call made the claim,
    the claim that stands)."""
    path = claim_path(rec)
    try:
        storage.put_if_absent(path, content)
        return True, content
    except oe.StorageFileExistsError:
        try:
            return False, storage.read(path)
        except oe.StorageFileNotFoundError:  # released meanwhile: the record is done
            return False, b""


def _cancelled(storage: Storage, rec: PurgeRecord) -> bool:
    try:
        return storage.read(claim_path(rec)).startswith(CANCELLED)
    except oe.StorageFileNotFoundError:
        return False


def run(owner: OlympiaCatalog) -> PurgeResult:
    """Delete the files of every purged table that no kept version reaches
    any more (:func:`plan`); keep the other records for a later run.

    Raises:
        CorruptCatalogError: a pin record cannot be read (nothing is deleted).
    """
    todo = plan(owner)
    if not todo.due:
        return PurgeResult(0, len(todo.pending), 0, todo.damaged)
    storage = owner.olympia.store.storage
    # Claimed before the kept versions are read: a register that claimed a
    # record first holds it back; one that comes later is refused (hold).
    due = []
    for rec in todo.due:
        made, standing = claim(storage, rec, PURGING)
        if not standing.startswith(PURGING):
            continue
        if _holds(storage, rec):  # a register holds it, whose own claim went: it waits
            if made:
                with contextlib.suppress(oe.StorageError):
                    storage.delete(claim_path(rec))
            continue
        due.append(rec)
    held = len(todo.due) - len(due)
    kept = _kept_files(owner, [r.location for r in due], _kept_versions(owner, todo.pins))
    deleted = 0
    for rec in due:
        deleted += _delete_files_of(owner, rec, kept)
        storage.delete(rec.path)  # the record before its claim (hold reads it after claiming)
        with contextlib.suppress(oe.StorageError):
            storage.delete(claim_path(rec))
    return PurgeResult(len(due), len(todo.pending) + held, deleted, todo.damaged)


def hold(
    owner: OlympiaCatalog, txn_id: str, what: str, locations: Iterable[str]
) -> list[PurgeRecord]:
    """Hold back every purge whose table's location overlaps one of
    ``locations`` (a table being registered: its metadata file and its
    location), so that no run deletes the files it uses; returns the records
    held, which :func:`release` deletes once the register commits.

    Raises:
        InvalidArgumentError: a run is deleting those files, or has deleted
            them (``what`` names the table being registered).
    """
    found, _ = records(owner)
    if not found:
        return []
    storage = owner.olympia.store.storage
    targets = [t for t in (normal_path(owner, loc) for loc in locations) if t is not None]
    held: list[PurgeRecord] = []
    for rec in found:
        own = normal_path(owner, rec.location)
        if own is None or not any(overlap(own, t) for t in targets):
            continue
        # This transaction's own hold first, then the shared claim: a run
        # claims, then looks for holds (:func:`run`), so one of the two
        # always sees the other.
        with contextlib.suppress(oe.StorageFileExistsError):
            storage.put_if_absent(hold_path(rec, txn_id), txn_id.encode())
        made, standing = claim(storage, rec, CANCELLED + b" " + txn_id.encode())
        if standing.startswith(CANCELLED):
            if storage.exists(rec.path):
                held.append(rec)
                continue
            with contextlib.suppress(oe.StorageError):
                storage.delete(hold_path(rec, txn_id))
            if not made:  # another register committed and released it: no purge left
                continue
            # Made after the record went: a run finished (it deletes the
            # record, then its claim), or a register released it.
            with contextlib.suppress(oe.StorageError):
                storage.delete(claim_path(rec))
        else:
            with contextlib.suppress(oe.StorageError):
                storage.delete(hold_path(rec, txn_id))
        raise oe.InvalidArgumentError(
            f"cannot register {what}: the files of table {rec.table} at {rec.location}, "
            f"purged by version {rec.version}, are being deleted or are gone (if the "
            f"metadata file still exists, try again)"
        )
    return held


def release(owner: OlympiaCatalog, held: Iterable[PurgeRecord], txn_id: str) -> None:
    """Delete purge records held back by a register of transaction
    ``txn_id`` that committed: the table is back, and its files are the
    registered table's."""
    storage = owner.olympia.store.storage
    for rec in held:
        with contextlib.suppress(oe.StorageError):
            storage.delete(rec.path)
            storage.delete(claim_path(rec))
            storage.delete(hold_path(rec, txn_id))


def unhold(owner: OlympiaCatalog, held: Iterable[PurgeRecord], txn_id: str) -> None:
    """Give back the purges a register of transaction ``txn_id`` held, when
    it ends without committing: its hold goes, and the shared claim with it
    once no transaction holds the record any more, so that a later run
    carries the purge out (a register that claims meanwhile has written its
    hold first, which the run sees)."""
    storage = owner.olympia.store.storage
    for rec in held:
        with contextlib.suppress(oe.StorageError):
            storage.delete(hold_path(rec, txn_id))
            if not _holds(storage, rec) and _cancelled(storage, rec):
                storage.delete(claim_path(rec))


def hold_path(rec: PurgeRecord, txn_id: str) -> str:
    """The hold of ``rec`` by transaction ``txn_id`` (its name ends in
    ``.claim``: earlier builds, which list records, skip it)."""
    return f"{rec.path.removesuffix('.json')}{_HOLD}{txn_id}{_CLAIM}"


def _holds(storage: Storage, rec: PurgeRecord) -> list[str]:
    """The holds of ``rec`` that exist."""
    prefix = f"{rec.path.removesuffix('.json')}{_HOLD}"
    return [p for p in storage.list(FOLDER) if p.startswith(prefix)]


def _kept_versions(owner: OlympiaCatalog, pins: Iterable[Pin]) -> list[int]:
    catalog = owner.olympia
    versions = set(range(catalog.oldest_version, catalog.version + 1))
    for pin in pins:
        versions.update(pin.versions())
    return sorted(versions)


def _table_metadata_locations(owner: OlympiaCatalog, versions: list[int]) -> Iterator[str]:
    """The metadata location of every table in each of ``versions``."""
    return (location for _, location in object_metadata_locations(owner, versions))


def object_metadata_locations(
    owner: OlympiaCatalog, versions: list[int], kinds: tuple[str, ...] = ("table",)
) -> Iterator[tuple[str, str]]:
    """``(kind, metadata location)`` of every object of ``kinds`` (``table``,
    ``view``) in each of ``versions``: all of the first, then what each next
    version added or changed (a tree diff). A version expired meanwhile is
    skipped: nobody can read it any more."""
    catalog = owner.olympia
    describe = {
        "table": lambda v, ns, n: v.describe_table(ns, n).metadata_location,
        "view": lambda v, ns, n: v.describe_view(ns, n).metadata_location,
    }
    previous: int | None = None
    for version in versions:
        try:
            view = catalog.at_version(version)
            if previous is None:
                for namespace in view.list_namespaces():
                    if "table" in kinds:
                        for name in view.list_tables(namespace):
                            yield "table", describe["table"](view, namespace, name)
                    if "view" in kinds:
                        for name in view.list_views(namespace):
                            yield "view", describe["view"](view, namespace, name)
            else:
                for change in catalog.diff(previous, version):
                    if change.kind in kinds and change.change != "removed":
                        namespace, name = change.parts
                        yield change.kind, describe[change.kind](view, namespace, name)
        except oe.VersionNotFoundError:
            continue
        previous = version


def _kept_files(owner: OlympiaCatalog, locations: list[str], versions: list[int]) -> set[str]:
    """Every file (normalised, :func:`normal_path`) that the metadata of a table
    in a kept version reaches, for the tables whose metadata lies under one
    of ``locations``."""
    roots = [r for r in (normal_path(owner, loc) for loc in locations) if r is not None]
    out: set[str] = set()
    seen: set[str] = set()
    for metadata_location in _table_metadata_locations(owner, versions):
        if not metadata_location or metadata_location in seen:
            continue
        seen.add(metadata_location)
        normal = normal_path(owner, metadata_location)
        if normal is None or not any(is_under(normal, root) for root in roots):
            continue
        try:
            metadata = owner.read_metadata(metadata_location)
        except Exception:  # unreadable: it reaches nothing we could keep
            logger.warning("metadata %s of a kept table cannot be read", metadata_location)
            continue
        io = owner._load_file_io(location=metadata_location)
        # Normalised, as the files to delete are compared: one file may be
        # spelt several ways ("file:/x", "file:///x", "/a//b").
        reached = (normal_path(owner, p) for p in reachable_files(io, metadata, metadata_location))
        out |= {p for p in reached if p is not None}
    return out


def normal_path(owner: OlympiaCatalog, location: str) -> str | None:
    """``location`` normalised by the catalog's location policy (the form
    files are compared in), or None when the policy refuses it: a file the
    catalog never deletes."""
    try:
        return owner.locations.check(location, "a location")  # file:/x is file:///x there
    except LocationNotAllowedError:
        return None


def _delete_files_of(owner: OlympiaCatalog, rec: PurgeRecord, kept: set[str]) -> int:
    own = normal_path(owner, rec.location)
    if own is None:
        logger.warning("purge of %s deletes nothing: its location is not usable", rec.table)
        return 0
    try:
        metadata = owner.read_metadata(rec.metadata_location)
    except Exception:
        logger.warning("purge of %s: its metadata file is gone; nothing to delete", rec.table)
        return 0
    io = owner._load_file_io(location=rec.metadata_location)
    deleted = 0
    # Data first, the metadata file last: a run that stops midway can be
    # repeated (the record stays until the end).
    for path in reversed(reachable_files(io, metadata, rec.metadata_location)):
        normal = normal_path(owner, path)
        if normal is None or not is_under(normal, own) or normal in kept:
            continue
        try:
            delete_file(io, path)
            deleted += 1
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as exc:
            logger.warning("purge of %s could not delete %s: %s", rec.table, path, exc)
    return deleted


def committed_files(owner: OlympiaCatalog, metadata_locations: Iterable[str]) -> set[str] | None:
    """Every file (normalised, :func:`normal_path`) that the committed
    metadata files ``metadata_locations`` reach; None when one of them, or a
    manifest list or manifest it names, cannot be read: then nobody can
    tell which files are safe to delete."""
    out: set[str] = set()
    for location in dict.fromkeys(metadata_locations):
        try:
            metadata = owner.read_metadata(location)
            io = owner._load_file_io(location=location)
            reached = reachable_files(io, metadata, location, strict=True)
        except Exception:  # any failure to read: nobody can tell
            logger.warning("the files metadata %s reaches cannot be read", location, exc_info=True)
            return None
        out |= {p for p in map(functools.partial(normal_path, owner), reached) if p is not None}
    return out


def reachable_files(
    io: FileIO, metadata: TableMetadata, metadata_location: str, *, strict: bool = False
) -> list[str]:
    """The files a table's metadata reaches: its metadata file and those of
    its metadata log, its statistics files, then its manifest lists,
    manifests and data files (of every snapshot), in that order. A manifest
    list or manifest that is missing reaches nothing, or, with ``strict``,
    raises FileNotFoundError."""
    files = [metadata_location, *(entry.metadata_file for entry in metadata.metadata_log)]
    files.extend(s.statistics_path for s in getattr(metadata, "statistics", ()))
    files.extend(s.statistics_path for s in getattr(metadata, "partition_statistics", ()))
    manifests: dict[str, ManifestFile] = {}
    for snapshot in metadata.snapshots:
        files.append(snapshot.manifest_list)
        try:
            for manifest in snapshot.manifests(io):
                manifests.setdefault(manifest.manifest_path, manifest)
        except FileNotFoundError:
            if strict:
                raise
            continue
    files.extend(manifests)
    for manifest in manifests.values():
        try:
            entries = manifest.fetch_manifest_entry(io, discard_deleted=False)
        except FileNotFoundError:
            if strict:
                raise
            continue
        files.extend(entry.data_file.file_path for entry in entries)
    return list(dict.fromkeys(files))


def same_file_uri(path: str) -> str:
    """``file:/x`` (as Hadoop and Spark write paths) and ``file:///x`` name one file."""
    if path.startswith("file:/") and not path.startswith("file://"):
        return "file://" + path[len("file:") :]
    return path
