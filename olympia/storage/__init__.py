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


def uri_problem(uri: str) -> str | None:
    """Why :func:`open_storage` would refuse ``uri`` before trying it, or None."""
    if not uri:
        return "is empty"
    protocol, sep, rest = uri.partition("://")
    if not sep:
        return None
    if protocol.lower() not in PROTOCOLS:
        return (
            f"uses protocol {protocol!r}, which is not supported; no atomic put-if-absent "
            f"is known for it (supported: local paths, file://, memory://, s3://, s3a://)"
        )
    if protocol.lower() in S3_PROTOCOLS and not rest.strip("/").partition("/")[0]:
        return "names no S3 bucket"
    return None


def open_storage(uri: str, storage_options: Mapping[str, Any] | None = None) -> Storage:
    """Return the storage for the catalog at ``uri``.

    * a plain path, ``file://...`` or ``local://...``: :class:`LocalStorage`;
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
            put-if-absent; S3 without s3fs installed; an S3 URI with no bucket.
        StorageError: s3fs refused the storage options.
    """
    if not uri:
        raise OlympiaError("empty storage location")
    protocol, sep, rest = uri.partition("://")
    if not sep or protocol.lower() in (*LOCAL_PROTOCOLS, "memory"):
        s3fs_options(storage_options)  # checked, although only S3 uses them
    if not sep:
        return LocalStorage(uri)
    protocol = protocol.lower()
    if protocol in LOCAL_PROTOCOLS:
        from fsspec.implementations.local import LocalFileSystem

        return LocalStorage(LocalFileSystem._strip_protocol(uri))
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
