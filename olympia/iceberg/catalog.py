"""``OlympiaCatalog``: a PyIceberg catalog stored in an olympia catalog
(spec/iceberg.md).

Load it as PyIceberg loads any catalog class::

    load_catalog("lake", **{"py-catalog-impl": "olympia.iceberg.OlympiaCatalog",
                            "warehouse": "file:///data/lake"})

Every operation is one olympia transaction (:class:`IcebergTransaction` with
one operation); :meth:`OlympiaCatalog.transaction` and
:meth:`OlympiaCatalog.begin` give transactions over many.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TypeVar

import pyarrow as pa
from pyiceberg.catalog import MetastoreCatalog, PropertiesUpdateSummary
from pyiceberg.io import FileIO
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import CommitTableResponse, CreateTableTransaction, StagedTable, Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, SortOrder
from pyiceberg.table.update import TableRequirement, TableUpdate
from pyiceberg.typedef import EMPTY_DICT, Identifier, Properties
from pyiceberg.view import View
from pyiceberg.view.metadata import ViewMetadata, ViewVersion

import olympia
from olympia import errors as oe
from olympia import layout
from olympia.iceberg import orphans, purge, views
from olympia.iceberg.errors import CommitConflictException
from olympia.iceberg.locations import LocationNotAllowedError, LocationPolicy, overlap
from olympia.iceberg.purge import ExpireResult
from olympia.iceberg.sidecar import FOLDER
from olympia.iceberg.transaction import (
    WRITE_PATH_PROPERTIES,
    IcebergTransaction,
    OlympiaTable,
    TransactionCatalog,
    create_if_not_exists,
)
from olympia.storage.options import pyiceberg_properties, s3fs_options, storage_properties
from olympia.store import DEFAULT_CACHE_BYTES
from olympia.transaction import DEFAULT_MAX_ATTEMPTS

T = TypeVar("T")

#: Conflicts a catalog change does not run again after: another process
#: holds the distributed transaction (never a one-operation one's).
_NOT_RETRIED = ("transaction-claimed", "transaction-advanced")

_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no")
_METADATA_CACHE_SIZE = 512
_LOCATION_CACHE_SIZE = 100_000


def storage_options(properties: Properties) -> dict[str, Any]:
    """The olympia (s3fs) storage options for PyIceberg catalog ``properties``
    (their ``s3.*`` keys, through olympia.storage.options, the one mapping
    every way of opening a catalog uses).

    Raises:
        olympia.InvalidArgumentError (a ValueError): an unknown or unsupported
            ``s3.*`` property, or a bad value.
    """
    return s3fs_options(storage_properties(properties))


def catalog_properties(options: Mapping[str, Any]) -> dict[str, str]:
    """The PyIceberg catalog properties for olympia storage ``options``
    (PyIceberg's keys or s3fs's): the inverse of :func:`storage_options`.

    Raises:
        olympia.InvalidArgumentError (a ValueError): an option that has no
            catalog property, or options that disagree.
    """
    return pyiceberg_properties(options)


#: The catalog's own folders under its warehouse: no table, view or file a
#: caller names may overlap them (spec/rest.md §10).
RESERVED_FOLDERS = (*layout.CATALOG_FOLDERS, FOLDER, purge.FOLDER)


def _location_policy(warehouse: str, properties: Properties) -> LocationPolicy:
    """The locations the catalog accepts (``allowed-locations``, comma-separated,
    with the warehouse; ``allow-overlapping-locations``): spec/rest.md §10."""
    allowed = [part.strip() for part in str(properties.get("allowed-locations", "")).split(",")]
    allowed = [part for part in allowed if part]
    overlap = _bool_property(properties, "allow-overlapping-locations", not allowed)
    try:
        return LocationPolicy(
            [warehouse, *allowed] if allowed else [],
            reserved=[f"{warehouse}/{folder}" for folder in RESERVED_FOLDERS],
            allow_overlap=overlap,
        )
    except LocationNotAllowedError as exc:
        raise ValueError(f"catalog property allowed-locations: {exc}") from None


def _bool_property(properties: Properties, name: str, default: bool) -> bool:
    value = properties.get(name)
    if value is None:
        return default
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"catalog property {name!r} must be true or false, got {value!r}")


class OlympiaCatalog(MetastoreCatalog):
    """A PyIceberg catalog whose state is an olympia catalog at ``warehouse``.

    Properties (spec/iceberg.md §1): ``warehouse`` (required), ``create-catalog``
    (default true), ``isolation``, ``max-attempts``, ``cache-bytes`` and PyIceberg's ``s3.*``
    properties, which reach both the catalog's storage and the tables' FileIO.

    Raises (construction):
        ValueError: ``warehouse`` missing or a property out of range.
        olympia.CatalogNotFoundError: empty warehouse and ``create-catalog=false``.
    """

    def __init__(self, name: str, **properties: str) -> None:
        super().__init__(name, **properties)
        warehouse = self.properties.get("warehouse")
        if not warehouse:
            raise ValueError(
                f"catalog {name!r} needs the property 'warehouse' (the URI of the olympia "
                f"catalog, e.g. file:///data/lake or s3://bucket/prefix)"
            )
        self.warehouse = str(warehouse).rstrip("/")
        if "://" not in self.warehouse and not os.path.isabs(self.warehouse):
            # A relative folder means one under the current folder, as for
            # olympia.load_catalog; table locations derived from it must not
            # depend on where the catalog is later opened from.
            self.warehouse = os.path.abspath(self.warehouse)
            self.properties["warehouse"] = self.warehouse
        create = _bool_property(self.properties, "create-catalog", True)
        isolation = self.properties.get("isolation")
        if isolation is not None and str(isolation).lower() not in ("snapshot", "serializable"):
            raise ValueError(
                f"catalog property 'isolation' must be snapshot or serializable, got {isolation!r}"
            )
        self.isolation: str | None = None if isolation is None else str(isolation).lower()
        attempts = self.properties.get("max-attempts", DEFAULT_MAX_ATTEMPTS)
        try:
            self.max_attempts = int(attempts)
        except ValueError:
            raise ValueError(
                f"catalog property 'max-attempts' must be an integer, got {attempts!r}"
            ) from None
        options = storage_options(self.properties) or None
        cache = self.properties.get("cache-bytes", DEFAULT_CACHE_BYTES)
        try:
            cache_bytes = int(cache)
        except ValueError:
            cache_bytes = -1
        if cache_bytes < 0:
            raise ValueError(
                f"catalog property 'cache-bytes' must be a whole number of bytes, 0 or more; "
                f"got {cache!r}"
            )
        try:
            self.olympia = olympia.load_catalog(self.warehouse, options, cache_bytes=cache_bytes)
        except oe.CatalogNotFoundError:
            if not create:
                raise oe.CatalogNotFoundError(
                    f"no olympia catalog at {self.warehouse}; create one with "
                    f"`olympia init -w {self.warehouse}` (or olympia.create_catalog), or set the "
                    f"catalog property create-catalog=true"
                ) from None
            try:
                self.olympia = olympia.create_catalog(
                    self.warehouse, options, cache_bytes=cache_bytes
                )
            except oe.CatalogAlreadyExistsError:  # another process created it first
                self.olympia = olympia.load_catalog(
                    self.warehouse, options, cache_bytes=cache_bytes
                )
        self.locations = _location_policy(self.warehouse, self.properties)
        #: A plain commit_table keeps its requirements against the newest
        #: metadata (the REST server's mode, spec/rest.md §3); otherwise an
        #: append whose branch moved meanwhile is rebased (spec/iceberg.md §7).
        self.strict_requirements = _bool_property(self.properties, "strict-requirements", False)
        self._metadata: OrderedDict[str, TableMetadata] = OrderedDict()
        self._places: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        self._lock = threading.Lock()

    # --- metadata files -------------------------------------------------------------

    def read_metadata(self, location: str, what: str | None = None) -> TableMetadata:
        """The table metadata in file ``location`` (files are immutable: cached).

        ``what`` names a file a caller chose (``register``): then a file that
        is not table metadata is a ``ValueError`` that names it without
        quoting any of its content, and the file is read from storage even
        when cached: a file is never changed, but it may have been deleted
        (a purge), and a table registered on a deleted file is broken.
        """
        if what is None:
            with self._lock:
                cached = self._metadata.get(location)
            if cached is not None:
                return cached
        with self._reading(location, what, "an Iceberg table metadata file"):
            metadata = FromInputFile.table_metadata(
                self._load_file_io(location=location).new_input(location)
            )
        self.remember_metadata(location, metadata)
        return metadata

    def remember_metadata(self, location: str, metadata: TableMetadata) -> None:
        with self._lock:
            self._metadata[location] = metadata
            while len(self._metadata) > _METADATA_CACHE_SIZE:
                self._metadata.popitem(last=False)

    def read_view_metadata(self, location: str, what: str | None = None) -> ViewMetadata:
        with (
            self._reading(location, what, "an Iceberg view metadata file"),
            self._load_file_io(location=location).new_input(location).open() as f,
        ):
            return ViewMetadata.model_validate_json(f.read())

    @contextmanager
    def _reading(self, location: str, what: str | None, kind: str) -> Iterator[None]:
        if what is None:
            yield
            return
        try:
            yield
        except FileNotFoundError:
            raise
        except PermissionError:
            raise ValueError(f"{what} {location!r} cannot be read") from None
        except OSError as exc:
            # pyarrow says "is a directory" in an OSError, not an IsADirectoryError.
            if isinstance(exc, IsADirectoryError) or "directory" in str(exc).lower():
                raise ValueError(f"{what} {location!r} is a folder, not {kind}") from None
            raise ValueError(f"{what} {location!r} is not {kind}") from None
        except Exception:
            # Parser messages quote the input: none of it may reach the caller.
            raise ValueError(f"{what} {location!r} is not {kind}") from None

    def table_places(self, metadata_location: str) -> tuple[str, ...]:
        """The normalised places where the files of the table whose metadata is
        in ``metadata_location`` go (cached): its location, then each
        ``write.*.path`` property it sets that the catalog accepts; empty
        when the metadata cannot be read."""
        with self._lock:
            known = self._places.get(metadata_location)
        if known is not None:
            return known
        try:
            metadata = self.read_metadata(metadata_location)
            where = [self.locations.check(metadata.location, "a table location")]
        except (OSError, ValueError, LocationNotAllowedError):
            return ()
        for key in WRITE_PATH_PROPERTIES:
            value = metadata.properties.get(key)
            if value is None:
                continue
            try:
                where.append(self.locations.check(value, f"property {key}"))
            except LocationNotAllowedError:
                continue  # refused when it was set; nothing of the table goes there
        places = tuple(dict.fromkeys(where))
        with self._lock:
            self._places[metadata_location] = places
            while len(self._places) > _LOCATION_CACHE_SIZE:
                self._places.popitem(last=False)
        return places

    def table_location(self, metadata_location: str) -> str | None:
        """The normalised location of the table whose metadata is in
        ``metadata_location`` (cached), or None when it cannot be read."""
        places = self.table_places(metadata_location)
        return places[0] if places else None

    def _tables_by_place(self, exclude: tuple[str, str] | None) -> Iterator[tuple[str, str, str]]:
        """(namespace, name, normalised place) for every place (location,
        ``write.*.path``) of every table of the latest version but
        ``exclude``, whose metadata can be read."""
        view = self.olympia.latest()
        for namespace in view.list_namespaces():
            for name in view.list_tables(namespace):
                if (namespace, name) == exclude:
                    continue
                metadata_location = view.describe_table(namespace, name).metadata_location
                if metadata_location:
                    for where in self.table_places(metadata_location):
                        yield namespace, name, where

    def table_places_but(self, exclude: tuple[str, str] | None = None) -> list[str]:
        """The places (locations and ``write.*.path``) of every table of the
        latest version but ``exclude`` (namespace, name)."""
        return [where for _, _, where in self._tables_by_place(exclude)]

    def check_no_overlap(
        self,
        location: str,
        namespace: str,
        name: str,
        what: str = "the location",
        also: Iterable[tuple[str, str, str]] = (),
    ) -> None:
        """Refuse normalised ``location`` (``what`` of table ``namespace.name``:
        its location, or a ``write.*.path`` property, where its files go) when
        a place of another table (its location or a ``write.*.path``) lies
        inside it or holds it (spec/rest.md §10):
        a table of the latest version, or one of ``also`` (namespace, name,
        place: the tables a transaction staged).

        Raises:
            LocationNotAllowedError
        """
        others = itertools.chain(self._tables_by_place((namespace, name)), also)
        for other_ns, other, where in others:
            if (other_ns, other) == (namespace, name):
                continue
            if overlap(location, where):
                raise LocationNotAllowedError(
                    f"{what} of table {namespace}.{name} ({location}) overlaps {where}, "
                    f"where table {other_ns}.{other} keeps its files; the operator can allow "
                    f"it with --allow-overlapping-locations"
                )

    def committed_location(self, version: int, namespace: str, name: str) -> str | None:
        """The metadata location of table ``namespace.name`` at catalog ``version``."""
        try:
            return (
                self.olympia.at_version(version).describe_table(namespace, name).metadata_location
            )
        except (oe.TableNotFoundError, oe.NamespaceNotFoundError):
            return None

    # --- transactions ---------------------------------------------------------------

    def begin(
        self,
        isolation: str | None = None,
        *,
        message: str | None = None,
        author: str | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> IcebergTransaction:
        """Start a transaction at the latest catalog version.

        ``isolation``: ``snapshot`` or ``serializable`` (default: the catalog
        property ``isolation``, else the olympia catalog's default).
        ``message``, ``author`` and ``properties``: the commit metadata
        stored with the transaction (``olympia.Catalog.begin``).

        Raises:
            olympia.InvalidArgumentError: bad isolation or commit metadata.
        """
        txn = self.olympia.begin(
            isolation or self.isolation,
            max_attempts=self.max_attempts,
            message=message,
            author=author,
            properties=properties,
        )
        return IcebergTransaction(self, txn)

    def transaction(
        self,
        isolation: str | None = None,
        *,
        message: str | None = None,
        author: str | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> IcebergTransaction:
        """Like :meth:`begin`, for ``with cat.transaction() as tx:`` (commit on a
        clean exit, rollback on an exception)."""
        return self.begin(isolation, message=message, author=author, properties=properties)

    def resume(self, txn_id: str) -> IcebergTransaction:
        """Continue a transaction distributed with ``IcebergTransaction.distribute()``.

        The resumed handle sees the transaction's staged tables; the files the
        transaction wrote before it was distributed are found again from the
        staged metadata (spec/iceberg.md §6).
        """
        tx = IcebergTransaction(self, self.olympia.resume(txn_id, max_attempts=self.max_attempts))
        tx.restore()
        return tx

    @contextmanager
    def _one(self, write: bool = True) -> Iterator[TransactionCatalog]:
        """One operation as one transaction: committed if it wrote, else dropped."""
        tx = self.begin()
        tx.strict_requirements = self.strict_requirements
        try:
            yield tx.catalog
        except BaseException:
            if tx.status == "open":
                tx.rollback()
            raise
        if write:
            tx.commit()
        else:
            tx.rollback()

    def _run(self, op: Callable[[TransactionCatalog], T], write: bool = True) -> T:
        with self._one(write) as bound:
            return op(bound)

    def _change(self, op: Callable[[TransactionCatalog], T]) -> T:
        """A change of the catalog's objects (create, drop, rename, register,
        namespace properties) as one transaction, run again from the newest
        version when a concurrent commit beat it (up to ``max-attempts``
        runs): its checks then see what won, so a create that lost to the
        same create raises ``TableAlreadyExistsError`` (and
        ``create_table_if_not_exists`` returns the winner), a drop that lost
        to a drop ``NoSuchTableError``, and a drop that lost to an append
        drops the table, as a catalog that changes one row would."""
        for attempt in range(1, self.max_attempts + 1):
            try:
                return self._run(op)
            except CommitConflictException as exc:
                if exc.rule in _NOT_RETRIED or attempt >= self.max_attempts:
                    raise
        raise AssertionError("unreachable")  # max_attempts >= 1

    def _own(self, table: Table) -> Table:
        return OlympiaTable(
            identifier=table.name(),
            metadata=table.metadata,
            metadata_location=table.metadata_location,
            io=self._load_file_io(table.metadata.properties, table.metadata_location),
            catalog=self,
        )

    # --- namespaces -----------------------------------------------------------------

    def create_namespace(
        self, namespace: str | Identifier, properties: Properties = EMPTY_DICT
    ) -> None:
        self._change(lambda c: c.create_namespace(namespace, properties))

    def drop_namespace(self, namespace: str | Identifier) -> None:
        self._change(lambda c: c.drop_namespace(namespace))

    def namespace_exists(self, namespace: str | Identifier) -> bool:
        return self._run(lambda c: c.namespace_exists(namespace), write=False)

    def list_namespaces(self, namespace: str | Identifier = ()) -> list[Identifier]:
        return self._run(lambda c: c.list_namespaces(namespace), write=False)

    def load_namespace_properties(self, namespace: str | Identifier) -> Properties:
        return self._run(lambda c: c.load_namespace_properties(namespace), write=False)

    def update_namespace_properties(
        self,
        namespace: str | Identifier,
        removals: set[str] | None = None,
        updates: Properties = EMPTY_DICT,
    ) -> PropertiesUpdateSummary:
        return self._change(lambda c: c.update_namespace_properties(namespace, removals, updates))

    # --- tables ---------------------------------------------------------------------

    def list_tables(self, namespace: str | Identifier) -> list[Identifier]:
        return self._run(lambda c: c.list_tables(namespace), write=False)

    def table_exists(self, identifier: str | Identifier) -> bool:
        return self._run(lambda c: c.table_exists(identifier), write=False)

    def load_table(self, identifier: str | Identifier) -> Table:
        return self._own(self._run(lambda c: c.load_table(identifier), write=False))

    def create_table(
        self,
        identifier: str | Identifier,
        schema: Schema | pa.Schema,
        location: str | None = None,
        partition_spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC,
        sort_order: SortOrder = UNSORTED_SORT_ORDER,
        properties: Properties = EMPTY_DICT,
    ) -> Table:
        return self._own(
            self._change(
                lambda c: c.create_table(
                    identifier, schema, location, partition_spec, sort_order, properties
                )
            )
        )

    def create_table_if_not_exists(
        self,
        identifier: str | Identifier,
        schema: Schema | pa.Schema,
        location: str | None = None,
        partition_spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC,
        sort_order: SortOrder = UNSORTED_SORT_ORDER,
        properties: Properties = EMPTY_DICT,
    ) -> Table:
        return create_if_not_exists(
            self, identifier, schema, location, partition_spec, sort_order, properties
        )

    def _create_staged_table(
        self,
        identifier: str | Identifier,
        schema: Schema | pa.Schema,
        location: str | None = None,
        partition_spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC,
        sort_order: SortOrder = UNSORTED_SORT_ORDER,
        properties: Properties = EMPTY_DICT,
    ) -> StagedTable:
        staged = self._run(
            lambda c: c._create_staged_table(
                identifier, schema, location, partition_spec, sort_order, properties
            ),
            write=False,
        )
        return StagedTable(
            identifier=staged.name(),
            metadata=staged.metadata,
            metadata_location=staged.metadata_location,
            io=self._load_file_io(properties, staged.metadata_location),
            catalog=self,
        )

    def create_table_transaction(
        self,
        identifier: str | Identifier,
        schema: Schema | pa.Schema,
        location: str | None = None,
        partition_spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC,
        sort_order: SortOrder = UNSORTED_SORT_ORDER,
        properties: Properties = EMPTY_DICT,
    ) -> CreateTableTransaction:
        return CreateTableTransaction(
            self._create_staged_table(
                identifier, schema, location, partition_spec, sort_order, properties
            )
        )

    def register_table(
        self, identifier: str | Identifier, metadata_location: str, overwrite: bool = False
    ) -> Table:
        return self._own(
            self._change(lambda c: c.register_table(identifier, metadata_location, overwrite))
        )

    def rename_table(
        self, from_identifier: str | Identifier, to_identifier: str | Identifier
    ) -> Table:
        return self._own(self._change(lambda c: c.rename_table(from_identifier, to_identifier)))

    def drop_table(self, identifier: str | Identifier) -> None:
        self._change(lambda c: c.drop_table(identifier))

    def purge_table(self, identifier: str | Identifier) -> None:
        """Drop the table now and delete its files once no kept version holds
        it: expiration through :meth:`expire_versions` (or ``olympia expire``)
        deletes them when it drops the last version before the purge
        (spec/iceberg.md §4, Purge)."""
        self._change(lambda c: c.purge_table(identifier))

    def expire_versions(
        self,
        older_than: datetime | None = None,
        keep_last: int | None = None,
        grace_seconds: float = 3600.0,
        allow_short_grace: bool = False,
        dry_run: bool = False,
    ) -> ExpireResult:
        """The catalog's ``expire_versions`` (same arguments), then the due
        purges of Iceberg tables (:func:`olympia.iceberg.purge.run`); the
        result has both (``purges``). Before the catalog's expiration, the
        distributed transactions past their time to live are rolled back with
        the files they wrote (spec/iceberg.md §6, "Expiry"); the result's
        ``dropped_transactions`` names them with those the catalog dropped. With ``dry_run``, nothing is written or
        deleted: the result says what a run now would expire and delete, and
        ``purges`` counts the purges that would then be due
        (``purged_tables``; ``deleted_files`` is 0)."""
        # Distributed transactions past their TTL go first, while their
        # objects still say what they wrote (spec/iceberg.md §6, "Expiry").
        rolled_back: tuple[str, ...] = ()
        if not dry_run:
            from olympia.iceberg.clientfiles import roll_back_expired

            rolled_back = roll_back_expired(self)
        core = self.olympia.expire_versions(
            older_than=older_than,
            keep_last=keep_last,
            grace_seconds=grace_seconds,
            allow_short_grace=allow_short_grace,
            dry_run=dry_run,
        )
        if dry_run:
            todo = purge.plan(self, core.oldest_version)
            purges = purge.PurgeResult(len(todo.due), len(todo.pending), 0, todo.damaged)
        else:
            purges = purge.run(self)
        fields = dataclasses.asdict(core)
        fields["dropped_transactions"] = rolled_back + core.dropped_transactions
        return ExpireResult(**fields, purges=purges)

    def remove_orphan_files(
        self,
        identifier: str | Identifier,
        older_than: datetime | None = None,
        location: str | None = None,
        dry_run: bool = False,
        staged: Iterable[str] = (),
    ) -> orphans.OrphanFiles:
        """Delete the files under the table's location (or ``location``, a
        folder inside it or inside a ``write.*.path`` of it) written before
        ``older_than`` (default three days ago; at least 24 hours ago) that
        no kept catalog version and no open distributed transaction reaches
        (spec/iceberg.md §4, "Orphan files"): Iceberg's own clean-up keeps
        only what the current metadata reaches, and would delete what older
        catalog versions read. With ``dry_run``, nothing is deleted.
        ``staged``: table metadata locations that transactions whose state
        is not in the catalog have staged (a REST server's own open ones),
        whose files are kept too.

        Raises:
            NoSuchTableError; ValueError (``older_than``, ``location``);
            olympia.OlympiaError: a kept table's files cannot be told
                (nothing was deleted).
        """
        return orphans.remove_orphan_files(
            self,
            identifier,
            older_than=older_than,
            location=location,
            dry_run=dry_run,
            staged=staged,
        )

    def run_purges(self) -> purge.PurgeResult:
        """Delete the files of purged tables that no kept version reaches."""
        return purge.run(self)

    def commit_table(
        self,
        table: Table,
        requirements: tuple[TableRequirement, ...],
        updates: tuple[TableUpdate, ...],
    ) -> CommitTableResponse:
        """Commit one table's changes as one olympia transaction.

        Raises:
            NoSuchTableError: the table does not exist.
            CommitFailedException: a requirement failed.
            CommitConflictException: a concurrent commit conflicts (a CommitFailedException).
        """
        return self._run(lambda c: c.commit_table(table, requirements, updates))

    # --- views ----------------------------------------------------------------------

    def list_views(self, namespace: str | Identifier) -> list[Identifier]:
        return self._run(lambda c: c.list_views(namespace), write=False)

    def view_exists(self, identifier: str | Identifier) -> bool:
        return self._run(lambda c: c.view_exists(identifier), write=False)

    def drop_view(self, identifier: str | Identifier) -> None:
        self._change(lambda c: c.drop_view(identifier))

    def load_view(self, identifier: str | Identifier) -> View:
        return self._run(lambda c: c.load_view(identifier), write=False)

    def create_view(
        self,
        identifier: str | Identifier,
        schema: Schema | pa.Schema,
        view_version: ViewVersion,
        location: str | None = None,
        properties: Properties = EMPTY_DICT,
    ) -> View:
        return self._change(
            lambda c: c.create_view(identifier, schema, view_version, location, properties)
        )

    def register_view(self, identifier: str | Identifier, metadata_location: str) -> View:
        return self._change(lambda c: c.register_view(identifier, metadata_location))

    def rename_view(
        self, from_identifier: str | Identifier, to_identifier: str | Identifier
    ) -> None:
        """Rename (or move) a view; its metadata is unchanged.

        Raises:
            NoSuchViewError, NoSuchNamespaceError (target namespace),
            ViewAlreadyExistsError / TableAlreadyExistsError (target name taken).
        """
        self._change(lambda c: c.rename_view(from_identifier, to_identifier))

    def commit_view(
        self,
        identifier: str | Identifier,
        requirements: Sequence[views.AssertViewUUID],
        updates: Sequence[views.ViewUpdate],
    ) -> tuple[ViewMetadata, str]:
        """Apply a view commit as one olympia transaction (spec/iceberg.md §6):
        returns the view's new metadata and its location."""
        return self._run(lambda c: c.commit_view(identifier, requirements, updates))

    # --- lifecycle -------------------------------------------------------------------

    def _load_file_io(
        self, properties: Properties = EMPTY_DICT, location: str | None = None
    ) -> FileIO:
        """The FileIO for ``location``, configured by the catalog's own
        properties only: a table's properties are set by whoever writes the
        table (through the REST server, a client) and never choose the FileIO
        class, endpoint, region or credentials (spec/iceberg.md §1)."""
        return super()._load_file_io(EMPTY_DICT, location)

    def close(self) -> None:
        self.olympia.close()

    def __repr__(self) -> str:
        return f"OlympiaCatalog({self.name!r}, warehouse={self.warehouse!r})"


__all__ = ["OlympiaCatalog", "storage_options"]
