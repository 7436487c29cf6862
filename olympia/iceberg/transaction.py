"""Iceberg transactions over an olympia catalog (spec/iceberg.md §5, §6).

:class:`IcebergTransaction` wraps one olympia transaction. Its
:attr:`~IcebergTransaction.catalog` is a PyIceberg ``Catalog`` bound to it
(:class:`TransactionCatalog`): every namespace and table operation, and every
``commit_table`` of a table loaded through it, is staged in the olympia
transaction. ``OlympiaCatalog`` runs each of its own operations as such a
transaction with one operation, so a single-table commit and a multi-table
commit take the same path.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa
from pyiceberg import exceptions as ice
from pyiceberg.catalog import (
    LOCATION,
    MetastoreCatalog,
    PropertiesUpdateSummary,
)
from pyiceberg.expressions import AlwaysTrue, BooleanExpression, Or
from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestEntryStatus
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import (
    ALWAYS_TRUE,
    CommitTableResponse,
    CreateTableTransaction,
    StagedTable,
    Table,
    _parse_row_filter,
    upsert_util,
)
from pyiceberg.table import Transaction as PyIcebergTransaction
from pyiceberg.table.metadata import TableMetadata, TableMetadataCommonFields, new_table_metadata
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRef
from pyiceberg.table.snapshots import Snapshot, SnapshotLogEntry
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, SortOrder
from pyiceberg.table.update import (
    AssertCreate,
    AssertRefSnapshotId,
    TableRequirement,
    TableUpdate,
)
from pyiceberg.typedef import EMPTY_DICT, Identifier, Properties
from pyiceberg.view import View
from pyiceberg.view.metadata import ViewMetadata, ViewVersion

from olympia import errors as oe
from olympia.codec import CommitInfo
from olympia.iceberg import filetimes, names, purge, reads, rebase, sidecar, views
from olympia.iceberg.deletes import delete_file
from olympia.iceberg.errors import CommitConflictException, CommitTimeoutException
from olympia.iceberg.locations import (
    LocationNotAllowedError,
    is_under,
    location_provider,
    normalize,
    overlap,
    path_segment,
)
from olympia.iceberg.metadata import with_defaults, with_row_lineage, write_metadata
from olympia.iceberg.purge import same_file_uri
from olympia.iceberg.reads import MetadataReads, RecordingProperties, check_metadata_reads
from olympia.iceberg.rebase import ScanRecord, StagedCommit
from olympia.iceberg.updates import apply_updates, check_new_specs_and_orders
from olympia.keys import KeyCodec, ObjectType
from olympia.proto import actions_pb2 as apb
from olympia.transaction import Transaction as OlympiaTransaction

if TYPE_CHECKING:
    from pyiceberg.table import DataScan

    from olympia.iceberg.catalog import OlympiaCatalog

logger = logging.getLogger(__name__)

A = apb.ActionType

#: The properties of a namespace created without any, as SqlCatalog stores them.
MINIMAL_NAMESPACE_PROPERTIES = {"exists": "true"}

#: The olympia table ``format`` of Iceberg tables (spec/iceberg.md §4).
ICEBERG_FORMAT = "iceberg"


@contextlib.contextmanager
def translate_errors() -> Iterator[None]:
    """Olympia's object errors as the PyIceberg exceptions PyIceberg users
    catch, worded as Iceberg's own catalogs word them (their clients and the
    people reading Spark's errors rely on the wording)."""
    try:
        yield
    except oe.NamespaceNotFoundError as exc:
        raise ice.NoSuchNamespaceError(_iceberg_message(str(exc))) from exc
    except oe.TableNotFoundError as exc:
        raise ice.NoSuchTableError(_iceberg_message(str(exc))) from exc
    except oe.ViewNotFoundError as exc:
        raise ice.NoSuchViewError(_iceberg_message(str(exc))) from exc
    except oe.NamespaceAlreadyExistsError as exc:
        raise ice.NamespaceAlreadyExistsError(_iceberg_message(str(exc))) from exc
    except oe.TableAlreadyExistsError as exc:
        raise ice.TableAlreadyExistsError(_iceberg_message(str(exc))) from exc
    except oe.ViewAlreadyExistsError as exc:
        raise ice.ViewAlreadyExistsError(_iceberg_message(str(exc), creating="view")) from exc
    except oe.NamespaceNotEmptyError as exc:
        raise ice.NamespaceNotEmptyError(_iceberg_message(str(exc))) from exc


#: olympia's wording of an object error, and Iceberg's (Java catalogs; PyIceberg's agrees).
_WORDING = (
    (r"namespace '(.+)' does not exist", "Namespace does not exist: {0}"),
    (r"namespace '(.+)' already exists", "Namespace already exists: {0}"),
    (r"namespace '([^']+)' is not empty(.*)", "Namespace {0} is not empty{1}"),
    (r"table (\S+) does not exist", "Table does not exist: {0}"),
    (r"view (\S+) does not exist", "View does not exist: {0}"),
)


def _iceberg_message(message: str, creating: str = "table") -> str:
    """Iceberg's wording for an olympia object error's ``message`` (unchanged
    when it is not one of them). ``creating`` says what the failed write was
    creating, for "a <kind> named X already exists"."""
    for pattern, wording in _WORDING:
        found = re.fullmatch(pattern, message, re.S)
        if found:
            return wording.format(*found.groups())
    found = re.fullmatch(r"a (table|view) named (\S+) already exists", message)
    if found:
        kind, name = found.groups()
        if kind == creating:
            return f"{kind.capitalize()} already exists: {name}"
        return f"{kind.capitalize()} with same name already exists: {name}"
    return message


@dataclass
class TableState:
    """What a transaction did to one table: the metadata location committed
    at its begin version (None: the transaction created the table), the
    ``commit_table`` calls it staged, in order, and the scans it made."""

    base_location: str | None
    commits: list[StagedCommit] = field(default_factory=list)
    scans: list[ScanRecord] = field(default_factory=list)
    #: Rebuilt by ``resume`` from the staged metadata: the staged commits are
    #: unknown, so a concurrent change of the table cannot be rebased.
    recovered: bool = False
    #: The metadata files this transaction wrote for the table, oldest first.
    metadata_files: list[str] = field(default_factory=list)
    #: What the transaction read of the table's metadata (spec/iceberg.md §8).
    reads: MetadataReads = field(default_factory=MetadataReads)
    #: Scans an engine reported through REST (note_scan_report): judged with
    #: the table's content when the transaction writes the table; a table
    #: only read keeps the core's judgement (its read of the table's key).
    reported_scans: list[ScanRecord] = field(default_factory=list)

    def all_scans(self) -> list[ScanRecord]:
        return [*self.scans, *self.reported_scans]


class OlympiaTable(Table):
    """A PyIceberg ``Table`` that tells its catalog the row filters of its
    deletes and overwrites (the conflict filter of the commit) and, in a
    transaction, the row filters of its scans and what its accessors were
    asked of its metadata (spec/iceberg.md §8, metadata reads)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._conflict_filters: list[BooleanExpression] = []

    def _note(self, kind: str, key: str | None = None) -> None:
        if isinstance(self.catalog, TransactionCatalog):
            self.catalog.note_read(self._identifier, kind, key)

    @property
    def properties(self) -> dict[str, str]:
        return RecordingProperties(
            self.metadata.properties, lambda key: self._note("property", key)
        )

    def schema(self) -> Schema:
        self._note(reads.SCHEMA)
        return super().schema()

    def schemas(self) -> dict[int, Schema]:
        self._note(reads.SCHEMA)
        return super().schemas()

    def spec(self) -> PartitionSpec:
        self._note(reads.SPEC)
        return super().spec()

    def specs(self) -> dict[int, PartitionSpec]:
        self._note(reads.SPEC)
        return super().specs()

    def sort_order(self) -> SortOrder:
        self._note(reads.SORT_ORDER)
        return super().sort_order()

    def sort_orders(self) -> dict[int, SortOrder]:
        self._note(reads.SORT_ORDER)
        return super().sort_orders()

    def location(self) -> str:
        self._note(reads.LOCATION)
        return super().location()

    def current_snapshot(self) -> Snapshot | None:
        self._note("ref", MAIN_BRANCH)
        return super().current_snapshot()

    def snapshot_by_name(self, name: str) -> Snapshot | None:
        self._note("ref", name)
        return super().snapshot_by_name(name)

    def snapshots(self) -> list[Snapshot]:
        self._note("ref", reads.ALL_REFS)
        return super().snapshots()

    def refs(self) -> dict[str, SnapshotRef]:
        self._note("ref", reads.ALL_REFS)
        return super().refs()

    def history(self) -> list[SnapshotLogEntry]:
        self._note("ref", reads.ALL_REFS)
        return super().history()

    def transaction(self) -> PyIcebergTransaction:
        return _FilterRecordingTransaction(self)

    def take_conflict_filter(self) -> BooleanExpression | None:
        """The filters recorded since the last commit, joined by OR (None: none)."""
        filters, self._conflict_filters = self._conflict_filters, []
        if not filters:
            return None
        out = filters[0]
        for f in filters[1:]:
            out = Or(out, f)
        return out

    def scan(
        self,
        row_filter: str | BooleanExpression = ALWAYS_TRUE,
        selected_fields: tuple[str, ...] = ("*",),
        case_sensitive: bool = True,
        snapshot_id: int | None = None,
        options: Properties = EMPTY_DICT,
        limit: int | None = None,
    ) -> DataScan:
        if isinstance(self.catalog, TransactionCatalog):
            self.catalog.note_scan(
                self._identifier,
                ScanRecord(_parse_row_filter(row_filter), snapshot_id, case_sensitive),
            )
        return super().scan(
            row_filter, selected_fields, case_sensitive, snapshot_id, options, limit
        )


class _FilterRecordingTransaction(PyIcebergTransaction):
    def upsert(
        self,
        df: pa.Table,
        join_cols: list[str] | None = None,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        """PyIceberg's upsert, which reads the rows its join columns match
        with a scan of its own (not ``Table.scan``): that read is recorded
        as a scan of the table, so that under SERIALIZABLE two upserts of
        one new key cannot both commit (spec/iceberg.md §8)."""
        table = self._table
        if isinstance(table, OlympiaTable) and isinstance(table.catalog, TransactionCatalog):
            matched = _upsert_match_filter(self, df, join_cols)
            if matched is not None:
                case_sensitive = bool(kwargs.get("case_sensitive", True))
                table.catalog.note_scan(
                    table._identifier, ScanRecord(matched, None, case_sensitive)
                )
        return super().upsert(df, join_cols, *args, **kwargs)

    def delete(
        self,
        delete_filter: str | BooleanExpression,
        *args: Any,
        **kwargs: Any,
    ) -> None:
        table = self._table
        if isinstance(table, OlympiaTable):
            table._conflict_filters.append(_parse_row_filter(delete_filter))
        super().delete(delete_filter, *args, **kwargs)


def _upsert_match_filter(
    txn: PyIcebergTransaction, df: pa.Table, join_cols: list[str] | None
) -> BooleanExpression | None:
    """The row filter PyIceberg's upsert scans the table with (its join
    columns, by default the schema's identifier fields, equal to a row of
    ``df``); None when the upsert will refuse its input anyway."""
    try:
        cols = list(join_cols) if join_cols else []
        if not cols:
            schema = txn.table_metadata.schema()
            cols = [schema.find_column_name(i) or "" for i in schema.identifier_field_ids]
        if not cols or "" in cols or not isinstance(df, pa.Table):
            return None
        filter_: BooleanExpression = upsert_util.create_match_filter(df, cols)
        return filter_
    except Exception:  # PyIceberg's upsert reports its own input errors
        return None


def _record_writes(io: FileIO, written: list[str], tx: IcebergTransaction) -> FileIO:
    """Make ``io`` note in ``written`` every file it opens for writing, and
    refuse to open one once the transaction ``tx`` has ended (a table loaded
    through it and used after its commit or rollback would write files that
    nothing ever references, and after a rollback trip over the staged
    files the rollback deleted).

    The instance is patched rather than wrapped, because PyIceberg's pyarrow
    reader looks at the concrete FileIO class to reach its file systems."""
    original = io.new_output

    def new_output(location: str) -> Any:
        if tx.status != "open":
            raise oe.TransactionClosedError(
                f"transaction {tx.id} is {tx.status}: a table loaded through it writes "
                f"nothing now (load the table again, from the catalog or a new transaction)"
            )
        written.append(location)
        return original(location)

    io.new_output = new_output  # type: ignore[method-assign]
    return io


#: A rollback that claimed files reads the versions committed since its
#: begin version, up to this many; beyond, it keeps every claimed file.
_VERSIONS_SEARCHED = 1000
#: The actions that commit a table's metadata.
_TABLE_WRITES = (A.TABLE_CREATE, A.TABLE_UPDATE)

#: Conflict rules that mean another process has the distributed transaction
#: (its files are that process's to keep or delete).
_ANOTHER_PROCESS_HOLDS_IT = ("transaction-claimed", "transaction-advanced")


class _IcebergConflicts:
    """The olympia transaction of an :class:`IcebergTransaction`, whose calls
    raise a conflict as :class:`CommitConflictException` (a PyIceberg
    ``CommitFailedException``), as spec/iceberg.md §4 promises: for example
    a second process that resumed a distributed transaction and finds it
    advanced by the first."""

    def __init__(self, tx: IcebergTransaction) -> None:
        self._tx = tx

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._tx.olympia_transaction, name)
        if not callable(attr):
            return attr

        @functools.wraps(attr)
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return attr(*args, **kwargs)
            except oe.CommitConflictError as exc:
                raise self._tx.conflict(exc) from exc

        return call


def create_if_not_exists(
    catalog: MetastoreCatalog,
    identifier: str | Identifier,
    schema: Schema | pa.Schema,
    location: str | None,
    partition_spec: PartitionSpec,
    sort_order: SortOrder,
    properties: Properties,
) -> Table:
    """PyIceberg's ``create_table_if_not_exists``, except that a name a view
    holds raises the ``TableAlreadyExistsError`` saying so (PyIceberg's
    loads the table after it and reports "does not exist")."""
    try:
        return catalog.create_table(
            identifier, schema, location, partition_spec, sort_order, properties
        )
    except ice.TableAlreadyExistsError as taken:
        try:
            return catalog.load_table(identifier)
        except ice.NoSuchTableError:
            raise taken from None


class TransactionCatalog(MetastoreCatalog):
    """A PyIceberg catalog bound to one :class:`IcebergTransaction`.

    Reads see the transaction's begin version plus its own writes; writes are
    staged in it. Tables loaded through it are bound to it too.
    """

    def __init__(self, tx: IcebergTransaction) -> None:
        owner = tx.owner
        super().__init__(owner.name, **owner.properties)
        self._tx = tx

    @property
    def transaction(self) -> IcebergTransaction:
        return self._tx

    @property
    def _txn(self) -> OlympiaTransaction:
        # Every call's conflict is PyIceberg's CommitFailedException (§4).
        return cast(OlympiaTransaction, _IcebergConflicts(self._tx))

    # --- helpers ----------------------------------------------------------------

    def _load_file_io(
        self, properties: Properties = EMPTY_DICT, location: str | None = None
    ) -> FileIO:
        # The catalog's own properties only, as OlympiaCatalog._load_file_io.
        return _record_writes(
            self._tx.owner._load_file_io(location=location), self._tx.written_files, self._tx
        )

    # --- where callers may point the catalog (spec/rest.md §10) -------------------

    def _check_table_locations(
        self,
        namespace: str,
        name: str,
        metadata: TableMetadata,
        base: TableMetadata | None,
        metadata_location: str,
    ) -> None:
        """Refuse what ``metadata`` (replacing ``base``) adds that points
        outside the allowed locations: the table's location (and, when it
        moves, one that overlaps another table's), the ``write.*.path``
        properties, the manifest lists of new snapshots, the metadata file.

        Raises:
            LocationNotAllowedError
        """
        policy = self._tx.owner.locations
        what = f"table {namespace}.{name}"
        if base is not None and metadata.location == base.location:
            try:
                normalize(base.location)
            except LocationNotAllowedError as exc:
                # Committed by a build that took a relative warehouse as it
                # was given: a FileIO resolves it against each process's
                # working folder, so nothing more is written there.
                raise LocationNotAllowedError(
                    f"{what} cannot be written: its committed location {base.location!r} "
                    f"is not one this catalog accepts ({exc}); an earlier olympia build "
                    f"recorded it from a relative warehouse. Its data can still be read: "
                    f"copy it into a table at an absolute location"
                ) from None
        if base is None or metadata.location != base.location:
            where = policy.check(metadata.location, f"the location of {what}")
            if not policy.allow_overlap:
                self._tx.owner.check_no_overlap(where, namespace, name, also=self._staged_tables())
        for key in WRITE_PATH_PROPERTIES:
            value = metadata.properties.get(key)
            if value is not None and (base is None or base.properties.get(key) != value):
                path = policy.check(value, f"property {key} of {what}")
                if not policy.allow_overlap:  # its files would be another table's
                    self._tx.owner.check_no_overlap(
                        path, namespace, name, f"property {key}", also=self._staged_tables()
                    )
        known = set() if base is None else {s.snapshot_id for s in base.snapshots}
        for snapshot in metadata.snapshots:
            if snapshot.snapshot_id in known:
                continue
            named = f"the manifest list of snapshot {snapshot.snapshot_id} of {what}"
            policy.check(snapshot.manifest_list, named)
            if (
                policy.restricted
                and not self._load_file_io(location=snapshot.manifest_list)
                .new_input(snapshot.manifest_list)
                .exists()
            ):
                # Caught now, a bad snapshot never reaches a commit or a rollback.
                raise ValueError(f"{named} ({snapshot.manifest_list}) does not exist")
        policy.check(metadata_location, f"the metadata file of {what}")

    def _staged_tables(self) -> Iterator[tuple[str, str, str]]:
        """(namespace, name, normalised place) of each place (location,
        ``write.*.path``) of each table this transaction created or changed,
        as it sees them: the latest version does not hold them yet."""
        for namespace, name in list(self._tx._tables):
            try:
                metadata_location = self._location(namespace, name)
            except ice.NoSuchIcebergTableError:
                continue
            if metadata_location:
                for where in self._tx.owner.table_places(metadata_location):
                    yield namespace, name, where

    def _location(self, namespace: str, name: str) -> str | None:
        """The metadata location of Iceberg table ``namespace.name`` as the
        transaction sees it, or None."""
        with translate_errors():
            try:
                info = self._txn.describe_table(namespace, name)
            except oe.TableNotFoundError:
                return None
        if info.format != ICEBERG_FORMAT or not info.metadata_location:
            raise ice.NoSuchIcebergTableError(
                f"table {namespace}.{name} is a {info.format or 'non-Iceberg'} table, not an "
                f"Iceberg table"
            )
        return info.metadata_location

    def _require_namespace(self, namespace: str) -> None:
        """A table or view is about to go into ``namespace``: it must exist.
        An implicit parent (a namespace with only namespaces below it, which
        :meth:`namespace_exists` reports, as SqlCatalog does) is created in
        this transaction, with no properties, so that what exists for
        ``namespace_exists`` also holds tables (spec/iceberg.md §2)."""
        if self._txn.namespace_exists(namespace):
            return
        if not self._children(namespace):
            raise ice.NoSuchNamespaceError(f"Namespace does not exist: {namespace}")
        with translate_errors():
            self._txn.create_namespace(namespace, {})

    def note_read(self, identifier: Identifier, kind: str, key: str | None) -> None:
        """Record a read of a table's metadata: ``kind`` is ``property``
        (``key`` None: every property), ``ref`` (a branch or tag name, or
        ``reads.ALL_REFS``) or one of ``reads.ITEMS``."""
        namespace, name = names.table_name(identifier)
        state = self._tx._tables.get((namespace, name))
        if state is None:
            state = self._tx._state(namespace, name, self._location(namespace, name))
        recorded = state.reads
        before = recorded.size()
        if kind == "property":
            if key is None:
                recorded.all_properties = True
            else:
                recorded.properties.add(key)
        elif kind == "ref":
            recorded.refs.add(key or reads.ALL_REFS)
        else:
            recorded.items.add(kind)
        if recorded.size() != before:
            self._tx.save_state()

    def note_scan_report(self, identifier: Identifier, snapshot_id: int | None) -> None:
        """A scan an engine reported (the REST ``ScanReport`` of Spark, say,
        which reads a table's files itself): under SERIALIZABLE, recorded as
        a scan of the whole table, since a report's filter has its values
        replaced by placeholders (Iceberg sanitizes them) and so cannot tell
        which rows it matched; a conflict it causes is at worst one too many.
        It is judged only if the transaction writes the table (its rebase
        checks it); a table only read stays under the core's rules, which
        may serialize the transaction before the one that changed it.
        ``snapshot_id`` None: a load of a table with no snapshot, which an
        engine reads without a report. A scan of another snapshot than the
        table's current one on its main branch in this transaction (time
        travel, which reads rows that never change; a branch, whose reads
        are not checked, spec/rest.md §7) is not recorded. Nothing is
        recorded under SNAPSHOT, which checks no scans."""
        if self._tx.isolation != "serializable":
            return
        try:
            table = self.load_table(identifier)
        except ice.NoSuchTableError:
            return
        metadata = table.metadata
        scans = []
        if metadata.current_snapshot_id == snapshot_id:
            scans.append(ScanRecord(AlwaysTrue(), None, True, "the engine"))
        if snapshot_id is not None:
            # The head of a branch (write-audit-publish): its rows change with
            # every commit to it. A head shared by several refs counts for each.
            scans += [
                ScanRecord(AlwaysTrue(), snapshot_id, True, "the engine", ref=name)
                for name, ref in sorted(metadata.refs.items())
                if name != "main"
                and ref.snapshot_ref_type == "branch"
                and ref.snapshot_id == snapshot_id
            ]
        namespace, name = names.table_name(identifier)
        state = self._tx._state(namespace, name, self._location(namespace, name))
        new = [scan for scan in scans if scan not in state.reported_scans]
        if new:  # a whole-table scan of a branch says all the others of it say
            state.reported_scans.extend(new)
            self._tx.save_state()

    def note_scan(self, identifier: Identifier, scan: ScanRecord) -> None:
        """Record a scan of a table loaded through this catalog."""
        namespace, name = names.table_name(identifier)
        self._tx._state(namespace, name, self._location(namespace, name)).scans.append(scan)
        self._tx.save_state()

    def _table(self, identifier: Identifier, location: str, metadata: TableMetadata) -> Table:
        return OlympiaTable(
            identifier=identifier,
            metadata=metadata,
            metadata_location=location,
            io=self._load_file_io(metadata.properties, location),
            catalog=self,
        )

    # --- namespaces -----------------------------------------------------------------

    def create_namespace(
        self, namespace: str | Identifier, properties: Properties = EMPTY_DICT
    ) -> None:
        ns = names.namespace_name(namespace)
        props = dict(properties or {}) or dict(MINIMAL_NAMESPACE_PROPERTIES)  # None: none given
        self._check_namespace_location(ns, props)
        if not self._txn.namespace_exists(ns) and self._children(ns):
            # It exists already, implicitly (§3): namespace_exists says so,
            # and SqlCatalog refuses it; update_namespace_properties sets
            # properties on it.
            raise ice.NamespaceAlreadyExistsError(
                f"Namespace {ns} already exists: namespaces {', '.join(self._children(ns))} "
                f"lie below it"
            )
        with translate_errors():
            self._txn.create_namespace(ns, props)

    def drop_namespace(self, namespace: str | Identifier) -> None:
        ns = names.namespace_name(namespace)
        if not self._txn.namespace_exists(ns):
            if self._children(ns):
                raise ice.NamespaceNotEmptyError(
                    f"Namespace {ns} is not empty: it holds namespaces {', '.join(self._children(ns))}"
                )
            raise ice.NoSuchNamespaceError(f"Namespace does not exist: {ns}")
        children = self._children(ns)
        if children:
            raise ice.NamespaceNotEmptyError(
                f"Namespace {ns} is not empty: it holds namespaces {', '.join(children)}"
            )
        with translate_errors():
            self._txn.drop_namespace(ns)

    def _children(self, ns: str) -> list[str]:
        prefix = ns + names.SEPARATOR
        return [n for n in self._txn.list_namespaces() if n.startswith(prefix)]

    def namespace_exists(self, namespace: str | Identifier) -> bool:
        """True if the namespace exists or is the parent of one that does (as in SqlCatalog)."""
        ns = names.namespace_name(namespace)
        return self._txn.namespace_exists(ns) or bool(self._children(ns))

    def list_namespaces(self, namespace: str | Identifier = ()) -> list[Identifier]:
        parent: Identifier = () if namespace in ((), "") else names.to_tuple(namespace)
        if parent:
            names.namespace_name(parent)
            if not self.namespace_exists(parent):
                raise ice.NoSuchNamespaceError(f"Namespace does not exist: {'.'.join(parent)}")
        depth = len(parent) + 1
        found: dict[Identifier, None] = {}
        for name in self._txn.list_namespaces():
            levels = names.namespace_levels(name)
            if len(levels) >= depth and levels[: depth - 1] == parent:
                found[levels[:depth]] = None
        return list(found)

    def load_namespace_properties(self, namespace: str | Identifier) -> Properties:
        ns = names.namespace_name(namespace)
        try:
            return dict(self._txn.describe_namespace(ns).properties)
        except oe.NamespaceNotFoundError:
            if self._children(ns):
                return {}
            raise ice.NoSuchNamespaceError(f"Namespace does not exist: {ns}") from None

    def update_namespace_properties(
        self,
        namespace: str | Identifier,
        removals: set[str] | None = None,
        updates: Properties = EMPTY_DICT,
    ) -> PropertiesUpdateSummary:
        ns = names.namespace_name(namespace)
        updates = dict(updates or {})  # None: nothing to set
        self._check_namespace_location(ns, updates)
        current = self.load_namespace_properties(namespace)
        summary, _ = self._get_updated_props_and_update_summary(current, removals, updates)
        with translate_errors():
            if self._txn.namespace_exists(ns):
                self._txn.alter_namespace(ns, set=updates, unset=sorted(removals or ()))
            elif updates:
                # An implicit namespace (the parent of one that exists, §3):
                # setting a property creates it, as SqlCatalog stores one.
                self._txn.create_namespace(ns, updates)
        return summary

    # --- tables ---------------------------------------------------------------------

    def _list(
        self, namespace: str | Identifier, lister: Callable[[str], list[str]]
    ) -> list[Identifier]:
        """The identifiers ``lister`` gives for a namespace; an implicit parent
        namespace (one with namespaces below it only) holds nothing."""
        ns = names.namespace_name(namespace)
        if not self._txn.namespace_exists(ns):
            if self._children(ns):
                return []
            raise ice.NoSuchNamespaceError(f"Namespace does not exist: {ns}")
        with translate_errors():
            return [names.identifier(ns, n) for n in lister(ns)]

    def list_tables(self, namespace: str | Identifier) -> list[Identifier]:
        return self._list(namespace, self._txn.list_tables)

    def table_exists(self, identifier: str | Identifier) -> bool:
        namespace, name = names.table_name(identifier)
        return self._txn.table_exists(namespace, name)

    def load_table(self, identifier: str | Identifier) -> Table:
        namespace, name = names.table_name(identifier)
        location = self._location(namespace, name)
        if location is None:
            raise ice.NoSuchTableError(f"Table does not exist: {namespace}.{name}")
        self._tx._state(namespace, name, location)
        metadata = self._tx.owner.read_metadata(location)
        return self._table(names.identifier(namespace, name), location, metadata)

    def _check_namespace_location(self, ns: str, properties: Properties) -> None:
        """A namespace's ``location`` is where its tables go by default: it
        must be a location the catalog accepts (refused when set, rather than
        at every table created in it later).

        Raises:
            LocationNotAllowedError
        """
        if LOCATION not in properties:
            return
        owner = self._tx.owner
        where = owner.locations.check(str(properties[LOCATION]), f"the location of namespace {ns}")
        if owner.locations.allow_overlap:
            return
        for other_ns, other, place in owner._tables_by_place(None):
            if is_under(where, place):  # each table made there would overlap it
                raise LocationNotAllowedError(
                    f"the location of namespace {ns} ({where}) lies inside {place}, where "
                    f"table {other_ns}.{other} keeps its files; the operator can allow it with "
                    f"--allow-overlapping-locations"
                )

    def _default_location(self, namespace: str, name: str) -> str:
        props = self.load_namespace_properties(names.namespace_levels(namespace))
        # Names may hold "/" (spec/iceberg.md §2): each is encoded as one segment.
        if base := props.get(LOCATION):
            return f"{base.rstrip('/')}/{path_segment(name)}"
        return f"{self._tx.owner.warehouse}/{path_segment(namespace)}.db/{path_segment(name)}"

    def _create_staged_table(
        self,
        identifier: str | Identifier,
        schema: Schema | pa.Schema,
        location: str | None = None,
        partition_spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC,
        sort_order: SortOrder = UNSORTED_SORT_ORDER,
        properties: Properties = EMPTY_DICT,
    ) -> StagedTable:
        namespace, name = names.table_name(identifier)
        iceberg_schema = self._convert_schema_if_needed(
            schema,
            int(properties.get("format-version", 2)),  # type: ignore[arg-type]
        )
        self._require_namespace(namespace)
        if self._txn.table_exists(namespace, name):
            raise ice.TableAlreadyExistsError(f"Table already exists: {namespace}.{name}")
        if location is not None and not location.strip():
            raise LocationNotAllowedError(f"the location of table {namespace}.{name} is empty")
        location = location.rstrip("/") if location else self._default_location(namespace, name)
        metadata_location = location_provider(
            location, properties, f"table {namespace}.{name}"
        ).new_table_metadata_file_location()
        metadata = with_row_lineage(
            with_defaults(
                new_table_metadata(
                    location=location,
                    schema=iceberg_schema,
                    partition_spec=partition_spec,
                    sort_order=sort_order,
                    properties=properties,
                ),
                iceberg_schema,
            )
        )
        self._check_table_locations(namespace, name, metadata, None, metadata_location)
        check_new_specs_and_orders(None, metadata)
        return StagedTable(
            identifier=names.identifier(namespace, name),
            metadata=metadata,
            metadata_location=metadata_location,
            io=self._load_file_io(properties, metadata_location),
            catalog=self,
        )

    def create_table(
        self,
        identifier: str | Identifier,
        schema: Schema | pa.Schema,
        location: str | None = None,
        partition_spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC,
        sort_order: SortOrder = UNSORTED_SORT_ORDER,
        properties: Properties = EMPTY_DICT,
    ) -> Table:
        staged = self._create_staged_table(
            identifier, schema, location, partition_spec, sort_order, properties
        )
        namespace, name = names.table_name(identifier)
        write_metadata(staged.metadata, staged.io, staged.metadata_location)
        self._tx._state(namespace, name, None)
        with translate_errors():
            self._txn.create_table(namespace, name, staged.metadata_location)
        return self._table(staged.name(), staged.metadata_location, staged.metadata)

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
        namespace, name = names.table_name(identifier)
        self._require_namespace(namespace)
        what = f"the metadata-location of table {namespace}.{name}"
        self._tx.owner.locations.check(metadata_location, what)
        metadata = self._tx.owner.read_metadata(metadata_location, what)
        self._check_table_locations(namespace, name, metadata, None, metadata_location)
        location_provider(metadata.location, metadata.properties, f"table {namespace}.{name}")
        # A purged table brought back: no purge run may delete its files now.
        held = purge.hold(
            self._tx.owner,
            self._tx.id,
            f"table {namespace}.{name}",
            [metadata_location, metadata.location],
        )
        if held:
            self._tx.held_purges.extend(held)
            self._tx.save_state()
        self._tx._state(namespace, name, self._location(namespace, name))
        with translate_errors():
            if overwrite and self._txn.table_exists(namespace, name):
                self._txn.update_table(namespace, name, metadata_location=metadata_location)
            else:
                self._txn.create_table(namespace, name, metadata_location)
        return self._table(names.identifier(namespace, name), metadata_location, metadata)

    def rename_table(
        self, from_identifier: str | Identifier, to_identifier: str | Identifier
    ) -> Table:
        namespace, name = names.table_name(from_identifier)
        new_namespace, new_name = names.table_name(to_identifier)
        location = self._location(namespace, name)
        if location is None:
            raise ice.NoSuchTableError(f"Table does not exist: {namespace}.{name}")
        self._tx._state(namespace, name, location)
        self._require_namespace(new_namespace)
        self._check_rename_target(namespace, name, new_namespace, new_name)
        with translate_errors():
            self._txn.rename_table(namespace, name, new_namespace, new_name)
        self._tx._renamed((namespace, name), (new_namespace, new_name))
        self._tx.save_state()
        return self.load_table(names.identifier(new_namespace, new_name))

    def drop_table(self, identifier: str | Identifier) -> None:
        namespace, name = names.table_name(identifier)
        with translate_errors():
            self._txn.drop_table(namespace, name)
        self._tx._dropped((namespace, name))
        self._tx.save_state()

    def purge_table(self, identifier: str | Identifier) -> None:
        """Drop the table and, once the transaction commits, record its purge:
        its files are deleted when expiration drops the last version that
        holds the table (olympia.iceberg.purge)."""
        table = self.load_table(identifier)
        self.drop_table(identifier)
        self._tx.purges.append(purge.PurgeIntent.of(table))
        self._tx.save_state()  # whoever commits a distributed transaction records it

    def commit_table(
        self,
        table: Table,
        requirements: tuple[TableRequirement, ...],
        updates: tuple[TableUpdate, ...],
    ) -> CommitTableResponse:
        namespace, name = names.table_name(table.name())
        creating = any(isinstance(r, AssertCreate) for r in requirements)
        location = self._location(namespace, name)
        state = self._tx._state(namespace, name, location)
        current = None if location is None else self._tx.owner.read_metadata(location)
        if current is None and not creating:
            raise ice.NoSuchTableError(f"Table does not exist: {namespace}.{name}")
        conflict_filter = table.take_conflict_filter() if isinstance(table, OlympiaTable) else None
        try:
            for requirement in requirements:
                requirement.validate(current)
        except ice.CommitFailedException as exc:
            branch = self._stale_branch(table, current, requirement, updates)
            if branch is None or current is None:
                raise
            rebased = self._rebase_stale(table, current, requirements, updates, conflict_filter)
            # What is staged is the commit as it now applies to the newest metadata.
            requirements = tuple(
                r
                for r in requirements
                if not (isinstance(r, AssertRefSnapshotId) and r.ref == branch)
            )
            updates = rebased.updates
            logger.debug("%s: %s; rebased onto the newest metadata", table.name(), exc)
        metadata = apply_updates(
            current if current is not None else self._empty_table_metadata(),
            updates=updates,
            enforce_validation=current is None,
            metadata_location=location,
        )
        if current is not None and location is not None and metadata == current:
            return _response(current, location)
        version = self._parse_metadata_version(location) + 1 if location is not None else 0
        if not metadata.location:  # PyIceberg lets set-location "" through
            raise LocationNotAllowedError(f"the location of table {namespace}.{name} is empty")
        new_location = location_provider(
            metadata.location, metadata.properties, f"table {namespace}.{name}"
        ).new_table_metadata_file_location(version)
        self._check_table_locations(namespace, name, metadata, current, new_location)
        io = self._load_file_io(metadata.properties, new_location)
        write_metadata(metadata, io, new_location)
        self._tx.owner.remember_metadata(new_location, metadata)
        with translate_errors():
            if location is None:
                self._require_namespace(namespace)
                self._txn.create_table(namespace, name, new_location)
            else:
                self._txn.update_table(namespace, name, metadata_location=new_location)
        state.commits.append(
            StagedCommit(
                tuple(requirements),
                tuple(updates),
                conflict_filter,
                strict=self._tx.strict_requirements,
            )
        )
        state.metadata_files.append(new_location)
        self._tx.save_state()
        return _response(metadata, new_location)

    def _stale_branch(
        self,
        table: Table,
        current: TableMetadata | None,
        failed: TableRequirement,
        updates: tuple[TableUpdate, ...],
    ) -> str | None:
        """The branch of a commit whose ``failed`` requirement does not hold
        on ``current`` when the commit is rebased rather than refused (else
        None): outside the REST server's strict mode, an
        ``assert-ref-snapshot-id`` of a branch the commit adds a snapshot to,
        by a client whose table is the same table, its metadata the one the
        requirement was made on: what Iceberg's own retry of an append would
        do, done here at once (spec/iceberg.md §5)."""
        if (
            self._tx.strict_requirements
            or current is None
            or not isinstance(failed, AssertRefSnapshotId)
            or failed.ref not in rebase.branch_targets(updates).values()
        ):
            return None
        base = getattr(table, "metadata", None)
        if not isinstance(base, TableMetadataCommonFields) or base.table_uuid != current.table_uuid:
            return None
        head = base.snapshot_by_name(failed.ref)
        if (head.snapshot_id if head is not None else None) != failed.snapshot_id:
            return None
        return failed.ref

    def _rebase_stale(
        self,
        table: Table,
        current: TableMetadata,
        requirements: tuple[TableRequirement, ...],
        updates: tuple[TableUpdate, ...],
        conflict_filter: BooleanExpression | None,
    ) -> rebase.Rebased:
        """The commit made on the client's older metadata, rebased onto
        ``current`` with the rules of §8 (a conflict raises
        CommitConflictException, a CommitFailedException). The files the
        rebase writes are the transaction's; the staged snapshot's own
        manifest list and manifests are deleted once the commit stands."""
        io = self._load_file_io(current.properties, current.location)
        rebased = rebase.rebase_table(
            io,
            ".".join(table.name()),
            table.metadata,
            [StagedCommit(requirements, updates, conflict_filter)],
            current,
            isolation=self._tx.isolation,
        )
        self._tx.written_files.extend(rebased.written_files)
        if rebased.obsolete_files:
            obsolete = list(rebased.obsolete_files)
            self._tx._after_commit.append(lambda _version: _delete_quietly(io, obsolete))
        return rebased

    # --- views ----------------------------------------------------------------------

    def list_views(self, namespace: str | Identifier) -> list[Identifier]:
        return self._list(namespace, self._txn.list_views)

    def view_exists(self, identifier: str | Identifier) -> bool:
        namespace, name = names.table_name(identifier)
        return self._txn.view_exists(namespace, name)

    def drop_view(self, identifier: str | Identifier) -> None:
        namespace, name = names.table_name(identifier)
        with translate_errors():
            self._txn.drop_view(namespace, name)

    def load_view(self, identifier: str | Identifier) -> View:
        namespace, name = names.table_name(identifier)
        location = self._view_location(namespace, name)
        return View(names.identifier(namespace, name), self._tx.owner.read_view_metadata(location))

    def _view_location(self, namespace: str, name: str) -> str:
        """The metadata location of a view (NoSuchViewError if there is none)."""
        with translate_errors():
            info = self._txn.describe_view(namespace, name)
        if not info.metadata_location:
            raise ice.NoSuchViewError(
                f"view {namespace}.{name} has no Iceberg view metadata (it was created through "
                f"olympia's own API with SQL text only)"
            )
        return info.metadata_location

    def create_view(
        self,
        identifier: str | Identifier,
        schema: Schema | pa.Schema,
        view_version: ViewVersion,
        location: str | None = None,
        properties: Properties = EMPTY_DICT,
    ) -> View:
        """Create a view; its schema and version ids are assigned as Iceberg
        assigns them (spec/iceberg.md §6), whatever the request proposes."""
        if not isinstance(view_version, ViewVersion):
            raise ValueError(
                f"view_version must be a pyiceberg.view.metadata.ViewVersion, "
                f"not {type(view_version).__name__}"
            )
        namespace, name = names.table_name(identifier)
        self._require_namespace(namespace)
        if self._txn.view_exists(namespace, name):
            raise ice.ViewAlreadyExistsError(f"View already exists: {namespace}.{name}")
        if self._txn.table_exists(namespace, name):
            raise ice.ViewAlreadyExistsError(
                f"Table with same name already exists: {namespace}.{name}"
            )
        if location is not None and not location.strip():
            raise LocationNotAllowedError(f"the location of view {namespace}.{name} is empty")
        location = location.rstrip("/") if location else self._default_location(namespace, name)
        metadata = views.new_view_metadata(
            location, self._convert_schema_if_needed(schema), view_version, properties
        )
        metadata_location = self._write_view_metadata(namespace, name, metadata, None)
        self._store_view(namespace, name, metadata, metadata_location, replace=False)
        return View(names.identifier(namespace, name), metadata)

    def commit_view(
        self,
        identifier: str | Identifier,
        requirements: Sequence[views.AssertViewUUID],
        updates: Sequence[views.ViewUpdate],
    ) -> tuple[ViewMetadata, str]:
        """Apply a view commit (the REST ``POST .../views/{view}``) to the
        view's current metadata: its requirements must hold, its updates are
        applied as Iceberg applies them. Returns the new metadata and its
        location (the current ones when nothing changed).

        Raises:
            NoSuchViewError; ViewRequirementFailed (a CommitFailedException
            over REST); InvalidViewError (an update cannot be applied).
        """
        namespace, name = names.table_name(identifier)
        location = self._view_location(namespace, name)
        current = self._tx.owner.read_view_metadata(location)
        for requirement in requirements:
            requirement.validate_on(current)
        metadata = views.ViewBuilder(current).apply(updates).build()
        if metadata == current:
            return current, location
        metadata_location = self._write_view_metadata(namespace, name, metadata, location)
        self._store_view(namespace, name, metadata, metadata_location, replace=True)
        return metadata, metadata_location

    def rename_view(
        self, from_identifier: str | Identifier, to_identifier: str | Identifier
    ) -> None:
        namespace, name = names.table_name(from_identifier)
        new_namespace, new_name = names.table_name(to_identifier)
        if not self._txn.view_exists(namespace, name):
            raise ice.NoSuchViewError(f"View does not exist: {namespace}.{name}")
        self._require_namespace(new_namespace)
        self._check_rename_target(namespace, name, new_namespace, new_name)
        with translate_errors():
            self._txn.rename_view(namespace, name, new_namespace, new_name)

    def _check_rename_target(
        self, namespace: str, name: str, new_namespace: str, new_name: str
    ) -> None:
        """Iceberg's refusal of a rename onto a name a table or view has."""
        where = f"Cannot rename {namespace}.{name} to {new_namespace}.{new_name}."
        if self._txn.view_exists(new_namespace, new_name):
            raise ice.ViewAlreadyExistsError(f"{where} View already exists")
        if self._txn.table_exists(new_namespace, new_name):
            raise ice.TableAlreadyExistsError(f"{where} Table already exists")

    def register_view(self, identifier: str | Identifier, metadata_location: str) -> View:
        namespace, name = names.table_name(identifier)
        self._require_namespace(namespace)
        what = f"the metadata-location of view {namespace}.{name}"
        self._tx.owner.locations.check(metadata_location, what)
        metadata = self._tx.owner.read_view_metadata(metadata_location, what)
        self._store_view(namespace, name, metadata, metadata_location, replace=False)
        return View(names.identifier(namespace, name), metadata)

    def _write_view_metadata(
        self, namespace: str, name: str, metadata: ViewMetadata, previous: str | None
    ) -> str:
        """Write a view's new metadata file (its location and metadata folder
        checked against the allowed locations first); returns its location."""
        what = f"view {namespace}.{name}"
        check = self._tx.owner.locations.check
        check(metadata.location, f"the location of {what}")
        if folder := metadata.properties.get(views.WRITE_METADATA_PATH):
            check(folder, f"the {views.WRITE_METADATA_PATH} of {what}")
        metadata_location = views.new_metadata_location(metadata, previous)
        io = self._load_file_io(location=metadata_location)
        with io.new_output(metadata_location).create(overwrite=False) as out:
            out.write(metadata.model_dump_json(by_alias=True, exclude_none=True).encode())
        return metadata_location

    def _store_view(
        self,
        namespace: str,
        name: str,
        metadata: ViewMetadata,
        metadata_location: str,
        *,
        replace: bool,
    ) -> None:
        version = next(v for v in metadata.versions if v.version_id == metadata.current_version_id)
        sql = version.representations[0].root if version.representations else None
        schema = next(
            (s for s in metadata.schemas if s.schema_id == version.schema_id), metadata.schemas[0]
        )
        write = self._txn.replace_view if replace else self._txn.create_view
        with translate_errors():
            write(
                namespace,
                name,
                sql.sql if sql is not None else "",
                dialect=sql.dialect if sql is not None else "",
                schema_json=schema.model_dump_json(),
                properties=dict(metadata.properties),
                metadata_location=metadata_location,
            )


def _response(metadata: TableMetadata, location: str) -> CommitTableResponse:
    return CommitTableResponse.model_validate({"metadata": metadata, "metadata-location": location})


#: Table properties that say where a writer puts the table's files.
WRITE_PATH_PROPERTIES = (
    "write.data.path",
    "write.metadata.path",
    "write.object-storage.path",
    "write.folder-storage.path",
)


def _delete_quietly(io: FileIO, paths: Iterable[str]) -> None:
    for path in paths:
        with contextlib.suppress(OSError, ValueError):
            delete_file(io, path)


def added_files(
    owner: OlympiaCatalog, base_location: str | None, staged_location: str, *, metadata: bool
) -> list[str]:
    """The files written for what the staged metadata adds to the base: the
    manifest lists of its new snapshots, the manifests they added, and the data
    and delete files they added under the table's ``data/`` folder (files added
    from elsewhere, e.g. with ``add_files``, belong to the user); with
    ``metadata``, also the metadata files in its log that the base's log lacks."""
    staged = owner.read_metadata(staged_location)
    base = owner.read_metadata(base_location) if base_location else None
    out: list[str] = []
    old_snapshots: set[int] = set()
    if base is not None:
        old_snapshots = {s.snapshot_id for s in base.snapshots}
    if metadata:
        old_files = {base_location} if base_location else set()
        if base is not None:
            old_files |= {e.metadata_file for e in base.metadata_log}
        out += [
            f
            for f in [*(e.metadata_file for e in staged.metadata_log), staged_location]
            if f not in old_files
        ]
    new_ids = {s.snapshot_id for s in staged.snapshots} - old_snapshots
    io = owner._load_file_io(staged.properties, staged_location)
    data_prefix = same_file_uri(staged.location.rstrip("/") + "/data/")
    for snapshot in staged.snapshots:
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
                    and same_file_uri(path).startswith(data_prefix)
                ):
                    out.append(path)
    return out


class IcebergMerge:
    """The content merge of an :class:`IcebergTransaction` (the core's merge
    hook, spec/iceberg.md §7): rebases the transaction's staged commits of a
    table onto the newest committed metadata when a concurrent version
    changed it, instead of refusing the commit."""

    def __init__(self, tx: IcebergTransaction) -> None:
        self._tx = tx
        #: The metadata each table's staged commits are built on, once rebased.
        self._bases: dict[tuple[str, str], TableMetadata] = {}
        #: Files written for staged metadata that a rebase replaced.
        self.obsolete_files: list[str] = []
        #: The exception a call of :meth:`rebase` raised (the commit failed on it).
        self.failure: BaseException | None = None
        #: Manifests and manifest lists the last rebase of each table wrote.
        self._rebase_files: dict[tuple[str, str], list[str]] = {}
        #: The version up to which each table's concurrent changes were judged.
        self._checked: dict[tuple[str, str], int | None] = {}
        #: The metadata each rebased table would now publish.
        self._staged: dict[tuple[str, str], str] = {}

    def _by_key(self) -> dict[str, tuple[str, str]]:
        keys = self._tx.key_codec()
        return {keys.table(ns, name): (ns, name) for ns, name in self._tx._tables}

    def keys(self) -> list[str]:
        """Object keys of the tables whose content the transaction wrote or
        scanned, or whose metadata it read through a table's accessors."""
        keys = self._tx.key_codec()
        return [
            keys.table(ns, name)
            for (ns, name), state in self._tx._tables.items()
            if state.commits or state.scans or state.reads or state.recovered
        ]

    def _claims(self, latest: Any = None) -> list[tuple[str, str, str]]:
        """(namespace, name, place) of each place (location, ``write.*.path``)
        that a table this transaction created or changed has in what it
        would publish (its staged metadata, or what a rebase made of it) and
        not in the table's metadata committed in ``latest`` (default: the
        newest version): the places its commit claims (spec/rest.md §10).
        A place the table had at the begin version counts too once the
        committed table gave it up (another table may hold it since). None
        when the catalog allows overlaps."""
        tx = self._tx
        owner = tx.owner
        if owner.locations.allow_overlap:
            return []
        view = latest if latest is not None else owner.olympia.latest()
        out: list[tuple[str, str, str]] = []
        # What the transaction staged, from its actions: a read through the
        # transaction would record an action while it commits (its action
        # count is fixed by then: a group-commit root would not add up).
        staged_now = tx.staged_locations()
        for (namespace, name), state in list(tx._tables.items()):
            staged = self._staged.get((namespace, name))
            if staged is None:
                staged = staged_now.get((namespace, name))
                if not staged or staged == state.base_location:
                    continue  # not written by this transaction, or dropped
            try:
                committed = view.describe_table(namespace, name).metadata_location
            except oe.NoSuchObjectError:
                committed = None
            if staged == committed:
                continue
            before = set(owner.table_places(committed)) if committed else set()
            out.extend(
                (namespace, name, place)
                for place in owner.table_places(staged)
                if place not in before
            )
        return out

    def checks_window(self) -> bool:
        """Whether the transaction claims a place for a table's files when
        its commit starts: then the core publishes it itself, not through
        another writer's group commit, whose holder could not call
        :meth:`check_window`. (A claim can only appear later through a
        change of a table it writes, which a holder refuses by key.)"""
        return bool(self._claims())

    def check_window(self, latest: Any, written: frozenset[str]) -> None:
        """Refuse the commit when a table that the versions committed since
        the last check wrote (``written``: their object keys; ``latest`` the
        newest of them) keeps its files where a place this transaction
        claims (:meth:`_claims`, judged on what a rebase made of its tables)
        overlaps (spec/rest.md §10): the check made when the place was
        staged saw only the tables committed then.

        Raises:
            olympia.CommitConflictError: rule ``location-overlap``.
        """
        try:
            self._check_window(latest, written)
        except BaseException as exc:
            self.failure = exc
            raise

    def _check_window(self, latest: Any, written: frozenset[str]) -> None:
        claims = self._claims(latest)
        if not claims:
            return
        codec = self._tx.key_codec()
        mine = {(ns, name) for ns, name, _ in claims}
        for key in sorted(written):
            try:
                decoded = codec.decode(key)
            except oe.CorruptCatalogError:
                continue
            if decoded.object_type is not ObjectType.TABLE or tuple(decoded.parts) in mine:
                continue
            namespace, name = decoded.parts
            try:
                info = latest.describe_table(namespace, name)
            except oe.NoSuchObjectError:
                continue  # dropped or renamed away again
            if not info.metadata_location:
                continue
            for place in self._tx.owner.table_places(info.metadata_location):
                for ns, table, claimed in claims:
                    if overlap(claimed, place):
                        version = getattr(latest, "version", 0)
                        raise oe.CommitConflictError(
                            f"table {ns}.{table} would keep its files at {claimed}, which "
                            f"overlaps {place}, where table {namespace}.{name} keeps its "
                            f"files: another transaction committed it while this one "
                            f"was open, by version {version} (rule location-overlap); the "
                            f"operator can allow overlapping locations with "
                            f"--allow-overlapping-locations",
                            version=version,
                            rule="location-overlap",
                        )

    def rebase(self, latest: Any, changed_keys: Any) -> dict[str, str]:
        """Rebuild the staged commits of each table in ``changed_keys`` on its
        metadata in ``latest`` (a read view of the newest committed version);
        return ``{object key: new metadata location}`` for the tables written.

        Raises:
            CommitConflictException: a rule of spec/iceberg.md §8 refuses it.
        """
        try:
            return self._rebase(latest, changed_keys)
        except BaseException as exc:
            self.failure = exc
            raise

    def _rebase(self, latest: Any, changed_keys: Any) -> dict[str, str]:
        tx = self._tx
        by_key = self._by_key()
        version = getattr(latest, "version", None)
        out: dict[str, str] = {}
        for key in changed_keys:
            if key not in by_key:
                continue
            namespace, name = by_key[key]
            table = f"{namespace}.{name}"
            state = tx._tables[(namespace, name)]
            try:
                theirs_location = latest.describe_table(namespace, name).metadata_location
            except oe.NoSuchObjectError:
                continue  # dropped or renamed: the core refuses that (rule structural)
            theirs = tx.owner.read_metadata(theirs_location)
            # Staged commits are always rebased from the metadata they were made
            # on (an earlier rebase of this commit was never published); what a
            # read-only table's scans were judged against moves forward.
            base = self._base(namespace, name, state, original=bool(state.commits))
            if base is None:
                continue  # created by this transaction: a concurrent create is structural
            # Files the rebase writes are the transaction's: deleted if it fails.
            io = tx.catalog._load_file_io(theirs.properties, theirs_location)
            if state.recovered and not state.commits:
                raise CommitConflictException(
                    f"table {table} was changed by version {version} while distributed "
                    f"transaction {tx.id} was staged in another process; its staged commits "
                    f"cannot be rebased after resume (rule resumed-without-commits)",
                    table=table,
                    version=version,
                    rule="resumed-without-commits",
                )
            if not state.commits:
                if tx.isolation == "serializable":
                    check = functools.partial(
                        self._check_reads,
                        io,
                        table,
                        base,
                        scans=state.all_scans(),
                        reads=state.reads,
                    )
                    try:
                        check(theirs, version)
                    except CommitConflictException as exc:
                        raise self._culprit(exc, (namespace, name), version, check) from None
                self._bases[(namespace, name)] = theirs
                self._checked[(namespace, name)] = version
                continue
            try:
                rebased = rebase.rebase_table(
                    io,
                    table,
                    base,
                    state.commits,
                    theirs,
                    isolation=tx.isolation,
                    scans=state.all_scans(),
                    reads=state.reads,
                    version=version,
                    # The committed file the result follows joins its log, as
                    # every commit's predecessor does (spec/iceberg.md §7).
                    metadata_location=theirs_location,
                )
            except CommitConflictException as exc:
                again = functools.partial(
                    self._trial_rebase,
                    io,
                    table,
                    base,
                    state.commits,
                    state.all_scans(),
                    state.reads,
                )
                raise self._culprit(exc, (namespace, name), version, again) from None
            except NotImplementedError:  # an olympia without the rebase engine
                raise CommitConflictException(
                    f"table {table} was changed by version {version} after transaction "
                    f"{tx.id} began, and this olympia cannot rebase Iceberg commits "
                    f"(rule write-write)",
                    table=table,
                    version=version,
                    rule="write-write",
                ) from None
            new_location = location_provider(
                rebased.metadata.location,
                rebased.metadata.properties,
                f"table {namespace}.{name}",
            ).new_table_metadata_file_location(
                MetastoreCatalog._parse_metadata_version(theirs_location) + 1
            )
            out_io = tx.catalog._load_file_io(rebased.metadata.properties, new_location)
            write_metadata(rebased.metadata, out_io, new_location)
            tx.owner.remember_metadata(new_location, rebased.metadata)
            # The staged metadata files built on the old base are replaced.
            self.obsolete_files.extend(rebased.obsolete_files)
            self.obsolete_files.extend(state.metadata_files)
            # The files of an earlier rebase of this table are superseded.
            self.obsolete_files.extend(self._rebase_files.pop((namespace, name), ()))
            self._rebase_files[(namespace, name)] = list(rebased.written_files)
            state.metadata_files = [new_location]
            self._bases[(namespace, name)] = theirs
            self._checked[(namespace, name)] = version
            self._staged[(namespace, name)] = new_location
            out[key] = new_location
        return out

    def _trial_rebase(
        self,
        io: FileIO,
        table: str,
        base: TableMetadata,
        commits: list[StagedCommit],
        scans: list[ScanRecord],
        reads: MetadataReads,
        theirs: TableMetadata,
        version: int,
    ) -> None:
        """A rebase onto ``theirs`` only to see whether it conflicts; its files are deleted."""
        trial = rebase.rebase_table(
            io,
            table,
            base,
            commits,
            theirs,
            isolation=self._tx.isolation,
            scans=scans,
            reads=reads,
            version=version,
        )
        for path in trial.written_files:
            with contextlib.suppress(OSError, ValueError):
                delete_file(io, path)

    def _culprit(
        self,
        exc: CommitConflictException,
        table: tuple[str, str],
        latest: int | None,
        attempt: Callable[[TableMetadata, int], None],
    ) -> CommitConflictException:
        """``exc`` with the version that conflicted rather than the newest one.

        The versions since the table was last judged that changed it are
        tried oldest first (only on this failure path): the first whose
        metadata alone makes ``attempt`` fail with the same rule conflicted.
        """
        if latest is None:
            return exc
        first = self._checked.get(table) or self._tx.begin_version
        olympia_catalog = self._tx.owner.olympia
        previous: str | None = None
        changers: list[tuple[int, str]] = []
        for v in range(first, latest + 1):
            try:
                location = olympia_catalog.at_version(v).describe_table(*table).metadata_location
            except oe.OlympiaError:
                return exc
            if previous is not None and location != previous:
                changers.append((v, location))
            previous = location
        if len(changers) <= 1:
            found = changers[0][0] if changers else latest
        else:
            found = latest
            for v, location in changers[:-1]:
                try:
                    attempt(self._tx.owner.read_metadata(location), v)
                except CommitConflictException as trial:
                    if trial.rule == exc.rule:
                        found = v
                        break
        if found == exc.version:
            return exc
        message = str(exc).replace(f"version {exc.version}", f"version {found}", 1)
        return CommitConflictException(
            message, table=exc.table, version=found, rule=exc.rule or "data-conflict"
        )

    def _check_reads(
        self,
        io: FileIO,
        table: str,
        base: TableMetadata,
        theirs: TableMetadata,
        version: int | None,
        *,
        scans: list[ScanRecord],
        reads: MetadataReads,
    ) -> None:
        """SERIALIZABLE, a table the transaction read but did not write: its
        metadata reads, then its scans."""
        check_metadata_reads(
            table, base, theirs, reads, (), isolation="serializable", version=version
        )
        try:
            rebase.check_scans(
                io, table, base, theirs, scans, isolation="serializable", version=version
            )
        except NotImplementedError:  # an olympia without the rebase engine
            raise CommitConflictException(
                f"table {table}, which serializable transaction {self._tx.id} read, was changed "
                f"by version {version}, and this olympia cannot judge Iceberg scans "
                f"(rule scan-filter-matches)",
                table=table,
                version=version,
                rule="scan-filter-matches",
            ) from None

    def _base(
        self, namespace: str, name: str, state: TableState, *, original: bool = False
    ) -> TableMetadata | None:
        known = None if original else self._bases.get((namespace, name))
        if known is not None:
            return known
        if state.base_location is None:
            return None
        return self._tx.owner.read_metadata(state.base_location)


class IcebergTransaction:
    """A transaction over the Iceberg tables of an olympia catalog.

    Offers the namespace and table methods of a PyIceberg ``Catalog``
    (through :attr:`catalog`, and directly); tables loaded through it read
    the transaction's begin version plus its own writes, and stage their
    commits in it. :meth:`commit` publishes everything in one catalog
    version; :meth:`rollback` (or an exception in a ``with`` block) publishes
    nothing and deletes the files the transaction wrote.
    """

    def __init__(self, owner: OlympiaCatalog, txn: OlympiaTransaction) -> None:
        self.owner = owner
        self.olympia_transaction = txn
        #: Table commits staged from now on keep their requirements against
        #: the newest committed metadata when rebased (StagedCommit.strict).
        self.strict_requirements = False
        #: Files opened for writing by this transaction's tables and catalog, in order.
        self.written_files: list[str] = []
        #: Those of them that staged metadata says were added (:meth:`claim_files`).
        self.claimed_files: set[str] = set()
        self._tables: dict[tuple[str, str], TableState] = {}
        #: Called with the committed version once the commit stands.
        self._after_commit: list[Callable[[int], object]] = []
        #: Purges recorded once the transaction commits (purge_table).
        self.purges: list[purge.PurgeIntent] = []
        #: Purge records its registers hold back, deleted once it commits.
        self.held_purges: list[purge.PurgeRecord] = []
        self.catalog = TransactionCatalog(self)
        self.merge = IcebergMerge(self)
        set_merge = getattr(txn, "set_content_merge", None)
        if set_merge is not None:  # the core's merge hook (spec/transactions.md)
            set_merge(self.merge)

    # --- state ------------------------------------------------------------------

    @property
    def id(self) -> str:
        return self.olympia_transaction.id

    @property
    def isolation(self) -> str:
        return self.olympia_transaction.isolation

    @property
    def begin_version(self) -> int:
        return self.olympia_transaction.begin_version

    @property
    def status(self) -> str:
        """``open``, ``committed``, ``rolled_back`` or ``failed``."""
        return self.olympia_transaction.status

    @property
    def tables(self) -> dict[Identifier, TableState]:
        """What the transaction did to each table it touched, by identifier."""
        return {names.identifier(*k): v for k, v in self._tables.items()}

    def key_codec(self) -> KeyCodec:
        """The object key encoding of the catalog."""
        return self.olympia_transaction.keys

    @property
    def commit_info(self) -> CommitInfo | None:
        """The commit metadata that will be published with this transaction."""
        return self.olympia_transaction.commit_info

    def set_commit_info(
        self,
        message: str | None = None,
        author: str | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> None:
        """Replace the commit metadata published with this transaction
        (``olympia.Transaction.set_commit_info``).

        Raises:
            olympia.InvalidArgumentError: a value is not a string or too long.
        """
        self.olympia_transaction.set_commit_info(message, author, properties)

    def _state(self, namespace: str, name: str, location: str | None) -> TableState:
        """The state of table ``namespace.name``, made on first use from
        ``location``, its metadata location as this transaction sees it now:
        every write to a table makes its state first, so a table without one
        is as committed at the begin version."""
        key = (namespace, name)
        state = self._tables.get(key)
        if state is None:
            state = self._tables[key] = TableState(location)
        return state

    def _renamed(self, old: tuple[str, str], new: tuple[str, str]) -> None:
        if old in self._tables:
            self._tables[new] = self._tables.pop(old)

    def _dropped(self, key: tuple[str, str]) -> None:
        self._tables.pop(key, None)

    def restore(self) -> None:
        """After ``resume``: rebuild the per-table state and the list of files
        written, from the sidecar (:mod:`olympia.iceberg.sidecar`) when there is
        one, and from the olympia transaction's actions and staged metadata
        for any table the sidecar does not describe as staged now.

        Derived state has no staged commits (``recovered``): its new metadata
        files are the staged metadata file and its metadata log entries that
        the committed metadata lacks; its new manifest lists, manifests and
        data files those of the snapshots the staged metadata adds, data files
        only under the table's ``data/`` folder (files added with
        ``add_files`` elsewhere belong to the user).
        """
        staged = self.staged_locations()
        for record in self._read_sidecar():
            key = (record.namespace, record.name)
            state = TableState(
                record.base_location,
                list(record.commits),
                list(record.scans),
                metadata_files=list(record.metadata_files),
                reads=record.reads,
                reported_scans=list(record.reported_scans),
            )
            self._tables[key] = state
            now = staged.get(key, record.base_location)
            if now != record.staged_location and now is not None:
                # Staged after the sidecar was written (a process died between the two).
                state.recovered = True
                self.claim_files(self._new_files(state.base_location, now))
        for (namespace, name), location in staged.items():
            if (namespace, name) in self._tables or location is None:
                continue
            base = self.owner.committed_location(self.begin_version, namespace, name)
            state = self._state(namespace, name, base)
            if location == base:
                continue
            state.recovered = True
            self.claim_files(self._new_files(base, location))

    def staged_locations(self) -> dict[tuple[str, str], str | None]:
        """The metadata location each table written by the olympia transaction
        has staged now (None: dropped), from its write actions in order
        (without reading through the transaction, which a handle that can
        only roll back refuses)."""
        txn = self.olympia_transaction
        out: dict[tuple[str, str], str | None] = {}
        for action in txn.actions:
            if action.type not in (A.TABLE_CREATE, A.TABLE_UPDATE, A.TABLE_RENAME, A.TABLE_DROP):
                continue
            old = tuple(txn.keys.decode(action.object_key).parts)
            key = (old[0], old[1])
            if action.type == A.TABLE_DROP:
                out[key] = None
            elif action.type == A.TABLE_RENAME:
                moved = out.pop(key) if key in out else None
                if moved is None:
                    moved = self.owner.committed_location(self.begin_version, *key)
                out[(action.table.namespace, action.table.name)] = moved
                out[key] = None
            elif action.table.metadata_location:
                out[key] = action.table.metadata_location
        return out

    def _sidecar_location(self) -> str:
        return sidecar.location(self.owner.warehouse, self.id)

    def _read_sidecar(self) -> list[sidecar.TableRecord]:
        where = self._sidecar_location()
        try:
            with self.owner._load_file_io(location=where).new_input(where).open() as f:
                data = f.read()
        except FileNotFoundError:
            return []
        state = sidecar.load(data, where)
        self.claim_files(state.written_files)  # which of them were claimed is not recorded
        self.purges = list(state.purges)
        self.held_purges = list(state.held_purges)
        return state.tables

    def save_state(self) -> None:
        """Write the sidecar of a distributed transaction (no-op otherwise)."""
        if not self.olympia_transaction.distributed:
            return
        records = [
            sidecar.TableRecord(
                namespace,
                name,
                state.base_location,
                state.metadata_files[-1] if state.metadata_files else state.base_location,
                tuple(state.commits),
                tuple(state.scans),
                tuple(state.metadata_files),
                state.reads,
                tuple(state.reported_scans),
            )
            for (namespace, name), state in self._tables.items()
        ]
        where = self._sidecar_location()
        data = sidecar.dump(
            records, list(dict.fromkeys(self.written_files)), self.purges, self.held_purges
        )
        with self.owner._load_file_io(location=where).new_output(where).create(overwrite=True) as f:
            f.write(data)

    def _drop_state(self) -> None:
        if not self.olympia_transaction.distributed:
            return
        where = self._sidecar_location()
        with contextlib.suppress(OSError, ValueError):
            self.owner._load_file_io(location=where).delete(where)

    def _new_files(self, base_location: str | None, staged_location: str) -> list[str]:
        return added_files(self.owner, base_location, staged_location, metadata=True)

    # --- the Catalog's methods ----------------------------------------------------

    def create_namespace(
        self, namespace: str | Identifier, properties: Properties = EMPTY_DICT
    ) -> None:
        self.catalog.create_namespace(namespace, properties)

    def create_namespace_if_not_exists(
        self, namespace: str | Identifier, properties: Properties = EMPTY_DICT
    ) -> None:
        self.catalog.create_namespace_if_not_exists(namespace, properties)

    def drop_namespace(self, namespace: str | Identifier) -> None:
        self.catalog.drop_namespace(namespace)

    def namespace_exists(self, namespace: str | Identifier) -> bool:
        return self.catalog.namespace_exists(namespace)

    def list_namespaces(self, namespace: str | Identifier = ()) -> list[Identifier]:
        return self.catalog.list_namespaces(namespace)

    def load_namespace_properties(self, namespace: str | Identifier) -> Properties:
        return self.catalog.load_namespace_properties(namespace)

    def update_namespace_properties(
        self,
        namespace: str | Identifier,
        removals: set[str] | None = None,
        updates: Properties = EMPTY_DICT,
    ) -> PropertiesUpdateSummary:
        return self.catalog.update_namespace_properties(namespace, removals, updates)

    def create_table(
        self, identifier: str | Identifier, schema: Schema | pa.Schema, **kwargs: Any
    ) -> Table:
        return self.catalog.create_table(identifier, schema, **kwargs)

    def create_table_if_not_exists(
        self, identifier: str | Identifier, schema: Schema | pa.Schema, **kwargs: Any
    ) -> Table:
        return self.catalog.create_table_if_not_exists(identifier, schema, **kwargs)

    def create_table_transaction(
        self, identifier: str | Identifier, schema: Schema | pa.Schema, **kwargs: Any
    ) -> CreateTableTransaction:
        return self.catalog.create_table_transaction(identifier, schema, **kwargs)

    def load_table(self, identifier: str | Identifier) -> Table:
        return self.catalog.load_table(identifier)

    def register_table(
        self, identifier: str | Identifier, metadata_location: str, overwrite: bool = False
    ) -> Table:
        return self.catalog.register_table(identifier, metadata_location, overwrite)

    def rename_table(
        self, from_identifier: str | Identifier, to_identifier: str | Identifier
    ) -> Table:
        return self.catalog.rename_table(from_identifier, to_identifier)

    def drop_table(self, identifier: str | Identifier) -> None:
        self.catalog.drop_table(identifier)

    def purge_table(self, identifier: str | Identifier) -> None:
        self.catalog.purge_table(identifier)

    def table_exists(self, identifier: str | Identifier) -> bool:
        return self.catalog.table_exists(identifier)

    def list_tables(self, namespace: str | Identifier) -> list[Identifier]:
        return self.catalog.list_tables(namespace)

    def list_views(self, namespace: str | Identifier) -> list[Identifier]:
        return self.catalog.list_views(namespace)

    def view_exists(self, identifier: str | Identifier) -> bool:
        return self.catalog.view_exists(identifier)

    def load_view(self, identifier: str | Identifier) -> View:
        return self.catalog.load_view(identifier)

    def drop_view(self, identifier: str | Identifier) -> None:
        self.catalog.drop_view(identifier)

    def create_view(
        self,
        identifier: str | Identifier,
        schema: Schema | pa.Schema,
        view_version: ViewVersion,
        location: str | None = None,
        properties: Properties = EMPTY_DICT,
    ) -> View:
        return self.catalog.create_view(identifier, schema, view_version, location, properties)

    def register_view(self, identifier: str | Identifier, metadata_location: str) -> View:
        return self.catalog.register_view(identifier, metadata_location)

    def rename_view(
        self, from_identifier: str | Identifier, to_identifier: str | Identifier
    ) -> None:
        self.catalog.rename_view(from_identifier, to_identifier)

    def commit_view(
        self,
        identifier: str | Identifier,
        requirements: Sequence[views.AssertViewUUID],
        updates: Sequence[views.ViewUpdate],
    ) -> tuple[ViewMetadata, str]:
        return self.catalog.commit_view(identifier, requirements, updates)

    # --- ending -----------------------------------------------------------------------

    def distribute(self) -> str:
        """Persist the transaction so that ``OlympiaCatalog.resume(id)`` continues
        it in any process; returns its id (spec/iceberg.md §6)."""
        try:
            txn_id = self.olympia_transaction.distribute()
        except oe.CommitConflictError as exc:
            raise self.conflict(exc) from exc
        self.save_state()
        return txn_id

    def commit(self) -> int:
        """Publish every staged change in one catalog version; return it.

        Raises:
            CommitConflictException: a concurrent commit conflicts; nothing was
                published and the files this transaction wrote are deleted.
            CommitTimeoutException: the commit took longer than the catalog's
                commit time limit; nothing was published and the files this
                transaction wrote are deleted.
            olympia.CommitFailedError: storage failed while publishing; the
                outcome is unknown (the written files are kept).
        """
        try:
            version = self.olympia_transaction.commit()
        except oe.CommitTimeoutError as exc:  # nothing was published (§8.5)
            self._end_unpublished()
            raise CommitTimeoutException(str(exc)) from exc
        except oe.CommitConflictError as exc:
            if exc.rule not in _ANOTHER_PROCESS_HOLDS_IT:
                self._end_unpublished()
            raise self.conflict(exc) from exc
        except BaseException as exc:
            if exc is self.merge.failure:  # the hook failed the commit: nothing was published
                self._end_unpublished()
            raise
        self._drop_state()
        if self.merge.obsolete_files:
            self._after_commit.append(self._delete_obsolete)
        for intent in self.purges:
            self._after_commit.append(functools.partial(purge.record, self.owner, intent))
        if self.held_purges:
            held = list(self.held_purges)
            self._after_commit.append(lambda _version: purge.release(self.owner, held, self.id))
        for action in self._after_commit:
            try:
                action(version)
            except Exception:  # the commit stands; a leftover file is only an orphan
                logger.warning("cleanup after commit %s failed", version, exc_info=True)
        return version

    def conflict(self, exc: oe.CommitConflictError) -> CommitConflictException:
        """``exc`` as PyIceberg's ``CommitFailedException`` (itself if it is one)."""
        if isinstance(exc, CommitConflictException):
            return exc
        return CommitConflictException(
            str(exc),
            table=", ".join(".".join(k) for k in self._tables) or "-",
            version=exc.version,
            rule=exc.rule or "conflict",
        )

    def rollback(self) -> None:
        """Publish nothing; delete the metadata, manifest and data files this
        transaction wrote (none of them is referenced by a committed version).

        Raises:
            CommitConflictException: rule ``transaction-claimed``: another process
                is committing or rolling back this distributed transaction.
        """
        try:
            self.olympia_transaction.rollback()
        except oe.CommitConflictError as exc:
            raise self.conflict(exc) from exc
        self._end_unpublished()

    def _end_unpublished(self) -> None:
        """What a transaction that published nothing leaves behind goes: the
        files it wrote, the purges its registers held (spec/iceberg.md §4),
        its sidecar."""
        self._delete_written()
        if self.held_purges:
            try:
                purge.unhold(self.owner, self.held_purges, self.id)
            except Exception:  # a purge still held is only an orphan kept longer
                logger.warning("transaction %s could not give back its held purges", self.id)
            self.held_purges = []
        self._drop_state()

    def _delete_obsolete(self, _version: int) -> None:
        files = self.merge.obsolete_files
        io = self.owner._load_file_io(location=files[0])
        for path in dict.fromkeys(files):
            with contextlib.suppress(OSError, ValueError):
                delete_file(io, path)

    def claim_files(self, paths: Iterable[str]) -> None:
        """Record files that staged metadata says this transaction added (the
        files a REST client wrote, or those found again on resume): deleted
        with the written files, unless a committed version reads them."""
        paths = list(paths)
        self.written_files.extend(paths)
        self.claimed_files.update(paths)

    def _delete_written(self) -> None:
        """Delete the files this transaction wrote. Of the claimed ones
        (:meth:`claim_files`), keep any that the committed metadata of a table
        it touched reaches: a staged snapshot may list a file the table holds
        already as added (``add_files`` without its duplicate check, or a
        hostile REST client), and that file is the table's. Keep also any
        that storage says was written before the begin version was committed
        (what only an older version reads: a table dropped and created again
        at the same place, a snapshot expired from the table's metadata).
        When that cannot be told (the committed metadata or the begin
        version cannot be read), every claimed file is kept: a leftover file
        is an orphan, a deleted one lost data."""
        if not self.written_files:
            return
        io = self.owner._load_file_io(location=self.written_files[0])
        keep: set[str] = set()  # claimed files left in place
        if self.claimed_files:
            locations = self._committed_locations()
            committed = None if locations is None else purge.committed_files(self.owner, locations)
            since = self._begin_millis()
            if committed is None or since is None:
                logger.warning(
                    "transaction %s leaves the %d files its staged metadata names (orphans): "
                    "it cannot tell which of them a committed version reads, since more than "
                    "%d versions were committed after its begin version, or their metadata, "
                    "or when its begin version was committed, cannot be read",
                    self.id,
                    len(self.claimed_files),
                    _VERSIONS_SEARCHED,
                )
                keep = self.claimed_files
            else:
                keep = {
                    p for p in self.claimed_files if purge.normal_path(self.owner, p) in committed
                }
                # What older versions read (a table dropped and created again
                # at the same place, snapshots expired from the metadata) was
                # written before the begin version was committed.
                keep |= filetimes.written_before(io, sorted(self.claimed_files - keep), since)
        for path in dict.fromkeys(self.written_files):
            if path in keep:
                continue
            try:
                delete_file(io, path)
            except (OSError, ValueError):
                logger.debug("could not delete %s", path, exc_info=True)
        self.written_files.clear()
        self.claimed_files = set()

    def _begin_millis(self) -> int | None:
        """When the begin version was committed (its root's time), or None
        when its root cannot be read any more (expired)."""
        try:
            return self.owner.olympia.store.load_root(self.begin_version).created_at_millis
        except oe.OlympiaError:
            return None

    def _committed_locations(self) -> list[str] | None:
        """The committed metadata that may reach a claimed file: that of
        every table this transaction touched, as of its begin version and
        now, and every table metadata a version after the begin version
        committed for a table whose location holds a claimed file (what was
        committed meanwhile and dropped since: a table dropped or renamed, a
        snapshot expired). None when those versions cannot all be read (too
        many, or expired meanwhile)."""
        catalog = self.owner.olympia
        latest = catalog.version
        out = [s.base_location for s in self._tables.values() if s.base_location]
        for namespace, name in self._tables:
            now = self.owner.committed_location(latest, namespace, name)
            if now:
                out.append(now)
        if latest - self.begin_version > _VERSIONS_SEARCHED:
            return None
        try:
            infos = catalog.history(since=self.begin_version + 1)
        except oe.OlympiaError:
            return None
        if len(infos) != latest - self.begin_version:
            return None  # expired meanwhile: what they committed is unknown
        claimed = [n for n in map(self._normal, self.claimed_files) if n is not None]
        for info in infos:
            for action in info.actions:
                meanwhile = action.table.metadata_location
                if action.type in _TABLE_WRITES and meanwhile and meanwhile not in out:
                    try:
                        home = self._normal(self.owner.read_metadata(meanwhile).location)
                    except Exception:  # unreadable: it cannot be told what it reaches
                        return None
                    if home is not None and any(is_under(f, home) for f in claimed):
                        out.append(meanwhile)
        return out

    def _normal(self, location: str) -> str | None:
        return purge.normal_path(self.owner, location)

    def __enter__(self) -> IcebergTransaction:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if self.status != "open":
            return
        if exc_type is None:
            self.commit()
        else:
            self.rollback()

    def __repr__(self) -> str:
        return f"IcebergTransaction({self.id!r}, {self.status})"


__all__ = [
    "ICEBERG_FORMAT",
    "IcebergTransaction",
    "MetastoreCatalog",
    "OlympiaTable",
    "TableState",
    "TransactionCatalog",
    "translate_errors",
]
