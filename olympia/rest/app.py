"""The Iceberg REST catalog API (../shared/iceberg-rest/rest-catalog-open-api.yaml)
as a FastAPI application over a PyIceberg ``Catalog`` (spec/rest.md).

This module builds the application: the routers of :mod:`olympia.rest.routes`
(one per resource), the error handlers that give every failure the
specification's error shape, and the ASGI wrappers of
:mod:`olympia.rest.middleware`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pyiceberg.catalog import Catalog
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import compile_path

from olympia.iceberg import OlympiaCatalog
from olympia.rest.errors import RestError, bad_request, flat_error_body
from olympia.rest.middleware import EncodedSlashes, Guard, routing_path
from olympia.rest.responses import error_response
from olympia.rest.routes import CATALOG, config, txn, unsupported
from olympia.rest.routes.dependencies import Served
from olympia.rest.sessions import DEFAULT_IDLE_SECONDS, DEFAULT_MAX_OPEN, OpenTransactions

__all__ = ["DEFAULT_MAX_BODY_BYTES", "DEFAULT_PREFIX", "create_app", "routing_path"]

log = logging.getLogger("olympia.rest")

DEFAULT_PREFIX = "olympia"
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024


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
    sessions = (
        OpenTransactions(
            catalog, idle_seconds=transaction_idle_seconds, max_open=max_open_transactions
        )
        if isinstance(catalog, OlympiaCatalog)
        else None
    )
    app.state.olympia = Served(catalog, prefix, sessions)
    routes = _Routes(app, f"/v1/{prefix}")
    routes.include_catalog("")
    routes.include(unsupported.router, routes.below)
    routes.include(unsupported.oauth_router)
    if sessions is not None:
        routes.include(txn.router)
        routes.include_catalog(txn.TXN_ROOT)
    _error_handlers(app, routes)
    app.add_middleware(Guard, token=token, max_body_bytes=max_body_bytes)
    app.add_middleware(EncodedSlashes)
    return app


class _Routes:
    """The routes of an application, as its error handlers need them: the
    methods of a path (``Allow``) and the route of a request below
    ``/v1/{prefix}`` (the error shape). Recorded here as routers are
    included, because FastAPI versions differ in what an included route
    looks like: a copy with the prefix in its path in older ones; in newer
    ones the router's own route (no prefix), and ``app.routes`` lists the
    included routers rather than their routes."""

    def __init__(self, app: FastAPI, below: str) -> None:
        self.app = app
        self.below = below
        self._patterns: list[tuple[re.Pattern[str], set[str]]] = []
        self._below: dict[Callable[..., Any], str] = {}

    def include(self, router: APIRouter, prefix: str = "") -> None:
        self.app.include_router(router, prefix=prefix)
        for route in router.routes:
            if isinstance(route, APIRoute):
                pattern = compile_path(prefix + route.path)[0]
                self._patterns.append((pattern, route.methods or set()))
                if prefix.endswith(self.below):
                    self._below[route.endpoint] = route.path

    def include_catalog(self, root: str) -> None:
        """``/v1/config`` and the catalog API, under ``root``."""
        self.include(config.router, root)
        for router in CATALOG:
            self.include(router, root + self.below)

    def allowed(self, path: str) -> set[str]:
        """The methods of the routes of ``path``."""
        return {m for pattern, methods in self._patterns if pattern.match(path) for m in methods}

    def below_prefix(self, request: Request) -> str | None:
        """The route of ``request`` below ``/v1/{prefix}``, with its
        ``{parameters}``; None when it matched no route there."""
        endpoint = getattr(request.scope.get("route"), "endpoint", None)
        return None if endpoint is None else self._below.get(endpoint)


def _error_handlers(app: FastAPI, routes: _Routes) -> None:
    """Every failure as an ``IcebergErrorResponse`` (spec/rest.md §4)."""

    def failed(
        request: Request, err: RestError, headers: Mapping[str, str] | None = None
    ) -> Response:
        route = routes.below_prefix(request)
        flat = route is not None and flat_error_body(request.method, route, err.code)
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
            headers["Allow"] = ", ".join(sorted(routes.allowed(request.scope["path"])))
        return failed(request, RestError(exc.status_code, kind, str(exc.detail)), headers)

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> Response:
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return failed(request, RestError(500, "InternalServerError", f"{type(exc).__name__}"))
