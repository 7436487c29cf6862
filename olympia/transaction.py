"""Transactions: BEGIN / COMMIT / ROLLBACK across many objects (spec/transactions.md)."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, cast

from olympia import layout, tree, validate
from olympia.conflicts import (
    Footprint,
    check_serializable,
    check_snapshot,
    footprint_from_root,
    is_write,
)
from olympia.definition import ISOLATION_LEVELS
from olympia.errors import (
    CommitConflictError,
    InvalidArgumentError,
    OlympiaError,
    StorageError,
    StorageFileExistsError,
    TransactionClosedError,
    TransactionExpiredError,
    TransactionNotFoundError,
    VersionNotFoundError,
)
from olympia.keys import KeyCodec
from olympia.objects import check_properties, parse
from olympia.ops import EXISTS_ACTION, PreconditionFailed, apply_write
from olympia.proto import actions_pb2 as apb
from olympia.proto import objects_pb2 as pb
from olympia.reader import CatalogReader
from olympia.state import OverlayState
from olympia.store import CatalogStore, Root

A = apb.ActionType
DEFAULT_MAX_ATTEMPTS = 100

#: Test hook for the history checker: when True, commits skip every conflict
#: check after a lost race (a deliberately broken rebase). Never set it elsewhere.
_UNSAFE_SKIP_CONFLICT_CHECKS = False


def key_codec(definition: pb.CatalogDefinition) -> KeyCodec:
    return KeyCodec(
        namespace_max=int(definition.namespace_name_max_size),
        table_max=int(definition.table_name_max_size),
        view_max=int(definition.view_name_max_size),
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
    fp = footprint_from_root(version, root.info.begin_version, root.info.actions)
    store.derived.put(cache_key, fp)
    return fp


def _now_millis() -> int:
    return int(time.time() * 1000)


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
    ) -> None:
        self._store = store
        self._root = root
        self._keys = key_codec(root.definition)
        self._state = OverlayState(store, root)
        self._actions: list[apb.Action] = []
        self._status = "open"
        self.id = txn_id or uuid.uuid4().hex
        self.isolation = isolation
        self.max_attempts = max_attempts
        self._dist = distributed
        self._step = step
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
        return [apb.Action.FromString(a.SerializeToString()) for a in self._actions]

    def _check_open(self) -> None:
        if self._status != "open":
            raise TransactionClosedError(
                f"transaction {self.id} is {self._status.replace('_', ' ')}"
            )

    def _get(self, key: str) -> bytes | None:
        self._check_open()
        return self._state.get(key)

    def _scan(self, prefix: str) -> Iterator[tuple[str, bytes]]:
        self._check_open()
        return self._state.scan(prefix)

    def _record(self, action_type: int, key: str, found: bool) -> None:
        self._check_open()
        self._actions.append(
            apb.Action(type=cast(Any, action_type), object_key=key, read_only=True, found=found)
        )
        self._persist_step()

    def _write(self, action: apb.Action) -> None:
        self._check_open()
        try:
            apply_write(self._state, self._keys, action)
        except PreconditionFailed as exc:
            kind = self._keys.decode(exc.key).object_type
            self._actions.append(
                apb.Action(
                    type=EXISTS_ACTION[kind], object_key=exc.key, read_only=True, found=exc.found
                )
            )
            self._persist_step()
            raise exc.error from None
        self._actions.append(action)
        self._persist_step()

    # --- namespace writes ------------------------------------------------------------

    def create_namespace(self, namespace: str, properties: Mapping[str, str] | None = None) -> None:
        """Create a namespace.

        Raises:
            NamespaceAlreadyExistsError, InvalidNameError, TransactionClosedError.
        """
        validate.require_namespace(self._keys, "namespace", namespace)
        validate.require_text_mapping("properties", properties)
        props = check_properties(properties)
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
        _check_alter(self._keys, namespace, set, unset)
        props = check_properties(set)
        removed = list(unset or [])
        if not all(isinstance(k, str) for k in removed):
            raise OlympiaError(f"unset must be a list of property names, got {unset!r}")
        both = sorted(props.keys() & removed)
        if both:
            raise OlympiaError(f"properties {both} are both set and unset")
        self._write(
            apb.Action(
                type=A.NAMESPACE_ALTER,
                object_key=self._keys.namespace(namespace),
                namespace=pb.Namespace(name=namespace, properties=props),
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
        _check_table(self._keys, namespace, name, properties)
        validate.require_text("metadata_location", metadata_location, non_empty=True)
        validate.require_text("format", format)
        _check_location(metadata_location)
        table = pb.Table(
            namespace=namespace,
            name=name,
            format=format,
            metadata_location=metadata_location,
            properties=check_properties(properties),
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
        _check_table(self._keys, namespace, name, properties)
        validate.require_optional_text("metadata_location", metadata_location, non_empty=True)
        fields = []
        table = pb.Table(namespace=namespace, name=name)
        if metadata_location is not None:
            _check_location(metadata_location)
            table.metadata_location = metadata_location
            fields.append("metadata_location")
        if properties is not None:
            table.properties.update(check_properties(properties))
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
        if (sql_text is None) == (substrait_plan is None):
            raise OlympiaError("a view needs exactly one of sql_text and substrait_plan")
        if sql_text is not None and not isinstance(sql_text, str):
            raise OlympiaError("sql_text must be a string")
        if substrait_plan is not None and not isinstance(substrait_plan, bytes):
            raise OlympiaError("substrait_plan must be bytes")
        return pb.View(
            namespace=namespace,
            name=name,
            sql_text=sql_text or "",
            substrait_plan=substrait_plan or b"",
            dialect=kw["dialect"],
            schema_json=kw["schema_json"],
            properties=check_properties(kw["properties"]),
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

        Raises:
            TransactionClosedError; StorageError.
        """
        self._check_open()
        if self._dist is not None:
            return self.id
        now = _now_millis()
        record = pb.DistributedTransaction(
            id=self.id,
            isolation=self.isolation,
            begin_version=self.begin_version,
            created_at_millis=now,
            expires_at_millis=now + int(self._root.definition.distributed_txn_ttl_millis),
            state_location=layout.dtxn_state_path(self.id, 0),
        )
        self._dist = record
        self._persist_step()
        _publish_object(self._store, self._keys, A.TRANSACTION_CREATE, self.id, record)
        return self.id

    @property
    def distributed(self) -> bool:
        return self._dist is not None

    def _persist_step(self, outcome: int = apb.TRANSACTION_OUTCOME_OPEN) -> None:
        if self._dist is None:
            return
        step = self._step + 1
        state = apb.TransactionState(transaction=self._dist, actions=self._actions, outcome=outcome)  # type: ignore[arg-type]
        path = layout.dtxn_state_path(self.id, step)
        data = state.SerializeToString(deterministic=True)
        try:
            _put_confirmed(self._store, path, data)
        except StorageFileExistsError:
            self._status = "failed"
            raise CommitConflictError(
                f"distributed transaction {self.id} was advanced to step {step} by another "
                f"process; resume it again to continue from the latest step",
                rule="transaction-advanced",
            ) from None
        self._step = step

    # --- commit and rollback --------------------------------------------------------------

    def rollback(self) -> None:
        """Discard everything this transaction did. Writes nothing (a
        distributed transaction records its end and drops its catalog object)."""
        self._check_open()
        self._status = "rolled_back"
        if self._dist is not None:
            self._persist_step(apb.TRANSACTION_OUTCOME_ROLLED_BACK)
            _drop_object_quietly(self._store, self._keys, self.id)

    def commit(self) -> int:
        """Commit; return the version that holds this transaction's changes.

        A SNAPSHOT transaction that wrote nothing returns its begin version.

        Raises:
            CommitConflictError: a concurrent commit conflicts (``.rule`` and
                ``.version`` say which); nothing was published.
            CommitFailedError: storage failed while publishing; the message says
                whether the outcome is unknown (reload the catalog to see).
            StorageError: storage failed before anything was published.
            TransactionClosedError: already committed, rolled back or failed.
        """
        self._check_open()
        owns_object = False
        try:
            if self._dist is not None:
                # Claim the last step: a process holding a stale step cannot commit too.
                self._persist_step(apb.TRANSACTION_OUTCOME_COMMITTING)
                owns_object = True
                self._actions.append(
                    apb.Action(type=A.TRANSACTION_DROP, object_key=self._keys.transaction(self.id))
                )
            version = self._publish()
        except BaseException:
            self._status = "failed"
            if owns_object:
                _drop_object_quietly(self._store, self._keys, self.id)
            raise
        self._status = "committed"
        return version

    def _publish(self) -> int:
        writes = [a for a in self._actions if is_write(a)]
        begin = self.begin_version
        if not self._actions or (not writes and self.isolation == "snapshot"):
            return begin
        pending = Footprint.of(begin + 1, begin, self._actions)
        if self._dist is not None:
            own = self._keys.transaction(self.id)
            pending.writes.pop(own, None)
        store = self._store
        target = self._root
        if self._dist is not None:  # its catalog object lives in a later version
            target = store.load_root(store.latest_version())
        state = self._state
        encoded = [(a.object_key, a.SerializeToString(deterministic=True)) for a in self._actions]
        for attempt in range(self.max_attempts):
            if store.storage.exists(layout.root_path(target.version + 1)):
                # Already lost: skip encoding and writing nodes for a taken version.
                target = store.load_root(store.latest_version())
            serialized_before: list[int] = []
            if target.version != begin:
                if not _UNSAFE_SKIP_CONFLICT_CHECKS:
                    serialized_before = self._check(pending, target.version)
                state = self._replay(writes, target)
            new_root = tree.apply(target.node, state.changes(), target.order, store.load_node)
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
                )
            except CommitConflictError as exc:
                if exc.rule != "version-taken":
                    raise
                time.sleep(random.uniform(0, min(0.25, 0.002 * 2**attempt)))
                target = store.load_root(store.latest_version())
                continue
            return done.version
        raise CommitConflictError(
            f"transaction {self.id} lost the race for a new version {self.max_attempts} times; "
            f"try again later",
            version=target.version,
            rule="retries-exhausted",
        )

    def _check(self, pending: Footprint, latest: int) -> list[int]:
        store, begin = self._store, self.begin_version

        def committed(v: int) -> Footprint:
            return footprint_of(store, v)

        try:
            window = [committed(v) for v in range(begin + 1, latest + 1)]
        except VersionNotFoundError:
            raise CommitConflictError(
                f"versions after {begin} were expired before transaction {self.id} committed",
                version=begin + 1,
                rule="history-expired",
            ) from None
        check_snapshot(pending, window, self.isolation, self._describe)
        if self.isolation != "serializable":
            return []
        pending.version = latest + 1
        return check_serializable(pending, latest, committed)

    def _describe(self, key: str) -> str:
        """A human name for an object key, for error messages."""
        try:
            decoded = self._keys.decode(key)
        except OlympiaError:
            return repr(key.rstrip())
        return f"{decoded.object_type.name.lower()} {'.'.join(decoded.parts)}"

    def _replay(self, writes: Sequence[apb.Action], target: Root) -> OverlayState:
        state = OverlayState(self._store, target)
        for action in writes:
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


def _put_confirmed(store: CatalogStore, path: str, data: bytes) -> None:
    """Put-if-absent that settles an unknown outcome by reading the file back.

    Raises:
        StorageFileExistsError: another writer's bytes are there.
        StorageError: the outcome could not be settled; the file is not ours.
    """
    try:
        store.storage.put_if_absent(path, data)
    except StorageFileExistsError:
        raise
    except StorageError as exc:
        try:
            landed = store.storage.read(path)
        except StorageError:
            raise exc from None
        if landed != data:
            raise StorageFileExistsError(f"{path} holds another writer's step") from None


def _check_alter(keys: KeyCodec, namespace: object, set: object, unset: object) -> None:
    """Argument checks of :meth:`Transaction.alter_namespace`."""
    validate.require_namespace(keys, "namespace", namespace)
    props = validate.require_text_mapping("set", set)
    removed = validate.require_text_collection("unset", unset)
    both = sorted(props.keys() & removed)
    if both:
        raise InvalidArgumentError(
            f"properties {both} are both set and unset (arguments 'set' and 'unset')"
        )


def _check_table(keys: KeyCodec, namespace: object, name: object, properties: object) -> None:
    """Argument checks shared by :meth:`Transaction.create_table` and ``update_table``."""
    validate.require_namespace(keys, "namespace", namespace)
    validate.require_table_name(keys, "name", name)
    validate.require_text_mapping("properties", properties)


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


def _check_location(location: object) -> None:
    if not isinstance(location, str) or not location:
        raise OlympiaError(f"metadata_location must be a non-empty string, got {location!r}")


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
) -> int:
    """Commit one catalog-maintenance write of a distributed transaction's object."""
    root = store.load_root(store.latest_version())
    txn = Transaction(store, root, "snapshot")
    if record is None:
        txn._write(apb.Action(type=cast(Any, action_type), object_key=keys.transaction(txn_id)))
    else:
        txn._write(
            apb.Action(
                type=cast(Any, action_type), object_key=keys.transaction(txn_id), transaction=record
            )
        )
    return txn.commit()


def drop_transaction_objects(store: CatalogStore, txn_ids: Sequence[str]) -> int:
    """Commit one version that drops the catalog objects of ``txn_ids``.

    Used by expiration for distributed transactions past their TTL.
    """
    root = store.load_root(store.latest_version())
    keys = key_codec(root.definition)
    txn = Transaction(store, root, "snapshot")
    for txn_id in txn_ids:
        txn._write(apb.Action(type=A.TRANSACTION_DROP, object_key=keys.transaction(txn_id)))
    return txn.commit()


def _drop_object_quietly(store: CatalogStore, keys: KeyCodec, txn_id: str) -> None:
    try:
        _publish_object(store, keys, A.TRANSACTION_DROP, txn_id, None)
    except OlympiaError:
        pass  # already gone, or storage trouble: expiration removes it after its TTL


def resume(
    store: CatalogStore, txn_id: str, max_attempts: int = DEFAULT_MAX_ATTEMPTS
) -> Transaction:
    """Continue distributed transaction ``txn_id`` (spec/transactions.md §6).

    Raises:
        TransactionNotFoundError, TransactionExpiredError, TransactionClosedError.
    """
    latest = store.load_root(store.latest_version())
    keys = key_codec(latest.definition)
    value = tree.get(latest.node, keys.transaction(txn_id), store.load_node)
    if value is None:
        raise TransactionNotFoundError(f"no open distributed transaction {txn_id!r}")
    record = parse(pb.DistributedTransaction, store.read_value(value), f"transaction {txn_id}")
    if _now_millis() > record.expires_at_millis:
        raise TransactionExpiredError(f"distributed transaction {txn_id} expired")
    step = _latest_step(store, txn_id)
    path = layout.dtxn_state_path(txn_id, step)
    state = parse(apb.TransactionState, store.storage.read(path), f"state file {path}")
    if state.outcome != apb.TRANSACTION_OUTCOME_OPEN:
        raise TransactionClosedError(
            f"distributed transaction {txn_id} is {apb.TransactionOutcome.Name(state.outcome).split('_')[-1].lower()}"
        )
    try:
        root = store.load_root(record.begin_version)
    except VersionNotFoundError:
        raise TransactionExpiredError(
            f"the begin version {record.begin_version} of transaction {txn_id} was expired"
        ) from None
    return Transaction(
        store,
        root,
        record.isolation,
        txn_id=txn_id,
        max_attempts=max_attempts,
        actions=state.actions,
        distributed=record,
        step=step,
    )


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
