"""Running the REST application: in the foreground (``olympia serve``) or in a
background thread of the current process (tests, the Spark helper)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI
from pyiceberg.catalog import Catalog, load_catalog

from olympia.rest.app import DEFAULT_MAX_BODY_BYTES, DEFAULT_PREFIX, create_app
from olympia.rest.sessions import DEFAULT_IDLE_SECONDS, DEFAULT_MAX_OPEN

CATALOG_IMPL = "olympia.iceberg.OlympiaCatalog"
TOKEN_ENV = "OLYMPIA_TOKEN"


def open_catalog(
    warehouse: str,
    properties: Mapping[str, str] | None = None,
    *,
    allowed_locations: Sequence[str] = (),
    allow_overlapping_locations: bool = False,
) -> Catalog:
    """The olympia PyIceberg catalog at ``warehouse`` (spec/iceberg.md §1), as
    the REST server serves it to clients it does not trust (spec/rest.md §10):
    every location a client names must lie under the warehouse or one of
    ``allowed_locations``, and table locations may not overlap unless
    ``allow_overlapping_locations``. A relative folder is taken from the
    working folder, as an absolute path: the table locations the server
    hands to clients must not depend on where it runs."""
    if "://" not in warehouse and warehouse.strip() and not os.path.isabs(warehouse):
        warehouse = os.path.abspath(warehouse)
    guarded = {
        "allowed-locations": ",".join([warehouse, *allowed_locations]),
        "allow-overlapping-locations": "true" if allow_overlapping_locations else "false",
        # A plain commit's requirements hold against the newest metadata (§3).
        "strict-requirements": "true",
    }
    return load_catalog(
        "olympia",
        **{
            "py-catalog-impl": CATALOG_IMPL,
            "warehouse": warehouse,
            **(properties or {}),
            **guarded,
        },
    )


def read_token(token_file: str | None) -> str | None:
    """The bearer token from ``token_file`` (first line) or else ``$OLYMPIA_TOKEN``.

    Raises:
        ValueError: the file is empty or unreadable.
    """
    if token_file is not None:
        try:
            text = Path(token_file).read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"cannot read the token file {token_file}: {exc.strerror}") from exc
        token = text.strip().splitlines()[0].strip() if text.strip() else ""
        if not token:
            raise ValueError(f"the token file {token_file} is empty")
        return token
    return os.environ.get(TOKEN_ENV) or None


class BackgroundServer:
    """A uvicorn server for ``app`` on a thread of this process.

    ``port=0`` picks a free port; :attr:`uri` is the catalog URI to give a
    client. Use as a context manager, or call :meth:`start` and :meth:`stop`.
    """

    def __init__(self, app: FastAPI, host: str = "127.0.0.1", port: int = 0) -> None:
        # IPPROTO_TCP: asyncio sets TCP_NODELAY only on sockets created with it;
        # without it every response with a body waits for a delayed ACK (~40 ms).
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self.host, self.port = self._sock.getsockname()[:2]
        self._app = app
        config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [self._sock]},
            daemon=True,
            name="olympia-rest",
        )

    @property
    def uri(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> BackgroundServer:
        """Start serving (a no-op when started already); wait until it listens."""
        if self._thread.ident is not None:
            return self
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the REST server on {self.uri} did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        with contextlib.suppress(OSError):
            self._sock.close()
        close_transactions(self._app)

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def start_background(
    warehouse: str,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    token: str | None = None,
    prefix: str = DEFAULT_PREFIX,
    allowed_locations: Sequence[str] = (),
    **properties: str,
) -> BackgroundServer:
    """Serve the olympia catalog at ``warehouse`` from a thread; started."""
    catalog = open_catalog(warehouse, properties, allowed_locations=allowed_locations)
    app = create_app(catalog, prefix=prefix, token=token)
    return BackgroundServer(app, host, port).start()


def serve(
    warehouse: str,
    *,
    properties: Mapping[str, str] | None = None,
    host: str = "127.0.0.1",
    port: int = 8181,
    token: str | None = None,
    prefix: str = DEFAULT_PREFIX,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    allowed_locations: Sequence[str] = (),
    allow_overlapping_locations: bool = False,
    transaction_idle_seconds: float = DEFAULT_IDLE_SECONDS,
    max_open_transactions: int = DEFAULT_MAX_OPEN,
) -> None:
    """Serve the olympia catalog at ``warehouse`` until interrupted;
    ``properties``: more catalog properties, such as PyIceberg's ``s3.*``.

    Raises:
        ValueError: a setting is refused, or ``host``:``port`` cannot be
            listened on (in use, a host that does not resolve).
    """
    # Bound first, so that a port in use or a host that does not resolve is
    # an error naming them (uvicorn would log its own and exit 3), and
    # leaves no new catalog behind.
    try:
        family, _, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, socket.SOCK_STREAM, proto)
    except OSError as exc:
        raise ValueError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise ValueError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    try:
        catalog = open_catalog(
            warehouse,
            properties,
            allowed_locations=allowed_locations,
            allow_overlapping_locations=allow_overlapping_locations,
        )
        app = create_app(
            catalog,
            prefix=prefix,
            token=token,
            max_body_bytes=max_body_bytes,
            transaction_idle_seconds=transaction_idle_seconds,
            max_open_transactions=max_open_transactions,
        )
    except BaseException:
        sock.close()
        raise
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    # uvicorn, given a socket, does not say where it listens.
    sys.stderr.write(
        f"olympia serve: the catalog at {warehouse} on http://{shown}:{bound_port} "
        f"(Iceberg REST prefix {prefix!r}; Ctrl-C stops)\n"
    )
    sys.stderr.flush()
    # uvicorn stops gracefully on SIGTERM, then raises it again: with the
    # default handler the process would die before the finally below.
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _interrupt) if main else None
    try:
        uvicorn.Server(uvicorn.Config(app, log_level="info")).run(sockets=[sock])
    finally:
        try:
            close_transactions(app)
        finally:
            if main:
                signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM as Ctrl-C: the server stops the same way."""
    raise KeyboardInterrupt


def close_transactions(app: Any) -> None:
    """Roll back the local ``/txn`` transactions still open when the server
    stops (spec/rest.md §8), with the files their clients wrote. ``app`` is
    the application :func:`create_app` made (anything else, such as a
    middleware wrapped around it, holds none)."""
    served = getattr(getattr(app, "state", None), "olympia", None)
    sessions = getattr(served, "sessions", None)
    if sessions is not None:
        sessions.close()
