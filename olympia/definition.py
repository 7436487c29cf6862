"""Catalog definitions: defaults and validation of ``create_catalog(**definition)``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from olympia.errors import InvalidArgumentError, InvalidDefinitionError
from olympia.keys import KeyCodec
from olympia.proto.objects_pb2 import CatalogDefinition
from olympia.validate import require_text_mapping, show

#: The newest format version (spec/format.md); new catalogs use it unless
#: created with ``format_version=1``, which older readers can still read.
FORMAT_VERSION = 2

DEFAULTS: dict[str, Any] = {
    "format_version": FORMAT_VERSION,
    "namespace_name_max_size": 64,
    "table_name_max_size": 128,
    "view_name_max_size": 128,
    "node_order": 128,
    "inline_value_max_bytes": 4096,
    "node_compression": "zstd",
    "default_isolation": "snapshot",
    "distributed_txn_ttl_millis": 24 * 3600 * 1000,
    "commit_time_limit_millis": 300_000,
    "expire_max_age_millis": 5 * 24 * 3600 * 1000,
    "expire_min_versions": 1,
}
#: The commit time limit of a catalog whose definition has none (written
#: before the field existed): spec/transactions.md §8.5.
DEFAULT_COMMIT_TIME_LIMIT_MILLIS = 300_000
#: The retention of expiration without options (spec/transactions.md §8.3)
#: in a catalog whose definition has none: versions younger than five days,
#: and at least the newest one, are kept.
DEFAULT_EXPIRE_MAX_AGE_MILLIS = 5 * 24 * 3600 * 1000
DEFAULT_EXPIRE_MIN_VERSIONS = 1
_RANGES = {
    "format_version": (1, FORMAT_VERSION),
    "namespace_name_max_size": (1, 1024),
    "table_name_max_size": (1, 1024),
    "view_name_max_size": (1, 1024),
    "node_order": (3, 65536),
    "inline_value_max_bytes": (0, 1 << 30),
    "distributed_txn_ttl_millis": (1, 1 << 62),
    "commit_time_limit_millis": (1, 1 << 62),
    "expire_max_age_millis": (1, 1 << 62),
    "expire_min_versions": (1, 1 << 62),
}
#: Fields a stored definition may leave absent (zero): they postdate catalogs
#: that are still read, and zero stands for a documented default.
_ABSENT_MEANS_DEFAULT = frozenset(
    {"commit_time_limit_millis", "expire_max_age_millis", "expire_min_versions"}
)
_CHOICES = {
    "node_compression": ("none", "zstd", "lz4"),
    "default_isolation": ("snapshot", "serializable"),
}
ISOLATION_LEVELS = _CHOICES["default_isolation"]


def build_definition(options: Mapping[str, Any]) -> CatalogDefinition:
    """A CatalogDefinition from keyword options over :data:`DEFAULTS`.

    Raises:
        InvalidDefinitionError: unknown option, wrong type or out of range.
    """
    unknown = set(options) - set(DEFAULTS) - {"properties"}
    if unknown:
        raise InvalidDefinitionError(
            f"unknown catalog definition option(s) {sorted(unknown)}; known: {sorted(DEFAULTS)} and 'properties'"
        )
    merged = {**DEFAULTS, **{k: v for k, v in options.items() if k != "properties"}}
    for name, (low, high) in _RANGES.items():
        value = merged[name]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise InvalidDefinitionError(
                f"catalog definition option {name!r} must be an integer in [{low}, {high}], "
                f"got {show(value)}"
            )
    for name, choices in _CHOICES.items():
        value = merged[name]
        if not isinstance(value, str) or value not in choices:
            raise InvalidDefinitionError(
                f"catalog definition option {name!r} must be one of {choices}, got {show(value)}"
            )
    try:
        props = require_text_mapping("properties", options.get("properties"))
    except InvalidArgumentError as exc:
        raise InvalidDefinitionError(f"catalog definition: {exc}") from None
    definition = CatalogDefinition(**merged)
    definition.properties.update(props)
    return definition


def commit_time_limit_millis(definition: CatalogDefinition) -> int:
    """The catalog's commit time limit ``L`` (spec/transactions.md §8.5)."""
    return int(definition.commit_time_limit_millis) or DEFAULT_COMMIT_TIME_LIMIT_MILLIS


def expire_retention(definition: CatalogDefinition) -> tuple[int, int]:
    """``(max age in milliseconds, minimum versions)``: what expiration
    without options keeps (spec/transactions.md §8.3, spec/format.md §7)."""
    return (
        int(definition.expire_max_age_millis) or DEFAULT_EXPIRE_MAX_AGE_MILLIS,
        int(definition.expire_min_versions) or DEFAULT_EXPIRE_MIN_VERSIONS,
    )


def stored_definition_problem(definition: CatalogDefinition) -> str | None:
    """What is wrong with a definition read from a root, or ``None``.

    A stored definition is taken as written: :data:`DEFAULTS` only fill in
    options at creation, never absent or zero fields of a stored definition
    (proto3 cannot tell the two apart). Every field must be in the range or
    among the choices that creation allows (spec/format.md §7).
    """
    if definition.format_version == 0:
        return "has no format_version"
    for name, (low, high) in _RANGES.items():
        if name == "format_version":
            continue  # a newer one is refused as unsupported, not as damage (§7)
        value = int(getattr(definition, name))
        if value == 0 and name in _ABSENT_MEANS_DEFAULT:
            continue
        if not low <= value <= high:
            return f"has {name} = {value}, outside [{low}, {high}]"
    for name, choices in _CHOICES.items():
        if getattr(definition, name) not in choices:
            return f"has {name} = {getattr(definition, name)!r}, not one of {choices}"
    return None


def key_codec(definition: CatalogDefinition) -> KeyCodec:
    """The object keys of a catalog with ``definition`` (spec/format.md §5)."""
    return KeyCodec(
        namespace_max=int(definition.namespace_name_max_size),
        table_max=int(definition.table_name_max_size),
        view_max=int(definition.view_name_max_size),
        compact=int(definition.format_version) >= 2,
    )
