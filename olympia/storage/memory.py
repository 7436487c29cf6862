"""Catalog storage in process memory, for tests and throw-away catalogs.

Files live in fsspec's global ``MemoryFileSystem`` store, so ``memory://name``
opened twice in one process (or read through fsspec directly) shows the same
files. Nothing is shared between processes.
"""

from __future__ import annotations

import os
import threading

from fsspec.implementations.memory import MemoryFileSystem

from olympia.errors import (
    InvalidPathError,
    StorageError,
    StorageFileExistsError,
    StorageFileNotFoundError,
)
from olympia.storage.base import Storage, check_path

# One lock for every MemoryStorage: instances on the same name share files, so
# put-if-absent's check-then-store must be atomic across all of them.
_LOCK = threading.Lock()


def _new_lock_after_fork() -> None:
    global _LOCK
    _LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):  # a forked child must not inherit a held lock
    os.register_at_fork(after_in_child=_new_lock_after_fork)


class MemoryStorage(Storage):
    """Files under ``memory://<name>`` in this process."""

    def __init__(self, name: str) -> None:
        self._fs = MemoryFileSystem()
        # MemoryFileSystem keys look like "/name/a/b"; "" is the store root.
        self._root = MemoryFileSystem._strip_protocol(f"memory://{name}")
        self.location = f"memory://{self._root.lstrip('/')}"

    def _full(self, path: str) -> str:
        return f"{self._root}/{path}"

    def _fail(self, op: str, path: str, exc: BaseException) -> StorageError:
        return StorageError(f"cannot {op} {path!r} in {self.location}: {exc}")

    def _read(self, path: str) -> bytes:
        with _LOCK:
            try:
                return bytes(self._fs.cat_file(self._full(path)))
            except FileNotFoundError:
                raise StorageFileNotFoundError(
                    f"file {path!r} not found in {self.location}"
                ) from None
            except Exception as exc:
                raise self._fail("read", path, exc) from exc

    def _put_if_absent(self, path: str, data: bytes) -> None:
        full = self._full(path)
        with _LOCK:
            if self._fs.isfile(full):
                # Identical content counts as success (same rule as every backend).
                existing = bytes(self._fs.cat_file(full))
                if existing == data:
                    return
                raise StorageFileExistsError(
                    f"file {path!r} already exists in {self.location}", existing
                )
            try:
                self._fs.pipe_file(full, data)
            except Exception as exc:
                # e.g. a parent path is a file: not "exists", a plain failure.
                raise self._fail("put_if_absent", path, exc) from exc

    def _overwrite(self, path: str, data: bytes) -> None:
        with _LOCK:
            try:
                # pipe_file stores a new object, so readers that already hold
                # the old bytes are unaffected.
                self._fs.pipe_file(self._full(path), data)
            except Exception as exc:
                raise self._fail("overwrite", path, exc) from exc

    def _exists(self, path: str) -> bool:
        with _LOCK:
            return bool(self._fs.isfile(self._full(path)))

    def _delete(self, path: str) -> None:
        with _LOCK:
            self._fs.store.pop(self._full(path), None)

    def _list(self, prefix: str) -> list[str]:
        start = f"{self._full(prefix)}/"
        skip = len(self._root) + 1
        out: list[str] = []
        with _LOCK:
            names = [name for name in tuple(self._fs.store) if name.startswith(start)]
        for name in names:
            try:
                out.append(check_path(name[skip:]))
            except InvalidPathError:
                continue  # written by plain fsspec under a name no catalog path can have
        return out
