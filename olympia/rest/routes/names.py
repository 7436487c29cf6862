"""Names from requests, checked before they reach the catalog."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from pyiceberg.typedef import Identifier

from olympia.rest.errors import bad_request

NAMESPACE_SEPARATOR = "\x1f"
MAX_NAME_CHARS = 1024


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
def metadata_file(location: str) -> Iterator[None]:
    """Register reads the metadata file before it writes anything: a missing
    file is the request's fault."""
    try:
        yield
    except FileNotFoundError as exc:
        raise bad_request(f"metadata-location {location!r} does not exist") from exc
