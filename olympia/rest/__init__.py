"""An Iceberg REST catalog server over olympia (spec/rest.md).

Needs the ``rest`` extra (FastAPI, uvicorn). It sits above the Iceberg layer:
it serves any PyIceberg ``Catalog``, normally ``olympia.iceberg.OlympiaCatalog``.
"""

from olympia.rest.app import DEFAULT_PREFIX, create_app
from olympia.rest.server import BackgroundServer, open_catalog, serve, start_background

__all__ = [
    "DEFAULT_PREFIX",
    "BackgroundServer",
    "create_app",
    "open_catalog",
    "serve",
    "start_background",
]
