"""Transactions that outlive one request (spec/rest.md §8, §9).

A transaction begun over HTTP is an ``IcebergTransaction`` of the served
catalog. A local one lives in this server's memory until it is committed or
rolled back. A distributed one lives in the catalog (olympia's distributed
transactions, spec/transactions.md §6): every request resumes it afresh, so
that any server process on the same warehouse continues it and sees the
writes the others made.
"""

from __future__ import annotations

import collections
import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from pyiceberg.catalog import Catalog

from olympia import errors as oe
from olympia import validate
from olympia.codec import CommitInfo
from olympia.iceberg import IcebergTransaction, OlympiaCatalog
from olympia.iceberg.clientfiles import note_client_files
from olympia.rest.errors import RestError, classify
from olympia.transaction import Transaction, check_isolation

#: Properties of the namespace ``sys.dtxns.<id>`` that carry the commit
#: metadata of transaction ``<id>`` (spec/rest.md §9).
COMMIT_MESSAGE = "commit.message"
COMMIT_AUTHOR = "commit.author"
COMMIT_PROPERTY = "commit.property."


def commit_info_of(properties: Mapping[str, str]) -> CommitInfo:
    """The commit metadata given as namespace properties ``commit.message``,
    ``commit.author`` and ``commit.property.<key>`` (the others are left
    alone).

    Raises:
        RestError: 400, another ``commit.*`` key or a value out of bounds.
    """
    message = properties.get(COMMIT_MESSAGE)
    author = properties.get(COMMIT_AUTHOR)
    props: dict[str, str] = {}
    for key, value in properties.items():
        if key.startswith(COMMIT_PROPERTY):
            props[key[len(COMMIT_PROPERTY) :]] = value
        elif key.startswith("commit.") and key not in (COMMIT_MESSAGE, COMMIT_AUTHOR):
            raise RestError(
                400,
                "BadRequestException",
                f"unknown transaction property {key!r}: commit metadata is "
                f"{COMMIT_MESSAGE!r}, {COMMIT_AUTHOR!r} and '{COMMIT_PROPERTY}<key>'",
            )
    return checked_commit_info(message, author, props or None)


def checked_commit_info(message: object, author: object, properties: object) -> CommitInfo:
    """``CommitInfo.checked`` with its errors as 400 answers.

    Raises:
        RestError: 400, naming the value that is wrong.
    """
    try:
        return CommitInfo.checked(message, author, properties)
    except oe.InvalidArgumentError as exc:
        raise RestError(400, "BadRequestException", f"bad commit metadata: {exc}") from None


def commit_info_properties(info: CommitInfo | None) -> dict[str, str]:
    """``info`` as the namespace properties of :func:`commit_info_of`."""
    if info is None:
        return {}
    out = {f"{COMMIT_PROPERTY}{k}": v for k, v in info.properties.items()}
    if info.message is not None:
        out[COMMIT_MESSAGE] = info.message
    if info.author is not None:
        out[COMMIT_AUTHOR] = info.author
    return out


def merged_commit_info(old: CommitInfo | None, new: CommitInfo) -> CommitInfo:
    """``old`` with what ``new`` gives: its message and author replace the
    old ones, its properties are added to (and replace) the old ones.

    Raises:
        RestError: 400, the result is out of bounds (too many properties).
    """
    if old is None:
        return new
    return checked_commit_info(
        new.message if new.message is not None else old.message,
        new.author if new.author is not None else old.author,
        {**old.properties, **new.properties},
    )


def no_such(txn_id: str, detail: str = "is not open") -> RestError:
    return RestError(404, "NoSuchTransactionException", f"transaction {txn_id!r} {detail}")


#: How many ids of transactions rolled back for being idle are remembered.
_IDLED_KEPT = 1000

#: How long a transaction begun with ``POST /txn`` may stay idle before the
#: server rolls it back, and how many may be open at once (spec/rest.md §8).
DEFAULT_IDLE_SECONDS = 900.0
DEFAULT_MAX_OPEN = 1000


class OpenTransactions:
    """The transactions begun over HTTP and not finished yet.

    State is bounded: a request naming an unknown id leaves nothing behind;
    local transactions idle for ``idle_seconds`` are rolled back (checked
    whenever a transaction is begun or used); at most ``max_open`` local
    transactions are open at once (503 beyond)."""

    def __init__(
        self,
        catalog: Catalog,
        *,
        idle_seconds: float = DEFAULT_IDLE_SECONDS,
        max_open: int = DEFAULT_MAX_OPEN,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if (
            isinstance(idle_seconds, bool)
            or not isinstance(idle_seconds, int | float)
            or not math.isfinite(idle_seconds)
            or idle_seconds <= 0
        ):
            raise ValueError(
                f"transaction_idle_seconds must be a finite number above 0, got {idle_seconds!r}"
            )
        if isinstance(max_open, bool) or not isinstance(max_open, int) or max_open < 1:
            raise ValueError(f"max_open_transactions must be a whole number >= 1, got {max_open!r}")
        self.catalog = catalog
        self.idle_seconds = idle_seconds
        self.max_open = max_open
        self._clock = clock
        self._lock = threading.Lock()
        self._local: dict[str, IcebergTransaction] = {}
        #: When each local transaction was last used.
        self._used: dict[str, float] = {}
        #: Per id: the lock that lets one request at a time work on it, and
        #: how many requests hold or wait for it (the entry goes at zero).
        self._locks: dict[str, list[Any]] = {}
        #: The ids most recently rolled back for being idle, so that a later
        #: request for one says why it is gone (bounded).
        self._idled: collections.OrderedDict[str, None] = collections.OrderedDict()

    def _olympia(self) -> OlympiaCatalog:
        if not isinstance(self.catalog, OlympiaCatalog):
            raise RestError(
                406,
                "UnsupportedOperationException",
                f"the catalog {type(self.catalog).__name__} has no transactions",
            )
        return self.catalog

    @contextmanager
    def _exclusive(self, txn_id: str) -> Iterator[None]:
        with self._lock:
            entry = self._locks.setdefault(txn_id, [threading.Lock(), 0])
            entry[1] += 1
        try:
            with entry[0]:
                yield
        finally:
            with self._lock:
                entry[1] -= 1
                if entry[1] == 0:
                    del self._locks[txn_id]

    def _expire_idle(self) -> None:
        """Roll back the local transactions idle for longer than ``idle_seconds``."""
        now = self._clock()
        with self._lock:
            idle = [t for t, used in self._used.items() if now - used > self.idle_seconds]
        for txn_id in idle:
            with self._exclusive(txn_id):
                with self._lock:
                    txn = self._local.get(txn_id)
                    used = self._used.get(txn_id, now)
                if txn is None or now - used <= self.idle_seconds:
                    continue  # finished, or used meanwhile
                self._abandon(txn)
                self._forget(txn_id)
                with self._lock:
                    self._idled[txn_id] = None
                    while len(self._idled) > _IDLED_KEPT:
                        self._idled.popitem(last=False)

    @staticmethod
    def _abandon(txn: IcebergTransaction) -> None:
        """Roll back ``txn`` for its client, as the client's own rollback
        does: the files the clients wrote go with the metadata files the
        server wrote (spec/rest.md §8). A failed rollback still ends it."""
        with contextlib.suppress(Exception):
            note_client_files(txn)
        with contextlib.suppress(Exception):
            txn.rollback()

    def close(self) -> int:
        """Roll back every open local transaction (the server is stopping:
        they live in its memory only, and nobody could finish them after);
        return how many. Distributed ones stay, for another process."""
        with self._lock:
            ids = list(self._local)
        done = 0
        for txn_id in ids:
            with self._exclusive(txn_id):
                with self._lock:
                    txn = self._local.get(txn_id)
                if txn is None:
                    continue
                self._abandon(txn)
                self._forget(txn_id)
                done += 1
        return done

    def _gone(self, txn_id: str) -> RestError:
        """404 for a transaction that is not open, saying so when the server
        rolled it back for being idle."""
        with self._lock:
            idled = txn_id in self._idled
        if idled:
            return no_such(
                txn_id,
                f"was rolled back: no request used it for {self.idle_seconds:g} s (olympia serve "
                f"--transaction-idle-seconds); a statement that runs longer needs a keep-alive "
                f"(GET /txn/{{id}}, as olympia.spark.transaction sends) or a longer limit",
            )
        return no_such(txn_id)

    def begin(
        self,
        isolation: str | None,
        *,
        distributed: bool = False,
        name: str | None = None,
        info: CommitInfo | None = None,
    ) -> IcebergTransaction:
        """A new transaction; ``name`` (distributed only) is its id, else one is
        drawn; ``info`` its commit metadata.

        Raises:
            RestError: 400 a bad name, 409 the name is taken.
        """
        catalog = self._olympia()
        self._expire_idle()
        if not distributed and name is None:
            with self._lock:
                full = len(self._local) >= self.max_open
            if full:
                raise RestError(
                    503,
                    "ServiceUnavailableException",
                    f"{self.max_open} transactions are open on this server (the limit); "
                    f"commit or roll back one, or wait until idle ones are rolled back "
                    f"({self.idle_seconds:g} s)",
                )
        info = info if info is not None else CommitInfo()
        if name is None:
            txn = catalog.begin(
                isolation, message=info.message, author=info.author, properties=info.properties
            )
        else:
            name = validate.require_transaction_id("transaction name", name)
            known = {t.id for t in catalog.olympia.list_transactions(include_expired=True)}
            if name in known:
                raise RestError(409, "AlreadyExistsException", f"transaction {name!r} exists")
            store = catalog.olympia.store
            root = store.load_latest()
            level = check_isolation(isolation or catalog.isolation, root.definition)
            core = Transaction(
                store,
                root,
                level,
                txn_id=name,
                max_attempts=catalog.max_attempts,
                commit_info=info,
            )
            txn = IcebergTransaction(catalog, core)
        if distributed or name is not None:
            try:
                txn.distribute()
            except oe.OlympiaError as exc:
                txn.rollback()
                if name is not None and "already" in str(exc):
                    raise RestError(
                        409, "AlreadyExistsException", f"transaction {name!r} was used before"
                    ) from exc
                raise
        else:
            with self._lock:
                self._local[txn.id] = txn
                self._used[txn.id] = self._clock()
        return txn

    @contextmanager
    def using(self, txn_id: str) -> Iterator[IcebergTransaction]:
        """Transaction ``txn_id``, open, for one request (one request at a time)."""
        self._expire_idle()
        with self._exclusive(txn_id):
            with self._lock:
                txn = self._local.get(txn_id)
                if txn is not None:
                    self._used[txn_id] = self._clock()
            if txn is None:
                txn = self._resume(txn_id)
            if txn.status != "open":
                self._forget(txn_id)
                raise no_such(txn_id, f"is {txn.status}")
            try:
                yield txn
            finally:
                with self._lock:
                    if txn_id in self._used:
                        self._used[txn_id] = self._clock()

    def _resume(self, txn_id: str) -> IcebergTransaction:
        catalog = self._olympia()
        try:
            return catalog.resume(txn_id)
        except (oe.TransactionNotFoundError, oe.TransactionExpiredError, oe.InvalidArgumentError):
            raise self._gone(txn_id) from None
        except oe.OlympiaError as exc:  # e.g. storage failed: not the client's fault
            raise classify(exc) from exc

    def _forget(self, txn_id: str) -> None:
        with self._lock:
            self._local.pop(txn_id, None)
            self._used.pop(txn_id, None)

    def held_state(self) -> tuple[int, int]:
        """(open local transactions, per-id locks held): for tests of bounded state."""
        with self._lock:
            return len(self._local), len(self._locks)

    def commit(self, txn_id: str, info: CommitInfo | None = None) -> int:
        """Commit transaction ``txn_id``; ``info`` (if given and not empty) is
        merged into its commit metadata first (:func:`merged_commit_info`)."""
        with self.using(txn_id) as txn:
            if info is not None and not info.empty:
                new = merged_commit_info(txn.commit_info, info)
                txn.set_commit_info(new.message, new.author, new.properties)
            # The data and manifest files the clients wrote are found from the
            # staged metadata, so that a refused commit deletes them too.
            note_client_files(txn)
            try:
                version: int = txn.commit()
            finally:
                if txn.status != "open":
                    self._forget(txn_id)
            return version

    def rollback(self, txn_id: str) -> None:
        with self.using(txn_id) as txn:
            try:
                note_client_files(txn)
                txn.rollback()
            finally:
                self._forget(txn_id)

    def describe(self, txn_id: str) -> dict[str, str]:
        with self.using(txn_id) as txn:
            return {
                "isolation-level": txn.isolation,
                "begin-version": str(txn.begin_version),
                "distributed": str(txn.olympia_transaction.distributed).lower(),
                **commit_info_properties(txn.commit_info),
            }

    def staged_metadata(self) -> list[str]:
        """The table metadata locations the open local transactions staged
        (their state lives in this server's memory only)."""
        with self._lock:
            open_now = list(self._local.values())
        return [m for txn in open_now for m in txn.staged_locations().values() if m]

    def local_ids(self) -> list[str]:
        with self._lock:
            return sorted(self._local)

    def distributed_ids(self) -> list[str]:
        return sorted(t.id for t in self._olympia().olympia.list_transactions())

    def exists(self, txn_id: str) -> bool:
        with self._lock:
            if txn_id in self._local:
                return True
        return txn_id in self.distributed_ids()
