"""Catalog storage on S3 and S3-compatible object stores, through s3fs.

``put_if_absent`` is a conditional PUT (``If-None-Match: *``): S3 answers
``412 Precondition Failed`` when the key exists, and ``409
ConditionalRequestConflict`` when a concurrent conditional write on the same
key was in flight; the latter says nothing about the outcome and is retried.

Reads and existence checks always go to the server: the catalog discovers
new versions by probing with ``exists``, so a cached "not there" would hide
commits. Listings caching is therefore off, and ``read`` / ``exists`` /
``list`` call S3 directly instead of going through s3fs's ``info`` cache.

Batches (``read_many``, and ``put_staged_reading``: a conditional PUT with
GETs sent beside it, which a commit uses so that a loser has the winner's
root at once) are one gather on s3fs's event loop: one round trip.

The first request of a new ``S3FileSystem`` sets up its botocore client,
which costs 0.1-0.2 s; storages of one process opened with equal options
(every ``load_catalog`` of one PyIceberg configuration, say) share one
instance. Options are compared whole, so no setting or credential of one
catalog ever reaches another, and a forked child makes its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import inspect
import os
import random
import tempfile
import threading
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
from olympia.storage.base import Placed, PutAndReads, Staged, Storage, check_path
from olympia.storage.hostlock import DEFAULT_WAIT_SECONDS, FileHostLock, HostLock, group_folder
from olympia.storage.options import s3fs_options

#: The S3FileSystem instances shared by storages with equal options (see
#: the module docstring), keyed by process and options, least recently used first.
_SHARED: dict[tuple[int, object], Any] = {}
_SHARED_LOCK = threading.Lock()
_SHARED_MAX = 32


@functools.cache
def _s3fs_names() -> frozenset[str]:
    """The keyword arguments ``s3fs.S3FileSystem`` declares."""
    parameters = inspect.signature(s3fs.S3FileSystem.__init__).parameters.values()
    return frozenset(
        p.name
        for p in parameters
        if p.name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    )


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


#: Attempts of each of s3fs's two nested retry loops around a request (its
#: default, 5, made 25 of botocore's per read).
_S3FS_RETRIES = 2


class S3Storage(Storage):
    """Objects under ``s3://bucket/prefix``.

    ``storage_options`` are PyIceberg's S3 properties or s3fs's own options
    (:func:`olympia.storage.options.s3fs_options` turns them into s3fs's),
    passed to ``s3fs.S3FileSystem``, except that the instance and listings
    caches are always off.
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
            InvalidArgumentError: an option s3fs does not take, an unknown
                ``s3.*`` option, a bad value, or two options that disagree.
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
        options = {
            **s3fs_options(storage_options, s3fs_names=_s3fs_names()),
            "skip_instance_cache": True,
        }
        options["use_listings_cache"] = False
        # Room for the batched reads of a listing or a probe (up to 128 in
        # one batch, the children of a node of the default order); an
        # explicit setting wins.
        options["config_kwargs"] = {
            "max_pool_connections": 128,
            # botocore retries a request (throttling, a dropped connection, a
            # timeout); s3fs wraps each call in two retry loops of its own, 5
            # attempts each by default, so an endpoint that never answers took
            # 125 attempts per read (minutes to hours). s3fs retries once per
            # loop here, for what botocore does not retry (a body cut short).
            "retries": {"mode": "standard", "max_attempts": 3},
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
                fs.retries = _S3FS_RETRIES  # an attribute, not an option
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

    async def _read_one(self, fs: Any, path: str, head: bool) -> bytes | bool | StorageError:
        """One read of a batch (a HEAD when ``head``); a failure is returned."""
        try:
            if head:
                await fs._call_s3("head_object", Bucket=self._bucket, Key=self._key(path))
                return True
            return bytes(await fs._cat_file(self._full(path), max_concurrency=1))
        except OlympiaError as exc:
            return StorageError(str(exc))
        except Exception as exc:
            return self._translate("read", path, exc)

    def _read_many(
        self, paths: Sequence[str], heads: frozenset[str]
    ) -> list[bytes | bool | StorageError]:
        # One gather on s3fs's event loop: every request is sent before any
        # reply is handled, so the whole batch costs one round trip (the
        # connection pool queues what exceeds its size).
        fs = self._fs

        async def every() -> list[bytes | bool | StorageError]:
            return list(await asyncio.gather(*(self._read_one(fs, p, p in heads) for p in paths)))

        with self._translating("read", paths[0] if paths else ""):
            result: list[bytes | bool | StorageError] = fsspec.asyn.sync(fs.loop, every)
            return result

    async def _put_attempts(self, fs: Any, path: str, data: bytes) -> bool:
        """The conditional PUT, retried after 409 ConditionalRequestConflict;
        True when it created the file, False when the key exists (412)."""
        delay = self.conflict_backoff
        for attempt in range(1, self.conflict_attempts + 1):
            try:
                await fs._pipe_file(self._full(path), data, mode="create")
                return True
            except Exception as exc:
                code, status = _client_error(exc)
                if (
                    isinstance(exc, FileExistsError)
                    or status == 412
                    or code == "PreconditionFailed"
                ):
                    return False
                if status == 409 or code == "ConditionalRequestConflict":
                    if attempt < self.conflict_attempts:
                        await asyncio.sleep(delay * random.uniform(0.5, 1.5))
                        delay *= 2
                        continue
                    raise StorageError(
                        f"cannot put_if_absent {path!r} in {self.location}: S3 kept answering "
                        f"409 ConditionalRequestConflict after {attempt} attempts; the file "
                        f"may or may not exist"
                    ) from exc
                raise self._translate("put_if_absent", path, exc) from exc
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _existing(self, path: str, data: bytes, found: bytes | bool | StorageError | None) -> None:
        """After a put that found the key taken: success if what is there is
        ``data`` (s3fs and botocore resend a PUT whose reply was lost, and
        the resend then gets 412, so identical bytes count as success, as on
        every backend), else StorageFileExistsError. ``found``: the content
        read along with the put, if any."""
        if isinstance(found, bytes):
            existing: bytes | None = found
        else:
            try:
                existing = self._read(path)
            except StorageFileNotFoundError:
                existing = None  # deleted since: it existed when we lost
        if existing != data:
            raise StorageFileExistsError(
                f"file {path!r} already exists in {self.location}", existing
            )

    def _put_if_absent(self, path: str, data: bytes) -> None:
        fs = self._fs

        async def put() -> bool:
            return await self._put_attempts(fs, path, data)

        with self._translating("put_if_absent", path):
            created = fsspec.asyn.sync(fs.loop, put)
        if not created:
            self._existing(path, data, None)

    def put_staged_reading(
        self,
        path: str,
        staged: Staged,
        reads: Sequence[str],
        placed: Placed | None = None,
    ) -> PutAndReads:
        """The put and the reads in one gather on s3fs's event loop: one
        round trip for all of them."""
        path = check_path(path)
        asked = [check_path(p) for p in reads]
        data = bytes(staged.data)
        fs = self._fs

        async def every() -> tuple[bool, list[bytes | bool | StorageError]]:
            created, *replies = await asyncio.gather(
                self._put_attempts(fs, path, data),
                *(self._read_one(fs, p, False) for p in asked),
            )
            return bool(created), list(replies)

        created = False
        try:
            with self._translating("put_if_absent", path):
                created, replies = fsspec.asyn.sync(fs.loop, every)
        finally:
            if placed is not None:
                # Won only when this PUT created the object (a 412 whose
                # object holds these bytes is told apart only below).
                placed(created)
        if created:
            return PutAndReads(False, None, [])
        found = replies[asked.index(path)] if path in asked else None
        try:
            self._existing(path, data, found)
        except StorageFileExistsError as exc:
            return PutAndReads(True, exc.existing, replies)
        return PutAndReads(False, None, [])

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

    def _delete_many(self, paths: Sequence[str]) -> None:
        # DeleteObjects: up to 1,000 keys a request; missing keys count as deleted.
        for i in range(0, len(paths), 1000):
            batch = paths[i : i + 1000]
            objects = [{"Key": self._key(p)} for p in batch]
            with self._translating("delete", batch[0]):
                reply = self._fs.call_s3(
                    "delete_objects",
                    Bucket=self._bucket,
                    Delete={"Objects": objects, "Quiet": True},
                )
            for error in reply.get("Errors") or []:
                raise StorageError(
                    f"cannot delete {error.get('Key')!r} in {self.location}: "
                    f"{error.get('Code')} {error.get('Message')}"
                )

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
