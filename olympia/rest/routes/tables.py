"""The table routes, below ``/v1/{prefix}``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from fastapi import Depends, Query, Response
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.table import StagedTable, Table
from pyiceberg.table.metadata import TableMetadataV1
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.table.update import AssertCreate, RemoveSnapshotsUpdate
from pyiceberg.typedef import Identifier

from olympia.rest.errors import RestError, bad_request, not_found
from olympia.rest.models import (
    CommitTableRequest,
    CreateTableRequest,
    RegisterTableRequest,
    RemoveOrphanFilesRequest,
    RenameTableRequest,
    ReportMetricsRequest,
)
from olympia.rest.responses import json_response, load_result
from olympia.rest.routes.common import MAX_PAGE_SIZE, errors, identifiers_page, new_router
from olympia.rest.routes.dependencies import Scope, rename, resolve
from olympia.rest.routes.names import (
    check_level,
    check_metadata_location,
    metadata_file,
    parse_namespace,
    table_identifier,
)

router = new_router()


def _placeholder(catalog: Catalog, identifier: Identifier) -> Table:
    """The table object handed to ``commit_table`` for a table that a staged
    create is about to make: only its identifier is used."""
    empty = TableMetadataV1.model_construct(last_column_id=-1, schema=Schema())
    return StagedTable(
        identifier=identifier,
        metadata=empty,
        metadata_location="",
        io=catalog._load_file_io(),
        catalog=catalog,
    )


def commit_one(
    catalog: Catalog,
    target: Any,
    identifier: Identifier,
    change: CommitTableRequest,
    *,
    open_transaction: bool = False,
) -> Any:
    """Apply one table change through ``target`` (the catalog, a transaction
    of one request, or, with ``open_transaction``, a transaction open across
    requests: ``/txn/{id}/`` or ``sys.dtxns.<id>``).

    Raises:
        RestError: 400, a change that removes snapshots inside an open
            transaction (spec/rest.md §8).
    """
    requirements = tuple(change.requirements)
    updates = tuple(change.updates)
    if open_transaction and any(isinstance(u, RemoveSnapshotsUpdate) for u in updates):
        # Spark's expire_snapshots deletes the snapshots' files as soon as
        # this commit is answered; a rollback would then bring them back
        # without their files.
        raise bad_request(
            f"removing snapshots of {'.'.join(identifier)} (expire_snapshots) is refused inside a "
            f"transaction: the client deletes their files at once, and a rollback would restore "
            f"snapshots whose files are gone; run it outside the transaction"
        )
    try:
        table = target.load_table(identifier)
    except NoSuchTableError:
        if not any(isinstance(r, AssertCreate) for r in requirements):
            raise
        table = _placeholder(catalog, identifier)
    return target.commit_table(table, requirements, updates)


PARQUET_CODEC = "write.parquet.compression-codec"
PARQUET_CODEC_DEFAULT = "zstd"


@router.get("/namespaces/{namespace}/tables")
@errors()
def list_tables(
    namespace: str,
    page_token: str | None = Query(default=None, alias="pageToken"),
    page_size: int | None = Query(default=None, alias="pageSize", ge=1, le=MAX_PAGE_SIZE),
    s: Scope = Depends(resolve),
) -> Response:
    levels = parse_namespace(namespace)
    system = s.system(levels)
    if system is not None:
        system.properties()
        found: list[Identifier] = []
    else:
        with s.route(levels) as (cat, rest, pre):
            found = sorted((*pre, *t) for t in cat.list_tables(rest))
    return identifiers_page(found, page_token, page_size)


@router.post("/namespaces/{namespace}/tables")
@errors(commit=True)
def create_table(
    namespace: str, request: CreateTableRequest, s: Scope = Depends(resolve)
) -> Response:
    levels = parse_namespace(namespace)
    name = check_level("table name", request.name)
    spec = request.partition_spec or UNPARTITIONED_PARTITION_SPEC
    order = request.write_order or UNSORTED_SORT_ORDER
    # Iceberg's own catalogs store zstd as a new table's Parquet codec (since
    # Iceberg 1.4; its Java writers default to gzip for a table without it).
    properties = {PARQUET_CODEC: PARQUET_CODEC_DEFAULT, **(request.properties or {})}
    with s.route(levels) as (cat, rest, _):
        identifier = (*rest, name)
        if request.stage_create:
            if not cat.namespace_exists(rest):
                raise not_found("Namespace", f"Namespace does not exist: {'.'.join(levels)}")
            if cat.table_exists(identifier):
                raise RestError(
                    409,
                    "AlreadyExistsException",
                    f"Table already exists: {'.'.join(identifier)}",
                )
            staged = cat.create_table_transaction(
                identifier,
                request.table_schema,
                request.location,
                spec,
                order,
                properties,
            )._table
            return load_result(staged.metadata, None)
        table = cat.create_table(
            identifier, request.table_schema, request.location, spec, order, properties
        )
    return load_result(table.metadata, table.metadata_location)


@router.post("/namespaces/{namespace}/register")
@errors(commit=True)
def register_table(
    namespace: str, request: RegisterTableRequest, s: Scope = Depends(resolve)
) -> Response:
    levels = parse_namespace(namespace)
    name = check_level("table name", request.name)
    with s.route(levels) as (cat, rest, _):
        identifier = (*rest, name)
        location = check_metadata_location(request.metadata_location)
        with metadata_file(location):
            if request.overwrite and cat.table_exists(identifier):
                with s.atomic(cat) as txn:
                    txn.drop_table(identifier)
                    txn.register_table(identifier, location)
                table = cat.load_table(identifier)
            else:
                table = cat.register_table(identifier, location)
    return load_result(table.metadata, table.metadata_location)


@router.get("/namespaces/{namespace}/tables/{table}")
@errors()
def load_table(
    namespace: str,
    table: str,
    snapshots: Literal["all", "refs"] | None = None,
    s: Scope = Depends(resolve),
) -> Response:
    identifier = table_identifier(namespace, table)
    with s.route(identifier[:-1]) as (cat, rest, _):
        loaded = cat.load_table((*rest, identifier[-1]))
        if loaded.metadata.current_snapshot_id is None:
            # Spark sends no scan report for a table without a snapshot: a
            # load of one inside a SERIALIZABLE transaction is its read
            # (spec/rest.md §7, "Scan reports").
            note = getattr(cat, "note_scan_report", None)
            if note is not None:
                note((*rest, identifier[-1]), None)
    return load_result(loaded.metadata, loaded.metadata_location)


@router.head("/namespaces/{namespace}/tables/{table}")
@errors()
def table_exists(namespace: str, table: str, s: Scope = Depends(resolve)) -> Response:
    identifier = table_identifier(namespace, table)
    with s.route(identifier[:-1]) as (cat, rest, _):
        if not cat.table_exists((*rest, identifier[-1])):
            raise not_found("Table", f"Table does not exist: {'.'.join(identifier)}")
    return Response(status_code=204)


@router.post("/namespaces/{namespace}/tables/{table}")
@errors(commit=True)
def commit_table(
    namespace: str, table: str, request: CommitTableRequest, s: Scope = Depends(resolve)
) -> Response:
    identifier = table_identifier(namespace, table)
    if request.identifier is not None:
        named = (*request.identifier.namespace, request.identifier.name)
        if named != identifier:
            raise bad_request(f"the body names table {named!r}, the path {identifier!r}")
    with s.route(identifier[:-1]) as (cat, rest, _):
        response = commit_one(
            s.root, cat, (*rest, identifier[-1]), request, open_transaction=cat is not s.root
        )
    return load_result(response.metadata, response.metadata_location)


@router.delete("/namespaces/{namespace}/tables/{table}")
@errors(commit=True)
def drop_table(
    namespace: str,
    table: str,
    purge: bool = Query(default=False, alias="purgeRequested"),
    s: Scope = Depends(resolve),
) -> Response:
    identifier = table_identifier(namespace, table)
    with s.route(identifier[:-1]) as (cat, rest, _):
        if purge:
            cat.purge_table((*rest, identifier[-1]))
        else:
            cat.drop_table((*rest, identifier[-1]))
    return Response(status_code=204)


@router.post("/namespaces/{namespace}/tables/{table}/metrics")
@errors()
def report_metrics(
    namespace: str,
    table: str,
    report: ReportMetricsRequest,
    s: Scope = Depends(resolve),
) -> Response:
    identifier = table_identifier(namespace, table)
    if report.report_type == "scan-report":
        # Inside a SERIALIZABLE transaction an engine's scan is a read the
        # commit must check (spec/rest.md §8): Spark reads a table through
        # its files and says so only in this report.
        with s.route(identifier[:-1]) as (cat, rest, _):
            note = getattr(cat, "note_scan_report", None)
            if note is not None:
                note((*rest, identifier[-1]), report.snapshot_id)
    return Response(status_code=204)


@router.post("/namespaces/{namespace}/tables/{table}/orphan-files")
@errors()
def remove_orphan_files(
    namespace: str, table: str, request: RemoveOrphanFilesRequest, s: Scope = Depends(resolve)
) -> Response:
    """olympia's orphan clean-up (spec/rest.md §11): what Spark's
    ``remove_orphan_files`` does through ``olympia.spark.OlympiaSparkCatalog``,
    keeping every file a kept catalog version reads."""
    identifier = table_identifier(namespace, table)
    older_than = None
    if request.older_than_ms is not None:
        try:
            older_than = datetime.fromtimestamp(request.older_than_ms / 1000, UTC)
        except (OverflowError, OSError, ValueError):
            raise bad_request(f"older-than-ms {request.older_than_ms} is not a time") from None
    with s.route(identifier[:-1]) as (cat, rest, _):
        if cat is not s.root:
            raise bad_request(
                f"removing orphan files of {'.'.join(identifier)} is refused inside a "
                f"transaction: it deletes files at once, which a rollback cannot bring back; "
                f"run it outside the transaction"
            )
        remove = getattr(cat, "remove_orphan_files", None)
        if remove is None:
            raise NotImplementedError("this catalog has no orphan clean-up of its own")
        found = remove(
            (*rest, identifier[-1]),
            older_than=older_than,
            location=request.location,
            dry_run=request.dry_run,
            staged=s.sessions.staged_metadata() if s.sessions is not None else (),
        )
    return json_response(
        {
            "orphan-file-locations": list(found.files),
            "dry-run": found.dry_run,
            "location": found.location,
        }
    )


@router.post("/tables/rename")
@errors(commit=True)
def rename_table(request: RenameTableRequest, s: Scope = Depends(resolve)) -> Response:
    return rename(s, request, "table")
