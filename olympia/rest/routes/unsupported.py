"""Operations of the specification this server does not implement (and does
not advertise), answered with a status the specification documents for them
rather than a bare 404/405; and the deprecated ``oauth/tokens`` (this server
issues no tokens)."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import APIRouter, Response

from olympia.rest.errors import RestError
from olympia.rest.responses import OAUTH_TOKENS, oauth_error
from olympia.rest.routes.common import new_router

# (method, route below /v1/{prefix}, status)
_UNSUPPORTED = (
    ("POST", "/namespaces/{namespace}/tables/{table}/plan", 406),
    ("POST", "/namespaces/{namespace}/tables/{table}/sign", 400),
)


def _refusal(error: RestError) -> Callable[[], Response]:
    def refuse() -> Response:
        raise error

    return refuse


def _refusals() -> APIRouter:
    router = new_router()
    for method, route, code in _UNSUPPORTED:
        kind = "UnsupportedOperationException" if code == 406 else "BadRequestException"
        operation = f"{method} /v1/{{prefix}}{route}"
        error = RestError(code, kind, f"this server does not implement {operation}")
        router.add_api_route(route, _refusal(error), methods=[method])
    return router


#: Below ``/v1/{prefix}``.
router = _refusals()

#: At the root.
oauth_router = new_router()


@oauth_router.post(OAUTH_TOKENS)
def tokens() -> Response:
    return oauth_error(400, "unsupported_grant_type")
