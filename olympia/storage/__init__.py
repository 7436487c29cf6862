"""Storage backends and :func:`open_storage`, which picks one from a URI.

fsspec is imported only by the backends that use it (``memory://``, S3) and
by ``file://`` URIs, when one is opened: a local folder's catalog (and every
command of the command line on one) starts without it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from olympia.errors import OlympiaError
from olympia.storage.base import Storage, check_path
from olympia.storage.local import LocalStorage
from olympia.storage.options import s3fs_options

if TYPE_CHECKING:
    from olympia.storage.memory import MemoryStorage

__all__ = ["LocalStorage", "MemoryStorage", "Storage", "check_path", "open_storage", "uri_problem"]

#: URI protocols with a known atomic put-if-absent (anything else is refused).
LOCAL_PROTOCOLS = ("file", "local")
S3_PROTOCOLS = ("s3", "s3a")
PROTOCOLS = (*LOCAL_PROTOCOLS, "memory", *S3_PROTOCOLS)


def __getattr__(name: str) -> Any:
    if name == "MemoryStorage":  # imported on first use: it needs fsspec
        from olympia.storage.memory import MemoryStorage

        return MemoryStorage
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _parts(uri: str) -> tuple[str | None, str]:
    """``(protocol in lower case, the rest)`` of ``uri``; None for a path.

    Schemes are not case sensitive (RFC 3986 §3.1). ``file:/x`` and
    ``local:/x``, as Hadoop and Spark write local paths, are ``/x``; any
    other known protocol followed by ``:`` but not ``//`` comes back with
    an empty rest, which :func:`uri_problem` refuses."""
    protocol, sep, rest = uri.partition("://")
    if sep:
        return protocol.lower(), rest
    head, colon, tail = uri.partition(":")
    if colon and head.lower() in PROTOCOLS:
        if head.lower() in LOCAL_PROTOCOLS and tail.startswith("/"):
            return "file", tail
        return head.lower(), ""
    return None, uri


def uri_problem(uri: str) -> str | None:
    """Why :func:`open_storage` would refuse ``uri`` before trying it, or None."""
    if not uri:
        return "is empty"
    protocol, rest = _parts(uri)
    if protocol is None:
        return None
    if protocol not in PROTOCOLS:
        return (
            f"uses protocol {protocol!r}, which is not supported; no atomic put-if-absent "
            f"is known for it (supported: local paths, file://, memory://, s3://, s3a://)"
        )
    if "://" not in uri and not rest:
        # "s3:/bucket/x" or "memory:x": a protocol without its "//", which a
        # local folder of that name would otherwise silently stand in for.
        return f"names protocol {protocol!r} without '//' (write {protocol}://...)"
    if protocol in S3_PROTOCOLS and not rest.strip("/").partition("/")[0]:
        return "names no S3 bucket"
    if protocol in LOCAL_PROTOCOLS and not rest.startswith("/"):
        # "file://data/lake" is a slash short of /data/lake: fsspec and
        # PyIceberg's FileIO would take it for data/lake under the working
        # directory, the location policy (olympia.iceberg.locations) refuses
        # it, and a catalog would be made where nobody meant one.
        return (
            f"names a host ({rest.partition('/')[0]!r}); a local catalog is "
            f"{protocol}:///path, a path, or a relative path without a protocol"
        )
    return None


def open_storage(uri: str, storage_options: Mapping[str, Any] | None = None) -> Storage:
    """Return the storage for the catalog at ``uri``.

    * a plain path, ``file:///path``, ``file:/path`` or ``local://...``:
      :class:`LocalStorage`;
    * ``memory://name``: :class:`MemoryStorage`, shared by everything in this
      process that opens the same name;
    * ``s3://bucket/prefix`` or ``s3a://...``: ``S3Storage`` (needs
      ``olympia[s3]``).

    ``storage_options`` are PyIceberg's S3 properties (``s3.endpoint``,
    ``s3.region``, ``s3.access-key-id``, ``s3.secret-access-key``,
    ``s3.session-token``, ...) or s3fs's own options (``endpoint_url``,
    ``key``, ``secret``, ``token``, ``client_kwargs``, ...), in one mapping
    (:mod:`olympia.storage.options`); only S3 uses them, but they are
    checked for every URI.

    Raises:
        InvalidArgumentError: an unknown ``s3.*`` option, a bad value, or
            two options that disagree (the message names them).
        OlympiaError: empty URI; a protocol with no known atomic
            put-if-absent, or a known one without ``//``; S3 without s3fs
            installed; an S3 URI with no bucket; a ``file://`` or
            ``local://`` URI naming a host (:func:`uri_problem`).
        StorageError: s3fs refused the storage options.
    """
    if not uri:
        raise OlympiaError("empty storage location")
    protocol, rest = _parts(uri)
    if protocol is None or protocol in (*LOCAL_PROTOCOLS, "memory"):
        s3fs_options(storage_options)  # checked, although only S3 uses them
    if protocol is None:
        return LocalStorage(uri)
    problem = uri_problem(uri)
    if problem is not None:
        raise OlympiaError(f"cannot open {uri!r}: the URI {problem}")
    if protocol in LOCAL_PROTOCOLS:
        from fsspec.implementations.local import LocalFileSystem

        return LocalStorage(LocalFileSystem._strip_protocol(f"file://{rest}"))
    if protocol == "memory":
        from olympia.storage.memory import MemoryStorage

        return MemoryStorage(rest)
    if protocol in S3_PROTOCOLS:
        try:
            from olympia.storage.s3 import S3Storage
        except ImportError as exc:
            raise OlympiaError(
                f"cannot open {uri!r}: S3 support needs s3fs; install it with "
                f"pip install 'olympia[s3]' ({exc})"
            ) from exc
        return S3Storage(rest, storage_options)
    raise OlympiaError(
        f"cannot open {uri!r}: protocol {protocol!r} is not supported; no atomic "
        f"put-if-absent is known for it (supported: local paths, file://, memory://, "
        f"s3://, s3a://)"
    )
