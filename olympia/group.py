"""Group commit among the writers of one host (spec/transactions.md §3.2).

While one writer holds the host's publish lock (:mod:`olympia.storage.hostlock`),
the others that want to publish leave a *request* in a folder beside the lock
file: the transaction's id, begin version, isolation, the version it has been
checked and rebased up to, and its actions. The holder publishes the requests
it may admit in the same version as its own transaction (a root of several
transactions, ``$group``), and leaves an *outcome* file saying which version
holds each one or that its owner must publish it itself.

Requests and outcomes are files of one host, private to its writers, and not
part of the catalog. This module only encodes, claims and answers requests;
deciding what may be published is the commit's (olympia.commit).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from olympia.proto import actions_pb2 as apb

_REQUEST = ".req"
_CLAIMED = ".claimed"
_OUTCOME = ".out"
#: Requests one holder publishes in one turn, at most.
MAX_GROUP = 16
#: A transaction whose request would be larger leaves none: the folder is
#: on a memory file system, which may be small (64 MiB in a container), and a
#: transaction that large gains nothing from sharing a version.
MAX_REQUEST_BYTES = 4 << 20
#: Files of the folder older than this (seconds) belong to writers that died
#: and are removed by the next holder.
STALE_SECONDS = 60.0
_REFUSED = "refused"
#: The request format: a writer of an earlier build, which wrote none, would
#: look for its own id only in ``$transaction_id``, so its requests are refused.
REQUEST_FORMAT = 2


@dataclass(frozen=True)
class Request:
    """A transaction handed to the holder of the publish lock."""

    txn_id: str
    begin: int
    #: Versions up to ``base`` were checked by the owner (spec §3 step 3)
    #: and its pending changes are its writes replayed on ``base``.
    base: int
    isolation: str
    actions: tuple[apb.Action, ...]
    #: ``$transaction_id`` of the root of version ``base``: the holder admits
    #: the request only into the catalog whose version ``base`` is that one
    #: (a folder may outlive its catalog and be found by a new one).
    base_id: str = ""


def encode(request: Request) -> bytes:
    header = {
        "v": REQUEST_FORMAT,
        "id": request.txn_id,
        "begin": request.begin,
        "base": request.base,
        "isolation": request.isolation,
        "base_id": request.base_id,
    }
    body = apb.TransactionState(actions=list(request.actions)).SerializeToString()
    return json.dumps(header, separators=(",", ":")).encode() + b"\n" + body


def decode(data: bytes) -> Request | None:
    """The request in ``data``, or None when it is not one (a torn or foreign file)."""
    head, sep, body = data.partition(b"\n")
    if not sep:
        return None
    try:
        header = json.loads(head)
        if header.get("v") != REQUEST_FORMAT:
            return None
        state = apb.TransactionState.FromString(body)
        return Request(
            txn_id=str(header["id"]),
            begin=int(header["begin"]),
            base=int(header["base"]),
            isolation=str(header["isolation"]),
            actions=tuple(state.actions),
            base_id=str(header["base_id"]),
        )
    except (ValueError, KeyError, TypeError, AttributeError, DecodeError):
        return None


def _write_atomically(path: str, data: bytes) -> None:
    """Write ``data`` at ``path`` so that a reader sees all of it or nothing
    (no fsync: the files of this folder need not outlive the machine)."""
    tmp = f"{path}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class Member:
    """One transaction's side: its request and the outcome the holder leaves."""

    def __init__(self, folder: str, txn_id: str) -> None:
        self.folder = folder
        self.txn_id = txn_id
        self._request = os.path.join(folder, txn_id + _REQUEST)
        self._outcome = os.path.join(folder, txn_id + _OUTCOME)
        #: A request was written and not yet withdrawn or answered.
        self.pending = False
        #: The base of the last request written, if any.
        self.asked_base: int | None = None
        #: From the last answer: the last version its holder published.
        self.latest = -1

    def ask(self, request: Request) -> bool:
        """Leave ``request`` for the holder; whether it could be written."""
        data = encode(request)
        if len(data) > MAX_REQUEST_BYTES:
            return False
        try:
            os.makedirs(self.folder, mode=0o700, exist_ok=True)
            _write_atomically(self._request, data)
        except OSError:
            return False
        self.pending = True
        self.asked_base = request.base
        return True

    def answer(self) -> int | None:
        """The version a holder published the request as, once answered (and
        :attr:`latest` set); None while unanswered or when refused (then
        :attr:`pending` turns False and the owner publishes the transaction
        itself)."""
        try:
            with open(self._outcome, "rb") as f:
                text = f.read().decode("ascii", "replace")
        except OSError:
            return None
        with contextlib.suppress(OSError):
            os.unlink(self._outcome)
        self.pending = False
        words = text.split()
        if len(words) == 3 and words[0] == "committed":
            with contextlib.suppress(ValueError):
                self.latest = int(words[2])
                return int(words[1])
        return None

    def withdraw(self) -> None:
        """Take the request back if no holder claimed it yet. A claimed one is
        answered by its holder before it lets the lock go, or, if that holder
        died, was published or not as the versions show (the owner's rebase
        finds its own id, spec §3.2)."""
        if self.pending:
            with contextlib.suppress(OSError):
                os.unlink(self._request)
        self.pending = False


class Holder:
    """The lock holder's side: claiming requests and answering them."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        #: Requests published in the current round.
        self._answered = 0

    def waiting(self) -> bool:
        """Whether any request is there (one directory listing)."""
        return self._count() > 0

    def wait_for_requests(self, seconds: float, poll: float = 0.0002) -> int:
        """Wait at most ``seconds`` until as many requests are waiting as were
        answered in the last round (at least one); how many are there."""
        want = max(1, self._answered)
        self._answered = 0
        end = time.monotonic() + seconds
        while True:
            count = self._count()
            if count >= want or time.monotonic() >= end:
                return count
            time.sleep(poll)

    def _count(self) -> int:
        try:
            with os.scandir(self.folder) as entries:
                return sum(1 for e in entries if e.name.endswith(_REQUEST))
        except OSError:
            return 0

    def claim(self, own_id: str) -> Iterator[tuple[str, Request | None]]:
        """Claim the requests there (at most :data:`MAX_GROUP`), oldest first:
        each is renamed so that its owner can no longer withdraw it, then read.
        Yields (transaction id, request or None if unreadable); every claimed
        one must be answered with :meth:`publish` or :meth:`refuse`."""
        try:
            with os.scandir(self.folder) as it:
                entries = []
                now = time.time()
                for e in it:
                    try:
                        modified = e.stat().st_mtime
                    except OSError:
                        continue
                    if now - modified > STALE_SECONDS:
                        with contextlib.suppress(OSError):
                            os.unlink(e.path)  # left by a writer that died
                    elif e.name.endswith(_REQUEST):
                        entries.append((modified, e.name))
        except OSError:
            return
        entries.sort()
        for _, name in entries[:MAX_GROUP]:
            txn_id = name[: -len(_REQUEST)]
            if txn_id == own_id:
                continue
            src = os.path.join(self.folder, name)
            claimed = os.path.join(self.folder, txn_id + _CLAIMED)
            try:
                os.replace(src, claimed)
            except OSError:
                continue  # withdrawn meanwhile
            try:
                with open(claimed, "rb") as f:
                    data = f.read()
            except OSError:
                data = b""
            with contextlib.suppress(OSError):
                os.unlink(claimed)
            request = decode(data)
            yield txn_id, (request if request is not None and request.txn_id == txn_id else None)

    def tidy(self) -> None:
        """Remove the folder if nothing is left in it (it is made again by the
        next writer that leaves a request), so that a host does not keep one
        empty folder for every catalog it ever wrote to."""
        with contextlib.suppress(OSError):
            os.rmdir(self.folder)

    def publish(self, txn_id: str, version: int, latest: int) -> None:
        """Answer: published as ``version``; ``latest`` is the last version
        this holder published (where its writer's next look for the latest
        version can start)."""
        self._answered += 1
        self._answer(txn_id, f"committed {version} {latest}")

    def refuse(self, txn_id: str) -> None:
        self._answer(txn_id, _REFUSED)

    def _answer(self, txn_id: str, text: str) -> None:
        with contextlib.suppress(OSError):
            _write_atomically(os.path.join(self.folder, txn_id + _OUTCOME), text.encode("ascii"))
