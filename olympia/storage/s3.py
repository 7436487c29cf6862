"""Catalog storage on S3 and S3-compatible object stores, through s3fs.

``put_if_absent`` is a conditional PUT (``If-None-Match: *``): S3 answers
``412 Precondition Failed`` when the key exists, and ``409
ConditionalRequestConflict`` when a concurrent conditional write on the same
key was in flight; the latter says nothing about the outcome and is retried.

Reads and existence checks always go to the server: the catalog discovers
new versions by probing with ``exists``, so a cached "not there" would hide
commits. Listings caching is therefore off, and ``read`` / ``exists`` /
``list`` call S3 directly instead of going through s3fs's ``info`` cache.

The first request of a new ``S3FileSystem`` sets up its botocore client,
which costs 0.1-0.2 s; storages of one process opened with equal options
(every ``load_catalog`` of one PyIceberg configuration, say) share one
instance. Options are compared whole, so no setting or credential of one
catalog ever reaches another, and a forked child makes its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import random
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import fsspec.asyn
import s3fs

from olympia.errors import (
    InvalidPathError,
    OlympiaError,
    StorageError,
    StorageFileExistsError,
    StorageFileNotFoundError,
)
from olympia.storage.base import Storage, check_path
from olympia.storage.hostlock import DEFAULT_WAIT_SECONDS, FileHostLock, HostLock, group_folder

#: The S3FileSystem instances shared by storages with equal options (see
#: the module docstring), keyed by process and options, least recently used first.
_SHARED: dict[tuple[int, object], Any] = {}
_SHARED_LOCK = threading.Lock()
_SHARED_MAX = 32


def _frozen(value: object) -> object:
    """A hashable key for ``value`` (storage options): mappings and sequences
    by content, anything else unhashable by identity."""
    if isinstance(value, Mapping):
        return ("map", tuple(sorted((str(k), _frozen(v)) for k, v in value.items())))
    if isinstance(value, (list, tuple)):
        return ("seq", tuple(_frozen(v) for v in value))
    try:
        hash(value)
    except TypeError:
        return ("id", id(value))
    return (type(value).__name__, value)


class S3Storage(Storage):
    """Objects under ``s3://bucket/prefix``.

    ``storage_options`` are passed to ``s3fs.S3FileSystem`` (``endpoint_url``,
    ``key``, ``secret``, ``token``, ``client_kwargs``, ``config_kwargs``, ...),
    except that the instance and listings caches are always off.
    """

    parallel_reads = True
    #: Attempts of a put_if_absent that keeps getting 409 ConditionalRequestConflict.
    conflict_attempts: int = 6
    #: First back-off after a 409, in seconds; doubled per attempt, with jitter.
    conflict_backoff: float = 0.05
    #: How long a commit waits for the publish lock before publishing
    #: without it (spec/transactions.md §3.1).
    publish_lock_wait: float = DEFAULT_WAIT_SECONDS

    def __init__(self, root: str, storage_options: Mapping[str, Any] | None = None) -> None:
        """Open ``bucket/prefix`` (the URI without ``s3://``); no request is sent yet.

        Raises:
            OlympiaError: ``root`` names no bucket.
            StorageError: s3fs refused the options.
        """
        root = root.strip("/")
        bucket, _, prefix = root.partition("/")
        if not bucket:
            raise OlympiaError(f"S3 location 's3://{root}' names no bucket")
        self._bucket = bucket
        #: The group-commit folder once found ("" for none).
        self._group_dir: str | None = None
        self._prefix = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
        self.location = f"s3://{root}"
        options = {**(storage_options or {}), "skip_instance_cache": True}
        options["use_listings_cache"] = False
        # Room for the batched reads of a listing or a probe (up to 64 in
        # one batch); an explicit setting wins.
        options["config_kwargs"] = {
            "max_pool_connections": 64,
            **(options.get("config_kwargs") or {}),
        }
        self._options = options
        self._fs_pid = os.getpid()
        self._fs_obj: Any = self._new_fs()

    def _new_fs(self) -> Any:
        key = (os.getpid(), _frozen(self._options))
        with _SHARED_LOCK:
            fs = _SHARED.pop(key, None)
            if fs is None:
                try:
                    fs = s3fs.S3FileSystem(**self._options)
                except Exception as exc:
                    raise StorageError(
                        f"cannot set up S3 access to {self.location}: {exc}"
                    ) from exc
            _SHARED[key] = fs  # the most recently used last
            while len(_SHARED) > _SHARED_MAX:
                del _SHARED[next(iter(_SHARED))]
            return fs

    @property
    def _fs(self) -> Any:
        """The s3fs client of this process: s3fs refuses to run in a forked
        child (its event loop and connections belong to the parent), so a
        child gets a client of its own on first use."""
        if self._fs_pid != os.getpid():
            self._fs_obj = self._new_fs()
            self._fs_pid = os.getpid()
        return self._fs_obj

    # --- helpers ---------------------------------------------------------------

    def _key(self, path: str) -> str:
        return f"{self._prefix}{path}"

    def _full(self, path: str) -> str:
        return f"{self._bucket}/{self._key(path)}"

    def _translate(self, op: str, path: str, exc: Exception) -> StorageError:
        code, status = _client_error(exc)
        if code == "NoSuchBucket":
            return StorageError(
                f"cannot {op} {path!r}: bucket {self._bucket!r} of {self.location} does not exist"
            )
        if op == "read" and (isinstance(exc, FileNotFoundError) or status == 404):
            return StorageFileNotFoundError(f"file {path!r} not found in {self.location}")
        return StorageError(f"cannot {op} {path!r} in {self.location}: {type(exc).__name__}: {exc}")

    @contextlib.contextmanager
    def _translating(self, op: str, path: str) -> Iterator[None]:
        """Translate every s3fs / botocore / aiohttp / OS error into a StorageError."""
        try:
            yield
        except OlympiaError:
            raise
        except Exception as exc:
            raise self._translate(op, path, exc) from exc

    # --- Storage ---------------------------------------------------------------

    def _read(self, path: str) -> bytes:
        with self._translating("read", path):
            # max_concurrency=1: a single GET. Otherwise s3fs first asks for
            # the size through info(), which may answer from its cache.
            return bytes(self._fs.cat_file(self._full(path), max_concurrency=1))

    def _read_many(
        self, paths: Sequence[str], heads: frozenset[str]
    ) -> list[bytes | bool | StorageError]:
        # One gather on s3fs's event loop: every request is sent before any
        # reply is handled, so the whole batch costs one round trip (the
        # connection pool queues what exceeds its size).
        fs = self._fs

        async def one(path: str) -> bytes | bool | StorageError:
            try:
                if path in heads:
                    await fs._call_s3("head_object", Bucket=self._bucket, Key=self._key(path))
                    return True
                return bytes(await fs._cat_file(self._full(path), max_concurrency=1))
            except OlympiaError as exc:
                return StorageError(str(exc))
            except Exception as exc:
                return self._translate("read", path, exc)

        async def every() -> list[bytes | bool | StorageError]:
            return list(await asyncio.gather(*(one(p) for p in paths)))

        with self._translating("read", paths[0] if paths else ""):
            result: list[bytes | bool | StorageError] = fsspec.asyn.sync(fs.loop, every)
            return result

    def _put_if_absent(self, path: str, data: bytes) -> None:
        delay = self.conflict_backoff
        for attempt in range(1, self.conflict_attempts + 1):
            try:
                self._fs.pipe_file(self._full(path), data, mode="create")
                return
            except Exception as exc:
                code, status = _client_error(exc)
                if (
                    isinstance(exc, FileExistsError)
                    or status == 412
                    or code == "PreconditionFailed"
                ):
                    break
                if status == 409 or code == "ConditionalRequestConflict":
                    if attempt < self.conflict_attempts:
                        time.sleep(delay * random.uniform(0.5, 1.5))
                        delay *= 2
                        continue
                    raise StorageError(
                        f"cannot put_if_absent {path!r} in {self.location}: S3 kept answering "
                        f"409 ConditionalRequestConflict after {attempt} attempts; the file "
                        f"may or may not exist"
                    ) from exc
                raise self._translate("put_if_absent", path, exc) from exc
        # The key exists. It may be this very call's own write: s3fs and
        # botocore resend a PUT whose reply was lost, and the resend then gets
        # 412. Identical bytes therefore count as success (on every backend).
        try:
            existing = self._read(path)
        except StorageFileNotFoundError:
            existing = None  # deleted since: it existed when we lost
        if existing != data:
            raise StorageFileExistsError(
                f"file {path!r} already exists in {self.location}", existing
            )

    def publish_lock(self, while_waiting: Callable[[], None] | None = None) -> HostLock:
        """``flock`` on a file of this host named after the endpoint and the
        location (in a folder of the user's temporary directory): the
        processes of this host that commit to one catalog take turns to
        publish (spec/transactions.md §3.1). ``while_waiting`` is called as
        for local storage; the transaction layer does not look for new
        versions there, which would cost requests (§3.1), but waits for the
        answer to its group-commit request (§3.2)."""
        path = self._lock_path()
        return FileHostLock(path, self.publish_lock_wait, while_waiting, folder_mode=0o700)

    def group_dir(self) -> str | None:
        """Keyed by the endpoint and the location, like the lock file."""
        if self._group_dir is None:
            self._group_dir = group_folder(f"s3\n{self._identity()}") or ""
        return self._group_dir or None

    def _identity(self) -> str:
        endpoint = str(self._options.get("endpoint_url") or "")
        return f"{endpoint}\n{self.location}"

    def _lock_path(self) -> str:
        digest = hashlib.sha256(self._identity().encode()).hexdigest()[:32]
        uid = os.getuid() if hasattr(os, "getuid") else 0
        folder = os.path.join(tempfile.gettempdir(), f"olympia-locks-{uid}")
        return os.path.join(folder, digest)

    def _overwrite(self, path: str, data: bytes) -> None:
        with self._translating("overwrite", path):
            self._fs.pipe_file(self._full(path), data)

    def _exists(self, path: str) -> bool:
        with self._translating("check", path):
            try:
                # A direct HEAD: s3fs's exists() may answer from its caches and
                # also says True for "folders".
                self._fs.call_s3("head_object", Bucket=self._bucket, Key=self._key(path))
            except FileNotFoundError:
                return False
            return True

    def _delete(self, path: str) -> None:
        with self._translating("delete", path):
            try:
                self._fs.rm_file(self._full(path))
            except FileNotFoundError as exc:
                if _client_error(exc)[0] == "NoSuchBucket":
                    raise
                # S3 deletes of missing keys succeed anyway; nothing to do.

    def _list(self, prefix: str) -> list[str]:
        return list(self._list_sizes(prefix))

    def _list_sizes(self, prefix: str) -> dict[str, int]:
        out: dict[str, int] = {}
        request: dict[str, Any] = {"Bucket": self._bucket, "Prefix": f"{self._key(prefix)}/"}
        with self._translating("list", prefix):
            while True:
                reply = self._fs.call_s3("list_objects_v2", **request)
                for obj in reply.get("Contents", []):
                    # Folder markers ("a/") and keys no catalog path can name
                    # are not catalog files.
                    with contextlib.suppress(InvalidPathError):
                        out[check_path(obj["Key"][len(self._prefix) :])] = int(obj.get("Size", 0))
                if not reply.get("IsTruncated"):
                    return out
                request["ContinuationToken"] = reply["NextContinuationToken"]


def _client_error(exc: BaseException) -> tuple[str, int]:
    """Return (S3 error code, HTTP status) of the botocore error behind ``exc``.

    s3fs turns botocore's ``ClientError`` into ``OSError`` subclasses and keeps
    the original as ``__cause__``; that is where the code and status live.
    Returns ``("", 0)`` when there is no HTTP reply behind the error.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        response = getattr(current, "response", None)
        if isinstance(response, dict):
            error = response.get("Error") or {}
            meta = response.get("ResponseMetadata") or {}
            return str(error.get("Code") or ""), int(meta.get("HTTPStatusCode") or 0)
        current = current.__cause__ or current.__context__
    return "", 0
