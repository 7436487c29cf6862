"""History, rollback, export and expiration (spec/transactions.md §7-8)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from olympia import layout
from olympia.codec import NodeFile, RootInfo, decode_node, encode_node
from olympia.errors import (
    CatalogAlreadyExistsError,
    CommitConflictError,
    CorruptCatalogError,
    InvalidNameError,
    OlympiaError,
    StorageError,
    StorageFileExistsError,
    StorageFileNotFoundError,
    VersionNotFoundError,
)
from olympia.keys import validate_transaction_id
from olympia.node import DefRef, Node
from olympia.objects import parse
from olympia.proto import actions_pb2 as apb
from olympia.storage import Storage, open_storage
from olympia.store import CatalogStore, Root, parse_definition

A = apb.ActionType
EXPORT_DIR = "exports"


@dataclass(frozen=True)
class VersionInfo:
    """One entry of :meth:`Catalog.history`."""

    version: int
    created_at: datetime
    transaction_id: str
    isolation: str
    begin_version: int | None
    serialized_before: tuple[int, ...]
    rollback_from: int | None
    actions: tuple[apb.Action, ...]


@dataclass(frozen=True)
class ExpireResult:
    """What :meth:`Catalog.expire_versions` did."""

    oldest_version: int
    deleted_roots: int
    deleted_files: int


def _version_of_root_path(path: str | None) -> int | None:
    if not path:
        return None
    return layout.parse_version_file_name(path.rsplit("/", 1)[-1])


def version_info(root: Root) -> VersionInfo:
    actions = []
    for key, data in root.info.actions:
        actions.append(
            parse(apb.Action, data, f"action on {key.rstrip()!r} in version {root.version}")
        )
    return VersionInfo(
        version=root.version,
        created_at=datetime.fromtimestamp(root.created_at_millis / 1000, tz=timezone.utc),
        transaction_id=root.info.transaction_id,
        isolation=root.info.isolation,
        begin_version=root.info.begin_version,
        serialized_before=root.info.serialized_before,
        rollback_from=_version_of_root_path(root.info.rollback_from_root),
        actions=tuple(actions),
    )


def version_as_of(store: CatalogStore, when: datetime) -> int:
    """The last version created at or before ``when``.

    Raises:
        VersionNotFoundError: every retained version is newer.
    """
    target = when.timestamp() * 1000
    low, high = store.oldest_version(), store.latest_version()
    if store.load_root(low).created_at_millis > target:
        raise VersionNotFoundError(
            f"no retained version was created at or before {when.isoformat()}"
        )
    while low < high:
        mid = (low + high + 1) // 2
        if store.load_root(mid).created_at_millis <= target:
            low = mid
        else:
            high = mid - 1
    return low


def rollback_to(store: CatalogStore, version: int, max_attempts: int = 64) -> int:
    """Publish a new version whose tree is ``version``'s; return the new version."""
    source = store.load_root(version)
    action = apb.Action(type=A.CATALOG_ROLLBACK, object_key="")
    encoded = [("", action.SerializeToString(deterministic=True))]
    for _ in range(max_attempts):
        latest = store.load_root(store.latest_version())
        try:
            return store.commit(
                latest.version + 1,
                source.node,
                latest.definition,
                uuid.uuid4().hex,
                actions=encoded,
                previous_root=latest.path,
                rollback_from_root=latest.path,
                begin_version=latest.version,
            ).version
        except CommitConflictError as exc:
            if exc.rule != "version-taken":
                raise
    raise CommitConflictError("rollback lost the race too often", rule="retries-exhausted")


# --- walking trees ----------------------------------------------------------------


def _reachable(store: CatalogStore, roots: Iterable[Root], seen: set[str]) -> None:
    """Add to ``seen`` the paths of every node and definition file the roots reach."""

    def walk(node: Node) -> None:
        if node.is_leaf:
            for v in node.values:
                if isinstance(v, DefRef):
                    seen.add(v.path)
            return
        for child in node.children:
            assert isinstance(child, str)
            if child in seen:
                continue  # shared subtree: already walked
            seen.add(child)
            walk(store.load_node(child))

    for root in roots:
        walk(root.node)


# --- export -------------------------------------------------------------------------


def _check_export_name(name: str) -> str:
    try:
        return validate_transaction_id(name)
    except InvalidNameError:
        raise InvalidNameError(
            f"invalid export name {name!r}: use 1-64 of A-Z a-z 0-9 _ -"
        ) from None


def exports(storage: Storage) -> dict[str, dict[str, Any]]:
    """The export records of a catalog, by name."""
    out: dict[str, dict[str, Any]] = {}
    try:
        paths = storage.list(EXPORT_DIR)
    except StorageFileNotFoundError:
        return out
    for path in paths:
        try:
            record = json.loads(storage.read(path))
            out[str(record["name"])] = record
        except (StorageError, ValueError, KeyError, TypeError):
            continue
    return out


def export_snapshot(
    store: CatalogStore,
    name: str,
    target_uri: str,
    mode: str,
    storage_options: dict[str, Any] | None,
) -> int:
    """Copy the latest version to a new catalog at ``target_uri``; return the exported version."""
    _check_export_name(name)
    if mode not in ("full", "minimal"):
        raise OlympiaError(f"export mode must be 'full' or 'minimal', got {mode!r}")
    marker = f"{EXPORT_DIR}/{name}.json"
    if store.storage.exists(marker):
        raise OlympiaError(f"an export named {name!r} already exists")
    target = open_storage(target_uri, storage_options)
    if target.list(layout.VERSION_DIR):
        raise CatalogAlreadyExistsError(f"a catalog already exists at {target.location}")
    latest = store.load_root(store.latest_version())
    if mode == "full":
        roots = [store.load_root(v) for v in range(store.oldest_version(), latest.version + 1)]
    else:
        roots = [latest]
    files: set[str] = set()
    _reachable(store, roots, files)
    for path in sorted(files):
        _copy(store.storage, target, path)
    if mode == "full":
        for root in roots:
            _copy(store.storage, target, root.path)
        if roots[0].version > 0:
            target.overwrite(layout.OLDEST_FLOOR, layout.encode_counter(roots[0].version))
    else:
        info = RootInfo(
            version=0,
            catalog_def=latest.info.catalog_def,
            transaction_id=uuid.uuid4().hex,
        )
        target.put_if_absent(
            layout.root_path(0), encode_node(NodeFile(latest.node, int(time.time() * 1000), info))
        )
    target.overwrite(
        layout.LATEST_HINT, layout.encode_counter(latest.version if mode == "full" else 0)
    )
    record = {
        "name": name,
        "version": latest.version,
        "target": target.location,
        "mode": mode,
        "created_at_millis": int(time.time() * 1000),
    }
    store.storage.put_if_absent(marker, json.dumps(record, sort_keys=True).encode())
    return latest.version


def _copy(source: Storage, target: Storage, path: str) -> None:
    data = source.read(path)
    try:
        target.put_if_absent(path, data)
    except StorageFileExistsError:
        raise OlympiaError(
            f"{path} already exists at {target.location} with other content"
        ) from None


def drop_export(storage: Storage, name: str) -> None:
    """Forget export ``name`` so expiration may reclaim its version."""
    _check_export_name(name)
    marker = f"{EXPORT_DIR}/{name}.json"
    if not storage.exists(marker):
        raise OlympiaError(f"no export named {name!r}")
    storage.delete(marker)


# --- expiration ---------------------------------------------------------------------


def expire_versions(
    store: CatalogStore,
    older_than: datetime | None,
    keep_last: int | None,
    grace_seconds: float,
    open_transactions: dict[str, int],
) -> ExpireResult:
    """Move the floor and delete what no retained version, export or open
    distributed transaction can reach (spec/transactions.md §8)."""
    if keep_last is not None and keep_last < 1:
        raise OlympiaError("keep_last must be at least 1")
    latest = store.latest_version()
    old_floor = store.oldest_version()
    floor = latest if keep_last is None else latest - keep_last + 1
    if older_than is not None:
        try:
            by_time = version_as_of(store, older_than)
        except VersionNotFoundError:
            by_time = old_floor
        floor = by_time if keep_last is None else min(floor, by_time)
    floor = min([floor, latest, *open_transactions.values()])
    floor = max(floor, old_floor)
    pinned = {int(r["version"]) for r in exports(store.storage).values()}
    if floor > old_floor:
        store.storage.overwrite(layout.OLDEST_FLOOR, layout.encode_counter(floor))
    deleted_roots = 0
    for v in range(old_floor, floor):
        if v not in pinned:
            store.storage.delete(layout.root_path(v))
            deleted_roots += 1
    keep_roots = [store.load_root(v) for v in range(floor, store.latest_version() + 1)]
    keep_roots += [_load_pinned(store, v) for v in sorted(pinned) if v < floor]
    reachable: set[str] = set()
    _reachable(store, keep_roots, reachable)
    cutoff = (time.time() - grace_seconds) * 1000
    deleted_files = 0
    for folder in (layout.NODE_DIR, layout.DEF_DIR):
        for path in store.storage.list(folder):
            created = layout.created_millis(path)
            if path in reachable or created is None or created >= cutoff:
                continue
            store.storage.delete(path)
            deleted_files += 1
    deleted_files += _expire_transaction_states(store, open_transactions, cutoff)
    return ExpireResult(floor, deleted_roots, deleted_files)


def _expire_transaction_states(store: CatalogStore, open_ids: Iterable[str], cutoff: float) -> int:
    """Delete the state files of distributed transactions that ended."""
    keep = set(open_ids)
    by_txn: dict[str, list[str]] = {}
    for path in store.storage.list(layout.DTXN_DIR):
        parts = path.split("/")
        if len(parts) == 3:
            by_txn.setdefault(parts[1], []).append(path)
    deleted = 0
    for txn_id, paths in by_txn.items():
        if txn_id in keep:
            continue
        try:
            first = parse(apb.TransactionState, store.storage.read(min(paths)), min(paths))
        except (StorageError, OlympiaError):
            continue
        if first.transaction.created_at_millis >= cutoff:
            continue  # may still be starting up: its catalog object is not committed yet
        for path in paths:
            store.storage.delete(path)
            deleted += 1
    return deleted


def _load_pinned(store: CatalogStore, version: int) -> Root:
    """Load a pinned root below the floor (load_root refuses those)."""
    path = layout.root_path(version)
    nf = decode_node(store.storage.read(path), path)
    if nf.root is None:
        raise CorruptCatalogError(f"pinned root {path} is not a root node")
    return Root(
        version,
        nf.node,
        nf.root,
        parse_definition(nf.root.catalog_def, path),
        nf.created_at_millis,
    )
