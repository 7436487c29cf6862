"""Transactions: BEGIN / COMMIT / ROLLBACK across many objects (spec/transactions.md)."""

from __future__ import annotations

import contextlib
import random
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, cast

from olympia import group, layout, tree, validate
from olympia.codec import GroupEntry
from olympia.conflicts import (
    CONTENT_WRITES,
    MEMBER_READS,
    MEMBER_WRITES,
    READ_TYPES,
    Footprint,
    check_serializable,
    check_snapshot,
    footprint_from_root,
    is_write,
    judge_by_merge,
    sees,
)
from olympia.definition import ISOLATION_LEVELS
from olympia.errors import (
    CommitConflictError,
    CommitFailedError,
    CommitTimeoutError,
    CorruptCatalogError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    OlympiaError,
    StorageError,
    StorageFileExistsError,
    StorageFileNotFoundError,
    TransactionClosedError,
    TransactionExpiredError,
    TransactionNotFoundError,
    VersionNotFoundError,
)
from olympia.keys import KeyCodec
from olympia.node import Node
from olympia.objects import parse
from olympia.ops import Check, PreconditionFailed, apply_write
from olympia.proto import actions_pb2 as apb
from olympia.proto import objects_pb2 as pb
from olympia.reader import CatalogReader
from olympia.state import OverlayState
from olympia.store import CatalogStore, ChainLink, ChainOutcome, PreparedActions, Root

A = apb.ActionType
#: Publish attempts of one commit (spec/transactions.md §3). Every lost race
#: means another transaction committed, so running out means a livelock.
DEFAULT_MAX_ATTEMPTS = 100
#: Lost races in a row retried without any pause (spec/transactions.md §3).
_FREE_RETRIES = 4
#: How old an unfinished claim of a distributed transaction must be before
#: ``resume`` lets another process finish it (spec/transactions.md §6.5).
DEFAULT_RECOVER_AFTER_SECONDS = 60.0
_OPEN = apb.TRANSACTION_OUTCOME_OPEN
_COMMITTING = apb.TRANSACTION_OUTCOME_COMMITTING
_ROLLED_BACK = apb.TRANSACTION_OUTCOME_ROLLED_BACK

#: Group commit among the writers of one host (spec/transactions.md §3.2).
#: Only an optimisation; False makes every writer publish its own version.
GROUP_COMMIT = True
#: A group-commit request is published by the holder only when the versions
#: it would have to examine above the request's base are at most this many.
_GROUP_WINDOW = 64
#: Rounds of requests one holder publishes before it lets the lock go: the
#: writers it answered often leave their next transaction meanwhile.
_GROUP_ROUNDS = 4
#: How long a holder waits between rounds for the writers it answered to
#: leave their next requests (seconds).
_GROUP_GATHER_SECONDS = 0.002

#: One transaction of a version being built by group commit: its ``$group``
#: entry, its footprint, and what yields its encoded actions.
_Member = tuple[GroupEntry, Footprint, Callable[[], Iterator[tuple[str, bytes]]]]

#: Test hook for the history checker: when True, commits skip every conflict
#: check after a lost race (a deliberately broken rebase). Never set it elsewhere.
_UNSAFE_SKIP_CONFLICT_CHECKS = False


def key_codec(definition: pb.CatalogDefinition) -> KeyCodec:
    return KeyCodec(
        namespace_max=int(definition.namespace_name_max_size),
        table_max=int(definition.table_name_max_size),
        view_max=int(definition.view_name_max_size),
        compact=int(definition.format_version) >= 2,
    )


def check_isolation(isolation: str | None, definition: pb.CatalogDefinition) -> str:
    level = (isolation or definition.default_isolation or "snapshot").lower()
    if level not in ISOLATION_LEVELS:
        raise OlympiaError(f"isolation must be one of {ISOLATION_LEVELS}, got {isolation!r}")
    return level


def footprint_of(store: CatalogStore, version: int) -> Footprint:
    """The footprint of committed ``version`` (cached: versions never change)."""
    cache_key = f"footprint:{version}"
    cached = store.derived.get(cache_key)
    if cached is not None:
        return cached  # type: ignore[return-value]
    root = store.load_root(version)
    fp = footprint_from_root(version, root.info.begin_version, store.load_actions(root))
    store.derived.put(cache_key, fp)
    return fp


def _replay_keys(pending: Footprint, own: str | None) -> tuple[frozenset[str], tuple[str, ...]]:
    """The keys and prefixes whose change forces a full replay of a rebase."""
    keys = set(pending.writes) | pending.member_reads | pending.content_reads
    if own is not None:
        keys.add(own)
    return frozenset(keys), tuple(sorted(pending.prefix_reads))


def _now_millis() -> int:
    return int(time.time() * 1000)


class ContentMerge(Protocol):
    """A hook that judges, and merges, concurrent changes to the content of
    some tables for a committing transaction (spec/transactions.md §4.3).
    Set with :meth:`Transaction.set_content_merge`; a format layer (Iceberg)
    implements it, the core knows no table format."""

    def keys(self) -> Collection[str]:
        """The object keys (``Transaction.keys.table(ns, name)``) of the tables
        whose content this hook judges."""
        ...

    def rebase(self, latest: CatalogReader, changed: frozenset[str]) -> Mapping[str, str]:
        """Judge the versions committed since the last check, which changed the
        ``changed`` keys (content or membership); ``latest`` is a read-only view
        of the newest of them. Return ``{key: metadata_location}`` for the keys
        of ``changed`` whose TABLE_UPDATE writes are to point elsewhere; raise
        a CommitConflictError (or a subclass) to refuse the commit."""
        ...


#: One recorded action, kept compact: (type, object key, target key, payload).
#: The payload of a read is its ``found`` flag (a read has no other field);
#: that of any other action is the action serialized deterministically.
_Record = tuple[int, str, str, "bytes | bool"]


class ActionLog:
    """The actions of a transaction, in order, stored as compact records
    rather than protobuf messages: a message costs over a kilobyte of memory,
    which a transaction of a million writes cannot afford. Indexing and
    iterating give :class:`apb.Action` messages, built on demand."""

    __slots__ = ("_records",)

    def __init__(self) -> None:
        self._records: list[_Record] = []

    @staticmethod
    def _pack(action: apb.Action) -> _Record:
        t, key = int(action.type), action.object_key
        if t in READ_TYPES and action.read_only:
            canonical = apb.Action(
                type=cast(Any, t), object_key=key, read_only=True, found=action.found
            )
            if canonical == action:  # nothing else set: the flag says it all
                return (t, key, "", bool(action.found))
        return (t, key, action.target_key, action.SerializeToString(deterministic=True))

    @staticmethod
    def _unpack(record: _Record) -> apb.Action:
        t, key, _, payload = record
        if isinstance(payload, bool):
            return apb.Action(type=cast(Any, t), object_key=key, read_only=True, found=payload)
        return apb.Action.FromString(payload)

    def __len__(self) -> int:
        return len(self._records)

    def __bool__(self) -> bool:
        return bool(self._records)

    def __iter__(self) -> Iterator[apb.Action]:
        return (self._unpack(r) for r in self._records)

    def since(self, start: int) -> list[apb.Action]:
        """The actions from index ``start`` on, as messages."""
        return [self._unpack(r) for r in self._records[start:]]

    def records(self, start: int = 0) -> list[_Record]:
        return self._records[start:] if start else self._records

    def append(self, action: apb.Action) -> None:
        self._records.append(self._pack(action))

    def append_read(self, action_type: int, key: str, found: bool) -> None:
        self._records.append((action_type, key, "", found))

    def append_write(self, action: apb.Action, key: str | None = None) -> None:
        """Record a write; ``key`` is ``action.object_key`` when the caller has it."""
        self._records.append(
            (
                int(action.type),
                action.object_key if key is None else key,
                action.target_key,
                action.SerializeToString(deterministic=True),
            )
        )

    def truncate(self, length: int) -> None:
        del self._records[length:]

    def writes(self) -> Iterator[apb.Action]:
        """The write actions, as messages, one at a time."""
        for t, _, _, payload in self._records:
            if t in _WRITE_TYPES and not isinstance(payload, bool):
                yield apb.Action.FromString(payload)

    def has_write(self) -> bool:
        return any(r[0] in _WRITE_TYPES for r in self._records)

    def patch_location(self, key: str, location: str) -> int:
        """Point every TABLE_UPDATE of ``key`` at ``location``; how many there were."""
        found = 0
        for i, (t, k, target, payload) in enumerate(self._records):
            if t != A.TABLE_UPDATE or k != key or isinstance(payload, bool):
                continue
            action = apb.Action.FromString(payload)
            action.table.metadata_location = location
            if "metadata_location" not in action.update_fields:
                action.update_fields.append("metadata_location")
            self._records[i] = (t, k, target, action.SerializeToString(deterministic=True))
            found += 1
        return found

    def encoded(self) -> Iterator[tuple[str, bytes]]:
        """``(object key, serialized action)`` per action, for the root or
        action file (spec/format.md §3.2)."""
        for t, key, _, payload in self._records:
            if isinstance(payload, bool):
                yield key, _read_bytes(t, key, payload)
            else:
                yield key, payload

    def footprint(self, version: int, begin: int) -> Footprint:
        """The footprint of these actions, without building a message per
        action where the record tells enough."""
        fp = Footprint(version, begin)
        member_reads, writes = fp.member_reads, fp.writes
        for t, key, target, payload in self._records:
            # The two most common records first: an existence check and a create.
            if t in MEMBER_READS:
                member_reads.add(key)
            elif t in _PLAIN_MEMBER_WRITES and key not in fp.alter_props:
                writes[key] = True
            elif isinstance(payload, bool) or t in _PLAIN_FOOTPRINT:
                fp.add_plain(t, key, target)
            else:
                fp.add(apb.Action.FromString(payload))
        return fp


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _read_bytes(action_type: int, key: str, found: bool) -> bytes:
    """``Action(type, object_key=key, read_only=True, found=found)`` serialized
    deterministically, written directly: fields in number order, defaults
    left out (the protobuf wire format; tests compare with protobuf's own)."""
    raw = key.encode("utf-8")
    out = [b"\x08" + _varint(action_type)] if action_type else []
    if raw:
        out.append(b"\x12" + _varint(len(raw)) + raw)
    out.append(b"\x50\x01\x58\x01" if found else b"\x50\x01")  # read_only, found
    return b"".join(out)


#: Action types whose footprint needs only type, key and target key.
_PLAIN_FOOTPRINT = (MEMBER_WRITES | CONTENT_WRITES | READ_TYPES) - {A.NAMESPACE_ALTER}
#: What :func:`is_write` calls a write.
_WRITE_TYPES = MEMBER_WRITES | CONTENT_WRITES
#: Membership writes whose footprint is the key alone (not a rename).
_PLAIN_MEMBER_WRITES = MEMBER_WRITES - {A.TABLE_RENAME}


class Transaction(CatalogReader):
    """A transaction over the whole catalog.

    Reads see the catalog as of :attr:`begin_version` plus this transaction's
    own writes. Use it as a context manager (commit on a clean exit, rollback
    on an exception) or call :meth:`commit` / :meth:`rollback`.
    """

    def __init__(
        self,
        store: CatalogStore,
        root: Root,
        isolation: str,
        *,
        txn_id: str | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        actions: Sequence[apb.Action] = (),
        distributed: pb.DistributedTransaction | None = None,
        step: int = -1,
        claim: apb.TransactionState | None = None,
    ) -> None:
        self._store = store
        self._root = root
        self._keys = key_codec(root.definition)
        self._state = OverlayState(store, root)
        self._actions = ActionLog()
        self._status = "open"
        self.id = txn_id or uuid.uuid4().hex
        self.isolation = isolation
        self.max_attempts = max_attempts
        self._dist = distributed
        #: The last state step written or read; actions before ``_persisted``
        #: are stored in steps ``0.._step`` (spec/transactions.md §6.1).
        self._step = step
        # Reads (type, key) and keys written among self._actions[:self._noted_upto].
        self._noted_reads: set[tuple[int, str]] = set()
        self._noted_writes: set[str] = set()
        self._noted_upto = 0
        self._persisted = len(actions) if distributed is not None else 0
        #: The unfinished claim a recovering handle may finish (§6.5).
        self._claim = claim
        #: The claim id of this handle's own claim step, once written.
        self._claim_id = ""
        #: distribute(): the record being distributed, and the bytes of a step
        #: whose outcome is unknown (written again, unchanged, by a retry).
        self._pending_record: pb.DistributedTransaction | None = None
        self._unsettled: tuple[bytes, int] | None = None
        self._merge: ContentMerge | None = None
        #: Whether another writer of this host published this transaction for
        #: it (group commit, spec/transactions.md §3.2): set by :meth:`commit`.
        self.published_by_holder = False
        #: The creation time of a file written before the commit that the
        #: published version depends on (a distributed transaction's first
        #: state, for the commit time limit, spec/transactions.md §8.5).
        self._written_since: int | None = None
        for action in actions:
            if is_write(action):
                try:
                    apply_write(self._state, self._keys, action)
                except PreconditionFailed as exc:
                    raise OlympiaError(
                        f"cannot rebuild transaction {self.id}: {exc.error}"
                    ) from None
            self._actions.append(action)

    # --- state --------------------------------------------------------------------

    @property
    def begin_version(self) -> int:
        """The version this transaction reads from."""
        return self._root.version

    @property
    def status(self) -> str:
        """``open``, ``committed``, ``rolled_back`` or ``failed``."""
        return self._status

    @property
    def actions(self) -> list[apb.Action]:
        """Copies of the actions recorded so far, in order."""
        return self._actions.since(0)

    @property
    def keys(self) -> KeyCodec:
        """The object keys of this catalog (for a :class:`ContentMerge`)."""
        return self._keys

    def set_content_merge(self, merge: ContentMerge | None) -> None:
        """Let ``merge`` judge concurrent changes to the content of its tables
        when this transaction commits (spec/transactions.md §4.3); None
        removes it. Kept by this handle only: set it again after ``resume``.

        Raises:
            InvalidArgumentTypeError: ``merge`` has no ``keys`` and ``rebase`` methods.
            TransactionClosedError.
        """
        self._check_open(finishing=True)
        if merge is not None and not (
            callable(getattr(merge, "keys", None)) and callable(getattr(merge, "rebase", None))
        ):
            raise InvalidArgumentTypeError(
                f"argument 'merge' must be a ContentMerge (methods keys and rebase) or None, "
                f"got {validate.show(merge)}"
            )
        self._merge = merge

    def _check_open(self, finishing: bool = False) -> None:
        if self._status != "open":
            raise TransactionClosedError(
                f"transaction {self.id} is {self._status.replace('_', ' ')}"
            )
        if self._claim is not None and not finishing:
            raise TransactionClosedError(
                f"distributed transaction {self.id} was claimed for "
                f"{_outcome_word(self._claim.outcome)}; this recovering handle can only "
                f"commit() or rollback() it"
            )

    def _get(self, key: str) -> bytes | None:
        self._check_open()
        return self._state.get(key)

    def _scan(self, prefix: str) -> Iterator[tuple[str, bytes]]:
        self._check_open()
        return self._state.scan(prefix)

    def _record(self, action_type: int, key: str, found: bool) -> None:
        self._check_open()
        self._append([(action_type, key, found)])

    def _write(self, action: apb.Action) -> None:
        """Apply a write; record the preconditions it evaluated as reads, then
        the write itself (or, when a precondition fails, only the reads)."""
        self._check_open()
        checks: list[Check] = []
        key = action.object_key  # one string for the overlay and the record
        self._state.record_undo()
        try:
            apply_write(self._state, self._keys, action, checks, key)
        except PreconditionFailed as exc:
            self._state.end_undo(restore=True)
            self._append(self._check_reads(checks, ()))
            raise exc.error from None
        own = (key, action.target_key) if action.target_key else (key,)
        self._append(self._check_reads(checks, own), action, undo_state=True, key=key)

    def _append(
        self,
        reads: Sequence[tuple[int, str, bool]],
        write: apb.Action | None = None,
        undo_state: bool = False,
        key: str | None = None,
    ) -> None:
        """Record ``reads`` (type, key, found), then ``write``, and store them
        (a distributed transaction's step).

        If storing fails, the actions and (with ``undo_state``) the changes
        applied since ``record_undo`` are undone: the operation has no effect.
        """
        log = self._actions
        mark = len(log)
        for read_type, read_key, found in reads:
            log.append_read(read_type, read_key, found)
        if write is not None:
            log.append_write(write, key)
        try:
            self._persist_step()
        except BaseException:
            log.truncate(mark)
            if undo_state:
                self._state.end_undo(restore=True)
            raise
        if undo_state:
            self._state.end_undo(restore=False)

    def _check_reads(
        self, checks: Sequence[Check], own: Sequence[str]
    ) -> list[tuple[int, str, bool]]:
        """The precondition reads a write evaluated, as read actions to record
        (spec/transactions.md §1).

        Left out, because they add nothing to the footprint: a read this
        transaction already recorded (same type and key), and a membership
        read of a key this transaction writes (``own``: the keys written by
        the write being recorded). Any concurrent write of a key it writes
        conflicts or is ordered by the key itself. The caches of what was
        recorded are built only from actions already in ``self._actions``, so
        an operation undone after a failed step leaves no trace in them.
        """
        reads, written = self._noted_reads, self._noted_writes
        for t, key, target, _ in self._actions.records(self._noted_upto):
            if t in MEMBER_WRITES or t in CONTENT_WRITES:
                written.add(key)
                if target:
                    written.add(target)
            else:
                reads.add((t, key))
        self._noted_upto = len(self._actions)
        out: list[tuple[int, str, bool]] = []
        seen: set[tuple[int, str]] = set()
        for check in checks:
            membership = check.action in MEMBER_READS
            pair = (check.action, check.key)
            if (
                pair in reads
                or pair in seen
                or (membership and (check.key in written or check.key in own))
            ):
                continue
            seen.add(pair)
            out.append((check.action, check.key, check.found))
        return out

    # --- namespace writes ------------------------------------------------------------

    def create_namespace(self, namespace: str, properties: Mapping[str, str] | None = None) -> None:
        """Create a namespace.

        Raises:
            NamespaceAlreadyExistsError, InvalidNameError, TransactionClosedError.
        """
        validate.require_namespace(self._keys, "namespace", namespace)
        props = validate.require_text_mapping("properties", properties)
        self._write(
            apb.Action(
                type=A.NAMESPACE_CREATE,
                object_key=self._keys.namespace(namespace),
                namespace=pb.Namespace(name=namespace, properties=props),
            )
        )

    def alter_namespace(
        self,
        namespace: str,
        set: Mapping[str, str] | None = None,
        unset: Sequence[str] | None = None,
    ) -> None:
        """Set and remove namespace properties (removing a missing key is a no-op).

        Raises:
            NamespaceNotFoundError, InvalidArgumentError (a key both set and unset).
        """
        props, removed = _check_alter(self._keys, namespace, set, unset)
        self._write(
            apb.Action(
                type=A.NAMESPACE_ALTER,
                object_key=self._keys.namespace(namespace),
                namespace=pb.Namespace(name=namespace, properties=props),
                set_properties=sorted(props),
                unset_properties=removed,
            )
        )

    def drop_namespace(self, namespace: str) -> None:
        """Drop an empty namespace.

        Raises:
            NamespaceNotFoundError, NamespaceNotEmptyError.
        """
        validate.require_namespace(self._keys, "namespace", namespace)
        self._write(apb.Action(type=A.NAMESPACE_DROP, object_key=self._keys.namespace(namespace)))

    # --- table writes ---------------------------------------------------------------

    def create_table(
        self,
        namespace: str,
        name: str,
        metadata_location: str,
        properties: Mapping[str, str] | None = None,
        *,
        format: str = "iceberg",
    ) -> None:
        """Register a table whose current metadata file is ``metadata_location``.

        Raises:
            NamespaceNotFoundError, TableAlreadyExistsError (also when a view has
            the name), InvalidNameError.
        """
        props = _check_table(self._keys, namespace, name, properties)
        validate.require_text("metadata_location", metadata_location, non_empty=True)
        validate.require_text("format", format)
        table = pb.Table(
            namespace=namespace,
            name=name,
            format=format,
            metadata_location=metadata_location,
            properties=props,
        )
        self._write(
            apb.Action(
                type=A.TABLE_CREATE, object_key=self._keys.table(namespace, name), table=table
            )
        )

    def update_table(
        self,
        namespace: str,
        name: str,
        metadata_location: str | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> None:
        """Point the table at a new metadata file and/or replace its properties.

        Raises:
            TableNotFoundError, NamespaceNotFoundError.
        """
        props = _check_table(self._keys, namespace, name, properties)
        validate.require_optional_text("metadata_location", metadata_location, non_empty=True)
        fields = []
        table = pb.Table(namespace=namespace, name=name)
        if metadata_location is not None:
            table.metadata_location = metadata_location
            fields.append("metadata_location")
        if properties is not None:
            table.properties.update(props)
            fields.append("properties")
        self._write(
            apb.Action(
                type=A.TABLE_UPDATE,
                object_key=self._keys.table(namespace, name),
                table=table,
                update_fields=fields,
            )
        )

    def rename_table(self, namespace: str, name: str, new_namespace: str, new_name: str) -> None:
        """Rename (and possibly move) a table.

        Raises:
            TableNotFoundError, NamespaceNotFoundError (target namespace),
            TableAlreadyExistsError (target name taken).
        """
        validate.require_namespace(self._keys, "namespace", namespace)
        validate.require_table_name(self._keys, "name", name)
        validate.require_namespace(self._keys, "new_namespace", new_namespace)
        validate.require_table_name(self._keys, "new_name", new_name)
        self._write(
            apb.Action(
                type=A.TABLE_RENAME,
                object_key=self._keys.table(namespace, name),
                target_key=self._keys.table(new_namespace, new_name),
                table=pb.Table(namespace=new_namespace, name=new_name),
            )
        )

    def drop_table(self, namespace: str, name: str) -> None:
        """Drop a table from the catalog (its files are not touched).

        Raises:
            TableNotFoundError.
        """
        validate.require_namespace(self._keys, "namespace", namespace)
        validate.require_table_name(self._keys, "name", name)
        self._write(apb.Action(type=A.TABLE_DROP, object_key=self._keys.table(namespace, name)))

    # --- view writes ----------------------------------------------------------------

    def _view(
        self,
        namespace: str,
        name: str,
        sql_text: str | None,
        substrait_plan: bytes | None,
        **kw: Any,
    ) -> pb.View:
        # The arguments passed _check_view already.
        return pb.View(
            namespace=namespace,
            name=name,
            sql_text=sql_text or "",
            substrait_plan=substrait_plan or b"",
            dialect=kw["dialect"],
            schema_json=kw["schema_json"],
            properties=kw["properties"] or {},
            metadata_location=kw["metadata_location"],
        )

    def create_view(
        self,
        namespace: str,
        name: str,
        sql_text: str | None = None,
        *,
        substrait_plan: bytes | None = None,
        dialect: str = "",
        schema_json: str = "",
        properties: Mapping[str, str] | None = None,
        metadata_location: str = "",
    ) -> None:
        """Create a view from SQL text or a Substrait plan.

        Raises:
            NamespaceNotFoundError, ViewAlreadyExistsError (also when a table has
            the name), InvalidNameError.
        """
        _check_view(
            self._keys, namespace, name, sql_text, substrait_plan,
            dialect, schema_json, properties, metadata_location,
        )  # fmt: skip
        view = self._view(
            namespace, name, sql_text, substrait_plan,
            dialect=dialect, schema_json=schema_json, properties=properties, metadata_location=metadata_location,
        )  # fmt: skip
        self._write(
            apb.Action(type=A.VIEW_CREATE, object_key=self._keys.view(namespace, name), view=view)
        )

    def replace_view(
        self,
        namespace: str,
        name: str,
        sql_text: str | None = None,
        *,
        substrait_plan: bytes | None = None,
        dialect: str = "",
        schema_json: str = "",
        properties: Mapping[str, str] | None = None,
        metadata_location: str = "",
    ) -> None:
        """Replace an existing view's definition.

        Raises:
            ViewNotFoundError.
        """
        _check_view(
            self._keys, namespace, name, sql_text, substrait_plan,
            dialect, schema_json, properties, metadata_location,
        )  # fmt: skip
        view = self._view(
            namespace, name, sql_text, substrait_plan,
            dialect=dialect, schema_json=schema_json, properties=properties, metadata_location=metadata_location,
        )  # fmt: skip
        self._write(
            apb.Action(type=A.VIEW_REPLACE, object_key=self._keys.view(namespace, name), view=view)
        )

    def rename_view(self, namespace: str, name: str, new_namespace: str, new_name: str) -> None:
        """Rename (and possibly move) a view: its definition is read, created
        under the new name and dropped under the old one, all in this
        transaction, so the rename commits whole or not at all.

        Raises:
            ViewNotFoundError, NamespaceNotFoundError (target namespace),
            ViewAlreadyExistsError (target name taken by a view or a table).
        """
        validate.require_namespace(self._keys, "namespace", namespace)
        validate.require_view_name(self._keys, "name", name)
        validate.require_namespace(self._keys, "new_namespace", new_namespace)
        validate.require_view_name(self._keys, "new_name", new_name)
        info = self.describe_view(namespace, name)
        self.create_view(
            new_namespace,
            new_name,
            None if info.substrait_plan else info.sql_text,
            substrait_plan=info.substrait_plan or None,
            dialect=info.dialect,
            schema_json=info.schema_json,
            properties=info.properties,
            metadata_location=info.metadata_location,
        )
        self.drop_view(namespace, name)

    def drop_view(self, namespace: str, name: str) -> None:
        """Drop a view.

        Raises:
            ViewNotFoundError.
        """
        validate.require_namespace(self._keys, "namespace", namespace)
        validate.require_view_name(self._keys, "name", name)
        self._write(apb.Action(type=A.VIEW_DROP, object_key=self._keys.view(namespace, name)))

    # --- distributed transactions ------------------------------------------------------

    def distribute(self) -> str:
        """Persist this transaction so any process can resume it; returns its id.

        Idempotent: after a failure (it raises), calling it again finishes the
        job under the same id (spec/transactions.md §6.2).

        Raises:
            TransactionClosedError; StorageError, CommitFailedError.
        """
        self._check_open()
        if self._dist is not None:
            return self.id
        if self._pending_record is None:
            now = _now_millis()
            self._pending_record = pb.DistributedTransaction(
                id=self.id,
                isolation=self.isolation,
                begin_version=self.begin_version,
                created_at_millis=now,
                expires_at_millis=now + int(self._root.definition.distributed_txn_ttl_millis),
                state_location=layout.dtxn_state_path(self.id, 0),
            )
        record = self._pending_record
        if self._unsettled is not None:  # a step whose outcome is unknown: the same bytes again
            data, count = self._unsettled
            self._put_step(self._step + 1, data, count)
        if self._step < 0 or self._persisted < len(self._actions):
            step = self._step + 1
            data = self._step_bytes(_OPEN, uuid.uuid4().hex, record if step == 0 else None)
            self._put_step(step, data, len(self._actions))
        _create_object(self._store, self._keys, record)
        self._dist = record
        return self.id

    @property
    def distributed(self) -> bool:
        return self._dist is not None

    def _step_bytes(
        self, outcome: int, nonce: str, record: pb.DistributedTransaction | None
    ) -> bytes:
        """A state step holding the actions not stored yet (spec/transactions.md §6.1)."""
        state = apb.TransactionState(
            actions=self._actions.since(self._persisted),
            outcome=cast(Any, outcome),
            nonce=nonce,
            written_at_millis=_now_millis(),
        )
        if record is not None:
            state.transaction.CopyFrom(record)
        return state.SerializeToString(deterministic=True)

    def _persist_step(self, outcome: int = _OPEN) -> None:
        """Store the actions not stored yet as the next step (with ``outcome``).

        Raises:
            CommitConflictError: the step was taken by another process (rule
                ``transaction-advanced`` or ``transaction-claimed``); the
                handle is closed.
            StorageError: the step was not written (the handle stays open),
                or whether it was is unknown (the handle is closed).
        """
        if self._dist is None:
            return
        nonce = uuid.uuid4().hex
        self._put_step(self._step + 1, self._step_bytes(outcome, nonce, None), len(self._actions))
        if outcome != _OPEN:
            self._claim_id = nonce

    def _put_step(self, step: int, data: bytes, count: int) -> None:
        """Write state step ``step`` holding the actions before ``count``."""
        path = layout.dtxn_state_path(self.id, step)
        try:
            _put_confirmed(self._store, path, data)
        except StorageFileExistsError:
            if self._dist is None:  # distribute(): nobody else knows this id
                raise StorageError(
                    f"cannot distribute transaction {self.id}: {path} already holds a state "
                    f"written by another process"
                ) from None
            self._status = "failed"
            raise self._taken(step) from None
        except _OutcomeUnknownError as exc:
            if self._dist is None:  # distribute() writes these same bytes again
                self._unsettled = (data, count)
                raise StorageError(
                    f"distributing transaction {self.id} failed: {exc}; call distribute() again"
                ) from exc
            self._status = "failed"
            raise StorageError(
                f"whether step {step} of distributed transaction {self.id} was written is "
                f"unknown ({exc}); resume the transaction to see"
            ) from exc
        self._unsettled = None
        self._step = step
        self._persisted = count

    def _taken(self, step: int) -> CommitConflictError:
        """The error for finding ``step`` written by another process."""
        path = layout.dtxn_state_path(self.id, step)
        try:
            other = parse(apb.TransactionState, self._store.storage.read(path), f"state {path}")
        except OlympiaError:
            other = apb.TransactionState()
        if other.outcome != _OPEN:
            return _claimed_error(self._store, self._keys, self.id, self.begin_version, other)
        return CommitConflictError(
            f"distributed transaction {self.id} was advanced to step {step} by another "
            f"process; resume it again to continue from the latest step",
            rule="transaction-advanced",
        )

    # --- commit and rollback --------------------------------------------------------------

    def rollback(self) -> None:
        """Discard everything this transaction did. Writes nothing (a
        distributed transaction claims its end and drops its catalog object,
        spec/transactions.md §6.4).

        Raises:
            CommitConflictError: rule ``transaction-claimed``: another process
                is committing or rolling back this distributed transaction.
            StorageError: the claim could not be written (a retry may work).
        """
        self._check_open(finishing=True)
        if self._dist is None and self._pending_record is not None:
            # A failed distribute() may have published the object: finish it, to drop it.
            with contextlib.suppress(OlympiaError):
                self.distribute()
        if self._dist is None:
            self._status = "rolled_back"
            return
        self._persist_step(_ROLLED_BACK)
        self._status = "rolled_back"
        _drop_object_quietly(self._store, self._keys, self.id, self._claim_id)

    def commit(self) -> int:
        """Commit; return the version that holds this transaction's changes.

        A SNAPSHOT transaction that wrote nothing returns its begin version.

        Raises:
            CommitConflictError: a concurrent commit conflicts (``.rule`` and
                ``.version`` say which); nothing was published. Rule
                ``transaction-claimed``: another process committed or rolled
                back this distributed transaction (``.version``, once published).
            CommitFailedError: storage failed while publishing; the message says
                whether the outcome is unknown (reload the catalog to see).
            StorageError: storage failed before anything was published.
            TransactionClosedError: already committed, rolled back or failed.
        """
        self._check_open(finishing=True)
        if self._claim is not None and self._claim.outcome == _ROLLED_BACK:
            raise TransactionClosedError(
                f"distributed transaction {self.id} was claimed for rollback; it can only be "
                f"rolled back"
            )
        if self._dist is None and self._pending_record is not None:
            self.distribute()  # a failed distribute() may have published the object
        owns_object = False
        try:
            if self._dist is not None:
                # The claim: of all processes holding this step, one writes the next.
                self._persist_step(_COMMITTING)
                owns_object = True
                self._actions.append(
                    apb.Action(
                        type=A.TRANSACTION_DROP,
                        object_key=self._keys.transaction(self.id),
                        claim=self._claim_id,
                    )
                )
            version = self._publish()
        except CommitConflictError as exc:
            self._status = "failed"
            if owns_object and exc.rule != "transaction-claimed":
                _drop_object_quietly(self._store, self._keys, self.id, self._claim_id)
            raise
        except BaseException:
            if owns_object or self._dist is None:
                self._status = "failed"
            if owns_object:
                _drop_object_quietly(self._store, self._keys, self.id, self._claim_id)
            raise
        self._status = "committed"
        return version

    def _publish(self) -> int:
        begin = self.begin_version
        if not self._actions or (not self._actions.has_write() and self.isolation == "snapshot"):
            return begin
        own = self._keys.transaction(self.id)
        built: list[Footprint] = []
        #: The keys whose content the hook judges (§4.3), and the footprint
        #: for the write-write rules (without their writes).
        merged: frozenset[str] = frozenset()
        first_wins: list[Footprint] = []

        def pending() -> Footprint:
            """This transaction's footprint, built the first time a rebase needs it."""
            nonlocal merged
            if not built:
                fp = self._actions.footprint(begin + 1, begin)
                if self._dist is not None:
                    fp.writes.pop(own, None)
                if self._merge is not None:
                    judged = self._merge.keys()
                    merged = frozenset(k for k in judged if not fp.writes.get(k))
                built.append(fp)
                first_wins.append(judge_by_merge(fp, merged) if merged else fp)
            return built[0]

        store = self._store
        target = self._root
        if self._dist is not None:  # its catalog object lives in a later version
            target = store.load_latest()
        state = self._state
        encoded = PreparedActions(
            self._actions.encoded, len(self._actions), self.id, target.definition
        )
        # Carried across attempts, so that each retry costs O(versions committed
        # since the previous attempt) (spec/transactions.md §3): versions in
        # (begin, checked] passed the rules of §4.1 and ``state`` is the replay
        # on ``checked``; ``seen`` are the concurrent versions pending's reads see.
        checked = begin
        relevant: tuple[frozenset[str], tuple[str, ...]] | None = None
        seen: list[Footprint] = []
        known: dict[int, Footprint] = {}

        folder = store.storage.group_dir() if self._may_group() else None
        member = group.Member(folder, self.id) if folder is not None else None

        def rebase() -> None:
            """Bring ``state`` from ``checked`` to ``target``: the write-write
            rules, then the replay (a failed precondition is `structural`),
            each on the versions not examined before only (spec §3)."""
            nonlocal state, checked, relevant, encoded
            if target.version <= checked:
                return
            if member is not None and member.asked_base is not None:
                # A holder may have published this transaction (§3.2).
                for v in range(checked + 1, target.version + 1):  # base <= checked
                    if self.id in store.load_root(v).info.transaction_ids:
                        raise _PublishedByHolder(v)
            if _UNSAFE_SKIP_CONFLICT_CHECKS:
                state = self._replay(target)
            else:
                fp = pending()
                if relevant is None:
                    relevant = _replay_keys(fp, own if self._dist is not None else None)
                new = self._window(checked, target.version)
                patched = bool(merged) and self._merge_content(target, new, merged)
                if patched:  # the actions changed: encode them again
                    encoded = PreparedActions(
                        self._actions.encoded, len(self._actions), self.id, target.definition
                    )
                check_snapshot(first_wins[0], new, self.isolation, self._describe)
                if patched:
                    state = self._replay(target)
                else:
                    state = self._rebase(state, target, new, relevant)
                known.update((c.version, c) for c in new)
                seen.extend(c for c in new if sees(fp, c) is not None)
            checked = target.version

        def check_claim() -> None:
            if self._dist is not None and _object_value(store, target, own) is None:
                # Another process published this transaction's outcome (§6.4).
                raise _claimed_error(store, self._keys, self.id, begin, None, target.version)

        def catch_up() -> None:
            """While waiting for the publish lock: wait for the answer to this
            transaction's group-commit request, if it left one (§3.2);
            otherwise rebase on the versions the other writers publish
            meanwhile, so that they are not examined while holding the lock
            (§3.1), and leave a request for the holder."""
            nonlocal target
            if member is not None and member.pending:
                settle_answer()
                if member.pending:
                    return
            # A request goes first, on the base checked so far: the holder
            # examines the versions since (it has them at hand); this writer
            # rebases only when the holder refused it.
            if not ask():
                newer = self._newer_than(target)
                if newer is not None:
                    target = newer
                    check_claim()
                    rebase()
                    ask()

        def settle_answer() -> None:
            """Read the holder's answer to this transaction's request, if one
            came; raise :class:`_PublishedByHolder` when it was published."""
            assert member is not None
            published = member.answer()
            if published is not None:
                store.note_seen(member.latest)
                raise _PublishedByHolder(published)

        def ask() -> bool:
            """Leave a group-commit request on the base checked so far, unless
            one was refused on that base already; whether one was left."""
            if (
                member is None
                or (member.asked_base is not None and checked <= member.asked_base)
                or (self.isolation == "serializable" and seen)
            ):
                # Not with outgoing edges (``seen``): only a transaction without
                # them can be published later than checked without a new
                # search for cycles (§3.2).
                return False
            base_id = store.load_root(checked).info.transaction_id
            return member.ask(
                group.Request(
                    self.id, begin, checked, self.isolation, tuple(self._actions), base_id
                )
            )

        timeouts = 0
        try:
            for attempt in range(1, self.max_attempts + 1):
                # The writers of this host publish one at a time (§3.1): under the
                # lock, after waiting for it, the base is brought up to the latest
                # version before the rebase; the lock is let go once the root is
                # in place.
                lock = store.storage.publish_lock(catch_up)
                try:
                    if member is not None:
                        # A holder answers before it lets the lock go (§3.2).
                        if member.pending:
                            settle_answer()
                        member.withdraw()
                    if lock.held and lock.waited:
                        target = self._latest_under_lock(target)
                    check_claim()
                    rebase()
                    serialized_before: list[int] = []
                    if target.version != begin and seen and not _UNSAFE_SKIP_CONFLICT_CHECKS:
                        serialized_before = self._check_order(pending(), target.version, known)
                    new_root = tree.apply(
                        target.node, state.changes(), target.order, store.load_node
                    )
                    # Waiting writers left transactions to publish after this one (§3.2).
                    holder = (
                        group.Holder(folder)
                        if folder is not None and lock.held and target.format_version >= 2
                        else None
                    )
                    if not store.storage.parallel_reads and store.storage.exists(
                        layout.root_path(target.version + 1)
                    ):
                        # Local storage: an existence check costs far less than
                        # encoding and writing node files for a version already taken.
                        lost = target.version + 1
                    elif holder is not None and holder.waiting():
                        # This transaction first, then the requests, in one version.
                        mine = ChainLink(
                            self.id,
                            new_root,
                            encoded,
                            begin,
                            self.isolation,
                            tuple(serialized_before),
                        )
                        try:
                            outcome, links = self._lead_round(holder, target, (mine, pending()))
                            if outcome.published and len(outcome.published) == links:
                                self._lead(holder, outcome.published[-1], _GROUP_ROUNDS - 1)
                        finally:
                            holder.tidy()
                        if outcome.published:
                            return outcome.published[0].version
                        if isinstance(outcome.error, CommitTimeoutError):
                            timeouts = _count_timeout(outcome.error, timeouts)
                            continue
                        if outcome.error is not None:
                            state_word = "unknown" if outcome.unknown else "not published"
                            raise CommitFailedError(
                                f"publishing version {target.version + 1} failed "
                                f"({state_word}): {outcome.error}"
                            ) from outcome.error
                        lost = target.version + 1
                    else:
                        try:
                            done = store.commit(
                                target.version + 1,
                                new_root,
                                target.definition,
                                self.id,
                                actions=encoded,
                                previous_root=target.path,
                                begin_version=begin,
                                isolation=self.isolation,
                                serialized_before=serialized_before,
                                after_put=lock.release,
                                written_since=self._written_since,
                            )
                        except CommitConflictError as exc:
                            if exc.rule != "version-taken":
                                raise
                            lost = target.version + 1
                        except CommitTimeoutError as exc:
                            # Again on the same base, every file under a new name.
                            timeouts = _count_timeout(exc, timeouts)
                            continue
                        else:
                            return done.version
                finally:
                    lock.release()
                # Attempt ``attempt`` lost: every attempt so far did.
                if attempt > _FREE_RETRIES:
                    # Only a livelock breaker: a loser normally retries at once
                    # on the newer base, as fresh as any new transaction's.
                    time.sleep(random.uniform(0, min(0.05, 0.001 * 2 ** (attempt - _FREE_RETRIES))))
                # After one lost race, build on the winner's root at once; after
                # more in a row, find the latest version first, so as not to
                # keep losing to writers that started later.
                target = store.load_after_lost_race(lost, probe=attempt > 1)
            raise CommitConflictError(
                f"transaction {self.id} lost the race for a new version {self.max_attempts} times "
                f"(max_attempts) although nothing conflicted; try again later",
                version=target.version,
                rule="retries-exhausted",
            )
        except _PublishedByHolder as published:
            self.published_by_holder = True
            return published.version
        finally:
            if member is not None:
                member.withdraw()

    def _may_group(self) -> bool:
        """Whether another writer of this host may publish this transaction
        (§3.2): not a distributed one, whose claims decide who publishes it,
        nor one of a format-1 catalog."""
        return (
            GROUP_COMMIT
            and self._dist is None
            and self._written_since is None  # the chain does not carry it
            and self._root.format_version >= 2  # a format-1 holder publishes none
            and not _UNSAFE_SKIP_CONFLICT_CHECKS
        )

    def _lead(self, holder: group.Holder, last: Root, rounds: int) -> None:
        """Holding the publish lock, after publishing ``last``: publish the
        transactions other writers of this host left meanwhile, for at most
        ``rounds`` more rounds (spec/transactions.md §3.2)."""
        for _ in range(rounds):
            # The writers just answered are beginning their next transactions:
            # give them a moment to leave them rather than a turn of their own.
            holder.wait_for_requests(_GROUP_GATHER_SECONDS)
            outcome, links = self._lead_round(holder, last)
            if not links or len(outcome.published) < links:
                return
            last = outcome.published[-1]

    def _lead_round(
        self,
        holder: group.Holder,
        last: Root,
        first: tuple[ChainLink, Footprint] | None = None,
    ) -> tuple[ChainOutcome, int]:
        """One round of group commit (spec/transactions.md §3.2): ``first``
        (this transaction's version and its footprint, if given) and the
        requests there now that may follow it, published together as one
        version after ``last`` (two when ``first``'s actions fill an action
        file of their own); every request claimed is answered, except one
        whose put has an unknown outcome.
        Returns what was published and how many versions were tried.

        Raises only with ``first``: storage errors from publishing."""
        store = self._store
        definition = last.definition
        links: list[ChainLink] = []
        #: The transactions of the version being built, in serial order:
        #: (entry, footprint, the encoded actions).
        members: list[_Member] = []
        tip = last
        own: ChainLink | None = None
        #: The transactions published above ``last`` in this round, with
        #: their footprints, for the admission of the requests.
        pending: list[tuple[str, Footprint]] = []
        if first is not None:
            own, footprint = first
            pending.append((own.transaction_id, footprint))
            tip = Root(last.version + 1, own.tree, last.info, definition, last.created_at_millis)
            if own.actions.data is None:  # few actions: the others join its version
                entry = GroupEntry(
                    own.transaction_id, own.begin_version, own.isolation, own.actions.count
                )
                members.append((entry, footprint, self._actions.encoded))
            else:  # a large transaction's actions stay in their own action file
                links.append(own)
        version = last.version + 1 + len(links)
        for txn_id, request in holder.claim(self.id):
            if request is None:
                holder.refuse(txn_id)
                continue
            log = ActionLog()
            for action in request.actions:
                log.append(action)
            footprint = log.footprint(version, request.begin)
            try:
                state = self._admit(
                    request, log, footprint, tip, last, pending, [m[1] for m in members]
                )
                if state is None:
                    holder.refuse(txn_id)
                    continue
                new_tree = tree.apply(tip.node, state.changes(), tip.order, store.load_node)
            except Exception:  # a node that cannot be read, say: its owner publishes it
                holder.refuse(txn_id)
                continue
            members.append(
                (
                    GroupEntry(txn_id, request.begin, request.isolation, len(log)),
                    footprint,
                    log.encoded,
                )
            )
            pending.append((txn_id, footprint))
            tip = Root(version, new_tree, last.info, definition, last.created_at_millis)
        if members:
            links.append(self._group_link(members, tip.node, definition, own))
        outcome = ChainOutcome()
        if not links:
            return outcome, 0
        try:
            outcome = store.publish_chain(last, links)
        except Exception:
            if own is not None:
                raise
            return outcome, len(links)  # every outcome unknown: left to the owners
        done = len(outcome.published)
        for i, link in enumerate(links):
            for txn_id in link.transaction_ids:
                if txn_id == self.id:
                    continue
                if i < done:
                    holder.publish(
                        txn_id, outcome.published[i].version, outcome.published[-1].version
                    )
                elif i > done or not outcome.unknown:
                    holder.refuse(txn_id)
        return outcome, len(links)

    def _group_link(
        self,
        members: Sequence[_Member],
        new_tree: Node,
        definition: pb.CatalogDefinition,
        own: ChainLink | None,
    ) -> ChainLink:
        """The version holding ``members`` in order (spec/format.md §3.2,
        ``$group`` when there are several): their actions one after the
        other, the first one's id and isolation, the smallest begin version."""
        head = members[0][0]
        if len(members) == 1 and own is not None and head.transaction_id == own.transaction_id:
            return own  # alone after all: the version it built itself
        entries = tuple(m[0] for m in members)
        encoders = [m[2] for m in members]

        def actions() -> Iterator[tuple[str, bytes]]:
            for encode in encoders:
                yield from encode()

        count = sum(e.n_actions for e in entries)
        return ChainLink(
            head.transaction_id,
            new_tree,
            PreparedActions(actions, count, head.transaction_id, definition),
            min(e.begin_version for e in entries),
            head.isolation,
            own.serialized_before
            if own is not None and own.transaction_id == head.transaction_id
            else (),
            entries if len(entries) > 1 else (),
        )

    def _admit(
        self,
        request: group.Request,
        log: ActionLog,
        footprint: Footprint,
        tip: Root,
        last: Root,
        pending: Sequence[tuple[str, Footprint]],
        members: Sequence[Footprint],
    ) -> OverlayState | None:
        """The pending changes of ``request`` (its actions ``log``, their
        ``footprint``) on ``tip``, if it may join the
        version being built on ``last`` after ``members``, else None
        (spec/transactions.md §3.2): its owner checked it up to its base, and
        no version since (published, or about to be: the transactions in
        ``pending``) wrote anything its actions depend on, so every rule of
        §4 would pass and its replay on ``tip`` equals its replay on the
        base; and the version's begin version, the smallest of its
        transactions', hides no dependency (:func:`_begin_hides_a_read`)."""
        store = self._store
        base, latest = request.base, last.version
        if (
            request.isolation not in ISOLATION_LEVELS
            or not request.begin <= base <= latest
            or latest - base > _GROUP_WINDOW
        ):
            return None
        keys, prefixes = _replay_keys(footprint, None)
        try:
            if store.load_root(base).info.transaction_id != request.base_id:
                return None  # a request of another catalog (whose folder this one found)
            if _begin_hides_a_read(store, footprint, members):
                return None
            committed: list[tuple[Sequence[str], Footprint]] = [
                (store.load_root(v).info.transaction_ids, footprint_of(store, v))
                for v in range(base + 1, latest + 1)
            ]
            committed.extend(((txn_id,), fp) for txn_id, fp in pending)
            for txn_ids, fp in committed:
                if request.txn_id in txn_ids or fp.rollback:
                    return None  # published already, or a rollback to refuse it
                for key in fp.writes:
                    if key in keys or key.startswith(prefixes):
                        return None
            state = OverlayState(store, tip)
            for action in log.writes():
                apply_write(state, self._keys, action)
        except (OlympiaError, PreconditionFailed):
            return None
        return state

    def _newer_than(self, target: Root) -> Root | None:
        """A version newer than ``target`` if local storage shows one at once
        (one existence check), else None."""
        store = self._store
        if store.storage.parallel_reads or not store.storage.exists(
            layout.root_path(target.version + 1)
        ):
            return None
        return store.load_after_lost_race(target.version + 1)

    def _latest_under_lock(self, target: Root) -> Root:
        """The base to build on while holding the host's publish lock: the
        latest version, found from ``target`` (spec/transactions.md §3.1).
        The other writers of this host publish nothing meanwhile, so an
        attempt built on it loses only to a writer elsewhere."""
        if self._store.storage.parallel_reads:
            # One round: the roots above ``target``, read together.
            return self._store.load_after_lost_race(target.version + 1)
        while (newer := self._newer_than(target)) is not None:
            target = newer
        return target

    def _window(self, checked: int, latest: int) -> list[Footprint]:
        """The footprints of the versions in ``(checked, latest]``."""
        store, begin = self._store, self.begin_version
        try:
            return [footprint_of(store, v) for v in range(checked + 1, latest + 1)]
        except VersionNotFoundError:
            raise CommitConflictError(
                f"versions after {begin} were expired before transaction {self.id} committed",
                version=begin + 1,
                rule="history-expired",
            ) from None

    def _merge_content(
        self, target: Root, new: Sequence[Footprint], merged: frozenset[str]
    ) -> bool:
        """Call the content-merge hook for the ``merged`` keys that the versions
        ``new`` wrote, if any, and patch the TABLE_UPDATE actions it returns
        (spec/transactions.md §4.3); whether any action changed."""
        assert self._merge is not None
        changed = frozenset(k for c in new for k in merged if k in c.writes)
        if not changed:
            return False
        from olympia.catalog import CatalogVersion  # catalog imports this module

        patches = self._merge.rebase(CatalogVersion(self._store, target), changed)
        if not isinstance(patches, Mapping):
            raise OlympiaError(
                f"the content-merge hook of transaction {self.id} returned {patches!r}, "
                f"not a mapping of object keys to metadata locations"
            )
        for key, location in patches.items():
            if key not in changed or not isinstance(location, str) or not location:
                raise OlympiaError(
                    f"the content-merge hook of transaction {self.id} returned {key!r}: "
                    f"{location!r}; it may only give a non-empty metadata location for a key "
                    f"it was asked about ({sorted(changed)})"
                )
            if not self._actions.patch_location(key, location):
                raise OlympiaError(
                    f"the content-merge hook of transaction {self.id} returned a location for "
                    f"{self._describe(key)}, which the transaction does not update"
                )
        return bool(patches)

    def _rebase(
        self,
        state: OverlayState,
        target: Root,
        new: Sequence[Footprint],
        relevant: tuple[frozenset[str], tuple[str, ...]],
    ) -> OverlayState:
        """The replay of this transaction's writes on ``target``, given ``state``,
        their replay on an older version, and ``new``, the versions between the two.

        Replaying a write reads only keys in the transaction's footprint (its
        precondition reads, the keys it writes) and the prefixes it lists. When
        no version of ``new`` wrote one of them, the replay on ``target`` gives
        exactly the overlay of ``state``, which is then kept as it is.
        """
        keys, prefixes = relevant
        for c in new:
            for key in c.writes:
                if key in keys or key.startswith(prefixes):
                    return self._replay(target)
        rebased = OverlayState(self._store, target)
        rebased.overlay = dict(state.overlay)
        return rebased

    def _check_order(
        self, pending: Footprint, latest: int, known: dict[int, Footprint]
    ) -> list[int]:
        """SERIALIZABLE: the dependency graph of spec §4.2; the versions ``pending``
        is serialized before. ``known`` holds footprints loaded already; the
        search adds the older ones it loads."""
        if self.isolation != "serializable":
            return []
        store = self._store

        def committed(v: int) -> Footprint:
            fp = known.get(v)
            if fp is None:
                fp = known[v] = footprint_of(store, v)
            return fp

        pending.version = latest + 1
        return check_serializable(pending, latest, committed)

    def _describe(self, key: str) -> str:
        """A human name for an object key, for error messages."""
        try:
            decoded = self._keys.decode(key)
        except OlympiaError:
            return repr(key.rstrip())
        return f"{decoded.object_type.name.lower()} {'.'.join(decoded.parts)}"

    def _replay(self, target: Root) -> OverlayState:
        state = OverlayState(self._store, target)
        for action in self._actions.writes():
            try:
                apply_write(state, self._keys, action)
            except PreconditionFailed as exc:
                culprit = _last_writer(self._store, exc.key, self.begin_version, target.version)
                raise CommitConflictError(
                    f"version {culprit} changed the catalog so that this transaction's "
                    f"{apb.ActionType.Name(action.type)} no longer applies: {exc.error} "
                    f"(isolation {self.isolation}, rule structural); start a new transaction "
                    f"from the latest version and try again",
                    version=culprit,
                    rule="structural",
                ) from None
        return state

    # --- context manager ------------------------------------------------------------------

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if self._status != "open":
            return
        if exc_type is None:
            self.commit()
        else:
            self.rollback()

    def __repr__(self) -> str:
        return f"Transaction(id={self.id!r}, isolation={self.isolation!r}, begin_version={self.begin_version}, status={self._status!r})"


#: Attempts in a row that may pass the commit time limit before a commit
#: fails with CommitTimeoutError (spec/transactions.md §8.5).
_TIMEOUTS_ALLOWED = 1


def _count_timeout(exc: CommitTimeoutError, timeouts: int) -> int:
    """One more attempt that passed the commit time limit; raise ``exc``
    when too many did in a row."""
    if timeouts >= _TIMEOUTS_ALLOWED:
        raise exc
    return timeouts + 1


class _PublishedByHolder(Exception):
    """Another writer of this host published this transaction (§3.2)."""

    def __init__(self, version: int) -> None:
        super().__init__(version)
        self.version = version


class _OutcomeUnknownError(StorageError):
    """A put-if-absent failed and reading the file back failed too."""


def _put_confirmed(store: CatalogStore, path: str, data: bytes) -> None:
    """Put-if-absent that settles an unknown outcome by reading the file back.

    Raises:
        StorageFileExistsError: another writer's bytes are there.
        _OutcomeUnknownError: the put failed and the file could not be read
            back (three attempts): it may or may not hold ``data``.
        StorageError: the put failed and the file is absent: not written.
    """
    try:
        store.storage.put_if_absent(path, data)
    except StorageFileExistsError:
        raise
    except StorageError as exc:
        for _ in range(3):
            try:
                landed = store.storage.read(path)
            except StorageFileNotFoundError:
                raise exc from None
            except StorageError:
                continue
            if landed != data:
                raise StorageFileExistsError(f"{path} holds another writer's step") from None
            return
        raise _OutcomeUnknownError(
            f"writing {path} failed ({exc}) and it could not be read back"
        ) from exc


def _outcome_word(outcome: int) -> str:
    return "rollback" if outcome == _ROLLED_BACK else "commit"


def _begin_hides_a_read(
    store: CatalogStore, footprint: Footprint, members: Sequence[Footprint]
) -> bool:
    """Whether ``footprint`` may not join a version holding ``members``
    because the version's begin version, the smallest of its transactions'
    (format.md §3.2), would misplace a dependency: a version ``u`` with
    ``begin <= u`` whose writes one of them read would count as written after
    that transaction's snapshot instead of before it (a *wr* edge taken for
    an *rw* edge in the opposite direction, transactions.md §4.2). So no
    version in ``(smallest begin, the transaction's begin]`` may write a key
    the transaction's reads depend on, for it and for the members already
    in, whose ranges grow when it lowers the smallest begin."""
    low = min((m.begin for m in members), default=footprint.begin)
    new_low = min(low, footprint.begin)
    ranges = [(footprint, new_low, footprint.begin)]
    if new_low < low:
        ranges.extend((m, new_low, low) for m in members)
    for reader, after, upto in ranges:
        if upto - after > _GROUP_WINDOW:
            return True
        for v in range(after + 1, upto + 1):
            if sees(reader, footprint_of(store, v)) is not None:
                return True
    return False


def _object_value(store: CatalogStore, root: Root, key: str) -> bytes | None:
    value = tree.get(root.node, key, store.load_node)
    return None if value is None else store.read_value(value)


def _claimed_error(
    store: CatalogStore,
    keys: KeyCodec,
    txn_id: str,
    begin: int,
    claim: apb.TransactionState | None,
    latest: int | None = None,
) -> CommitConflictError:
    """``transaction-claimed``: another process committed, rolled back or is
    finishing distributed transaction ``txn_id`` (spec/transactions.md §6.4)."""
    key = keys.transaction(txn_id)
    try:
        if latest is None:
            latest = store.latest_version()
        root = store.load_root(latest)
        present = _object_value(store, root, key) is not None
    except OlympiaError:
        present, latest = True, None
    if present or latest is None:
        doing = (
            "rolled back" if claim is not None and claim.outcome == _ROLLED_BACK else "committed"
        )
        return CommitConflictError(
            f"distributed transaction {txn_id} is being {doing} by another process "
            f"(its outcome is not published yet); do not commit it again",
            rule="transaction-claimed",
        )
    version = _dropping_version(store, key, begin, latest)
    if version is None:
        how = "was committed or rolled back by another process"
    else:
        try:
            by_itself = store.load_root(version).info.transaction_id == txn_id
        except OlympiaError:
            by_itself = False
        how = (
            f"was committed by another process as version {version}"
            if by_itself
            else f"was rolled back or expired by another process in version {version}"
        )
    return CommitConflictError(
        f"distributed transaction {txn_id} {how}", version=version, rule="transaction-claimed"
    )


def _dropping_version(store: CatalogStore, key: str, begin: int, latest: int) -> int | None:
    """The newest version in ``(begin, latest]`` that wrote ``key``."""
    for v in range(latest, begin, -1):
        try:
            if key in footprint_of(store, v).writes:
                return v
        except VersionNotFoundError:
            break
    return None


def _check_alter(
    keys: KeyCodec, namespace: object, set: object, unset: object
) -> tuple[dict[str, str], list[str]]:
    """Argument checks of :meth:`Transaction.alter_namespace`; the properties set
    and the keys removed."""
    validate.require_namespace(keys, "namespace", namespace)
    props = validate.require_text_mapping("set", set)
    removed = validate.require_text_collection("unset", unset)
    both = sorted(props.keys() & removed)
    if both:
        raise InvalidArgumentError(
            f"properties {both} are both set and unset (arguments 'set' and 'unset')"
        )
    return props, removed


def _check_table(
    keys: KeyCodec, namespace: object, name: object, properties: object
) -> dict[str, str]:
    """Argument checks shared by :meth:`Transaction.create_table` and
    ``update_table``; a copy of the properties."""
    validate.require_namespace(keys, "namespace", namespace)
    validate.require_table_name(keys, "name", name)
    return validate.require_text_mapping("properties", properties)


def _check_view(
    keys: KeyCodec,
    namespace: object,
    name: object,
    sql_text: object,
    substrait_plan: object,
    dialect: object,
    schema_json: object,
    properties: object,
    metadata_location: object,
) -> None:
    """Argument checks shared by :meth:`Transaction.create_view` and ``replace_view``."""
    validate.require_namespace(keys, "namespace", namespace)
    validate.require_view_name(keys, "name", name)
    validate.require_optional_text("sql_text", sql_text)
    if substrait_plan is not None:
        validate.require_bytes("substrait_plan", substrait_plan)
    if (sql_text is None) == (substrait_plan is None):
        raise InvalidArgumentError(
            "a view needs exactly one of sql_text and substrait_plan (arguments 'sql_text', "
            "'substrait_plan')"
        )
    validate.require_text("dialect", dialect)
    validate.require_text("schema_json", schema_json)
    validate.require_text_mapping("properties", properties)
    validate.require_text("metadata_location", metadata_location)


def _last_writer(store: CatalogStore, key: str, begin: int, latest: int) -> int:
    """The newest version in ``(begin, latest]`` that wrote ``key`` (else ``latest``)."""
    for v in range(latest, begin, -1):
        try:
            if key in footprint_of(store, v).writes:
                return v
        except VersionNotFoundError:
            break
    return latest


def _publish_object(
    store: CatalogStore,
    keys: KeyCodec,
    action_type: int,
    txn_id: str,
    record: pb.DistributedTransaction | None,
    claim: str = "",
) -> int:
    """Commit one catalog-maintenance write of a distributed transaction's object."""
    root = store.load_latest()
    txn = Transaction(store, root, "snapshot")
    action = apb.Action(type=cast(Any, action_type), object_key=keys.transaction(txn_id))
    if record is not None:
        action.transaction.CopyFrom(record)
        if action_type == A.TRANSACTION_CREATE:  # its state files are older (§8.5)
            txn._written_since = int(record.created_at_millis)
    if claim:
        action.claim = claim
    txn._write(action)
    return txn.commit()


def _create_object(store: CatalogStore, keys: KeyCodec, record: pb.DistributedTransaction) -> None:
    """Publish the object of ``record`` unless the latest version holds it already."""
    key = keys.transaction(record.id)
    data = record.SerializeToString(deterministic=True)

    def present() -> bool:
        value = _object_value(store, store.load_latest(), key)
        if value is not None and value != data:
            raise OlympiaError(
                f"cannot distribute transaction {record.id}: the catalog already holds "
                f"another distributed transaction with this id"
            )
        return value is not None

    if present():
        return  # an earlier attempt whose outcome was unknown did publish it
    try:
        _publish_object(store, keys, A.TRANSACTION_CREATE, record.id, record)
    except OlympiaError:
        try:
            if present():
                return
        except OlympiaError:
            pass
        raise


def drop_transaction_objects(store: CatalogStore, txn_ids: Sequence[str]) -> int:
    """Commit one version that drops the catalog objects of ``txn_ids``.

    Used by expiration for distributed transactions past their TTL.
    """
    root = store.load_latest()
    keys = key_codec(root.definition)
    txn = Transaction(store, root, "snapshot")
    for txn_id in txn_ids:
        txn._write(apb.Action(type=A.TRANSACTION_DROP, object_key=keys.transaction(txn_id)))
    return txn.commit()


def _drop_object_quietly(store: CatalogStore, keys: KeyCodec, txn_id: str, claim: str) -> None:
    try:
        _publish_object(store, keys, A.TRANSACTION_DROP, txn_id, None, claim)
    except OlympiaError:
        pass  # already gone, or storage trouble: an unfinished claim (spec §6.5)


def resume(
    store: CatalogStore,
    txn_id: str,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    recover_after_seconds: float = DEFAULT_RECOVER_AFTER_SECONDS,
) -> Transaction:
    """Continue distributed transaction ``txn_id`` (spec/transactions.md §6).

    A transaction whose latest step is an unfinished claim (its claimant died
    before publishing) gives a recovering handle once the claim is older than
    ``recover_after_seconds``: it can only commit() or rollback() (§6.5).

    Raises:
        TransactionNotFoundError, TransactionExpiredError (past its TTL, or its
        begin version is below the floor), TransactionClosedError,
        CorruptCatalogError (its object or state is damaged, e.g. a begin
        version that cannot exist), InvalidArgumentError
        (``recover_after_seconds`` is not a number >= 0).
    """
    if isinstance(recover_after_seconds, bool) or not isinstance(
        recover_after_seconds, (int, float)
    ):
        raise InvalidArgumentTypeError(
            f"recover_after_seconds must be a number of seconds, got {recover_after_seconds!r}"
        )
    if not recover_after_seconds >= 0:  # also refuses NaN
        raise InvalidArgumentError(
            f"recover_after_seconds must be at least 0, got {recover_after_seconds!r}"
        )
    latest = store.load_latest()
    keys = key_codec(latest.definition)
    value = _object_value(store, latest, keys.transaction(txn_id))
    if value is None:
        raise TransactionNotFoundError(f"no open distributed transaction {txn_id!r}")
    record = parse(pb.DistributedTransaction, value, f"transaction {txn_id}")
    if _now_millis() > record.expires_at_millis:
        raise TransactionExpiredError(f"distributed transaction {txn_id} expired")
    step = _latest_step(store, txn_id)
    states = _read_steps(store, txn_id, step)
    last = states[-1]
    claim = None
    if last.outcome != _OPEN:
        age = (_now_millis() - last.written_at_millis) / 1000
        if age < recover_after_seconds:
            doing = "rolled back" if last.outcome == _ROLLED_BACK else "committed"
            raise TransactionClosedError(
                f"distributed transaction {txn_id} is being {doing} by another process "
                f"(claimed {max(age, 0.0):.1f} s ago, not published yet); if that process "
                f"died, resume it once the claim is {recover_after_seconds:g} s old to finish "
                f"the {_outcome_word(last.outcome)}"
            )
        claim = last
    try:
        root = store.load_root(record.begin_version, fresh=True)
    except VersionNotFoundError:
        raise _begin_version_error(store, txn_id, record.begin_version, latest.version) from None
    return Transaction(
        store,
        root,
        record.isolation,
        txn_id=txn_id,
        max_attempts=max_attempts,
        actions=[a for state in states for a in state.actions],
        distributed=record,
        step=step,
        claim=claim,
    )


def _begin_version_error(store: CatalogStore, txn_id: str, begin: int, latest: int) -> OlympiaError:
    """Why the begin version of distributed transaction ``txn_id`` could not
    be loaded: expired only when it is below the floor read now; a version
    above the latest one, or a missing root at or above the floor, is damage
    (spec/transactions.md §6.3)."""
    if begin > latest:
        return CorruptCatalogError(
            f"the catalog object of distributed transaction {txn_id} is damaged: its begin "
            f"version {begin} is above the latest version {latest}"
        )
    floor = store.oldest_version()
    if begin < floor:
        return TransactionExpiredError(
            f"the begin version {begin} of transaction {txn_id} was expired (oldest kept: {floor})"
        )
    return CorruptCatalogError(
        f"the root of version {begin}, the begin version of distributed transaction "
        f"{txn_id}, is missing although that version is kept (oldest kept: {floor})"
    )


def _read_steps(store: CatalogStore, txn_id: str, last: int) -> list[apb.TransactionState]:
    """Steps ``0..last`` of ``txn_id``, read in parallel (spec/transactions.md §6.1)."""

    def read(step: int) -> apb.TransactionState:
        path = layout.dtxn_state_path(txn_id, step)
        try:
            data = store.storage.read(path)
        except StorageFileNotFoundError:
            raise CorruptCatalogError(
                f"state file {path} of distributed transaction {txn_id} is missing"
            ) from None
        return parse(apb.TransactionState, data, f"state file {path}")

    if last == 0:
        states = [read(0)]
    else:
        with ThreadPoolExecutor(min(16, last + 1), thread_name_prefix="olympia-steps") as pool:
            states = list(pool.map(read, range(last + 1)))
    if states[0].transaction.id != txn_id:
        raise CorruptCatalogError(
            f"state step 0 of distributed transaction {txn_id} does not hold its record"
        )
    return states


def _latest_step(store: CatalogStore, txn_id: str) -> int:
    def exists(step: int) -> bool:
        return store.storage.exists(layout.dtxn_state_path(txn_id, step))

    if not exists(0):
        raise TransactionNotFoundError(f"distributed transaction {txn_id} has no state files")
    low, stride = 0, 1
    while exists(low + stride):
        low += stride
        stride *= 2
    high = low + stride
    while high - low > 1:
        mid = (low + high) // 2
        if exists(mid):
            low = mid
        else:
            high = mid
    return low


__all__ = ["Transaction", "resume"]
