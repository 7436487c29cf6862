"""The PyIceberg Catalog contract where catalogs race or callers pass odd
arguments: what PyIceberg's SqlCatalog does, or its documented contract
(spec/iceberg.md §3, §4).

Several catalog objects on one warehouse stand for several processes: a
create, drop or rename that loses to a concurrent commit is run again on
the newest version, so its caller gets the error the contract names
(``TableAlreadyExistsError``, ``NoSuchTableError``), not a
``CommitFailedException``.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from iceberg_helpers import olympia_catalog, rows
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import (
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType
from pyiceberg.view.metadata import SQLViewRepresentation, ViewVersion

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "v", StringType(), required=False),
)


def race(cats: list[Catalog], call: Callable[[Catalog], object]) -> Counter[str]:
    """``call`` on every catalog at once (threads released together): how
    many returned ("ok") and how many raised each exception type."""
    barrier = threading.Barrier(len(cats))
    out: Counter[str] = Counter()
    lock = threading.Lock()

    def go(cat: Catalog) -> None:
        barrier.wait()
        try:
            call(cat)
            outcome = "ok"
        except Exception as exc:
            outcome = type(exc).__name__
        with lock:
            out[outcome] += 1

    threads = [threading.Thread(target=go, args=(c,)) for c in cats]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


@pytest.fixture
def cats(tmp_path: Path) -> list[Catalog]:
    """Four catalog objects on one warehouse, with namespace ``db``."""
    out = [olympia_catalog(f"file://{tmp_path}/lake") for _ in range(4)]
    out[0].create_namespace("db")
    return out


def test_racing_creates_lose_with_already_exists(cats: list[Catalog]) -> None:
    for i in range(4):
        got = race(cats, lambda c, i=i: c.create_table(f"db.t{i}", SCHEMA))
        assert got == {"ok": 1, "TableAlreadyExistsError": 3}, got
        got = race(cats, lambda c, i=i: c.create_table_if_not_exists(f"db.u{i}", SCHEMA))
        assert got == {"ok": 4}, got
        got = race(cats, lambda c, i=i: c.create_namespace(f"n{i}"))
        assert got == {"ok": 1, "NamespaceAlreadyExistsError": 3}, got
        got = race(cats, lambda c, i=i: c.create_namespace_if_not_exists(f"m{i}"))
        assert got == {"ok": 4}, got
    assert sorted(t[-1] for t in cats[1].list_tables("db")) == sorted(
        [f"t{i}" for i in range(4)] + [f"u{i}" for i in range(4)]
    )
    with pytest.raises(NamespaceAlreadyExistsError):
        cats[2].create_namespace("n0")


def test_racing_drops_and_renames_lose_with_no_such_table(cats: list[Catalog]) -> None:
    for i in range(3):
        cats[0].create_table(f"db.d{i}", SCHEMA)
        got = race(cats, lambda c, i=i: c.drop_table(f"db.d{i}"))
        assert got == {"ok": 1, "NoSuchTableError": 3}, got
        cats[0].create_table(f"db.r{i}", SCHEMA)
        got = race(cats, lambda c, i=i: c.rename_table(f"db.r{i}", f"db.r{i}_{id(c)}"))
        assert got == {"ok": 1, "NoSuchTableError": 3}, got
    assert len(cats[3].list_tables("db")) == 3  # the three renamed tables


def raced_once(
    monkeypatch: pytest.MonkeyPatch, cat: Catalog, meanwhile: Callable[[], object]
) -> None:
    """Make ``cat``'s next operation lose a race: right after its transaction
    begins, ``meanwhile`` commits through another catalog object."""
    begin = cat.begin  # type: ignore[attr-defined]
    raced: list[bool] = []

    def begin_then_race(*args: Any, **kwargs: Any) -> Any:
        tx = begin(*args, **kwargs)
        if not raced:
            raced.append(True)
            meanwhile()
        return tx

    monkeypatch.setattr(cat, "begin", begin_then_race)


def test_a_drop_that_loses_to_an_append_drops_the_table(
    cats: list[Catalog], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both write the table's object; the drop is run again on the newest
    version and drops the table, as SqlCatalog's DELETE of the row would."""
    cats[0].create_table("db.busy", SCHEMA)
    raced_once(monkeypatch, cats[2], lambda: cats[1].load_table("db.busy").append(rows([1])))
    cats[2].drop_table("db.busy")
    assert not cats[3].table_exists("db.busy")


def test_a_create_that_loses_to_the_same_create_gets_already_exists(
    cats: list[Catalog], monkeypatch: pytest.MonkeyPatch
) -> None:
    raced_once(monkeypatch, cats[2], lambda: cats[1].create_table("db.same", SCHEMA))
    with pytest.raises(TableAlreadyExistsError):
        cats[2].create_table("db.same", SCHEMA)
    raced_once(monkeypatch, cats[2], lambda: cats[1].create_table("db.again", SCHEMA))
    assert cats[2].create_table_if_not_exists("db.again", SCHEMA).name() == ("db", "again")
    raced_once(monkeypatch, cats[2], lambda: cats[1].drop_table("db.same"))
    with pytest.raises(NoSuchTableError):
        cats[2].rename_table("db.same", "db.moved")
    assert not cats[0].table_exists("db.moved") and cats[0].table_exists("db.again")


def test_none_properties_mean_none(cats: list[Catalog]) -> None:
    cat = cats[0]
    cat.create_namespace("nn", None)  # type: ignore[arg-type]
    assert cat.load_namespace_properties("nn") == {"exists": "true"}
    summary = cat.update_namespace_properties("nn", updates=None)  # type: ignore[arg-type]
    assert (summary.removed, summary.updated, summary.missing) == ([], [], [])


def test_an_implicit_namespace_takes_properties(cats: list[Catalog]) -> None:
    """``a.b`` exists as the parent of ``a.b.c`` (as in SqlCatalog): setting
    a property on it makes it a namespace of its own."""
    cat = cats[0]
    cat.create_namespace(("a", "b", "c"))
    assert cat.namespace_exists(("a", "b")) and cat.load_namespace_properties(("a", "b")) == {}
    summary = cat.update_namespace_properties(("a", "b"), removals={"gone"}, updates={"o": "x"})
    assert summary.updated == ["o"] and summary.missing == ["gone"]
    assert cats[1].load_namespace_properties(("a", "b")) == {"o": "x"}
    # Only removals: nothing to store, the namespace stays implicit.
    cat.create_namespace(("p", "q"))
    summary = cat.update_namespace_properties("p", removals={"k"})
    assert summary.missing == ["k"]
    assert cat.load_namespace_properties("p") == {}
    assert [n for n in cat.list_namespaces() if n == ("p",)] == [("p",)]


def test_creating_an_implicit_namespace_says_it_exists(cats: list[Catalog]) -> None:
    """``a`` exists once ``a.b`` does (namespace_exists says so, as in
    SqlCatalog): creating it is NamespaceAlreadyExistsError, as SqlCatalog
    raises, and create_namespace_if_not_exists changes nothing."""
    cat = cats[0]
    cat.create_namespace(("a", "b"))
    with pytest.raises(NamespaceAlreadyExistsError, match="Namespace a already exists"):
        cat.create_namespace("a", {"owner": "x"})
    cat.create_namespace_if_not_exists("a", {"owner": "x"})
    assert cat.load_namespace_properties("a") == {}
    assert cat.list_namespaces(("a",)) == [("a", "b")]


def test_a_view_of_a_pyarrow_schema_gets_field_ids(cats: list[Catalog]) -> None:
    """A pyarrow schema converts to fields of id -1: the view was stored with
    every field id -1 (invalid metadata); ids 1..n are assigned, as
    PyIceberg's REST client assigns them. Valid ids a caller gives are kept."""
    import pyarrow as pa

    cat = cats[0]
    version = view_version()
    arrow = pa.schema([("id", pa.int64()), ("tags", pa.list_(pa.string())), ("s", pa.string())])
    cat.create_view("db.v", arrow, version)  # type: ignore[attr-defined]
    for c in cats[:2]:
        fields = c.load_view("db.v").metadata.schemas[0].fields  # type: ignore[attr-defined]
        assert [(f.field_id, f.name) for f in fields] == [(1, "id"), (2, "tags"), (3, "s")]
        assert fields[1].field_type.element_id == 4
    given = Schema(NestedField(10, "a", LongType()), NestedField(20, "b", StringType()))
    cat.create_view("db.w", given, version)  # type: ignore[attr-defined]
    fields = cats[1].load_view("db.w").metadata.schemas[0].fields  # type: ignore[attr-defined]
    assert [f.field_id for f in fields] == [10, 20]


def test_dropping_a_parent_namespace_says_it_is_not_empty(cats: list[Catalog]) -> None:
    cat = cats[0]
    cat.create_namespace("parent")
    cat.create_namespace(("parent", "child"))
    cat.create_namespace(("implicit", "child"))
    for ns in ("parent", "implicit"):
        with pytest.raises(NamespaceNotEmptyError, match=f"^Namespace {ns} is not empty: "):
            cat.drop_namespace(ns)


def view_version() -> ViewVersion:
    return ViewVersion(
        version_id=1,
        schema_id=0,
        timestamp_ms=1,
        summary={},
        representations=[SQLViewRepresentation(type="sql", sql="SELECT 1", dialect="spark")],
        default_namespace=["db"],
    )


def test_create_table_if_not_exists_on_a_views_name_says_a_view_has_it(
    cats: list[Catalog],
) -> None:
    cat: Any = cats[0]
    cat.create_view("db.v", SCHEMA, view_version())
    for create in (cat.create_table, cat.create_table_if_not_exists):
        with pytest.raises(TableAlreadyExistsError, match="View with same name already exists"):
            create("db.v", SCHEMA)
    with (
        cat.transaction() as tx,
        pytest.raises(TableAlreadyExistsError, match="View with same name"),
    ):
        tx.create_table_if_not_exists("db.v", SCHEMA)
    assert cat.view_exists("db.v") and not cat.table_exists("db.v")


@pytest.mark.parametrize("bad", [None, "SELECT 1", {"version-id": 1}])
def test_create_view_names_a_view_version_of_the_wrong_type(cats: list[Catalog], bad: Any) -> None:
    cat: Any = cats[0]
    with pytest.raises(
        ValueError, match="view_version must be a pyiceberg.view.metadata.ViewVersion"
    ):
        cat.create_view("db.w", SCHEMA, bad)
    assert not cat.view_exists("db.w")
