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

Waiting is woken, not polled (spec/transactions.md §3.1 item 2): a writer
that left a group-commit request sleeps on a FIFO that the holder writes to
when it answers and when it lets the lock go; a thread blocked in ``flock``
covers a holder that cannot ring (it died, or predates ringing).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import select
import stat
import tempfile
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Protocol

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

#: How often a waiting writer that has nothing to be woken by (no
#: group-commit request waiting for an answer) does what it can before
#: holding the lock (seconds): rebasing on the versions published meanwhile.
WAITING_INTERVAL = 0.001


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


class Waiting(Protocol):
    """What a writer does while it waits for the lock, and what wakes it: a
    ``while_waiting`` callable may also have this ``wake_fd`` method (a
    callable without it is called every ``interval`` seconds instead)."""

    def __call__(self) -> None: ...

    def wake_fd(self) -> int | None:
        """A descriptor that becomes readable when the writer should be
        called again (an answer came), or None (then it is called every
        ``interval`` seconds)."""
        ...


class HostLock:
    """The lock for one publish attempt: a context manager whose
    :attr:`held` says whether it was obtained. :meth:`release` may be called
    early (once the root is in place); leaving the block releases it too.
    This base class holds nothing (storage without a host-local lock)."""

    held = False
    #: Whether another writer held it when it was asked for (the writers of
    #: this host may have published versions meanwhile).
    waited = False
    #: Whether it was not waited for because its holder is stuck (a waiter
    #: gave up on that same holder before).
    skipped = False

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
    While waiting, ``while_waiting`` is called at once, then whenever the
    descriptor of its ``wake_fd`` method (:class:`Waiting`) is readable, or
    every ``interval`` seconds when it has none; an exception it raises ends
    the wait and propagates. Getting the lock wakes the writer at once (a
    thread blocks in ``flock`` for it): nothing polls.

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
        if self.waited:
            holder = _holder(fd)
            if holder is not None and holder == _read_small(path + STUCK_SUFFIX):
                # A waiter has given up on this very holder already: it is
                # stuck, and waiting for it again would only stall each
                # attempt by the whole limit (spec/transactions.md §3.1 item 4).
                os.close(fd)
                self.skipped = True
                return
            try:
                if not _wait(fd, wait_seconds, while_waiting, interval):
                    if holder is not None:
                        _write_small(path + STUCK_SUFFIX, holder)
                    return  # ``fd`` is closed, or the waiting thread owns it
            except _NoLock:
                return  # ``fd`` is closed
        self._fd = fd
        self.held = True
        self._thread_paths = held
        held.add(path)
        with contextlib.suppress(OSError):  # who holds it now (see _holder)
            os.pwrite(fd, _new_holder_token(), 0)

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            self._thread_paths.discard(self.path)
            # No holder's token is left behind: a waiter that gave up (its
            # thread takes the lock a moment, to let it go) writes none, and
            # must not be taken for this holder, marked stuck or not.
            with contextlib.suppress(OSError):
                os.pwrite(fd, _NO_HOLDER, 0)
            _unlock_and_close(fd)


#: Each holder writes a token of this many bytes at the start of the lock
#: file once it holds the lock; a waiter that gives up writes the token of
#: the holder it gave up on to the file named with :data:`STUCK_SUFFIX`, and
#: later waiters that find that same holder still there do not wait for it.
TOKEN_BYTES = 32
STUCK_SUFFIX = ".stuck"


def _new_holder_token() -> bytes:
    return f"{os.getpid():010d}".encode()[-10:] + os.urandom(11).hex().encode()


_NO_HOLDER = bytes(TOKEN_BYTES)


def _holder(fd: int) -> bytes | None:
    """The token of the lock's holder (read from ``fd``), or None when the
    file holds none (no holder wrote one since the last let it go: a waiter
    that gave up and lets it go at once, a holder of an older build, a
    fresh file)."""
    try:
        token = os.pread(fd, TOKEN_BYTES, 0)
    except OSError:
        return None
    return token if len(token) == TOKEN_BYTES and token != _NO_HOLDER else None


def _read_small(path: str) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        return os.read(fd, TOKEN_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)


def _write_small(path: str, data: bytes) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
        try:
            os.pwrite(fd, data, 0)
        finally:
            os.close(fd)


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
    """Wait for the lock of ``fd`` for at most ``seconds``; whether it is held.

    A writer whose ``while_waiting`` has a ``wake_fd`` (:class:`Waiting`: a
    group-commit request waiting for its answer) sleeps on that descriptor:
    the holder writes to it when it answers, and when it lets the lock go
    (spec/transactions.md §3.1 item 2), and the writer then tries the lock
    again. Otherwise, or when no such wake-up came for
    :data:`RING_FALLBACK_SECONDS` (a holder that died, is stuck, or does not
    ring), a thread blocks in ``flock``, which has no timeout, and wakes this
    one through a pipe once it holds the lock. When this one stops waiting,
    that thread keeps ``fd`` and lets the lock go (and closes ``fd``) as soon
    as it gets it. ``while_waiting`` is called at once, after each wake-up,
    and, when it has no descriptor to be woken by, every ``interval`` seconds.
    """
    return _Wait(fd, while_waiting).run(time.monotonic() + seconds, interval)


#: How long a waiter sleeps on its wake-up descriptor before a thread blocks
#: in ``flock`` for it as well (seconds): holders ring the waiters when they
#: let the lock go, so this is only for a holder that did not.
RING_FALLBACK_SECONDS = 0.05


class _Wait:
    """One wait for the lock of ``fd`` (see :func:`_wait`)."""

    def __init__(self, fd: int, while_waiting: Callable[[], None] | None) -> None:
        self.fd = fd
        self.while_waiting = while_waiting
        self.wake_fd = getattr(while_waiting, "wake_fd", None)
        self.guard = threading.Lock()
        self.done = threading.Event()
        self.held = False
        self.abandoned = False
        #: The thread blocking in ``flock``, once started, and its pipe.
        self.thread: threading.Thread | None = None
        self.pipe: tuple[int, int] | None = None
        self.closed = False

    def run(self, deadline: float, interval: float) -> bool:
        quiet_since = time.monotonic()
        try:
            while True:
                # First at once: a waiter leaves its transaction for the
                # holder (group commit) before sleeping.
                if self.while_waiting is not None:
                    self.while_waiting()
                if self.thread is None:
                    if self._try():
                        return True
                elif self.done.is_set():
                    return self.held
                now = time.monotonic()
                left = deadline - now
                if left <= 0:
                    return self._abandon()
                wake = self.wake_fd() if self.wake_fd is not None else None
                if self.thread is None and (
                    wake is None or now - quiet_since >= RING_FALLBACK_SECONDS
                ):
                    self._start_thread()
                watched = [] if self.pipe is None else [self.pipe[0]]
                if wake is not None:
                    watched.append(wake)
                if self.thread is None:
                    timeout = min(left, RING_FALLBACK_SECONDS - (now - quiet_since))
                elif wake is None and self.while_waiting is not None:
                    timeout = min(left, interval)  # nothing will ring: look again
                else:
                    timeout = left
                WAKE_COUNTS["sleeps"] += 1
                ready = sleep_on(watched, max(0.0, timeout))
                for r in ready:
                    drain(r)
                if wake is not None and wake in ready:
                    quiet_since = time.monotonic()
        except BaseException:
            # An error of ``while_waiting``, or an interrupt: never leave the
            # lock to a thread that nobody will tell to let it go.
            if self.thread is None:
                os.close(self.fd)  # not held: nothing to let go
            elif self._abandon():
                _unlock_and_close(self.fd)
            raise
        finally:
            self._finish()

    def _try(self) -> bool:
        """Without a thread: take the lock if it is free now."""
        assert fcntl is not None
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        except OSError:
            raise _NoLock() from None  # ``run`` closes ``fd``
        self.held = True
        return True

    def _start_thread(self) -> None:
        r, w = os.pipe()
        os.set_blocking(r, False)
        os.set_blocking(w, False)
        self.pipe = (r, w)
        self.thread = threading.Thread(target=self._block, name="olympia-host-lock", daemon=True)
        self.thread.start()

    def _block(self) -> None:
        assert fcntl is not None and self.pipe is not None
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
            got = True
        except OSError:
            got = False
        with self.guard:
            if self.abandoned:
                if got:
                    _unlock_and_close(self.fd)
                else:
                    os.close(self.fd)
            else:
                self.held = got
                if not got:
                    os.close(self.fd)
                self.done.set()
                with contextlib.suppress(OSError):
                    os.write(self.pipe[1], b"!")
            self._close_pipe_if_last()

    def _abandon(self) -> bool:
        """Stop waiting, unless the lock came meanwhile; whether it did."""
        if self.thread is None:
            os.close(self.fd)
            return False
        with self.guard:
            if self.done.is_set():
                return self.held
            self.abandoned = True
            return False

    def _finish(self) -> None:
        if self.thread is not None:
            with self.guard:
                self._close_pipe_if_last()

    def _close_pipe_if_last(self) -> None:
        """The waiter and the thread are each done once; the second closes the pipe."""
        if not self.closed:
            self.closed = True
        elif self.pipe is not None:
            for end in self.pipe:
                with contextlib.suppress(OSError):
                    os.close(end)


class _NoLock(Exception):
    """The file system refused ``flock`` while waiting."""


#: How many times a waiter went to sleep (``select``) while waiting for the
#: lock: a diagnostic for tests and benchmarks, not a limit.
WAKE_COUNTS = {"sleeps": 0}


def sleep_on(fds: list[int], timeout: float) -> list[int]:
    """Sleep until one of ``fds`` is readable or ``timeout`` seconds passed;
    the readable ones (``poll``, which has no limit on descriptor numbers,
    where there is one)."""
    if hasattr(select, "poll"):
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        events = poller.poll(max(0, math.ceil(timeout * 1000)))
        return [fd for fd, _ in events]
    ready, _, _ = select.select(fds, [], [], timeout)
    return ready


def drain(fd: int) -> None:
    """Read what is waiting on the non-blocking ``fd`` (the wake-ups are only
    signals; their bytes mean nothing)."""
    with contextlib.suppress(OSError):
        while os.read(fd, 512):
            pass
