"""Catalog storage on a local (or locally mounted) file system.

Atomicity comes from the operating system, not from fsspec:

* ``put_if_absent`` writes the whole content to a private temporary file,
  fsyncs it, then ``os.link``\\ s it to the final name. ``link`` fails with
  ``EEXIST`` if the name is taken, so exactly one of many racing writers wins,
  and the final name only ever appears with its complete content.
* ``overwrite`` writes a temporary file the same way and ``os.replace``\\ s it
  over the final name, which is atomic for readers.
* ``put_group`` (the new node, definition and action files of a commit,
  which nothing names until the commit's root is put) writes each temporary
  file and links it into place at once, and fsyncs the files, and each
  folder once, in parallel in the background (spec/format.md §9, item 3).
* ``stage`` writes and fsyncs the temporary file of a ``put_staged`` ahead
  of time, so that a commit writes its root's data while its node files are
  still being written, and only the link waits for them.
* ``overwrite_hint`` (the ``vn/latest`` hint) writes over a hint of the
  same length in place, and otherwise does as ``overwrite``, without either
  fsync: after a crash the hint may be old, empty or missing, which readers
  treat as a stale or missing hint (spec/format.md §2.2, §9).

Temporary files live in :data:`TMP_DIR` inside the catalog root (the same file
system, so ``link`` / ``replace`` work) and are never listed.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import functools
import os
import stat
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future

from olympia.errors import (
    InvalidPathError,
    StorageError,
    StorageFileExistsError,
    StorageFileNotFoundError,
)
from olympia.storage.base import Placed, PutGroup, Staged, Storage, Submit, check_path
from olympia.storage.hostlock import DEFAULT_WAIT_SECONDS, FileHostLock, HostLock, group_folder

#: Folder under the catalog root that holds in-flight temporary files. It is
#: reserved: catalog paths may not start with it.
TMP_DIR = ".olympia-tmp"
#: The file of the publish lock (spec/transactions.md §3.1), in a folder of
#: TMP_DIR so that it is never taken for a temporary file and removed.
PUBLISH_LOCK = f"{TMP_DIR}/locks/publish"

# Errors that mean "there is no file at this path": the path is missing, a
# parent is a file, or the path is a folder.
_NOT_A_FILE = (FileNotFoundError, NotADirectoryError, IsADirectoryError)
#: Bytes asked for by each read after the first (a file that grew).
_READ_CHUNK = 1 << 20
#: Opening for a read never blocks (a FIFO with no writer) nor makes a
#: terminal the controlling one.
_READ_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_NOCTTY", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)

# errno values with which link() says "this file system has no hard links".
_NO_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.ENOSYS}


class LocalStorage(Storage):
    """Files under a folder of the local file system.

    The folder is created on the first write. Works on any POSIX or NTFS
    file system that supports hard links; on one that does not, writes fail
    with :class:`StorageError`.
    """

    #: How long a commit waits for the publish lock before publishing
    #: without it (spec/transactions.md §3.1).
    publish_lock_wait: float = DEFAULT_WAIT_SECONDS
    #: The hint is one write in place (:func:`_write_in_place`).
    cheap_hint = True

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self.location = self.root
        self._tmp = os.path.join(self.root, TMP_DIR)
        #: The group-commit folder once found ("" for none).
        self._group_dir: str | None = None

    # --- helpers ---------------------------------------------------------------

    def _full(self, path: str) -> str:
        # The temporary folder is private: letting a catalog path name it would
        # let callers read or list in-flight partial files.
        if path.split("/", 1)[0] == TMP_DIR:
            raise InvalidPathError(f"invalid catalog path {path!r}: {TMP_DIR!r} is reserved")
        return os.path.join(self.root, *path.split("/"))

    def _fail(self, op: str, path: str, exc: BaseException) -> StorageError:
        return StorageError(f"cannot {op} {path!r} in {self.location}: {exc}")

    @contextlib.contextmanager
    def _translating(self, op: str, path: str) -> Iterator[None]:
        """Turn any ``OSError`` raised inside the block into :class:`StorageError`."""
        try:
            yield
        except OSError as exc:
            raise self._fail(op, path, exc) from exc

    def _open_temp(self) -> tuple[str, int]:
        """A new empty temporary file: its name and a descriptor open for writing."""
        tmp = os.path.join(self._tmp, f"{uuid.uuid4().hex}.tmp")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
        try:
            return tmp, os.open(tmp, flags, 0o666)
        except FileNotFoundError:  # the first write into this catalog folder
            os.makedirs(self._tmp, exist_ok=True)
            return tmp, os.open(tmp, flags, 0o666)

    def _write_temp(self, data: bytes, durable: bool = True) -> str:
        """Write ``data`` to a new temporary file (fsynced if ``durable``) and
        return its name."""
        tmp, fd = self._open_temp()
        try:
            try:
                _write_all(fd, data)
                if durable:
                    # fsync before the file gets its real name: after a crash
                    # the name must never point at missing or partial content.
                    os.fsync(fd)
            finally:
                os.close(fd)
        except BaseException:
            _unlink_quietly(tmp)
            raise
        return tmp

    def _read_existing(self, full: str) -> bytes | None:
        """Content of ``full``, or ``None`` when nothing is there (missing,
        or a folder).

        Raises:
            OSError: a FIFO, device or socket at the name (opened without
                blocking and never read: a FIFO would wait for a writer
                forever, ``/dev/zero`` never ends), or a symbolic link to
                nothing (a name that exists, which a put cannot take).
        """
        try:
            fd = os.open(full, _READ_FLAGS)
        except _NOT_A_FILE:
            if os.path.islink(full):
                raise OSError(errno.ENOENT, "a symbolic link to nothing is at its name") from None
            return None
        try:
            info = os.fstat(fd)
            if stat.S_ISDIR(info.st_mode):
                return None
            if not stat.S_ISREG(info.st_mode):
                raise OSError(errno.EINVAL, "not a regular file (a FIFO, device or socket)")
            # Read to the end, in one call when the size holds (a file object
            # costs more than the read of a small node: 5.5 us against 8.7
            # for 16 KB here).
            parts: list[bytes] = []
            want = info.st_size + 1
            while chunk := os.read(fd, want):
                parts.append(chunk)
                want = _READ_CHUNK
            return parts[0] if len(parts) == 1 else b"".join(parts)
        finally:
            os.close(fd)

    # --- Storage ---------------------------------------------------------------

    def _read(self, path: str) -> bytes:
        full = self._full(path)
        with self._translating("read", path):
            content = self._read_existing(full)
        if content is None:
            raise StorageFileNotFoundError(f"file {path!r} not found in {self.location}")
        return content

    def _put_if_absent(self, path: str, data: bytes) -> None:
        full = self._full(path)
        with self._translating("put_if_absent", path):
            tmp = self._write_temp(data)
        try:
            self._link_into_place(path, full, tmp, data)
        finally:
            _unlink_quietly(tmp)

    def stage(self, data: bytes) -> Staged:
        """Write and fsync the temporary file now; :meth:`put_staged` only links it."""
        data = bytes(data)
        with self._translating("stage", TMP_DIR):
            return _LocalStaged(data, self._write_temp(data), self)

    def put_staged(self, path: str, staged: Staged, placed: Placed | None = None) -> None:
        if not isinstance(staged, _LocalStaged) or staged.owner is not self or staged.tmp is None:
            super().put_staged(path, staged, placed)  # staged elsewhere, or used already
            return
        path = check_path(path)
        full = self._full(path)
        tmp, staged.tmp = staged.tmp, None
        try:
            self._link_into_place(path, full, tmp, staged.data, placed)
        finally:
            _unlink_quietly(tmp)
            if placed is not None:
                placed(False)  # a call after the link's has no effect

    def put_group(self, submit: Submit) -> PutGroup:
        return _LocalPutGroup(self, submit)

    def _link_into_place(
        self,
        path: str,
        full: str,
        tmp: str,
        data: bytes,
        placed: Placed | None = None,
        sync_folder: bool = True,
    ) -> bool:
        """Link the temporary file ``tmp`` (holding ``data``) to ``full``
        unless a file is there: the put-if-absent step of every put. Return
        whether it linked (False: ``full`` already held ``data``). ``placed``
        is called with True right after the link, before the folder is
        fsynced; with
        ``sync_folder``, a new link is made durable before returning."""
        with self._translating("put_if_absent", path):
            try:
                _link(tmp, full)
            except FileExistsError:
                pass  # decided below
            except OSError as exc:
                if exc.errno in _NO_LINKS:
                    raise StorageError(
                        f"cannot put_if_absent {path!r} in {self.location}: the file "
                        f"system refused a hard link, which atomic put-if-absent needs "
                        f"(it has none, or the folder may not be changed: {exc})"
                    ) from exc
                raise
            else:
                if placed is not None:
                    placed(True)
                if sync_folder:
                    _fsync_dir(os.path.dirname(full))
                return True
            existing = self._read_existing(full)
        if existing is None and os.path.isdir(full):
            raise StorageError(f"cannot put_if_absent {path!r} in {self.location}: it is a folder")
        # Identical content counts as success, on every backend: a retry of a
        # write whose outcome was unknown must not be reported as a lost race.
        if existing != data:
            raise StorageFileExistsError(
                f"file {path!r} already exists in {self.location}", existing
            )
        return False

    def _put_new(self, path: str, data: bytes) -> int:
        """The put of a :class:`_LocalPutGroup`: write ``data`` to a temporary
        file, link it into place (or find ``path`` holding ``data`` already),
        and return a descriptor of the file at ``path`` still to be fsynced."""
        full = self._full(path)
        with self._translating("put_if_absent", path):
            tmp, fd = self._open_temp()
        try:
            with self._translating("put_if_absent", path):
                _write_all(fd, data)
            if not self._link_into_place(path, full, tmp, data, sync_folder=False):
                # Put by another writer, which may not have made it durable yet.
                os.close(fd)
                fd = -1
                with self._translating("put_if_absent", path):
                    fd = os.open(full, os.O_RDONLY | getattr(os, "O_BINARY", 0))
        except BaseException:
            if fd >= 0:
                os.close(fd)
            raise
        finally:
            _unlink_quietly(tmp)
        return fd

    def _overwrite(self, path: str, data: bytes, durable: bool = True) -> None:
        full = self._full(path)
        with self._translating("overwrite", path):
            tmp = self._write_temp(data, durable)
            try:
                try:
                    os.replace(tmp, full)  # atomic: readers see old or new, never a mix
                except FileNotFoundError:
                    os.makedirs(os.path.dirname(full), exist_ok=True)
                    os.replace(tmp, full)
            except BaseException:
                _unlink_quietly(tmp)
                raise
            if durable:
                _fsync_dir(os.path.dirname(full))

    def _overwrite_hint(self, path: str, data: bytes) -> None:
        # Two fsyncs would make durable a file that readers may find stale,
        # empty or missing anyway; after a crash they probe past it.
        full = self._full(path)
        with self._translating("overwrite", path):
            if _write_in_place(full, data):
                return
        self._overwrite(path, data, durable=False)

    def _exists(self, path: str) -> bool:
        full = self._full(path)
        with self._translating("check", path):
            try:
                return stat.S_ISREG(os.stat(full).st_mode)
            except (FileNotFoundError, NotADirectoryError):
                return False

    def _delete(self, path: str) -> None:
        full = self._full(path)
        with self._translating("delete", path):
            try:
                os.unlink(full)
            except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
                return
            except PermissionError:
                # macOS reports unlink() of a folder as EPERM; a folder is "no
                # file here", which is not an error for delete.
                if os.path.isdir(full):
                    return
                raise

    def _remove_folder_if_empty(self, prefix: str) -> None:
        with contextlib.suppress(OSError):  # not empty (ENOTEMPTY, EEXIST), gone, a file
            os.rmdir(self._full(prefix))

    def publish_lock(self, while_waiting: Callable[[], None] | None = None) -> HostLock:
        """``flock`` on :data:`PUBLISH_LOCK`: the processes of this host that
        share the folder take turns to publish (spec/transactions.md §3.1)."""
        path = os.path.join(self.root, *PUBLISH_LOCK.split("/"))
        return FileHostLock(path, self.publish_lock_wait, while_waiting)

    def group_dir(self) -> str | None:
        """Keyed by the identity of the catalog's folder and of its ``vn/``
        (device and inode), so that every path to one catalog finds the same
        folder and no other catalog does (spec/transactions.md §3.2)."""
        if self._group_dir is None:
            try:
                ids = [os.stat(os.path.join(self.root, d)) for d in ("", "vn")]
            except OSError:
                return None
            identity = "local\n" + "\n".join(f"{st.st_dev}:{st.st_ino}" for st in ids)
            self._group_dir = group_folder(identity) or ""
        return self._group_dir or None

    def temporary_files(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        with self._translating("list", TMP_DIR):
            try:
                entries = list(os.scandir(self._tmp))
            except (FileNotFoundError, NotADirectoryError):
                return out
            for entry in entries:
                with contextlib.suppress(FileNotFoundError):  # finished meanwhile
                    if entry.is_file(follow_symlinks=False):
                        out.append((entry.name, entry.stat(follow_symlinks=False).st_mtime))
        return sorted(out)

    def remove_temporary_files(self, modified_before: float) -> int:
        cutoff = modified_before
        removed = 0
        for name, modified in self.temporary_files():
            if modified >= cutoff:
                continue  # may belong to a write in flight
            with self._translating("delete", f"{TMP_DIR}/{name}"):
                try:
                    os.unlink(os.path.join(self._tmp, name))
                except FileNotFoundError:
                    continue
            removed += 1
        return removed

    def _list(self, prefix: str) -> list[str]:
        top = self._full(prefix)
        out: list[str] = []

        def fail(exc: OSError) -> None:
            raise exc  # os.walk ignores errors by default; never hide files silently

        with self._translating("list", prefix):
            if not os.path.isdir(top):
                return out
            for folder, _dirs, files in os.walk(top, onerror=fail):
                for name in files:
                    rel = os.path.relpath(os.path.join(folder, name), self.root)
                    rel = rel.replace(os.sep, "/")
                    # Files put there by other tools that no catalog path can
                    # name (spaces, ...) are not catalog files.
                    with contextlib.suppress(InvalidPathError):
                        out.append(check_path(rel))
        return out

    def _list_sizes(self, prefix: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for path in self._list(prefix):
            with self._translating("list", prefix):
                try:
                    out[path] = os.stat(self._full(path)).st_size
                except FileNotFoundError:
                    continue  # removed since it was listed
        return out


#: Files a put group holds open for their fsyncs at most (each is one
#: descriptor until its fsync ends).
_OPEN_FILES_MAX = 64


class _LocalPutGroup(PutGroup):
    """The new files of one commit on local storage (format.md §9).

    Each put writes its temporary file and links it into place at once, from
    the calling thread; only the fsync of the file runs in the background
    (at most :data:`_OPEN_FILES_MAX` files are held open for it at a time).
    :meth:`seal` starts the fsync of each folder that gained a file, once per
    folder instead of once per file, alongside those of the files (the
    entries are in the folders already). Linking before the fsync is safe
    for these files only: nothing names them until the group has been waited
    for (a root is put after that), so a crash before the fsync leaves at
    most an unreachable file, which expiration removes. A put that finds its
    file already there with the same content fsyncs that file too: its
    writer may not have.
    """

    def __init__(self, storage: LocalStorage, submit: Submit) -> None:
        super().__init__(storage, submit)
        self._local = storage
        self._errors: list[BaseException] = []
        self._folders: set[str] = set()
        self._sealed = False
        #: The fsyncs started and not yet seen to have ended (each holds a file open).
        self._open: collections.deque[Future[None]] = collections.deque()

    def put(self, path: str, data: bytes) -> None:
        if self._sealed:
            raise ValueError("put() after seal()")
        storage = self._local
        try:
            path = check_path(path)
            fd = storage._put_new(path, bytes(data))
        except StorageError as exc:
            self._errors.append(exc)
            return
        self._folders.add(os.path.dirname(storage._full(path)))
        future = self._submit(functools.partial(_fsync_file, storage, path, fd))
        self._futures.append(future)
        self._open.append(future)
        while len(self._open) >= _OPEN_FILES_MAX:  # a big commit: let the fsyncs catch up
            self._open.popleft().exception()

    def seal(self) -> None:
        # The folders hold their new entries already: their fsyncs need not
        # wait for the files' own.
        if not self._sealed:
            self._sealed = True
            for folder in sorted(self._folders):
                self._futures.append(self._submit(functools.partial(_fsync_dir, folder)))

    def wait(self) -> list[BaseException]:
        self.seal()
        return [*self._errors, *super().wait()]


def _fsync_file(storage: LocalStorage, path: str, fd: int) -> None:
    """fsync and close ``fd``, the file just put at ``path``."""
    try:
        with storage._translating("put_if_absent", path):
            os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _link(tmp: str, full: str) -> None:
    for _ in range(_LINK_ATTEMPTS):
        try:
            os.link(tmp, full)
            return
        except FileNotFoundError:
            if not os.path.exists(tmp):
                raise
            # The first file in this folder, or a folder emptied and removed
            # between the two calls (remove_folder_if_empty): make it again.
            os.makedirs(os.path.dirname(full), exist_ok=True)
    os.link(tmp, full)


#: Tries of _link to find the folder it made still there.
_LINK_ATTEMPTS = 4


class _LocalStaged(Staged):
    """A durable temporary file waiting to be linked into place."""

    def __init__(self, data: bytes, tmp: str, owner: LocalStorage) -> None:
        super().__init__(data)
        self.tmp: str | None = tmp
        self.owner = owner

    def discard(self) -> None:
        tmp, self.tmp = self.tmp, None
        if tmp is not None:
            _unlink_quietly(tmp)


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _write_in_place(full: str, data: bytes) -> bool:
    """Overwrite the existing file ``full`` with ``data`` in place, when it is
    a regular file of one link and of the same length; whether it did.

    No new file, rename or delete: on ext4 a temporary file renamed over the
    hint at every commit freed an inode per commit, and allocating the next
    file then skipped over every recently freed one, while the rename
    locked both folders against the commit's own links (together about
    half of a writer's CPU in a profile: benchmarks/results/
    writers-2026-11-27.md). A reader may see a mix of the old and new
    bytes; the hint is written at a fixed length, so that mix is a counter
    too, and any counter is only a place to start probing (spec/format.md
    §2.2, §9 item 3)."""
    pwrite = getattr(os, "pwrite", None)
    if pwrite is None:
        return False
    # Never blocks or follows: a FIFO or device planted at the name (no
    # reader: ENXIO) or a symbolic link is replaced instead.
    flags = os.O_WRONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0)
    flags |= getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(full, flags)
    except OSError:  # missing, a symbolic link, a FIFO nobody reads
        return False
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1 or info.st_size != len(data):
            return False  # replaced, which never writes through another name
        return bool(pwrite(fd, data, 0) == len(data))
    except OSError:
        return False
    finally:
        os.close(fd)


def _fsync_dir(folder: str) -> None:
    """Make a new directory entry durable (POSIX); a no-op where unsupported."""
    if not hasattr(os, "O_DIRECTORY"):
        return  # Windows cannot open folders; NTFS journals the entry itself
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)
