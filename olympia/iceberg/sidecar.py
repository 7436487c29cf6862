"""The state of a distributed Iceberg transaction that the olympia
transaction does not hold (spec/iceberg.md §6): per table, its base
location, staged commits, scans and metadata files, and the files the
transaction wrote. Stored as JSON at ``<warehouse>/iceberg-txn/<id>.json``
so that ``OlympiaCatalog.resume(id)`` in another process can rebase and roll
back as the process that staged them could."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter, ValidationError
from pyiceberg.expressions import BooleanExpression
from pyiceberg.table.update import TableRequirement, TableUpdate

from olympia.errors import CorruptCatalogError
from olympia.iceberg.purge import FOLDER as PURGE_FOLDER
from olympia.iceberg.purge import PurgeIntent, PurgeRecord
from olympia.iceberg.reads import MetadataReads
from olympia.iceberg.rebase import ScanRecord, StagedCommit

FORMAT = 1
FOLDER = "iceberg-txn"

_UPDATES: TypeAdapter[list[TableUpdate]] = TypeAdapter(list[TableUpdate])
_REQUIREMENTS: TypeAdapter[list[TableRequirement]] = TypeAdapter(list[TableRequirement])
_EXPRESSION: TypeAdapter[BooleanExpression] = TypeAdapter(BooleanExpression)


@dataclass(frozen=True)
class TableRecord:
    """One table of a sidecar: ``staged_location`` is the metadata location
    the transaction had staged when the record was written."""

    namespace: str
    name: str
    base_location: str | None
    staged_location: str | None
    commits: tuple[StagedCommit, ...]
    scans: tuple[ScanRecord, ...]
    metadata_files: tuple[str, ...]
    reads: MetadataReads = field(default_factory=MetadataReads)
    reported_scans: tuple[ScanRecord, ...] = ()


def location(warehouse: str, txn_id: str) -> str:
    return f"{warehouse}/{FOLDER}/{txn_id}.json"


def _expression(expr: BooleanExpression | None) -> Any:
    return None if expr is None else json.loads(expr.model_dump_json())


def _scan(s: ScanRecord) -> dict[str, Any]:
    out = {
        "row-filter": _expression(s.row_filter),
        "snapshot-id": s.snapshot_id,
        "case-sensitive": s.case_sensitive,
    }
    if s.reported_by:
        out["reported-by"] = s.reported_by
    if s.ref:
        out["ref"] = s.ref
    return out


def _scans(items: Any) -> tuple[ScanRecord, ...]:
    return tuple(
        ScanRecord(
            _EXPRESSION.validate_python(s["row-filter"]),
            s.get("snapshot-id"),
            bool(s.get("case-sensitive", True)),
            str(s.get("reported-by", "")),
            None if s.get("ref") is None else str(s["ref"]),
        )
        for s in items
    )


def dump(
    tables: Sequence[TableRecord],
    written_files: Sequence[str],
    purges: Sequence[PurgeIntent] = (),
    held_purges: Sequence[PurgeRecord] = (),
) -> bytes:
    doc = {
        "format": FORMAT,
        "written-files": list(written_files),
        # Purges to record when the transaction commits, and purge records
        # its registers hold back (olympia.iceberg.purge), whoever commits it.
        "purges": [
            {"table": p.table, "location": p.location, "metadata-location": p.metadata_location}
            for p in purges
        ],
        "held-purges": [
            {
                "path": r.path,
                "table": r.table,
                "location": r.location,
                "metadata-location": r.metadata_location,
                "version": r.version,
            }
            for r in held_purges
        ],
        "tables": [
            {
                "namespace": t.namespace,
                "name": t.name,
                "base-location": t.base_location,
                "staged-location": t.staged_location,
                "metadata-files": list(t.metadata_files),
                "commits": [
                    {
                        "requirements": json.loads(
                            _REQUIREMENTS.dump_json(list(c.requirements), by_alias=True)
                        ),
                        "updates": json.loads(_UPDATES.dump_json(list(c.updates), by_alias=True)),
                        "conflict-filter": _expression(c.conflict_filter),
                    }
                    for c in t.commits
                ],
                "scans": [_scan(s) for s in t.scans],
                "metadata-reads": t.reads.to_json(),
                "reported-scans": [_scan(s) for s in t.reported_scans],
            }
            for t in tables
        ],
    }
    return json.dumps(doc).encode()


@dataclass(frozen=True)
class Sidecar:
    tables: list[TableRecord]
    written_files: list[str]
    purges: list[PurgeIntent]
    held_purges: list[PurgeRecord]


def load(data: bytes, where: str) -> Sidecar:
    """Parse a sidecar (one written before purges were kept in it has none).

    Raises:
        CorruptCatalogError: naming ``where``.
    """
    try:
        doc = json.loads(data)
        if doc.get("format") != FORMAT:
            raise ValueError(f"unknown format {doc.get('format')!r}")
        tables = [_table(t) for t in doc["tables"]]
        purges = [
            PurgeIntent(str(p["table"]), str(p["location"]), str(p["metadata-location"]))
            for p in doc.get("purges", ())
        ]
        held = []
        for r in doc.get("held-purges", ()):
            version = r["version"]
            if not isinstance(version, int) or isinstance(version, bool) or version < 0:
                raise ValueError(f"bad version {version!r} of a held purge")
            path = str(r["path"])
            if not (path.startswith(f"{PURGE_FOLDER}/") and path.endswith(".json")):
                raise ValueError(f"held purge {path!r} is not a purge record")
            held.append(
                PurgeRecord(
                    path, str(r["table"]), str(r["location"]), str(r["metadata-location"]), version
                )
            )
        return Sidecar(tables, [str(f) for f in doc["written-files"]], purges, held)
    except (ValueError, KeyError, TypeError, ValidationError) as exc:
        raise CorruptCatalogError(f"Iceberg transaction state {where} is damaged: {exc}") from None


def _table(t: Mapping[str, Any]) -> TableRecord:
    commits = tuple(
        StagedCommit(
            tuple(_REQUIREMENTS.validate_python(c["requirements"])),
            tuple(_UPDATES.validate_python(c["updates"])),
            None
            if c.get("conflict-filter") is None
            else _EXPRESSION.validate_python(c["conflict-filter"]),
        )
        for c in t["commits"]
    )
    scans = _scans(t["scans"])
    return TableRecord(
        str(t["namespace"]),
        str(t["name"]),
        t.get("base-location"),
        t.get("staged-location"),
        commits,
        scans,
        tuple(str(f) for f in t.get("metadata-files", ())),
        MetadataReads.from_json(t["metadata-reads"]) if "metadata-reads" in t else MetadataReads(),
        _scans(t.get("reported-scans", ())),
    )
