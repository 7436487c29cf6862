"""Response bodies of the REST server: JSON, errors (``IcebergErrorResponse``
and ``OAuthError``), ``LoadTableResult`` and ``LoadViewResult``."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Response
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import Identifier
from pyiceberg.view.metadata import ViewMetadata

from olympia.iceberg import OlympiaCatalog, names
from olympia.iceberg.metadata import to_json as metadata_json
from olympia.iceberg.transaction import translate_errors
from olympia.rest.errors import RestError, not_found

#: The deprecated token endpoint; this server issues no tokens.
OAUTH_TOKENS = "/v1/oauth/tokens"


def json_response(payload: Any, status: int = 200) -> Response:
    return Response(json.dumps(payload), status_code=status, media_type="application/json")


def error_response(err: RestError, head: bool = False, flat: bool = False) -> Response:
    body = b"" if head else err.body(flat=flat)
    return Response(body, status_code=err.code, media_type="application/json")


def oauth_error(code: int, error: str) -> Response:
    """An ``OAuthError`` response (the error shape of ``oauth/tokens``)."""
    description = (
        "this server issues no tokens; give the bearer token it was started with"
        if code == 400
        else "missing or wrong bearer token"
    )
    return json_response({"error": error, "error_description": description}, code)


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
