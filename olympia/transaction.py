"""Transactions: BEGIN / COMMIT / ROLLBACK across many objects (spec/transactions.md).

:class:`Transaction` is the user API: its reads and writes record actions
(§1) and keep the pending changes apart from the base (§2). Its
:meth:`~Transaction.commit` hands them to one :class:`olympia.commit.Commit`
(§3, §4); a distributed transaction's stored steps and claims are
:class:`olympia.distributed.Steps` (§6).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, cast

from olympia import validate
from olympia.actions import ActionLog as ActionLog
from olympia.actions import _read_bytes as _read_bytes
from olympia.codec import CommitInfo
from olympia.commit import DEFAULT_MAX_ATTEMPTS as DEFAULT_MAX_ATTEMPTS
from olympia.commit import GROUP_COMMIT as GROUP_COMMIT
from olympia.commit import Commit, nothing_to_publish
from olympia.commit import ContentMerge as ContentMerge
from olympia.conflicts import (
    CONTENT_WRITES,
    MEMBER_READS,
    MEMBER_WRITES,
    ConflictChecker,
    is_write,
)
from olympia.conflicts import footprint_of as footprint_of
from olympia.definition import ISOLATION_LEVELS
from olympia.definition import key_codec as key_codec
from olympia.distributed import (
    COMMITTING,
    ROLLED_BACK,
    Steps,
    load,
    new_record,
    object_value,
    outcome_word,
)
from olympia.distributed import DEFAULT_RECOVER_AFTER_SECONDS as DEFAULT_RECOVER_AFTER_SECONDS
from olympia.errors import (
    CommitConflictError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    OlympiaError,
    TransactionClosedError,
    TransactionExpiredError,
)
from olympia.keys import KeyCodec
from olympia.ops import Check, PreconditionFailed, apply_write
from olympia.proto import actions_pb2 as apb
from olympia.proto import objects_pb2 as pb
from olympia.reader import CatalogReader
from olympia.state import OverlayState
from olympia.store import CatalogStore, Root

# ``_read_bytes``, ``GROUP_COMMIT``, ``footprint_of``, ``key_codec``,
# ``ContentMerge``, ``DEFAULT_RECOVER_AFTER_SECONDS`` and ``ActionLog`` moved to
# lower modules (actions, commit, conflicts, definition, distributed) and are
# imported here so that they stay importable from olympia.transaction.
A = apb.ActionType


def check_isolation(isolation: str | None, definition: pb.CatalogDefinition) -> str:
    level = (isolation or definition.default_isolation or "snapshot").lower()
    if level not in ISOLATION_LEVELS:
        raise OlympiaError(f"isolation must be one of {ISOLATION_LEVELS}, got {isolation!r}")
    return level


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
        commit_info: CommitInfo | None = None,
        past_ttl: bool = False,
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
        #: Set while :meth:`_publish` runs: nothing may be recorded then.
        self._committing = False
        #: A distributed transaction resumed past its TTL: it can only be
        #: rolled back (spec/transactions.md §6.6).
        self._past_ttl = past_ttl
        #: The stored steps of a distributed transaction (spec/transactions.md §6).
        self._steps = Steps(
            store,
            self._keys,
            self.id,
            root.version,
            self._fail,
            record=distributed,
            step=step,
            persisted=len(actions) if distributed is not None else 0,
            claim=claim,
        )
        #: The commit metadata published with this transaction (format.md §3.7).
        self._commit_info = None if commit_info is None or commit_info.empty else commit_info
        if distributed is not None:
            self._steps.stored_info = self._commit_info
        # Reads (type, key) and keys written among self._actions[:self._noted_upto].
        self._noted_reads: set[tuple[int, str]] = set()
        self._noted_writes: set[str] = set()
        self._noted_upto = 0
        self._merge: ContentMerge | None = None
        #: The conflict rules the commit checks (spec/transactions.md §4). A
        #: test may give one whose checks pass everything (a broken rebase).
        self.conflict_checker = ConflictChecker()
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

    @property
    def commit_info(self) -> CommitInfo | None:
        """The commit metadata (message, author, properties) that will be
        published with this transaction; None when none was given."""
        return self._commit_info

    def set_commit_info(
        self,
        message: str | None = None,
        author: str | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> None:
        """Replace this transaction's commit metadata: a ``message``, an
        ``author`` and string ``properties``, stored in the version that
        commits it and returned by ``Catalog.history()`` (all None: none).
        Bounds: spec/transactions.md §1.1. A distributed transaction stores
        it at once as a step of its state (§6.1), so that whichever process
        commits it publishes it.

        Raises:
            InvalidArgumentError, InvalidArgumentTypeError: a value is not a
                string (a mapping of strings for ``properties``) or too long.
            TransactionClosedError; for a distributed transaction, what
                storing a step raises (CommitConflictError, StorageError).
        """
        info = CommitInfo.checked(message, author, properties)
        self._check_open()
        new = None if info.empty else info
        if new == self._commit_info:
            return
        self._steps.persist(self._actions, info=info)
        self._commit_info = new

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

    def _check_open(self, finishing: bool = False, committing: bool = False) -> None:
        if self._status != "open":
            raise TransactionClosedError(
                f"transaction {self.id} is {self._status.replace('_', ' ')}"
            )
        if self._past_ttl and (committing or not finishing):
            raise TransactionExpiredError(
                f"distributed transaction {self.id} is past its time to live; this handle "
                f"can only roll it back"
            )
        claim = self._steps.claim
        if claim is not None and not finishing:
            raise TransactionClosedError(
                f"distributed transaction {self.id} was claimed for "
                f"{outcome_word(claim.outcome)}; this recovering handle can only "
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

    def _record_check(self, action_type: int, key: str, found: bool) -> None:
        """The namespace check of ``list_tables``/``list_views``: recorded like
        a write's precondition (spec/transactions.md §1), so once per
        transaction and namespace, and not when it writes that namespace."""
        self._check_open()
        reads = self._check_reads([Check(action_type, key, found)], ())
        if reads:
            self._append(reads)

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
        if self._committing:
            # Its actions were counted and checked when the commit started: one
            # recorded now (a content-merge hook reading through the
            # transaction) would be published unchecked, or not add up.
            raise TransactionClosedError(
                f"transaction {self.id} is committing: no operation may be recorded in it "
                f"until the commit ends (read the version given to the hook instead)"
            )
        log = self._actions
        mark = len(log)
        for read_type, read_key, found in reads:
            log.append_read(read_type, read_key, found)
        if write is not None:
            log.append_write(write, key)
        try:
            self._steps.persist(log)
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
            TransactionExpiredError: expiration took the begin version (the
                transaction is rolled back: it could not commit either).
        """
        self._check_open()
        steps = self._steps
        if steps.record is not None:
            return self.id
        if steps.pending_record is None:
            self._refuse_expired_begin()
            steps.pending_record = new_record(self.id, self.isolation, self._root)
        record = steps.pending_record
        steps.write_first(self._actions, record, self._commit_info)
        _create_object(self._store, self._keys, record)
        steps.record = record
        # An expiration that did not see the object yet may have raised the
        # floor past the begin version meanwhile: the id would never resume
        # (§6.2), so the transaction ends here instead.
        try:
            self._refuse_expired_begin()
        except TransactionExpiredError:
            with contextlib.suppress(OlympiaError):
                self.rollback()
            raise
        return self.id

    def _refuse_expired_begin(self) -> None:
        floor = self._store.oldest_version()
        if floor > self.begin_version:
            raise TransactionExpiredError(
                f"transaction {self.id} cannot be distributed: its begin version "
                f"{self.begin_version} was expired (oldest kept: {floor}); begin it again"
            )

    @property
    def distributed(self) -> bool:
        return self._steps.record is not None

    def _fail(self) -> None:
        """Close this handle: its distributed transaction was taken from it (§6.3)."""
        self._status = "failed"

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
        steps = self._steps
        if steps.record is None and steps.pending_record is not None:
            # A failed distribute() may have published the object: finish it, to drop it.
            with contextlib.suppress(OlympiaError):
                self.distribute()
        if steps.record is None:
            self._status = "rolled_back"
            return
        steps.persist(self._actions, ROLLED_BACK)
        self._status = "rolled_back"
        _drop_object_quietly(self._store, self._keys, self.id, steps.claim_id)

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
        self._check_open(finishing=True, committing=True)
        steps = self._steps
        if steps.claim is not None and steps.claim.outcome == ROLLED_BACK:
            raise TransactionClosedError(
                f"distributed transaction {self.id} was claimed for rollback; it can only be "
                f"rolled back"
            )
        if steps.record is None and steps.pending_record is not None:
            self.distribute()  # a failed distribute() may have published the object
        owns_object = False
        try:
            if steps.record is not None:
                # The claim: of all processes holding this step, one writes the next.
                steps.persist(self._actions, COMMITTING)
                owns_object = True
                self._actions.append(
                    apb.Action(
                        type=A.TRANSACTION_DROP,
                        object_key=self._keys.transaction(self.id),
                        claim=steps.claim_id,
                    )
                )
            version = self._publish()
        except CommitConflictError as exc:
            self._status = "failed"
            if owns_object and exc.rule != "transaction-claimed":
                _drop_object_quietly(self._store, self._keys, self.id, steps.claim_id)
            raise
        except BaseException:
            if owns_object or steps.record is None:
                self._status = "failed"
            if owns_object:
                _drop_object_quietly(self._store, self._keys, self.id, steps.claim_id)
            raise
        self._status = "committed"
        return version

    def _publish(self) -> int:
        """Publish this transaction's actions (spec/transactions.md §3); the
        version that holds them, or the begin version when there is nothing
        to publish (step 1)."""
        if nothing_to_publish(self._actions, self.isolation):
            return self.begin_version
        own = self._keys.transaction(self.id) if self._steps.record is not None else None
        self._committing = True
        try:
            return self._run_commit(own)
        finally:
            self._committing = False

    def _run_commit(self, own: str | None) -> int:
        """Run one commit (spec/transactions.md §3) of this transaction."""
        attempt = Commit(
            self._store,
            self._root,
            self.id,
            self.isolation,
            self._actions,
            self._state,
            self._keys,
            max_attempts=self.max_attempts,
            checker=self.conflict_checker,
            merge=self._merge,
            own=own,
            written_since=self._written_since,
            commit_info=self._commit_info,
        )
        version = attempt.run()
        self.published_by_holder = attempt.published_by_holder
        return version

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
        value = object_value(store, store.load_latest(), key)
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
    expired: bool = False,
) -> Transaction:
    """Continue distributed transaction ``txn_id`` (spec/transactions.md §6).

    A transaction whose latest step is an unfinished claim (its claimant died
    before publishing) gives a recovering handle once the claim is older than
    ``recover_after_seconds``: it can only commit() or rollback() (§6.5).
    With ``expired``, one past its TTL is resumed too, as a handle that can
    only roll it back (§6.6); anything else it is asked raises
    TransactionExpiredError.

    Raises:
        TransactionNotFoundError, TransactionExpiredError (past its TTL, or its
        begin version is below the floor), TransactionClosedError,
        CorruptCatalogError (its object or state is damaged, e.g. a begin
        version that cannot exist), InvalidArgumentError
        (``recover_after_seconds`` is not a number >= 0).
    """
    found = load(store, txn_id, recover_after_seconds, expired)
    return Transaction(
        store,
        found.root,
        found.record.isolation,
        txn_id=txn_id,
        max_attempts=max_attempts,
        actions=found.actions,
        distributed=found.record,
        step=found.step,
        claim=found.claim,
        commit_info=found.commit_info,
        past_ttl=found.past_ttl,
    )


__all__ = ["Transaction", "resume"]
