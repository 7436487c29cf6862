"""The Iceberg REST catalog API (../shared/iceberg-rest/rest-catalog-open-api.yaml)
as a FastAPI application over a PyIceberg ``Catalog`` (spec/rest.md).

Each route is a thin translation: parse and validate the request, check the
names, call one Catalog method (or, for ``transactions/commit``, one catalog
transaction), and serialise the result. Routes are plain functions, so
FastAPI runs them in its worker threads; the catalog calls block.
"""

from __future__ import annotations

import functools
import hmac
import json
import logging
import threading
from collections.abc import Awaitable, Callable, Iterator, MutableMapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Annotated, Any, Literal, ParamSpec, TypeVar

from fastapi import Body, Depends, FastAPI, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import StagedTable, Table
from pyiceberg.table.metadata import TableMetadata, TableMetadataV1
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, SortOrder
from pyiceberg.table.update import AssertCreate
from pyiceberg.typedef import Identifier
from starlette.exceptions import HTTPException as StarletteHTTPException

from olympia import errors as oe
from olympia.rest.errors import UNAUTHORIZED, RestError, bad_request, classify, not_found
from olympia.rest.models import (
    CommitTableRequest,
    CommitTransactionRequest,
    CreateNamespaceRequest,
    RegisterTableRequest,
    RenameTableRequest,
    UpdateNamespacePropertiesRequest,
)

log = logging.getLogger("olympia.rest")

DEFAULT_PREFIX = "olympia"
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
NAMESPACE_SEPARATOR = "\x1f"
MAX_NAME_CHARS = 1024
MAX_PAGE_SIZE = 100_000

# The operations this server implements, as advertised in /v1/config.
ENDPOINTS = (
    "GET /v1/{prefix}/namespaces",
    "POST /v1/{prefix}/namespaces",
    "GET /v1/{prefix}/namespaces/{namespace}",
    "HEAD /v1/{prefix}/namespaces/{namespace}",
    "DELETE /v1/{prefix}/namespaces/{namespace}",
    "POST /v1/{prefix}/namespaces/{namespace}/properties",
    "GET /v1/{prefix}/namespaces/{namespace}/tables",
    "POST /v1/{prefix}/namespaces/{namespace}/tables",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "DELETE /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/namespaces/{namespace}/register",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/metrics",
    "POST /v1/{prefix}/tables/rename",
    "POST /v1/{prefix}/transactions/commit",
)

P = ParamSpec("P")
R = TypeVar("R")


# --- request models that PyIceberg's are too strict for ---------------------


class CreateTableRequest(BaseModel):
    """``location``, ``partition-spec`` and ``write-order`` are optional in
    the specification (PyIceberg's model requires them)."""

    model_config = ConfigDict(populate_by_name=True, frozen=True, extra="ignore")

    name: str
    location: str | None = None
    table_schema: Schema = Field(alias="schema")
    partition_spec: PartitionSpec | None = Field(alias="partition-spec", default=None)
    write_order: SortOrder | None = Field(alias="write-order", default=None)
    stage_create: bool = Field(alias="stage-create", default=False)
    properties: dict[str, str] = Field(default_factory=dict)


# --- names ------------------------------------------------------------------


def check_level(what: str, value: str) -> str:
    """A namespace level or a table name, refused before it reaches the catalog
    when it is empty, too long or holds a control character."""
    if not value:
        raise bad_request(f"{what} is empty")
    if len(value) > MAX_NAME_CHARS:
        raise bad_request(f"{what} is longer than {MAX_NAME_CHARS} characters")
    bad = next((c for c in value if ord(c) < 0x20 or ord(c) == 0x7F), None)
    if bad is not None:
        raise bad_request(f"{what} {value!r} contains the control character {bad!r}")
    return value


def check_namespace(levels: Sequence[str]) -> Identifier:
    if not levels:
        raise bad_request("the namespace is empty")
    return tuple(check_level(f"namespace level {i + 1}", lv) for i, lv in enumerate(levels))


def parse_namespace(path_value: str) -> Identifier:
    """A namespace path parameter: levels joined by the unit separator (0x1F)."""
    return check_namespace(path_value.split(NAMESPACE_SEPARATOR))


def table_identifier(namespace: str, table: str) -> Identifier:
    return (*parse_namespace(namespace), check_level("table name", table))


# --- responses --------------------------------------------------------------


def json_response(payload: Any, status: int = 200) -> Response:
    return Response(json.dumps(payload), status_code=status, media_type="application/json")


def error_response(err: RestError, head: bool = False) -> Response:
    body = b"" if head else err.body()
    return Response(body, status_code=err.code, media_type="application/json")


def load_result(metadata: TableMetadata, metadata_location: str | None) -> Response:
    """A ``LoadTableResult``; the metadata is serialised by PyIceberg, as in
    the metadata files it writes."""
    location = (
        ""
        if metadata_location is None
        else f'"metadata-location": {json.dumps(metadata_location)}, '
    )
    body = "{" + location + f'"metadata": {metadata.model_dump_json()}, "config": {{}}}}'
    return Response(body, media_type="application/json")


def _page(
    items: list[Any], page_token: str | None, page_size: int | None
) -> tuple[list[Any], str | None]:
    """One page of ``items``; the token is the offset of the next page."""
    start = 0
    if page_token:
        if not page_token.isdigit() or len(page_token) > 12:
            raise bad_request(f"pageToken {page_token!r} is not one this server issued")
        start = int(page_token)
    if page_size is None:
        return items[start:], None
    end = start + page_size
    return items[start:end], (str(end) if end < len(items) else None)


def _errors(commit: bool = False) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Turn whatever a route raises into a :class:`RestError` (commit: see classify)."""

    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return fn(*args, **kwargs)
            except RestError:
                raise
            except Exception as exc:
                err = classify(exc, commit=commit)
                if err.code >= 500:
                    log.exception("%s %s", fn.__name__, err)
                raise err from exc

        return run

    return wrap


# --- the application --------------------------------------------------------


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


def _commit_one(
    catalog: Catalog, target: Any, identifier: Identifier, change: CommitTableRequest
) -> Any:
    """Apply one table change through ``target`` (the catalog or a transaction)."""
    requirements = tuple(change.requirements)
    updates = tuple(change.updates)
    try:
        table = target.load_table(identifier)
    except NoSuchTableError:
        if not any(isinstance(r, AssertCreate) for r in requirements):
            raise
        table = _placeholder(catalog, identifier)
    return target.commit_table(table, requirements, updates)


@contextmanager
def _transaction(catalog: Catalog) -> Iterator[Any]:
    begin = getattr(catalog, "transaction", None)
    if begin is None:
        raise RestError(
            406,
            "UnsupportedOperationException",
            f"the catalog {type(catalog).__name__} has no multi-table transactions",
        )
    with begin() as txn:
        # The transaction's Catalog view: tables loaded through it read the
        # transaction's snapshot, and their commits are staged in it.
        yield txn.catalog


@dataclass(frozen=True)
class _Scope:
    """What a request works on: ``root`` is the served catalog; ``catalog``
    receives the calls (``root``, or the Catalog view of the open transaction
    ``txn`` for requests under ``/txn/{id}/``)."""

    root: Catalog
    catalog: Any
    txn: Any | None = None

    def transaction(self) -> AbstractContextManager[Any]:
        """A catalog transaction for a multi-step change; inside ``/txn/{id}/``
        the open transaction itself."""
        if self.txn is not None:
            return nullcontext(self.catalog)
        return _transaction(self.root)


def _root_scope(catalog: Catalog) -> Callable[[], _Scope]:
    scope = _Scope(catalog, catalog)

    def resolve() -> _Scope:
        return scope

    return resolve


class BeginRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    isolation: Literal["snapshot", "serializable"] | None = None
    distributed: bool = False


class _Open:
    """The transactions begun through ``POST /txn`` and not finished yet, each
    with a lock: one request at a time works on a transaction."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._lock = threading.Lock()
        self._open: dict[str, tuple[Any, threading.Lock]] = {}

    def begin(self, isolation: str | None, distributed: bool) -> Any:
        begin = getattr(self.catalog, "begin", None)
        if begin is None:
            raise RestError(
                406,
                "UnsupportedOperationException",
                f"the catalog {type(self.catalog).__name__} has no transactions",
            )
        txn = begin(isolation)
        if distributed:
            txn.distribute()
        with self._lock:
            self._open[txn.id] = (txn, threading.Lock())
        return txn

    def get(self, txn_id: str) -> tuple[Any, threading.Lock]:
        """The open transaction ``txn_id``; a distributed one begun by another
        process is resumed here."""
        with self._lock:
            found = self._open.get(txn_id)
        if found is not None:
            return found
        try:
            txn = self.catalog.resume(txn_id)  # type: ignore[attr-defined]
        except (oe.TransactionNotFoundError, oe.TransactionExpiredError, oe.InvalidArgumentError):
            raise RestError(
                404, "NoSuchTransactionException", f"no open transaction {txn_id!r}"
            ) from None
        with self._lock:
            return self._open.setdefault(txn_id, (txn, threading.Lock()))

    def ids(self) -> list[str]:
        with self._lock:
            return sorted(self._open)

    def forget(self, txn_id: str) -> None:
        with self._lock:
            self._open.pop(txn_id, None)


def _transaction_routes(app: FastAPI, prefix: str, catalog: Catalog) -> None:
    """``/txn``: transactions over HTTP (spec/rest.md §8). The Iceberg REST API
    under ``/txn/{id}/`` works inside transaction ``id``."""
    sessions = _Open(catalog)

    def resolve(txn_id: str) -> Iterator[_Scope]:
        txn, lock = sessions.get(txn_id)
        with lock:
            if txn.status != "open":
                sessions.forget(txn_id)
                raise RestError(
                    404, "NoSuchTransactionException", f"transaction {txn_id!r} is {txn.status}"
                )
            yield _Scope(catalog, txn.catalog, txn)

    @app.post("/txn")
    @_errors()
    def begin(request: BeginRequest) -> Response:
        txn = sessions.begin(request.isolation, request.distributed)
        return json_response(
            {"id": txn.id, "isolation": txn.isolation, "begin-version": txn.begin_version}
        )

    @app.get("/txn")
    @_errors()
    def list_open() -> Response:
        return json_response({"transactions": sessions.ids()})

    @app.post("/txn/{txn_id}/commit")
    @_errors(commit=True)
    def commit(txn_id: str) -> Response:
        txn, lock = sessions.get(txn_id)
        with lock:
            # The data and manifest files the clients wrote are found from the
            # staged metadata, so that a refused commit deletes them too.
            txn.recover_written_files()
            try:
                version = txn.commit()
            finally:
                if txn.status != "open":
                    sessions.forget(txn_id)
        return json_response({"id": txn_id, "version": version})

    @app.post("/txn/{txn_id}/rollback")
    @_errors()
    def rollback(txn_id: str) -> Response:
        txn, lock = sessions.get(txn_id)
        with lock:
            try:
                txn.recover_written_files()
                txn.rollback()
            finally:
                sessions.forget(txn_id)
        return Response(status_code=204)

    _catalog_routes(app, "/txn/{txn_id}", prefix, resolve)


def create_app(
    catalog: Catalog,
    *,
    prefix: str = DEFAULT_PREFIX,
    token: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> FastAPI:
    """The REST application serving ``catalog`` under ``/v1/{prefix}/``.

    ``token``: when set, every request must carry ``Authorization: Bearer
    <token>`` (401 otherwise). ``max_body_bytes`` bounds request bodies (413).
    """
    if not prefix or "/" in prefix or prefix != prefix.strip():
        raise ValueError(f"prefix {prefix!r} must be one non-empty path segment")
    app = FastAPI(
        title="olympia Iceberg REST catalog",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )

    # -- errors ----------------------------------------------------------
    @app.exception_handler(RestError)
    async def _rest_error(request: Request, exc: RestError) -> Response:
        return error_response(exc, head=request.method == "HEAD")

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', '')}"
            for e in exc.errors()[:5]
        )
        return error_response(
            bad_request(f"invalid request: {problems}"), head=request.method == "HEAD"
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        kind = {404: "NotFoundException", 405: "MethodNotAllowedException"}.get(
            exc.status_code, "RESTException"
        )
        return error_response(
            RestError(exc.status_code, kind, str(exc.detail)), head=request.method == "HEAD"
        )

    app.add_middleware(_Guard, token=token, max_body_bytes=max_body_bytes)

    _catalog_routes(app, "", prefix, _root_scope(catalog))
    _transaction_routes(app, prefix, catalog)
    return app


def _catalog_routes(app: FastAPI, root: str, prefix: str, resolve: Callable[..., Any]) -> None:
    """The Iceberg REST routes under ``root``; ``resolve`` (a FastAPI
    dependency) gives each request the catalog it works on."""
    base = f"{root}/v1/{prefix}"

    # -- configuration ---------------------------------------------------
    @app.get(root + "/v1/config")
    def get_config(warehouse: str | None = None, s: _Scope = Depends(resolve)) -> Response:
        return json_response(
            {"defaults": {}, "overrides": {"prefix": prefix}, "endpoints": list(ENDPOINTS)}
        )

    # -- namespaces ------------------------------------------------------
    @app.get(base + "/namespaces")
    @_errors()
    def list_namespaces(
        parent: str | None = None,
        page_token: str | None = Query(default=None, alias="pageToken"),
        page_size: int | None = Query(default=None, alias="pageSize", ge=1, le=MAX_PAGE_SIZE),
        s: _Scope = Depends(resolve),
    ) -> Response:
        levels = parse_namespace(parent) if parent else ()
        if levels and not s.catalog.namespace_exists(levels):
            raise not_found("Namespace", f"namespace {'.'.join(levels)!r} does not exist")
        found = sorted(s.catalog.list_namespaces(levels))
        page, next_token = _page(found, page_token, page_size)
        return json_response({"namespaces": [list(n) for n in page], "next-page-token": next_token})

    @app.post(base + "/namespaces")
    @_errors(commit=True)
    def create_namespace(request: CreateNamespaceRequest, s: _Scope = Depends(resolve)) -> Response:
        levels = check_namespace(request.namespace)
        s.catalog.create_namespace(levels, request.properties)
        props = s.catalog.load_namespace_properties(levels)
        return json_response({"namespace": list(levels), "properties": props})

    @app.get(base + "/namespaces/{namespace}")
    @_errors()
    def load_namespace(namespace: str, s: _Scope = Depends(resolve)) -> Response:
        levels = parse_namespace(namespace)
        props = s.catalog.load_namespace_properties(levels)
        return json_response({"namespace": list(levels), "properties": props})

    @app.head(base + "/namespaces/{namespace}")
    @_errors()
    def namespace_exists(namespace: str, s: _Scope = Depends(resolve)) -> Response:
        levels = parse_namespace(namespace)
        if not s.catalog.namespace_exists(levels):
            raise not_found("Namespace", f"namespace {'.'.join(levels)!r} does not exist")
        return Response(status_code=204)

    @app.delete(base + "/namespaces/{namespace}")
    @_errors(commit=True)
    def drop_namespace(namespace: str, s: _Scope = Depends(resolve)) -> Response:
        s.catalog.drop_namespace(parse_namespace(namespace))
        return Response(status_code=204)

    @app.post(base + "/namespaces/{namespace}/properties")
    @_errors(commit=True)
    def update_properties(
        namespace: str, request: UpdateNamespacePropertiesRequest, s: _Scope = Depends(resolve)
    ) -> Response:
        levels = parse_namespace(namespace)
        both = sorted(set(request.removals) & set(request.updates))
        if both:
            raise RestError(
                422, "UnprocessableEntityException", f"keys both removed and updated: {both}"
            )
        summary = s.catalog.update_namespace_properties(
            levels, removals=set(request.removals), updates=request.updates
        )
        return json_response(
            {
                "updated": summary.updated,
                "removed": summary.removed,
                "missing": summary.missing or [],
            }
        )

    # -- tables ----------------------------------------------------------
    @app.get(base + "/namespaces/{namespace}/tables")
    @_errors()
    def list_tables(
        namespace: str,
        page_token: str | None = Query(default=None, alias="pageToken"),
        page_size: int | None = Query(default=None, alias="pageSize", ge=1, le=MAX_PAGE_SIZE),
        s: _Scope = Depends(resolve),
    ) -> Response:
        levels = parse_namespace(namespace)
        found = sorted(s.catalog.list_tables(levels))
        page, next_token = _page(found, page_token, page_size)
        ids = [{"namespace": list(t[:-1]), "name": t[-1]} for t in page]
        return json_response({"identifiers": ids, "next-page-token": next_token})

    @app.post(base + "/namespaces/{namespace}/tables")
    @_errors(commit=True)
    def create_table(
        namespace: str, request: CreateTableRequest, s: _Scope = Depends(resolve)
    ) -> Response:
        identifier = (*parse_namespace(namespace), check_level("table name", request.name))
        spec = request.partition_spec or UNPARTITIONED_PARTITION_SPEC
        order = request.write_order or UNSORTED_SORT_ORDER
        if request.stage_create:
            if not s.catalog.namespace_exists(identifier[:-1]):
                raise not_found(
                    "Namespace", f"namespace {'.'.join(identifier[:-1])!r} does not exist"
                )
            if s.catalog.table_exists(identifier):
                raise RestError(
                    409, "AlreadyExistsException", f"table {'.'.join(identifier)!r} exists"
                )
            staged = s.catalog.create_table_transaction(
                identifier, request.table_schema, request.location, spec, order, request.properties
            )._table
            return load_result(staged.metadata, None)
        table = s.catalog.create_table(
            identifier, request.table_schema, request.location, spec, order, request.properties
        )
        return load_result(table.metadata, table.metadata_location)

    @app.post(base + "/namespaces/{namespace}/register")
    @_errors(commit=True)
    def register_table(
        namespace: str, request: RegisterTableRequest, s: _Scope = Depends(resolve)
    ) -> Response:
        identifier = (*parse_namespace(namespace), check_level("table name", request.name))
        if request.overwrite and s.catalog.table_exists(identifier):
            with s.transaction() as txn:
                txn.drop_table(identifier)
                txn.register_table(identifier, request.metadata_location)
            table = s.catalog.load_table(identifier)
        else:
            table = s.catalog.register_table(identifier, request.metadata_location)
        return load_result(table.metadata, table.metadata_location)

    @app.get(base + "/namespaces/{namespace}/tables/{table}")
    @_errors()
    def load_table(
        namespace: str,
        table: str,
        snapshots: Literal["all", "refs"] | None = None,
        s: _Scope = Depends(resolve),
    ) -> Response:
        loaded = s.catalog.load_table(table_identifier(namespace, table))
        return load_result(loaded.metadata, loaded.metadata_location)

    @app.head(base + "/namespaces/{namespace}/tables/{table}")
    @_errors()
    def table_exists(namespace: str, table: str, s: _Scope = Depends(resolve)) -> Response:
        identifier = table_identifier(namespace, table)
        if not s.catalog.table_exists(identifier):
            raise not_found("Table", f"table {'.'.join(identifier)!r} does not exist")
        return Response(status_code=204)

    @app.post(base + "/namespaces/{namespace}/tables/{table}")
    @_errors(commit=True)
    def commit_table(
        namespace: str, table: str, request: CommitTableRequest, s: _Scope = Depends(resolve)
    ) -> Response:
        identifier = table_identifier(namespace, table)
        if request.identifier is not None:
            named = (*request.identifier.namespace, request.identifier.name)
            if named != identifier:
                raise bad_request(f"the body names table {named!r}, the path {identifier!r}")
        response = _commit_one(s.root, s.catalog, identifier, request)
        return load_result(response.metadata, response.metadata_location)

    @app.delete(base + "/namespaces/{namespace}/tables/{table}")
    @_errors(commit=True)
    def drop_table(
        namespace: str,
        table: str,
        purge: bool = Query(default=False, alias="purgeRequested"),
        s: _Scope = Depends(resolve),
    ) -> Response:
        identifier = table_identifier(namespace, table)
        if purge:
            s.catalog.purge_table(identifier)
        else:
            s.catalog.drop_table(identifier)
        return Response(status_code=204)

    @app.post(base + "/namespaces/{namespace}/tables/{table}/metrics")
    @_errors()
    def report_metrics(
        namespace: str,
        table: str,
        report: Annotated[dict[str, Any], Body()],
        s: _Scope = Depends(resolve),
    ) -> Response:
        table_identifier(namespace, table)
        return Response(status_code=204)

    @app.post(base + "/tables/rename")
    @_errors(commit=True)
    def rename_table(request: RenameTableRequest, s: _Scope = Depends(resolve)) -> Response:
        source = (
            *check_namespace(request.source.namespace),
            check_level("source name", request.source.name),
        )
        dest = (
            *check_namespace(request.destination.namespace),
            check_level("destination name", request.destination.name),
        )
        s.catalog.rename_table(source, dest)
        return Response(status_code=204)

    # -- multi-table transactions ----------------------------------------
    @app.post(base + "/transactions/commit")
    @_errors(commit=True)
    def commit_transaction(
        request: CommitTransactionRequest, s: _Scope = Depends(resolve)
    ) -> Response:
        changes: list[tuple[Identifier, CommitTableRequest]] = []
        seen: set[Identifier] = set()
        for i, change in enumerate(request.table_changes):
            if change.identifier is None:
                raise bad_request(f"table-changes[{i}] has no identifier")
            identifier = (
                *check_namespace(change.identifier.namespace),
                check_level(f"table-changes[{i}] name", change.identifier.name),
            )
            if identifier in seen:
                raise bad_request(f"table-changes names {'.'.join(identifier)!r} twice")
            seen.add(identifier)
            changes.append((identifier, change))
        with s.transaction() as txn:
            for identifier, change in changes:
                _commit_one(s.root, txn, identifier, change)
        return Response(status_code=204)


# --- authentication and body size, for every route (also unknown ones) -------

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class _Guard:
    """Refuses requests without the bearer token (401) and bodies larger than
    the limit (413), before the application reads them."""

    def __init__(self, app: ASGIApp, *, token: str | None, max_body_bytes: int) -> None:
        self.app = app
        self.token = None if token is None else f"Bearer {token}".encode()
        self.limit = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        head = scope["method"] == "HEAD"
        headers = dict(scope.get("headers") or ())
        if self.token is not None:
            given = headers.get(b"authorization", b"")
            if not hmac.compare_digest(given, self.token):
                await error_response(UNAUTHORIZED, head)(scope, receive, send)
                return
        length = headers.get(b"content-length")
        too_large = RestError(
            413, "RequestTooLargeException", f"request body over {self.limit} bytes"
        )
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            await error_response(too_large, head)(scope, receive, send)
            return
        # The body is read here, whole and bounded, then replayed to the app.
        chunks: list[bytes] = []
        received = 0
        more = scope["method"] not in ("GET", "HEAD", "DELETE") or length not in (None, b"0")
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunk = message.get("body", b"")
            received += len(chunk)
            if received > self.limit:
                await error_response(too_large, head)(scope, receive, send)
                return
            chunks.append(chunk)
            more = bool(message.get("more_body", False))
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
