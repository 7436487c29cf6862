"""Applying a commit's updates to table metadata as Iceberg's own catalogs
do (spec/iceberg.md §5, §10).

PyIceberg's ``update_table_metadata`` keeps the id a client proposes for a
new schema, partition spec or sort order and refuses one that another
object already has. Iceberg's Java ``TableMetadata.Builder``, which REST
clients are written against, treats the proposed id as a hint: an
``add-schema``, ``add-spec`` or ``add-sort-order`` reuses the id of an equal
object the table already has, else takes the highest id + 1. So two
clients that each propose "the next id" for different objects both commit.
:func:`apply_updates` does this, then lets ``update_table_metadata`` apply
the result. It also upgrades tables to format version 3, which PyIceberg 0.12
refuses, and keeps their row lineage, which PyIceberg 0.12 checks only in part.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.exceptions import ValidationError
from pyiceberg.table.metadata import (
    SUPPORTED_TABLE_FORMAT_VERSION,
    TableMetadata,
    TableMetadataUtil,
)
from pyiceberg.table.update import (
    AddPartitionSpecUpdate,
    AddSchemaUpdate,
    AddSnapshotUpdate,
    AddSortOrderUpdate,
    RemovePartitionSpecsUpdate,
    RemoveSchemasUpdate,
    SetCurrentSchemaUpdate,
    SetDefaultSortOrderUpdate,
    SetDefaultSpecUpdate,
    TableUpdate,
    UpgradeFormatVersionUpdate,
    _apply_table_update,
    _TableMetadataUpdateContext,
    update_table_metadata,
)
from pyiceberg.transforms import BucketTransform, TruncateTransform

from olympia.iceberg.metadata import INITIAL_ROW_ID, ROW_LINEAGE_FORMAT_VERSION, with_row_lineage

#: The highest format version olympia creates, upgrades to and commits to.
MAX_FORMAT_VERSION = 3

#: ``set-current-schema``, ``set-default-spec`` and ``set-default-sort-order``
#: with this id mean the object the commit added last.
LAST_ADDED = -1

#: The id of the unsorted order, the first id of any other sort order, the first spec id.
UNSORTED_ORDER_ID = 0
FIRST_SORT_ORDER_ID = 1
FIRST_SPEC_ID = 0


@dataclass
class _Ids:
    """The objects of one kind (schemas, specs or sort orders) by id, as a
    commit's updates add them, and the ids the additions got."""

    what: str
    objects: dict[int, Any]
    first: int
    same: Callable[[Any, Any], bool]
    last_added: int | None = None
    #: id proposed by an update of the commit -> id assigned.
    assigned: dict[int, int] = field(default_factory=dict)

    def add(self, obj: Any, proposed: int, fresh: int | None = None) -> tuple[int, bool]:
        """The id ``obj`` gets and whether it is new to the table: the id of
        an equal object, else ``fresh`` or the highest id + 1 (at least ``first``)."""
        found = next((i for i, other in self.objects.items() if self.same(obj, other)), None)
        new = found is None
        if found is None:
            found = (
                fresh if fresh is not None else max([self.first, *(i + 1 for i in self.objects)])
            )
            self.objects[found] = obj
        self.assigned[proposed] = found
        self.last_added = found
        return found, new

    def resolve(self, wanted: int) -> int:
        """The id a ``set-*`` update names: -1 is the one added last; an id a
        preceding ``add-*`` of the commit proposed is the id it was assigned."""
        if wanted == LAST_ADDED:
            if self.last_added is None:
                raise ValueError(f"Cannot set the last added {self.what}: no {self.what} was added")
            return self.last_added
        return self.assigned.get(wanted, wanted)

    def remove(self, ids: Iterable[int]) -> None:
        for i in ids:
            self.objects.pop(i, None)


def assign_ids(base: TableMetadata, updates: Iterable[TableUpdate]) -> tuple[TableUpdate, ...]:
    """``updates`` (made for ``base``) with the ids Iceberg's Java catalog assigns.

    An ``add-schema`` / ``add-spec`` / ``add-sort-order`` gets the id of an
    equal schema (same fields and identifier fields) / spec (same source
    fields, transforms and names) / sort order (same fields) of the table or
    of a preceding update, and is dropped, as it adds nothing; else the
    highest id + 1 (a spec's ids start at 0, a sort order's at 1; the
    unsorted order is always 0; a schema's id is at least the current
    schema's). ``set-current-schema`` / ``set-default-spec`` /
    ``set-default-sort-order`` with -1 name the id the last such addition
    got (new or reused); one that names an id a preceding addition proposed
    names the id it got.

    Raises:
        ValueError: a ``set-*`` update names -1 and nothing of its kind was added.
    """
    schemas = _Ids(
        "schema",
        {s.schema_id: s for s in base.schemas},
        base.current_schema_id,
        lambda a, b: a == b,  # Schema equality: fields and identifier fields, not the id
    )
    specs = _Ids(
        "partition spec",
        {s.spec_id: s for s in base.partition_specs},
        FIRST_SPEC_ID,
        lambda a, b: a.compatible_with(b),
    )
    orders = _Ids(
        "sort order",
        {o.order_id: o for o in base.sort_orders},
        FIRST_SORT_ORDER_ID,
        lambda a, b: a.fields == b.fields,
    )
    out: list[TableUpdate] = []
    for update in updates:
        if isinstance(update, AddSchemaUpdate):
            schema = update.schema_
            got, new = schemas.add(schema, schema.schema_id)
            if new:
                out.append(_with(update, "schema_", schema, "schema_id", got))
        elif isinstance(update, AddPartitionSpecUpdate):
            spec = update.spec
            got, new = specs.add(spec, spec.spec_id)
            if new:
                out.append(_with(update, "spec", spec, "spec_id", got))
        elif isinstance(update, AddSortOrderUpdate):
            order = update.sort_order
            fresh = UNSORTED_ORDER_ID if order.is_unsorted else None
            got, new = orders.add(order, order.order_id, fresh)
            if new:
                out.append(_with(update, "sort_order", order, "order_id", got))
        elif isinstance(update, SetCurrentSchemaUpdate):
            out.append(_set(update, "schema_id", schemas.resolve(update.schema_id)))
        elif isinstance(update, SetDefaultSpecUpdate):
            out.append(_set(update, "spec_id", specs.resolve(update.spec_id)))
        elif isinstance(update, SetDefaultSortOrderUpdate):
            out.append(_set(update, "sort_order_id", orders.resolve(update.sort_order_id)))
        elif isinstance(update, RemoveSchemasUpdate):
            schemas.remove(update.schema_ids)
            out.append(update)
        elif isinstance(update, RemovePartitionSpecsUpdate):
            specs.remove(update.spec_ids)
            out.append(update)
        else:
            out.append(update)
    return tuple(out)


def _with(update: TableUpdate, attr: str, obj: Any, id_attr: str, new_id: int) -> TableUpdate:
    if getattr(obj, id_attr) == new_id:
        return update
    return update.model_copy(update={attr: obj.model_copy(update={id_attr: new_id})})


def _set(update: TableUpdate, attr: str, new_id: int) -> TableUpdate:
    return update if getattr(update, attr) == new_id else update.model_copy(update={attr: new_id})


class _UpgradeBeyondPyIceberg(UpgradeFormatVersionUpdate):
    """An ``upgrade-format-version`` to a version that PyIceberg 0.12 applies
    to no table (3): a type of its own, so that only olympia's commits take
    :func:`_upgrade` (PyIceberg's own updates keep PyIceberg's handler)."""


@_apply_table_update.register(_UpgradeBeyondPyIceberg)
def _upgrade(
    update: _UpgradeBeyondPyIceberg,
    base_metadata: TableMetadata,
    context: _TableMetadataUpdateContext,
) -> TableMetadata:
    version = update.format_version
    if version > MAX_FORMAT_VERSION:
        raise ValueError(f"Unsupported table format version: {version}")
    if version < base_metadata.format_version:
        raise ValueError(f"Cannot downgrade v{base_metadata.format_version} table to v{version}")
    if version == base_metadata.format_version:
        return base_metadata
    upgraded = base_metadata.model_copy(update={"format_version": version})
    context.add_update(update)
    # Row lineage starts at row id 0 (the table's earlier snapshots have no row ids).
    return with_row_lineage(TableMetadataUtil._construct_without_validation(upgraded))


def _for_pyiceberg(update: TableUpdate) -> TableUpdate:
    if (
        isinstance(update, UpgradeFormatVersionUpdate)
        and update.format_version > SUPPORTED_TABLE_FORMAT_VERSION
    ):
        return _UpgradeBeyondPyIceberg.model_validate({"format-version": update.format_version})
    return update


def row_lineage(base: TableMetadata, updates: Iterable[TableUpdate]) -> int | None:
    """Check the ``add-snapshot`` updates of a format-version 3 table as
    Iceberg's Java catalog does (PyIceberg 0.12 checks only part of it) and
    return the table's ``next-row-id`` after them (None: below version 3).

    A snapshot added to a version-3 table needs ``first-row-id`` at or above
    the table's ``next-row-id``, ``added-rows``, and a sequence number above
    the table's last one unless it has no parent. The table's ``next-row-id``
    becomes the snapshot's ``first-row-id`` + ``added-rows``: the table's old
    ``next-row-id`` + ``added-rows`` in every commit of Iceberg's clients,
    which take ``first-row-id`` from it; a higher ``first-row-id`` leaves the
    row ids between unused rather than handing them out twice. The table's
    version is followed through the ``upgrade-format-version`` updates.

    Raises:
        ValueError: a snapshot breaks one of these rules.
    """
    version: int = base.format_version
    next_row_id = getattr(base, "next_row_id", None)
    last_sequence_number = getattr(base, "last_sequence_number", 0)  # not on version 1
    for update in updates:
        if isinstance(update, UpgradeFormatVersionUpdate):
            version = max(version, update.format_version)
        if not isinstance(update, AddSnapshotUpdate):
            continue
        snapshot = update.snapshot
        if version < ROW_LINEAGE_FORMAT_VERSION:
            last_sequence_number = snapshot.sequence_number or last_sequence_number
            continue
        what = f"Cannot add snapshot {snapshot.snapshot_id} to a format-version {version} table"
        if next_row_id is None:
            next_row_id = INITIAL_ROW_ID
        if snapshot.first_row_id is None:
            raise ValueError(f"{what}: it has no first-row-id")
        if snapshot.first_row_id < next_row_id:
            raise ValueError(
                f"{what}: its first-row-id {snapshot.first_row_id} is below the table's "
                f"next-row-id {next_row_id}"
            )
        if snapshot.added_rows is None or snapshot.added_rows < 0:
            raise ValueError(f"{what}: it has no added-rows (a count of rows is required)")
        sequence_number = snapshot.sequence_number
        if (
            sequence_number is not None
            and sequence_number <= last_sequence_number
            and snapshot.parent_snapshot_id is not None
        ):
            raise ValueError(
                f"{what}: its sequence number {sequence_number} is not above the table's "
                f"last sequence number {last_sequence_number}"
            )
        next_row_id = snapshot.first_row_id + snapshot.added_rows
        last_sequence_number = sequence_number or last_sequence_number
    if version < ROW_LINEAGE_FORMAT_VERSION:
        return None
    return INITIAL_ROW_ID if next_row_id is None else next_row_id


def apply_updates(
    base: TableMetadata,
    updates: Iterable[TableUpdate],
    *,
    enforce_validation: bool = False,
    metadata_location: str | None = None,
) -> TableMetadata:
    """``base`` with ``updates`` applied: PyIceberg's ``update_table_metadata``
    (same arguments) after :func:`assign_ids`, with ``upgrade-format-version``
    to 3 and the row lineage of version-3 tables (:func:`row_lineage`).

    Also checks every partition spec and sort order the updates add against
    the resulting current schema (a source column that exists, of a type its
    transform takes), made default or not, as Iceberg's Java builder binds
    them; PyIceberg checks only the default ones.

    Raises:
        ValueError: an update cannot be applied (as ``update_table_metadata``;
            also for what PyIceberg's builder reports as ``StopIteration``,
            ``LookupError`` or ``AttributeError`` on such updates).
        pyiceberg.exceptions.ValidationError: an added spec or sort order
            does not fit the current schema.
    """
    base = with_row_lineage(base)
    assigned = assign_ids(base, updates)
    next_row_id = row_lineage(base, assigned)
    try:
        metadata = update_table_metadata(
            base_metadata=base,
            updates=tuple(_for_pyiceberg(u) for u in assigned),
            enforce_validation=enforce_validation,
            metadata_location=metadata_location,
        )
        check_new_specs_and_orders(base, metadata)
    except StopIteration:
        # PyIceberg looks up the current schema, spec or sort order with next().
        raise ValueError(
            "the updates leave the table without a current schema, partition spec or sort "
            "order (a new table's updates must add and set each of them)"
        ) from None
    except (LookupError, AttributeError) as exc:
        raise ValueError(f"the updates cannot be applied ({type(exc).__name__}: {exc})") from None
    if next_row_id is not None and getattr(metadata, "next_row_id", None) != next_row_id:
        metadata = metadata.model_copy(update={"next_row_id": next_row_id})
    return metadata


def check_new_specs_and_orders(base: TableMetadata | None, metadata: TableMetadata) -> None:
    """Raise ValidationError for a partition spec or sort order that
    ``metadata`` has and ``base`` (None: a new table) has not, when it does
    not fit the current schema of ``metadata`` (a missing source column, a
    type its transform does not take) or has a bucket count or truncate
    width below 1."""
    schema = metadata.schema()
    old_specs = set() if base is None else {spec.spec_id for spec in base.partition_specs}
    for spec in metadata.partition_specs:
        if spec.spec_id not in old_specs:
            spec.check_compatible(schema)
            _check_widths(spec.fields, f"partition spec {spec.spec_id}")
    old_orders = set() if base is None else {order.order_id for order in base.sort_orders}
    for order in metadata.sort_orders:
        if order.order_id not in old_orders:
            order.check_compatible(schema)
            _check_widths(order.fields, f"sort order {order.order_id}")


def _check_widths(fields: Iterable[Any], what: str) -> None:
    for f in fields:
        transform = f.transform
        if isinstance(transform, BucketTransform) and transform.num_buckets < 1:
            raise ValidationError(f"{what}: {transform} needs at least 1 bucket")
        if isinstance(transform, TruncateTransform) and transform.width < 1:
            raise ValidationError(f"{what}: {transform} needs a width of at least 1")


__all__ = [
    "LAST_ADDED",
    "MAX_FORMAT_VERSION",
    "apply_updates",
    "assign_ids",
    "check_new_specs_and_orders",
    "row_lineage",
]
