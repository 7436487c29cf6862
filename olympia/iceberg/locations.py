"""Which storage locations a catalog may read, write and delete (spec/rest.md §10).

A table's or view's location, the metadata file named on ``register``, the
``write.*.path`` properties and the manifest list of every snapshot a commit
adds come from whoever calls the catalog: through the REST server, from
clients the server does not trust. :class:`LocationPolicy` is the one place
that decides whether such a location is acceptable:

* it must be absolute: a URI with a scheme (``s3://bucket/key``,
  ``file:///path``) or an absolute path; never empty, relative, or holding
  a ``.`` or ``..`` segment; and its scheme one PyIceberg has a FileIO for
  (a root of another scheme would let tables be created that no one can
  write, so the operator hears it when the server starts); a ``file`` URI
  names no host (``file://tmp/x`` is, to PyIceberg's FileIO, the relative
  path ``tmp/x``), no location holds ``?`` or ``#`` (where that FileIO
  ends the path), and an object store's location has no empty segment
  (its keys are text: ``s3://b/t//x`` does not lie under ``s3://b/t``);
* with allowed roots (the REST server's warehouse and each
  ``--allowed-location``), it must lie under one of them, compared segment
  by segment after normalising the scheme (``s3a://`` and ``s3n://`` are
  ``s3://``; ``/x``, ``file:/x`` and ``file:///x`` are one local path).

Refusals are :class:`LocationNotAllowedError` (PyIceberg's ``ForbiddenError``,
REST 403) naming the location and the rule, never any file's content.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pyiceberg.exceptions import ForbiddenError
from pyiceberg.io import SCHEMA_TO_FILE_IO
from pyiceberg.table.locations import LocationProvider, load_location_provider
from pyiceberg.typedef import Properties

from olympia.errors import OlympiaError

_S3_SCHEMES = ("s3", "s3a", "s3n")
#: Schemes whose file systems take repeated slashes for one (POSIX paths,
#: Hadoop paths); in an object store's location they are refused instead.
_FOLDING_SCHEMES = ("file", "hdfs", "viewfs")


class LocationNotAllowedError(ForbiddenError, OlympiaError):
    """A location named by a caller is malformed or outside the allowed roots."""


def normalize(location: str, what: str = "location") -> str:
    """``location`` in one canonical form (scheme://path, no trailing ``/``).

    Raises:
        LocationNotAllowedError: it is empty, relative, begins or ends
            with white space, names the root of its file system, has a
            ``.`` or ``..`` segment or a scheme
            without a FileIO, holds ``?`` or ``#``, is a ``file`` URI
            naming a host, or is an object store's location with an empty
            segment.
    """
    if not isinstance(location, str) or not location.strip():
        raise LocationNotAllowedError(f"{what} is empty")
    text = location
    if text != text.strip():
        # A FileIO takes the white space for part of the path (" /x" is a
        # folder named " " under the working directory): what is checked
        # must be what it touches.
        raise LocationNotAllowedError(f"{what} {location!r} begins or ends with white space")
    if "\\" in text or any(ord(c) < 0x20 for c in text):
        raise LocationNotAllowedError(f"{what} {location!r} holds a backslash or control character")
    if "?" in text or "#" in text:
        # PyIceberg's FileIO parses a location as a URL: "s3://b/t#1/x" is
        # the key t, and two tables would share it.
        raise LocationNotAllowedError(
            f"{what} {location!r} holds '?' or '#', which PyIceberg's FileIO takes for the "
            f"start of a query or fragment (write them as %3F and %23)"
        )
    scheme, sep, rest = text.partition("://")
    if not sep:
        if text[:6].lower() == "file:/":
            scheme, rest = "file", text[len("file:") :]
        elif text.startswith("/"):
            scheme, rest = "file", text
        else:
            raise LocationNotAllowedError(
                f"{what} {location!r} is relative: give a URI (s3://bucket/path, "
                f"file:///path) or an absolute path"
            )
    scheme = scheme.lower()
    if scheme not in SCHEMA_TO_FILE_IO:
        known = ", ".join(f"{k}://" for k in sorted(SCHEMA_TO_FILE_IO))
        raise LocationNotAllowedError(
            f"{what} {location!r} has the scheme {scheme!r}, for which no FileIO exists "
            f"(known: {known})"
        )
    if scheme in _S3_SCHEMES:
        scheme = "s3"
    if not rest.strip("/"):
        raise LocationNotAllowedError(f"{what} {location!r} names the root of its file system")
    # The authority (an object store's bucket, a name node; none for local
    # paths), then the path's segments.
    authority, _, path = rest.partition("/")
    if scheme == "file" and authority:
        # PyIceberg's FileIO reads "file://tmp/x" as the relative path tmp/x
        # (and "file://localhost/x" as localhost/x): what is checked here
        # must be what the FileIO touches.
        raise LocationNotAllowedError(
            f"{what} {location!r} names a host ({authority!r}); a local location is "
            f"file:///path or an absolute path"
        )
    segments = path.rstrip("/").split("/") if path.rstrip("/") else []
    if scheme in _FOLDING_SCHEMES:
        # Their file systems read "a//b" as "a/b".
        segments = [s for s in segments if s]
    elif not authority or "" in segments:
        # An object store's key is its text: "s3://b/t//x" does not lie
        # under s3://b/t, and "s3:///b" names no bucket.
        raise LocationNotAllowedError(
            f"{what} {location!r} has an empty bucket or an empty segment between two slashes"
        )
    if any(s in (".", "..") for s in [authority, *segments]):
        raise LocationNotAllowedError(f"{what} {location!r} has a '.' or '..' segment")
    if not authority and not segments:
        raise LocationNotAllowedError(f"{what} {location!r} names the root of its file system")
    return f"{scheme}://{'/'.join([authority, *segments])}"


#: The table property naming a class PyIceberg imports as the table's
#: location provider. Never honoured: a table property never chooses code
#: the catalog (or the REST server, for its clients) runs.
PROVIDER_IMPL = "write.py-location-provider.impl"


def location_provider(location: str, properties: Properties, what: str) -> LocationProvider:
    """PyIceberg's built-in location provider of a table (the object-store
    one when ``write.object-storage.enabled``, else the simple one).

    Raises:
        ValueError: ``properties`` name a provider class to import
            (:data:`PROVIDER_IMPL`), naming ``what`` (the table).
    """
    if properties.get(PROVIDER_IMPL):
        raise ValueError(
            f"{what} sets {PROVIDER_IMPL}: olympia never imports a class a table property "
            f"names; remove the property (files go where PyIceberg's built-in location "
            f"providers put them)"
        )
    return load_location_provider(location, properties)


def without_provider_impl(properties: Properties) -> Properties:
    """``properties`` without :data:`PROVIDER_IMPL` (for tables committed
    before it was refused, handed to PyIceberg's own writers)."""
    if PROVIDER_IMPL not in properties:
        return properties
    return {k: v for k, v in properties.items() if k != PROVIDER_IMPL}


def path_segment(name: str) -> str:
    """``name`` as one segment of a default location (spec/iceberg.md §2):
    ``%`` becomes ``%25``, then ``/``, ``#`` and ``?`` become ``%2F``,
    ``%23`` and ``%3F``, and a name that is exactly ``.`` becomes ``%2E``,
    so that a name never adds a folder level, never ends the path where a
    FileIO parsing it as a URL would (``#``, ``?``),
    never names the folder it is in or one above it (``..`` is no name,
    spec/format.md §5.1), and two names never share a segment. File systems
    and object stores take the result literally (``%2F`` is not decoded)."""
    segment = name.replace("%", "%25").replace("/", "%2F").replace("#", "%23").replace("?", "%3F")
    return "%2E" if segment == "." else segment


def is_under(location: str, root: str) -> bool:
    """Whether normalised ``location`` is ``root`` or lies inside it."""
    return location == root or location.startswith(root + "/")


def overlap(a: str, b: str) -> bool:
    """Whether one of two normalised locations lies inside the other."""
    return is_under(a, b) or is_under(b, a)


class LocationPolicy:
    """The locations a catalog accepts from its callers (see the module docstring)."""

    def __init__(
        self,
        roots: Sequence[str] = (),
        *,
        reserved: Sequence[str] = (),
        allow_overlap: bool = True,
    ) -> None:
        """``roots``: the allowed locations (none: any absolute location);
        ``reserved``: locations no table, view or file named by a caller may
        overlap (the catalog's own folders); ``allow_overlap``: whether one
        table's location may lie inside another's."""
        self.roots = tuple(dict.fromkeys(normalize(r, "allowed location") for r in roots))
        self.reserved = tuple(dict.fromkeys(normalize(r, "reserved location") for r in reserved))
        self.allow_overlap = allow_overlap

    @property
    def restricted(self) -> bool:
        return bool(self.roots)

    def check(self, location: str, what: str) -> str:
        """``location`` normalised, when it is acceptable.

        Raises:
            LocationNotAllowedError: it is malformed or outside every root.
        """
        normal = normalize(location, what)
        for folder in self.reserved:
            if overlap(normal, folder):
                raise LocationNotAllowedError(
                    f"{what} {location!r} overlaps {folder}, which holds the catalog's own files"
                )
        if self.roots and not any(is_under(normal, root) for root in self.roots):
            raise LocationNotAllowedError(
                f"{what} {location!r} is outside the locations this catalog allows "
                f"({', '.join(self.roots)}); the operator can allow more with "
                f"--allowed-location"
            )
        return normal

    def check_all(self, locations: Iterable[tuple[str, str]]) -> None:
        for location, what in locations:
            self.check(location, what)


__all__ = ["LocationNotAllowedError", "LocationPolicy", "is_under", "normalize", "overlap"]
