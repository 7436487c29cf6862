"""A checker for recorded transaction histories (pure Python, no olympia internals).

Workers record, for every transaction they attempted, what it read (the
unique writer token of the value it saw, or absence; for ``list_tables`` the
names it saw), what it wrote (a unique token per object and transaction, or a
drop) and how it ended. Objects are tables ``"<namespace>.<table>"`` and
namespaces ``"<namespace>"``. The preconditions a write checked are reads
too, recorded before the write whether they held or not: whether an object
exists (``exists``) and whether a namespace holds any table (``any``). A
write that failed records only the checks that decided its error (for
example TableAlreadyExists: the namespace exists and the table exists), so an
error outcome is checked like any other read: it must match the snapshot
and it takes part in the graph. :func:`check_history` turns the committed
transactions into a dependency graph (Adya's DSG):

* ``wr``: T read the value U wrote, so U -> T;
* ``ww``: U and V wrote the same object and V is U's successor in version
  order (commit-version order), so U -> V;
* ``rw``: T read the value of ``x`` written by U (or ``x``'s absence) and V is
  the next writer of ``x`` after U, so T -> V. A ``list_tables`` read is a
  read of the membership (create/drop history) of every table key in the
  namespace: the next create or drop of any of them after what T saw gives
  an rw edge (a phantom). An ``any`` read is a read of the same membership;
  an ``exists`` read is a read of the membership of one object.

Any cycle is a violation of SERIALIZABLE. Under SNAPSHOT, every
non-serializable cycle contains two consecutive rw edges (Fekete et al., "Making
snapshot isolation serializable", 2005), so a cycle without two consecutive rw
edges (a lost update is ``ww`` + ``rw``) is an SI violation. The checker
decides this exactly: a closed walk avoiding two consecutive rw edges exists
if and only if a simple cycle does, and such walks are the cycles of a graph
over (transaction, "entered by an rw edge") pairs.

Besides the graph it checks that every read saw the snapshot of its begin
version, that no transaction overwrote a write it did not see (first
committer wins), that commits match the catalog's history (same version and
transaction id, dense versions, aborted transactions absent), that the final
state equals the last committed write of every object, and, for SERIALIZABLE,
that every dependency pointing backwards in commit order is recorded in the
transaction's ``serialized_before`` and that those records are consistent
with the graph.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import pairwise
from typing import Any, Protocol

RW, WW, WR = "rw", "ww", "wr"


@dataclass(frozen=True)
class Op:
    """One recorded operation.

    Tables are named ``"<namespace>.<table>"``, namespaces ``"<namespace>"``.
    ``kind`` is ``read`` (``token`` None: absent), ``list`` (``names``: the
    tables seen in namespace ``obj``), ``exists`` (membership of ``obj``:
    ``found``), ``any`` (whether namespace ``obj`` holds a table: ``found``),
    ``create``, ``update`` or ``drop`` (``token`` None).
    """

    kind: str
    obj: str
    token: str | None = None
    names: frozenset[str] = frozenset()
    found: bool | None = None

    @property
    def is_write(self) -> bool:
        return self.kind in ("create", "update", "drop")

    @property
    def is_membership_write(self) -> bool:
        return self.kind in ("create", "drop")


@dataclass
class Txn:
    """One attempted transaction, as a worker recorded it."""

    label: str
    txn_id: str
    isolation: str
    begin: int
    ops: list[Op]
    outcome: str  # "committed", "aborted" or "error"
    version: int | None = None
    rule: str | None = None
    kind: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    #: Its place among the transactions of its version (group commit: a
    #: version may hold several, in serial order), from the catalog's history.
    slot: int = 0

    @property
    def committed(self) -> bool:
        return self.outcome == "committed"

    @cached_property
    def writes(self) -> dict[str, Op]:
        """The net write of each object written: the last token written, as a
        membership write (create or drop) if any of its writes was one."""
        out: dict[str, Op] = {}
        for op in self.ops:
            if not op.is_write:
                continue
            prev = out.get(op.obj)
            if op.kind == "update" and prev is not None and prev.kind == "create":
                op = Op("create", op.obj, op.token)
            out[op.obj] = op
        return out

    @property
    def published(self) -> bool:
        """Whether the commit published a version (read-only SNAPSHOT ones do not)."""
        return self.committed and self.version is not None and self.version > self.begin

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Txn:
        ops = [
            Op(
                kind=o["kind"],
                obj=o["obj"],
                token=o.get("token"),
                names=frozenset(o.get("names", ())),
                found=o.get("found"),
            )
            for o in data["ops"]
        ]
        return cls(
            label=data["label"],
            txn_id=data["txn_id"],
            isolation=data["isolation"],
            begin=int(data["begin"]),
            ops=ops,
            outcome=data["outcome"],
            version=data.get("version"),
            rule=data.get("rule"),
            kind=data.get("kind", ""),
            info=dict(data.get("info", {})),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "txn_id": self.txn_id,
            "isolation": self.isolation,
            "begin": self.begin,
            "ops": [
                {
                    "kind": o.kind,
                    "obj": o.obj,
                    "token": o.token,
                    "names": sorted(o.names),
                    "found": o.found,
                }
                for o in self.ops
            ],
            "outcome": self.outcome,
            "version": self.version,
            "rule": self.rule,
            "kind": self.kind,
            "info": self.info,
        }


class HistoryEntry(Protocol):
    """What the checker uses of ``olympia.Catalog.history()`` entries."""

    @property
    def version(self) -> int: ...

    @property
    def transaction_id(self) -> str: ...

    @property
    def isolation(self) -> str: ...

    @property
    def begin_version(self) -> int | None: ...

    @property
    def serialized_before(self) -> Sequence[int]: ...

    # Optional: ``transactions``, the transactions of a version that holds
    # several (each with transaction_id, isolation and begin_version).


@dataclass(frozen=True)
class Cycle:
    """A simple cycle: ``nodes[i] -> nodes[i + 1]`` (cyclically) has ``kinds[i]``."""

    nodes: tuple[str, ...]
    kinds: tuple[frozenset[str], ...]

    @property
    def rw_only(self) -> tuple[bool, ...]:
        return tuple(k == {RW} for k in self.kinds)

    @property
    def has_adjacent_rw(self) -> bool:
        """Whether two consecutive edges (cyclically) can only be rw edges."""
        flags = self.rw_only
        return any(flags[i] and flags[(i + 1) % len(flags)] for i in range(len(flags)))

    def describe(self, txns: Mapping[str, Txn] | None = None) -> str:
        parts = []
        for node, kinds in zip(self.nodes, self.kinds):
            where = ""
            if txns is not None and node in txns:
                t = txns[node]
                where = f"[{t.kind} b={t.begin} v={t.version}]"
            parts.append(f"{node}{where} -{'+'.join(sorted(kinds))}->")
        return " ".join(parts) + f" {self.nodes[0]}"


@dataclass
class Report:
    """What :func:`check_history` found."""

    mode: str
    committed: int = 0
    aborted: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    edges: Counter[str] = field(default_factory=Counter)
    #: One example cycle for each strongly connected component with a cycle.
    cycles: list[Cycle] = field(default_factory=list)
    #: For each component whose every cycle has two consecutive rw edges (the
    #: anomalies SNAPSHOT allows, e.g. write skew), its example cycle.
    write_skews: list[Cycle] = field(default_factory=list)
    #: For the other components, a cycle without two consecutive rw edges
    #: (impossible under SNAPSHOT: a lost update, or a cycle with a single rw edge).
    si_violations: list[Cycle] = field(default_factory=list)
    lost_updates: list[str] = field(default_factory=list)
    #: Anything else that no correct execution can produce.
    anomalies: list[str] = field(default_factory=list)
    txns: dict[str, Txn] = field(default_factory=dict)

    @property
    def violations(self) -> list[str]:
        """Everything that violates ``mode``; empty when the history is correct."""
        out = list(self.anomalies) + [f"lost update: {x}" for x in self.lost_updates]
        out += [f"SI violation: {c.describe(self.txns)}" for c in self.si_violations]
        if self.mode == "serializable":
            out += [f"write skew: {c.describe(self.txns)}" for c in self.write_skews]
        return out + [f"error: {e}" for e in self.errors]

    @property
    def ok(self) -> bool:
        return not self.violations

    def summary(self) -> str:
        lines = [
            f"mode={self.mode} committed={self.committed} aborted={sum(self.aborted.values())} "
            f"{dict(self.aborted)} edges={dict(self.edges)} cycles={len(self.cycles)} "
            f"write_skews={len(self.write_skews)} si_violations={len(self.si_violations)} "
            f"lost_updates={len(self.lost_updates)} anomalies={len(self.anomalies)}"
        ]
        lines += [f"  {v}" for v in self.violations[:20]]
        if len(self.violations) > 20:
            lines.append(f"  ... {len(self.violations) - 20} more")
        return "\n".join(lines)


Graph = dict[str, dict[str, set[str]]]


def _add_edge(graph: Graph, a: str, b: str, kind: str) -> None:
    if a != b:
        graph.setdefault(a, {}).setdefault(b, set()).add(kind)
        graph.setdefault(b, {})


def check_history(
    records: Iterable[Txn | Mapping[str, Any]],
    *,
    mode: str,
    history: Sequence[HistoryEntry] | None = None,
    final_state: Mapping[str, str] | None = None,
    base_version: int = 0,
) -> Report:
    """Check a recorded history.

    Args:
        records: every attempted transaction (``Txn`` or its ``to_dict()``),
            including the one that created the initial objects.
        mode: ``"serializable"`` or ``"snapshot"``: what the history must satisfy.
        history: the catalog's ``history()``; versions up to ``base_version``
            need not belong to a recorded transaction.
        final_state: object name -> writer token of every object that exists at
            the end, for the objects the records mention.
    """
    txns = [r if isinstance(r, Txn) else Txn.from_dict(r) for r in records]
    report = Report(mode=mode)
    by_label: dict[str, Txn] = {}
    for t in txns:
        if t.label in by_label:
            report.anomalies.append(f"two transactions are labelled {t.label}")
        by_label[t.label] = t
    report.txns = by_label
    committed = [t for t in txns if t.committed]
    report.committed = len(committed)
    for t in txns:
        if t.outcome == "aborted":
            report.aborted[t.rule or "?"] += 1
        elif t.outcome == "error":
            report.errors.append(f"{t.label}: {t.info.get('error', t.rule)}")

    groups = _groups(history or ())
    for t in committed:
        ids = groups.get(t.version or -1, ())
        if t.txn_id in ids:
            t.slot = ids.index(t.txn_id)
    _check_versions(report, committed, groups)
    orders = _version_orders(committed)
    writer_of: dict[tuple[str, str], Txn] = {}
    for t in committed:
        for obj, op in t.writes.items():
            if op.token is not None:
                writer_of[(obj, op.token)] = t
    aborted_tokens = {
        (op.obj, op.token)
        for t in txns
        if not t.committed
        for op in t.ops
        if op.is_write and op.token is not None
    }

    graph: Graph = {t.label: {} for t in committed}
    for order in orders.values():
        for (_, u), (_, v) in pairwise(order):
            _add_edge(graph, u.label, v.label, WW)
    for t in committed:
        _reads_of(report, graph, t, orders, writer_of, aborted_tokens)
    for t in txns:  # a failed transaction must still have read its snapshot
        if not t.committed:
            _reads_of(report, None, t, orders, writer_of, aborted_tokens)
    _check_first_committer_wins(report, orders)
    report.edges = Counter(k for succ in graph.values() for ks in succ.values() for k in ks)

    for scc in _sccs(graph):
        if len(scc) < 2:
            continue
        example = _shortest_cycle(graph, scc)
        report.cycles.append(example)
        bad = find_si_violation(graph, scc)
        if bad is None:
            report.write_skews.append(example)
        else:
            report.si_violations.append(bad)

    if history is not None:
        _check_history_entries(report, committed, txns, history, base_version, graph)
    if final_state is not None:
        _check_final_state(report, orders, final_state)
    return report


# --- building the graph ---------------------------------------------------------------


def _groups(history: Sequence[HistoryEntry]) -> dict[int, tuple[str, ...]]:
    """Version -> the ids of the transactions it holds, in serial order."""
    out = {}
    for h in history:
        several = getattr(h, "transactions", ())
        if len(several) > 1:
            out[h.version] = tuple(r.transaction_id for r in several)
        else:
            out[h.version] = (h.transaction_id,)
    return out


def _check_versions(
    report: Report, committed: Sequence[Txn], groups: Mapping[int, tuple[str, ...]]
) -> None:
    claimed: dict[int, Txn] = {}
    for t in committed:
        if t.version is None:
            report.anomalies.append(f"{t.label} committed without a version")
            continue
        if t.version < t.begin:
            report.anomalies.append(f"{t.label} committed as {t.version} < begin {t.begin}")
        if t.version == t.begin:
            if t.isolation == "serializable" or t.writes:
                report.anomalies.append(
                    f"{t.label} ({t.isolation}, {len(t.writes)} writes) committed without "
                    f"publishing a version"
                )
            continue
        other = claimed.get(t.version)
        if other is not None and not {other.txn_id, t.txn_id} <= set(groups.get(t.version, ())):
            # Two transactions in one version only as members of its group.
            report.anomalies.append(
                f"version {t.version} claimed by both {other.label} and {t.label}"
            )
        claimed[t.version] = t


def _version_orders(committed: Sequence[Txn]) -> dict[str, list[tuple[int, Txn]]]:
    """Object -> its committed writers in version order."""
    orders: dict[str, list[tuple[int, Txn]]] = {}
    for t in committed:
        if t.published:
            assert t.version is not None
            for obj in t.writes:
                orders.setdefault(obj, []).append((t.version, t))
    for order in orders.values():
        order.sort(key=lambda e: (e[0], e[1].slot))
    return orders


def _position_at(order: Sequence[tuple[int, Txn]], begin: int) -> int:
    """Index of the last writer with version <= ``begin`` (-1: the initial absence)."""
    pos = -1
    for i, (v, _) in enumerate(order):
        if v <= begin:
            pos = i
    return pos


def _reads_of(
    report: Report,
    graph: Graph | None,
    t: Txn,
    orders: Mapping[str, list[tuple[int, Txn]]],
    writer_of: Mapping[tuple[str, str], Txn],
    aborted_tokens: set[tuple[str, str]],
) -> None:
    """Check what ``t`` read against its snapshot; add wr/rw edges when ``graph`` is given."""
    own: dict[str, Op] = {}
    for op in t.ops:
        if op.is_write:
            own[op.obj] = op
            continue
        if op.kind == "read":
            if op.obj in own:
                if op.token != own[op.obj].token:
                    report.anomalies.append(f"{t.label} did not read its own write of {op.obj}")
                continue
            _content_read(report, graph, t, op, orders.get(op.obj, []), writer_of, aborted_tokens)
        elif op.kind == "list":
            _list_read(report, graph, t, op, orders, own)
        elif op.kind == "exists":
            if op.obj in own:
                if op.found != (own[op.obj].kind != "drop"):
                    report.anomalies.append(
                        f"{t.label} found {op.obj} {_presence(op.found)} against its own write"
                    )
                continue
            _exists_read(report, graph, t, op, orders.get(op.obj, []))
        elif op.kind == "any":
            _any_read(report, graph, t, op, orders, own)
        else:
            report.anomalies.append(f"{t.label} recorded an unknown operation {op.kind!r}")
    if graph is None:
        return
    for obj in own:  # lost update: read x, then overwrite a write it never saw
        reads = [r for r in t.ops if r.kind == "read" and r.obj == obj]
        order = orders.get(obj, [])
        mine = next((i for i, (_, w) in enumerate(order) if w is t), None)
        if not reads or mine is None:
            continue
        seen = _position_at(order, t.begin)
        if mine > seen + 1:
            lost = ", ".join(w.label for _, w in order[seen + 1 : mine])
            report.lost_updates.append(
                f"{t.label} (v{t.version}) read {obj} before and overwrote the writes of {lost}"
            )


def _content_read(
    report: Report,
    graph: Graph | None,
    t: Txn,
    op: Op,
    order: Sequence[tuple[int, Txn]],
    writer_of: Mapping[tuple[str, str], Txn],
    aborted_tokens: set[tuple[str, str]],
) -> None:
    expected = _position_at(order, t.begin)
    if op.token is None:
        if expected >= 0 and order[expected][1].writes[op.obj].kind != "drop":
            report.anomalies.append(
                f"{t.label} (begin {t.begin}) saw {op.obj} absent but "
                f"{order[expected][1].label} (v{order[expected][0]}) had written it"
            )
        pos = expected
    else:
        u = writer_of.get((op.obj, op.token))
        if u is None:
            what = "an aborted" if (op.obj, op.token) in aborted_tokens else "no committed"
            report.anomalies.append(
                f"{t.label} read {op.obj}={op.token}, written by {what} transaction"
            )
            return
        pos = next(i for i, (_, w) in enumerate(order) if w is u)
        if pos != expected:
            now = order[expected][1].label if expected >= 0 else "absent"
            report.anomalies.append(
                f"{t.label} (begin {t.begin}) read {op.obj} from {u.label} (v{u.version}), "
                f"but its snapshot held {now}"
            )
    if graph is not None:
        _edges_around_read(graph, order, pos, t)


def _edges_around_read(graph: Graph, order: Sequence[tuple[int, Txn]], pos: int, t: Txn) -> None:
    """A read of the write at ``pos`` of ``order``: that writer precedes ``t`` (wr),
    and ``t`` precedes the next writer (rw)."""
    if pos >= 0:
        _add_edge(graph, order[pos][1].label, t.label, WR)
    if pos + 1 < len(order):
        _add_edge(graph, t.label, order[pos + 1][1].label, RW)


def _list_read(
    report: Report,
    graph: Graph | None,
    t: Txn,
    op: Op,
    orders: Mapping[str, list[tuple[int, Txn]]],
    own: Mapping[str, Op],
) -> None:
    prefix = op.obj + "."
    keys = {k for k in orders if k.startswith(prefix)} | {prefix + n for n in op.names}
    for key in sorted(keys):
        if key in own:
            continue
        members = [(v, w) for v, w in orders.get(key, []) if w.writes[key].is_membership_write]
        pos = _position_at(members, t.begin)
        present = pos >= 0 and members[pos][1].writes[key].kind == "create"
        seen = key[len(prefix) :] in op.names
        if seen != present:
            report.anomalies.append(
                f"{t.label} (begin {t.begin}) listed {op.obj} and "
                f"{'saw' if seen else 'missed'} {key}, which its snapshot "
                f"{'lacked' if seen else 'held'} (phantom)"
            )
        if graph is not None:
            _edges_around_read(graph, members, pos, t)


def _presence(found: bool | None) -> str:
    return "present" if found else "absent"


def _membership_at(
    order: Sequence[tuple[int, Txn]], obj: str, begin: int
) -> tuple[list[tuple[int, Txn]], int, bool]:
    """The membership writers of ``obj``, the index of the last one at
    ``begin`` (-1: none) and whether ``obj`` existed then."""
    members = [(v, w) for v, w in order if w.writes[obj].is_membership_write]
    pos = _position_at(members, begin)
    return members, pos, pos >= 0 and members[pos][1].writes[obj].kind == "create"


def _exists_read(
    report: Report, graph: Graph | None, t: Txn, op: Op, order: Sequence[tuple[int, Txn]]
) -> None:
    members, pos, present = _membership_at(order, op.obj, t.begin)
    if op.found != present:
        report.anomalies.append(
            f"{t.label} (begin {t.begin}) found {op.obj} {_presence(op.found)}, but its "
            f"snapshot had it {_presence(present)}"
        )
    if graph is not None:
        _edges_around_read(graph, members, pos, t)


def _any_read(
    report: Report,
    graph: Graph | None,
    t: Txn,
    op: Op,
    orders: Mapping[str, list[tuple[int, Txn]]],
    own: Mapping[str, Op],
) -> None:
    """Whether namespace ``op.obj`` held any table: a read of the membership of
    every table key in it, like a list."""
    prefix = op.obj + "."
    held = []
    for key in sorted(k for k in set(orders) | set(own) if k.startswith(prefix)):
        if key in own:
            if own[key].kind != "drop":
                held.append(key)
            continue
        members, pos, present = _membership_at(orders.get(key, []), key, t.begin)
        if present:
            held.append(key)
        if graph is not None:
            _edges_around_read(graph, members, pos, t)
    if op.found != bool(held):
        report.anomalies.append(
            f"{t.label} (begin {t.begin}) found namespace {op.obj} "
            f"{'not empty' if op.found else 'empty'}, but its snapshot held {held}"
        )


def _check_first_committer_wins(
    report: Report, orders: Mapping[str, list[tuple[int, Txn]]]
) -> None:
    for obj, order in orders.items():
        for (vu, u), (_, v) in pairwise(order):
            if v.begin < vu:
                report.anomalies.append(
                    f"write-write: {v.label} (begin {v.begin}, v{v.version}) wrote {obj} "
                    f"without seeing {u.label}'s write (v{vu})"
                )


# --- cycles ---------------------------------------------------------------------------


def _sccs(graph: Graph) -> list[list[str]]:
    """Strongly connected components (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterable[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, succ = work[-1]
            advanced = False
            for nxt in succ:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    x = stack.pop()
                    on_stack.discard(x)
                    comp.append(x)
                    if x == node:
                        break
                out.append(sorted(comp))
    return out


def _shortest_cycle(graph: Graph, scc: Sequence[str]) -> Cycle:
    """A shortest cycle through the first node of ``scc`` (within the component)."""
    inside = set(scc)
    start = scc[0]
    parent: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in sorted(graph[node]):
            if nxt not in inside:
                continue
            if nxt == start:
                path = [node]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                nodes = tuple(reversed(path))
                return _cycle(graph, nodes)
            if nxt not in parent:
                parent[nxt] = node
                queue.append(nxt)
    raise AssertionError(f"no cycle through {start} in its component")


def _cycle(graph: Graph, nodes: Sequence[str]) -> Cycle:
    kinds = tuple(
        frozenset(graph[nodes[i]][nodes[(i + 1) % len(nodes)]]) for i in range(len(nodes))
    )
    return Cycle(tuple(nodes), kinds)


def find_si_violation(graph: Graph, nodes: Iterable[str] | None = None) -> Cycle | None:
    """A simple cycle among ``nodes`` without two consecutive rw-only edges, if any.

    Searches the graph over states ``(node, entered by an rw-only edge)``, where
    an rw-only edge may not follow one: its cycles are exactly the closed walks
    without two consecutive rw-only edges. A closed walk splits at a repeated
    node into two closed walks, and if the first has two rw-only edges at its
    seam the second has none at its own, so a simple cycle can be extracted.
    """
    inside = set(graph if nodes is None else nodes)

    def rw_only(a: str, b: str) -> bool:
        return graph[a][b] == {RW}

    states: Graph = {}
    for a in inside:
        for flag in (False, True):
            states.setdefault(f"{int(flag)}{a}", {})
            for b in graph[a]:
                if b not in inside:
                    continue
                r = rw_only(a, b)
                if flag and r:
                    continue
                _add_edge(states, f"{int(flag)}{a}", f"{int(r)}{b}", "e")
    for scc in _sccs(states):
        if len(scc) < 2:
            continue
        walk = [s[1:] for s in _shortest_cycle(states, scc).nodes]
        return _simple_valid_cycle(graph, walk)
    return None


def _valid(graph: Graph, walk: Sequence[str]) -> bool:
    n = len(walk)
    flags = [graph[walk[i]][walk[(i + 1) % n]] == {RW} for i in range(n)]
    return not any(flags[i] and flags[(i + 1) % n] for i in range(n))


def _simple_valid_cycle(graph: Graph, walk: list[str]) -> Cycle:
    while len(set(walk)) < len(walk):
        first: dict[str, int] = {}
        for j, node in enumerate(walk):
            if node in first:
                i = first[node]
                break
            first[node] = j
        part1 = walk[i:j]
        part2 = walk[j:] + walk[:i]
        walk = part1 if _valid(graph, part1) else part2
    assert _valid(graph, walk), walk
    return _cycle(graph, walk)


# --- history and final state ------------------------------------------------------------


def _check_history_entries(
    report: Report,
    committed: Sequence[Txn],
    txns: Sequence[Txn],
    history: Sequence[HistoryEntry],
    base_version: int,
    graph: Graph,
) -> None:
    versions = [h.version for h in history]
    if versions != list(range(versions[0], versions[0] + len(versions))):
        report.anomalies.append(f"history versions are not dense: {versions}")
    entry = {h.version: h for h in history}
    by_id = {t.txn_id: t for t in txns}
    published = {t.label: t for t in committed if t.published}
    for t in published.values():
        h = entry.get(t.version or 0)
        if h is None:
            report.anomalies.append(f"{t.label} committed as v{t.version}, missing from history")
            continue
        several = getattr(h, "transactions", ())
        r = next((r for r in several if r.transaction_id == t.txn_id), h)
        if (r.transaction_id, r.isolation, r.begin_version) != (t.txn_id, t.isolation, t.begin):
            report.anomalies.append(
                f"history v{t.version} is {r.transaction_id} ({r.isolation}, begin "
                f"{r.begin_version}), but {t.label} = {t.txn_id} ({t.isolation}, begin "
                f"{t.begin}) reported committing it"
            )
    for h in history:
        several = getattr(h, "transactions", ())
        for txn_id in (
            [r.transaction_id for r in several] if len(several) > 1 else [h.transaction_id]
        ):
            owner = by_id.get(txn_id)
            if owner is None:
                if h.version > base_version:
                    report.anomalies.append(
                        f"history v{h.version} holds {txn_id}, which no worker recorded"
                    )
            elif not owner.published or owner.version != h.version:
                report.anomalies.append(
                    f"history v{h.version} holds {owner.label}, which reported {owner.outcome} "
                    f"(version {owner.version}, rule {owner.rule})"
                )
    if report.mode != "serializable":
        return
    # A dependency against commit order must be recorded in serialized_before,
    # and no recorded "x before y" may contradict a dependency path y ->* x.
    by_version: dict[int, list[Txn]] = {}
    for t in published.values():
        by_version.setdefault(t.version or 0, []).append(t)
    for x in published.values():
        h = entry.get(x.version or 0)
        # A version's serialized_before is its first transaction's (group
        # commit admits no other with an edge against commit order).
        before = set(h.serialized_before) if h is not None and x.slot == 0 else set()
        for y_label, kinds in graph[x.label].items():
            y = published.get(y_label)
            if y is not None and y.version == x.version and y.slot < x.slot:
                report.anomalies.append(
                    f"{x.label} -{'+'.join(sorted(kinds))}-> {y.label}, but v{x.version} "
                    f"holds {y.label} before {x.label}"
                )
            if y is None or (y.version or 0) >= (x.version or 0):
                continue
            if x.isolation == "serializable" and y.version not in before:
                report.anomalies.append(
                    f"{x.label} (v{x.version}) -{'+'.join(sorted(kinds))}-> {y.label} "
                    f"(v{y.version}) but v{y.version} is not in its serialized_before "
                    f"{sorted(before)}"
                )
        for v in sorted(before):
            ys = by_version.get(v)
            if not ys:
                report.anomalies.append(f"{x.label} is serialized before unknown version {v}")
            for y in ys or ():
                if _reaches(graph, y.label, x.label):
                    report.anomalies.append(
                        f"{x.label} (v{x.version}) is recorded as serialized before {y.label} "
                        f"(v{v}), but dependencies lead from {y.label} to {x.label}"
                    )


def _reaches(graph: Graph, a: str, b: str) -> bool:
    seen, queue = {a}, deque([a])
    while queue:
        node = queue.popleft()
        for nxt in graph[node]:
            if nxt == b:
                return True
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    return False


def _check_final_state(
    report: Report, orders: Mapping[str, list[tuple[int, Txn]]], final_state: Mapping[str, str]
) -> None:
    for obj in sorted(set(orders) | set(final_state)):
        order = orders.get(obj, [])
        last = order[-1][1].writes[obj].token if order else None
        if final_state.get(obj) != last:
            who = f"{order[-1][1].label} (v{order[-1][0]})" if order else "nobody"
            report.anomalies.append(
                f"final {obj} = {final_state.get(obj)}, but its last committed writer is {who} "
                f"with {last}"
            )
