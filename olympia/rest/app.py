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
import re
import uuid
from collections.abc import (
    Awaitable,
    Callable,
    Coroutine,
    Iterator,
    Mapping,
    MutableMapping,
    Sequence,
)
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Literal, ParamSpec, TypeVar
from urllib.parse import unquote

from fastapi import Depends, FastAPI, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
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
from pyiceberg.view.metadata import ViewMetadata, ViewVersion
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from olympia.iceberg import OlympiaCatalog, names
from olympia.iceberg.metadata import to_json as metadata_json
from olympia.iceberg.transaction import translate_errors
from olympia.rest.errors import (
    UNAUTHORIZED,
    RestError,
    bad_request,
    classify,
    flat_error_body,
    not_found,
)
from olympia.rest.models import (
    CommitTableRequest,
    CommitTransactionRequest,
    CommitViewRequest,
    CreateNamespaceRequest,
    RegisterTableRequest,
    RenameTableRequest,
    ReportMetricsRequest,
    UpdateNamespacePropertiesRequest,
)
from olympia.rest.sessions import DEFAULT_IDLE_SECONDS, DEFAULT_MAX_OPEN, OpenTransactions

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
    "GET /v1/{prefix}/namespaces/{namespace}/views",
    "POST /v1/{prefix}/namespaces/{namespace}/views",
    "GET /v1/{prefix}/namespaces/{namespace}/views/{view}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/views/{view}",
    "DELETE /v1/{prefix}/namespaces/{namespace}/views/{view}",
    "POST /v1/{prefix}/namespaces/{namespace}/views/{view}",
    "POST /v1/{prefix}/views/rename",
    "POST /v1/{prefix}/namespaces/{namespace}/register-view",
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


class CreateViewRequest(BaseModel):
    """``location`` is optional in the specification (PyIceberg's model requires it)."""

    model_config = ConfigDict(populate_by_name=True, frozen=True, extra="ignore")

    name: str
    location: str | None = None
    view_schema: Schema = Field(alias="schema")
    view_version: ViewVersion = Field(alias="view-version")
    properties: dict[str, str] = Field(default_factory=dict)


class RegisterViewRequest(BaseModel):
    model_config = ConfigDict(populate_by_name=True, frozen=True, extra="ignore")

    name: str
    metadata_location: str = Field(alias="metadata-location")


# --- names ------------------------------------------------------------------


def check_level(what: str, value: str) -> str:
    """A namespace level or a table name, refused before it reaches the catalog
    when it is empty, too long or holds a control character."""
    if not value:
        raise bad_request(f"{what} is empty")
    if len(value) > MAX_NAME_CHARS:
        raise bad_request(f"{what} is longer than {MAX_NAME_CHARS} characters")
    if value in (".", ".."):
        # It would name a folder above the object's own in a default location.
        raise bad_request(f"{what} {value!r} is not a name")
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


def check_metadata_location(location: str) -> str:
    """A metadata file location given to register: an absolute path or a URI
    (a relative path would be read relative to the server's working folder)."""
    check_level("metadata-location", location)
    if not (location.startswith("/") or "://" in location):
        raise bad_request(f"metadata-location {location!r} is not a URI or an absolute path")
    return location


@contextmanager
def _metadata_file(location: str) -> Iterator[None]:
    """Register reads the metadata file before it writes anything: a missing
    file is the request's fault."""
    try:
        yield
    except FileNotFoundError as exc:
        raise bad_request(f"metadata-location {location!r} does not exist") from exc


# --- responses --------------------------------------------------------------


def json_response(payload: Any, status: int = 200) -> Response:
    return Response(json.dumps(payload), status_code=status, media_type="application/json")


def error_response(err: RestError, head: bool = False, flat: bool = False) -> Response:
    body = b"" if head else err.body(flat=flat)
    return Response(body, status_code=err.code, media_type="application/json")


def load_result(metadata: TableMetadata, metadata_location: str | None) -> Response:
    """A ``LoadTableResult``; the metadata is serialised as in the metadata
    files olympia writes (any format version, spec/iceberg.md §10)."""
    location = (
        ""
        if metadata_location is None
        else f'"metadata-location": {json.dumps(metadata_location)}, '
    )
    body = "{" + location + f'"metadata": {metadata_json(metadata)}, "config": {{}}}}'
    return Response(body, media_type="application/json")


def view_result(catalog: Any, identifier: Identifier) -> Response:
    """A ``LoadViewResult`` for view ``identifier`` as ``catalog`` (the
    served OlympiaCatalog or a transaction's Catalog view) sees it: its
    metadata file location from olympia, then that file."""
    namespace, name = names.table_name(identifier)
    if isinstance(catalog, OlympiaCatalog):
        owner, reader = catalog, catalog.olympia.latest()
    else:
        txn = catalog.transaction
        owner, reader = txn.owner, txn.olympia_transaction
    with translate_errors():
        location = reader.describe_view(namespace, name).metadata_location
    if not location:
        raise not_found("View", f"view {'.'.join(identifier)!r} has no Iceberg metadata")
    return view_body(owner.read_view_metadata(location), location)


def view_body(metadata: ViewMetadata, location: str) -> Response:
    """A ``LoadViewResult`` of ``metadata``, read from or written to ``location``."""
    body = (
        f'{{"metadata-location": {json.dumps(location)}, '
        f'"metadata": {metadata.model_dump_json()}, "config": {{}}}}'
    )
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
        # A plain multi-table commit: its requirements hold against the newest
        # metadata, as a single table commit's (spec/rest.md §3).
        if hasattr(txn, "strict_requirements"):
            txn.strict_requirements = True
        # The transaction's Catalog view: tables loaded through it read the
        # transaction's snapshot, and their commits are staged in it.
        yield txn.catalog


DTXNS = ("sys", "dtxns")


@dataclass(frozen=True)
class _Scope:
    """What a request works on: ``root`` is the served catalog; ``catalog``
    receives the calls (``root``, or the Catalog view of the open transaction
    ``txn`` for requests under ``/txn/{id}/``). ``sessions`` (top-level
    requests only) resolves the namespaces ``sys.dtxns.<id>...`` (§9)."""

    root: Catalog
    catalog: Any
    txn: Any | None = None
    sessions: OpenTransactions | None = None

    def _dtxn(self, levels: Identifier) -> str | None:
        if self.sessions is not None and len(levels) > 3 and levels[:2] == DTXNS:
            return levels[2]
        return None

    def scope_key(self, levels: Identifier) -> str:
        return self._dtxn(levels) or ""

    @contextmanager
    def route(self, levels: Identifier) -> Iterator[tuple[Any, Identifier, Identifier]]:
        """``(catalog, levels inside it, the prefix taken off)`` for a namespace:
        ``sys.dtxns.<id>.<rest>`` is ``<rest>`` in transaction ``<id>``."""
        txn_id = self._dtxn(levels)
        if txn_id is None or self.sessions is None:
            yield self.catalog, levels, ()
            return
        with self.sessions.using(txn_id) as txn:
            yield txn.catalog, levels[3:], levels[:3]

    def system(self, levels: Identifier) -> _System | None:
        """The system namespace ``sys``, ``sys.dtxns`` or ``sys.dtxns.<id>``, if ``levels`` is one."""
        if self.sessions is None or not levels or levels[0] != "sys" or len(levels) > 3:
            return None
        if len(levels) >= 2 and levels[1] != "dtxns":
            return None
        return _System(self.sessions, levels, self.root)

    def atomic(self, catalog: Any) -> AbstractContextManager[Any]:
        """A catalog transaction for a multi-step change; inside a transaction
        (``/txn/{id}/`` or ``sys.dtxns.<id>``) that transaction itself."""
        if catalog is self.root:
            return _transaction(self.root)
        return nullcontext(catalog)


@dataclass(frozen=True)
class _System:
    """``sys``, ``sys.dtxns`` (the open distributed transactions) and
    ``sys.dtxns.<id>`` (one of them), spec/rest.md §9."""

    sessions: OpenTransactions
    levels: Identifier
    root: Catalog

    @property
    def txn_id(self) -> str | None:
        return self.levels[2] if len(self.levels) == 3 else None

    def children(self) -> list[Identifier]:
        if self.txn_id is not None:
            with self.sessions.using(self.txn_id) as txn:
                return [(*self.levels, *n) for n in txn.catalog.list_namespaces(())]
        if len(self.levels) == 1:
            real = (
                self.root.list_namespaces(self.levels)
                if self.root.namespace_exists(self.levels)
                else []
            )
            return sorted({DTXNS, *real})
        return [(*DTXNS, i) for i in self.sessions.distributed_ids()]

    def properties(self) -> dict[str, str]:
        if self.txn_id is None:
            return {}
        return self.sessions.describe(self.txn_id)

    def create(self, properties: dict[str, str]) -> dict[str, str]:
        if self.txn_id is None:
            raise RestError(
                409, "AlreadyExistsException", f"{'.'.join(self.levels)} is a system namespace"
            )
        isolation = properties.get("isolation-level", properties.get("isolation"))
        if isolation is not None and isolation.lower() not in ("snapshot", "serializable"):
            raise bad_request(
                f"isolation-level must be snapshot or serializable, got {isolation!r}"
            )
        self.sessions.begin(isolation.lower() if isolation else None, name=self.txn_id)
        return self.sessions.describe(self.txn_id)

    def drop(self) -> None:
        if self.txn_id is None:
            raise bad_request(f"{'.'.join(self.levels)} is a system namespace")
        self.sessions.rollback(self.txn_id)

    def update(self, removals: list[str], updates: dict[str, str]) -> dict[str, list[str]]:
        if self.txn_id is None:
            raise bad_request(f"{'.'.join(self.levels)} is a system namespace")
        action = {k: v.lower() for k, v in updates.items()}
        if removals or set(action) - {"commit", "rollback"} or set(action.values()) != {"true"}:
            raise bad_request(
                f"a transaction namespace takes only 'commit'='true' or 'rollback'='true', "
                f"got updates {sorted(updates)} and removals {sorted(removals)}"
            )
        if len(action) != 1:
            raise bad_request("set either 'commit' or 'rollback', not both")
        if "commit" in action:
            self.sessions.commit(self.txn_id)
        else:
            self.sessions.rollback(self.txn_id)
        return {"updated": sorted(updates), "removed": [], "missing": []}


def _root_scope(catalog: Catalog, sessions: OpenTransactions | None) -> Callable[[], _Scope]:
    scope = _Scope(catalog, catalog, sessions=sessions)

    def resolve() -> _Scope:
        return scope

    return resolve


class BeginRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    isolation: Literal["snapshot", "serializable"] | None = None
    distributed: bool = False


def _transaction_routes(
    app: FastAPI, prefix: str, catalog: Catalog, sessions: OpenTransactions
) -> None:
    """``/txn``: transactions over HTTP (spec/rest.md §8). The Iceberg REST API
    under ``/txn/{id}/`` works inside transaction ``id``."""

    def resolve(txn_id: str) -> Iterator[_Scope]:
        with sessions.using(txn_id) as txn:
            yield _Scope(catalog, txn.catalog, txn)

    @app.post("/txn")
    @_errors()
    def begin(request: BeginRequest) -> Response:
        txn = sessions.begin(request.isolation, distributed=request.distributed)
        return json_response(
            {"id": txn.id, "isolation": txn.isolation, "begin-version": txn.begin_version}
        )

    @app.get("/txn")
    @_errors()
    def list_open() -> Response:
        ids = sessions.local_ids() + sessions.distributed_ids()
        return json_response({"transactions": ids})

    @app.post("/txn/{txn_id}/commit")
    @_errors(commit=True)
    def commit(txn_id: str) -> Response:
        version = sessions.commit(txn_id)
        return json_response({"id": txn_id, "version": version})

    @app.post("/txn/{txn_id}/rollback")
    @_errors()
    def rollback(txn_id: str) -> Response:
        sessions.rollback(txn_id)
        return Response(status_code=204)

    _catalog_routes(app, "/txn/{txn_id}", prefix, resolve)


class _Route(APIRoute):
    """A route whose request parsing cannot fail with a 500: PyIceberg's
    models raise ``TypeError`` (which pydantic does not turn into a
    validation error) for some well-formed JSON they cannot represent, e.g. an
    ``initial-default`` of the wrong type. Route functions turn their own
    exceptions into :class:`RestError` (``_errors``), so a ``TypeError`` or
    ``ValueError`` (or a ``KeyError``, ``AttributeError``) that gets here came
    from reading the request: 400."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def run(request: Request) -> Response:
            try:
                return await handler(request)
            except (TypeError, ValueError, LookupError, AttributeError) as exc:
                raise bad_request(f"invalid request: {exc}") from exc

        return run

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        """As APIRoute's, but with the ``%2F`` and ``%25`` that
        :class:`_EncodedSlashes` kept in the path decoded in each path parameter."""
        match, child = super().matches(scope)
        if match is not Match.NONE and scope.get(_KEPT_ESCAPES):
            params = child["path_params"]
            for name in self.param_convertors:
                if isinstance(params.get(name), str):
                    params[name] = _KEPT_ESCAPE.sub(_unescape, params[name])
        return match, child


# Operations of the specification this server does not implement (and does
# not advertise), answered with a status the specification documents for
# them rather than a bare 404/405: (method, route below /v1/{prefix}, status).
_UNSUPPORTED = (
    ("POST", "/namespaces/{namespace}/tables/{table}/plan", 406),
    ("POST", "/namespaces/{namespace}/tables/{table}/sign", 400),
)
OAUTH_TOKENS = "/v1/oauth/tokens"


def _unsupported_routes(app: FastAPI, prefix: str) -> None:
    """Routes that answer the operations of ``_UNSUPPORTED`` and the
    deprecated ``oauth/tokens`` (this server issues no tokens) with an error."""
    for method, route, code in _UNSUPPORTED:
        kind = "UnsupportedOperationException" if code == 406 else "BadRequestException"
        operation = f"{method} /v1/{{prefix}}{route}"
        error = RestError(code, kind, f"this server does not implement {operation}")

        app.add_api_route(f"/v1/{prefix}{route}", _refusal(error), methods=[method])

    @app.post(OAUTH_TOKENS)
    def tokens() -> Response:
        return oauth_error(400, "unsupported_grant_type")


def _refusal(error: RestError) -> Callable[[], Response]:
    def refuse() -> Response:
        raise error

    return refuse


def oauth_error(code: int, error: str) -> Response:
    """An ``OAuthError`` response (the error shape of ``oauth/tokens``)."""
    description = (
        "this server issues no tokens; give the bearer token it was started with"
        if code == 400
        else "missing or wrong bearer token"
    )
    return json_response({"error": error, "error_description": description}, code)


def create_app(
    catalog: Catalog,
    *,
    prefix: str = DEFAULT_PREFIX,
    token: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    transaction_idle_seconds: float = DEFAULT_IDLE_SECONDS,
    max_open_transactions: int = DEFAULT_MAX_OPEN,
) -> FastAPI:
    """The REST application serving ``catalog`` under ``/v1/{prefix}/``.

    ``token``: when set, every request must carry ``Authorization: Bearer
    <token>`` (401 otherwise). ``max_body_bytes`` bounds request bodies (413).
    ``transaction_idle_seconds`` and ``max_open_transactions`` bound the
    transactions begun with ``POST /txn`` (spec/rest.md §8).
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
    app.router.route_class = _Route
    below = f"/v1/{prefix}"

    def failed(
        request: Request, err: RestError, headers: Mapping[str, str] | None = None
    ) -> Response:
        route = getattr(request.scope.get("route"), "path", "")
        flat = below in route and flat_error_body(
            request.method, route.split(below, 1)[1], err.code
        )
        head = request.method == "HEAD"
        response = error_response(err, head=head, flat=flat)
        response.headers.update(headers or {})
        return response

    @app.exception_handler(RestError)
    async def _rest_error(request: Request, exc: RestError) -> Response:
        return failed(request, exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', '')}"
            for e in exc.errors()[:5]
        )
        return failed(request, bad_request(f"invalid request: {problems}"))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        kind = {404: "NotFoundException", 405: "MethodNotAllowedException"}.get(
            exc.status_code, "RESTException"
        )
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            # Starlette's Allow names the methods of one route; a path has one route per method
            path = request.scope["path"]
            allowed = {
                m
                for r in app.router.routes
                if isinstance(r, APIRoute) and r.path_regex.match(path)
                for m in r.methods or ()
            }
            headers["Allow"] = ", ".join(sorted(allowed))
        return failed(request, RestError(exc.status_code, kind, str(exc.detail)), headers)

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> Response:
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return failed(request, RestError(500, "InternalServerError", f"{type(exc).__name__}"))

    app.add_middleware(_Guard, token=token, max_body_bytes=max_body_bytes)
    app.add_middleware(_EncodedSlashes)

    sessions = (
        OpenTransactions(
            catalog, idle_seconds=transaction_idle_seconds, max_open=max_open_transactions
        )
        if isinstance(catalog, OlympiaCatalog)
        else None
    )
    _catalog_routes(app, "", prefix, _root_scope(catalog, sessions))
    _unsupported_routes(app, prefix)
    if sessions is not None:
        _transaction_routes(app, prefix, catalog, sessions)
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
        system = s.system(levels)
        if system is not None:
            found = system.children()
        else:
            with s.route(levels) as (cat, rest, pre):
                if rest and not cat.namespace_exists(rest):
                    raise not_found("Namespace", f"Namespace does not exist: {'.'.join(levels)}")
                found = [(*pre, *n) for n in cat.list_namespaces(rest)]
        page, next_token = _page(sorted(found), page_token, page_size)
        return json_response({"namespaces": [list(n) for n in page], "next-page-token": next_token})

    @app.post(base + "/namespaces")
    @_errors(commit=True)
    def create_namespace(request: CreateNamespaceRequest, s: _Scope = Depends(resolve)) -> Response:
        levels = check_namespace(request.namespace)
        system = s.system(levels)
        if system is not None:
            props = system.create(request.properties)
        else:
            with s.route(levels) as (cat, rest, _):
                cat.create_namespace(rest, request.properties)
                props = cat.load_namespace_properties(rest)
        return json_response({"namespace": list(levels), "properties": props})

    @app.get(base + "/namespaces/{namespace}")
    @_errors()
    def load_namespace(namespace: str, s: _Scope = Depends(resolve)) -> Response:
        levels = parse_namespace(namespace)
        system = s.system(levels)
        if system is not None:
            props = system.properties()
        else:
            with s.route(levels) as (cat, rest, _):
                props = cat.load_namespace_properties(rest)
        return json_response({"namespace": list(levels), "properties": props})

    @app.head(base + "/namespaces/{namespace}")
    @_errors()
    def namespace_exists(namespace: str, s: _Scope = Depends(resolve)) -> Response:
        levels = parse_namespace(namespace)
        system = s.system(levels)
        if system is not None:
            system.properties()
            return Response(status_code=204)
        with s.route(levels) as (cat, rest, _):
            if not cat.namespace_exists(rest):
                raise not_found("Namespace", f"Namespace does not exist: {'.'.join(levels)}")
        return Response(status_code=204)

    @app.delete(base + "/namespaces/{namespace}")
    @_errors(commit=True)
    def drop_namespace(namespace: str, s: _Scope = Depends(resolve)) -> Response:
        levels = parse_namespace(namespace)
        system = s.system(levels)
        if system is not None:
            system.drop()
        else:
            with s.route(levels) as (cat, rest, _):
                cat.drop_namespace(rest)
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
        system = s.system(levels)
        if system is not None:
            return json_response(system.update(request.removals, request.updates))
        with s.route(levels) as (cat, rest, _):
            summary = cat.update_namespace_properties(
                rest, removals=set(request.removals), updates=request.updates
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
        system = s.system(levels)
        if system is not None:
            system.properties()
            found: list[Identifier] = []
        else:
            with s.route(levels) as (cat, rest, pre):
                found = sorted((*pre, *t) for t in cat.list_tables(rest))
        page, next_token = _page(found, page_token, page_size)
        ids = [{"namespace": list(t[:-1]), "name": t[-1]} for t in page]
        return json_response({"identifiers": ids, "next-page-token": next_token})

    @app.post(base + "/namespaces/{namespace}/tables")
    @_errors(commit=True)
    def create_table(
        namespace: str, request: CreateTableRequest, s: _Scope = Depends(resolve)
    ) -> Response:
        levels = parse_namespace(namespace)
        name = check_level("table name", request.name)
        spec = request.partition_spec or UNPARTITIONED_PARTITION_SPEC
        order = request.write_order or UNSORTED_SORT_ORDER
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
                    request.properties,
                )._table
                return load_result(staged.metadata, None)
            table = cat.create_table(
                identifier, request.table_schema, request.location, spec, order, request.properties
            )
        return load_result(table.metadata, table.metadata_location)

    @app.post(base + "/namespaces/{namespace}/register")
    @_errors(commit=True)
    def register_table(
        namespace: str, request: RegisterTableRequest, s: _Scope = Depends(resolve)
    ) -> Response:
        levels = parse_namespace(namespace)
        name = check_level("table name", request.name)
        with s.route(levels) as (cat, rest, _):
            identifier = (*rest, name)
            location = check_metadata_location(request.metadata_location)
            with _metadata_file(location):
                if request.overwrite and cat.table_exists(identifier):
                    with s.atomic(cat) as txn:
                        txn.drop_table(identifier)
                        txn.register_table(identifier, location)
                    table = cat.load_table(identifier)
                else:
                    table = cat.register_table(identifier, location)
        return load_result(table.metadata, table.metadata_location)

    @app.get(base + "/namespaces/{namespace}/tables/{table}")
    @_errors()
    def load_table(
        namespace: str,
        table: str,
        snapshots: Literal["all", "refs"] | None = None,
        s: _Scope = Depends(resolve),
    ) -> Response:
        identifier = table_identifier(namespace, table)
        with s.route(identifier[:-1]) as (cat, rest, _):
            loaded = cat.load_table((*rest, identifier[-1]))
        return load_result(loaded.metadata, loaded.metadata_location)

    @app.head(base + "/namespaces/{namespace}/tables/{table}")
    @_errors()
    def table_exists(namespace: str, table: str, s: _Scope = Depends(resolve)) -> Response:
        identifier = table_identifier(namespace, table)
        with s.route(identifier[:-1]) as (cat, rest, _):
            if not cat.table_exists((*rest, identifier[-1])):
                raise not_found("Table", f"Table does not exist: {'.'.join(identifier)}")
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
        with s.route(identifier[:-1]) as (cat, rest, _):
            response = _commit_one(s.root, cat, (*rest, identifier[-1]), request)
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
        with s.route(identifier[:-1]) as (cat, rest, _):
            if purge:
                cat.purge_table((*rest, identifier[-1]))
            else:
                cat.drop_table((*rest, identifier[-1]))
        return Response(status_code=204)

    @app.post(base + "/namespaces/{namespace}/tables/{table}/metrics")
    @_errors()
    def report_metrics(
        namespace: str,
        table: str,
        report: ReportMetricsRequest,
        s: _Scope = Depends(resolve),
    ) -> Response:
        table_identifier(namespace, table)
        return Response(status_code=204)

    @app.post(base + "/tables/rename")
    @_errors(commit=True)
    def rename_table(request: RenameTableRequest, s: _Scope = Depends(resolve)) -> Response:
        source_ns = check_namespace(request.source.namespace)
        dest_ns = check_namespace(request.destination.namespace)
        source_name = check_level("source name", request.source.name)
        dest_name = check_level("destination name", request.destination.name)
        with s.route(source_ns) as (cat, rest, pre):
            if dest_ns[: len(pre)] != pre or (pre and len(dest_ns) <= len(pre)):
                raise bad_request("a table cannot be renamed into or out of a transaction")
            cat.rename_table((*rest, source_name), (*dest_ns[len(pre) :], dest_name))
        return Response(status_code=204)

    # -- views -----------------------------------------------------------
    @app.get(base + "/namespaces/{namespace}/views")
    @_errors()
    def list_views(
        namespace: str,
        page_token: str | None = Query(default=None, alias="pageToken"),
        page_size: int | None = Query(default=None, alias="pageSize", ge=1, le=MAX_PAGE_SIZE),
        s: _Scope = Depends(resolve),
    ) -> Response:
        levels = parse_namespace(namespace)
        with s.route(levels) as (cat, rest, pre):
            found = sorted((*pre, *v) for v in cat.list_views(rest))
        page, next_token = _page(found, page_token, page_size)
        ids = [{"namespace": list(v[:-1]), "name": v[-1]} for v in page]
        return json_response({"identifiers": ids, "next-page-token": next_token})

    @app.post(base + "/namespaces/{namespace}/views")
    @_errors(commit=True)
    def create_view(
        namespace: str, request: CreateViewRequest, s: _Scope = Depends(resolve)
    ) -> Response:
        levels = parse_namespace(namespace)
        name = check_level("view name", request.name)
        with s.route(levels) as (cat, rest, _):
            cat.create_view(
                (*rest, name),
                request.view_schema,
                request.view_version,
                request.location,
                request.properties,
            )
            return view_result(cat, (*rest, name))

    @app.post(base + "/namespaces/{namespace}/register-view")
    @_errors(commit=True)
    def register_view(
        namespace: str, request: RegisterViewRequest, s: _Scope = Depends(resolve)
    ) -> Response:
        levels = parse_namespace(namespace)
        name = check_level("view name", request.name)
        location = check_metadata_location(request.metadata_location)
        with s.route(levels) as (cat, rest, _), _metadata_file(location):
            cat.register_view((*rest, name), location)
            return view_result(cat, (*rest, name))

    @app.get(base + "/namespaces/{namespace}/views/{view}")
    @_errors()
    def load_view(namespace: str, view: str, s: _Scope = Depends(resolve)) -> Response:
        levels = parse_namespace(namespace)
        name = check_level("view name", view)
        with s.route(levels) as (cat, rest, _):
            return view_result(cat, (*rest, name))

    @app.head(base + "/namespaces/{namespace}/views/{view}")
    @_errors()
    def view_exists(namespace: str, view: str, s: _Scope = Depends(resolve)) -> Response:
        levels = parse_namespace(namespace)
        name = check_level("view name", view)
        with s.route(levels) as (cat, rest, _):
            if not cat.view_exists((*rest, name)):
                raise not_found("View", f"View does not exist: {'.'.join((*levels, name))}")
        return Response(status_code=204)

    @app.delete(base + "/namespaces/{namespace}/views/{view}")
    @_errors(commit=True)
    def drop_view(namespace: str, view: str, s: _Scope = Depends(resolve)) -> Response:
        levels = parse_namespace(namespace)
        name = check_level("view name", view)
        with s.route(levels) as (cat, rest, _):
            cat.drop_view((*rest, name))
        return Response(status_code=204)

    @app.post(base + "/namespaces/{namespace}/views/{view}")
    @_errors(commit=True)
    def replace_view(
        namespace: str, view: str, request: CommitViewRequest, s: _Scope = Depends(resolve)
    ) -> Response:
        levels = parse_namespace(namespace)
        name = check_level("view name", view)
        with s.route(levels) as (cat, rest, _):
            metadata, location = cat.commit_view(
                (*rest, name), request.requirements, request.updates
            )
        return view_body(metadata, location)

    @app.post(base + "/views/rename")
    @_errors(commit=True)
    def rename_view(request: RenameTableRequest, s: _Scope = Depends(resolve)) -> Response:
        source_ns = check_namespace(request.source.namespace)
        dest_ns = check_namespace(request.destination.namespace)
        source_name = check_level("source name", request.source.name)
        dest_name = check_level("destination name", request.destination.name)
        with s.route(source_ns) as (cat, rest, pre):
            if dest_ns[: len(pre)] != pre or (pre and len(dest_ns) <= len(pre)):
                raise bad_request("a view cannot be renamed into or out of a transaction")
            cat.rename_view((*rest, source_name), (*dest_ns[len(pre) :], dest_name))
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
        if not changes:
            return Response(status_code=204)
        scopes = {s.scope_key(identifier[:-1]) for identifier, _ in changes}
        if len(scopes) > 1:
            raise bad_request("table-changes name tables inside and outside a transaction")
        with s.route(changes[0][0][:-1]) as (cat, _, pre), s.atomic(cat) as txn:
            for identifier, change in changes:
                _commit_one(s.root, txn, identifier[len(pre) :], change)
        return Response(status_code=204)


# --- authentication and body size, for every route (also unknown ones) -------

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _is_uuid(value: bytes) -> bool:
    try:
        return len(value) == 36 and uuid.UUID(value.decode("ascii")) is not None
    except ValueError:
        return False


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
                refusal = (
                    oauth_error(401, "invalid_client")
                    if scope.get("path") == OAUTH_TOKENS
                    else error_response(UNAUTHORIZED, head)
                )
                await refusal(scope, receive, send)
                return
        key = headers.get(b"idempotency-key")
        if key is not None and not _is_uuid(key):
            # The key is not used (the server does not replay responses), but
            # one that is not a UUID is a malformed request.
            bad = bad_request("the Idempotency-Key header is not a UUID")
            await error_response(bad, head)(scope, receive, send)
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


# --- names holding "/" in the path (spec/rest.md §5) --------------------------

#: Scope key set when the routing path keeps ``%2F`` and ``%25`` encoded.
_KEPT_ESCAPES = "olympia.kept_escapes"
#: A kept escape in a routing path (and a raw ``%`` that starts no escape).
_KEPT_ESCAPE = re.compile(r"%(?:2[fF]|25|(?![0-9A-Fa-f]{2}))")


def _unescape(m: re.Match[str]) -> str:
    return "/" if m.group().upper() == "%2F" else "%"


def _keep(m: re.Match[str]) -> str:
    return "%2F" if m.group().upper() == "%2F" else "%25"


def routing_path(raw_path: str) -> str:
    """``raw_path`` decoded except for ``%2F`` and ``%25`` (and a ``%`` that
    starts no escape, which becomes ``%25``): a ``/`` of the result is a ``/``
    of the request, and decoding ``%2F`` and ``%25`` in one segment of it
    gives that segment as the server would otherwise decode it."""
    pieces = _KEPT_ESCAPE.split(raw_path)
    kept = [_keep(m) for m in _KEPT_ESCAPE.finditer(raw_path)]
    return unquote(pieces[0]) + "".join(k + unquote(p) for k, p in zip(kept, pieces[1:]))


class _EncodedSlashes:
    """Routes a request whose path holds ``%2F`` on the path with ``%2F``
    kept encoded, so that a namespace, table or view name holding ``/``
    stays one path parameter (the server otherwise decodes the path before
    routing); :class:`_Route` decodes the parameters. Other paths are routed
    as they come."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path") if scope["type"] == "http" else None
        if isinstance(raw, bytes) and b"%2f" in raw.lower():
            path = routing_path(raw.decode("latin-1"))
            # Only when it is the server's path with some "/" kept encoded
            # (not so, e.g., for a root_path that holds "%").
            if _KEPT_ESCAPE.sub(_unescape, path) == scope.get("path"):
                scope = {**scope, "path": path, _KEPT_ESCAPES: True}
        await self.app(scope, receive, send)
