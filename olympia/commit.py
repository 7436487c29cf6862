"""One commit of a transaction (spec/transactions.md §3).

:class:`Commit` holds everything one commit carries from attempt to attempt,
and reads top to bottom in the order of §3: nothing to publish (step 1);
an attempt on a base, under the host's publish lock (step 2, §3.1); after a
lost race, the window of versions committed since the last attempt, the
content-merge hook (§4.3), the rules of §4.1 and the replay (step 3, only the
new versions: step 4); the dependency graph of §4.2; the put of the root;
the pause and the new base after a lost race (step 5). Group commit (§3.2)
comes last: the request this writer leaves while it waits for the lock, and
the requests of others it publishes when it holds it.

The conflict rules are the named checks of a :class:`ConflictChecker`, given
to the commit; the commit itself only decides which versions they see.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import NamedTuple, Protocol

from olympia import group, layout, tree
from olympia.actions import ActionLog
from olympia.codec import CommitInfo, GroupEntry
from olympia.conflicts import (
    ConflictChecker,
    Footprint,
    footprint_of,
    judge_by_merge,
    sees,
    write_overlap,
)
from olympia.definition import ISOLATION_LEVELS
from olympia.distributed import claimed_error, object_value
from olympia.errors import (
    CommitConflictError,
    CommitFailedError,
    CommitTimeoutError,
    OlympiaError,
    VersionNotFoundError,
)
from olympia.keys import KeyCodec
from olympia.node import Node
from olympia.ops import PreconditionFailed, apply_write
from olympia.proto import actions_pb2 as apb
from olympia.proto import objects_pb2 as pb
from olympia.reader import CatalogReader, CatalogVersion
from olympia.state import OverlayState
from olympia.storage.hostlock import HostLock
from olympia.store import CatalogStore, ChainLink, ChainOutcome, PreparedActions, Root

#: Publish attempts of one commit (spec/transactions.md §3). Every lost race
#: means another transaction committed, so running out means a livelock.
DEFAULT_MAX_ATTEMPTS = 100
#: Lost races in a row retried without any pause (spec/transactions.md §3).
_FREE_RETRIES = 4
#: Roots read with the put of a retry on remote storage (:attr:`Commit.read_along`):
#: the one it puts and the four above, one round of the probe for the latest.
_RETRY_READ_ALONG = 5
#: Attempts in a row that may pass the commit time limit before a commit
#: fails with CommitTimeoutError (spec/transactions.md §8.5).
_TIMEOUTS_ALLOWED = 1

#: Group commit among the writers of one host (spec/transactions.md §3.2).
#: Only an optimisation; False makes every writer publish its own version.
GROUP_COMMIT = True
#: A group-commit request is published by the holder only when the versions
#: it would have to examine above the request's base are at most this many.
_GROUP_WINDOW = 64
#: Versions one holder publishes in one turn, at most: further ones only
#: while it paces the refusals of requests held back (§3.2 item 4).
_GROUP_ROUNDS = 8
#: How long a holder waits for requests it expects (seconds): before
#: publishing, those of the writers published with it last time; between
#: rounds, the next one of a writer it just refused (§3.2 items 2 and 4).
_GROUP_GATHER_SECONDS = 0.002

#: One transaction of a version being built by group commit: its ``$group``
#: entry, its footprint, what yields its encoded actions, and its commit
#: metadata.
_Member = tuple[GroupEntry, Footprint, Callable[[], Iterator[tuple[str, bytes]]], CommitInfo | None]


class _HeldBack(NamedTuple):
    """A request claimed and not admitted, whose refusal is held back
    (spec/transactions.md §3.2 item 4)."""

    txn_id: str
    #: Why its writer's rebase would fail it, if a rule of §4.1 says.
    verdict: group.Verdict | None
    #: The keys and prefixes its actions depend on (:func:`_replay_keys`);
    #: None: not known, so nothing is assumed about whom it collides with.
    depends: tuple[frozenset[str], tuple[str, ...]] | None = None

    def collides_with(self, writes: Collection[str]) -> bool:
        """Whether a transaction writing ``writes`` wrote what it depends on."""
        if self.depends is None:
            return False
        keys, prefixes = self.depends
        return any(key in keys or key.startswith(prefixes) for key in writes)


class ContentMerge(Protocol):
    """A hook that judges, and merges, concurrent changes to the content of
    some tables for a committing transaction (spec/transactions.md §4.3).
    Set with :meth:`Transaction.set_content_merge`; a format layer (Iceberg)
    implements it, the core knows no table format."""

    def keys(self) -> Collection[str]:
        """The object keys (``Transaction.keys.table(ns, name)``) of the tables
        whose content this hook judges."""
        ...

    def rebase(self, latest: CatalogReader, changed: frozenset[str]) -> Mapping[str, str]:
        """Judge the versions committed since the last check, which changed the
        ``changed`` keys (content or membership); ``latest`` is a read-only view
        of the newest of them. Return ``{key: metadata_location}`` for the keys
        of ``changed`` whose TABLE_UPDATE writes are to point elsewhere; raise
        a CommitConflictError (or a subclass) to refuse the commit."""
        ...

    # Optional (spec/transactions.md §4.3, "Window check"), looked up with
    # getattr so that a hook without them stays a ContentMerge:
    # ``check_window(latest, written)`` judges every version committed since
    # the begin version (:func:`_window_check`), and ``checks_window()`` says
    # whether it has something to judge when the commit starts
    # (:func:`_checks_window`).


def _window_check(
    merge: ContentMerge | None,
) -> Callable[[CatalogReader, frozenset[str]], None] | None:
    """The optional check a content-merge hook makes of every version
    committed since the begin version (spec/transactions.md §4.3): its
    ``check_window(latest, written)`` method, called after ``rebase`` with a
    read-only view of the newest of them and the keys they wrote, raising a
    CommitConflictError to refuse the commit."""
    check = getattr(merge, "check_window", None)
    return check if callable(check) else None


def _checks_window(merge: ContentMerge | None) -> bool:
    """Whether the hook's ``checks_window()`` says its window check has
    something to check when the commit starts: then the transaction is not
    published by another writer's group commit (§3.2), whose holder checks
    only object keys and cannot call the hook."""
    wanted = getattr(merge, "checks_window", None)
    return callable(wanted) and bool(wanted())


def nothing_to_publish(actions: ActionLog, isolation: str) -> bool:
    """Step 1 of spec/transactions.md §3: a SNAPSHOT transaction that wrote
    nothing, or one that performed no action at all, publishes nothing."""
    return not actions or (not actions.has_write() and isolation == "snapshot")


def _replay_keys(pending: Footprint, own: str | None) -> tuple[frozenset[str], tuple[str, ...]]:
    """The keys and prefixes whose change forces a full replay of a rebase."""
    keys = set(pending.writes) | pending.member_reads | pending.content_reads
    if own is not None:
        keys.add(own)
    return frozenset(keys), tuple(sorted(pending.prefix_reads))


class _PublishedByHolder(Exception):
    """Another writer of this host published this transaction (§3.2)."""

    def __init__(self, version: int) -> None:
        super().__init__(version)
        self.version = version


#: What one attempt came to: ``("published", version)``, ``("lost", the
#: version taken)``, or ``("again", 0)`` after passing the commit time limit.
_Outcome = tuple[str, int]


class Commit:
    """One commit of one transaction, from its first attempt to the put of
    the root that holds it (spec/transactions.md §3).

    The attributes are what carries from one attempt to the next, so that
    each retry costs work in proportion to the versions committed since the
    previous attempt (§3 step 4): ``target`` is the base the next attempt
    builds on; the versions in ``(begin, checked]`` passed the rules of §4.1
    and ``state`` is the replay of the writes on ``checked``; ``seen`` are
    the versions in the window whose writes the transaction's reads see (its
    outgoing edges of §4.2) and ``known`` every footprint loaded so far.
    """

    #: Roots read together with the put of an attempt on remote storage,
    #: from the version it puts up (§3 step 5): a first attempt reads that
    #: version's root, so that losing needs no further read of the winner's;
    #: after a lost race, the next ones too, which are the probe for the
    #: latest version should it lose again.
    read_along: int = 1

    def __init__(
        self,
        store: CatalogStore,
        begin: Root,
        txn_id: str,
        isolation: str,
        actions: ActionLog,
        state: OverlayState,
        keys: KeyCodec,
        *,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        checker: ConflictChecker | None = None,
        merge: ContentMerge | None = None,
        own: str | None = None,
        written_since: int | None = None,
        commit_info: CommitInfo | None = None,
    ) -> None:
        """``actions`` are the transaction's, ``state`` their replay on
        ``begin``. ``own`` is the key of a distributed transaction's catalog
        object (§6.4), ``written_since`` the creation time of a file written
        before the commit that the version depends on (§8.5), ``commit_info``
        the metadata published with it (format.md §3.7)."""
        self.store = store
        self.begin = begin.version
        self.id = txn_id
        self.isolation = isolation
        self.actions = actions
        self.keys = keys
        self.max_attempts = max_attempts
        self.checker = checker if checker is not None else ConflictChecker()
        self.merge = merge
        self.window_check = _window_check(merge)
        self.own = own
        self.written_since = written_since
        self.commit_info = commit_info
        #: The base of the next attempt; a distributed transaction's catalog
        #: object lives in a later version than its begin version.
        self.target = store.load_latest() if own is not None else begin
        self.state = state
        self.encoded = PreparedActions(
            actions.encoded, len(actions), txn_id, self.target.definition
        )
        self.checked = self.begin
        self.seen: list[Footprint] = []
        self.known: dict[int, Footprint] = {}
        #: The keys and prefixes whose change forces a full replay (§3 step 4).
        self.relevant: tuple[frozenset[str], tuple[str, ...]] | None = None
        #: This transaction's footprint, built the first time a rebase needs it;
        #: the keys whose content the hook judges (§4.3), and the footprint for
        #: the write-write rules (without their writes).
        self.footprint: Footprint | None = None
        self.merged: frozenset[str] = frozenset()
        self.first_wins: Footprint | None = None
        #: Attempts in a row that passed the commit time limit (§8.5).
        self.timeouts = 0
        #: Group commit (§3.2): the request folder, and this writer's requests.
        self.folder = store.storage.group_dir() if self._may_group(begin) else None
        self.member = group.Member(self.folder, txn_id) if self.folder is not None else None
        #: Whether another writer of this host published this transaction.
        self.published_by_holder = False
        #: The root of the version a holder is putting, read ahead from its
        #: preview while this writer waits for the answer (§3.2 item 4).
        self.preview: Root | None = None

    # --- §3 steps 2 and 5: attempts until one publishes ----------------------------------

    def run(self) -> int:
        """Attempt until a version holds this transaction; return it.

        Raises:
            CommitConflictError: a rule of §4 refuses it, or ``retries-exhausted``.
            CommitFailedError, CommitTimeoutError, StorageError: from publishing.
        """
        try:
            for attempt in range(1, self.max_attempts + 1):
                outcome, version = self._attempt()
                if outcome == "published":
                    return version
                if outcome == "again":
                    continue  # on the same base, every file under a new name
                # Attempt ``attempt`` lost: every attempt so far did.
                self._after_lost_race(attempt, version)
            raise CommitConflictError(
                f"transaction {self.id} lost the race for a new version {self.max_attempts} times "
                f"(max_attempts) although nothing conflicted; try again later",
                version=self.target.version,
                rule="retries-exhausted",
            )
        except _PublishedByHolder as published:
            self.published_by_holder = True
            return published.version
        finally:
            if self.member is not None:
                self.member.withdraw()
                self.member.close()

    def _attempt(self) -> _Outcome:
        """One attempt: one base, one root put (§3 step 2, §3.1)."""
        store = self.store
        # The writers of this host publish one at a time (§3.1): under the
        # lock, after waiting for it, the base is brought up to the latest
        # version before the rebase; the lock is let go once the root is
        # in place.
        lock = store.storage.publish_lock(_Waiting(self))
        release = _releaser(lock, store.storage.group_dir() if lock.held else None)
        try:
            if self.member is not None:
                # A holder answers before it lets the lock go (§3.2).
                if self.member.pending:
                    self._settle_answer()
                self.member.withdraw()
            if lock.held and lock.waited:
                self.target = self._latest_under_lock(self.target)
            self._check_claim()
            self._rebase()
            serialized_before = self._serialization_order()
            target = self.target
            new_root = tree.apply(target.node, self.state.changes(), target.order, store.load_node)
            # Waiting writers left transactions to publish after this one (§3.2).
            holder = (
                group.Holder(self.folder)
                if self.folder is not None and lock.held and target.format_version >= 2
                else None
            )
            if not store.storage.parallel_reads and store.storage.exists(
                layout.root_path(target.version + 1)
            ):
                # Local storage: an existence check costs far less than
                # encoding and writing node files for a version already taken.
                return "lost", target.version + 1
            if holder is not None:
                # The writers published with this one last time, or in the
                # latest version, were answered together and are beginning
                # their next transactions: a moment's wait puts them in this
                # version rather than each in one of its own (§3.2 item 2).
                companions = max(
                    group.companions(holder.folder), len(target.info.transaction_ids) - 1
                )
                if companions:
                    try:
                        holder.wait_for_requests(_GROUP_GATHER_SECONDS, companions)
                    finally:
                        holder.close_bell()
                if holder.waiting():
                    return self._put_with_group(holder, new_root, serialized_before)
                group.note_companions(holder.folder, 0)
                holder.sweep()
            return self._put(new_root, serialized_before, release)
        finally:
            release()

    def _after_lost_race(self, attempt: int, lost: int) -> None:
        """§3 step 5: the pause (after ``_FREE_RETRIES`` lost races in a row)
        and the base of the next attempt."""
        if attempt > _FREE_RETRIES:
            # Only a livelock breaker: a loser normally retries at once
            # on the newer base, as fresh as any new transaction's.
            time.sleep(random.uniform(0, min(0.05, 0.001 * 2 ** (attempt - _FREE_RETRIES))))
        # After one lost race, build on the winner's root at once; after
        # more in a row, find the latest version first, so as not to
        # keep losing to writers that started later.
        self.target = self.store.load_after_lost_race(lost, probe=attempt > 1)
        self.read_along = _RETRY_READ_ALONG

    def _count_timeout(self, exc: CommitTimeoutError) -> None:
        """One more attempt that passed the commit time limit; raise ``exc``
        when too many did in a row (§8.5)."""
        if self.timeouts >= _TIMEOUTS_ALLOWED:
            raise exc
        self.timeouts += 1

    # --- §6.4: a distributed transaction's object ---------------------------------------

    def _check_claim(self) -> None:
        if self.own is not None and object_value(self.store, self.target, self.own) is None:
            # Another process published this transaction's outcome (§6.4).
            raise claimed_error(
                self.store, self.keys, self.id, self.begin, None, self.target.version
            )

    # --- §3 steps 3 and 4: the window, the rules of §4.1, the replay ---------------------

    def _rebase(self) -> None:
        """Bring ``state`` from ``checked`` to ``target``: the content-merge
        hook (§4.3), the rules of §4.1, then the replay (a failed precondition
        is ``structural``), each on the versions not examined before only."""
        target = self.target
        if target.version <= self.checked:
            return
        if self.member is not None and self.member.asked_base is not None:
            # A holder may have published this transaction (§3.2).
            for v in range(self.checked + 1, target.version + 1):  # base <= checked
                if self.id in self.store.load_root(v).info.transaction_ids:
                    raise _PublishedByHolder(v)
        fp = self._footprint()
        if self.relevant is None:
            self.relevant = _replay_keys(fp, self.own)
        new = self._window(self.checked, target.version)
        patched = bool(self.merged) and self._merge_content(target, new)
        if self.window_check is not None and new:
            self.window_check(
                CatalogVersion(self.store, target), frozenset(k for c in new for k in c.writes)
            )
        if patched:  # the actions changed: encode them again
            self.encoded = PreparedActions(
                self.actions.encoded, len(self.actions), self.id, target.definition
            )
        assert self.first_wins is not None
        self.checker.check_window(self.first_wins, new, self.isolation, self._describe)
        if patched:
            self.state = self._replay(target)
        else:
            self.state = self._rebased(self.state, target, new, self.relevant)
        self.known.update((c.version, c) for c in new)
        self.seen.extend(c for c in new if sees(fp, c) is not None)
        self.checked = target.version

    def _footprint(self) -> Footprint:
        """This transaction's footprint (§1), built the first time it is needed."""
        if self.footprint is None:
            fp = self.actions.footprint(self.begin + 1, self.begin)
            if self.own is not None:
                fp.writes.pop(self.own, None)
            if self.merge is not None:
                judged = self.merge.keys()
                self.merged = frozenset(k for k in judged if not fp.writes.get(k))
            self.footprint = fp
            self.first_wins = judge_by_merge(fp, self.merged) if self.merged else fp
        return self.footprint

    def _window(self, checked: int, latest: int) -> list[Footprint]:
        """The footprints of the versions in ``(checked, latest]``."""
        store, begin = self.store, self.begin
        try:
            return [footprint_of(store, v) for v in range(checked + 1, latest + 1)]
        except VersionNotFoundError:
            raise CommitConflictError(
                f"versions after {begin} were expired before transaction {self.id} committed",
                version=begin + 1,
                rule="history-expired",
            ) from None

    def _merge_content(self, target: Root, new: Sequence[Footprint]) -> bool:
        """Call the content-merge hook for the merged keys that the versions
        ``new`` wrote, if any, and patch the TABLE_UPDATE actions it returns
        (spec/transactions.md §4.3); whether any action changed."""
        assert self.merge is not None
        changed = frozenset(k for c in new for k in self.merged if k in c.writes)
        if not changed:
            return False
        patches = self.merge.rebase(CatalogVersion(self.store, target), changed)
        if not isinstance(patches, Mapping):
            raise OlympiaError(
                f"the content-merge hook of transaction {self.id} returned {patches!r}, "
                f"not a mapping of object keys to metadata locations"
            )
        for key, location in patches.items():
            if key not in changed or not isinstance(location, str) or not location:
                raise OlympiaError(
                    f"the content-merge hook of transaction {self.id} returned {key!r}: "
                    f"{location!r}; it may only give a non-empty metadata location for a key "
                    f"it was asked about ({sorted(changed)})"
                )
            if not self.actions.patch_location(key, location):
                raise OlympiaError(
                    f"the content-merge hook of transaction {self.id} returned a location for "
                    f"{self._describe(key)}, which the transaction does not update"
                )
        return bool(patches)

    def _rebased(
        self,
        state: OverlayState,
        target: Root,
        new: Sequence[Footprint],
        relevant: tuple[frozenset[str], tuple[str, ...]],
    ) -> OverlayState:
        """The replay of this transaction's writes on ``target``, given ``state``,
        their replay on an older version, and ``new``, the versions between the two.

        Replaying a write reads only keys in the transaction's footprint (its
        precondition reads, the keys it writes) and the prefixes it lists. When
        no version of ``new`` wrote one of them, the replay on ``target`` gives
        exactly the overlay of ``state``, which is then kept as it is.
        """
        keys, prefixes = relevant
        for c in new:
            for key in c.writes:
                if key in keys or key.startswith(prefixes):
                    return self._replay(target)
        rebased = OverlayState(self.store, target)
        rebased.overlay = dict(state.overlay)
        return rebased

    def _replay(self, target: Root) -> OverlayState:
        """The writes replayed on ``target``, every precondition checked again;
        a failed one is rule ``structural`` (§3 step 3)."""
        state = OverlayState(self.store, target)
        for action in self.actions.writes():
            try:
                apply_write(state, self.keys, action)
            except PreconditionFailed as exc:
                culprit = _last_writer(self.store, exc.key, self.begin, target.version)
                raise CommitConflictError(
                    f"version {culprit} changed the catalog so that this transaction's "
                    f"{apb.ActionType.Name(action.type)} no longer applies: {exc.error} "
                    f"(isolation {self.isolation}, rule structural); start a new transaction "
                    f"from the latest version and try again",
                    version=culprit,
                    rule="structural",
                ) from None
        return state

    def _describe(self, key: str) -> str:
        """A human name for an object key, for error messages."""
        try:
            decoded = self.keys.decode(key)
        except OlympiaError:
            return repr(key.rstrip())
        return f"{decoded.object_type.name.lower()} {'.'.join(decoded.parts)}"

    # --- §4.2: the dependency graph --------------------------------------------------------

    def _serialization_order(self) -> list[int]:
        """SERIALIZABLE, with outgoing edges (``seen``): the dependency graph of
        spec §4.2; the versions this transaction is serialized before.
        ``known`` holds footprints loaded already; the search adds the older
        ones it loads."""
        latest = self.target.version
        if latest == self.begin or not self.seen or self.isolation != "serializable":
            return []
        store, known = self.store, self.known

        def committed(v: int) -> Footprint:
            fp = known.get(v)
            if fp is None:
                fp = known[v] = footprint_of(store, v)
            return fp

        pending = self._footprint()
        pending.version = latest + 1
        return self.checker.serializable_cycle(pending, latest, committed)

    # --- the put (spec/format.md §8) ---------------------------------------------------------

    def _put(
        self, new_root: Node, serialized_before: list[int], release: Callable[[], None]
    ) -> _Outcome:
        """Put the root of ``target.version + 1`` holding this transaction
        alone; ``release`` lets the publish lock go once the root is in place."""
        target = self.target
        try:
            done = self.store.commit(
                target.version + 1,
                new_root,
                target.definition,
                self.id,
                actions=self.encoded,
                previous_root=target.path,
                begin_version=self.begin,
                isolation=self.isolation,
                serialized_before=serialized_before,
                after_put=lambda _won: release(),
                written_since=self.written_since,
                commit_info=self.commit_info,
                read_along=self.read_along,
            )
        except CommitConflictError as exc:
            if exc.rule != "version-taken":
                raise
            return "lost", target.version + 1
        except CommitTimeoutError as exc:
            self._count_timeout(exc)
            return "again", 0
        return "published", done.version

    # --- §3.1: the latest base, found under the publish lock --------------------------------

    def _latest_under_lock(self, target: Root) -> Root:
        """The base to build on while holding the host's publish lock: the
        latest version, found from ``target`` (spec/transactions.md §3.1).
        The other writers of this host publish nothing meanwhile, so an
        attempt built on it loses only to a writer elsewhere."""
        if self.store.storage.parallel_reads:
            # One round: the roots above ``target``, read together.
            return self.store.load_after_lost_race(target.version + 1)
        while (newer := self._newer_than(target)) is not None:
            target = newer
        return target

    def _newer_than(self, target: Root) -> Root | None:
        """A version newer than ``target`` if local storage shows one at once
        (one existence check), else None."""
        store = self.store
        if store.storage.parallel_reads or not store.storage.exists(
            layout.root_path(target.version + 1)
        ):
            return None
        return store.load_after_lost_race(target.version + 1)

    # --- §3.2: group commit, the waiting writer's side ------------------------------------

    def _may_group(self, begin: Root) -> bool:
        """Whether another writer of this host may publish this transaction
        (§3.2): not a distributed one, whose claims decide who publishes it,
        nor one of a format-1 catalog, nor one whose checker does not vouch
        for the base of its requests, nor one whose content-merge hook's
        window check has something to check (:func:`_checks_window`)."""
        return (
            GROUP_COMMIT
            and self.own is None
            and self.written_since is None  # the chain does not carry it
            and begin.format_version >= 2  # a format-1 holder publishes none
            and self.checker.group_commit
            and not (self.window_check is not None and _checks_window(self.merge))
        )

    def _catch_up(self) -> None:
        """While waiting for the publish lock: wait for the answer to this
        transaction's group-commit request, if it left one (§3.2);
        otherwise rebase on the versions the other writers publish
        meanwhile, so that they are not examined while holding the lock
        (§3.1), and leave a request for the holder."""
        member = self.member
        if member is not None and member.pending:
            self._settle_answer()
            if member.pending:
                self._read_preview(named_only=True)
                return
        # A request goes first, on the base checked so far: the holder
        # examines the versions since (it has them at hand); this writer
        # rebases only when the holder refused it.
        if not self._ask():
            newer = self._newer_than(self.target)
            if newer is not None:
                self.target = newer
                self._check_claim()
                self._rebase()
                self._ask()

    def _settle_answer(self) -> None:
        """Read the holder's answer to this transaction's request, if one
        came; raise :class:`_PublishedByHolder` when it was published. The
        version the answer names as the holder's last is where the next look
        for the latest version starts, and a preview of it read meanwhile
        becomes its cached root (§3.2 item 4)."""
        member = self.member
        assert member is not None
        published = member.answer()
        if member.pending:
            return
        if member.latest >= 0:
            if self.preview is None or self.preview.version < member.latest:
                self._read_preview()  # woken only by the answer: not read yet
            if self.preview is not None and self.preview.version == member.latest:
                self.store.adopt_root(self.preview)
            else:
                self.store.note_seen(member.latest)
        self.preview = None
        if published is not None:
            raise _PublishedByHolder(published)
        if member.verdict is not None:
            self._take_verdict(member.verdict)

    def _take_verdict(self, verdict: group.Verdict) -> None:
        """A refusal that says why the request would fail its writer's checks
        (§3.2 item 4, verdicts): fail as the rebase would, without reading
        the versions, when the verdict is about this request's base and a
        version its answer names, and this transaction's checks are the
        holder's (no content-merge hook, not a distributed transaction's
        commit). Otherwise, or when the rule passes it (a key it does not
        write, or a test's checker), nothing: the writer rebases as after
        any refusal."""
        member = self.member
        assert member is not None
        if (
            self.own is not None
            or member.asked_base != self.checked
            or not self.checked < verdict.version <= member.latest
        ):
            return
        self._footprint()
        if self.merged:
            return
        assert self.first_wins is not None
        committed = Footprint(
            verdict.version,
            self.checked,
            writes={verdict.key: True} if verdict.key else {},
            rollback=verdict.rule == "catalog-rollback",
        )
        self.checker.check_window(self.first_wins, [committed], self.isolation, self._describe)

    def _read_preview(self, named_only: bool = False) -> None:
        """Decode the root the holder is putting, if it left a preview newer
        than the last one read (with ``named_only``, one that names this
        writer among its readers), so that it is at hand once the answer
        comes (§3.2 item 4); a preview that cannot be read is ignored."""
        assert self.member is not None
        got = self.member.preview(named_only)
        if got is None:
            return
        version, data = got
        if version <= self.target.version:
            return
        with contextlib.suppress(OlympiaError):
            self.preview = self.store.decode_root_apart(version, data)

    def _ask(self) -> bool:
        """Leave a group-commit request on the base checked so far, unless
        one was refused on that base already; whether one was left."""
        member = self.member
        if (
            member is None
            or (member.asked_base is not None and self.checked <= member.asked_base)
            or (self.isolation == "serializable" and self.seen)
        ):
            # Not with outgoing edges (``seen``): only a transaction without
            # them can be published later than checked without a new
            # search for cycles (§3.2).
            return False
        base_id = self.store.load_root(self.checked).info.transaction_id
        return member.ask(
            group.Request(
                self.id,
                self.begin,
                self.checked,
                self.isolation,
                tuple(self.actions),
                base_id,
                self.commit_info,
            )
        )

    # --- §3.2: group commit, the holder's side ----------------------------------------------

    def _put_with_group(
        self, holder: group.Holder, new_root: Node, serialized_before: list[int]
    ) -> _Outcome:
        """Holding the publish lock with requests waiting: this transaction
        first, then the requests, in one version (§3.2), and more rounds."""
        target = self.target
        info = self.commit_info
        mine = ChainLink(
            self.id,
            new_root,
            self.encoded,
            self.begin,
            self.isolation,
            tuple(serialized_before),
            commit_infos=((self.id, info),) if info is not None and not info.empty else (),
        )
        leader = _Leader(self.store, self.keys, self.id, info)
        try:
            outcome, links = leader.lead_round(holder, target, (mine, self._footprint()))
            published = outcome.published
            group.note_companions(
                holder.folder,
                sum(len(r.info.transaction_ids) for r in published) - len(published),
            )
            if published and len(published) == links:
                leader.lead(holder, published[-1], _GROUP_ROUNDS - 1)
        finally:
            leader.refuse_all(holder)
            holder.tidy()
        if outcome.published:
            return "published", outcome.published[0].version
        if isinstance(outcome.error, CommitTimeoutError):
            self._count_timeout(outcome.error)
            return "again", 0
        if outcome.error is not None:
            state_word = "unknown" if outcome.unknown else "not published"
            raise CommitFailedError(
                f"publishing version {target.version + 1} failed ({state_word}): {outcome.error}"
            ) from outcome.error
        return "lost", target.version + 1


def _releaser(lock: HostLock, folder: str | None) -> Callable[[], None]:
    """What lets ``lock`` go (idempotent): then, when there is a group-commit
    folder, it wakes the writers whose requests wait there, so that they try
    the lock rather than sleep until a thread blocked in ``flock`` gets it
    (§3.1 item 2)."""
    done = False

    def release() -> None:
        nonlocal done
        if not done:
            done = True
            lock.release()
            if folder is not None:
                group.ring_waiters(folder)

    return release


class _Waiting:
    """What a writer does while it waits for the publish lock (§3.1), and
    what wakes it: the FIFO its group-commit request is answered through, so
    that it sleeps until the holder answered instead of looking every
    millisecond (:class:`olympia.storage.hostlock.Waiting`)."""

    def __init__(self, commit: Commit) -> None:
        self._commit = commit

    def __call__(self) -> None:
        self._commit._catch_up()

    def wake_fd(self) -> int | None:
        member = self._commit.member
        return member.wake_fd() if member is not None else None


class _Leader:
    """The holder's side of group commit (spec/transactions.md §3.2): holding
    the publish lock, it publishes the requests the other writers of this
    host left, after its own transaction (``txn_id``) or on their own."""

    def __init__(
        self,
        store: CatalogStore,
        keys: KeyCodec,
        txn_id: str,
        own_info: CommitInfo | None = None,
    ) -> None:
        self.store = store
        self.keys = keys
        self.id = txn_id
        self.own_info = own_info
        #: Requests claimed and not admitted whose answer is held back: the
        #: oldest may be refused after each round (its writer begins again on
        #: what the round published), the rest when the turn ends (§3.2 item
        #: 4); each with its verdict, if a rule of §4.1 refuses it.
        self.held_back: list[_HeldBack] = []
        #: Whether this round's refusals include the oldest request held back
        #: (:meth:`_release_after` of the last round that published: a round
        #: that publishes nothing answers nobody who would begin again).
        self.release = True

    def lead(self, holder: group.Holder, last: Root, rounds: int) -> None:
        """Holding the publish lock, after publishing ``last``: while
        requests are held back, publish further versions holding what the
        other writers of this host left meanwhile, refusing the oldest held
        back after each one that released it (:meth:`_release_after`), for
        at most ``rounds`` more rounds (spec/transactions.md §3.2 item 4)."""
        answered = len(last.info.transaction_ids) - 1
        for _ in range(rounds):
            if not (self.held_back or self.refused_one):
                # Nothing to pace: the writers answered are beginning their
                # next transactions, and so is this one's, which a further
                # round would keep out; they meet in the next version,
                # whoever holds the lock then (§3.2 item 4).
                return
            # The writer just refused (and those answered with the last
            # version, when several) are beginning their next transactions:
            # worth a moment's wait.
            holder.wait_for_requests(_GROUP_GATHER_SECONDS, answered if answered >= 2 else 1)
            if not holder.waiting():
                return
            outcome, links = self.lead_round(holder, last)
            if links and len(outcome.published) < links:
                return
            if outcome.published:
                last = outcome.published[-1]
                answered = sum(len(r.info.transaction_ids) for r in outcome.published)
            else:
                answered = 0

    #: Whether the last round refused a held-back request.
    refused_one = False

    def refuse_all(self, holder: group.Holder) -> None:
        """Refuse every request held back (before the lock is let go)."""
        held, self.held_back = self.held_back, []
        holder.send_refusals()
        for h in held:
            holder.refuse(h.txn_id, h.verdict)

    def lead_round(
        self,
        holder: group.Holder,
        last: Root,
        first: tuple[ChainLink, Footprint] | None = None,
    ) -> tuple[ChainOutcome, int]:
        """One round of group commit (spec/transactions.md §3.2): ``first``
        (this transaction's version and its footprint, if given) and the
        requests there now that may follow it, published together as one
        version after ``last`` (two when ``first``'s actions fill an action
        file of their own); every request claimed is answered, except one
        whose put has an unknown outcome.
        Returns what was published and how many versions were tried.

        Raises only with ``first``: storage errors from publishing."""
        store = self.store
        definition = last.definition
        links: list[ChainLink] = []
        #: The transactions of the version being built, in serial order:
        #: (entry, footprint, the encoded actions).
        members: list[_Member] = []
        tip = last
        own: ChainLink | None = None
        #: The transactions published above ``last`` in this round, with
        #: their footprints, for the admission of the requests.
        pending: list[tuple[str, Footprint, int]] = []
        if first is not None:
            own, footprint = first
            pending.append((own.transaction_id, footprint, last.version + 1))
            tip = Root(last.version + 1, own.tree, last.info, definition, last.created_at_millis)
            if own.actions.data is None:  # few actions: the others join its version
                prepared = own.actions
                entry = GroupEntry(
                    own.transaction_id, own.begin_version, own.isolation, prepared.count
                )
                # The actions counted, as prepared: the transaction's log
                # itself may have grown since.
                members.append((entry, footprint, lambda: iter(prepared.inline), self.own_info))
            else:  # a large transaction's actions stay in their own action file
                links.append(own)
        version = last.version + 1 + len(links)
        # Refusals are sent once the version is published (or not): a writer
        # refused because of what this version holds then finds it at once
        # when it rebases (§3.2 item 4).
        holder.defer_refusals()
        try:
            for txn_id, request in holder.claim(self.id):
                if request is None or not self._ours(request, last):
                    holder.refuse(txn_id, ours=False)
                    continue
                log = ActionLog()
                for action in request.actions:
                    log.append(action)
                footprint = log.footprint(version, request.begin)
                try:
                    state = self._admit(
                        request, log, footprint, tip, last, pending, [m[1] for m in members]
                    )
                    if state is None:
                        # Its writer would begin again at once, as would every
                        # other one refused with it, and all but one would
                        # collide again: held back, they begin one at a time.
                        verdict = self._verdict(request, footprint, last, pending)
                        depends = _replay_keys(footprint, None)
                        self.held_back.append(_HeldBack(txn_id, verdict, depends))
                        continue
                    new_tree = tree.apply(tip.node, state.changes(), tip.order, store.load_node)
                except Exception:  # a node that cannot be read, say: its owner publishes it
                    holder.refuse(txn_id)
                    continue
                members.append(
                    (
                        GroupEntry(txn_id, request.begin, request.isolation, len(log)),
                        footprint,
                        log.encoded,
                        request.commit_info,
                    )
                )
                pending.append((txn_id, footprint, version))
                tip = Root(version, new_tree, last.info, definition, last.created_at_millis)
            if members:
                links.append(self._group_link(members, tip.node, definition, own))
            outcome = ChainOutcome()
            if not links:
                return outcome, 0
            # The writers answered after this round read its root ahead.
            previewed = [t for link in links for t in link.transaction_ids if t != self.id]
            self.release = self._release_after(pending)
            if self.release:
                previewed.append(self.held_back[0].txn_id)
            tip_version = last.version + len(links)
            try:
                outcome = store.publish_chain(
                    last,
                    links,
                    placed=lambda won: self._send_refusals(holder, tip_version if won else None),
                    encoded=lambda v, data: holder.preview(v, data, previewed),
                )
            except Exception:
                if own is not None:
                    raise
                return outcome, len(links)  # every outcome unknown: left to the owners
            if outcome.published:
                # Known only now: the storage tells ``placed`` when the
                # outcome is visible, won or lost (refusals sent then name
                # the version before, if any).
                holder.placed = outcome.published[-1].version
            done = len(outcome.published)
            for i, link in enumerate(links):
                for txn_id in link.transaction_ids:
                    if txn_id == self.id:
                        continue
                    if i < done:
                        holder.publish(
                            txn_id,
                            outcome.published[i].version,
                            outcome.published[-1].version,
                            len(link.transaction_ids),
                        )
                    elif outcome.error is None:
                        # Its version lost the race cleanly (nothing put): it
                        # goes back, unanswered, for the next holder, which
                        # checks it again on the winner's version, rather
                        # than to its writer (§3.2 item 3).
                        holder.give_back(txn_id)
                    elif i > done or not outcome.unknown:
                        holder.refuse(txn_id)
            return outcome, len(links)
        finally:
            self._send_refusals(holder)

    def _send_refusals(self, holder: group.Holder, placed: int | None = None) -> None:
        """The refusals of this round, and of the next request held back: sent
        as soon as the round's last root is in place, before its folder is
        fsynced and its members answered, so that the writers refused begin
        again on it while the holder finishes (a refused writer only reads
        that root; what it publishes next is made durable by a later fsync of
        the same folder, which makes this root's entry durable too, §3.2 item
        4). ``placed``: that root's version, when the storage said the put
        won, which the refusals then name. Once per round: the round's end
        calls it again, to no effect."""
        if holder.refusals_sent:
            return
        if placed is not None and placed > holder.placed:
            holder.placed = placed
        holder.send_refusals()
        self.refused_one = bool(self.held_back) and self.release
        if self.refused_one:
            held = self.held_back.pop(0)
            holder.refuse(held.txn_id, held.verdict)

    def _release_after(self, published: Sequence[tuple[str, Footprint, int]]) -> bool:
        """Whether the oldest request held back is refused after the round
        that publishes ``published`` (spec/transactions.md §3.2 item 4): not
        when one of the requests published wrote what it depends on. That
        request's writer, answered, begins its next transaction on the new
        version; on a hot object it writes the same key again, and a writer
        refused beside it would begin at the same moment on the same version:
        one of the two attempts would be lost. The holder's own transaction
        does not count: its writer leads until the turn ends."""
        if not self.held_back:
            return False
        oldest = self.held_back[0]
        return not any(
            oldest.collides_with(footprint.writes)
            for txn_id, footprint, _ in published
            if txn_id != self.id
        )

    def _group_link(
        self,
        members: Sequence[_Member],
        new_tree: Node,
        definition: pb.CatalogDefinition,
        own: ChainLink | None,
    ) -> ChainLink:
        """The version holding ``members`` in order (spec/format.md §3.2,
        ``$group`` when there are several): their actions one after the
        other, the first one's id and isolation, the smallest begin version."""
        head = members[0][0]
        if len(members) == 1 and own is not None and head.transaction_id == own.transaction_id:
            return own  # alone after all: the version it built itself
        entries = tuple(m[0] for m in members)
        encoders = [m[2] for m in members]

        def actions() -> Iterator[tuple[str, bytes]]:
            for encode in encoders:
                yield from encode()

        count = sum(e.n_actions for e in entries)
        return ChainLink(
            head.transaction_id,
            new_tree,
            PreparedActions(actions, count, head.transaction_id, definition),
            min(e.begin_version for e in entries),
            head.isolation,
            own.serialized_before
            if own is not None and own.transaction_id == head.transaction_id
            else (),
            entries if len(entries) > 1 else (),
            tuple(
                (m[0].transaction_id, m[3]) for m in members if m[3] is not None and not m[3].empty
            ),
        )

    def _admit(
        self,
        request: group.Request,
        log: ActionLog,
        footprint: Footprint,
        tip: Root,
        last: Root,
        pending: Sequence[tuple[str, Footprint, int]],
        members: Sequence[Footprint],
    ) -> OverlayState | None:
        """The pending changes of ``request`` (its actions ``log``, their
        ``footprint``) on ``tip``, if it may join the
        version being built on ``last`` after ``members``, else None
        (spec/transactions.md §3.2): its owner checked it up to its base, and
        no version since (published, or about to be: the transactions in
        ``pending``) wrote anything its actions depend on, so every rule of
        §4 would pass and its replay on ``tip`` equals its replay on the
        base; and the version's begin version, the smallest of its
        transactions', hides no dependency (:func:`_begin_hides_a_read`)."""
        keys, prefixes = _replay_keys(footprint, None)
        try:
            committed = self._since_base(request, last, pending)
            if committed is None or _begin_hides_a_read(self.store, footprint, members):
                return None
            for txn_ids, fp, _ in committed:
                if request.txn_id in txn_ids or fp.rollback:
                    return None  # published already, or a rollback to refuse it
                for key in fp.writes:
                    if key in keys or key.startswith(prefixes):
                        return None
            state = OverlayState(self.store, tip)
            for action in log.writes():
                apply_write(state, self.keys, action)
        except (OlympiaError, PreconditionFailed):
            return None
        return state

    def _ours(self, request: group.Request, last: Root) -> bool:
        """Whether ``request`` is on a base of this catalog: the root of its
        base version, at most ``last``, is the one its writer saw (a request
        folder may outlive its catalog and be found by a new one)."""
        if not 0 <= request.base <= last.version:
            return False
        try:
            return self.store.load_root(request.base).info.transaction_id == request.base_id
        except OlympiaError:
            return False

    def _since_base(
        self,
        request: group.Request,
        last: Root,
        pending: Sequence[tuple[str, Footprint, int]],
    ) -> list[tuple[Sequence[str], Footprint, int]] | None:
        """What was published above ``request``'s base up to ``last``, and
        what is about to be (``pending``): each transaction ids, footprint
        and version, oldest first; None when the holder may not judge the
        request (an unknown isolation level, a base outside the window, or
        a request of another catalog, whose folder this one found).

        Raises:
            OlympiaError: a version's root cannot be read."""
        store = self.store
        base, latest = request.base, last.version
        if (
            request.isolation not in ISOLATION_LEVELS
            or not request.begin <= base <= latest
            or latest - base > _GROUP_WINDOW
            or store.load_root(base).info.transaction_id != request.base_id
        ):
            return None
        window: list[tuple[Sequence[str], Footprint, int]] = [
            (store.load_root(v).info.transaction_ids, footprint_of(store, v), v)
            for v in range(base + 1, latest + 1)
        ]
        window.extend(((txn_id,), fp, version) for txn_id, fp, version in pending)
        return window

    def _verdict(
        self,
        request: group.Request,
        footprint: Footprint,
        last: Root,
        pending: Sequence[tuple[str, Footprint, int]],
    ) -> group.Verdict | None:
        """Why ``request`` (its actions' ``footprint``), not admitted, would
        fail its writer's rebase (§3.2 item 4, verdicts): the rules of §4.1
        in the order the writer applies them (§3 step 3), version by version
        above its base, oldest first, through ``pending``; None when none
        refuses it (it was held back for another reason: its writer rebases
        and may commit) or the holder may not judge it."""
        try:
            window = self._since_base(request, last, pending)
        except OlympiaError:
            return None
        for txn_ids, fp, version in window or ():
            if request.txn_id in txn_ids:
                return None  # published already: its writer finds it so
            if fp.rollback:
                return group.Verdict(version, "catalog-rollback")
            key = write_overlap(footprint, fp)
            if key is not None:
                return group.Verdict(version, "write-write", key)
        return None


def _begin_hides_a_read(
    store: CatalogStore, footprint: Footprint, members: Sequence[Footprint]
) -> bool:
    """Whether ``footprint`` may not join a version holding ``members``
    because the version's begin version, the smallest of its transactions'
    (format.md §3.2), would misplace a dependency: a version ``u`` with
    ``begin <= u`` whose writes one of them read would count as written after
    that transaction's snapshot instead of before it (a *wr* edge taken for
    an *rw* edge in the opposite direction, transactions.md §4.2). So no
    version in ``(smallest begin, the transaction's begin]`` may write a key
    the transaction's reads depend on, for it and for the members already
    in, whose ranges grow when it lowers the smallest begin."""
    low = min((m.begin for m in members), default=footprint.begin)
    new_low = min(low, footprint.begin)
    ranges = [(footprint, new_low, footprint.begin)]
    if new_low < low:
        ranges.extend((m, new_low, low) for m in members)
    for reader, after, upto in ranges:
        if upto - after > _GROUP_WINDOW:
            return True
        for v in range(after + 1, upto + 1):
            if sees(reader, footprint_of(store, v)) is not None:
                return True
    return False


def _last_writer(store: CatalogStore, key: str, begin: int, latest: int) -> int:
    """The newest version in ``(begin, latest]`` that wrote ``key`` (else ``latest``)."""
    for v in range(latest, begin, -1):
        try:
            if key in footprint_of(store, v).writes:
                return v
        except VersionNotFoundError:
            break
    return latest
