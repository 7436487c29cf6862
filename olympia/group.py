"""Group commit among the writers of one host (spec/transactions.md §3.2).

While one writer holds the host's publish lock (:mod:`olympia.storage.hostlock`),
the others that want to publish leave a *request* in a folder beside the lock
file: the transaction's id, begin version, isolation, the version it has been
checked and rebased up to, and its actions. The holder publishes the requests
it may admit in the same version as its own transaction (a root of several
transactions, ``$group``), and leaves an *outcome* file saying which version
holds each one or that its owner must publish it itself.

Nobody polls: a writer that left a request sleeps on a FIFO of its own
(``<id>.wake``), which the holder writes a byte to once it answered; a
holder gathering the next requests sleeps on the folder's ``bell`` FIFO,
which a writer writes a byte to once it left one.

Requests and outcomes are files of one host, private to its writers, and not
part of the catalog. This module only encodes, claims and answers requests;
deciding what may be published is the commit's (olympia.commit).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from olympia.codec import CommitInfo
from olympia.proto import actions_pb2 as apb
from olympia.storage.hostlock import drain, sleep_on

_REQUEST = ".req"
_CLAIMED = ".claimed"
_OUTCOME = ".out"
#: The FIFO a waiting writer sleeps on, woken when its request is answered.
_WAKE = ".wake"
#: The FIFO a holder gathering requests sleeps on, rung by each new request.
_BELL = "bell"
#: Requests one holder publishes in one turn, at most.
MAX_GROUP = 16
#: A transaction whose request would be larger leaves none: the folder is
#: on a memory file system, which may be small (64 MiB in a container), and a
#: transaction that large gains nothing from sharing a version.
MAX_REQUEST_BYTES = 4 << 20
#: Files of the folder older than this (seconds) belong to writers that died
#: and are removed by the next holder.
STALE_SECONDS = 60.0
#: How often (seconds) a holder of this process looks for such files other
#: than requests (requests it looks at in every claim).
_SWEEP_SECONDS = STALE_SECONDS / 4
#: For each folder: when a holder of this process last swept it.
_SWEPT: dict[str, float] = {}
_REFUSED = "refused"
#: The root of the version a holder is about to put, for its members to read
#: ahead (spec/transactions.md §3.2 item 4, previews).
_PREVIEW = "root.preview"
#: The request format: a writer of an earlier build, which wrote none, would
#: look for its own id only in ``$transaction_id``, so its requests are refused.
REQUEST_FORMAT = 2
#: The format of a request that carries commit metadata: a holder of an
#: earlier build, which would publish the transaction without it, refuses
#: such a request (its owner then publishes it itself).
REQUEST_FORMAT_WITH_INFO = 3


#: For each request folder: how many other writers' transactions the last
#: version this process published, or was published in, held beside its own.
#: A holder expects about as many requests to come soon (their writers were
#: answered together with it) and waits a moment for them before publishing.
_COMPANIONS: dict[str, int] = {}


def companions(folder: str) -> int:
    """Other writers' transactions the last version of this process held (see
    :data:`_COMPANIONS`); 0 when it was alone or none is known."""
    return _COMPANIONS.get(folder, 0)


def note_companions(folder: str, count: int) -> None:
    """Record that the last version this process published, or was published
    in, held ``count`` other transactions beside its own."""
    if count > 0:
        _COMPANIONS[folder] = count
    else:
        _COMPANIONS.pop(folder, None)


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
    #: The transaction's commit metadata, published with it (spec/format.md §3.7).
    commit_info: CommitInfo | None = None


@dataclass(frozen=True)
class Verdict:
    """Why a request the holder refuses would fail its writer's own checks
    (spec/transactions.md §3.2 item 4, verdicts): the first version above
    the request's base that a rule of §4.1 refuses it for, the rule
    (``write-write`` or ``catalog-rollback``), and for ``write-write`` the
    key that version and the request both wrote."""

    version: int
    rule: str
    key: str = ""


#: The rules a refusal may name, with whether the verdict names a key.
VERDICT_RULES = {"write-write": True, "catalog-rollback": False}


def _verdict_words(verdict: Verdict) -> str:
    key = verdict.key.encode("utf-8", "surrogatepass").hex() if verdict.key else "-"
    return f"conflict {verdict.version} {verdict.rule} {key}"


def _parse_verdict(words: list[str], placed: int) -> Verdict | None:
    """The verdict of ``conflict <version> <rule> <key in hex, or ->``, if
    well formed and about a version no later than ``placed``."""
    if len(words) != 4 or words[0] != "conflict" or not words[1].isdigit():
        return None
    version, rule, key_hex = int(words[1]), words[2], words[3]
    if rule not in VERDICT_RULES or not 0 < version <= placed:
        return None
    if not VERDICT_RULES[rule]:
        return Verdict(version, rule) if key_hex == "-" else None
    try:
        key = bytes.fromhex(key_hex).decode("utf-8")
    except ValueError:
        return None
    return Verdict(version, rule, key) if key else None


def encode(request: Request) -> bytes:
    info = request.commit_info if request.commit_info is not None else CommitInfo()
    header = {
        "v": REQUEST_FORMAT if info.empty else REQUEST_FORMAT_WITH_INFO,
        "id": request.txn_id,
        "begin": request.begin,
        "base": request.base,
        "isolation": request.isolation,
        "base_id": request.base_id,
    }
    state = apb.TransactionState(actions=list(request.actions))
    if not info.empty:
        state.commit_info.CopyFrom(info.to_proto(request.txn_id))
    body = state.SerializeToString()
    return json.dumps(header, separators=(",", ":")).encode() + b"\n" + body


def decode(data: bytes) -> Request | None:
    """The request in ``data``, or None when it is not one (a torn or foreign file)."""
    head, sep, body = data.partition(b"\n")
    if not sep:
        return None
    try:
        header = json.loads(head)
        if header.get("v") not in (REQUEST_FORMAT, REQUEST_FORMAT_WITH_INFO):
            return None
        state = apb.TransactionState.FromString(body)
        info = CommitInfo.from_proto(state.commit_info)
        return Request(
            txn_id=str(header["id"]),
            begin=int(header["begin"]),
            base=int(header["base"]),
            isolation=str(header["isolation"]),
            actions=tuple(state.actions),
            base_id=str(header["base_id"]),
            commit_info=None if info.empty else info,
        )
    except (ValueError, KeyError, TypeError, AttributeError, DecodeError):
        return None


def _open_fifo(path: str) -> int | None:
    """Make the FIFO ``path`` (if missing) and open it for reading without
    blocking; None where FIFOs are missing or refused (then the reader polls).
    Opened for reading and writing, so that it never reads as ended after a
    writer came and went (Linux and the BSDs allow this on a FIFO)."""
    mkfifo = getattr(os, "mkfifo", None)
    if mkfifo is None:
        return None
    try:
        with contextlib.suppress(FileExistsError):
            mkfifo(path, 0o600)
        fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.close(fd)
            return None
    except OSError:
        os.close(fd)
        return None
    return fd


#: Tries to make a FIFO before a writer does without it (see :func:`_fifo_in`).
_FIFO_TRIES = 3


def _fifo_in(folder: str, name: str) -> int | None:
    """:func:`_open_fifo` of ``name`` in ``folder``, making the folder where
    it is missing. Writers remove the folder when they leave it empty and
    make it again when they need it, so it may vanish or appear between any
    two steps here: a FIFO that could not be made is tried again after the
    folder is made, a few times, rather than only when the folder was seen
    missing (two writers making it at once would otherwise leave one without
    its FIFO, and that one would wait without being rung)."""
    path = os.path.join(folder, name)
    for _ in range(_FIFO_TRIES):
        fd = _open_fifo(path)
        if fd is not None:
            return fd
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
        except OSError:
            return None
    return None


def _ring(path: str) -> None:
    """Write a byte to the FIFO ``path`` if someone is reading it (else nothing:
    nobody is waiting to be woken)."""
    flags = os.O_WRONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError:  # no FIFO, or no reader (ENXIO)
        return
    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.write(fd, b"!")
    except OSError:  # full: a wake-up is waiting already
        pass
    finally:
        os.close(fd)


#: Flags of the small files of the folder: never follow a link planted at
#: the name, never block on a FIFO planted there, never leak into a child.
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _NOFOLLOW
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW


def _write_atomically(path: str, data: bytes) -> None:
    """Write ``data`` at ``path`` so that a reader sees all of it or nothing
    (no fsync: the files of this folder need not outlive the machine). The
    temporary name is this thread's own; plain descriptors rather than file
    objects, as this runs several times per commit."""
    tmp = f"{path}.{os.getpid()}-{threading.get_ident()}.tmp"
    try:
        fd = os.open(tmp, _WRITE_FLAGS, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _read_file(path: str) -> bytes | None:
    """The content of the regular file at ``path``, or None when there is
    none or it cannot be read."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        chunks = []
        size = info.st_size + 1  # one read for a file that is not growing
        while chunk := os.read(fd, size):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


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
        #: From the last answer: the last version its holder published (or,
        #: refused, the last one it placed; -1 when the answer did not say).
        self.latest = -1
        #: From the last answer, a refusal: why the request would fail its
        #: writer's checks, if the holder said (spec §3.2 item 4, verdicts).
        self.verdict: Verdict | None = None
        #: The version of the last preview read (see :meth:`preview`).
        self._previewed = -1
        self._wake = os.path.join(folder, txn_id + _WAKE)
        self._wake_fd: int | None = None

    def wake_fd(self) -> int | None:
        """While a request waits for its answer: a descriptor that becomes
        readable when the holder answered (else None)."""
        return self._wake_fd if self.pending else None

    def close(self) -> None:
        """Remove this writer's FIFO (once its commit is over), and the folder
        if that left it empty (as a holder does at the end of its turn)."""
        fd, self._wake_fd = self._wake_fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(self._wake)
                os.rmdir(self.folder)

    def ask(self, request: Request) -> bool:
        """Leave ``request`` for the holder; whether it could be written."""
        data = encode(request)
        if len(data) > MAX_REQUEST_BYTES:
            return False
        try:
            if self._wake_fd is None:
                # Before the request: the holder that answers it finds the FIFO.
                self._wake_fd = _fifo_in(self.folder, self.txn_id + _WAKE)
                if self._wake_fd is None:  # no FIFOs here: the request needs the folder
                    os.makedirs(self.folder, mode=0o700, exist_ok=True)
            else:
                drain(self._wake_fd)  # wake-ups for an earlier request
            _write_atomically(self._request, data)
        except OSError:
            return False
        self.pending = True
        self.asked_base = request.base
        _ring(os.path.join(self.folder, _BELL))  # a holder may be gathering
        return True

    def answer(self) -> int | None:
        """The version a holder published the request as, once answered (and
        :attr:`latest` set); None while unanswered or when refused (then
        :attr:`pending` turns False and the owner publishes the transaction
        itself)."""
        data = _read_file(self._outcome)
        if data is None:
            return None
        text = data.decode("ascii", "replace")
        with contextlib.suppress(OSError):
            os.unlink(self._outcome)
        self.pending = False
        self.latest = -1
        self.verdict = None
        words = text.split()
        # ``committed <version> <last> [<transactions in the version>]``
        if len(words) in (3, 4) and words[0] == "committed":
            with contextlib.suppress(ValueError):
                self.latest = int(words[2])
                size = int(words[3]) if len(words) == 4 else 2
                note_companions(self.folder, size - 1)
                return int(words[1])
            self.latest = -1
        # ``refused [<placed> [conflict <version> <rule> <key>]]``
        elif len(words) in (2, 6) and words[0] == _REFUSED and words[1].isdigit():
            self.latest = int(words[1])
            if len(words) == 6:
                self.verdict = _parse_verdict(words[2:], self.latest)
        return None

    def preview(self, named_only: bool = False) -> tuple[int, bytes] | None:
        """The version and root bytes of the version a holder is putting or
        put last (spec §3.2 item 4), if there is one newer than the last one
        this returned; not to be used as that version's root before an answer
        says it was placed. With ``named_only``, only a preview whose holder
        named this writer among its readers (one of a holder of an earlier
        build, which names none, is everyone's): a writer woken for another
        reason does not decode a root it will not be told about."""
        data = _read_file(os.path.join(self.folder, _PREVIEW))
        if data is None:
            return None
        head, sep, root = data.partition(b"\n")
        number, *readers = head.split(b" ")
        if not sep or not number.isdigit():
            return None
        version = int(number)
        if version <= self._previewed:
            return None
        if named_only and readers and self.txn_id.encode() not in readers:
            return None
        self._previewed = version
        return version, root

    def withdraw(self) -> None:
        """Take the request back if no holder claimed it yet. A claimed one is
        answered by its holder before it lets the lock go, or, if that holder
        died, was published or not as the versions show (the owner's rebase
        finds its own id, spec §3.2)."""
        if self.pending:
            with contextlib.suppress(OSError):
                os.unlink(self._request)
            # Claimed and not yet answered: its holder may not give it back.
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.folder, self.txn_id + _CLAIMED))
        self.pending = False


def ring_waiters(folder: str) -> None:
    """Wake every writer whose request waits in ``folder`` (the holder of the
    publish lock calls this once it let the lock go, so that they try it)."""
    try:
        with os.scandir(folder) as entries:
            names = [e.name for e in entries if e.name.endswith(_REQUEST)]
    except OSError:
        return
    for name in names:
        _ring(os.path.join(folder, name[: -len(_REQUEST)] + _WAKE))


def _live_files(folder: str, suffix: str = "") -> list[tuple[float, str]] | None:
    """(modification time, name) of the files of ``folder`` whose names end
    with ``suffix``, after removing those of them unchanged for
    :data:`STALE_SECONDS` (left by writers that died); None when the folder
    cannot be listed."""
    now = time.time()
    live = []
    try:
        with os.scandir(folder) as it:
            for e in it:
                if not e.name.endswith(suffix):
                    continue
                try:
                    modified = e.stat(follow_symlinks=False).st_mtime
                except OSError:
                    continue
                if now - modified > STALE_SECONDS:
                    with contextlib.suppress(OSError):
                        os.unlink(e.path)
                else:
                    live.append((modified, e.name))
    except OSError:
        return None
    return live


class Holder:
    """The lock holder's side: claiming requests and answering them."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        #: Requests published in the current round.
        self._answered = 0
        self._bell: int | None = None
        self._bell_opened = False
        self._refusals: list[tuple[str, Verdict | None, bool]] | None = None
        #: No refusal is held back (:meth:`send_refusals` ran since the last
        #: :meth:`defer_refusals`).
        self.refusals_sent = True
        #: The last version this holder put in place in this turn, which its
        #: refusals name (-1: none yet).
        self.placed = -1
        self._previewed = False

    def waiting(self) -> bool:
        """Whether any request is there (one directory listing)."""
        return self._count() > 0

    def wait_for_requests(
        self, seconds: float, want: int | None = None, poll: float = 0.0002
    ) -> int:
        """Wait at most ``seconds`` until ``want`` requests are waiting (by
        default as many as were answered in the last round, at least one);
        how many are there. Woken by each new request (the ``bell`` FIFO);
        only where FIFOs are missing does it look every ``poll`` seconds."""
        want = max(1, self._answered if want is None else want)
        self._answered = 0
        end = time.monotonic() + seconds
        if not self._bell_opened:
            self._bell_opened = True
            self._bell = _fifo_in(self.folder, _BELL)
        while True:
            if self._bell is not None:
                drain(self._bell)  # before counting: a request left after rings again
            count = self._count()
            left = end - time.monotonic()
            if count >= want or left <= 0:
                return count
            if self._bell is None:
                time.sleep(poll)
            else:
                sleep_on([self._bell], left)

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
        self.sweep()
        entries = _live_files(self.folder, _REQUEST)
        if entries is None:
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
            data = _read_file(claimed) or b""
            # Kept until answered: :meth:`give_back` renames it back.
            request = decode(data)
            yield txn_id, (request if request is not None and request.txn_id == txn_id else None)

    def sweep(self) -> None:
        """Remove the files writers that died left in the folder (requests,
        FIFOs, answers: any file unchanged for :data:`STALE_SECONDS`), at most
        once every few seconds per folder (one stat per file). Every holder
        does, whether or not requests are waiting: a catalog whose writers
        died and that one writer goes on using would keep them otherwise."""
        now = time.time()
        if now - _SWEPT.get(self.folder, 0.0) <= _SWEEP_SECONDS:
            return
        _SWEPT[self.folder] = now
        _live_files(self.folder)

    def tidy(self) -> None:
        """Remove the bell and the preview, and the folder if nothing is left
        in it (it is made again by the next writer that leaves a request), so
        that a host does not keep one empty folder for every catalog it ever
        wrote to."""
        self.close_bell()
        if self._previewed:
            self._previewed = False
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.folder, _PREVIEW))
        with contextlib.suppress(OSError):
            os.rmdir(self.folder)

    def close_bell(self) -> None:
        """Close and remove the ``bell`` FIFO, if this holder made one."""
        fd, self._bell = self._bell, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
        if self._bell_opened:
            self._bell_opened = False
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.folder, _BELL))

    def preview(self, version: int, root: bytes, txn_ids: Iterable[str]) -> None:
        """Leave the root of ``version``, encoded and about to be put, for the
        writers of ``txn_ids`` to read while the put is made durable, and wake
        them (spec §3.2 item 4): they use it only once answered that it was
        placed. A root larger than a request may be gets none (the folder is
        on a memory file system, which may be small)."""
        if len(root) > MAX_REQUEST_BYTES:
            return
        readers = list(txn_ids)
        # Named: ids of printable ASCII without spaces (every id this
        # implementation makes); a writer of another id is not named and
        # reads the preview once its answer names the version.
        named = [t for t in readers if t.isascii() and t.isprintable() and " " not in t]
        head = " ".join([str(version), *named]).encode("ascii")
        try:
            _write_atomically(os.path.join(self.folder, _PREVIEW), head + b"\n" + root)
        except OSError:
            return
        self._previewed = True
        for txn_id in readers:
            _ring(os.path.join(self.folder, txn_id + _WAKE))

    def publish(self, txn_id: str, version: int, latest: int, size: int = 2) -> None:
        """Answer: published as ``version``, which holds ``size`` transactions;
        ``latest`` is the last version this holder published (where its
        writer's next look for the latest version can start)."""
        self._answered += 1
        self._answer(txn_id, f"committed {version} {latest} {size}")

    def refuse(self, txn_id: str, verdict: Verdict | None = None, ours: bool = True) -> None:
        """Answer: not published (its writer publishes it itself, or fails
        as ``verdict`` says); held back until :meth:`send_refusals` after
        :meth:`defer_refusals`. A request not known to be of this catalog
        (``ours`` False: unreadable, or on a base whose root is not the one
        its writer saw) gets a plain ``refused``: a version of this catalog
        named to a writer of another would have it take this catalog's root
        as its own."""
        if self._refusals is not None:
            self._refusals.append((txn_id, verdict, ours))
        else:
            self._answer(txn_id, self._refusal(verdict, ours))

    def defer_refusals(self) -> None:
        """Hold the refusals back until :meth:`send_refusals`."""
        if self._refusals is None:
            self._refusals = []
            self.refusals_sent = False

    def send_refusals(self) -> None:
        """Send the refusals held back, and hold no more back."""
        refusals, self._refusals = self._refusals, None
        self.refusals_sent = True
        for txn_id, verdict, ours in refusals or ():
            self._answer(txn_id, self._refusal(verdict, ours))

    def _refusal(self, verdict: Verdict | None = None, ours: bool = True) -> str:
        """``refused``, with the last version this holder placed if any (and
        the request is ``ours``), and ``verdict`` if it is about a version no
        later than that one."""
        if self.placed < 0 or not ours:
            return _REFUSED
        if verdict is None or verdict.version > self.placed:
            return f"{_REFUSED} {self.placed}"
        return f"{_REFUSED} {self.placed} {_verdict_words(verdict)}"

    def give_back(self, txn_id: str) -> None:
        """Put a claimed request back, unanswered, for the next holder (the
        version it was to join lost its race cleanly, §3.2 item 3): its
        writer keeps waiting. Nothing when its writer withdrew it meanwhile
        (:meth:`Member.withdraw` removes the claimed file too), so a request
        is never given back to a writer that went on without it."""
        claimed = os.path.join(self.folder, txn_id + _CLAIMED)
        with contextlib.suppress(OSError):
            os.replace(claimed, os.path.join(self.folder, txn_id + _REQUEST))

    def _answer(self, txn_id: str, text: str) -> None:
        with contextlib.suppress(OSError):
            _write_atomically(os.path.join(self.folder, txn_id + _OUTCOME), text.encode("ascii"))
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(self.folder, txn_id + _CLAIMED))
        _ring(os.path.join(self.folder, txn_id + _WAKE))
