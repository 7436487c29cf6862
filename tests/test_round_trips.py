"""Sequential S3 round trips of the public API, counted against moto over HTTP.

Budgets (spec/format.md §2.2-2.3, §3.6 and §8, spec/transactions.md §3):
``begin`` and ``catalog.version`` 1 when the process has seen the catalog
before (the roots from the last version seen; no floor read in a format-2
catalog); ``load_catalog`` 2; a one-object commit 1 (the root PUT, carrying
the new nodes inline; issue 7's budget is 2); a commit that lost one race 1
more (the winner's root, which carries the nodes it changed, is read along
with the lost put; then the new root); listing 10,000 tables 2 (issue 24).
Each test also checks what the call returned,
so that a cheaper but wrong answer fails.
"""

from __future__ import annotations

import time

import pytest
from conftest import StorageLocation
from s3_requests import S3RequestLog, record_s3_requests

import olympia
from olympia import store as store_module

BEGIN_ROUNDS = 1
LOAD_ROUNDS = 2
COMMIT_ROUNDS = 1
LOST_RACE_EXTRA_ROUNDS = 1
LIST_10K_ROUNDS = 2


def _catalog_with_table(location: StorageLocation) -> olympia.Catalog:
    uri, options = location
    cat = olympia.create_catalog(uri, options)
    with cat.begin() as txn:
        txn.create_namespace("ns")
        txn.create_table("ns", "t", "s3://data/t/v0.json")
    return cat


def _update(cat: olympia.Catalog, location: str) -> int:
    txn = cat.begin()
    txn.update_table("ns", "t", metadata_location=location)
    return txn.commit()


def _two_versions_then_a_begin_in_one_round(
    cat: olympia.Catalog, other: olympia.Catalog, log: S3RequestLog
) -> None:
    """``other`` commits versions 2 and 3; ``cat`` then begins at 3 in one round."""
    assert _update(other, "s3://data/t/v1.json") == 2
    assert _update(other, "s3://data/t/v2.json") == 3
    txn, m = log.measure(cat.begin)
    assert txn.begin_version == 3
    assert txn.describe_table("ns", "t").metadata_location == "s3://data/t/v2.json"
    assert m.rounds <= BEGIN_ROUNDS, m.operations()
    txn.rollback()


def test_begin_and_version_take_one_round_once_the_catalog_was_seen(
    s3_location: StorageLocation,
) -> None:
    cat = _catalog_with_table(s3_location)
    other = olympia.load_catalog(*s3_location)
    with record_s3_requests() as log:
        # nothing new since this process last saw the catalog
        version, m = log.measure(lambda: cat.version)
        assert version == 1
        assert m.rounds <= BEGIN_ROUNDS, m.operations()
        # another process committed two versions meanwhile
        _two_versions_then_a_begin_in_one_round(cat, other, log)
        version, m = log.measure(lambda: cat.version)
        assert version == 3
        assert m.rounds <= BEGIN_ROUNDS, m.operations()
    other.close()
    cat.close()


def test_load_catalog_takes_two_rounds(s3_location: StorageLocation) -> None:
    cat = _catalog_with_table(s3_location)
    _update(cat, "s3://data/t/v1.json")
    with record_s3_requests() as log:
        loaded, m = log.measure(lambda: olympia.load_catalog(*s3_location))
        assert m.rounds <= LOAD_ROUNDS, m.operations()
    assert loaded.version == 2
    loaded.close()
    cat.close()


def test_commit_takes_one_round_and_writes_the_hint_in_the_background(
    s3_location: StorageLocation,
) -> None:
    cat = _catalog_with_table(s3_location)
    with record_s3_requests() as log:
        txn = cat.begin()
        txn.update_table("ns", "t", metadata_location="s3://data/t/v1.json")
        txn.create_table("ns", "u", "s3://data/u/v0.json")
        version, m = log.measure(txn.commit)
    assert version == 2
    assert m.rounds <= COMMIT_ROUNDS, m.operations()
    # no existence check of the root before its conditional PUT, and no read
    # after it: node PUTs, then the root PUT, with a GET of the same root
    # sent along (what a loser builds on next, spec/format.md §8 step 3)
    assert not any(r.operation == "HeadObject" for r in m.waited), m.operations()
    puts = [r for r in m.waited if r.operation == "PutObject"]
    gets = [r for r in m.waited if r.operation == "GetObject"]
    assert "/vn/" in puts[-1].key, m.operations()
    assert [r.key for r in gets] == [puts[-1].key], m.operations()
    assert not any(r.key.endswith("vn/oldest") for r in m.waited), m.operations()
    assert [r.operation for r in m.background] == ["PutObject"]  # vn/latest
    assert {t for t in cat.latest().list_tables("ns")} == {"t", "u"}
    cat.close()


def test_a_lost_race_costs_at_most_one_more_round(s3_location: StorageLocation) -> None:
    cat = _catalog_with_table(s3_location)
    other = olympia.load_catalog(*s3_location)
    with record_s3_requests() as log:
        other_txn = other.begin()
        other_txn.create_table("ns", "o", "s3://data/o/v0.json")
        txn = cat.begin()
        txn.update_table("ns", "t", metadata_location="s3://data/t/mine.json")
        assert other_txn.commit() == 2
        version, m = log.measure(txn.commit)
        assert version == 3
        assert m.rounds <= COMMIT_ROUNDS + LOST_RACE_EXTRA_ROUNDS, m.operations()
    latest = cat.latest()
    assert latest.describe_table("ns", "t").metadata_location == "s3://data/t/mine.json"
    assert set(latest.list_tables("ns")) == {"t", "o"}
    other.close()
    cat.close()


def test_listing_ten_thousand_tables_takes_two_rounds(s3_location: StorageLocation) -> None:
    uri, options = s3_location
    cat = olympia.create_catalog(uri, options)
    names = [f"table{i:05d}" for i in range(10_000)]
    with cat.begin() as txn:
        txn.create_namespace("ns")
        for name in names:
            txn.create_table("ns", name, f"s3://data/{name}/v0.json")
    cat.close()
    cat = olympia.load_catalog(uri, options)  # nothing but the root is cached
    with record_s3_requests() as log:
        view = cat.latest()
        listed, m = log.measure(lambda: view.list_tables("ns"))
    assert sorted(listed) == names
    assert m.rounds <= LIST_10K_ROUNDS, m.operations()
    cat.close()


def test_probing_from_a_version_that_expiration_removed_finds_the_latest(
    s3_location: StorageLocation,
) -> None:
    cat = _catalog_with_table(s3_location)
    assert cat.version == 1  # this process has seen version 1
    other = olympia.load_catalog(*s3_location)
    for i in range(2, 9):
        assert _update(other, f"s3://data/t/v{i}.json") == i
    other.expire_versions(keep_last=2, grace_seconds=0, allow_short_grace=True)
    assert other.oldest_version == 7
    # roots 1..6 are gone: the probe from version 1 must not answer 1 or stop
    # at a gap, but find version 8
    assert cat.version == 8
    txn = cat.begin()
    assert txn.begin_version == 8
    assert txn.describe_table("ns", "t").metadata_location == "s3://data/t/v8.json"
    txn.rollback()
    other.close()
    cat.close()


def test_commit_and_lost_race_on_a_deep_tree(s3_location: StorageLocation) -> None:
    """A tree of height 4: the new path below the root travels inside the
    root, and the winner's root brings the nodes it changed."""
    uri, options = s3_location
    cat = olympia.create_catalog(uri, options, node_order=8)
    names = [f"t{i:04d}" for i in range(1500)]
    with cat.begin() as txn:
        txn.create_namespace("ns")
        for name in names:
            txn.create_table("ns", name, f"s3://data/{name}/v0.json")
    assert cat.store.load_root(cat.version).node.height >= 3
    other = olympia.load_catalog(uri, options)
    with record_s3_requests() as log:
        # the other writer begins at version 1 and updates a neighbour in the same leaf
        other_txn = other.begin()
        other_txn.update_table("ns", "t0701", metadata_location="s3://data/t0701/v1.json")
        txn = cat.begin()
        txn.update_table("ns", "t0700", metadata_location="s3://data/t0700/v1.json")
        version, m = log.measure(txn.commit)
        assert version == 2
        assert m.rounds <= COMMIT_ROUNDS, m.operations()
        assert sorted(r.operation for r in m.waited) == ["GetObject", "PutObject"], m.operations()
        version, m = log.measure(other_txn.commit)
        assert version == 3
        root_puts = (r for r in m.waited if "/vn/" in r.key and r.operation == "PutObject")
        assert next(root_puts).status == 412  # lost version 2
        assert m.rounds <= COMMIT_ROUNDS + LOST_RACE_EXTRA_ROUNDS, m.operations()
    latest = olympia.load_catalog(uri, options).latest()
    assert latest.describe_table("ns", "t0700").metadata_location == "s3://data/t0700/v1.json"
    assert latest.describe_table("ns", "t0701").metadata_location == "s3://data/t0701/v1.json"
    assert latest.describe_table("ns", "t0702").metadata_location == "s3://data/t0702/v0.json"
    other.close()
    cat.close()


def _begin_version(cat: olympia.Catalog) -> int:
    txn = cat.begin()
    try:
        return txn.begin_version
    finally:
        txn.rollback()


class _Clock:
    """``time`` for olympia.store: the wall clock, and a monotonic clock that
    moves only when the test says (the pace of new versions, which sizes a
    probe, spec/format.md §2.2, is then the test's and not the machine's)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    fake = _Clock()
    monkeypatch.setattr(store_module, "time", fake)
    return fake


def test_a_probe_on_a_quiet_catalog_reads_few_roots_that_do_not_exist(
    s3_location: StorageLocation, clock: _Clock
) -> None:
    """Each root a probe asks for is a request (spec/format.md §2.2): once a
    reader's probes found nothing new, the next asks for the start and three
    roots above it, not five, and still finds up to two new versions in one
    round."""
    cat = _catalog_with_table(s3_location)
    other = olympia.load_catalog(*s3_location)
    clock.now += 60  # a minute since the catalog's two versions
    with record_s3_requests() as log:
        for _ in range(3):  # probes that find nothing new narrow the next one
            assert cat.version == 1
            clock.now += 0.1
        version, m = log.measure(lambda: cat.version)
        assert version == 1
        roots = [r for r in m.waited if "/vn/" in r.key and not r.key.endswith("/vn/latest")]
        assert len(roots) == 4, m.operations()
        assert sum(r.status == 404 for r in roots) == 3, m.operations()
        _two_versions_then_a_begin_in_one_round(cat, other, log)
    other.close()
    cat.close()


def test_a_reader_that_finds_many_new_versions_each_time_probes_in_one_round(
    s3_location: StorageLocation, clock: _Clock
) -> None:
    """A reader among busy writers: its probe widens to what its probes found,
    so that ten new versions are read in one round rather than two; and a
    probe of several rounds asks for no root twice."""
    cat = _catalog_with_table(s3_location)
    other = olympia.load_catalog(*s3_location)
    expected = 1
    with record_s3_requests() as log:
        for turn in range(4):
            for _ in range(10):  # ten versions a second
                clock.now += 0.1
                expected += 1
                assert _update(other, f"s3://data/t/v{expected}.json") == expected
            version, m = log.measure(lambda: _begin_version(cat))
            assert version == expected
            keys = [r.key for r in m.waited]
            assert len(keys) == len(set(keys)), m.operations()
            if turn >= 2:
                assert m.rounds == 1, m.operations()
    assert cat.latest().describe_table("ns", "t").metadata_location == (
        f"s3://data/t/v{expected}.json"
    )
    other.close()
    cat.close()


def test_a_probe_after_a_lost_race_asks_for_no_root_twice(s3_location: StorageLocation) -> None:
    """Below the public API: the base after losing the race for a version
    (``load_after_lost_race``, what a writer that waited for its host's
    publish lock also runs) when more versions followed than its first round
    covers. The next round goes on from the last root read, which is not
    asked for again, nor are the roots below it."""
    cat = _catalog_with_table(s3_location)
    other = olympia.load_catalog(*s3_location)
    for i in range(2, 12):
        assert _update(other, f"s3://data/t/v{i}.json") == i
    store = cat.store
    assert store.load_root(2).version == 2  # the winner's root, held by the loser
    with record_s3_requests() as log:
        root, m = log.measure(lambda: store.load_after_lost_race(2))
    assert root.version == 11
    keys = [r.key for r in m.waited]
    assert len(keys) == len(set(keys)), m.operations()
    assert not any(r.key.endswith("/vn/oldest") for r in m.waited), m.operations()
    view = cat.latest()
    assert view.version == 11
    assert view.describe_table("ns", "t").metadata_location == "s3://data/t/v11.json"
    other.close()
    cat.close()
