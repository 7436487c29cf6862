"""Conflict rules (spec/transactions.md §4). Pure functions over footprints,
the rules as the named checks of :class:`ConflictChecker`, and
:func:`footprint_of`, which reads a committed version's footprint through the
store it is given.

A footprint summarises what one transaction read and wrote. The SNAPSHOT
rules compare write footprints; the SERIALIZABLE check searches the
dependency graph between committed transactions for a cycle through the
committing one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from olympia.errors import CommitConflictError, CorruptCatalogError, VersionNotFoundError
from olympia.proto import actions_pb2 as apb
from olympia.store import CatalogStore

A = apb.ActionType

CONTENT_READS = frozenset({A.NAMESPACE_DESCRIBE, A.TABLE_DESCRIBE, A.VIEW_DESCRIBE, A.TABLE_SELECT})
MEMBER_READS = frozenset({A.NAMESPACE_EXISTS, A.TABLE_EXISTS, A.VIEW_EXISTS, A.TRANSACTION_EXISTS})
PREFIX_READS = frozenset({A.NAMESPACES_LIST, A.TABLES_LIST, A.VIEWS_LIST})
MEMBER_WRITES = frozenset(
    {
        A.NAMESPACE_CREATE,
        A.NAMESPACE_DROP,
        A.TABLE_CREATE,
        A.TABLE_DROP,
        A.TABLE_RENAME,
        A.VIEW_CREATE,
        A.VIEW_DROP,
        A.TRANSACTION_CREATE,
        A.TRANSACTION_DROP,
    }
)
CONTENT_WRITES = frozenset(
    {
        A.NAMESPACE_ALTER,
        A.TABLE_UPDATE,
        A.TABLE_INSERT,
        A.TABLE_OVERWRITE,
        A.VIEW_REPLACE,
        A.TRANSACTION_UPDATE,
    }
)
READ_TYPES = CONTENT_READS | MEMBER_READS | PREFIX_READS


def is_write(action: apb.Action) -> bool:
    return action.type in MEMBER_WRITES or action.type in CONTENT_WRITES


@dataclass
class Footprint:
    """What one transaction read and wrote, and where it sits in the history."""

    version: int
    begin: int
    content_reads: set[str] = field(default_factory=set)
    member_reads: set[str] = field(default_factory=set)
    prefix_reads: set[str] = field(default_factory=set)
    #: key -> True for a membership write, False for a content-only write
    writes: dict[str, bool] = field(default_factory=dict)
    #: namespace key -> property keys, for keys written only by NAMESPACE_ALTER
    alter_props: dict[str, set[str]] = field(default_factory=dict)
    rollback: bool = False

    def add_plain(self, t: int, key: str, target: str = "") -> None:
        """Add an action of type ``t`` on ``key`` (``target``: a rename's new
        key) whose footprint needs nothing else: any type but NAMESPACE_ALTER."""
        if t in CONTENT_READS:
            self.content_reads.add(key)
        elif t in MEMBER_READS:
            self.member_reads.add(key)
        elif t in PREFIX_READS:
            self.prefix_reads.add(key)
        elif t == A.CATALOG_ROLLBACK:
            self.rollback = True
        elif t in MEMBER_WRITES or t in CONTENT_WRITES:
            member = t in MEMBER_WRITES
            self.writes[key] = self.writes.get(key, False) or member
            self.alter_props.pop(key, None)
            if t == A.TABLE_RENAME:
                self.writes[target] = True
                self.alter_props.pop(target, None)

    def add(self, action: apb.Action) -> None:
        t, key = action.type, action.object_key
        if t == A.NAMESPACE_ALTER:
            if key not in self.writes:
                self.alter_props[key] = set()
                self.writes[key] = False
            if key in self.alter_props:
                # set_properties is the documented record of the keys set; the
                # keys of the new value are read too, for roots written before
                # set_properties was filled (spec/transactions.md §1).
                self.alter_props[key].update(action.set_properties)
                self.alter_props[key].update(action.unset_properties)
                self.alter_props[key].update(action.namespace.properties)
        else:
            self.add_plain(t, key, action.target_key)

    @classmethod
    def of(cls, version: int, begin: int, actions: Iterable[apb.Action]) -> Footprint:
        fp = cls(version, begin)
        for a in actions:
            fp.add(a)
        return fp


def judge_by_merge(pending: Footprint, merged: frozenset[str]) -> Footprint:
    """Leave the content of the ``merged`` keys to a content-merge hook
    (spec/transactions.md §4.3). In ``pending`` itself, a content read of a
    merged key becomes a membership read; the footprint returned is the one
    for the write-write rules, without the merged keys' (content-only) writes.
    The writes stay in ``pending``, for the edges into it in §4.2."""
    for key in merged & pending.content_reads:
        pending.content_reads.discard(key)
        pending.member_reads.add(key)
    if not any(key in pending.writes for key in merged):
        return pending
    writes = {k: m for k, m in pending.writes.items() if k not in merged}
    return replace(pending, writes=writes)


def sees(reader: Footprint, writer: Footprint) -> str | None:
    """A key written by ``writer`` that ``reader``'s reads depend on, if any."""
    for key, member in writer.writes.items():
        if key in reader.content_reads:
            return key
        if member and (
            key in reader.member_reads or any(key.startswith(p) for p in reader.prefix_reads)
        ):
            return key
    return None


def write_overlap(a: Footprint, b: Footprint) -> str | None:
    """A key both wrote, unless both only altered disjoint namespace properties."""
    small, big = (a, b) if len(a.writes) <= len(b.writes) else (b, a)
    for key in small.writes:
        if key not in big.writes:
            continue
        pa, pb = a.alter_props.get(key), b.alter_props.get(key)
        if pa is not None and pb is not None and not (pa & pb):
            continue
        return key
    return None


def _edge(x: Footprint, y: Footprint) -> bool:
    """Whether ``x`` must precede ``y`` in any equivalent serial order."""
    if x.version == y.version:
        return False
    if x.version <= y.begin and sees(y, x) is not None:
        return True
    if y.version > x.begin and sees(x, y) is not None:
        return True
    return x.version < y.version and write_overlap(x, y) is not None


def _conflict(message: str, version: int, rule: str, isolation: str) -> CommitConflictError:
    return CommitConflictError(
        f"{message} (isolation {isolation}, rule {rule}); start a new transaction from the "
        f"latest version and try again",
        version=version,
        rule=rule,
    )


def _plain(key: str) -> str:
    return key.rstrip()


def check_serializable(
    pending: Footprint, latest: int, footprint_of: Callable[[int], Footprint]
) -> list[int]:
    """Refuse ``pending`` if it would close a cycle in the dependency graph.

    ``pending.version`` must be ``latest + 1``. ``footprint_of(v)`` gives the
    footprint of committed version ``v`` and raises VersionNotFoundError for
    an expired version. Returns the committed versions ``pending`` is
    serialized before.

    Raises:
        CommitConflictError: rule ``serializable-cycle`` or ``history-expired``.
    """
    isolation = "serializable"
    loaded: dict[int, Footprint] = {}
    low = latest  # versions (low, latest] are loaded

    def load_down_to(begin: int) -> None:
        nonlocal low
        while low > begin:
            try:
                loaded[low] = footprint_of(low)
            except VersionNotFoundError:
                raise _conflict(
                    f"checking this commit needs version {low}, which was expired",
                    low,
                    "history-expired",
                    isolation,
                ) from None
            low -= 1

    load_down_to(pending.begin)
    frontier = [loaded[v] for v in sorted(loaded) if v > pending.begin and sees(pending, loaded[v])]
    reached: dict[int, Footprint] = {}
    while frontier:
        x = frontier.pop()
        if x.version in reached:
            continue
        reached[x.version] = x
        into_pending = (
            write_overlap(x, pending) is not None
            or sees(x, pending) is not None
            or (x.version <= pending.begin and sees(pending, x) is not None)
        )
        if into_pending:
            raise _conflict(
                f"committing would make the history non-serializable: this transaction must "
                f"precede version {x.version}, which must precede it",
                x.version,
                "serializable-cycle",
                isolation,
            )
        load_down_to(min(x.begin, x.version))
        for v, y in loaded.items():
            if v not in reached and _edge(x, y):
                frontier.append(y)
    return sorted(v for v in reached if v > pending.begin)


class ConflictChecker:
    """The conflict rules of spec/transactions.md §4 as named checks, which a
    commit (olympia.commit) runs on the versions committed since its last
    attempt. The replay that finds rule ``structural`` (§3) is the commit's
    own. A commit takes its checker as an argument: a test that needs a
    deliberately broken rebase gives it one whose checks pass everything."""

    #: Whether a transaction checked by this checker may leave a group-commit
    #: request (§3.2): the holder checks only the versions above the
    #: request's base and relies on these checks for the ones below it.
    group_commit = True

    def check_window(
        self,
        pending: Footprint,
        committed: Sequence[Footprint],
        isolation: str,
        describe: Callable[[str], str] = _plain,
    ) -> None:
        """The rules of §4.1 for both levels, version by version, oldest first.

        Raises:
            CommitConflictError: rule ``catalog-rollback`` or ``write-write``.
        """
        for c in committed:
            self.catalog_rollback(c, isolation)
            self.write_write(pending, c, isolation, describe)

    def catalog_rollback(self, committed: Footprint, isolation: str) -> None:
        """A catalog rollback in the window refuses the commit, whatever it did (§4.1)."""
        if committed.rollback:
            raise _conflict(
                f"version {committed.version} rolled the catalog back",
                committed.version,
                "catalog-rollback",
                isolation,
            )

    def write_write(
        self,
        pending: Footprint,
        committed: Footprint,
        isolation: str,
        describe: Callable[[str], str] = _plain,
    ) -> None:
        """First committer wins: ``pending`` may not write a key ``committed``
        wrote, unless both only altered disjoint properties of a namespace (§4.1)."""
        key = write_overlap(pending, committed)
        if key is not None:
            raise _conflict(
                f"version {committed.version} changed {describe(key)}, which this "
                f"transaction also changes",
                committed.version,
                "write-write",
                isolation,
            )

    def serializable_cycle(
        self, pending: Footprint, latest: int, footprint_of: Callable[[int], Footprint]
    ) -> list[int]:
        """SERIALIZABLE: the dependency graph of §4.2 (:func:`check_serializable`);
        the versions ``pending`` is serialized before.

        Raises:
            CommitConflictError: rule ``serializable-cycle`` or ``history-expired``.
        """
        return check_serializable(pending, latest, footprint_of)


def footprint_from_root(
    version: int, begin: int | None, actions: Iterable[tuple[str, bytes]]
) -> Footprint:
    """Build the footprint of a committed version from its action records
    (the root's action rows, or its action file: spec/format.md §3.2)."""
    fp = Footprint(version, version - 1 if begin is None else begin)
    for key, data in actions:
        action = apb.Action()
        try:
            action.ParseFromString(data)
        except Exception:  # protobuf's DecodeError and friends
            raise CorruptCatalogError(
                f"action of version {version} on {key.rstrip()!r} is damaged"
            ) from None
        fp.add(action)
    return fp


def footprint_of(store: CatalogStore, version: int) -> Footprint:
    """The footprint of committed ``version`` (cached: versions never change)."""
    cache_key = f"footprint:{version}"
    cached = store.derived.get(cache_key)
    if cached is not None:
        return cached  # type: ignore[return-value]
    root = store.load_root(version)
    fp = footprint_from_root(version, root.info.begin_version, store.load_actions(root))
    store.derived.put(cache_key, fp)
    return fp
