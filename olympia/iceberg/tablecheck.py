"""Checking that the Iceberg tables of every kept catalog version can be
read (``olympia fsck --tables``, spec/iceberg.md §4, "Checking tables").

The catalog's own check (``Catalog.fsck``) covers the catalog's files. What
a table of a kept version reads lies outside them: its metadata file, the
manifest lists and manifests of its snapshots, their data and delete files
and its statistics files. A tool that deletes table files without knowing
the catalog's history (Iceberg's own orphan clean-up or snapshot
expiration, a hand-made ``rm``) can leave a kept version that names a file
which is gone; this check finds it.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from pyiceberg.io import FileIO

from olympia.iceberg import purge
from olympia.maintenance import read_pins

if TYPE_CHECKING:
    from olympia.iceberg.catalog import OlympiaCatalog

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class TableCheck:
    """What :func:`check_tables` found."""

    #: Distinct table metadata files of the kept versions checked.
    checked_tables: int
    #: Files checked (metadata, statistics, manifest lists, manifests, data).
    checked_files: int
    #: ``(metadata location, missing file)``: a file a kept table reads that
    #: storage does not have.
    missing: tuple[tuple[str, str], ...]
    #: ``(metadata location, why)``: a file that exists but cannot be read.
    unreadable: tuple[tuple[str, str], ...]

    @property
    def ok(self) -> bool:
        return not self.missing and not self.unreadable


def check_tables(owner: OlympiaCatalog) -> TableCheck:
    """Check every file the tables of the kept versions read (the floor to
    the latest version, and pinned versions): each distinct table metadata
    file is read, then its manifest lists and manifests, and every data,
    delete and statistics file they name is checked to exist."""
    catalog = owner.olympia
    now = time.time() * 1000
    pins = [p for p in read_pins(catalog.store.storage) if not p.lapsed(now)]
    versions = purge._kept_versions(owner, pins)
    locations = [m for m in purge._table_metadata_locations(owner, versions) if m]
    missing: list[tuple[str, str]] = []
    unreadable: list[tuple[str, str]] = []
    checked = 0
    seen: set[str] = set()

    def read(of: str, path: str, how: Callable[[], T]) -> T | None:
        """``how()``, the reading of ``path`` (a file table metadata ``of``
        reads), or None with the finding recorded."""
        nonlocal checked
        checked += 1
        try:
            return how()
        except FileNotFoundError:
            missing.append((of, path))
        except Exception as exc:  # damaged content, a refused location
            unreadable.append((of, f"{path}: {exc}"))
        return None

    for metadata_location in dict.fromkeys(locations):
        io = owner._load_file_io(location=metadata_location)
        metadata = read(
            metadata_location,
            metadata_location,
            functools.partial(owner.read_metadata, metadata_location),
        )
        if metadata is None:
            continue
        leaves: list[str] = []  # files only checked to exist
        leaves.extend(e.metadata_file for e in metadata.metadata_log)
        leaves.extend(s.statistics_path for s in metadata.statistics)
        leaves.extend(s.statistics_path for s in metadata.partition_statistics)
        for snapshot in metadata.snapshots:
            if snapshot.manifest_list in seen:
                continue
            seen.add(snapshot.manifest_list)
            manifests = read(
                metadata_location, snapshot.manifest_list, functools.partial(snapshot.manifests, io)
            )
            for manifest in manifests or ():
                if manifest.manifest_path in seen:
                    continue
                seen.add(manifest.manifest_path)
                entries = read(
                    metadata_location,
                    manifest.manifest_path,
                    functools.partial(manifest.fetch_manifest_entry, io, discard_deleted=True),
                )
                leaves.extend(e.data_file.file_path for e in entries or ())
        todo = [p for p in dict.fromkeys(leaves) if p not in seen]
        seen.update(todo)
        checked += len(todo)
        missing.extend((metadata_location, p) for p in _absent(io, todo))
    return TableCheck(len(set(locations)), checked, tuple(missing), tuple(unreadable))


def _absent(io: FileIO, paths: Iterable[str]) -> list[str]:
    """Those of ``paths`` that storage says do not exist (up to 16 requests
    at a time)."""
    paths = list(paths)

    def gone(path: str) -> bool:
        try:
            return not io.new_input(path).exists()
        except Exception:  # cannot tell: not reported as missing
            logger.debug("cannot tell whether %s exists", path, exc_info=True)
            return False

    if not paths:
        return []
    with ThreadPoolExecutor(min(16, len(paths))) as pool:
        return [p for p, g in zip(paths, pool.map(gone, paths), strict=True) if g]


__all__ = ["TableCheck", "check_tables"]
