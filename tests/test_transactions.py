"""The transaction API: reads, writes, errors, commit and rollback, on every backend."""

from __future__ import annotations

import pytest

import olympia
from olympia.errors import (
    InvalidNameError,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NamespaceNotFoundError,
    OlympiaError,
    ReadOnlyError,
    TableAlreadyExistsError,
    TableNotFoundError,
    TransactionClosedError,
    ViewAlreadyExistsError,
    ViewNotFoundError,
)
from olympia.proto import actions_pb2 as apb

A = apb.ActionType


@pytest.fixture
def cat(any_storage_location):
    uri, opts = any_storage_location
    return olympia.create_catalog(uri, opts, node_order=4)


def test_context_manager_commits_everything_at_once(cat):
    with cat.transaction() as txn:
        txn.create_namespace("sales", {"owner": "ops"})
        txn.create_table("sales", "orders", metadata_location="s3://b/orders/v1.metadata.json")
        txn.create_table("sales", "items", "s3://b/items/v1.metadata.json", {"k": "v"})
        assert txn.list_tables("sales") == ["items", "orders"]  # own writes are visible
        assert cat.version == 0  # nobody else sees them yet
    assert cat.version == 1
    view = cat.latest()
    ns = view.describe_namespace("sales")
    assert (ns.name, ns.properties) == ("sales", {"owner": "ops"})
    table = view.describe_table("sales", "items")
    assert (table.namespace, table.name, table.metadata_location, table.properties) == (
        "sales",
        "items",
        "s3://b/items/v1.metadata.json",
        {"k": "v"},
    )
    # Each create_table also records its view-name check (AAAD); the namespace
    # check is left out because the transaction created the namespace itself,
    # and so is list_tables' (spec/transactions.md §1).
    assert [a.object_key[:4] for a in cat.history()[-1].actions] == [
        "AAAB",
        "AAAD",
        "AAAC",
        "AAAD",
        "AAAC",
        "AAAC",
    ]


def test_exception_rolls_back(cat):
    with pytest.raises(RuntimeError, match="boom"), cat.transaction() as txn:
        txn.create_namespace("sales")
        raise RuntimeError("boom")
    assert txn.status == "rolled_back"
    assert cat.version == 0
    assert cat.latest().list_namespaces() == []


def test_reads_see_the_begin_snapshot(cat):
    with cat.transaction() as t:
        t.create_namespace("a")
    reader = cat.begin()
    with cat.transaction() as t:
        t.create_table("a", "late", "m")
        t.alter_namespace("a", set={"x": "1"})
    assert reader.list_tables("a") == []
    assert reader.describe_namespace("a").properties == {}
    assert not reader.table_exists("a", "late")
    assert cat.latest().list_tables("a") == ["late"]


def test_namespace_lifecycle(cat):
    txn = cat.begin()
    txn.create_namespace("n", {"a": "1", "b": "2"})
    with pytest.raises(NamespaceAlreadyExistsError, match="'n' already exists"):
        txn.create_namespace("n")
    txn.alter_namespace("n", set={"c": "3"}, unset=["a", "missing"])
    assert txn.describe_namespace("n").properties == {"b": "2", "c": "3"}
    assert txn.namespace_exists("n") and not txn.namespace_exists("m")
    txn.create_table("n", "t", "m")
    with pytest.raises(NamespaceNotEmptyError, match="'n' is not empty"):
        txn.drop_namespace("n")
    txn.drop_table("n", "t")
    txn.drop_namespace("n")
    assert txn.list_namespaces() == []
    with pytest.raises(NamespaceNotFoundError, match="'n' does not exist"):
        txn.describe_namespace("n")
    with pytest.raises(NamespaceNotFoundError):
        txn.alter_namespace("n", set={"x": "y"})
    with pytest.raises(OlympiaError, match="both set and unset"):
        txn.alter_namespace("n", set={"x": "y"}, unset=["x"])
    txn.commit()


def test_table_lifecycle(cat):
    with cat.transaction() as t:
        t.create_namespace("a")
        t.create_namespace("b")
        t.create_table("a", "t", "m/1", {"p": "1"})
    with cat.transaction() as t:
        with pytest.raises(TableAlreadyExistsError, match="a.t already exists"):
            t.create_table("a", "t", "m/x")
        with pytest.raises(NamespaceNotFoundError, match="'zz'"):
            t.create_table("zz", "t", "m/x")
        t.update_table("a", "t", metadata_location="m/2")
        assert t.describe_table("a", "t").properties == {"p": "1"}  # unchanged unless given
        t.update_table("a", "t", properties={"q": "2"})
        t.rename_table("a", "t", "b", "u")
        assert not t.table_exists("a", "t")
        with pytest.raises(TableNotFoundError, match="a.t does not exist"):
            t.update_table("a", "t", metadata_location="m/3")
    view = cat.latest()
    moved = view.describe_table("b", "u")
    assert (moved.namespace, moved.name, moved.metadata_location, moved.properties) == (
        "b",
        "u",
        "m/2",
        {"q": "2"},
    )
    assert view.list_tables("a") == []
    with cat.transaction() as t:
        t.drop_table("b", "u")
        with pytest.raises(TableNotFoundError):
            t.drop_table("b", "u")
    assert cat.latest().list_tables("b") == []


def test_views(cat):
    with cat.transaction() as t:
        t.create_namespace("a")
        t.create_table("a", "t", "m")
        t.create_view(
            "a", "v", sql_text="select * from a.t", dialect="spark", schema_json='{"type":"struct"}'
        )
        t.create_view("a", "w", substrait_plan=b"\x01\x02")
        with pytest.raises(ViewAlreadyExistsError, match="a.v already exists"):
            t.create_view("a", "v", sql_text="select 1")
        with pytest.raises(TableAlreadyExistsError, match="view named a.v"):
            t.create_table("a", "v", "m")
        with pytest.raises(ViewAlreadyExistsError, match="table named a.t"):
            t.create_view("a", "t", sql_text="select 1")
        with pytest.raises(OlympiaError, match="exactly one of sql_text and substrait_plan"):
            t.create_view("a", "x")
    view = cat.latest()
    assert view.list_views("a") == ["v", "w"]
    assert view.list_tables("a") == ["t"]
    v = view.describe_view("a", "v")
    assert (v.sql_text, v.dialect, v.schema_json) == (
        "select * from a.t",
        "spark",
        '{"type":"struct"}',
    )
    assert view.describe_view("a", "w").substrait_plan == b"\x01\x02"
    with cat.transaction() as t:
        t.replace_view("a", "v", sql_text="select 2", properties={"x": "y"})
        t.drop_view("a", "w")
        with pytest.raises(ViewNotFoundError):
            t.replace_view("a", "w", sql_text="select 3")
    assert cat.latest().describe_view("a", "v").sql_text == "select 2"
    assert cat.latest().list_views("a") == ["v"]


@pytest.mark.parametrize(
    "name", ["", "a b", "a/../b", "a\\b", "..", "x..y", "tab\there", "ctl\x07", "x" * 200]
)
def test_bad_names_are_refused_before_anything_is_written(cat, name):
    txn = cat.begin()
    with pytest.raises(InvalidNameError):
        txn.create_namespace(name)
    with pytest.raises(InvalidNameError):
        txn.create_table("ok" if name else "", name or "t", "m")
    assert txn.actions == []
    assert txn.commit() == 0
    assert cat.version == 0


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda t: t.create_table("a", "t", ""), "metadata_location"),
        (lambda t: t.create_table("a", "t", None), "metadata_location"),
        (lambda t: t.create_namespace("b", {"k": 1}), "properties must map strings"),
        (lambda t: t.create_namespace("b", ["k"]), "properties must map strings"),
        (lambda t: t.alter_namespace("a", unset=[1]), "unset"),
    ],
)
def test_bad_values_get_clear_errors(cat, call, message):
    with cat.transaction() as t:
        t.create_namespace("a")
    txn = cat.begin()
    with pytest.raises(OlympiaError, match=message):
        call(txn)
    assert txn.commit() == 1  # the bad call left nothing behind
    assert cat.latest().list_namespaces() == ["a"]


def test_closed_transactions_refuse_use(cat):
    txn = cat.begin()
    txn.create_namespace("a")
    assert txn.commit() == 1
    for call in (
        lambda: txn.create_namespace("b"),
        lambda: txn.list_namespaces(),
        txn.commit,
        txn.rollback,
    ):
        with pytest.raises(TransactionClosedError, match="committed"):
            call()
    other = cat.begin()
    other.rollback()
    with pytest.raises(TransactionClosedError, match="rolled back"):
        other.namespace_exists("a")


def test_failed_precondition_is_recorded_as_a_read(cat):
    txn = cat.begin("serializable")
    with pytest.raises(NamespaceNotFoundError):
        txn.create_table("nope", "t", "m")
    [action] = txn.actions
    assert action.read_only and not action.found
    assert action.object_key == cat.latest().keys.namespace("nope")
    assert txn.commit() == 1  # SERIALIZABLE records what it observed


def test_every_precondition_a_write_evaluates_is_recorded(cat):
    with cat.transaction() as t:
        t.create_namespace("a")
        t.create_namespace("b")
        t.create_table("a", "x", "m")
        t.create_table("b", "z", "m")
        t.create_namespace("e")
    keys = cat.latest().keys
    txn = cat.begin("serializable")
    # A failed write records the checks that passed before the failing one.
    with pytest.raises(olympia.TableAlreadyExistsError):
        txn.rename_table("a", "x", "b", "z")
    assert [(a.type, a.object_key, a.found) for a in txn.actions] == [
        (A.TABLE_EXISTS, keys.table("a", "x"), True),
        (A.NAMESPACE_EXISTS, keys.namespace("b"), True),
        (A.TABLE_EXISTS, keys.table("b", "z"), True),
    ]
    with pytest.raises(olympia.NamespaceNotEmptyError):
        txn.drop_namespace("a")
    assert [(a.type, a.object_key, a.found) for a in txn.actions[3:]] == [
        (A.NAMESPACE_EXISTS, keys.namespace("a"), True),
        (A.TABLES_LIST, keys.tables_prefix("a"), True),
    ]
    # A successful one records its checks before the write; a check of a key
    # the write itself changes, or one already recorded, is left out.
    txn.drop_namespace("e")
    txn.create_table("b", "y", "m")
    txn.update_table("b", "y", "m2")
    assert [(a.type, a.object_key, a.found) for a in txn.actions[5:]] == [
        (A.TABLES_LIST, keys.tables_prefix("e"), False),
        (A.VIEWS_LIST, keys.views_prefix("e"), False),
        (A.NAMESPACE_DROP, keys.namespace("e"), False),
        (A.VIEW_EXISTS, keys.view("b", "y"), False),
        (A.TABLE_CREATE, keys.table("b", "y"), False),
        (A.TABLE_UPDATE, keys.table("b", "y"), False),
    ]
    version = txn.commit()
    [entry] = [h for h in cat.history() if h.version == version]
    assert [(a.type, a.object_key) for a in entry.actions] == [
        (a.type, a.object_key) for a in txn.actions
    ]


def test_read_only_transactions(cat):
    with cat.transaction() as t:
        t.create_namespace("a")
    snap = cat.begin("snapshot")
    assert snap.list_namespaces() == ["a"]
    assert snap.commit() == 1 and cat.version == 1  # nothing published
    ser = cat.begin("serializable")
    assert ser.namespace_exists("a")
    assert ser.commit() == 2  # its reads are published for later conflict checks
    [record] = [h for h in cat.history() if h.version == 2]
    assert [a.read_only for a in record.actions] == [True]


def test_read_only_views_refuse_writes(cat):
    with pytest.raises(ReadOnlyError, match="read-only"):
        cat.latest().create_namespace("a")


def test_unknown_isolation_is_refused(cat):
    with pytest.raises(OlympiaError, match="isolation"):
        cat.begin("read committed")


def test_many_objects_in_one_transaction(cat):
    with cat.transaction() as t:
        for n in range(5):
            t.create_namespace(f"ns{n}")
            for i in range(40):
                t.create_table(f"ns{n}", f"t{i:03d}", f"m/{n}/{i}")
    view = cat.latest()
    assert view.list_namespaces() == [f"ns{n}" for n in range(5)]
    assert view.list_tables("ns3") == [f"t{i:03d}" for i in range(40)]
    root = cat.store.load_root(cat.version)
    assert cat.store.check_tree(root) == 5 + 200
