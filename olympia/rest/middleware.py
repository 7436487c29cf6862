"""ASGI wrappers around the whole application, so that they hold for every
request, also one that no route matches: :class:`Guard` (bearer token,
body size, ``Idempotency-Key``) and :class:`EncodedSlashes` (names holding
``/``, spec/rest.md §5)."""

from __future__ import annotations

import hmac
import re
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import unquote

from olympia.rest.errors import UNAUTHORIZED, RestError, bad_request
from olympia.rest.responses import OAUTH_TOKENS, error_response, oauth_error

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


class Guard:
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
KEPT_ESCAPES = "olympia.kept_escapes"
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


def decode_kept(value: str) -> str:
    """A path parameter of a routing path (``KEPT_ESCAPES``) with its kept
    ``%2F`` and ``%25`` decoded."""
    return _KEPT_ESCAPE.sub(_unescape, value)


class EncodedSlashes:
    """Routes a request whose path holds ``%2F`` on the path with ``%2F``
    kept encoded, so that a namespace, table or view name holding ``/``
    stays one path parameter (the server otherwise decodes the path before
    routing); :class:`olympia.rest.routes.common.Route` decodes the
    parameters. Other paths are routed as they come."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path") if scope["type"] == "http" else None
        if isinstance(raw, bytes) and b"%2f" in raw.lower():
            path = routing_path(raw.decode("latin-1"))
            # Only when it is the server's path with some "/" kept encoded
            # (not so, e.g., for a root_path that holds "%").
            if decode_kept(path) == scope.get("path"):
                scope = {**scope, "path": path, KEPT_ESCAPES: True}
        await self.app(scope, receive, send)
