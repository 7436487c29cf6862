"""History, rollback, export and expiration (spec/transactions.md §7-8)."""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from olympia import layout, tree
from olympia.codec import CommitInfo, decode_node
from olympia.definition import commit_time_limit_millis, expire_retention, key_codec
from olympia.errors import (
    CatalogAlreadyExistsError,
    CommitConflictError,
    CorruptCatalogError,
    ExportAlreadyExistsError,
    ExportNotFoundError,
    InvalidArgumentError,
    InvalidNameError,
    OlympiaError,
    StorageError,
    StorageFileExistsError,
    StorageFileNotFoundError,
    VersionNotFoundError,
)
from olympia.keys import ObjectType, type_prefix, validate_transaction_id
from olympia.node import ChildRef, DefRef, Node
from olympia.objects import parse
from olympia.proto import actions_pb2 as apb
from olympia.proto import objects_pb2 as pb
from olympia.storage import Storage, open_storage
from olympia.storage.local import TMP_DIR
from olympia.store import (
    CatalogStore,
    MissingFileError,
    Root,
    check_action_file,
    parse_root_definition,
)

A = apb.ActionType
EXPORT_DIR = layout.EXPORT_DIR
PIN_DIR = layout.PIN_DIR
#: A rollback pin, or the record of an unfinished export, lapses this long
#: after it was last written (spec/transactions.md §8.1).
PIN_TTL_MILLIS = 24 * 3600 * 1000


@dataclass(frozen=True)
class TransactionRecord:
    """One transaction a version holds (see :attr:`VersionInfo.transactions`),
    with the commit metadata it was given (None / empty when none was)."""

    transaction_id: str
    isolation: str
    begin_version: int | None
    actions: tuple[apb.Action, ...]
    message: str | None = None
    author: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class VersionInfo:
    """One entry of :meth:`Catalog.history`.

    A version usually holds one transaction; one published by group commit
    holds several (spec/transactions.md §3.2), listed in serial order in
    ``transactions``. The other fields describe the version as a whole: the
    first transaction's id and isolation, the smallest begin version, and
    every action of its transactions in order.

    A version published by ``rollback_to(u)`` has ``rollback_to`` = ``u``
    (None in rollback roots written before the target was recorded) and
    ``rollback_from`` = the version that was latest before it."""

    version: int
    created_at: datetime
    transaction_id: str
    isolation: str
    begin_version: int | None
    serialized_before: tuple[int, ...]
    rollback_from: int | None
    actions: tuple[apb.Action, ...]
    transactions: tuple[TransactionRecord, ...] = ()
    rollback_to: int | None = None

    @property
    def message(self) -> str | None:
        """The commit message of the version's first transaction."""
        return self.transactions[0].message if self.transactions else None

    @property
    def author(self) -> str | None:
        """The author of the version's first transaction."""
        return self.transactions[0].author if self.transactions else None

    @property
    def properties(self) -> Mapping[str, str]:
        """The commit properties of the version's first transaction."""
        return self.transactions[0].properties if self.transactions else {}


@dataclass(frozen=True)
class ExpireResult:
    """What :meth:`Catalog.expire_versions` did, or in a dry run (``dry_run``)
    would do: the ``deleted_*`` counts are then what a run at the same moment
    would delete, and nothing was written."""

    oldest_version: int
    #: Roots replaced by expired-root markers (format version 1: deleted).
    deleted_roots: int
    #: Node, definition and distributed-transaction state files.
    deleted_files: int
    #: Lapsed pins: rollback pins and records of exports that never finished.
    deleted_pins: int = 0
    #: Temporary files of killed writers.
    deleted_temporary_files: int = 0
    #: Pins whose versions could not be kept because files were already gone.
    broken_pins: tuple[str, ...] = ()
    #: The oldest version before the run: ``expired_versions`` start there.
    previous_oldest_version: int = 0
    #: Nothing was written or deleted (``expire_versions(dry_run=True)``).
    dry_run: bool = False
    #: Distributed transactions past their TTL whose objects the run dropped
    #: (a dry run: would drop, in one new version, before the rest).
    dropped_transactions: tuple[str, ...] = ()
    #: Dry run only: every file the run would delete or replace by a marker.
    paths: tuple[str, ...] = ()
    #: The retention applied when no option was given: ``(max age in
    #: milliseconds, minimum versions)`` from the catalog definition; None
    #: when ``older_than`` or ``keep_last`` was given.
    retention: tuple[int, int] | None = None
    #: Expired-root markers deleted below a matured marker horizon
    #: (spec/transactions.md §8.6); a dry run: would delete.
    deleted_markers: int = 0

    @property
    def expired_versions(self) -> range:
        """The versions this run expired (a dry run: would expire): no longer
        readable by time travel; a pinned one keeps its files for its pinner."""
        return range(self.previous_oldest_version, self.oldest_version)


def _version_of_root_path(path: str | None) -> int | None:
    """The version a root path names; None for anything else (readers ignore
    a ``$rollback_from_root`` that is not the path of ``v - 1``'s root,
    spec/format.md §3.2, "What readers check of a root")."""
    if not path or not path.startswith(f"{layout.VERSION_DIR}/"):
        return None
    with contextlib.suppress(CorruptCatalogError):
        return layout.parse_version_file_name(path[len(layout.VERSION_DIR) + 1 :])
    return None


def version_info(store: CatalogStore, root: Root) -> VersionInfo:
    actions = []
    for key, data in store.load_actions(root):
        actions.append(
            parse(apb.Action, data, f"action on {key.rstrip()!r} in version {root.version}")
        )
    info = root.info
    metadata = dict(info.commit_infos)

    def record(
        txn_id: str, isolation: str, begin: int | None, own: tuple[apb.Action, ...]
    ) -> TransactionRecord:
        given = metadata.get(txn_id)
        if given is None:
            return TransactionRecord(txn_id, isolation, begin, own)
        return TransactionRecord(
            txn_id, isolation, begin, own, given.message, given.author, given.properties
        )

    if info.group:
        records, start = [], 0
        for e in info.group:
            own = tuple(actions[start : start + e.n_actions])
            records.append(record(e.transaction_id, e.isolation, e.begin_version, own))
            start += e.n_actions
        transactions = tuple(records)
    else:
        transactions = (
            record(info.transaction_id, info.isolation, info.begin_version, tuple(actions)),
        )
    return VersionInfo(
        version=root.version,
        created_at=datetime.fromtimestamp(root.created_at_millis / 1000, tz=UTC),
        transaction_id=root.info.transaction_id,
        isolation=root.info.isolation,
        begin_version=root.info.begin_version,
        serialized_before=root.info.serialized_before,
        rollback_from=_version_of_root_path(root.info.rollback_from_root),
        actions=tuple(actions),
        transactions=transactions,
        rollback_to=info.rollback_to_version,
    )


def version_as_of(store: CatalogStore, when: datetime) -> int:
    """The last version created at or before ``when``.

    Raises:
        VersionNotFoundError: every retained version is newer.
    """
    target = when.timestamp() * 1000
    for _ in range(8):
        floor = store.oldest_version()
        try:
            return _search_as_of(store, floor, target, when)
        except VersionNotFoundError:
            if store.oldest_version() == floor:
                raise
            # expiration moved the floor during the search: search again
    raise VersionNotFoundError("expiration kept moving the oldest version; try again")


def _search_as_of(store: CatalogStore, low: int, target: float, when: datetime) -> int:
    high = store.latest_version()
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


def rollback_to(
    store: CatalogStore,
    version: int,
    max_attempts: int = 64,
    commit_info: CommitInfo | None = None,
) -> int:
    """Publish a new version whose tree is ``version``'s, with ``commit_info``
    (spec/format.md §3.7); return the new version.

    ``version`` is pinned while the rollback runs (spec/transactions.md §8.1).

    Raises:
        VersionNotFoundError: ``version`` does not exist or was expired.
    """
    with _pinned(store, version) as pin:
        source = store.load_root(version)
        _check_restorable(store, source, store.load_latest())
        action = apb.Action(type=A.CATALOG_ROLLBACK, object_key="")
        encoded = [("", action.SerializeToString(deterministic=True))]
        for _ in range(max_attempts):
            if _now_millis() - pin.renewed_at_millis > PIN_TTL_MILLIS // 2:
                raise OlympiaError(
                    f"rollback to version {version} took too long: its pin would lapse; try again"
                )
            latest = store.load_latest()
            try:
                return store.commit(
                    latest.version + 1,
                    _with_transactions_of(store, source, latest),
                    latest.definition,
                    uuid.uuid4().hex,
                    actions=encoded,
                    previous_root=latest.path,
                    rollback_from_root=latest.path,
                    begin_version=latest.version,
                    rollback_to_version=version,
                    commit_info=commit_info,
                ).version
            except CommitConflictError as exc:
                if exc.rule != "version-taken":
                    raise
    raise CommitConflictError("rollback lost the race too often", rule="retries-exhausted")


def _with_transactions_of(store: CatalogStore, source: Root, latest: Root) -> Node:
    """``source``'s tree with the distributed transactions' objects of
    ``latest`` in place of its own (spec/transactions.md §7): a rollback
    restores the catalog's objects, never a transaction's outcome. A
    transaction finished since ``source`` stays finished (brought back, it
    could be told a second outcome, §6.4); one open at ``latest`` stays open
    (its commit is then refused, rule ``catalog-rollback``)."""
    prefix = type_prefix(ObjectType.TRANSACTION)
    loader = store.load_node
    theirs = dict(tree.scan(source.node, prefix, loader))
    ours = dict(tree.scan(latest.node, prefix, loader))
    changes: list[tree.Change] = [(key, None) for key in theirs if key not in ours]
    changes += [(key, value) for key, value in ours.items() if theirs.get(key) != value]
    if not changes:
        return source.node
    return tree.apply(source.node, sorted(changes, key=lambda c: c[0]), latest.order, loader)


def _check_restorable(store: CatalogStore, source: Root, latest: Root) -> None:
    """Raise unless every file of ``source``'s tree that ``latest``'s does
    not share is there: its nodes (read) and definition files. The floor
    says which versions are kept; when ``vn/oldest`` was lost (read as 0) a
    root kept whole below the real floor still loads, but expiration deleted
    part of its tree, and publishing it would make the latest version
    unreadable (spec/transactions.md §8.3).

    Raises:
        VersionNotFoundError: naming the missing file.
    """
    loader = store.load_node
    try:
        leaves = tree.unshared_leaves(source.node, latest.node, loader)
        store.prefetch_nodes([leaf for leaf in leaves if isinstance(leaf, str)])
        defs: list[str] = []
        for leaf in leaves:
            node = loader(leaf) if isinstance(leaf, str) else leaf
            defs += [v.path for v in node.values if isinstance(v, DefRef)]
        found = store.storage.read_many(defs, heads=defs) if defs else []
        for path, there in zip(defs, found, strict=True):
            if isinstance(there, StorageFileNotFoundError):
                raise MissingFileError(f"definition file {path} is missing")
            if isinstance(there, Exception):
                raise there
    except MissingFileError as exc:
        raise VersionNotFoundError(
            f"version {source.version} cannot be restored: a file its tree needs is gone "
            f"({exc}); it was expired (if {layout.OLDEST_FLOOR} says otherwise, that file "
            f"is damaged)"
        ) from None


# --- pins ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Pin:
    """A record that keeps versions ``from_version .. version`` from expiration
    (spec/transactions.md §8.1)."""

    path: str
    kind: str
    from_version: int
    version: int
    renewed_at_millis: int
    #: False for the record of a finished export, which pins until dropped.
    lapses: bool

    def lapsed(self, now_millis: float) -> bool:
        return self.lapses and now_millis - self.renewed_at_millis > PIN_TTL_MILLIS

    def versions(self) -> range:
        return range(self.from_version, self.version + 1)


def _now_millis() -> int:
    return int(time.time() * 1000)


class _UnreadableRecord(CorruptCatalogError):
    """A pin or export record that cannot be read; the message says why.
    Never leaves this module: it becomes :func:`_unreadable_error`."""


def _record_int(record: dict[str, Any], field: str) -> int | None:
    """The integer field ``field`` of a record, or None when it is absent."""
    if field not in record:
        return None
    value = record[field]
    # JSON true/false are bool, a subclass of int in Python: not integers here.
    if isinstance(value, bool) or not isinstance(value, int):
        raise _UnreadableRecord(f"{field!r} is {value!r}, not an integer")
    if not 0 <= value <= layout.MAX_VERSION:
        raise _UnreadableRecord(f"{field!r} is {value}, outside 0 .. 2**63-1")
    return value


def _parse_record(path: str, data: bytes) -> Pin:
    """The pin that the record ``path`` holds (spec/transactions.md §8.1).

    Raises:
        _UnreadableRecord: the record is not one a writer produces.
    """
    try:
        record = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise _UnreadableRecord("it is not UTF-8 JSON") from None
    if not isinstance(record, dict):
        raise _UnreadableRecord("it is not a JSON object")
    version = _record_int(record, "version")
    if version is None:
        raise _UnreadableRecord("it has no 'version'")
    from_version = _record_int(record, "from_version")
    if from_version is None:
        from_version = version
    elif from_version > version:
        raise _UnreadableRecord(f"'from_version' {from_version} is above 'version' {version}")
    created = _record_int(record, "created_at_millis")
    renewed = _record_int(record, "renewed_at_millis")
    if renewed is None:
        renewed = created
    if path.startswith(f"{EXPORT_DIR}/"):
        state = record.get("state", "done")
        if state not in ("copying", "done"):
            raise _UnreadableRecord(f"'state' is {state!r}, not 'copying' or 'done'")
        kind, lapses = "export", state != "done"
    else:
        kind = record.get("kind", "rollback")
        if not isinstance(kind, str):
            raise _UnreadableRecord(f"'kind' is {kind!r}, not text")
        lapses = True
    if lapses and renewed is None:
        raise _UnreadableRecord("it has no 'renewed_at_millis', so it cannot be known to lapse")
    return Pin(path, kind, from_version, version, renewed or 0, lapses)


def _unreadable_error(path: str, reason: str) -> CorruptCatalogError:
    """The error for a pin or export record that cannot be honoured: it names
    the file and says how to fix it."""
    if path.startswith(f"{EXPORT_DIR}/"):
        name = path[len(EXPORT_DIR) + 1 :].removesuffix(".json")
        fix = (
            f"repair the record, or remove it with drop_export({name!r}) if that export no "
            f"longer needs its version (or delete the file {path} by hand)"
        )
        what = "export record"
    else:
        fix = f"repair it, or delete the file {path} if no rollback is running"
        what = "pin"
    return CorruptCatalogError(
        f"{what} {path} cannot be read: {reason}. It may protect versions from expiration, "
        f"so expiration refuses to run while it exists: {fix}"
    )


def _read_records(storage: Storage) -> tuple[list[Pin], list[tuple[str, str]]]:
    """Every pin record (rollback pins and export records), and the records
    that cannot be read, each with the reason."""
    pins: list[Pin] = []
    unreadable: list[tuple[str, str]] = []
    for folder in (PIN_DIR, EXPORT_DIR):
        for path in storage.list(folder):
            try:
                data = storage.read(path)
            except StorageFileNotFoundError:
                continue  # removed meanwhile: it pins nothing any more
            try:
                pins.append(_parse_record(path, data))
            except _UnreadableRecord as exc:
                unreadable.append((path, str(exc)))
    return pins, unreadable


def read_pins(storage: Storage) -> list[Pin]:
    """Every pin of a catalog: rollback pins and export records.

    Pins are written whole with put-if-absent or overwrite, so a reader
    never sees half a pin; a record that cannot be read is damage, and since
    nobody can tell what it protects, it is never skipped.

    Raises:
        CorruptCatalogError: a record cannot be read (it is named).
    """
    pins, unreadable = _read_records(storage)
    if unreadable:
        raise _unreadable_error(*unreadable[0])
    return pins


@contextlib.contextmanager
def _pinned(store: CatalogStore, version: int) -> Iterator[Pin]:
    """Pin ``version`` for the block: write the pin, then read the floor.

    Raises:
        VersionNotFoundError: ``version`` is below the floor (the pin is removed).
    """
    now = _now_millis()
    path = f"{PIN_DIR}/{uuid.uuid4().hex}.json"
    record = {
        "kind": "rollback",
        "from_version": version,
        "version": version,
        "created_at_millis": now,
        "renewed_at_millis": now,
    }
    try:
        store.storage.put_if_absent(path, json.dumps(record, sort_keys=True).encode())
        floor = store.oldest_version()  # from storage, after the pin (§8.1)
        if version < floor:
            raise VersionNotFoundError(f"version {version} was expired (oldest kept: {floor})")
        yield Pin(path, "rollback", version, version, now, True)
    finally:
        # Once the new version is published it keeps the nodes reachable; a
        # pin that cannot be removed lapses after PIN_TTL.
        with contextlib.suppress(StorageError):
            store.storage.delete(path)


# --- walking trees ----------------------------------------------------------------


def _walk(
    store: CatalogStore,
    node: Node,
    seen: set[str],
    missing: list[str] | None = None,
) -> None:
    """Add to ``seen`` the paths of every node and definition file ``node``
    reaches. Children may be in-memory nodes (a tree not yet written).

    With ``missing``, a node file that is missing or damaged is recorded
    there and skipped instead of raised.
    """
    if node.is_leaf:
        for v in node.values:
            if isinstance(v, DefRef):
                seen.add(v.path)
        return
    for child in node.children:
        if isinstance(child, Node):
            _walk(store, child, seen, missing)
            continue
        if child in seen:
            continue  # shared subtree: already walked
        try:
            loaded = store.load_node(child)
        except CorruptCatalogError:
            if missing is None:
                raise
            missing.append(child)
            continue
        seen.add(child)
        _walk(store, loaded, seen, missing)


def _reachable(store: CatalogStore, roots: Iterable[Root], seen: set[str]) -> None:
    """Add to ``seen`` the paths of every node, action and definition file the
    roots reach."""
    for root in roots:
        _add_action_file(root, seen)
        _walk(store, root.node, seen)


def _add_action_file(root: Root, seen: set[str]) -> None:
    """A root reaches the action file it names (spec/format.md §3.5)."""
    if root.info.action_file is not None:
        seen.add(root.info.action_file)


# --- export -------------------------------------------------------------------------


def _check_export_name(name: str) -> str:
    try:
        return validate_transaction_id(name)
    except InvalidNameError:
        raise InvalidNameError(
            f"invalid export name {name!r}: use 1-64 of A-Z a-z 0-9 _ -"
        ) from None


def exports(storage: Storage) -> dict[str, dict[str, Any]]:
    """The export records of a catalog, by export name (the file name).

    Raises:
        CorruptCatalogError: a record cannot be read (it is named).
    """
    out: dict[str, dict[str, Any]] = {}
    for path in storage.list(EXPORT_DIR):
        try:
            data = storage.read(path)
        except StorageFileNotFoundError:
            continue  # dropped meanwhile
        try:
            _parse_record(path, data)
        except _UnreadableRecord as exc:
            raise _unreadable_error(path, str(exc)) from None
        out[path[len(EXPORT_DIR) + 1 :].removesuffix(".json")] = json.loads(data)
    return out


def _load_kept(store: CatalogStore, version: int) -> Root:
    """The root of a version that is kept by the floor or by a pin."""
    try:
        return store.load_root(version)
    except VersionNotFoundError:
        return _load_pinned(store, version)  # pinned below a floor that moved meanwhile


class _ExportRecord:
    """The record ``exports/<name>.json`` of one export, written first (§8.2)."""

    def __init__(self, storage: Storage, name: str, target: str, mode: str) -> None:
        self.storage = storage
        self.path = f"{EXPORT_DIR}/{name}.json"
        self.fields: dict[str, Any] = {
            "name": name,
            "target": target,
            "mode": mode,
            "created_at_millis": _now_millis(),
        }

    def _data(self) -> bytes:
        return json.dumps(self.fields, sort_keys=True).encode()

    def create(self, low: int, version: int) -> None:
        self.fields.update(
            state="copying", from_version=low, version=version, renewed_at_millis=_now_millis()
        )
        try:
            self.storage.put_if_absent(self.path, self._data())
        except StorageFileExistsError:
            name = self.fields["name"]
            raise ExportAlreadyExistsError(f"an export named {name!r} already exists") from None

    def update(self, **fields: Any) -> None:
        self.fields.update(fields, renewed_at_millis=_now_millis())
        self.storage.overwrite(self.path, self._data())

    def renew_if_old(self) -> None:
        if _now_millis() - int(self.fields["renewed_at_millis"]) > PIN_TTL_MILLIS // 4:
            self.update()


def export_snapshot(
    store: CatalogStore,
    name: str,
    target_uri: str,
    mode: str,
    storage_options: dict[str, Any] | None,
) -> int:
    """Copy the latest version to a new catalog at ``target_uri``; return the
    exported version (spec/transactions.md §8.2)."""
    _check_export_name(name)
    if mode not in ("full", "minimal"):
        raise InvalidArgumentError(f"export mode must be 'full' or 'minimal', got {mode!r}")
    if store.storage.exists(f"{EXPORT_DIR}/{name}.json"):
        raise ExportAlreadyExistsError(f"an export named {name!r} already exists")
    target = open_storage(target_uri, storage_options)
    if _nested(target, store.storage):
        # Inside the source, its files would read as the source's records
        # (pins, exports) or orphans; holding it, the source's as the export's.
        raise InvalidArgumentError(
            f"target_uri {target_uri!r} ({target.location}) lies inside the catalog exported "
            f"({store.storage.location}) or holds it; export to a folder of its own"
        )
    if target.list(layout.VERSION_DIR):
        raise CatalogAlreadyExistsError(f"a catalog already exists at {target.location}")
    record = _ExportRecord(store.storage, name, target.location, mode)
    latest = store.load_latest()
    low = store.oldest_version() if mode == "full" else latest.version
    record.create(low, latest.version)  # the pin comes first ...
    try:
        for _ in range(8):
            floor = store.oldest_version()  # ... then the floor (§8.1)
            if latest.version >= floor:
                break
            latest = store.load_latest()  # the exported version was expired: start over
            low = floor if mode == "full" else latest.version
            record.update(from_version=low, version=latest.version)
        else:
            raise VersionNotFoundError("expiration kept overtaking the export; try again")
        low = max(low, floor)
        _copy_export(store, target, record, latest, low, mode)
        record.update(state="done", from_version=latest.version, version=latest.version)
    except BaseException:
        with contextlib.suppress(StorageError):
            store.storage.delete(record.path)
        raise
    return latest.version


def _nested(a: Storage, b: Storage) -> bool:
    """Whether one of two storages lies inside the other (or both are one):
    the same kind of location, one a prefix of the other segment by segment
    (local folders compared with symbolic links resolved)."""

    def key(storage: Storage) -> str:
        location = storage.location
        if "://" not in location:  # a local folder
            location = os.path.realpath(location)
        return location.rstrip("/") + "/"

    ka, kb = key(a), key(b)
    return ka.startswith(kb) or kb.startswith(ka)


def _copy_export(
    store: CatalogStore, target: Storage, record: _ExportRecord, latest: Root, low: int, mode: str
) -> None:
    keys = key_codec(latest.definition)
    with store.reading(latest.version):
        txn_keys = [
            k for k, _ in tree.scan(latest.node, keys.transactions_prefix(), store.load_node)
        ]
    files: set[str] = set()
    if mode == "full":
        roots = [
            latest if v == latest.version else _load_kept(store, v)
            for v in range(low, latest.version + 1)
        ]
        _reachable(store, roots, files)
        # Open distributed transactions come along with their state, so they
        # can be resumed in the target.
        for key in txn_keys:
            txn_id = keys.decode(key).parts[0]
            files.update(store.storage.list(f"{layout.DTXN_DIR}/{txn_id}"))
        root_paths = {root.path for root in roots}
        for path in sorted(_files_of(files) - root_paths):
            record.renew_if_old()
            _copy(store.storage, target, path)
        for root in roots:
            _copy(store.storage, target, root.path)
        if low > 0:
            target.overwrite(layout.OLDEST_FLOOR, layout.encode_counter(low))
        target.overwrite(layout.LATEST_HINT, layout.encode_hint(latest.version))
        return
    # Minimal: the begin versions of distributed transactions do not exist in
    # the target, so their objects are left out.
    # The copy is a new catalog at version 0 whose nodes are written afresh:
    # this catalog's trees name inline nodes of roots the target does not have.
    with store.reading(latest.version):
        node = _thaw(store, latest.node)
    if txn_keys:
        node = tree.apply(node, [(k, None) for k in txn_keys], latest.order, store.load_node)
    _walk(store, node, files)
    for path in sorted(files):
        record.renew_if_old()
        _copy(store.storage, target, path)
    copy_store = CatalogStore(target)
    try:
        copy_store.commit(0, node, latest.definition, uuid.uuid4().hex)
    finally:
        copy_store.close()


def _thaw(store: CatalogStore, node: Node) -> Node:
    """``node`` with every subtree that reaches an inline node loaded into
    memory, so that a commit writes those nodes again; subtrees of node files
    only are still named by path (spec/format.md §3.6: node files may name
    inline nodes, so a node file is taken over only if nothing under it is
    inline)."""
    thawed, _ = _thaw_child(store, node)
    assert isinstance(thawed, Node)
    return thawed


def _thaw_child(store: CatalogStore, child: ChildRef) -> tuple[ChildRef, bool]:
    """``(child or its in-memory copy, whether anything under it was inline)``."""
    inline = isinstance(child, str) and layout.parse_inline_ref(child) is not None
    node = child if isinstance(child, Node) else store.load_node(child)
    if node.is_leaf:
        return (node if inline else child), inline
    kids: list[ChildRef] = []
    below = False
    for c in node.children:
        k, changed = _thaw_child(store, c)
        kids.append(k)
        below = below or changed
    if not (inline or below or isinstance(child, Node)):
        return child, False
    return Node(node.height, node.keys, (), tuple(kids)), inline or below


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
        raise ExportNotFoundError(f"no export named {name!r}")
    storage.delete(marker)


# --- expiration ---------------------------------------------------------------------


@dataclass
class _Kept:
    """What expiration (and the file check) must keep."""

    floor: int
    latest: int
    roots: list[Root]
    #: Pinned versions below the floor whose roots are kept.
    pinned: set[int]
    #: Node, action and definition files the kept roots reach.
    files: set[str]
    #: The kept (or pinned) root that names each action file.
    action_roots: dict[str, Root]
    #: Pins that could not be honoured, with the reason.
    broken: list[str]
    #: Files a kept version needs that could not be read (missing or damaged).
    missing: list[str]
    #: Pin records naming a version above the latest one, with the reason.
    bad_records: list[tuple[str, str]]
    #: Roots of versions at or above the floor that are there but cannot be
    #: read (not strict), each with the reason; they are not in ``roots``.
    bad_roots: list[tuple[str, str]]


def _kept(store: CatalogStore, floor: int, pins: Iterable[Pin], *, strict: bool) -> _Kept:
    """Load the kept roots (every version from ``floor`` to the latest, and
    the pinned ones below) and the files they reach.

    With ``strict``, a missing or damaged file of a version at or above the
    floor (its root included), or a pin of a version above the latest one,
    raises CorruptCatalogError; otherwise it is recorded.
    """
    latest = store.latest_version()  # after the pins were read (§8.1)
    bad_records: list[tuple[str, str]] = []
    sound: list[Pin] = []
    for pin in pins:
        # A pinner only pins versions that existed when it wrote the pin, and
        # the latest version is found after the pins were read: a higher one
        # is a damaged number, which may stand for a version that needs keeping.
        if pin.version > latest:
            reason = f"it pins version {pin.version}, above the latest version {latest}"
            if strict:
                raise _unreadable_error(pin.path, reason)
            bad_records.append((pin.path, reason))
        else:
            sound.append(pin)
    files: set[str] = set()
    missing: list[str] = []
    bad_roots: list[tuple[str, str]] = []
    roots: list[Root] = []
    for v in range(floor, latest + 1):
        if strict:
            roots.append(_load_kept(store, v))
            continue
        try:
            roots.append(_load_kept(store, v))
        except MissingFileError:
            missing.append(layout.root_path(v))
        except CorruptCatalogError as exc:
            bad_roots.append((layout.root_path(v), f"the root of version {v} is damaged: {exc}"))
    if strict:
        _reachable(store, roots, files)
    else:
        for root in roots:
            _add_action_file(root, files)
            _walk(store, root.node, files, missing)
    pinned: set[int] = set()
    pinned_roots: list[Root] = []
    broken: list[str] = []
    for pin in sound:
        for v in pin.versions():
            if v >= floor or v in pinned:
                continue
            try:
                root = _load_pinned(store, v)
            except CorruptCatalogError as exc:
                broken.append(f"{pin.path} pins version {v}, which cannot be read: {exc}")
                missing.append(layout.root_path(v))
                continue
            pinned.add(v)
            pinned_roots.append(root)
            _add_action_file(root, files)
            gone: list[str] = []
            _walk(store, root.node, files, gone)
            if gone:
                broken.append(f"{pin.path} pins version {v}, whose file {gone[0]} cannot be read")
                missing.extend(gone)
    action_roots = {
        r.info.action_file: r for r in [*roots, *pinned_roots] if r.info.action_file is not None
    }
    return _Kept(
        floor, latest, roots, pinned, files, action_roots, broken, missing, bad_records, bad_roots
    )


def check_grace(store: CatalogStore, grace_seconds: float) -> None:
    """Refuse a grace period shorter than twice the catalog's commit time
    limit (spec/transactions.md §8.3 step 0, §8.5).

    Raises:
        InvalidArgumentError: it is.
    """
    limit = commit_time_limit_millis(store.load_latest().definition) / 1000
    if grace_seconds < 2 * limit:
        raise InvalidArgumentError(
            f"grace_seconds {grace_seconds:g} is shorter than twice the catalog's commit time "
            f"limit ({limit:g} s): files of commits in flight could be deleted. Use at least "
            f"{2 * limit:g}, or allow_short_grace (--allow-short-grace) when nobody writes to "
            f"the catalog while expiration runs"
        )


#: The longest expiration waits for its millisecond clock to advance.
_CLOCK_TICK_WAIT_SECONDS = 0.002


def expiration_clock_millis() -> int:
    """The clock expiration reads for ``T0`` (spec/transactions.md §8.3 step
    0), from which both the grace period and the definition's retention are
    measured: the first millisecond after the call, so that every file named
    before the call (its name holds the millisecond it was made in) counts as
    made before ``T0``, and a run with no grace period removes all that only
    the versions it expires needed, even right after the commits that freed
    them. Tests replace it to make versions old without waiting."""
    called = time.time_ns() // 1_000_000
    give_up = time.monotonic() + _CLOCK_TICK_WAIT_SECONDS
    while (now := time.time_ns() // 1_000_000) <= called and time.monotonic() < give_up:
        time.sleep(0.0001)
    return max(now, called + 1)  # (a clock set back meanwhile: the reading before)


def _retention_floor(
    store: CatalogStore, latest: int, old_floor: int, started_millis: float
) -> tuple[int, tuple[int, int]]:
    """The floor that the catalog definition's retention allows (§8.3 step
    1, no option given), with the retention: every version created less than
    ``expire_max_age_millis`` before ``started_millis`` is kept, with the
    version in effect at that moment, and at least the newest
    ``expire_min_versions``."""
    max_age, min_versions = expire_retention(store.load_latest().definition)
    moment = started_millis - max_age
    if moment <= 0:
        return old_floor, (max_age, min_versions)  # every version is younger
    try:
        by_time = version_as_of(store, datetime.fromtimestamp(moment / 1000, tz=UTC))
    except VersionNotFoundError:
        by_time = old_floor  # every kept version is younger
    return min(latest - min_versions + 1, by_time), (max_age, min_versions)


def expire_versions(
    store: CatalogStore,
    older_than: datetime | None,
    keep_last: int | None,
    cutoff_millis: float,
    open_transactions: dict[str, int],
    *,
    started_millis: float | None = None,
    dry_run: bool = False,
    dropped_transactions: Iterable[str] = (),
) -> ExpireResult:
    """Move the floor and delete what no retained version, pin or open
    distributed transaction can reach (spec/transactions.md §8.3): of
    those, the files created before ``cutoff_millis`` (the start of the run,
    read before ``open_transactions``, minus the grace period).

    With neither ``older_than`` nor ``keep_last``, the catalog definition's
    retention decides, measured from ``started_millis`` (default: now).
    With ``dry_run``, nothing is written or deleted; the result says what
    would be."""
    if keep_last is not None and keep_last < 1:
        raise OlympiaError("keep_last must be at least 1")
    latest = store.latest_version()
    old_floor = store.oldest_version()
    retention: tuple[int, int] | None = None
    if older_than is None and keep_last is None:
        start = expiration_clock_millis() if started_millis is None else started_millis
        floor, retention = _retention_floor(store, latest, old_floor, start)
    else:
        floor = latest if keep_last is None else latest - keep_last + 1
    if older_than is not None:
        try:
            by_time = version_as_of(store, older_than)
        except VersionNotFoundError:
            by_time = old_floor
        floor = by_time if keep_last is None else min(floor, by_time)
    # The transactions distributed since the caller listed them hold the
    # floor too: read again just before it is written (§6.1).
    open_transactions = {**open_transactions, **_open_begin_versions(store)}
    floor = min([floor, latest, *open_transactions.values()])
    floor = max(floor, old_floor)
    if floor > old_floor:  # 1. the floor first ...
        # ... but not while a record that may pin versions below it cannot be read
        read_pins(store.storage)
        if not dry_run:
            store.storage.overwrite(layout.OLDEST_FLOOR, layout.encode_counter(floor))
    # The clock after the floor is written: a candidate marker horizon at
    # this floor is stamped with it (§8.6).
    floor_written = expiration_clock_millis()
    now = _now_millis()
    horizon = read_horizon(store.storage)
    pins = read_pins(store.storage)  # 2. ... then the pins ...
    live = [p for p in pins if not p.lapsed(now)]
    kept = _kept(store, floor, live, strict=True)  # 3. ... then the latest version
    # Format version 2 replaces an expired root with a marker rather than
    # deleting it, so that no stale writer can publish that version again
    # (spec/format.md §2.3); version 1 deletes it.
    markers = int(kept.roots[-1].definition.format_version) >= 2
    # Roots below the floor that carry inline nodes a kept tree reaches stay
    # whole (spec/format.md §3.6).
    containers = _files_of(kept.files)
    root_paths: list[str] = []
    listed = _listed_roots(store.storage)
    for v, size in listed.items():
        if v >= floor or v in kept.pinned or size == len(layout.EXPIRED_ROOT):
            continue
        path = layout.root_path(v)
        if path in containers:
            continue
        root_paths.append(path)
        listed[v] = len(layout.EXPIRED_ROOT)
        if dry_run:
            continue
        if markers:
            store.storage.overwrite(path, layout.EXPIRED_ROOT)
        else:
            store.storage.delete(path)
    marker_paths: list[str] = []
    if markers:
        start = expiration_clock_millis() if started_millis is None else started_millis
        limit = commit_time_limit_millis(kept.roots[-1].definition)
        matured = horizon_matured(horizon, start, start - cutoff_millis, limit)
        if matured and horizon is not None:
            marker_paths = _deletable_markers(listed, min(horizon[0], floor))
        if not dry_run:
            store.storage.delete_many(marker_paths)
            if floor > 0 and (horizon is None or (matured and horizon[0] != floor)):
                # The next candidate: this floor, stamped after it was written.
                store.storage.overwrite(
                    layout.MARKER_HORIZON, layout.encode_horizon(floor, floor_written)
                )
    cutoff = cutoff_millis
    file_paths: list[str] = []
    for folder in (layout.NODE_DIR, layout.DEF_DIR, layout.ACT_DIR):
        for path in store.storage.list(folder):
            created = layout.created_millis(path)
            if path in kept.files or created is None or created >= cutoff:
                continue
            file_paths.append(path)
            if not dry_run:
                store.storage.delete(path)
    file_paths += _expire_transaction_states(store, open_transactions, cutoff, dry_run)
    pin_paths = [pin.path for pin in pins if pin.lapsed(now)]
    if not dry_run:
        for path in pin_paths:
            store.storage.delete(path)
    temporary: list[str] = []
    if dry_run:
        temporary = [
            f"{TMP_DIR}/{name}"
            for name, modified in store.storage.temporary_files()
            if modified < cutoff_millis / 1000
        ]
        deleted_tmp = len(temporary)
    else:
        deleted_tmp = store.storage.remove_temporary_files(cutoff_millis / 1000)
    return ExpireResult(
        floor,
        len(root_paths),
        len(file_paths),
        len(pin_paths),
        deleted_tmp,
        tuple(kept.broken),
        previous_oldest_version=old_floor,
        dry_run=dry_run,
        dropped_transactions=tuple(dropped_transactions),
        paths=(
            tuple(sorted([*root_paths, *marker_paths, *file_paths, *pin_paths, *temporary]))
            if dry_run
            else ()
        ),
        retention=retention,
        deleted_markers=len(marker_paths),
    )


def distributed_records(store: CatalogStore) -> list[pb.DistributedTransaction]:
    """The record of every distributed transaction the latest version holds
    (past its time to live or not), in key order."""
    root = store.load_latest()
    keys = key_codec(root.definition)
    out: list[pb.DistributedTransaction] = []
    with store.reading(root.version):
        for key, value in tree.scan(root.node, keys.transactions_prefix(), store.load_node):
            what = f"transaction {keys.decode(key).parts[0]}"
            out.append(parse(pb.DistributedTransaction, store.read_value(value), what))
    return out


def _open_begin_versions(store: CatalogStore) -> dict[str, int]:
    """The begin version of every distributed transaction the latest
    version holds that is within its time to live."""
    now = _now_millis()
    return {r.id: r.begin_version for r in distributed_records(store) if r.expires_at_millis >= now}


def read_horizon(storage: Storage) -> tuple[int, int] | None:
    """``vn/horizon`` as ``(version, clock after its floor was written)``;
    None when missing or unreadable (spec/transactions.md §8.6)."""
    try:
        return layout.decode_horizon(storage.read(layout.MARKER_HORIZON))
    except StorageFileNotFoundError:
        return None


def horizon_wait_millis(grace_millis: float, limit_millis: int) -> float:
    """How long after its stamp a marker horizon matures: twice the grace
    period, and at least four commit time limits (spec/transactions.md §8.6)."""
    return max(2 * grace_millis, 4 * limit_millis)


def horizon_matured(
    horizon: tuple[int, int] | None, started_millis: float, grace_millis: float, limit_millis: int
) -> bool:
    """Whether a run that started at ``started_millis`` may delete the
    markers below ``horizon`` (spec/transactions.md §8.6)."""
    if horizon is None:
        return False
    return started_millis - horizon[1] > horizon_wait_millis(grace_millis, limit_millis)


def _deletable_markers(listed: dict[int, int], below: int) -> list[str]:
    """The markers listed below ``below`` that may be deleted: all but one
    directly above a whole root, which keeps a reader that probes from that
    root's version from taking it for the latest (spec/transactions.md §8.6)."""
    marker = len(layout.EXPIRED_ROOT)
    out: list[str] = []
    for v, size in listed.items():
        if v >= below or size != marker:
            continue
        under = listed.get(v - 1)
        if under is not None and under != marker:
            continue
        out.append(layout.root_path(v))
    return out


def _files_of(refs: Iterable[str]) -> set[str]:
    """The files that hold what ``refs`` (node, action, definition paths and
    inline node references) name: an inline node is held by a root file."""
    return {layout.file_of(r) for r in refs}


def _listed_roots(storage: Storage, listed: dict[str, int] | None = None) -> dict[int, int]:
    """The versions of the root files (and expired-root markers) in ``vn/``,
    found by listing (or in ``listed``, a listing of ``vn/`` with sizes),
    with each file's size, in version order."""
    out: dict[int, int] = {}
    if listed is None:
        listed = storage.list_sizes(layout.VERSION_DIR)
    for path, size in listed.items():
        with contextlib.suppress(CorruptCatalogError):  # vn/latest, vn/oldest, strays
            out[layout.parse_version_file_name(path.rsplit("/", 1)[-1])] = size
    return dict(sorted(out.items()))


def _state_files(storage: Storage) -> dict[str, list[str]]:
    by_txn: dict[str, list[str]] = {}
    for path in storage.list(layout.DTXN_DIR):
        parts = path.split("/")
        if len(parts) == 3:
            by_txn.setdefault(parts[1], []).append(path)
    return by_txn


def _expire_transaction_states(
    store: CatalogStore, open_ids: Iterable[str], cutoff: float, dry_run: bool = False
) -> list[str]:
    """Delete the state files of distributed transactions that ended (with
    ``dry_run``: only find them); return their paths."""
    keep = set(open_ids)
    deleted: list[str] = []
    for txn_id, paths in _state_files(store.storage).items():
        if txn_id in keep:
            continue
        try:
            first = parse(apb.TransactionState, store.storage.read(min(paths)), min(paths))
        except (StorageError, OlympiaError):
            continue
        if first.transaction.created_at_millis >= cutoff:
            continue  # may still be starting up: its catalog object is not committed yet
        # Every state names the transaction, so a run killed half way leaves
        # states the next run still recognises; the highest goes first.
        for path in sorted(paths, reverse=True):
            if not dry_run:
                store.storage.delete(path)
            deleted.append(path)
        if not dry_run:
            store.storage.remove_folder_if_empty(f"{layout.DTXN_DIR}/{txn_id}")
    return deleted


def _load_pinned(store: CatalogStore, version: int) -> Root:
    """Load a pinned root below the floor (load_root refuses those).

    Raises:
        MissingFileError: the root file is gone.
        CorruptCatalogError: it is damaged.
    """
    path = layout.root_path(version)
    try:
        data = store.storage.read(path)
    except StorageFileNotFoundError:
        raise MissingFileError(f"pinned root {path} is missing") from None
    if layout.is_expired_root(data):
        raise MissingFileError(f"pinned root {path} was expired (an expired-root marker)")
    nf = decode_node(data, path)
    if nf.root is None or nf.root.version != version:
        raise CorruptCatalogError(f"pinned root {path} is not the root of version {version}")
    return Root(
        version,
        nf.node,
        nf.root,
        parse_root_definition(nf, path),
        nf.created_at_millis,
    )


# --- checking files -----------------------------------------------------------------


@dataclass(frozen=True)
class FileCheck:
    """The result of :func:`check_files` (``Catalog.fsck()``)."""

    oldest_version: int
    latest_version: int
    #: Versions whose files are kept: the floor to the latest, and pinned ones below.
    kept_versions: tuple[int, ...]
    #: How many needed files were read and verified.
    checked_files: int
    #: Needed files that are not on storage.
    missing: tuple[str, ...]
    #: Needed files that are there but damaged, each with the reason.
    damaged: tuple[str, ...]
    #: Files nothing kept needs (unreachable node and definition files, roots
    #: below the floor, lapsed pins, temporary files, states of distributed
    #: transactions that are neither open nor finished). While the root of a
    #: kept version is missing or damaged, no node, action or definition file
    #: is listed (what that root reaches is unknown).
    orphans: tuple[str, ...]
    #: State files of distributed transactions that finished (committed,
    #: rolled back, or dropped past their TTL): no longer needed, and removed
    #: by the next expiration once older than its grace period
    #: (spec/transactions.md §6.6). Not damage, and not orphans.
    awaiting_expiration: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Every file a kept version needs is present and undamaged."""
        return not self.missing and not self.damaged

    @property
    def clean(self) -> bool:
        """``ok``, and nothing else is stored (no orphans, nothing awaiting
        expiration)."""
        return self.ok and not self.orphans and not self.awaiting_expiration


def _root_version(path: str) -> int | None:
    """The version whose root file ``path`` is, or None for another file."""
    folder, _, name = path.partition("/")
    if folder != layout.VERSION_DIR:
        return None
    try:
        return layout.parse_version_file_name(name)
    except CorruptCatalogError:
        return None


def check_files(store: CatalogStore) -> FileCheck:
    """Verify that every file the kept versions, pins and open distributed
    transactions need is present and undamaged (content digest, checksum and
    node structure, read from storage rather than from any cache), and list
    the files nothing kept needs."""
    storage = store.storage
    # This process's own hint write in flight is not a killed writer's leftover.
    store.wait_for_background_writes()
    floor = store.oldest_version()
    now = _now_millis()
    pins, bad_records = _read_records(storage)
    live = [p for p in pins if not p.lapsed(now)]
    fresh = CatalogStore(storage)  # no cached nodes: every file is read again
    try:
        kept = _kept(fresh, floor, live, strict=False)
    except CorruptCatalogError as exc:
        raise CorruptCatalogError(f"the catalog at {storage.location} is damaged: {exc}") from exc
    # Pin records that cannot be honoured are damaged files that block expiration.
    bad_records += kept.bad_records
    damaged = [f"{path}: cannot be read as a pin record: {reason}" for path, reason in bad_records]
    damaged += [f"{path}: {reason}" for path, reason in kept.bad_roots]
    checked = len(kept.roots) + len(kept.pinned)
    needed: set[str] = {r.path for r in kept.roots}
    needed.update(path for path, _ in kept.bad_roots)
    needed.update(path for path, _ in bad_records)
    needed.update(layout.root_path(v) for v in kept.pinned)
    unreadable, kept.missing = kept.missing, []
    for path in sorted(_files_of(kept.files | set(unreadable))):
        needed.add(path)
        try:
            data = storage.read(path)
        except StorageFileNotFoundError:
            kept.missing.append(path)
            continue
        if path.startswith(f"{layout.VERSION_DIR}/") and layout.is_expired_root(data):
            version = _root_version(path)
            if version is not None and version >= floor:
                # Only expiration writes markers, after a floor above them:
                # the floor file was lost or rewritten by hand.
                whole = [r.version for r in kept.roots if r.version > version]
                damaged.append(
                    f"{path}: version {version} was expired (an expired-root marker) although "
                    f"{layout.OLDEST_FLOOR} names {floor} as the oldest kept version: the floor "
                    f"file was lost or rewritten"
                    + (
                        f"; the oldest version above it whose root is whole is {min(whole)} "
                        f"(write {min(whole)} to {layout.OLDEST_FLOOR})"
                        if whole
                        else ""
                    )
                )
                continue
            kept.missing.append(path)  # a pinned or inline-node-carrying root that was expired
            continue
        checked += 1
        if not layout.content_matches(path, data):
            damaged.append(f"{path}: content does not match the digest in its name")
        elif path.startswith((f"{layout.NODE_DIR}/", f"{layout.VERSION_DIR}/")):
            try:
                decode_node(data, path)
            except CorruptCatalogError as exc:
                damaged.append(f"{path}: {exc}")
        elif path in kept.action_roots:
            try:
                check_action_file(data, path, kept.action_roots[path])
            except CorruptCatalogError as exc:
                damaged.append(f"{path}: {exc}")
    # Open distributed transactions: every state file of each one listed.
    states = _state_files(storage)
    open_ids: list[str] = []
    listed = False
    if kept.roots and kept.roots[-1].version == kept.latest:
        latest_root = kept.roots[-1]
        keys = key_codec(latest_root.definition)
        try:
            with fresh.reading(latest_root.version):
                for k, _ in tree.scan(
                    latest_root.node, keys.transactions_prefix(), fresh.load_node
                ):
                    open_ids.append(keys.decode(k).parts[0])
            listed = True
        except CorruptCatalogError as exc:
            # A node on the way is missing or damaged: it is reported above (or
            # here, if it was not); the transactions behind it cannot be listed.
            if not any(p in str(exc) for p in [*kept.missing, *damaged]):
                damaged.append(f"cannot list the open distributed transactions: {exc}")
    awaiting: list[str] = []
    if not listed:
        # The latest root (reported above) or a node on the way cannot be
        # read, so no state file can be told unneeded: none is called an orphan.
        needed.update(p for paths in states.values() for p in paths)
    else:
        for txn_id, paths in states.items():
            if txn_id not in open_ids and _finished(storage, paths, now):
                awaiting.extend(paths)
                needed.update(paths)
    for txn_id in open_ids:
        paths = states.get(txn_id, [])
        if not paths:
            kept.missing.append(layout.dtxn_state_path(txn_id, 0))
        for path in paths:
            needed.add(path)
            checked += 1
            try:
                parse(apb.TransactionState, storage.read(path), path)
            except StorageFileNotFoundError:
                kept.missing.append(path)
            except OlympiaError as exc:
                damaged.append(f"{path}: {exc}")
    needed.update(p.path for p in live)
    needed.update((layout.LATEST_HINT, layout.OLDEST_FLOOR, layout.MARKER_HORIZON))
    # Expired-root markers below the floor are part of the format (they keep
    # expired versions from being published again), not orphans.
    # ``vn/`` is listed once, for this and for the orphans below.
    version_files = storage.list_sizes(layout.VERSION_DIR)
    for v, size in _listed_roots(storage, version_files).items():
        if v < floor and size == len(layout.EXPIRED_ROOT):
            needed.add(layout.root_path(v))
    kept_versions = set(range(floor, kept.latest + 1)) | kept.pinned
    # A kept root, a node of a kept tree or a pin record that cannot be read
    # may reach any node, action or definition file (what only it names is
    # live): while one is missing or damaged, none of those is an orphan.
    reaching = (f"{layout.VERSION_DIR}/", f"{layout.NODE_DIR}/", f"{PIN_DIR}/", f"{EXPORT_DIR}/")
    unread = (
        len(kept.roots) < kept.latest + 1 - floor
        or any(path.startswith(reaching) for path in kept.missing)
        or any(problem.startswith(reaching) for problem in damaged)
    )
    orphans: list[str] = []
    for folder in (
        layout.VERSION_DIR,
        layout.NODE_DIR,
        layout.DEF_DIR,
        layout.ACT_DIR,
        layout.DTXN_DIR,
        PIN_DIR,
        EXPORT_DIR,
    ):
        if unread and folder in (layout.NODE_DIR, layout.DEF_DIR, layout.ACT_DIR):
            continue
        stored = sorted(version_files) if folder == layout.VERSION_DIR else storage.list(folder)
        orphans.extend(p for p in stored if p not in needed)
    orphans.extend(f"{TMP_DIR}/{name}" for name, _ in storage.temporary_files())
    return FileCheck(
        oldest_version=floor,
        latest_version=kept.latest,
        kept_versions=tuple(sorted(kept_versions)),
        checked_files=checked,
        missing=tuple(sorted(set(kept.missing))),
        damaged=tuple(damaged),
        orphans=tuple(sorted(orphans)),
        awaiting_expiration=tuple(sorted(awaiting)),
    )


def _finished(storage: Storage, paths: list[str], now_millis: float) -> bool:
    """Whether the state files ``paths`` of a distributed transaction that
    is not open belong to one that finished, so that expiration removes them
    (§8.3 step 7 reads step 0): step 0 is readable, and the last step is a
    claim (committed or rolled back) or the transaction is past its TTL
    (dropped by expiration). Otherwise (a ``distribute()`` that failed or is
    still running, or unreadable states) they are orphans."""
    try:
        first = parse(apb.TransactionState, storage.read(min(paths)), min(paths))
        last = parse(apb.TransactionState, storage.read(max(paths)), max(paths))
    except OlympiaError:
        return False
    if last.outcome != apb.TRANSACTION_OUTCOME_OPEN:
        return True
    return first.transaction.expires_at_millis < now_millis
