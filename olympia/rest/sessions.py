"""Transactions that outlive one request (spec/rest.md §8, §9).

A transaction begun over HTTP is an ``IcebergTransaction`` of the served
catalog. A local one lives in this server's memory until it is committed or
rolled back. A distributed one lives in the catalog (olympia's distributed
transactions, spec/transactions.md §6): every request resumes it afresh, so
that any server process on the same warehouse continues it and sees the
writes the others made.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from pyiceberg.catalog import Catalog
from pyiceberg.manifest import ManifestEntryStatus

from olympia import errors as oe
from olympia import validate
from olympia.iceberg import IcebergTransaction, OlympiaCatalog, names
from olympia.rest.errors import RestError, classify
from olympia.transaction import Transaction, check_isolation


def _same_file_uri(path: str) -> str:
    """``file:/x`` (as Hadoop writes paths) and ``file:///x`` name one file."""
    if path.startswith("file:/") and not path.startswith("file://"):
        return "file://" + path[len("file:") :]
    return path


def client_files(owner: OlympiaCatalog, base_location: str | None, staged: str) -> list[str]:
    """The files a client wrote for the snapshots that the staged metadata
    adds to the base: their manifest lists, the manifests they added, and the
    data and delete files they added under the table's ``data/`` folder
    (files added from elsewhere, e.g. ``add_files``, belong to the user)."""
    new = owner.read_metadata(staged)
    base = owner.read_metadata(base_location) if base_location else None
    old_ids = {snap.snapshot_id for snap in base.snapshots} if base is not None else set()
    new_ids = {snap.snapshot_id for snap in new.snapshots} - old_ids
    io = owner._load_file_io(new.properties, staged)
    data_prefix = _same_file_uri(new.location.rstrip("/") + "/data/")
    out: list[str] = []
    for snapshot in new.snapshots:
        if snapshot.snapshot_id not in new_ids:
            continue
        out.append(snapshot.manifest_list)
        for manifest in snapshot.manifests(io):
            if manifest.added_snapshot_id not in new_ids:
                continue
            out.append(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=False):
                path = entry.data_file.file_path
                if (
                    entry.status == ManifestEntryStatus.ADDED
                    and entry.snapshot_id in new_ids
                    and _same_file_uri(path).startswith(data_prefix)
                ):
                    out.append(path)
    return out


def note_client_files(txn: IcebergTransaction) -> None:
    """Add to the transaction's written files those the REST clients wrote for
    its staged tables (:func:`client_files`), so that a rollback or a refused
    commit deletes them too: the server itself only writes metadata files."""
    core = txn.olympia_transaction
    for identifier, state in txn.tables.items():
        namespace, name = names.table_name(identifier)
        if not core.table_exists(namespace, name):
            continue
        staged = core.describe_table(namespace, name).metadata_location
        if staged and staged != state.base_location:
            txn.written_files.extend(client_files(txn.owner, state.base_location, staged))


def no_such(txn_id: str, detail: str = "is not open") -> RestError:
    return RestError(404, "NoSuchTransactionException", f"transaction {txn_id!r} {detail}")


class OpenTransactions:
    """The transactions begun over HTTP and not finished yet."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._lock = threading.Lock()
        self._local: dict[str, IcebergTransaction] = {}
        self._locks: dict[str, threading.Lock] = {}

    def _olympia(self) -> OlympiaCatalog:
        if not isinstance(self.catalog, OlympiaCatalog):
            raise RestError(
                406,
                "UnsupportedOperationException",
                f"the catalog {type(self.catalog).__name__} has no transactions",
            )
        return self.catalog

    def _lock_of(self, txn_id: str) -> threading.Lock:
        with self._lock:
            return self._locks.setdefault(txn_id, threading.Lock())

    def begin(
        self, isolation: str | None, *, distributed: bool = False, name: str | None = None
    ) -> IcebergTransaction:
        """A new transaction; ``name`` (distributed only) is its id, else one is drawn.

        Raises:
            RestError: 400 a bad name, 409 the name is taken.
        """
        catalog = self._olympia()
        if name is None:
            txn = catalog.begin(isolation)
        else:
            name = validate.require_transaction_id("transaction name", name)
            known = {t.id for t in catalog.olympia.list_transactions(include_expired=True)}
            if name in known:
                raise RestError(409, "AlreadyExistsException", f"transaction {name!r} exists")
            store = catalog.olympia.store
            root = store.load_latest()
            level = check_isolation(isolation or catalog.isolation, root.definition)
            core = Transaction(store, root, level, txn_id=name, max_attempts=catalog.max_attempts)
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
        return txn

    @contextmanager
    def using(self, txn_id: str) -> Iterator[IcebergTransaction]:
        """Transaction ``txn_id``, open, for one request (one request at a time)."""
        with self._lock_of(txn_id):
            with self._lock:
                txn = self._local.get(txn_id)
            if txn is None:
                txn = self._resume(txn_id)
            if txn.status != "open":
                self._forget(txn_id)
                raise no_such(txn_id, f"is {txn.status}")
            yield txn

    def _resume(self, txn_id: str) -> IcebergTransaction:
        catalog = self._olympia()
        try:
            return catalog.resume(txn_id)
        except (oe.TransactionNotFoundError, oe.TransactionExpiredError, oe.InvalidArgumentError):
            raise no_such(txn_id) from None
        except oe.OlympiaError as exc:  # e.g. storage failed: not the client's fault
            raise classify(exc) from exc

    def _forget(self, txn_id: str) -> None:
        with self._lock:
            self._local.pop(txn_id, None)

    def commit(self, txn_id: str) -> int:
        with self.using(txn_id) as txn:
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
            }

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
