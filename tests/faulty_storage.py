"""A fault-injecting :class:`~olympia.storage.base.Storage` for commit tests.

:class:`FaultyStorage` wraps any storage by delegation (in the manner of
fsspec's ``DirFileSystem``) and numbers every storage call made through it.
Armed with a countdown, it turns exactly one call into a fault:

* ``FAIL``: the call never reaches the inner storage; it raises
  :class:`~olympia.errors.StorageError` (a request that could not be sent);
* ``LOSE_REPLY``: the call is performed on the inner storage, then raises
  :class:`~olympia.errors.StorageError` as if the connection dropped before the
  reply arrived. Whatever the inner storage answered (data, "exists", "not
  found") is lost with the reply.

Every call is recorded as a :class:`Call` (number, operation, path, fault)
so a test can say which call of a commit it hit. Calls may come from several
threads at once (a commit writes node files in parallel); the numbering is
then in the order the calls reached the wrapper.

An optional :attr:`FaultyStorage.hook` sees every call just before it is
performed (or faulted), for instance to let another writer commit at an
exact point of a commit. What the hook does through other storage objects is
not numbered.

The wrapper does not own the inner storage: :meth:`FaultyStorage.close`
leaves it open.
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from olympia.errors import OlympiaError, StorageError
from olympia.storage.base import Storage

FAIL = "fail"
LOSE_REPLY = "lose-reply"
MODES = (FAIL, LOSE_REPLY)

T = TypeVar("T")


@dataclass(frozen=True)
class Call:
    """One storage call seen by :class:`FaultyStorage`.

    ``number`` counts from 1 since the last :meth:`FaultyStorage.arm` or
    :meth:`FaultyStorage.reset`; ``fault`` is the mode injected into this
    call, or ``""``.
    """

    number: int
    op: str
    path: str
    fault: str = ""

    def __str__(self) -> str:
        mark = f" [{self.fault}]" if self.fault else ""
        return f"#{self.number} {self.op}({self.path}){mark}"


class FaultyStorage(Storage):
    """Forwards every call to ``inner``; injects one fault when armed."""

    def __init__(self, inner: Storage) -> None:
        self.inner = inner
        self.location = inner.location
        self._lock = threading.Lock()
        self._calls: list[Call] = []
        self._fault_at = 0
        self._mode = ""
        #: The call that received the fault, once it fired.
        self.hit: Call | None = None
        #: What the inner storage did on a LOSE_REPLY call: ``"ok"`` or the
        #: error it raised (the caller never learnt either).
        self.lost_outcome: str = ""
        #: Called with each :class:`Call` before it is performed or faulted
        #: (from the calling thread; several threads may call it at once).
        self.hook: Callable[[Call], None] | None = None

    # --- control ------------------------------------------------------------------

    def reset(self) -> None:
        """Forget recorded calls, restart numbering at 1 and disarm (the hook stays)."""
        with self._lock:
            self._calls = []
            self._fault_at = 0
            self._mode = ""
            self.hit = None
            self.lost_outcome = ""

    def arm(self, at: int, mode: str) -> None:
        """Restart numbering; inject ``mode`` into call number ``at`` (1-based) from now on."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if at < 1:
            raise ValueError(f"the faulty call number must be at least 1, got {at}")
        self.reset()
        with self._lock:
            self._fault_at = at
            self._mode = mode

    @property
    def calls(self) -> builtins.list[Call]:
        """The calls since the last :meth:`arm` / :meth:`reset`, in arrival order."""
        with self._lock:
            return list(self._calls)

    @property
    def count(self) -> int:
        with self._lock:
            return len(self._calls)

    # --- the fault ------------------------------------------------------------------

    def _enter(self, op: str, path: str) -> Call:
        with self._lock:
            number = len(self._calls) + 1
            fault = self._mode if number == self._fault_at else ""
            call = Call(number, op, path, fault)
            self._calls.append(call)
            if fault:
                self.hit = call
            return call

    def _injected(self, call: Call) -> StorageError:
        what = "was not sent" if call.fault == FAIL else "lost its reply"
        return StorageError(f"injected fault: storage call {call} {what} ({self.location})")

    def _forward(self, op: str, path: str, perform: Callable[[], T]) -> T:
        """Run ``perform`` (the inner storage call) unless this call is the faulty one."""
        call = self._enter(op, path)
        hook = self.hook
        if hook is not None:
            hook(call)
        if call.fault == FAIL:
            raise self._injected(call)
        if call.fault == LOSE_REPLY:
            try:
                result = perform()
            except OlympiaError as exc:
                self.lost_outcome = f"{type(exc).__name__}: {exc}"
                raise self._injected(call) from exc
            self.lost_outcome = "ok" if result is None else f"ok: {result!r:.60}"
            raise self._injected(call)
        return perform()

    # --- Storage primitives (forwarded to the inner storage's public methods) -------

    def _read(self, path: str) -> bytes:
        return self._forward("read", path, lambda: self.inner.read(path))

    def _put_if_absent(self, path: str, data: bytes) -> None:
        self._forward("put_if_absent", path, lambda: self.inner.put_if_absent(path, data))

    def _overwrite(self, path: str, data: bytes) -> None:
        self._forward("overwrite", path, lambda: self.inner.overwrite(path, data))

    def _exists(self, path: str) -> bool:
        return self._forward("exists", path, lambda: self.inner.exists(path))

    def _delete(self, path: str) -> None:
        self._forward("delete", path, lambda: self.inner.delete(path))

    def _list(self, prefix: str) -> builtins.list[str]:
        return self._forward("list", prefix, lambda: self.inner.list(prefix))

    def _list_sizes(self, prefix: str) -> dict[str, int]:
        return self._forward("list", prefix, lambda: self.inner.list_sizes(prefix))

    def temporary_files(self) -> builtins.list[tuple[str, float]]:
        return self.inner.temporary_files()

    def remove_temporary_files(self, modified_before: float) -> int:
        return self.inner.remove_temporary_files(modified_before)

    def close(self) -> None:
        """Nothing to release: the inner storage belongs to whoever opened it."""


__all__ = ["FAIL", "LOSE_REPLY", "MODES", "Call", "FaultyStorage"]
