"""Iceberg view metadata: created and changed the way Iceberg's reference
implementation does it (spec/iceberg.md §6).

A client proposes schema and version ids; the catalog assigns them. A schema
equal to a known one gets that one's id, a new one the highest id plus one
(starting at 0). A view version equal to a known one (same representations,
default catalog, default namespace and schema id) gets that one's id, a new
one the higher of its proposed id and the highest known id plus one. ``-1``
names the schema or version added last by the same change. Only the newest
``version.history.num-entries`` versions (default 10), the versions the
change added and the current one are kept.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Annotated, Literal
from uuid import uuid4

from pydantic import BaseModel, ConfigDict, Field
from pyiceberg.schema import Schema, assign_fresh_schema_ids
from pyiceberg.types import ListType, MapType, NestedField, StructType
from pyiceberg.view.metadata import ViewHistoryEntry, ViewMetadata, ViewVersion

#: The property that caps how many versions a view keeps.
VERSION_HISTORY_SIZE = "version.history.num-entries"
VERSION_HISTORY_SIZE_DEFAULT = 10
#: ``true`` lets a new version drop a SQL dialect the current version has.
REPLACE_DROP_DIALECT_ALLOWED = "replace.drop-dialect.allowed"
#: Where a view's metadata files go instead of ``<location>/metadata``.
WRITE_METADATA_PATH = "write.metadata.path"
#: The format versions of view metadata this catalog writes.
SUPPORTED_FORMAT_VERSIONS = (1,)
#: An id that names what the same change added last.
LAST_ADDED = -1


class InvalidViewError(ValueError):
    """A view change that cannot be applied; nothing was written. The REST
    server answers it with 400 ``IllegalArgumentException``, which Iceberg's
    Java client raises as ``IllegalArgumentException``."""


class ViewRequirementFailed(ValueError):
    """A requirement of a view commit does not hold (REST 409)."""


# --- the view updates and requirements of the REST specification ------------


class _Model(BaseModel):
    model_config = ConfigDict(populate_by_name=True, frozen=True, extra="ignore")


class AssignUUID(_Model):
    action: Literal["assign-uuid"]
    uuid: str


class UpgradeFormatVersion(_Model):
    action: Literal["upgrade-format-version"]
    format_version: int = Field(alias="format-version")


class AddSchema(_Model):
    action: Literal["add-schema"]
    view_schema: Schema = Field(alias="schema")
    last_column_id: int | None = Field(alias="last-column-id", default=None)


class SetLocation(_Model):
    action: Literal["set-location"]
    location: str


class SetProperties(_Model):
    action: Literal["set-properties"]
    updates: dict[str, str]


class RemoveProperties(_Model):
    action: Literal["remove-properties"]
    removals: list[str]


class AddViewVersion(_Model):
    action: Literal["add-view-version"]
    view_version: ViewVersion = Field(alias="view-version")


class SetCurrentViewVersion(_Model):
    action: Literal["set-current-view-version"]
    view_version_id: int = Field(alias="view-version-id")


ViewUpdate = Annotated[
    AssignUUID
    | UpgradeFormatVersion
    | AddSchema
    | SetLocation
    | SetProperties
    | RemoveProperties
    | AddViewVersion
    | SetCurrentViewVersion,
    Field(discriminator="action"),
]


class AssertViewUUID(_Model):
    type: Literal["assert-view-uuid"]
    uuid: str

    def validate_on(self, metadata: ViewMetadata) -> None:
        if metadata.view_uuid != self.uuid:
            raise ViewRequirementFailed(
                f"Requirement failed: view UUID does not match: expected {self.uuid} "
                f"!= {metadata.view_uuid}"
            )


ViewRequirement = Annotated[AssertViewUUID, Field(discriminator="type")]


# --- the builder -------------------------------------------------------------


def _dialects(version: ViewVersion) -> list[str]:
    return [r.root.dialect.lower() for r in version.representations]


def _same_version(one: ViewVersion, two: ViewVersion) -> bool:
    return (
        one.representations == two.representations
        and one.default_catalog == two.default_catalog
        and tuple(one.default_namespace) == tuple(two.default_namespace)
        and one.schema_id == two.schema_id
    )


def _history_size(properties: Mapping[str, str]) -> int:
    raw = properties.get(VERSION_HISTORY_SIZE)
    if raw is None:
        return VERSION_HISTORY_SIZE_DEFAULT
    try:
        size = int(raw)
    except ValueError:
        raise InvalidViewError(f"{VERSION_HISTORY_SIZE} must be an integer, got {raw!r}") from None
    if size <= 0:
        raise InvalidViewError(f"{VERSION_HISTORY_SIZE} must be positive but was {size}")
    return size


class ViewBuilder:
    """View metadata under change: start from a view's current metadata (or
    none, to create one), apply changes, then :meth:`build`."""

    def __init__(self, base: ViewMetadata | None = None) -> None:
        self._base = base
        self.uuid = base.view_uuid if base is not None else None
        self.format_version: int = base.format_version if base is not None else 1
        self.location = base.location if base is not None else None
        self.schemas: dict[int, Schema] = {s.schema_id: s for s in base.schemas} if base else {}
        self.versions: dict[int, ViewVersion] = (
            {v.version_id: v for v in base.versions} if base else {}
        )
        self.current = base.current_version_id if base is not None else None
        self.log = list(base.version_log) if base is not None else []
        self.properties = dict(base.properties) if base is not None else {}
        self._last_schema: int | None = None
        self._last_version: int | None = None
        self._added: list[int] = []
        self._history_entry: ViewHistoryEntry | None = None

    # -- the changes ------------------------------------------------------------

    def assign_uuid(self, uuid: str) -> ViewBuilder:
        if self.uuid is not None and self.uuid != uuid:
            raise InvalidViewError(f"Cannot reassign uuid: {self.uuid} to {uuid}")
        self.uuid = uuid
        return self

    def upgrade_format_version(self, version: int) -> ViewBuilder:
        if version < self.format_version:
            raise InvalidViewError(f"Cannot downgrade v{self.format_version} view to v{version}")
        if version not in SUPPORTED_FORMAT_VERSIONS:
            raise InvalidViewError(f"Unsupported view format version: v{version}")
        self.format_version = version
        return self

    def set_location(self, location: str) -> ViewBuilder:
        if not location or not location.strip():
            raise InvalidViewError("Invalid view location: empty")
        self.location = location.rstrip("/")
        return self

    def set_properties(self, updates: Mapping[str, str]) -> ViewBuilder:
        self.properties.update(updates)
        return self

    def remove_properties(self, removals: Iterable[str]) -> ViewBuilder:
        for key in removals:
            self.properties.pop(key, None)
        return self

    def add_schema(self, schema: Schema) -> int:
        schema = with_valid_field_ids(schema)
        new_id = 0
        for known_id, known in self.schemas.items():
            if known == schema:
                self._last_schema = known_id
                return known_id
            new_id = max(new_id, known_id + 1)
        self.schemas[new_id] = schema.model_copy(update={"schema_id": new_id})
        self._last_schema = new_id
        return new_id

    def add_version(self, version: ViewVersion) -> int:
        new_id = version.version_id
        for known_id, known in self.versions.items():
            if _same_version(known, version):
                self._last_version = known_id
                return known_id
            if known_id >= new_id:
                new_id = known_id + 1
        schema_id = version.schema_id
        if schema_id == LAST_ADDED:
            if self._last_schema is None:
                raise InvalidViewError("Cannot set last added schema: no schema has been added")
            schema_id = self._last_schema
        if schema_id not in self.schemas:
            raise InvalidViewError(f"Cannot add version with unknown schema: {schema_id}")
        seen: set[str] = set()
        for dialect in _dialects(version):
            if dialect in seen:
                raise InvalidViewError(
                    f"Invalid view version: Cannot add multiple queries for dialect {dialect}"
                )
            seen.add(dialect)
        self.versions[new_id] = version.model_copy(
            update={"version_id": new_id, "schema_id": schema_id}
        )
        self._added.append(new_id)
        self._last_version = new_id
        return new_id

    def set_current_version(self, version_id: int) -> ViewBuilder:
        if version_id == LAST_ADDED:
            if self._last_version is None:
                raise InvalidViewError("Cannot set last version: no version has been added")
            version_id = self._last_version
        if version_id not in self.versions:
            raise InvalidViewError(f"Cannot set current version to unknown version: {version_id}")
        if version_id == self.current:
            return self
        self.current = version_id
        stamp = (
            self.versions[version_id].timestamp_ms
            if version_id in self._added
            else int(time.time() * 1000)
        )
        self._history_entry = ViewHistoryEntry.model_validate(
            {"timestamp-ms": stamp, "version-id": version_id}
        )
        return self

    def set_current(self, version: ViewVersion, schema: Schema) -> ViewBuilder:
        """Add ``schema`` and ``version`` (on that schema) and make it current."""
        schema_id = self.add_schema(schema)
        return self.set_current_version(
            self.add_version(version.model_copy(update={"schema_id": schema_id}))
        )

    def apply(self, updates: Sequence[ViewUpdate]) -> ViewBuilder:
        for update in updates:
            if isinstance(update, AssignUUID):
                self.assign_uuid(update.uuid)
            elif isinstance(update, UpgradeFormatVersion):
                self.upgrade_format_version(update.format_version)
            elif isinstance(update, AddSchema):
                self.add_schema(update.view_schema)
            elif isinstance(update, SetLocation):
                self.set_location(update.location)
            elif isinstance(update, SetProperties):
                self.set_properties(update.updates)
            elif isinstance(update, RemoveProperties):
                self.remove_properties(update.removals)
            elif isinstance(update, AddViewVersion):
                self.add_version(update.view_version)
            else:
                self.set_current_version(update.view_version_id)
        return self

    # -- the result --------------------------------------------------------------

    def build(self) -> ViewMetadata:
        if self.location is None:
            raise InvalidViewError("Invalid view location: null")
        if self.current is None:
            raise InvalidViewError("Cannot create view without specifying a current version")
        log = list(self.log)
        if self._history_entry is not None:
            log.append(self._history_entry)
        current = self.versions[self.current]
        previous = None if self._base is None else self.versions.get(self._base.current_version_id)
        allowed = self.properties.get(REPLACE_DROP_DIALECT_ALLOWED, "false").lower() == "true"
        if previous is not None and previous is not current and not allowed:
            before, after = set(_dialects(previous)), set(_dialects(current))
            if not before <= after:
                raise InvalidViewError(
                    f"Cannot replace view due to loss of view dialects "
                    f"({REPLACE_DROP_DIALECT_ALLOWED}=false):\n"
                    f"Previous dialects: {sorted(before)}\nNew dialects: {sorted(after)}"
                )
        keep = max(len({*self._added, self.current}), _history_size(self.properties))
        versions = self.versions
        if len(versions) > keep:
            kept = set(sorted(versions, reverse=True)[:keep])
            if self.current not in kept:
                kept.discard(min(kept))
                kept.add(self.current)
            versions = {i: v for i, v in versions.items() if i in kept}
            retained: list[ViewHistoryEntry] = []
            for entry in log:
                # The history is the unbroken run of entries of kept versions.
                retained = [*retained, entry] if entry.version_id in versions else []
            log = retained
        return ViewMetadata.model_validate(
            {
                "view-uuid": self.uuid if self.uuid is not None else str(uuid4()),
                "format-version": self.format_version,
                "location": self.location,
                "schemas": list(self.schemas.values()),
                "current-version-id": self.current,
                "versions": [versions[i] for i in sorted(versions)],
                "version-log": log,
                "properties": self.properties,
            }
        )


def _field_ids(fields: Iterable[NestedField]) -> Iterator[int]:
    for f in fields:
        yield f.field_id
        kind = f.field_type
        if isinstance(kind, StructType):
            yield from _field_ids(kind.fields)
        elif isinstance(kind, ListType):
            yield from _field_ids([kind.element_field])
        elif isinstance(kind, MapType):
            yield from _field_ids([kind.key_field, kind.value_field])


def with_valid_field_ids(schema: Schema) -> Schema:
    """``schema`` itself when its field ids are positive and distinct (a
    client's ids are kept, as Iceberg keeps them); otherwise the schema with
    ids 1..n assigned as PyIceberg's REST client assigns them: a schema
    converted from pyarrow has every id -1, which no reader can resolve."""
    ids = list(_field_ids(schema.fields))
    if all(i > 0 for i in ids) and len(set(ids)) == len(ids):
        return schema
    return assign_fresh_schema_ids(schema)


def new_view_metadata(
    location: str,
    schema: Schema,
    version: ViewVersion,
    properties: Mapping[str, str],
) -> ViewMetadata:
    """The metadata of a new view: ``version`` on ``schema``, ids assigned."""
    builder = ViewBuilder().assign_uuid(str(uuid4())).set_location(location)
    return builder.set_properties(properties).set_current(version, schema).build()


def metadata_file_number(metadata_location: str) -> int:
    """The counter at the start of a metadata file's name, ``-1`` if none."""
    name = metadata_location.rsplit("/", 1)[-1]
    head = name.split("-", 1)[0]
    return int(head) if head.isdigit() else -1


def new_metadata_location(metadata: ViewMetadata, previous: str | None) -> str:
    """Where the next metadata file of a view goes: under
    ``write.metadata.path`` if set, else ``<location>/metadata``; its name
    counts on from ``previous``."""
    number = 0 if previous is None else metadata_file_number(previous) + 1
    folder = metadata.properties.get(WRITE_METADATA_PATH)
    folder = folder.rstrip("/") if folder else f"{metadata.location}/metadata"
    return f"{folder}/{number:05d}-{uuid4()}.metadata.json"
