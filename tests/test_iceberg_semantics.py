"""Iceberg semantics in the PyIceberg plugin (spec/iceberg.md §5, §8):
table metadata reads are reads, a read-modify-write of a property is never
lost, plain appends never fail because of other appends, and every conflict
is a PyIceberg ``CommitFailedException`` with its rule and version."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path
from typing import Any

import pytest
from iceberg_helpers import ids_of, olympia_catalog, rows
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.schema import Schema
from pyiceberg.table.update import SetLocationUpdate
from pyiceberg.types import LongType, NestedField, StringType

from olympia.iceberg import CommitConflictException, OlympiaCatalog

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "v", StringType(), required=False),
)


@pytest.fixture
def cat(tmp_path: Path) -> OlympiaCatalog:
    catalog = olympia_catalog(f"file://{tmp_path}/lake")
    assert isinstance(catalog, OlympiaCatalog)
    catalog.create_namespace("n")
    table = catalog.create_table("n.t", SCHEMA)
    with table.transaction() as tx:
        tx.set_properties(counter="0")
    catalog.create_table("n.other", SCHEMA)
    return catalog


def increment(tx: Any) -> None:
    table = tx.load_table("n.t")
    value = int(table.properties["counter"])
    with table.transaction() as change:
        change.set_properties(counter=str(value + 1))


# --- metadata reads -----------------------------------------------------------


@pytest.mark.parametrize("isolation", ["snapshot", "serializable"])
def test_a_read_modify_write_of_a_property_is_never_lost(
    cat: OlympiaCatalog, isolation: str
) -> None:
    t1, t2 = cat.begin(isolation), cat.begin(isolation)
    increment(t1)
    increment(t2)
    won = t1.commit()
    with pytest.raises(CommitConflictException) as refused:
        t2.commit()
    assert (refused.value.rule, refused.value.version) == ("lost-update", won)
    assert "property 'counter'" in str(refused.value)
    assert isinstance(refused.value, CommitFailedException)
    # Retried, the increment lands on the committed value: two increments, 2.
    with cat.transaction(isolation) as t3:
        increment(t3)
    assert cat.load_table("n.t").properties["counter"] == "2"


def test_blind_property_writes_still_merge(cat: OlympiaCatalog) -> None:
    """Writing a property without reading it is not a read-modify-write."""
    t1, t2 = cat.begin("serializable"), cat.begin("serializable")
    for tx, key in ((t1, "a"), (t2, "b")):
        with tx.load_table("n.t").transaction() as change:
            change.set_properties(**{key: "1", "counter": key})
    t1.commit()
    t2.commit()
    properties = cat.load_table("n.t").properties
    assert (properties["a"], properties["b"], properties["counter"]) == ("1", "1", "b")


@pytest.mark.parametrize(
    ("read", "change", "what"),
    [
        (lambda t: t.schema(), "schema", "the schema"),
        (lambda t: t.properties.get("owner"), "property", "property 'owner'"),
        (lambda t: dict(t.properties), "property", "property 'owner'"),
        (lambda t: t.current_snapshot(), "append", "ref 'main'"),
        (lambda t: t.location(), "location", "the location"),
    ],
)
def test_serializable_refuses_what_it_read_and_a_concurrent_commit_changed(
    cat: OlympiaCatalog, tmp_path: Path, read: Any, change: str, what: str
) -> None:
    def concurrent(tag: str) -> None:
        table = cat.load_table("n.t")
        if change == "schema":
            with table.update_schema() as update:
                update.add_column(f"extra_{tag}", StringType())
        elif change == "property":
            with table.transaction() as tx:
                tx.set_properties(owner=tag)
        elif change == "append":
            table.append(rows([9]))
        else:  # PyIceberg 0.12 has no call for it; a REST client sends this update
            moved = SetLocationUpdate(location=f"file://{tmp_path}/lake/n.db/t-{tag}")
            cat.commit_table(table, (), (moved,))

    for isolation in ("serializable", "snapshot"):
        tx = cat.begin(isolation)
        read(tx.load_table("n.t"))
        tx.load_table("n.other").append(rows([1]))  # the write is elsewhere
        concurrent(isolation)
        if isolation == "snapshot":
            tx.commit()  # SNAPSHOT: what it read was its snapshot; no read-write rule
            continue
        with pytest.raises(CommitConflictException) as refused:
            tx.commit()
        assert refused.value.rule == "metadata-read-changed"
        assert refused.value.version == cat.olympia.version
        assert what in str(refused.value)


def test_appenders_that_read_properties_and_schema_both_commit(cat: OlympiaCatalog) -> None:
    t1, t2 = cat.begin("serializable"), cat.begin("serializable")
    for tx, value in ((t1, 1), (t2, 2)):
        table = tx.load_table("n.t")
        assert table.properties["counter"] == "0"
        assert [f.name for f in table.schema().fields] == ["id", "v"]
        table.append(rows([value]))
    t1.commit()
    t2.commit()
    assert ids_of(cat.load_table("n.t")) == [1, 2]


def test_metadata_reads_survive_resume(cat: OlympiaCatalog) -> None:
    tx = cat.begin("serializable")
    tx.load_table("n.t").properties.get("counter")
    tx.load_table("n.other").append(rows([1]))
    resumed = cat.resume(tx.distribute())
    with cat.load_table("n.t").transaction() as change:
        change.set_properties(counter="7")
    with pytest.raises(CommitConflictException) as refused:
        resumed.commit()
    assert refused.value.rule == "metadata-read-changed"


# --- plain appends under contention -------------------------------------------


def test_a_stale_plain_append_is_rebased_without_a_client_retry(cat: OlympiaCatalog) -> None:
    table = cat.load_table("n.t")
    with table.transaction() as tx:
        tx.set_properties(**{"commit.retry.num-retries": "0"})
    first, second = cat.load_table("n.t"), cat.load_table("n.t")
    first.append(rows([1]))
    second.append(rows([2]))  # its metadata predates the first append
    assert ids_of(cat.load_table("n.t")) == [1, 2]
    heads = [s.parent_snapshot_id for s in cat.load_table("n.t").snapshots()]
    assert heads[-1] == cat.load_table("n.t").snapshots()[-2].snapshot_id


def test_a_stale_commit_that_is_not_an_append_still_fails(cat: OlympiaCatalog) -> None:
    table = cat.load_table("n.t")
    with table.transaction() as tx:
        tx.set_properties(**{"commit.retry.num-retries": "0"})
    first, second = cat.load_table("n.t"), cat.load_table("n.t")
    with first.update_schema() as update:
        update.add_column("a", StringType())
    with pytest.raises(CommitFailedException, match="schema"), second.update_schema() as update:
        update.add_column("b", StringType())


def _append_for(warehouse: str, worker: int, seconds: float, out: Any) -> None:
    catalog = olympia_catalog(warehouse)
    done = failed = 0
    errors: list[str] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            catalog.load_table("n.t").append(rows([worker]))
            done += 1
        except Exception as exc:  # counted, and reported below
            failed += 1
            errors.append(f"{type(exc).__name__}: {exc}")
    out.put((worker, done, failed, errors[:3]))


def test_plain_appends_from_four_processes_never_fail(cat: OlympiaCatalog, tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    warehouse = f"file://{tmp_path}/lake"
    workers = [context.Process(target=_append_for, args=(warehouse, i, 6.0, out)) for i in range(4)]
    for w in workers:
        w.start()
    results = [out.get(timeout=120) for _ in workers]
    for w in workers:
        w.join(timeout=60)
    failures = [r for r in results if r[2]]
    assert not failures, failures
    assert all(r[1] > 0 for r in results), results  # nobody starved
    counts = {r[0]: r[1] for r in results}
    got = ids_of(cat.load_table("n.t"))
    assert {i: got.count(i) for i in counts} == counts  # nothing lost, nothing doubled


# --- one error family ---------------------------------------------------------


def test_a_second_resumer_gets_commit_failed_exception(cat: OlympiaCatalog) -> None:
    tx = cat.begin()
    txn_id = tx.distribute()
    first, second = cat.resume(txn_id), cat.resume(txn_id)
    first.load_table("n.t").append(rows([1]))
    with pytest.raises(CommitConflictException) as refused:
        second.load_table("n.t").append(rows([2]))
    assert isinstance(refused.value, CommitFailedException)
    assert refused.value.rule == "transaction-advanced"
    first.commit()
    assert ids_of(cat.load_table("n.t")) == [1]
