"""Helpers for the REST server tests: a server over a fresh olympia warehouse,
PyIceberg's REST client on it, and raw requests built from PyIceberg's own
transactions."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
