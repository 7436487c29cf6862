"""An advisory lock that the writers of one host take around publishing a version.

Only an optimisation (spec/transactions.md §3.1): a commit publishes through
put-if-absent of its root whether or not it holds the lock, so writers on
other hosts, writers that do not take it, and writers that gave up waiting
for it stay correct. What it buys is that the processes of one machine that
commit to one catalog wait, asleep, for the one that is publishing instead of
each building and writing a version that only one of them can win.

The lock is ``flock(2)`` on a file: the kernel releases it when its holder
dies, however it dies. A holder that is alive but stuck (suspended, say)
delays the others by at most the wait limit, after which they publish
without the lock. Where ``flock`` is missing (Windows) or refused (some
network file systems), :class:`HostLock` holds nothing and commits go on as
they would without it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import tempfile
import threading
import time
from collections.abc import Callable
from types import TracebackType

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

#: How long a writer waits for the lock before publishing without it (seconds).
#: A holder normally keeps it for one publish (milliseconds locally); a
#: longer wait means it is stuck, and waiting longer would only stall.
DEFAULT_WAIT_SECONDS = 2.0
#: The lock files each thread holds: a commit made by a thread that holds
#: the lock already (from inside a hook of its own commit, say) does not take
#: it again, which would only wait for itself.
_HELD = threading.local()

#: How often a waiting writer does what it can before holding the lock
#: (seconds): rebasing on the versions published meanwhile.
WAITING_INTERVAL = 0.001
#: How long a waiting writer polls the lock before a thread blocks on it (seconds).
POLL_SECONDS = 0.05


#: Where the group-commit folders of this host live: a memory file system
#: when there is one (files there are created without touching a disk).
_SHARED_MEMORY = "/dev/shm"


def group_folder(identity: str) -> str | None:
    """The folder where the writers of this host that publish to the catalog
    named by ``identity`` leave their transactions for the holder of the
    publish lock (group commit, spec/transactions.md §3.2): in a folder
    private to this user (mode 0700) on the host's memory file system, or
    its temporary directory where it has none. None (no group commit) when
    that folder cannot be made or is not this user's alone."""
    base = _SHARED_MEMORY
    if not (os.path.isdir(base) and os.access(base, os.W_OK | os.X_OK)):
        base = tempfile.gettempdir()
    uid = os.getuid() if hasattr(os, "getuid") else None
    top = os.path.join(base, f"olympia-groups-{uid if uid is not None else 0}")
    try:
        os.makedirs(top, mode=0o700, exist_ok=True)
        info = os.lstat(top)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or (
        uid is not None and (info.st_uid != uid or info.st_mode & 0o077)
    ):
        return None  # made by someone else: they could read or plant requests
    return os.path.join(top, hashlib.sha256(identity.encode()).hexdigest()[:32])


class HostLock:
    """The lock for one publish attempt: a context manager whose
    :attr:`held` says whether it was obtained. :meth:`release` may be called
    early (once the root is in place); leaving the block releases it too.
    This base class holds nothing (storage without a host-local lock)."""

    held = False
    #: Whether another writer held it when it was asked for (the writers of
    #: this host may have published versions meanwhile).
    waited = False

    def release(self) -> None:
        """Let the next writer of this host publish (idempotent)."""

    def __enter__(self) -> HostLock:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


class FileHostLock(HostLock):
    """``flock(LOCK_EX)`` on ``path``, taken on construction, waiting at most
    ``wait_seconds``; :attr:`held` is False when it was not obtained (the
    wait ran out, or the file system refused) and the caller goes on without.
    While waiting, ``while_waiting`` is called every ``interval`` seconds; an
    exception it raises ends the wait and propagates.

    Each acquisition opens the file anew, so that threads of one process
    exclude each other too (a ``flock`` belongs to an open file description)
    and a forked child never shares a lock with its parent's handle.
    """

    def __init__(
        self,
        path: str,
        wait_seconds: float = DEFAULT_WAIT_SECONDS,
        while_waiting: Callable[[], None] | None = None,
        interval: float = WAITING_INTERVAL,
        folder_mode: int = 0o777,
    ) -> None:
        #: The lock file.
        self.path = path
        self._fd: int | None = None
        self.held = False
        held: set[str] = _HELD.__dict__.setdefault("paths", set())
        if fcntl is None or path in held:
            return
        try:
            fd = _open(path, folder_mode)
        except OSError:
            return  # a read-only folder, say: go on without the lock
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.waited = True
        except OSError:
            os.close(fd)  # e.g. ENOLCK: this file system has no flock
            return
        # Errors of ``while_waiting`` propagate; ``_wait`` has then let ``fd`` go.
        if self.waited and not _wait(fd, wait_seconds, while_waiting, interval):
            return  # ``fd`` is closed, or the waiting thread owns it
        self._fd = fd
        self.held = True
        self._thread_paths = held
        held.add(path)

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            self._thread_paths.discard(self.path)
            _unlock_and_close(fd)


def _open(path: str, folder_mode: int) -> int:
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
    try:
        return os.open(path, flags, 0o666)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), mode=folder_mode, exist_ok=True)
        return os.open(path, flags, 0o666)


def _unlock_and_close(fd: int) -> None:
    # LOCK_UN first: a forked child holding a copy of ``fd`` must not keep
    # the lock alive after this process is done with it.
    assert fcntl is not None
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_UN)
    with contextlib.suppress(OSError):
        os.close(fd)


def _wait(
    fd: int, seconds: float, while_waiting: Callable[[], None] | None, interval: float
) -> bool:
    """Block on the lock of ``fd`` for at most ``seconds``; whether it is held.

    ``flock`` has no timeout, so a thread blocks on it while this one waits
    on an event (calling ``while_waiting`` between waits). When this one
    stops waiting, that thread keeps ``fd`` and lets the lock go (and closes
    ``fd``) as soon as it gets it.
    """
    assert fcntl is not None
    deadline = time.monotonic() + seconds
    # First without a thread, trying the lock between calls of
    # ``while_waiting``: a writer whose transaction the holder publishes
    # (group commit) is usually answered before this ends, and a thread
    # costs more to start than a few polls.
    polling_ends = min(time.monotonic() + POLL_SECONDS, deadline)
    while True:
        try:
            if while_waiting is not None:
                while_waiting()
        except BaseException:
            os.close(fd)  # not held: nothing to let go
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            pass
        except OSError:
            os.close(fd)
            return False
        if time.monotonic() >= polling_ends:
            break
        time.sleep(interval)
    guard = threading.Lock()
    done = threading.Event()
    outcome = {"held": False, "abandoned": False}

    def block() -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            got = True
        except OSError:
            got = False
        with guard:
            if outcome["abandoned"]:
                _unlock_and_close(fd)
            else:
                outcome["held"] = got
                if not got:
                    os.close(fd)
                done.set()

    def abandon() -> bool:
        """Stop waiting, unless the lock came meanwhile; whether it did."""
        with guard:
            if done.is_set():
                return outcome["held"]
            outcome["abandoned"] = True
            return False

    threading.Thread(target=block, name="olympia-host-lock", daemon=True).start()
    try:
        while True:
            # First at once: a waiter leaves its transaction for the holder
            # (group commit) before sleeping.
            if while_waiting is not None:
                while_waiting()
            left = deadline - time.monotonic()
            if done.wait(max(0.0, min(interval, left))):
                return outcome["held"]
            if left <= interval:
                return abandon()
    except BaseException:
        # An error of ``while_waiting``, or an interrupt: never leave the
        # lock to a thread that nobody will tell to let it go.
        if abandon():
            _unlock_and_close(fd)
        raise
