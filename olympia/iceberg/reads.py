"""What a transaction read of a table's metadata, and the rules that judge it
when a concurrent commit changed the table (spec/iceberg.md §8, "Metadata
reads").

A read is recorded when a table loaded through a transaction is asked for a
piece of its metadata through its public accessors: a property by name (or
all of them, by iterating), the schema, the partition spec, the sort order,
the location, the current snapshot (the ``main`` branch), a branch or tag by
name, or every ref. PyIceberg's own writers read ``Table.metadata`` directly,
so an append records nothing and concurrent appends stay apart.

Two rules:

- ``metadata-read-changed`` (SERIALIZABLE): something the transaction read
  differs between the metadata it read (``base``) and the newest (``theirs``).
- ``lost-update`` (both levels): the transaction read a property, wrote it
  (set or removed it) and a concurrent commit changed it meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import RemovePropertiesUpdate, SetPropertiesUpdate, TableUpdate

from olympia.iceberg.errors import CommitConflictException

#: The pieces of metadata besides properties and refs that reads name.
SCHEMA = "schema"
SPEC = "partition spec"
SORT_ORDER = "sort order"
LOCATION = "location"
ITEMS = (SCHEMA, SPEC, SORT_ORDER, LOCATION)
#: Every ref (``refs()``, ``snapshots()``, ``history()``).
ALL_REFS = "*"


@dataclass
class MetadataReads:
    """The metadata reads of one table by one transaction."""

    properties: set[str] = field(default_factory=set)
    all_properties: bool = False
    items: set[str] = field(default_factory=set)
    refs: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.properties or self.all_properties or self.items or self.refs)

    def size(self) -> int:
        """How many reads are recorded (it grows with every new one)."""
        return len(self.properties) + self.all_properties + len(self.items) + len(self.refs)

    def to_json(self) -> dict[str, Any]:
        return {
            "properties": sorted(self.properties),
            "all-properties": self.all_properties,
            "items": sorted(self.items),
            "refs": sorted(self.refs),
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> MetadataReads:
        items = set(doc["items"])
        if not items <= set(ITEMS):
            raise ValueError(f"unknown metadata reads {sorted(items - set(ITEMS))}")
        return cls(
            set(map(str, doc["properties"])),
            bool(doc["all-properties"]),
            items,
            set(map(str, doc["refs"])),
        )


class RecordingProperties(dict[str, str]):
    """A table's properties that tell ``note`` which of them were read:
    ``note(key)`` for one, ``note(None)`` for all of them."""

    def __init__(self, properties: Mapping[str, str], note: Callable[[str | None], None]) -> None:
        super().__init__(properties)
        self._note = note

    def __getitem__(self, key: str) -> str:
        self._note(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self._note(key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self._note(key)
        return super().__contains__(key)

    def __iter__(self) -> Iterator[str]:
        self._note(None)
        return super().__iter__()

    def __len__(self) -> int:
        self._note(None)
        return super().__len__()

    def keys(self) -> Any:
        self._note(None)
        return super().keys()

    def values(self) -> Any:
        self._note(None)
        return super().values()

    def items(self) -> Any:
        self._note(None)
        return super().items()

    def __eq__(self, other: object) -> bool:
        self._note(None)
        return super().__eq__(other)

    __hash__ = None

    def __repr__(self) -> str:
        self._note(None)
        return super().__repr__()


def _ref_heads(metadata: TableMetadata) -> dict[str, int]:
    return {name: ref.snapshot_id for name, ref in metadata.refs.items()}


def changed_reads(base: TableMetadata, theirs: TableMetadata, reads: MetadataReads) -> list[str]:
    """The pieces of ``reads`` that differ between ``base`` and ``theirs``, named."""
    out = []
    if reads.all_properties:
        keys: Iterable[str] = set(base.properties) | set(theirs.properties)
    else:
        keys = reads.properties
    for key in sorted(keys):
        if base.properties.get(key) != theirs.properties.get(key):
            out.append(f"property {key!r}")
    if SCHEMA in reads.items and base.schema() != theirs.schema():
        out.append(f"the schema (id {base.current_schema_id}, now {theirs.current_schema_id})")
    if SPEC in reads.items and base.spec() != theirs.spec():
        out.append(f"the partition spec (id {base.default_spec_id}, now {theirs.default_spec_id})")
    if SORT_ORDER in reads.items and base.sort_order_by_id(
        base.default_sort_order_id
    ) != theirs.sort_order_by_id(theirs.default_sort_order_id):
        out.append(
            f"the sort order (id {base.default_sort_order_id}, now {theirs.default_sort_order_id})"
        )
    if LOCATION in reads.items and base.location != theirs.location:
        out.append(f"the location ({base.location}, now {theirs.location})")
    before, after = _ref_heads(base), _ref_heads(theirs)
    names = set(before) | set(after) if ALL_REFS in reads.refs else reads.refs - {ALL_REFS}
    for name in sorted(names):
        if before.get(name) != after.get(name):
            out.append(f"ref {name!r} (snapshot {before.get(name)}, now {after.get(name)})")
    return out


def written_properties(updates: Iterable[TableUpdate]) -> set[str]:
    """The property keys that ``updates`` set or remove."""
    out: set[str] = set()
    for update in updates:
        if isinstance(update, SetPropertiesUpdate):
            out |= set(update.updates)
        elif isinstance(update, RemovePropertiesUpdate):
            out |= set(update.removals)
    return out


def check_metadata_reads(
    table: str,
    base: TableMetadata,
    theirs: TableMetadata,
    reads: MetadataReads,
    updates: Sequence[TableUpdate],
    *,
    isolation: str,
    version: int | None,
) -> None:
    """Refuse a transaction whose metadata reads a concurrent commit changed
    (SERIALIZABLE) or whose read-modify-write of a property it lost (both).

    Raises:
        CommitConflictException: rule ``metadata-read-changed`` or ``lost-update``.
    """
    if not reads:
        return
    changed = changed_reads(base, theirs, reads)
    if not changed:
        return
    where = f"version {version}" if version is not None else "the table's newer metadata"
    lost = [
        key
        for key in sorted(written_properties(updates))
        if (reads.all_properties or key in reads.properties)
        and base.properties.get(key) != theirs.properties.get(key)
    ]
    if lost:
        rule = "lost-update"
        detail = (
            f"the transaction read and wrote property {lost[0]!r}, which {where} changed "
            f"({base.properties.get(lost[0])!r} -> {theirs.properties.get(lost[0])!r})"
        )
    elif isolation == "serializable":
        rule = "metadata-read-changed"
        detail = f"the transaction read {changed[0]} of the table, which {where} changed"
    else:
        return
    raise CommitConflictException(
        f"Commit to table {table} conflicts with {where} (rule {rule}): {detail}",
        table=table,
        version=version,
        rule=rule,
    )
