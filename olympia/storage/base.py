"""The storage interface every catalog backend implements.

A catalog touches storage through six calls only. Paths are relative to the
catalog prefix, use ``/`` as separator, and are checked by :func:`check_path`
before any backend sees them, so an object name can never reach outside the
prefix.

Contract (spec/format.md, "What the storage must guarantee"):

* ``put_if_absent`` is atomic: exactly one of many concurrent callers on one
  path succeeds, the others get :class:`StorageFileExistsError`, and no reader
  ever sees a partially written file.
* ``read`` after a successful ``put_if_absent`` or ``overwrite`` returns the
  whole new content (read-after-write consistency).
* ``overwrite`` is used only for small counters and records; it needs no
  atomicity beyond never exposing a partial file to ``read``.
  ``overwrite_hint`` is the same for the ``vn/latest`` hint, which need not
  survive a crash and which a reader may see as a mix of two writes of the
  same length.
"""

from __future__ import annotations

import builtins
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

from olympia.errors import (
    InvalidPathError,
    StorageError,
    StorageFileExistsError,
    StorageFileNotFoundError,
)
from olympia.storage.hostlock import HostLock

_SEGMENT = re.compile(r"^[A-Za-z0-9._=-]+$")


def check_path(path: str) -> str:
    """Return ``path`` if it is a safe relative catalog path, else raise.

    Raises:
        InvalidPathError: empty, absolute, backslash, empty segment, ``.`` or
            ``..`` segment, or a character outside ``[A-Za-z0-9._=-]``.
    """
    if not isinstance(path, str) or not path:
        raise InvalidPathError(f"invalid catalog path {path!r}: empty")
    segments = path.split("/")
    for seg in segments:
        if seg in ("", ".", "..") or not _SEGMENT.match(seg):
            raise InvalidPathError(f"invalid catalog path {path!r}: bad segment {seg!r}")
    return path


class Staged:
    """Content prepared by :meth:`Storage.stage` for one later
    :meth:`Storage.put_staged`. The generic form only holds the bytes."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def discard(self) -> None:
        """Release what staging prepared, instead of putting it (idempotent)."""


#: Runs a call in the background (``ThreadPoolExecutor.submit``).
Submit = Callable[[Callable[[], None]], "Future[None]"]
#: Told once readers can see the outcome of a put (:meth:`Storage.put_staged`):
#: True when the file in place is known to be this put's, False otherwise
#: (lost, failed, or not known yet).
Placed = Callable[[bool], None]


class PutGroup:
    """Several :meth:`Storage.put_if_absent` calls whose outcomes are needed
    only together, before anything that names the files is published: the
    new node, definition and action files of one commit.

    :meth:`put` starts a put; :meth:`seal` says that no more follow;
    :meth:`wait` returns once every put has ended,
    with the errors they raised (empty when all succeeded, each file then
    durable as :meth:`Storage.put_if_absent` promises). The generic form runs
    each put on ``submit``; a backend may group the work (the local one
    fsyncs each folder once per group).
    """

    def __init__(self, storage: Storage, submit: Submit) -> None:
        self._storage = storage
        self._submit = submit
        self._futures: list[Future[None]] = []

    def put(self, path: str, data: bytes) -> None:
        """Start ``put_if_absent(path, data)``; its error is reported by :meth:`wait`."""
        put = self._storage.put_if_absent
        self._futures.append(self._submit(lambda: put(path, data)))

    def seal(self) -> None:
        """No more puts will follow: the group may start finishing its work
        (the local backend starts fsyncing the folders) while the caller does
        other things before :meth:`wait`."""

    def wait(self) -> builtins.list[BaseException]:
        """Wait for every put; return the errors they raised (empty: all succeeded)."""
        return [e for e in (f.exception() for f in self._futures) if e is not None]


@dataclass(frozen=True)
class PutAndReads:
    """The outcome of :meth:`Storage.put_staged_reading`."""

    #: Another writer's file was at the path (the put lost).
    taken: bool
    #: When taken: that file's content, or None if it was gone when read.
    existing: bytes | None
    #: When taken: a reply per path of the reads asked for, as
    #: :meth:`Storage.read_many` gives them (empty when the put won).
    replies: builtins.list[bytes | bool | StorageError]


class Storage(ABC):
    """Files under one catalog prefix. Backends override the ``_`` methods."""

    #: A human readable location, used in error messages.
    location: str = ""
    #: Whether independent reads are worth sending together (a remote store
    #: with a round trip per request); the catalog then probes roots and
    #: fetches sibling nodes in parallel.
    parallel_reads: bool = False
    #: Whether :meth:`overwrite_hint` is cheap enough to call on the commit's
    #: own thread (a write in place) rather than in the background.
    cheap_hint: bool = False

    def read(self, path: str) -> bytes:
        """Return the whole content of ``path``.

        Raises:
            StorageFileNotFoundError: the file does not exist.
            StorageError: any other failure.
        """
        return self._read(check_path(path))

    def read_many(
        self, paths: Sequence[str], heads: Collection[str] = ()
    ) -> builtins.list[bytes | bool | StorageError]:
        """Read every file of ``paths`` (only check that it exists for those
        also in ``heads``); per path, in order: its content, ``True`` for an
        existing path of ``heads``, or the :class:`StorageError` the request
        raised (:class:`StorageFileNotFoundError` for a missing file).

        A remote backend sends the requests together (one round trip for all
        of them); the default makes them one after another.
        """
        checked = [check_path(p) for p in paths]
        return self._read_many(checked, frozenset(heads))

    def _read_many(
        self, paths: Sequence[str], heads: frozenset[str]
    ) -> builtins.list[bytes | bool | StorageError]:
        out: builtins.list[bytes | bool | StorageError] = []
        for path in paths:
            try:
                if path in heads:
                    if not self._exists(path):
                        raise StorageFileNotFoundError(
                            f"file {path!r} not found in {self.location}"
                        )
                    out.append(True)
                else:
                    out.append(self._read(path))
            except StorageError as exc:
                out.append(exc)
        return out

    def put_if_absent(self, path: str, data: bytes) -> None:
        """Create ``path`` with ``data`` only if it does not exist yet.

        Raises:
            StorageFileExistsError: the file exists (and is not this very
                call's own earlier write, which counts as success).
            StorageError: any other failure; the file may or may not exist.
        """
        self._put_if_absent(check_path(path), bytes(data))

    def stage(self, data: bytes) -> Staged:
        """Prepare ``data`` for a :meth:`put_staged` still to come, so that the
        work that does not depend on the path (the local backend writes and
        fsyncs its temporary file) can overlap other writes. :meth:`put_staged`
        consumes it; a caller that does not put it calls :meth:`Staged.discard`.

        Raises:
            StorageError: nothing could be prepared.
        """
        return Staged(bytes(data))

    def put_group(self, submit: Submit) -> PutGroup:
        """A :class:`PutGroup` whose background work runs on ``submit``."""
        return PutGroup(self, submit)

    def put_staged(self, path: str, staged: Staged, placed: Placed | None = None) -> None:
        """:meth:`put_if_absent` of ``staged.data``, with the same contract.

        ``placed`` is called once readers can see the outcome (the file in
        place, or the path found taken), possibly before the backend has made
        it durable and returned, with True when the file in place is known to
        hold ``staged.data`` (this put won) and False otherwise; it may be
        called again and must act on its first call only."""
        won = False
        try:
            self.put_if_absent(path, staged.data)
            won = True
        finally:
            if placed is not None:
                placed(won)

    def put_staged_reading(
        self,
        path: str,
        staged: Staged,
        reads: Sequence[str],
        placed: Placed | None = None,
    ) -> PutAndReads:
        """:meth:`put_staged`, and :meth:`read_many` of ``reads`` for the case
        that the put loses: a remote backend sends the reads together with
        the put (one round trip for all), so that a loser learns what is
        there without another one. Losing is an outcome here, not an error;
        a read of ``path`` itself, when among ``reads``, serves as the read
        that tells another writer's file from this call's own earlier write.
        The generic form reads after a lost put only.

        Raises:
            StorageError: the put failed; the file may or may not exist.
        """
        try:
            self.put_staged(path, staged, placed)
        except StorageFileExistsError as exc:
            return PutAndReads(True, exc.existing, self.read_many(reads))
        return PutAndReads(False, None, [])

    def overwrite(self, path: str, data: bytes) -> None:
        """Create or replace ``path`` with ``data``."""
        self._overwrite(check_path(path), bytes(data))

    def overwrite_hint(self, path: str, data: bytes) -> None:
        """Create or replace ``path`` with ``data``, where losing the write in
        a crash is harmless (the ``vn/latest`` hint, which readers probe
        past): a backend may skip making it durable, and may overwrite a
        file of the same length in place, so that ``read`` may return a mix
        of the old and new bytes (callers write hints of one fixed length,
        spec/format.md §9 item 3); it never exposes a shorter file."""
        self._overwrite_hint(check_path(path), bytes(data))

    def exists(self, path: str) -> bool:
        """Whether ``path`` exists."""
        return self._exists(check_path(path))

    def delete(self, path: str) -> None:
        """Delete ``path``; deleting a missing file is not an error."""
        self._delete(check_path(path))

    def delete_many(self, paths: Sequence[str]) -> None:
        """:meth:`delete` of every path of ``paths`` (a remote backend sends
        them in batches: S3 deletes up to 1,000 keys per request)."""
        checked = [check_path(p) for p in paths]
        if checked:
            self._delete_many(checked)

    def _delete_many(self, paths: Sequence[str]) -> None:
        for path in paths:
            self._delete(path)

    def remove_folder_if_empty(self, prefix: str) -> None:
        """Remove folder ``prefix`` if it holds nothing (after its files were
        deleted); a store without folders (S3, memory) has nothing to do. A
        put into it afterwards makes it again."""
        self._remove_folder_if_empty(check_path(prefix.rstrip("/")))

    def _remove_folder_if_empty(self, prefix: str) -> None:
        return None

    def list_sizes(self, prefix: str) -> dict[str, int]:
        """The size in bytes of every file :meth:`list` would return for
        ``prefix``, by relative path (a listing that includes sizes where
        the store has them)."""
        return self._list_sizes(check_path(prefix.rstrip("/")))

    def _list_sizes(self, prefix: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for path in self._list(prefix):
            try:
                out[path] = len(self._read(path))
            except StorageFileNotFoundError:
                continue  # deleted since it was listed
        return out

    def list(self, prefix: str) -> list[str]:
        """Return the sorted relative paths of all files under folder ``prefix``."""
        return sorted(self._list(check_path(prefix.rstrip("/"))))

    def temporary_files(self) -> builtins.list[tuple[str, float]]:
        """Temporary files that writes left behind, as ``(name, modified)``
        pairs (``modified`` in seconds since the Unix epoch).

        Only backends that write through temporary files have any; a write
        that completes removes its own, so what is listed here belongs to a
        write in flight or to a writer that was killed.
        """
        return []

    def remove_temporary_files(self, modified_before: float) -> int:
        """Delete the temporary files last modified before ``modified_before``
        (seconds since the Unix epoch); return how many were deleted."""
        return 0

    def publish_lock(self, while_waiting: Callable[[], None] | None = None) -> HostLock:
        """The advisory lock that the writers of this host take around one
        publish attempt (spec/transactions.md §3.1), obtained on return; its
        ``held`` says whether it was. While another writer holds it,
        ``while_waiting`` is called every few milliseconds (an exception it
        raises ends the wait and propagates). Only an optimisation:
        put-if-absent stays what makes a commit correct. The default holds
        nothing."""
        return HostLock()

    def group_dir(self) -> str | None:
        """The folder of this host where writers waiting for the publish lock
        leave their transactions for its holder (group commit,
        spec/transactions.md §3.2); None where there is no publish lock."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources held by the backend."""

    @abstractmethod
    def _read(self, path: str) -> bytes: ...

    @abstractmethod
    def _put_if_absent(self, path: str, data: bytes) -> None: ...

    @abstractmethod
    def _overwrite(self, path: str, data: bytes) -> None: ...

    def _overwrite_hint(self, path: str, data: bytes) -> None:
        self._overwrite(path, data)

    @abstractmethod
    def _exists(self, path: str) -> bool: ...

    @abstractmethod
    def _delete(self, path: str) -> None: ...

    @abstractmethod
    def _list(self, prefix: str) -> builtins.list[str]: ...
