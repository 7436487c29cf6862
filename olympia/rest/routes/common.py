"""What every router shares: the route class, the error wrapper of route
functions and paging."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from fastapi import APIRouter, Request, Response
from fastapi.routing import APIRoute
from pyiceberg import exceptions as ice
from pyiceberg.typedef import Identifier
from starlette.routing import Match
from starlette.types import Scope

from olympia.rest.errors import RestError, bad_request, classify
from olympia.rest.middleware import KEPT_ESCAPES, decode_kept
from olympia.rest.responses import json_response

log = logging.getLogger("olympia.rest")

MAX_PAGE_SIZE = 100_000

P = ParamSpec("P")
R = TypeVar("R")


class Route(APIRoute):
    """A route whose request parsing cannot fail with a 500: PyIceberg's
    models raise ``TypeError`` (which pydantic does not turn into a
    validation error) for some well-formed JSON they cannot represent, e.g. an
    ``initial-default`` of the wrong type. Route functions turn their own
    exceptions into :class:`RestError` (:func:`errors`), so a ``TypeError`` or
    ``ValueError`` (or a ``KeyError``, ``AttributeError``, or PyIceberg's
    ``ValidationError`` from a model's own check) that gets here came from
    reading the request: 400."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def run(request: Request) -> Response:
            try:
                return await handler(request)
            except (TypeError, ValueError, LookupError, AttributeError, ice.ValidationError) as exc:
                # ValidationError: PyIceberg's own models refusing a value
                # (decimal(1000, 2000), fixed[-1], bucket[-3]).
                raise bad_request(f"invalid request: {exc}") from exc

        return run

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        """As APIRoute's, but with the ``%2F`` and ``%25`` that
        :class:`~olympia.rest.middleware.EncodedSlashes` kept in the path
        decoded in each path parameter this match adds (the router's prefix
        may add some, e.g. ``txn_id``)."""
        match, child = super().matches(scope)
        if match is not Match.NONE and scope.get(KEPT_ESCAPES):
            outer = scope.get("path_params") or {}
            params = child["path_params"]
            for name, value in params.items():
                if name not in outer and isinstance(value, str):
                    params[name] = decode_kept(value)
        return match, child


def new_router() -> APIRouter:
    """A router whose routes are :class:`Route` s."""
    return APIRouter(route_class=Route)


def errors(commit: bool = False) -> Callable[[Callable[P, R]], Callable[P, R]]:
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


def identifiers_page(
    found: list[Identifier], page_token: str | None, page_size: int | None
) -> Response:
    """A ``ListTablesResponse`` (or views): one page of the sorted ``found``."""
    page, next_token = one_page(found, page_token, page_size)
    ids = [{"namespace": list(i[:-1]), "name": i[-1]} for i in page]
    return json_response({"identifiers": ids, "next-page-token": next_token})


def one_page(
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
