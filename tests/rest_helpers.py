"""Helpers for the REST server tests: a server over a fresh olympia warehouse,
PyIceberg's REST client on it, and raw requests built from PyIceberg's own
transactions."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.table import Transaction

from olympia.iceberg import OlympiaCatalog
from olympia.rest import BackgroundServer, create_app, open_catalog

PREFIX = "olympia"


@dataclass
class Served:
    """A running server, the catalog it serves and its warehouse URI."""

    server: BackgroundServer
    catalog: OlympiaCatalog
    warehouse: str

    @property
    def uri(self) -> str:
        return self.server.uri

    def url(self, path: str) -> str:
        """``path`` under ``/v1/{prefix}/``."""
        return f"{self.uri}/v1/{PREFIX}/{path.lstrip('/')}"

    def client(self, **properties: str) -> Catalog:
        """PyIceberg's REST client on this server."""
        return load_catalog("rest", **{"type": "rest", "uri": self.uri, **properties})


@contextmanager
def serve(
    tmp: Path,
    *,
    allowed_locations: tuple[str, ...] = (),
    allow_overlapping_locations: bool = False,
    **app_options: Any,
) -> Iterator[Served]:
    warehouse = f"file://{tmp}/warehouse"
    catalog = open_catalog(
        warehouse,
        allowed_locations=allowed_locations,
        allow_overlapping_locations=allow_overlapping_locations,
    )
    assert isinstance(catalog, OlympiaCatalog)
    with BackgroundServer(create_app(catalog, prefix=PREFIX, **app_options)) as server:
        yield Served(server, catalog, warehouse)
    catalog.close()


def change_of(tx: Transaction) -> dict[str, Any]:
    """The ``CommitTableRequest`` JSON of a PyIceberg transaction not yet committed."""
    namespace, name = tx._table.name()[:-1], tx._table.name()[-1]
    return {
        "identifier": {"namespace": list(namespace), "name": name},
        "requirements": [r.model_dump(mode="json") for r in tx._requirements],
        "updates": [u.model_dump(mode="json") for u in tx._updates],
    }


def free_port() -> int:
    """A TCP port of 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def olympia_serve(folder: Path, warehouse: str, *options: str) -> Iterator[str]:
    """``olympia serve`` (the production entry point, in its own process) on
    a free port over ``warehouse``, with ``options``; yields its URI once it
    answers. Its output goes to ``folder/server.log``."""
    port = free_port()
    command = [sys.executable, "-m", "olympia.cli", "serve", "-w", warehouse]
    command += ["--port", str(port), *options]
    log = (folder / "server.log").open("w")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=folder)
    uri = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                requests.get(f"{uri}/v1/config", timeout=1)
                break
            except requests.ConnectionError:
                assert process.poll() is None, (folder / "server.log").read_text()
                time.sleep(0.05)
        yield uri
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()
