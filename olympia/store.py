"""The commit path: reading and writing node files, roots and version hints.

This is the only module that names and writes catalog files. It loads nodes
for the tree (with a cache: node files never change once written) and
publishes a new version with the commit protocol of spec/format.md:

1. write every new definition file and non-root node file, in parallel, each
   under a fresh unique name (put-if-absent, so nothing is ever replaced);
2. put the root file at ``vn/<version>`` with put-if-absent: the single step
   that publishes the version, won by exactly one writer;
3. best effort: overwrite the ``vn/latest`` hint.

A crash or error before step 2 completes leaves only unreachable files.
"""

from __future__ import annotations

import collections
import contextlib
import math
import os
import threading
import time
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import NoReturn

from olympia import layout, tree
from olympia.codec import (
    INLINE_ACTION_BYTES_MAX,
    INLINE_ACTIONS_MAX,
    SUPPORTED_FORMAT_VERSIONS,
    CommitInfo,
    GroupEntry,
    NodeFile,
    RootInfo,
    decode_actions,
    decode_node,
    encode_actions,
    encode_node,
    inline_nodes_of,
    transaction_ids,
)
from olympia.definition import commit_time_limit_millis, stored_definition_problem
from olympia.errors import (
    CatalogNotFoundError,
    CommitConflictError,
    CommitFailedError,
    CommitTimeoutError,
    CorruptCatalogError,
    StorageError,
    StorageFileExistsError,
    StorageFileNotFoundError,
    VersionExpiredError,
    VersionNotFoundError,
)
from olympia.node import ChildRef, DefRef, Node, Value
from olympia.objects import parse
from olympia.proto.objects_pb2 import CatalogDefinition
from olympia.storage.base import Placed, PutGroup, Staged, Storage

_WRITE_WORKERS = 16


#: Every open store, so a forked child can reset their threads (see below).
_LIVE_STORES: weakref.WeakSet[CatalogStore] = weakref.WeakSet()


def _reset_stores_after_fork() -> None:
    for store in list(_LIVE_STORES):
        store._after_fork_in_child()


if hasattr(os, "register_at_fork"):  # POSIX; Windows has no fork
    os.register_at_fork(after_in_child=_reset_stores_after_fork)


@dataclass(frozen=True)
class Root:
    """One committed version: its root node and root-only system keys."""

    version: int
    node: Node
    info: RootInfo
    definition: CatalogDefinition
    created_at_millis: int

    @property
    def path(self) -> str:
        return layout.root_path(self.version)

    @property
    def order(self) -> int:
        return int(self.definition.node_order)

    @property
    def format_version(self) -> int:
        return int(self.definition.format_version)


#: An action file is named anew (same content, fresh time in its name) when
#: a retried commit would otherwise publish one named longer ago than this,
#: so that expiration's grace period always covers it (transactions.md §3).
_ACTION_FILE_RENAME_MILLIS = 60_000


@dataclass
class ChainLink:
    """One version of :meth:`CatalogStore.publish_chain`: its new tree
    (children may be nodes not yet written) and what its root records about
    the transaction, or the transactions, it holds."""

    transaction_id: str
    tree: Node
    actions: PreparedActions
    begin_version: int
    isolation: str
    serialized_before: tuple[int, ...] = ()
    #: Several transactions in one version (``$group``, spec/format.md
    #: §3.2): their entries, the first naming ``transaction_id``; then
    #: ``begin_version`` is the smallest of their begin versions.
    group: tuple[GroupEntry, ...] = ()
    #: The commit metadata of its transactions that have any, in serial
    #: order (``$commit_info``, spec/format.md §3.7).
    commit_infos: tuple[tuple[str, CommitInfo], ...] = ()

    @property
    def transaction_ids(self) -> tuple[str, ...]:
        return transaction_ids(self.transaction_id, self.group)


@dataclass
class ChainOutcome:
    """What :meth:`CatalogStore.publish_chain` published: the roots, in order;
    ``unknown`` when the put of the next one failed with its outcome unknown."""

    published: list[Root] = field(default_factory=list)
    unknown: bool = False
    #: The storage error that ended the chain, if one did (with ``unknown``:
    #: the put whose outcome is unknown; else nothing after it was put).
    error: BaseException | None = None


class PreparedActions:
    """The action records of one transaction, encoded once for every attempt
    to commit it: inline (few actions, or a format version 1 catalog) or as
    an action file (spec/format.md §3.2, §3.5)."""

    def __init__(
        self,
        actions: Callable[[], Iterable[tuple[str, bytes]]],
        count: int,
        transaction_id: str,
        definition: CatalogDefinition,
    ) -> None:
        """``actions()`` yields the ``count`` (object key, serialized action)
        pairs; it is called once, or twice for a small list."""
        self.count = count
        self.inline: tuple[tuple[str, bytes], ...] = ()
        self.data: bytes | None = None
        self.path: str | None = None
        self._named_at = 0
        self._digest: str | None = None
        #: The name under which ``data`` was last written successfully.
        self.written: str | None = None
        if int(definition.format_version) < 2:
            self.inline = tuple(actions())
            return
        if count <= INLINE_ACTIONS_MAX:
            few = tuple(actions())
            if sum(len(v) for _, v in few) <= INLINE_ACTION_BYTES_MAX:
                self.inline = few
                return
        compression = definition.node_compression or "none"
        self.data = encode_actions(transaction_id, actions(), count, _now_millis(), compression)

    def name(self, limit_millis: int) -> str | None:
        """The path to publish, renamed when the current name is older than
        a minute or half the commit time limit ``limit_millis``
        (spec/transactions.md §8.5)."""
        if self.data is None:
            return None
        now = _now_millis()
        rename_after = min(_ACTION_FILE_RENAME_MILLIS, limit_millis // 2)
        if self.path is None or now - self._named_at > rename_after:
            if self._digest is None:
                self._digest = layout.content_digest(self.data)
            self.path = layout.action_path(self.data, now, self._digest)
            self._named_at = now
        return self.path

    @property
    def named_at(self) -> int:
        """When :meth:`name` last named the action file (its creation time)."""
        return self._named_at


def _now_millis() -> int:
    return int(time.time() * 1000)


def check_action_file(data: bytes, path: str, root: Root) -> tuple[tuple[str, bytes], ...]:
    """Decode action file ``path`` named by ``root`` and check that it is the
    one the root means (transaction id and count).

    Raises:
        CorruptCatalogError: naming ``path``.
    """
    decoded = decode_actions(data, path)
    if decoded.transaction_id != root.info.transaction_id:
        raise CorruptCatalogError(
            f"action file {path} belongs to transaction {decoded.transaction_id!r}, not to "
            f"{root.info.transaction_id!r} which committed version {root.version}"
        )
    if len(decoded.actions) != root.info.n_actions:
        raise CorruptCatalogError(
            f"action file {path} holds {len(decoded.actions)} actions; the root of version "
            f"{root.version} says {root.info.n_actions}"
        )
    return decoded.actions


def parse_root_definition(nf: NodeFile, path: str) -> CatalogDefinition:
    """The catalog definition of a decoded root, which must name the format
    version the file was written with (spec/format.md §3.1).

    Raises:
        CorruptCatalogError: naming ``path``.
    """
    assert nf.root is not None
    definition = parse_definition(nf.root.catalog_def, path)
    if int(definition.format_version) == nf.format_version:
        return definition
    if int(definition.format_version) > max(SUPPORTED_FORMAT_VERSIONS):
        return definition  # refused by the caller as an unsupported format version
    raise CorruptCatalogError(
        f"root file {path} is a format version {nf.format_version} file of a catalog "
        f"of format version {definition.format_version}"
    )


def parse_definition(data: bytes, where: str) -> CatalogDefinition:
    """Parse a serialized CatalogDefinition.

    Raises:
        CorruptCatalogError: naming ``where``.
    """
    known = _DEFINITIONS.get(data)
    if known is not None:
        return known
    definition = parse(CatalogDefinition, data, f"the catalog in {where}")
    problem = stored_definition_problem(definition)
    if problem is not None:
        raise CorruptCatalogError(f"catalog definition in {where} {problem}")
    if len(_DEFINITIONS) >= _DEFINITIONS_MAX:
        _DEFINITIONS.clear()
    _DEFINITIONS[data] = definition
    return definition


#: Definitions parsed and found valid, by their bytes: every root carries
#: its catalog's definition, which almost never changes, so most roots read
#: parse the same bytes. Shared, so never to be changed by their readers.
_DEFINITIONS: dict[bytes, CatalogDefinition] = {}
_DEFINITIONS_MAX = 64


class MissingFileError(CorruptCatalogError):
    """A node or definition file that a root refers to is not on storage.

    Raised by the loaders; :meth:`CatalogStore.reading` turns it into
    :class:`VersionNotFoundError` when the version being read was expired.
    """


#: How often a reader starts over when expiration moves the floor under it.
_FLOOR_ROUNDS = 8

#: Roots read in the first round of a probe from a known version (format.md
#: §2.2) by a store that has not probed yet, and after a lost race.
_PROBE_WIDTH = 4
#: The first round's width once the store has seen two versions: sized by the
#: pace of new versions (:meth:`CatalogStore._probe_width`), within these.
_PROBE_WIDTH_MIN = 3
_PROBE_WIDTH_MAX = 32
#: Sightings of new versions that the pace is taken over.
_SIGHTINGS = 16
#: Rounds of a probe from a known version before the full procedure takes over.
_PROBE_ROUNDS = 3
#: Readers of a bounded pool: roots of a probe, the children of a listing.
#: A commit carries at most this many of its new non-root nodes, of at most
#: this many bytes in all, inside its root file (spec/format.md §3.6); the
#: rest are node files. A one-object commit changes one node per level.
INLINE_NODES_MAX = 8
INLINE_BYTES_MAX = 512 * 1024
_INLINE_PREFIX = f"{layout.VERSION_DIR}/"


#: Bytes a process may keep in the caches of one open catalog by default
#: (``cache_bytes`` of :func:`olympia.load_catalog`): decoded nodes, the
#: definition files they name, and roots, each weighed by an estimate of the
#: memory it takes.
DEFAULT_CACHE_BYTES = 256 * 1024 * 1024

#: What a decoded row costs beyond its bytes (the Python objects: a key
#: string, a value or child object, their slots in the node's tuples),
#: measured with tracemalloc on leaves, internal nodes and roots: 71-87.
_ROW_BYTES = 96


def node_weight(node: Node) -> int:
    """The memory a decoded ``node`` takes, about: the bytes of its keys and
    values (or children) and a fixed cost per row. Taken from the node, not
    its file, which may be compressed."""
    items = node.values if node.is_leaf else node.children
    try:
        content = sum(map(len, items))  # type: ignore[arg-type]
    except TypeError:  # a definition file reference among the values
        content = sum(len(v) if isinstance(v, bytes | str) else _ROW_BYTES for v in items)
    return sum(map(len, node.keys)) + content + _ROW_BYTES * len(node.keys)


def _root_weight(root: Root) -> int:
    info = root.info
    rows = len(root.node.keys) + len(info.actions)
    return (
        sum(map(len, info.inline_nodes))
        + sum(len(a) for _, a in info.actions)
        + len(info.catalog_def)
        + 2 * _ROW_BYTES * rows  # the pivot keys and children, besides the row objects
    )


class _LRU:
    """A least-recently-used cache holding at most ``capacity`` entries and,
    with ``max_bytes``, entries whose weights (given to :meth:`put`) add up
    to at most ``max_bytes``; an entry heavier than that is not kept."""

    def __init__(self, capacity: int, max_bytes: int | None = None) -> None:
        self._capacity = capacity
        self._max_bytes = max_bytes
        self._data: OrderedDict[str, object] = OrderedDict()
        self._weights: dict[str, int] = {}
        self._total = 0
        self._lock = threading.Lock()

    @property
    def weight(self) -> int:
        """The weights of the entries held, added up."""
        return self._total

    def __len__(self) -> int:
        return len(self._data)

    def reset_lock(self) -> None:
        """A new lock (after fork: another thread may have held the old one)."""
        self._lock = threading.Lock()

    def get(self, key: str) -> object | None:
        with self._lock:
            value = self._data.get(key)
            if value is not None:
                self._data.move_to_end(key)
            return value

    def put(self, key: str, value: object, weight: int = 0) -> None:
        with self._lock:
            self._total -= self._weights.pop(key, 0)
            self._data.pop(key, None)
            if self._max_bytes is not None and weight > self._max_bytes:
                return
            self._data[key] = value
            if weight:
                self._weights[key] = weight
                self._total += weight
            while len(self._data) > self._capacity or (
                self._max_bytes is not None and self._total > self._max_bytes
            ):
                old, _ = self._data.popitem(last=False)
                self._total -= self._weights.pop(old, 0)


@dataclass
class WriteStats:
    """What one commit wrote (for benchmarks and tests)."""

    files: int = 0
    bytes: int = 0


class CatalogStore:
    """Reads and writes the files of one catalog."""

    def __init__(self, storage: Storage, cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.storage = storage
        # The budget: nodes 3/4 of it, roots (decoded, raw, or kept for their
        # inline nodes) 1/16 each kind, definition files 1/16. Entry counts
        # are bounded too, far above what the bytes allow for usual entries.
        share = cache_bytes // 16
        self._nodes = _LRU(1 << 20, cache_bytes - 4 * share)
        self._values = _LRU(1 << 20, share)
        self._roots = _LRU(256, share)
        #: Root files read but not decoded yet (the versions a probe steps
        #: over): decoded by :meth:`load_root` if a conflict check needs them.
        self._raw_roots = _LRU(256, share)
        #: The inline nodes of roots read only for them (:meth:`_load_inline`).
        self._inline_blobs = _LRU(256, share)
        #: Cache for data derived from immutable files (e.g. conflict footprints).
        self.derived = _LRU(8192)
        #: The roots read along with a put that lost (see :meth:`commit`),
        #: by the lost root's path: (the clock before the reads, the replies).
        self._lost_reads = _LRU(4)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._hint_write: Future[None] | None = None
        #: The newest version this store saw published (found or committed):
        #: where the next probe for the latest version starts (-1: none yet).
        self._seen = -1
        #: (monotonic time, version): when this store last learnt of each of
        #: the newest versions it saw, the pace at which the catalog gains
        #: versions; the width of a probe's first round follows it
        #: (:meth:`_probe_width`).
        self._sightings: collections.deque[tuple[float, int]] = collections.deque(maxlen=_SIGHTINGS)
        #: ``(u, t)``: at this process's clock ``t`` (ms), read before the
        #: request that told it, version ``u`` was absent, or the floor was
        #: at or below ``u``: every version from ``u`` up may be put until
        #: ``t`` plus the commit time limit (spec/transactions.md §8.6).
        self._free_since: tuple[int, int] | None = None
        self.last_write = WriteStats()
        _LIVE_STORES.add(self)

    def _after_fork_in_child(self) -> None:
        """Forget the parent's writer threads and locks: a forked child has
        only the thread that forked, so the inherited pool would never run a
        task and a lock held by another thread would never be released."""
        self._pool = None
        self._pool_lock = threading.Lock()
        for cache in (
            self._nodes,
            self._values,
            self._roots,
            self._raw_roots,
            self._inline_blobs,
            self.derived,
            self._lost_reads,
        ):
            cache.reset_lock()

    # --- reading ---------------------------------------------------------------

    def _read_required(self, path: str, what: str) -> bytes:
        try:
            data = self.storage.read(path)
        except StorageFileNotFoundError:
            raise MissingFileError(
                f"{what} {path} is missing from the catalog at {self.storage.location}"
            ) from None
        if not layout.content_matches(path, data):
            raise CorruptCatalogError(
                f"{what} {path} is damaged: its content does not match the digest in its name"
            )
        return data

    def load_node(self, path: str) -> Node:
        """The node stored at ``path`` (a loader for :mod:`olympia.tree`).

        Raises:
            CorruptCatalogError: the file is missing, damaged or foreign.
        """
        cached = self._nodes.get(path)
        if cached is not None:
            return cached  # type: ignore[return-value]
        if path.startswith(_INLINE_PREFIX):
            return self._load_inline(path)
        nf = decode_node(self._read_required(path, "node file"), path)
        if nf.root is not None:
            raise CorruptCatalogError(f"node file {path} is a root node where a child was expected")
        self._nodes.put(path, nf.node, node_weight(nf.node))
        return nf.node

    def _load_inline(self, ref: str) -> Node:
        """An inline node (spec/format.md §3.6): read from the root file that
        carries it, whatever the floor says (a kept tree may name a node in
        the root of an expired version; expiration keeps that file)."""
        parsed = layout.parse_inline_ref(ref)
        if parsed is None:
            raise CorruptCatalogError(f"child reference {ref!r} names no node")
        version, index = parsed
        path = layout.root_path(version)
        held = self._roots.get(path)
        if isinstance(held, Root):
            blobs = held.info.inline_nodes
        else:
            carried = self._inline_blobs.get(path)
            if carried is None:
                data = self._read_required(path, "root file")
                if layout.is_expired_root(data):
                    raise MissingFileError(
                        f"root file {path}, which holds node {ref}, was replaced by an "
                        f"expired-root marker in the catalog at {self.storage.location}"
                    )
                # Only the inline nodes: decoding the rest of an old root
                # costs more than the node (spec/format.md §3.6, "Readers").
                carried = inline_nodes_of(data, path, version)
                self._inline_blobs.put(path, carried, sum(map(len, carried)))
            blobs = carried  # type: ignore[assignment]
        if index >= len(blobs):
            raise CorruptCatalogError(
                f"node {ref} does not exist: the root of version {version} holds "
                f"{len(blobs)} inline nodes"
            )
        nf = decode_node(blobs[index], ref)
        if nf.root is not None:
            raise CorruptCatalogError(
                f"inline node {ref} is a root node where a child was expected"
            )
        self._nodes.put(ref, nf.node, node_weight(nf.node))
        return nf.node

    def read_value(self, value: Value) -> bytes:
        """The bytes of a tree value, reading its definition file if needed."""
        if isinstance(value, bytes):
            return value
        cached = self._values.get(value.path)
        if cached is not None:
            return cached  # type: ignore[return-value]
        data = self._read_required(value.path, "definition file")
        self._values.put(value.path, data, len(data))
        return data

    @contextlib.contextmanager
    def reading(self, version: int) -> Iterator[None]:
        """Read the tree of ``version`` inside this block.

        A node or definition file found missing means either corruption or
        that expiration removed ``version`` meanwhile (it writes the floor
        before deleting anything, so the floor read here tells which).

        Raises:
            VersionNotFoundError: ``version`` is now below the floor.
            CorruptCatalogError: a file is missing or damaged although the
                version is retained.
        """
        try:
            yield
        except MissingFileError as exc:
            self.missing_while_reading(version, exc)

    def missing_while_reading(self, version: int, exc: MissingFileError) -> NoReturn:
        """What :meth:`reading` raises for ``exc`` (for hot paths that catch
        :class:`MissingFileError` themselves instead of entering the block).

        Raises:
            VersionNotFoundError: ``version`` is now below the floor.
            MissingFileError: ``exc``, otherwise.
        """
        try:
            floor = self.oldest_version()
        except StorageError:
            raise exc from None
        if version < floor:
            raise VersionNotFoundError(
                f"version {version} was expired while it was being read "
                f"(oldest kept: {floor}); read a newer version"
            ) from None
        raise exc

    def load_root(self, version: int, *, fresh: bool = False) -> Root:
        """The root of ``version``.

        With ``fresh``, the floor is read from storage even when the root is
        cached: use it to decide whether a version is still available before
        building on it.

        Raises:
            VersionNotFoundError: no such version, or it was expired.
            CorruptCatalogError: the root file is damaged.
        """
        if not 0 <= version <= layout.MAX_VERSION:  # e.g. read from a damaged record
            raise VersionNotFoundError(f"version {version} cannot exist: versions are below 2**63")
        path = layout.root_path(version)
        cached = self._roots.get(path)
        if cached is None:
            raw = self._raw_roots.get(path)
            if isinstance(raw, bytes):
                cached = self._decode_root(version, raw)
        if cached is not None and not fresh:
            return cached  # type: ignore[return-value]
        self._refuse_expired(version)
        if cached is not None:
            return cached  # type: ignore[return-value]
        try:
            data = self.storage.read(path)
        except StorageFileNotFoundError:
            self._refuse_expired(version)  # expiration may have deleted it just now
            raise VersionNotFoundError(
                f"version {version} does not exist in the catalog at {self.storage.location}"
            ) from None
        return self._decode_root(version, data)

    def _cache_root(self, root: Root) -> None:
        self._roots.put(root.path, root, _root_weight(root))

    def _holds_root(self, version: int) -> bool:
        """Whether the root of ``version`` is cached, decoded or not."""
        path = layout.root_path(version)
        return self._roots.get(path) is not None or self._raw_roots.get(path) is not None

    def _decode_root(self, version: int, data: bytes) -> Root:
        """The root of ``version`` from the bytes of its root file (cached)."""
        root = self.decode_root_apart(version, data)
        self._cache_root(root)
        return root

    def decode_root_apart(self, version: int, data: bytes) -> Root:
        """The root of ``version`` from ``data``, checked as any root file
        is, but not cached: bytes that are not yet (or may never be) that
        version's root file, such as a group-commit preview (spec/transactions.md
        §3.2 item 4); :meth:`adopt_root` caches it once it is known to be.

        Raises:
            VersionNotFoundError: ``data`` is an expired-root marker.
            CorruptCatalogError: ``data`` is not the root of ``version``.
        """
        path = layout.root_path(version)
        if layout.is_expired_root(data):
            raise VersionExpiredError(
                f"version {version} was expired (its root file is an expired-root marker)"
            )
        nf = decode_node(data, path)
        if nf.root is None or nf.root.version != version:
            raise CorruptCatalogError(
                f"root file {path} does not hold the root of version {version}"
            )
        return Root(
            version=version,
            node=nf.node,
            info=nf.root,
            definition=parse_root_definition(nf, path),
            created_at_millis=nf.created_at_millis,
        )

    def adopt_root(self, root: Root) -> None:
        """Cache ``root`` (from :meth:`decode_root_apart`) as the root of its
        version, now known to be that version's root file; the version was
        published."""
        self._cache_root(root)
        self._note_seen(root.version)

    def load_actions(self, root: Root) -> tuple[tuple[str, bytes], ...]:
        """The action records of ``root``: its action rows, or the content
        of the action file it names (read here, never by :meth:`load_root`).

        Raises:
            CorruptCatalogError: the action file is missing, damaged, or does
                not belong to this root (spec/format.md §3.5).
        """
        info = root.info
        if info.action_file is None:
            return info.actions
        path = info.action_file
        with self.reading(root.version):
            data = self._read_required(path, "action file")
        return check_action_file(data, path, root)

    def _refuse_expired(self, version: int) -> None:
        floor = self.oldest_version()
        if version < floor:
            raise VersionNotFoundError(f"version {version} was expired (oldest kept: {floor})")

    def load_latest(self) -> Root:
        """The root of the latest version, starting over when expiration
        removes the version found before its root could be read.

        A store that saw a version before probes from it (one round of
        requests on S3 in a catalog of format version 2; version 1 reads the
        floor afterwards); a fresh one reads the hint and the floor first
        (two rounds; three in version 1)."""
        root = self._probe_known()
        if root is not None:
            return root
        for _ in range(_FLOOR_ROUNDS - 1):
            version = self.latest_version()
            try:
                return self.load_root(version)
            except VersionNotFoundError:
                if version >= self.oldest_version():
                    raise
        return self.load_root(self.latest_version())

    def _read_counter(self, path: str) -> int | None:
        try:
            return layout.decode_counter(self.storage.read(path))
        except StorageFileNotFoundError:
            return None

    def _read_counters(self, *paths: str) -> list[int | None]:
        """:meth:`_read_counter` of each path, the reads sent together."""
        out: list[int | None] = []
        for reply in self.storage.read_many(paths):
            if isinstance(reply, StorageFileNotFoundError):
                out.append(None)
            elif isinstance(reply, StorageError):
                raise reply
            else:
                assert isinstance(reply, bytes)
                out.append(layout.decode_counter(reply))
        return out

    def oldest_version(self) -> int:
        """The floor below which versions may have been deleted (``vn/oldest``),
        read from storage."""
        return self._read_counter(layout.OLDEST_FLOOR) or 0

    def latest_version(self) -> int:
        """The newest committed version, found by probing past the ``vn/latest`` hint.

        Versions are dense from the floor up, so an exponential probe for the
        first missing root followed by a binary search finds the latest one
        in O(log distance) existence checks. Expiration may move the floor
        and delete roots during the probe: the floor is read again afterwards
        and the probe starts over when its answer is no longer valid
        (spec/format.md §2.2). Listing ``vn/`` is the last resort before
        reporting that there is no catalog.

        Raises:
            CatalogNotFoundError: no catalog at this location.
        """
        root = None
        with contextlib.suppress(CorruptCatalogError):  # the number needs no decodable root
            root = self._probe_known()
        if root is not None:
            return root.version
        for _ in range(_FLOOR_ROUNDS):
            clock = _now_millis()
            oldest = self.oldest_version()
            found = self._probe_latest(oldest)
            floor = self.oldest_version()
            if found is not None and found >= floor:
                self._note_seen(found)
                self._note_free(found + 1, clock)
                return found
            if found is None and floor == oldest:
                break  # nothing moved under the probe: no root where the floor says
        found = self._latest_by_listing()
        self._note_seen(found)
        return found

    def note_seen(self, version: int) -> None:
        """Record that ``version`` was published (told by another writer of
        this host, spec/transactions.md §3.2): the next look for the latest
        version starts there; its existence is still asked of the storage."""
        self._note_seen(version)

    def _note_seen(self, version: int) -> None:
        if version > self._seen:
            self._seen = version
            self._sight(version)

    def _note_free(self, version: int, clock: int) -> None:
        """Record that ``version`` was absent (or not below the floor) when
        the clock read ``clock``, before the request that told it."""
        known = self._free_since
        if known is None or clock >= known[1]:
            self._free_since = (version, clock)

    def _probe_known(self, read: int | None = None) -> Root | None:
        """The latest version, probed from the newest one this store saw (or,
        in a fresh store, from the hint), or None where only the full
        procedure of :meth:`latest_version` can answer (no catalog, a hint
        ahead of the roots, expiration moving the floor during the probe).

        This is format.md §2.2 step 4 with the probes of one round sent
        together: roots ``s, s+1, ..., s+w`` are read at once (``s`` only
        checked for existence when its root is cached), the first missing
        one ends the run, and the floor is read afterwards. ``read``: a
        version whose root this store read just now, to probe from without
        asking for it again.
        """
        start = self._seen if read is None else read
        if start < 0:
            hint, floor = self._read_counters(layout.LATEST_HINT, layout.OLDEST_FLOOR)
            start = max(hint or 0, floor or 0)
        width, read_before = self._probe_width(), read is not None
        for _ in range(_PROBE_ROUNDS):
            # What this store knew before the round: whether it may trust a
            # start only checked for existence (below). A later round starts
            # at the last root the round before read: it is not asked again.
            free = self._free_since
            headed = not read_before and self._holds_root(start)
            clock = _now_millis()
            found = self._probe_round(start, width, start_exists=read_before)
            if found is None:
                return None
            last, complete = found
            if not complete:
                # Versions are dense above the floor: ``last`` was the latest
                # when its successor was found missing, unless expiration had
                # deleted that successor. Format version 2 never deletes a
                # published root (it leaves a marker, which the probe would
                # have read), so ``last``, read as a root, is the latest and
                # not expired (spec/format.md §2.2-2.3). Version 1: the floor
                # read now tells (expiration writes it before deleting roots).
                held = self._held_root(last)
                marked = isinstance(held, Root) and int(held.definition.format_version) >= 2
                if marked and headed and last == start and isinstance(held, Root):
                    # Only the existence of ``last`` was checked, and a marker
                    # exists too; its successor may be missing because a
                    # marker horizon let expiration delete its marker. That
                    # needs more than four commit time limits since this
                    # store last learnt that ``last + 1`` was absent
                    # (spec/transactions.md §8.6); past one, read the floor.
                    limit = commit_time_limit_millis(held.definition)
                    marked = (
                        free is not None
                        and free[0] <= last + 1
                        and _now_millis() - free[1] <= limit
                    )
                if not marked and last < self.oldest_version():
                    return None
                # ``last + 1`` was absent when the round was sent, and
                # ``last`` is the latest: no version above it was published.
                self._note_free(last + 1, clock)
                self._note_seen(last)
                self._sight(last)
                return self.load_root(last)
            start, width, read_before = last, width * 4, True
        return None

    def _held_root(self, version: int) -> Root | None:
        """The root of ``version`` if this store holds it (decoding it if it
        was only kept as bytes), else None; never a request."""
        path = layout.root_path(version)
        held = self._roots.get(path)
        if isinstance(held, Root):
            return held
        raw = self._raw_roots.get(path)
        return self._decode_root(version, raw) if isinstance(raw, bytes) else None

    def _probe_width(self) -> int:
        """How many roots above its start the first round of the next probe
        reads (format.md §2.2): the versions the catalog is expected to have
        gained since this store last knew its latest version (the pace of
        its recent sightings times the time since), with a margin, at least
        3 and at most 32. Each root asked for is a request on S3: a begin
        right after a commit asks for four rather than five, and one after a
        long wait on a busy catalog reads what it missed in one round rather
        than two or three (widths 4, 16 and 64)."""
        seen = self._sightings
        if len(seen) < 2:
            return _PROBE_WIDTH
        now = time.monotonic()
        (first_at, first), (last_at, last) = seen[0], seen[-1]
        expected = (last - first) / max(now - first_at, 1e-3) * (now - last_at)
        width = math.ceil(expected + 2 * math.sqrt(expected)) + 1
        return max(_PROBE_WIDTH_MIN, min(_PROBE_WIDTH_MAX, width))

    def _sight(self, version: int) -> None:
        """Record that ``version`` was the latest this store knew of, now."""
        seen = self._sightings
        now = time.monotonic()
        if seen and seen[-1][1] >= version:
            if seen[-1][1] == version:
                seen[-1] = (now, version)
            return
        seen.append((now, version))

    def _probe_round(
        self,
        start: int,
        width: int,
        start_exists: bool = False,
        given: Sequence[bytes | bool | None] | None = None,
    ) -> tuple[int, bool] | None:
        """Read the roots of ``start .. start + width`` (existence is always
        asked of the storage); return the last of the unbroken run from
        ``start`` and whether the whole range was present, or None when
        ``start`` is missing or a root follows a missing one. ``given``: the
        replies of such a round already read (content, True for present,
        None for missing), in place of the reads."""
        versions = list(range(start, min(start + width, layout.MAX_VERSION) + 1))
        cached = self._holds_root(start)

        def probe(v: int) -> Callable[[], bytes | bool | None]:
            path = layout.root_path(v)
            if v == start and start_exists:
                return lambda: True
            if v == start and cached:
                return lambda: self.storage.exists(path) or None

            def read() -> bytes | None:
                try:
                    return self.storage.read(path)
                except StorageFileNotFoundError:
                    return None

            return read

        replies: list[bytes | bool | None]
        if given is not None:
            replies = list(given)
        elif self.storage.parallel_reads:
            # One batch: every root read (the start only checked when its
            # root is held), sent together.
            asked = versions[1:] if start_exists else versions
            paths = [layout.root_path(v) for v in asked]
            heads = {paths[0]} if cached and not start_exists else set()
            replies = [True] if start_exists else []
            for reply in self.storage.read_many(paths, heads):
                if isinstance(reply, StorageFileNotFoundError):
                    replies.append(None)
                elif isinstance(reply, StorageError):
                    raise reply
                else:
                    replies.append(reply)
        else:  # one at a time, stopping at the first missing root
            replies = []
            for v in versions:
                replies.append(probe(v)())
                if replies[-1] is None:
                    break
        if replies[0] is None or any(
            isinstance(r, bytes) and layout.is_expired_root(r) for r in replies
        ):
            # Missing, or expired under the probe: the full procedure reads the floor.
            return None
        run = 1
        while run < len(replies) and replies[run] is not None:
            run += 1
        if any(r is not None for r in replies[run:]):
            return None  # a root after a gap: expiration is deleting roots
        last = versions[run - 1]
        complete = run == len(versions) and last < layout.MAX_VERSION
        for v, data in zip(versions[:run], replies[:run], strict=True):
            if isinstance(data, bytes) and not self._holds_root(v):
                if v == last and not complete:  # the latest: its reader needs it
                    self._decode_root(v, data)
                else:
                    # Kept, undecoded, for the conflict checks of a commit that
                    # rebases over them (most readers never need them).
                    self._raw_roots.put(layout.root_path(v), data, len(data))
        return last, complete

    def load_after_lost_race(self, taken: int, probe: bool = True) -> Root:
        """A new base after losing the race for version ``taken``: the latest
        version found by probing from ``taken`` (one round on S3), or without
        ``probe``, on remote storage, the winner's root itself when losing
        read it. The floor is not read: a commit built on a version that
        expiration removes is refused by the check after publishing
        (spec/transactions.md §8.4).

        Where the lost put read the roots from ``taken`` up along with it
        (:meth:`commit`'s ``read_along``), those replies are the probe: no
        request is sent unless every root they cover was there."""
        self._note_seen(taken)
        found = self._race_reads(taken)
        if found is not None:
            last, complete = found
            if not complete:
                return self.load_root(last)
            taken, probe = last, True  # all there: probe on from the last
            self._note_seen(taken)
        known = self._holds_root(taken)
        if known and self.storage.parallel_reads and not probe:
            # Losing read the winner's root (to tell it from our own write):
            # build on it at once rather than spend a round on probing.
            return self.load_root(taken)
        width = max(_PROBE_WIDTH, self._probe_width())
        found = self._probe_round(taken, width, start_exists=known)
        if found is not None and not found[1]:
            return self.load_root(found[0])
        if found is not None:
            # Every root asked for was there: probe on from the last one,
            # just read, rather than ask for them all again.
            last = found[0]
            self._note_seen(last)
            root = self._probe_known(last)
            if root is not None:
                return root
        return self.load_latest()

    def _race_reads(self, taken: int) -> tuple[int, bool] | None:
        """What the roots read along with the lost put of ``taken`` show, as
        :meth:`_probe_round` tells it; None when there were none beyond the
        winner's own, or a read failed."""
        along = self._lost_reads.get(layout.root_path(taken))
        if not isinstance(along, tuple) or not along:
            return None
        self._lost_reads.put(layout.root_path(taken), ())  # used once
        clock, replies = along
        if len(replies) < 2:
            return None
        given: list[bytes | bool | None] = []
        for i, reply in enumerate(replies):
            if isinstance(reply, bytes):
                given.append(reply)
            elif i == 0 and self._holds_root(taken):
                # Read before the winner's put landed; the put's own read
                # after losing found it (and cached it).
                given.append(True)
            elif i > 0 and isinstance(reply, StorageFileNotFoundError):
                given.append(None)
            else:
                return None
        found = self._probe_round(taken, len(given) - 1, given=given)
        if found is not None and not found[1]:
            self._note_free(found[0] + 1, clock)
        return found

    def prefetch_nodes(self, paths: Sequence[str]) -> None:
        """Load the node files at ``paths`` into the cache, in parallel where
        the storage benefits (a listing reads sibling leaves this way)."""
        missing = [p for p in paths if self._nodes.get(p) is None]
        # Inline nodes come with the root file that carries them: that file
        # is read in the same batch (a listing of a version written by a
        # small commit on top of a bulk one reaches both kinds of node).
        carriers: dict[str, int] = {}
        files: list[str] = []
        for p in missing:
            parsed = layout.parse_inline_ref(p) if p.startswith(_INLINE_PREFIX) else None
            if parsed is None:
                if not p.startswith(_INLINE_PREFIX):
                    files.append(p)
            elif not isinstance(self._roots.get(layout.root_path(parsed[0])), Root):
                carriers[layout.root_path(parsed[0])] = parsed[0]
        batch = files + list(carriers)
        if len(batch) > 1 and self.storage.parallel_reads:
            # One batch of requests; each reply is then checked and decoded by
            # load_node's own path (a failed read is left for load_node to
            # report when the scan reaches that child).
            for path, data in zip(batch, self.storage.read_many(batch), strict=True):
                if not isinstance(data, bytes) or not layout.content_matches(path, data):
                    continue
                if path in carriers:
                    with contextlib.suppress(CorruptCatalogError, VersionNotFoundError):
                        self._decode_root(carriers[path], data)
                    continue
                try:
                    nf = decode_node(data, path)
                except CorruptCatalogError:
                    continue
                if nf.root is None:
                    self._nodes.put(path, nf.node, node_weight(nf.node))

    def _probe_up(self, low: int) -> int:
        """The last version of the dense run of roots starting at existing ``low``."""
        exists = self.storage.exists
        step = 1
        # Never probe past the largest version a root file name can hold.
        while low + step <= layout.MAX_VERSION and exists(layout.root_path(low + step)):
            low += step
            step *= 2
        return self._bisect(low, min(low + step, layout.MAX_VERSION + 1))

    def _bisect(self, low: int, high: int) -> int:
        """``low`` exists and ``high`` does not: the last existing root between."""
        exists = self.storage.exists
        while high - low > 1:
            mid = (low + high) // 2
            if exists(layout.root_path(mid)):
                low = mid
            else:
                high = mid
        return low

    def _probe_latest(self, oldest: int) -> int | None:
        exists = self.storage.exists
        start = max(self._read_counter(layout.LATEST_HINT) or 0, oldest)
        if exists(layout.root_path(start)):
            return self._probe_up(start)
        if start == oldest or not exists(layout.root_path(oldest)):
            return None
        return self._bisect(oldest, start)  # the hint ran ahead of the roots

    def _latest_by_listing(self) -> int:
        versions: list[int] = []
        for path in self.storage.list(layout.VERSION_DIR):
            with contextlib.suppress(CorruptCatalogError):
                versions.append(layout.parse_version_file_name(path.rsplit("/", 1)[-1]))
        if not versions:
            raise CatalogNotFoundError(f"no olympia catalog at {self.storage.location}")
        latest = self._probe_up(max(versions))
        floor = self.oldest_version()
        if latest < floor:
            # Roots exist (pinned ones, say) but none at or above the floor:
            # the floor names a version that was never written or whose root
            # is gone. That is damage, not an absent catalog.
            raise CorruptCatalogError(
                f"the catalog at {self.storage.location} has no root at or above its oldest "
                f"version {floor} (vn/oldest); the newest root is version {latest}: "
                f"vn/oldest is damaged or roots were deleted by hand"
            )
        return latest

    # --- writing ---------------------------------------------------------------

    def _executor(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(_WRITE_WORKERS, thread_name_prefix="olympia-write")
            return self._pool

    def close(self) -> None:
        """Stop the writer threads and release the storage."""
        with self._pool_lock:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None
        self.storage.close()

    def _materialize(
        self,
        root: Node,
        inline_max: int,
        compression: str,
        emit: Callable[[str, bytes], None],
        format_version: int,
        version: int,
        inline: list[bytes],
    ) -> tuple[Node, list[tuple[str, Node]]]:
        """Name every new node and big value, handing each file to ``emit`` as
        soon as it is encoded; return the root with paths for children and the
        new (path, node) pairs.

        Format version 2: the first new nodes, up to :data:`INLINE_NODES_MAX`
        of them and :data:`INLINE_BYTES_MAX` bytes, are appended to
        ``inline`` (carried by the root of ``version``) instead of being
        written as node files (spec/format.md §3.6)."""
        written: list[tuple[str, Node]] = []
        now = int(time.time() * 1000)
        room = [INLINE_BYTES_MAX if format_version >= 2 else -1]

        def offload(values: Iterable[Value]) -> tuple[Value, ...]:
            out: list[Value] = []
            for v in values:
                if isinstance(v, bytes) and len(v) > inline_max:
                    path = layout.def_path(v)
                    emit(path, v)
                    self._values.put(path, v, len(v))
                    out.append(DefRef(path))
                else:
                    out.append(v)
            return tuple(out)

        def persist(node: Node) -> Node:
            if node.is_leaf:
                return Node(0, node.keys, offload(node.values))
            kids: list[ChildRef] = list(node.children)
            for i, child in enumerate(kids):
                if isinstance(child, Node):
                    stored = persist(child)
                    data = encode_node(NodeFile(stored, now), compression, format_version)
                    if len(inline) < INLINE_NODES_MAX and len(data) <= room[0]:
                        room[0] -= len(data)
                        path = layout.inline_ref(version, len(inline))
                        inline.append(data)
                    else:
                        path = layout.node_path(data)
                        emit(path, data)
                    written.append((path, stored))
                    kids[i] = path
            return Node(node.height, node.keys, (), tuple(kids))

        return persist(root), written

    def commit(
        self,
        version: int,
        root: Node,
        definition: CatalogDefinition,
        transaction_id: str,
        actions: Sequence[tuple[str, bytes]] | PreparedActions = (),
        previous_root: str | None = None,
        rollback_from_root: str | None = None,
        begin_version: int | None = None,
        isolation: str = "",
        serialized_before: Sequence[int] = (),
        after_put: Placed | None = None,
        written_since: int | None = None,
        rollback_to_version: int | None = None,
        commit_info: CommitInfo | None = None,
        read_along: int = 0,
    ) -> Root:
        """Publish ``root`` as ``version`` (see the module docstring).

        ``read_along``: on storage with parallel reads, the roots of
        ``version`` and of the ``read_along - 1`` versions above it are read
        together with the put of the root (spec/transactions.md §3 step 5):
        a commit that loses has the winner's root, and the versions that
        followed it, without another round trip
        (:meth:`load_after_lost_race` uses them).

        ``after_put`` is called once the outcome of the put of the root is
        visible, perhaps before it is durable (the caller lets go of the
        host's publish lock there, spec/transactions.md §3.1), with whether
        the put is known to have won (:data:`Placed`); it may be called more
        than once. ``written_since`` is the creation time of
        the oldest file the root depends on that the caller wrote earlier
        (a distributed transaction's first state), for the commit time
        limit (spec/transactions.md §8.5). ``rollback_to_version`` is the
        version a rollback root restores, ``commit_info`` the committing
        transaction's metadata (spec/format.md §3.2, §3.7).

        Raises:
            CommitConflictError: rule ``version-taken``: another writer
                published ``version`` first. Nothing reachable changed.
            CommitTimeoutError: the root was not put because the commit
                time limit had passed since its oldest new file was written.
            CommitFailedError: storage failed; ``version`` was not published
                by this call as far as could be checked.
        """
        compression = definition.node_compression or "none"
        # A valid definition names 1 or 2; the clamp only keeps a damaged
        # one (written by tests of damage) from producing unreadable files.
        format_version = min(max(int(definition.format_version), 1), max(SUPPORTED_FORMAT_VERSIONS))
        if not isinstance(actions, PreparedActions):
            listed = tuple(actions)
            actions = PreparedActions(lambda: listed, len(listed), transaction_id, definition)
        # Files are written in parallel while later ones are still being encoded.
        puts = self.storage.put_group(self._executor().submit)
        sizes: list[int] = []

        def emit(file_path: str, data: bytes) -> None:
            sizes.append(len(data))
            puts.put(file_path, data)

        limit = commit_time_limit_millis(definition)
        # Every file this call writes is named after ``oldest`` (§8.5).
        oldest = _now_millis() if written_since is None else min(_now_millis(), written_since)
        action_file = actions.name(limit)
        if action_file is not None:
            oldest = min(oldest, actions.named_at)
            if action_file != actions.written:
                assert actions.data is not None
                emit(action_file, actions.data)
        inline: list[bytes] = []
        stored_root, written = self._materialize(
            root,
            int(definition.inline_value_max_bytes),
            compression,
            emit,
            format_version,
            version,
            inline,
        )
        puts.seal()
        now = int(time.time() * 1000)
        info = RootInfo(
            version=version,
            catalog_def=definition.SerializeToString(deterministic=True),
            transaction_id=transaction_id,
            previous_root=previous_root,
            rollback_from_root=rollback_from_root,
            actions=actions.inline,
            begin_version=begin_version,
            isolation=isolation,
            serialized_before=tuple(serialized_before),
            action_file=action_file,
            action_file_count=actions.count if action_file is not None else 0,
            inline_nodes=tuple(inline),
            rollback_to_version=rollback_to_version,
            commit_infos=(
                ((transaction_id, commit_info),)
                if commit_info is not None and not commit_info.empty
                else ()
            ),
        )
        root_bytes = encode_node(NodeFile(stored_root, now, info), compression, format_version)
        # The root's content is made durable while the node files are still
        # being written; only the put that publishes it waits for them.
        staged = self._stage_root(version, root_bytes, puts)
        failed = puts.wait()
        if failed:
            staged.discard()
            raise CommitFailedError(
                f"writing node files failed; nothing was published: {failed[0]}"
            ) from failed[0]
        actions.written = action_file
        path = layout.root_path(version)
        if not self._put_root(
            version,
            staged,
            root_bytes,
            after_put,
            (oldest, limit),
            read_along,
            markers=format_version >= 2,
        ):
            # The files of step 2 are left for expiration to reclaim: their
            # names derive from their content, so another writer may have
            # published identical files under the same names.
            raise CommitConflictError(
                f"version {version} was committed by another writer first",
                version=version,
                rule="version-taken",
            )
        # Format version 2: expiration replaces expired roots with markers, so
        # the put above cannot have re-created an expired version and nothing
        # needs checking (spec/format.md §2.3). Version 1: expiration deleted
        # them, so a stale writer's put may have re-created one; the floor
        # read afterwards tells (spec/transactions.md §8.4).
        if format_version < 2 and version < self._floor_after_publish(version):
            # Expiration moved the floor past this version while we committed
            # (it deleted the root we then re-created): nobody can see it.
            self._delete_quietly([path])
            raise CommitConflictError(
                f"version {version} is below the catalog's oldest version after expiration",
                version=version,
                rule="history-expired",
            )
        for p, n in written:
            self._nodes.put(p, n, node_weight(n))
        self.last_write = WriteStats(files=len(sizes) + 1, bytes=sum(sizes) + len(root_bytes))
        result = Root(version, stored_root, info, definition, now)
        self._cache_root(result)
        self._note_seen(version)
        self._move_hint(version)
        return result

    def publish_chain(
        self,
        base: Root,
        links: Sequence[ChainLink],
        placed: Placed | None = None,
        encoded: Callable[[int, bytes], None] | None = None,
    ) -> ChainOutcome:
        """Publish ``links[i]`` as version ``base.version + 1 + i``, each root
        built on the one before (group commit, spec/transactions.md §3.2).
        ``placed`` is called once the last root is in place (readers find it)
        and before its folder is made durable, where the storage tells, with
        whether that root is known to be this call's (:data:`Placed`);
        ``encoded`` with the last root's version and bytes once they are
        encoded, before anything is made durable or put.

        The roots are encoded one after the other, made durable side by side
        (their temporary files fsynced in parallel), then put in version
        order, each with put-if-absent and the fsync of its folder before the
        next, so that a version is never on storage without the one below it.
        The first put that loses or fails ends the chain: the versions before
        it are published, it and those after it are not (its own outcome is
        unknown when :attr:`ChainOutcome.unknown`). Catalogs of format
        version 2 only (format version 1 needs a floor read after each put).
        """
        definition = base.definition
        compression = definition.node_compression or "none"
        format_version = int(definition.format_version)
        inline_max = int(definition.inline_value_max_bytes)
        limit = commit_time_limit_millis(definition)
        puts = self.storage.put_group(self._executor().submit)
        prepared: list[tuple[Root, bytes, list[tuple[str, Node]]]] = []
        #: The creation time of each link's oldest new file (§8.5).
        oldest: list[int] = []
        for i, link in enumerate(links):
            version = base.version + 1 + i
            oldest.append(_now_millis())
            action_file = link.actions.name(limit)
            if action_file is not None:
                oldest[-1] = min(oldest[-1], link.actions.named_at)
                if action_file != link.actions.written:
                    assert link.actions.data is not None
                    puts.put(action_file, link.actions.data)
            inline: list[bytes] = []
            stored, written = self._materialize(
                link.tree, inline_max, compression, puts.put, format_version, version, inline
            )
            now = int(time.time() * 1000)
            info = RootInfo(
                version=version,
                catalog_def=definition.SerializeToString(deterministic=True),
                transaction_id=link.transaction_id,
                previous_root=layout.root_path(version - 1),
                actions=link.actions.inline,
                begin_version=link.begin_version,
                isolation=link.isolation,
                serialized_before=link.serialized_before,
                group=link.group,
                action_file=action_file,
                action_file_count=link.actions.count if action_file is not None else 0,
                inline_nodes=tuple(inline),
                commit_infos=tuple((i, c) for i, c in link.commit_infos if not c.empty),
            )
            data = encode_node(NodeFile(stored, now, info), compression, format_version)
            prepared.append((Root(version, stored, info, definition, now), data, written))
        if encoded is not None:
            encoded(prepared[-1][0].version, prepared[-1][1])
        puts.seal()
        outcome = ChainOutcome()
        staged: list[Staged] = []
        for st in self._stage_all([data for _, data, _ in prepared]):
            if isinstance(st, StorageError):
                # The chain ends before the first root that could not be staged.
                outcome.error = outcome.error or st
            elif outcome.error is None:
                staged.append(st)
            else:
                st.discard()
        failed = puts.wait()
        if failed:
            for st in staged:
                st.discard()
            outcome.error = failed[0]
            return outcome
        last = len(prepared) - 1
        for i, ((root, data, written), st, since) in enumerate(
            zip(prepared, staged, oldest, strict=False)
        ):
            try:
                if not self._put_root(
                    root.version, st, data, placed if i == last else None, (since, limit)
                ):
                    break
            except CommitTimeoutError as exc:  # nothing put: the chain ends before it
                outcome.error = exc
                break
            except CommitFailedError as exc:
                outcome.unknown = True
                outcome.error = exc
                break
            for p, n in written:
                self._nodes.put(p, n, node_weight(n))
            self._cache_root(root)
            self._note_seen(root.version)
            outcome.published.append(root)
        for st in staged[len(outcome.published) :]:
            st.discard()
        for link in links[: len(outcome.published)]:
            link.actions.written = link.actions.path
        if outcome.published:
            self._move_hint(outcome.published[-1].version)
        return outcome

    def _move_hint(self, version: int) -> None:
        """Overwrite ``vn/latest`` with ``version``: only a hint, which readers
        probe past, so on remote storage it is written in the background and
        costs the commit nothing; where it is one write in place (local
        storage), here, which costs less than handing it to a thread."""
        if self.storage.cheap_hint:
            self._write_hint(version)
        else:
            self._hint_write = self._executor().submit(self._write_hint, version)

    def _put_root(
        self,
        version: int,
        staged: Staged,
        data: bytes,
        placed: Placed | None,
        written: tuple[int, int],
        read_along: int = 0,
        *,
        markers: bool = True,
    ) -> bool:
        """Put the staged root ``data`` of ``version`` (put-if-absent); True
        when it is ours that is there, False when another writer's is (then
        cached, for the loser to rebase on; with ``read_along``, the roots
        from it up are read with the put: :meth:`_put_staged_root`).
        ``written`` is (the creation
        time of the oldest new file the root names, the commit time limit):
        the root is put only if the clock, read just before, is within the
        limit of that time (spec/transactions.md §8.5). With ``markers``
        (format version 2, whose expiration may delete markers) it must also
        be within the limit of when this store last learnt ``version`` free,
        or the floor is read first (spec/transactions.md §8.6).

        Raises:
            CommitTimeoutError: the limit has passed; nothing was put.
            CommitFailedError: the outcome is unknown.
        """
        path = layout.root_path(version)
        since, limit = written
        now = _now_millis()
        elapsed = now - since
        if elapsed > limit:
            staged.discard()
            raise CommitTimeoutError(
                f"version {version} was not published: {elapsed / 1000:.3f} s passed since its "
                f"first new file was written, more than the catalog's commit time limit of "
                f"{limit / 1000:g} s (spec/transactions.md §8.5); nothing changed, try again"
            )
        free = self._free_since
        if markers and (free is None or free[0] > version or now - free[1] > limit):
            # This process last learnt that ``version`` was free too long ago
            # (a transaction that began long ago, a store that never probed):
            # expiration may have deleted the marker of ``version`` meanwhile
            # (spec/transactions.md §8.6). The floor tells: below it, the
            # version was published and expired, so the race is lost.
            try:
                floor = self.oldest_version()
            except StorageError as exc:
                staged.discard()
                raise CommitFailedError(
                    f"version {version} was not published: the oldest-version floor could "
                    f"not be read ({exc}); nothing changed, try again"
                ) from exc
            if version < floor:
                staged.discard()
                self._note_seen(version)
                return False
            self._note_free(version, now)
        try:
            clock = _now_millis()
            self._put_staged_root(version, staged, placed, read_along, clock)  # consumes it
            self._note_free(version + 1, clock)
            return True
        except StorageFileExistsError as exc:
            landed = exc.existing
        except StorageError as exc:
            # The outcome is unknown: look before deciding.
            try:
                landed = self.storage.read(path)
            except StorageError:
                raise CommitFailedError(f"publishing version {version} failed: {exc}") from exc
            if layout.is_expired_root(landed):
                # Published by someone (maybe us) and expired since: whether
                # this commit is the one that landed cannot be told.
                raise CommitFailedError(
                    f"publishing version {version} failed ({exc}) and the version has since "
                    f"been expired; reload the catalog to see whether this commit landed"
                ) from exc
            if landed == data:
                return True
        self._note_seen(version)
        self._keep_winner(version, landed)
        return False

    def _put_staged_root(
        self,
        version: int,
        staged: Staged,
        placed: Placed | None,
        read_along: int,
        clock: int,
    ) -> None:
        """Put the root of ``version``; on storage with parallel reads, read
        the roots of ``version .. version + read_along - 1`` with it, kept
        for :meth:`load_after_lost_race` if the put loses (``clock``: read
        before they were sent).

        Raises:
            StorageFileExistsError: another writer's root is there.
            StorageError: the outcome is unknown.
        """
        path = layout.root_path(version)
        if read_along < 1 or not self.storage.parallel_reads:
            self.storage.put_staged(path, staged, placed=placed)
            return
        last = min(version + read_along - 1, layout.MAX_VERSION)
        reads = [layout.root_path(v) for v in range(version, last + 1)]
        outcome = self.storage.put_staged_reading(path, staged, reads, placed)
        if outcome.taken:
            self._lost_reads.put(path, (clock, tuple(outcome.replies)))
            raise StorageFileExistsError(
                f"file {path!r} already exists in {self.storage.location}", outcome.existing
            )

    def wait_for_background_writes(self) -> None:
        """Wait until the ``vn/latest`` hint this store last wrote in the
        background is written (its temporary file gone)."""
        pending = self._hint_write
        if pending is not None:
            with contextlib.suppress(Exception):
                pending.result()

    def _keep_winner(self, version: int, data: bytes | None) -> None:
        """Cache the root another writer published as ``version``, read while
        losing the race for it: the loser rebases on it next."""
        if data is not None and self._roots.get(layout.root_path(version)) is None:
            with contextlib.suppress(CorruptCatalogError, VersionNotFoundError):
                self._decode_root(version, data)

    def _stage_all(self, roots: Sequence[bytes]) -> list[Staged | StorageError]:
        """:meth:`Storage.stage` of each of ``roots``, side by side when there
        are several (one alone is staged here: handing it to a thread and
        waiting for it only adds two thread switches to the commit)."""
        if len(roots) == 1:
            try:
                return [self.storage.stage(roots[0])]
            except StorageError as exc:
                return [exc]
        results: list[Staged | StorageError] = []
        for future in [self._executor().submit(self.storage.stage, data) for data in roots]:
            try:
                results.append(future.result())
            except StorageError as exc:
                results.append(exc)
        return results

    def _stage_root(self, version: int, root_bytes: bytes, puts: PutGroup) -> Staged:
        try:
            return self.storage.stage(root_bytes)
        except StorageError as exc:
            puts.wait()  # the node writes finish before the failure is reported
            raise CommitFailedError(
                f"writing the root of version {version} failed; nothing was published: {exc}"
            ) from exc

    def _floor_after_publish(self, version: int) -> int:
        """Read ``vn/oldest`` after publishing ``version``.

        Raises:
            CommitFailedError: it cannot be read; whether the published
                version is visible is then unknown.
        """
        error: BaseException | None = None
        for _ in range(3):
            try:
                return self.oldest_version()
            except StorageError as exc:
                error = exc
        raise CommitFailedError(
            f"version {version} was published, but the oldest-version floor could not be read "
            f"to confirm it is visible ({error}); reload the catalog to see whether it is there"
        ) from error

    def _write_hint(self, version: int) -> None:
        with contextlib.suppress(StorageError):
            self.storage.overwrite_hint(layout.LATEST_HINT, layout.encode_hint(version))

    def _delete_quietly(self, paths: Iterable[str]) -> None:
        for p in paths:
            with contextlib.suppress(StorageError):
                self.storage.delete(p)

    def new_transaction_id(self) -> str:
        return uuid.uuid4().hex

    def check_tree(self, root: Root) -> int:
        """Run :func:`olympia.tree.check` on a version; return its key count."""
        return tree.check(root.node, root.order, self.load_node)
