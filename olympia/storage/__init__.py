"""Storage backends and :func:`open_storage`, which picks one from a URI."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fsspec.implementations.local import LocalFileSystem

from olympia.errors import OlympiaError
from olympia.storage.base import Storage, check_path
from olympia.storage.local import LocalStorage
from olympia.storage.memory import MemoryStorage

__all__ = ["LocalStorage", "MemoryStorage", "Storage", "check_path", "open_storage"]


def open_storage(uri: str, storage_options: Mapping[str, Any] | None = None) -> Storage:
    """Return the storage for the catalog at ``uri``.

    * a plain path, ``file://...`` or ``local://...``: :class:`LocalStorage`;
    * ``memory://name``: :class:`MemoryStorage`, shared by everything in this
      process that opens the same name;
    * ``s3://bucket/prefix`` or ``s3a://...``: ``S3Storage`` (needs
      ``olympia[s3]``).

    ``storage_options`` go to the fsspec file system, as fsspec's own
    ``storage_options`` do; only S3 uses any today (``endpoint_url``, ``key``,
    ``secret``, ``token``, ``client_kwargs={"region_name": ...}``, ...).

    Raises:
        OlympiaError: empty URI; a protocol with no known atomic
            put-if-absent; S3 without s3fs installed; an S3 URI with no bucket.
        StorageError: s3fs refused the storage options.
    """
    if not uri:
        raise OlympiaError("empty storage location")
    protocol, sep, rest = uri.partition("://")
    if not sep:
        return LocalStorage(uri)
    protocol = protocol.lower()
    if protocol in ("file", "local"):
        return LocalStorage(LocalFileSystem._strip_protocol(uri))
    if protocol == "memory":
        return MemoryStorage(rest)
    if protocol in ("s3", "s3a"):
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
