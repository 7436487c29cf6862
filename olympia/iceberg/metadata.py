"""Table metadata as olympia writes it, in files and in REST responses, for
every format version: 1, 2 and 3 (spec/iceberg.md §10).

PyIceberg 0.12 reads format-version 3 metadata but refuses to write it
(``TableMetadataV3.model_dump_json`` raises ``NotImplementedError``). Its V3
model holds the fields of the specification, so olympia serialises every
version the same way, through pydantic with PyIceberg's own defaults (by
alias, ``None`` left out), without that refusal. Every metadata file olympia
writes and every metadata it returns goes through :func:`to_json`.
"""

from __future__ import annotations

import json
from typing import Any

from pyiceberg.io import FileIO
from pyiceberg.schema import Schema
from pyiceberg.serializers import Compressor
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import IcebergBaseModel
from pyiceberg.utils.config import Config

#: The first row id of a table with row lineage (format version 3).
INITIAL_ROW_ID = 0

#: The first format version with row lineage (``next-row-id``, ``first-row-id``).
ROW_LINEAGE_FORMAT_VERSION = 3


def with_row_lineage(metadata: TableMetadata) -> TableMetadata:
    """``metadata`` with ``next-row-id`` set, as the specification requires
    of a format-version 3 table: PyIceberg leaves it unset (None) on a table
    it creates or upgrades, which means 0, the first row id."""
    if (
        metadata.format_version >= ROW_LINEAGE_FORMAT_VERSION
        and getattr(metadata, "next_row_id", None) is None
    ):
        return metadata.model_copy(update={"next_row_id": INITIAL_ROW_ID})
    return metadata


_DEFAULTS = ("initial-default", "write-default")


def with_defaults(metadata: TableMetadata, schema: Schema) -> TableMetadata:
    """``metadata`` of a new table (``new_table_metadata``) with the column
    defaults (``initial-default``, ``write-default``) of ``schema``, the
    schema it was made from: PyIceberg 0.12 drops them when it gives the
    columns fresh ids. Both schemas have the same shape, so the defaults are
    copied field by field."""
    fresh = metadata.schema()
    source = json.loads(schema.model_dump_json())
    if not _has_defaults(source):
        return metadata
    target = json.loads(fresh.model_dump_json())
    _copy_defaults(source, target)
    restored = Schema.model_validate(target)
    schemas = [restored if s.schema_id == fresh.schema_id else s for s in metadata.schemas]
    return metadata.model_copy(update={"schemas": schemas})


def _has_defaults(node: Any) -> bool:
    if isinstance(node, dict):
        return any(k in node for k in _DEFAULTS) or any(_has_defaults(v) for v in node.values())
    if isinstance(node, list):
        return any(_has_defaults(v) for v in node)
    return False


def _copy_defaults(source: Any, target: Any) -> None:
    if isinstance(source, dict) and isinstance(target, dict):
        for key, value in source.items():
            if key in _DEFAULTS:
                target[key] = value
            elif key in target:
                _copy_defaults(value, target[key])
    elif isinstance(source, list) and isinstance(target, list) and len(source) == len(target):
        for s, t in zip(source, target, strict=True):
            _copy_defaults(s, t)


def to_json(metadata: TableMetadata, *, exclude_none: bool = True) -> str:
    """The JSON of ``metadata`` (any format version), as in a metadata file."""
    # IcebergBaseModel's method, not the V3 model's override, which raises.
    return IcebergBaseModel.model_dump_json(with_row_lineage(metadata), exclude_none=exclude_none)


def write_metadata(metadata: TableMetadata, io: FileIO, location: str) -> None:
    """Write ``metadata`` to a new file ``location`` (compressed when its
    name says so), as PyIceberg's ``ToOutputFile.table_metadata`` does.

    Raises:
        FileExistsError: the file exists.
    """
    # PyIceberg's setting: write a missing current-snapshot-id as -1.
    exclude_none = not Config().get_bool("legacy-current-snapshot-id")
    data = to_json(metadata, exclude_none=exclude_none).encode()
    data = Compressor.get_compressor(location).bytes_compressor()(data)
    with io.new_output(location).create(overwrite=False) as out:
        out.write(data)


__all__ = [
    "INITIAL_ROW_ID",
    "ROW_LINEAGE_FORMAT_VERSION",
    "to_json",
    "with_defaults",
    "with_row_lineage",
    "write_metadata",
]
