"""Every cell of the conflict table (spec/transactions.md §4), with two transactions.

Each case starts two transactions from one version, commits the first
("committed"), then commits the second ("pending") and checks the outcome.
After a conflict, a retry from the latest version must succeed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

import olympia
from olympia.conflicts import ConflictChecker, Footprint
from olympia.errors import CommitConflictError
from olympia.transaction import Transaction

Op = Callable[[Transaction], None]


def setup_catalog(txn: Transaction) -> None:
    txn.create_namespace("a", {"p": "0"})
    txn.create_namespace("b")
    txn.create_namespace("empty")
    txn.create_table("a", "x", "m/x0")
    txn.create_table("a", "y", "m/y0")
    txn.create_table("b", "z", "m/z0")


@dataclass
class Case:
    name: str
    committed: Op
    pending: Op
    snapshot: str  # "none" | rule name
    serializable: str
    retry: Op | None = None  # what to run from the latest version after a conflict


def upd(ns: str, name: str, loc: str) -> Op:
    return lambda t: t.update_table(ns, name, metadata_location=loc)


def seq(*ops: Op) -> Op:
    def run(t: Transaction) -> None:
        for op in ops:
            op(t)

    return run


def read(ns: str, name: str) -> Op:
    return lambda t: t.describe_table(ns, name) and None


def fails(op: Op, error: type[Exception]) -> Op:
    """Run ``op``, which must raise ``error`` (the transaction goes on)."""

    def run(t: Transaction) -> None:
        with pytest.raises(error):
            op(t)

    return run


CASES = [
    Case(
        "update vs update of one table",
        upd("a", "x", "m/x1"),
        upd("a", "x", "m/x2"),
        "write-write",
        "write-write",
    ),
    Case(
        "lost update: read-modify-write vs write",
        upd("a", "x", "m/x1"),
        seq(read("a", "x"), upd("a", "x", "m/x2")),
        "write-write",
        "write-write",
    ),
    Case(
        "alter of disjoint namespace properties",
        lambda t: t.alter_namespace("a", set={"k1": "1"}),
        lambda t: t.alter_namespace("a", set={"k2": "2"}, unset=["p"]),
        "none",
        "none",
    ),
    Case(
        "alter of the same namespace property",
        lambda t: t.alter_namespace("a", set={"k": "1"}),
        lambda t: t.alter_namespace("a", set={"k": "2"}),
        "write-write",
        "write-write",
    ),
    Case(
        "alter vs unset of the same property",
        lambda t: t.alter_namespace("a", unset=["p"]),
        lambda t: t.alter_namespace("a", set={"p": "9"}),
        "write-write",
        "write-write",
    ),
    Case(
        "create table in a namespace dropped meanwhile",
        lambda t: t.drop_namespace("empty"),
        lambda t: t.create_table("empty", "t", "m/t"),
        "structural",
        "structural",
        retry=seq(
            lambda t: t.create_namespace("empty"), lambda t: t.create_table("empty", "t", "m/t")
        ),
    ),
    Case(
        "alter a namespace dropped meanwhile",
        lambda t: t.drop_namespace("empty"),
        lambda t: t.alter_namespace("empty", set={"k": "v"}),
        "write-write",
        "write-write",
        retry=lambda t: t.create_namespace("empty", {"k": "v"}),
    ),
    Case(
        "create a name created meanwhile",
        lambda t: t.create_table("b", "new", "m/1"),
        lambda t: t.create_table("b", "new", "m/2"),
        "write-write",
        "write-write",
        retry=upd("b", "new", "m/2"),
    ),
    Case(
        "create a view whose name became a table meanwhile",
        lambda t: t.create_table("b", "v", "m/1"),
        lambda t: t.create_view("b", "v", sql_text="select 1"),
        "structural",
        "structural",
        retry=lambda t: t.create_view("b", "v2", sql_text="select 1"),
    ),
    Case(
        "update a table dropped meanwhile",
        lambda t: t.drop_table("a", "x"),
        upd("a", "x", "m/x2"),
        "write-write",
        "write-write",
        retry=lambda t: t.create_table("a", "x", "m/x2"),
    ),
    Case(
        "rename away a table updated meanwhile",
        upd("a", "x", "m/x1"),
        lambda t: t.rename_table("a", "x", "b", "x"),
        "write-write",
        "write-write",
    ),
    Case(
        "create the target name of a rename meanwhile",
        lambda t: t.create_table("b", "x", "m/bx"),
        lambda t: t.rename_table("a", "x", "b", "x"),
        "write-write",
        "write-write",
        retry=lambda t: t.rename_table("a", "x", "b", "x2"),
    ),
    Case(
        "drop a namespace that got a table meanwhile",
        lambda t: t.create_table("empty", "t", "m/t"),
        lambda t: t.drop_namespace("empty"),
        "structural",
        "structural",
        retry=seq(lambda t: t.drop_table("empty", "t"), lambda t: t.drop_namespace("empty")),
    ),
    Case(
        "create a table in a namespace whose properties changed",
        lambda t: t.alter_namespace("a", set={"owner": "x"}),
        lambda t: t.create_table("a", "new", "m/new"),
        "none",
        "none",
    ),
    Case(
        "different objects",
        upd("a", "x", "m/x1"),
        seq(upd("a", "y", "m/y1"), lambda t: t.create_view("b", "v", sql_text="select 1")),
        "none",
        "none",
    ),
    Case(
        "talk example: read t1, write t2, while t1 is written (serialized before)",
        upd("a", "x", "m/x1"),
        seq(read("a", "x"), upd("a", "y", "m/y1")),
        "none",
        "none",
    ),
    Case(
        "write skew",
        seq(read("a", "x"), read("a", "y"), upd("a", "x", "m/x1")),
        seq(read("a", "x"), read("a", "y"), upd("a", "y", "m/y1")),
        "none",
        "serializable-cycle",
    ),
    Case(
        "phantom: list tables, a table is created there, which read what we write",
        seq(lambda t: t.create_table("a", "new", "m/n"), read("b", "z")),
        seq(lambda t: t.list_tables("a") and None, upd("b", "z", "m/z1")),
        "none",
        "serializable-cycle",
    ),
    Case(
        "phantom without a way back: serialized before the creator",
        lambda t: t.create_table("a", "new", "m/n"),
        seq(lambda t: t.list_tables("a") and None, upd("b", "z", "m/z1")),
        "none",
        "none",
    ),
    Case(
        "exists read of a name created meanwhile, which read what we write",
        seq(lambda t: t.create_table("b", "new", "m/n"), read("a", "y")),
        seq(lambda t: t.table_exists("b", "new") and None, upd("a", "y", "m/y1")),
        "none",
        "serializable-cycle",
    ),
    Case(
        "committed only read what we write (serializable read record)",
        read("a", "x"),
        upd("a", "x", "m/x2"),
        "none",
        "none",
    ),
    Case(
        "we only read what the committed one wrote",
        upd("a", "x", "m/x1"),
        read("a", "x"),
        "none",
        "none",
    ),
    # Preconditions of writes are reads (spec §1): without them, each of the
    # next three pending transactions would commit serialized before the
    # committed one, in an order that does not explain what either observed.
    Case(
        "drop and re-create an empty namespace vs create a table there, which read what we write",
        seq(
            upd("b", "z", "m/z1"),
            lambda t: t.drop_namespace("empty"),
            lambda t: t.create_namespace("empty"),
        ),
        seq(read("b", "z"), lambda t: t.create_table("empty", "t", "m/t")),
        "none",
        "serializable-cycle",
    ),
    Case(
        "create and drop a view vs create a table of that name, which read what we write",
        seq(
            lambda t: t.create_view("a", "v", sql_text="select 1"),
            lambda t: t.drop_view("a", "v"),
            upd("b", "z", "m/z1"),
        ),
        seq(read("b", "z"), lambda t: t.create_table("a", "v", "m/v")),
        "none",
        "serializable-cycle",
    ),
    Case(
        "failed rename (target taken) whose source was dropped meanwhile, which read what we write",
        seq(read("b", "z"), lambda t: t.drop_table("a", "x")),
        seq(
            upd("b", "z", "m/z1"),
            fails(lambda t: t.rename_table("a", "x", "a", "y"), olympia.TableAlreadyExistsError),
        ),
        "none",
        "serializable-cycle",
        retry=upd("b", "z", "m/z1"),
    ),
    Case(
        "namespace list vs namespace creation",
        seq(lambda t: t.create_namespace("c"), read("a", "y")),
        seq(lambda t: t.list_namespaces() and None, upd("a", "y", "m/y1")),
        "none",
        "serializable-cycle",
    ),
]


def _content(cat: olympia.Catalog) -> dict[str, object]:
    view = cat.latest()
    out: dict[str, object] = {}
    for ns in view.list_namespaces():
        out[ns] = view.describe_namespace(ns).properties
        for t in view.list_tables(ns):
            out[f"{ns}.{t}"] = view.describe_table(ns, t).metadata_location
        for v in view.list_views(ns):
            out[f"{ns}.{v}:view"] = view.describe_view(ns, v).sql_text
    return out


@pytest.mark.parametrize("isolation", ["snapshot", "serializable"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_conflict_cell(tmp_path, case: Case, isolation: str) -> None:
    cat = olympia.create_catalog(str(tmp_path / "c"))
    with cat.transaction() as t:
        setup_catalog(t)
    start = cat.version
    first = cat.begin(isolation)
    second = cat.begin(isolation)
    case.committed(first)
    committed_version = first.commit()
    case.pending(second)
    expected = case.snapshot if isolation == "snapshot" else case.serializable
    if expected == "none":
        read_only = not any(not a.read_only for a in second.actions)
        version = second.commit()
        if read_only and isolation == "snapshot":
            assert version == start  # a read-only SNAPSHOT transaction publishes nothing
            assert cat.version == committed_version
            return
        assert version == cat.version
        assert version > committed_version >= start
        history = {h.version: h for h in cat.history()}
        assert history[version].transaction_id == second.id
        assert history[version].begin_version == start
        return
    before = _content(cat)
    latest = cat.version
    with pytest.raises(CommitConflictError) as info:
        second.commit()
    assert info.value.rule == expected, str(info.value)
    assert info.value.version == committed_version
    assert isolation in str(info.value)
    assert cat.version == latest and _content(cat) == before  # nothing visible changed
    with pytest.raises(olympia.TransactionClosedError):
        second.list_namespaces()
    retry = cat.begin(isolation)
    (case.retry or case.pending)(retry)
    assert retry.commit() == latest + 1


def test_disjoint_alters_merge(tmp_path) -> None:
    cat = olympia.create_catalog(str(tmp_path / "c"))
    with cat.transaction() as t:
        t.create_namespace("a", {"p": "0", "q": "0"})
    t1, t2 = cat.begin(), cat.begin()
    t1.alter_namespace("a", set={"k1": "1"})
    t2.alter_namespace("a", set={"k2": "2"}, unset=["p"])
    t1.commit()
    t2.commit()
    assert cat.latest().describe_namespace("a").properties == {"q": "0", "k1": "1", "k2": "2"}


def test_talk_example_records_the_serial_order(tmp_path) -> None:
    """Slides 70-71: Jack reads t1 and updates t2; Drew inserts into t1 first."""
    cat = olympia.create_catalog(str(tmp_path / "c"), default_isolation="serializable")
    with cat.transaction() as t:
        t.create_namespace("ns1")
        t.create_table("ns1", "t1", "m/t1.0")
        t.create_table("ns1", "t2", "m/t2.0")
    v99 = cat.version
    jack = cat.begin()
    drew = cat.begin()
    drew.describe_table("ns1", "t1")
    drew.update_table("ns1", "t1", metadata_location="m/t1.1")
    v100 = drew.commit()
    assert jack.describe_table("ns1", "t1").metadata_location == "m/t1.0"  # Jack's snapshot
    jack.update_table("ns1", "t2", metadata_location="m/t2.1")
    v101 = jack.commit()
    assert (v100, v101) == (v99 + 1, v99 + 2)
    info = {h.version: h for h in cat.history()}
    assert info[v101].serialized_before == (v100,)
    assert info[v101].begin_version == v99
    assert info[v100].serialized_before == ()
    latest = cat.latest()
    assert latest.describe_table("ns1", "t1").metadata_location == "m/t1.1"
    assert latest.describe_table("ns1", "t2").metadata_location == "m/t2.1"


def test_read_only_anomaly_is_refused(tmp_path) -> None:
    """A reader that saw a state between T's concurrent commit and T makes T's
    reordering impossible; the reader's recorded reads let T see that."""
    cat = olympia.create_catalog(str(tmp_path / "c"), default_isolation="serializable")
    with cat.transaction() as t:
        t.create_namespace("n")
        t.create_table("n", "x", "x0")
        t.create_table("n", "y", "y0")
    t_late = cat.begin()
    t_late.describe_table("n", "x")  # reads x before C writes it
    c = cat.begin()
    c.update_table("n", "x", metadata_location="x1")
    c.commit()
    reader = cat.begin()  # sees x1 but y0
    assert reader.describe_table("n", "x").metadata_location == "x1"
    assert reader.describe_table("n", "y").metadata_location == "y0"
    reader.commit()
    t_late.update_table("n", "y", metadata_location="y1")
    with pytest.raises(CommitConflictError) as info:
        t_late.commit()
    assert info.value.rule == "serializable-cycle"


def test_catalog_rollback_refuses_older_transactions(tmp_path) -> None:
    cat = olympia.create_catalog(str(tmp_path / "c"))
    with cat.transaction() as t:
        t.create_namespace("a")
    v1 = cat.version
    with cat.transaction() as t:
        t.create_namespace("b")
    pending = cat.begin()
    pending.create_namespace("c")
    cat.rollback_to(v1)
    with pytest.raises(CommitConflictError) as info:
        pending.commit()
    assert info.value.rule == "catalog-rollback"
    assert cat.latest().list_namespaces() == ["a"]


def test_precondition_reads_survive_resume_of_a_distributed_transaction(tmp_path) -> None:
    # The example with the pending side distributed and resumed before
    # it commits: its precondition reads come back from the state file.
    cat = olympia.create_catalog(str(tmp_path / "c"))
    with cat.transaction() as t:
        setup_catalog(t)
    first = cat.begin("serializable")
    second = cat.begin("serializable")
    second.describe_table("b", "z")
    second.create_table("empty", "t", "m/t")
    txn_id = second.distribute()
    upd("b", "z", "m/z1")(first)
    first.drop_namespace("empty")
    first.create_namespace("empty")
    committed_version = first.commit()
    resumed = cat.resume(txn_id)
    assert [a.SerializeToString() for a in resumed.actions] == [
        a.SerializeToString() for a in second.actions
    ]
    with pytest.raises(CommitConflictError) as info:
        resumed.commit()
    assert (info.value.rule, info.value.version) == ("serializable-cycle", committed_version)
    assert cat.latest().list_tables("empty") == []
    assert cat.list_transactions() == []


class _Counting(ConflictChecker):
    """The rules of spec §4, counting the versions each named check saw."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def catalog_rollback(self, committed: Footprint, isolation: str) -> None:
        self.calls.append(("catalog-rollback", committed.version))
        super().catalog_rollback(committed, isolation)

    def write_write(self, pending: Footprint, committed: Footprint, *args: Any) -> None:
        self.calls.append(("write-write", committed.version))
        super().write_write(pending, committed, *args)

    def serializable_cycle(self, pending: Footprint, latest: int, *args: Any) -> list[int]:
        self.calls.append(("serializable-cycle", latest))
        return super().serializable_cycle(pending, latest, *args)


class _PassEverything(ConflictChecker):
    """A deliberately broken rebase, as tests/history_worker.py injects it."""

    group_commit = False

    def check_window(self, *args: Any, **kwargs: Any) -> None:
        pass

    def serializable_cycle(self, *args: Any, **kwargs: Any) -> list[int]:
        return []


@pytest.mark.parametrize("isolation", ["snapshot", "serializable"])
def test_a_commit_runs_the_named_checks_of_its_checker(tmp_path, isolation: str) -> None:
    cat = olympia.create_catalog(str(tmp_path / "c"))
    with cat.transaction() as t:
        setup_catalog(t)
    pending = cat.begin(isolation)
    pending.describe_table("a", "y")
    upd("a", "x", "m/x2")(pending)
    with cat.transaction() as t:
        upd("a", "y", "m/y1")(t)
    checker = _Counting()
    pending.conflict_checker = checker
    version = pending.commit()
    expected = [("catalog-rollback", version - 1), ("write-write", version - 1)]
    if isolation == "serializable":  # it read what the concurrent version wrote
        expected.append(("serializable-cycle", version - 1))
    assert checker.calls == expected


def test_a_checker_that_passes_everything_lets_a_lost_update_through(tmp_path) -> None:
    """The negative control of tests/test_history.py, in miniature: the checker
    is injected into one transaction, the rules stay in force for others."""
    cat = olympia.create_catalog(str(tmp_path / "c"))
    with cat.transaction() as t:
        setup_catalog(t)
    broken, sound = cat.begin(), cat.begin()
    upd("a", "x", "m/x-broken")(broken)
    upd("a", "x", "m/x-sound")(sound)
    with cat.transaction() as t:
        upd("a", "x", "m/x1")(t)
    broken.conflict_checker = _PassEverything()
    broken.commit()  # overwrites m/x1 without having seen it
    assert cat.latest().describe_table("a", "x").metadata_location == "m/x-broken"
    with pytest.raises(CommitConflictError) as info:
        sound.commit()
    assert info.value.rule == "write-write"
