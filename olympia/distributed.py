"""Distributed transactions: a transaction's pending state stored in the
catalog as steps, so that any process can continue, commit or roll it back
(spec/transactions.md §6).

:class:`Steps` is what one handle knows of its stored state: the steps
written or read (§6.1), the writing of the next one (§6.3) and the claims of
commit and rollback (§6.4). :func:`load` reads a transaction back for
``resume`` (§6.3), including an unfinished claim (§6.5). The catalog object
of a transaction is written by ordinary one-write transactions
(olympia.transaction); the commit checks it is still there (olympia.commit).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple, cast

from olympia import layout, tree
from olympia.actions import ActionLog
from olympia.codec import CommitInfo
from olympia.conflicts import footprint_of
from olympia.definition import key_codec
from olympia.errors import (
    CommitConflictError,
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
from olympia.objects import parse
from olympia.proto import actions_pb2 as apb
from olympia.proto import objects_pb2 as pb
from olympia.store import CatalogStore, Root

#: How old an unfinished claim of a distributed transaction must be before
#: ``resume`` lets another process finish it (spec/transactions.md §6.5).
DEFAULT_RECOVER_AFTER_SECONDS = 60.0
OPEN = apb.TRANSACTION_OUTCOME_OPEN
COMMITTING = apb.TRANSACTION_OUTCOME_COMMITTING
ROLLED_BACK = apb.TRANSACTION_OUTCOME_ROLLED_BACK


def now_millis() -> int:
    return int(time.time() * 1000)


def new_record(txn_id: str, isolation: str, begin: Root) -> pb.DistributedTransaction:
    """The record of a transaction being distributed (spec/transactions.md §6.1)."""
    now = now_millis()
    return pb.DistributedTransaction(
        id=txn_id,
        isolation=isolation,
        begin_version=begin.version,
        created_at_millis=now,
        expires_at_millis=now + int(begin.definition.distributed_txn_ttl_millis),
        state_location=layout.dtxn_state_path(txn_id, 0),
    )


class Steps:
    """The stored state of one handle of a distributed transaction: the
    steps written or read (spec/transactions.md §6.1), the next one to write
    (§6.3), its claim (§6.4), and ``distribute()``'s unfinished work (§6.2).

    ``close`` is called when the handle must close: another process took the
    next step, or whether a step was written is unknown (§6.3).
    """

    def __init__(
        self,
        store: CatalogStore,
        keys: KeyCodec,
        txn_id: str,
        begin_version: int,
        close: Callable[[], None],
        *,
        record: pb.DistributedTransaction | None = None,
        step: int = -1,
        persisted: int = 0,
        claim: apb.TransactionState | None = None,
    ) -> None:
        self._store = store
        self._keys = keys
        self._id = txn_id
        self._begin = begin_version
        self._close = close
        #: The record, once distributed (its catalog object is published).
        self.record = record
        #: The last state step written or read; actions before ``persisted``
        #: are stored in steps ``0..step`` (spec/transactions.md §6.1).
        self.step = step
        self.persisted = persisted
        #: The unfinished claim a recovering handle may finish (§6.5).
        self.claim = claim
        #: The claim id of this handle's own claim step, once written.
        self.claim_id = ""
        #: distribute(): the record being distributed, and the bytes of a step
        #: whose outcome is unknown (written again, unchanged, by a retry).
        self.pending_record: pb.DistributedTransaction | None = None
        self.unsettled: tuple[bytes, int] | None = None
        #: The commit metadata the steps written or read hold (§6.1).
        self.stored_info: CommitInfo | None = None

    def write_first(
        self,
        actions: ActionLog,
        record: pb.DistributedTransaction,
        info: CommitInfo | None = None,
    ) -> None:
        """distribute(), step 1 (§6.2): step 0 with the record, every action
        so far and the commit metadata ``info``, or, after a failed attempt,
        the steps still missing."""
        if self.unsettled is not None:  # a step whose outcome is unknown: the same bytes again
            data, count = self.unsettled
            self._put(self.step + 1, data, count)
        info = None if info is None or info.empty else info
        if self.step < 0 or self.persisted < len(actions) or info != self.stored_info:
            step = self.step + 1
            stored = info if info is not None else (CommitInfo() if self.stored_info else None)
            data = self._bytes(
                actions, OPEN, uuid.uuid4().hex, record if step == 0 else None, stored
            )
            self._put(step, data, len(actions))
            self.stored_info = info

    def _bytes(
        self,
        actions: ActionLog,
        outcome: int,
        nonce: str,
        record: pb.DistributedTransaction | None,
        info: CommitInfo | None = None,
    ) -> bytes:
        """A state step holding the actions not stored yet and, when given,
        the commit metadata (spec/transactions.md §6.1)."""
        state = apb.TransactionState(
            actions=actions.since(self.persisted),
            outcome=cast(Any, outcome),
            nonce=nonce,
            written_at_millis=now_millis(),
        )
        if record is not None:
            state.transaction.CopyFrom(record)
        if info is not None:
            state.commit_info.CopyFrom(info.to_proto())
            state.commit_info.SetInParent()  # present even when empty: it clears
        return state.SerializeToString(deterministic=True)

    def persist(
        self, actions: ActionLog, outcome: int = OPEN, info: CommitInfo | None = None
    ) -> None:
        """Store the actions not stored yet as the next step (with ``outcome``;
        a claim when it is not OPEN, §6.4), and with ``info`` the commit
        metadata set now (an empty one clears it). Nothing to do before
        distribute().

        Raises:
            CommitConflictError: the step was taken by another process (rule
                ``transaction-advanced`` or ``transaction-claimed``); the
                handle is closed.
            StorageError: the step was not written (the handle stays open),
                or whether it was is unknown (the handle is closed).
        """
        if self.record is None:
            return
        nonce = uuid.uuid4().hex
        self._put(self.step + 1, self._bytes(actions, outcome, nonce, None, info), len(actions))
        if info is not None:
            self.stored_info = None if info.empty else info
        if outcome != OPEN:
            self.claim_id = nonce

    def _put(self, step: int, data: bytes, count: int) -> None:
        """Write state step ``step`` holding the actions before ``count`` (§6.3)."""
        path = layout.dtxn_state_path(self._id, step)
        try:
            put_confirmed(self._store, path, data)
        except StorageFileExistsError:
            if self.record is None:  # distribute(): nobody else knows this id
                raise StorageError(
                    f"cannot distribute transaction {self._id}: {path} already holds a state "
                    f"written by another process"
                ) from None
            self._close()
            raise self._taken(step) from None
        except OutcomeUnknownError as exc:
            if self.record is None:  # distribute() writes these same bytes again
                self.unsettled = (data, count)
                raise StorageError(
                    f"distributing transaction {self._id} failed: {exc}; call distribute() again"
                ) from exc
            self._close()
            raise StorageError(
                f"whether step {step} of distributed transaction {self._id} was written is "
                f"unknown ({exc}); resume the transaction to see"
            ) from exc
        self.unsettled = None
        self.step = step
        self.persisted = count

    def _taken(self, step: int) -> CommitConflictError:
        """The error for finding ``step`` written by another process."""
        path = layout.dtxn_state_path(self._id, step)
        try:
            other = parse(apb.TransactionState, self._store.storage.read(path), f"state {path}")
        except OlympiaError:
            other = apb.TransactionState()
        if other.outcome != OPEN:
            return claimed_error(self._store, self._keys, self._id, self._begin, other)
        return CommitConflictError(
            f"distributed transaction {self._id} was advanced to step {step} by another "
            f"process; resume it again to continue from the latest step",
            rule="transaction-advanced",
        )


class Resumed(NamedTuple):
    """What ``resume`` rebuilds a handle from (spec/transactions.md §6.1, §6.3)."""

    root: Root  # of the begin version
    record: pb.DistributedTransaction
    step: int  # the latest step
    actions: list[apb.Action]
    claim: apb.TransactionState | None  # an unfinished claim (§6.5)
    #: The commit metadata of the last step that holds one (None: none).
    commit_info: CommitInfo | None = None
    #: Past its TTL (resumed with ``expired=True``): it can only be rolled back.
    past_ttl: bool = False


def load(
    store: CatalogStore, txn_id: str, recover_after_seconds: float, expired: bool = False
) -> Resumed:
    """Read distributed transaction ``txn_id`` back from its object and steps;
    with ``expired``, also one past its TTL (spec/transactions.md §6.6).

    Raises:
        as :func:`olympia.transaction.resume`.
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
    value = object_value(store, latest, keys.transaction(txn_id))
    if value is None:
        raise TransactionNotFoundError(f"no open distributed transaction {txn_id!r}")
    record = parse(pb.DistributedTransaction, value, f"transaction {txn_id}")
    past_ttl = now_millis() > record.expires_at_millis
    if past_ttl and not expired:
        raise TransactionExpiredError(f"distributed transaction {txn_id} expired")
    step = latest_step(store, txn_id)
    states = read_steps(store, txn_id, step)
    last = states[-1]
    claim = None
    if last.outcome != OPEN:
        age = (now_millis() - last.written_at_millis) / 1000
        if age < recover_after_seconds:
            doing = "rolled back" if last.outcome == ROLLED_BACK else "committed"
            raise TransactionClosedError(
                f"distributed transaction {txn_id} is being {doing} by another process "
                f"(claimed {max(age, 0.0):.1f} s ago, not published yet); if that process "
                f"died, resume it once the claim is {recover_after_seconds:g} s old to finish "
                f"the {outcome_word(last.outcome)}"
            )
        claim = last
    try:
        root = store.load_root(record.begin_version, fresh=True)
    except VersionNotFoundError:
        raise begin_version_error(store, txn_id, record.begin_version, latest.version) from None
    info = None
    for state in states:
        if state.HasField("commit_info"):
            info = CommitInfo.from_proto(state.commit_info)
    if info is not None and info.empty:
        info = None
    actions = [a for state in states for a in state.actions]
    return Resumed(root, record, step, actions, claim, info, past_ttl)


class OutcomeUnknownError(StorageError):
    """A put-if-absent failed and reading the file back failed too."""


def put_confirmed(store: CatalogStore, path: str, data: bytes) -> None:
    """Put-if-absent that settles an unknown outcome by reading the file back.

    Raises:
        StorageFileExistsError: another writer's bytes are there.
        OutcomeUnknownError: the put failed and the file could not be read
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
        raise OutcomeUnknownError(
            f"writing {path} failed ({exc}) and it could not be read back"
        ) from exc


def outcome_word(outcome: int) -> str:
    return "rollback" if outcome == ROLLED_BACK else "commit"


def object_value(store: CatalogStore, root: Root, key: str) -> bytes | None:
    value = tree.get(root.node, key, store.load_node)
    return None if value is None else store.read_value(value)


def claimed_error(
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
        present = object_value(store, root, key) is not None
    except OlympiaError:
        present, latest = True, None
    if present or latest is None:
        doing = "rolled back" if claim is not None and claim.outcome == ROLLED_BACK else "committed"
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


def begin_version_error(store: CatalogStore, txn_id: str, begin: int, latest: int) -> OlympiaError:
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


def read_steps(store: CatalogStore, txn_id: str, last: int) -> list[apb.TransactionState]:
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


def latest_step(store: CatalogStore, txn_id: str) -> int:
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
