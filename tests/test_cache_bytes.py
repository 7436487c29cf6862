"""The caches of an open catalog are bounded by memory, not by entry count
(``cache_bytes`` of load_catalog / create_catalog): nodes holding big values
cannot make a process grow without bound, and a catalog that caches nothing
still reads, commits, rebases and travels in time correctly."""

from __future__ import annotations

import multiprocessing
import time
import tracemalloc
from typing import Any

import pytest
from faulty_storage import FaultyStorage

import olympia
from olympia import layout
from olympia.codec import decode_node, inline_nodes_of
from olympia.errors import CommitConflictError, InvalidArgumentError
from olympia.storage import open_storage
from olympia.store import _LRU, DEFAULT_CACHE_BYTES, node_weight


def test_an_lru_evicts_by_weight_and_keeps_no_entry_heavier_than_its_budget():
    lru = _LRU(100, max_bytes=1000)
    for i in range(5):
        lru.put(f"k{i}", i, 300)
    # 5 x 300 > 1000: the three newest stay, the oldest went first.
    assert [lru.get(f"k{i}") for i in range(5)] == [None, None, 2, 3, 4]
    assert lru.weight == 900 and len(lru) == 3
    lru.get("k2")  # now the most recently used
    lru.put("k5", 5, 200)  # 1100: the least recently used (k3) goes
    assert lru.get("k3") is None and lru.get("k2") == 2 and lru.weight == 800
    lru.put("k2", "again", 50)  # a new weight replaces the old one
    assert lru.weight == 550 and lru.get("k2") == "again"
    lru.put("big", "x", 1001)  # heavier than the whole budget: not kept
    assert lru.get("big") is None and lru.weight == 550
    lru.put("k4", "heavy", 1001)  # nor kept when it replaces an entry
    assert lru.get("k4") is None and lru.weight == 250
    counted = _LRU(2)  # without a byte budget: entries only
    for i in range(4):
        counted.put(str(i), i, 10**9)
    assert len(counted) == 2 and counted.get("3") == 3


@pytest.mark.parametrize("bad", [-1, True, 1.5, "100", None])
def test_cache_bytes_must_be_a_whole_number_of_bytes(tmp_path, bad):
    olympia.create_catalog(str(tmp_path / "c"))
    with pytest.raises(InvalidArgumentError, match="cache_bytes"):
        olympia.load_catalog(str(tmp_path / "c"), cache_bytes=bad)
    with pytest.raises(InvalidArgumentError, match="cache_bytes"):
        olympia.create_catalog(str(tmp_path / "d"), cache_bytes=bad)
    assert not (tmp_path / "d" / "vn").exists()


def _big_catalog(path, tables: int, value_bytes: int) -> None:
    """Tables whose values are ``value_bytes`` each, kept inline in leaves of
    at most 3 entries (so each leaf is a node of about 3 values)."""
    cat = olympia.create_catalog(str(path), node_order=4, inline_value_max_bytes=1 << 20)
    with cat.transaction() as t:
        t.create_namespace("ns")
        for i in range(tables):
            t.create_table("ns", f"t{i:04d}", f"s3://b/t{i}.json", {"pad": "x" * value_bytes})
    cat.close()


def test_nodes_of_big_values_are_cached_within_the_budget(tmp_path):
    path = tmp_path / "c"
    _big_catalog(path, tables=300, value_bytes=20_000)  # about 6 MB of values
    budget = 2 * 1024 * 1024
    cat = olympia.load_catalog(str(path), cache_bytes=budget)
    view = cat.latest()
    tracemalloc.start()
    for i in range(300):
        assert view.describe_table("ns", f"t{i:04d}").properties["pad"] == "x" * 20_000
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    nodes = cat.store._nodes
    assert nodes.weight <= budget - 4 * (budget // 16)
    leaves = 300 // 3
    assert 0 < len(nodes) < leaves // 2  # an entry-count bound of 8,192 kept every one
    # What the process holds after reading 6 MB of leaves stays near the
    # budget (the estimate is of the memory, and the count is not the bound).
    assert held < 3 * budget
    # Every table still reads right once evicted (a cache, never the truth).
    assert view.describe_table("ns", "t0000").metadata_location == "s3://b/t0.json"
    cat.close()


def test_the_weight_of_a_node_is_what_it_takes_decoded_not_its_compressed_file(tmp_path):
    path = tmp_path / "c"
    _big_catalog(path, tables=6, value_bytes=30_000)  # leaves of 90 KB: compressed
    data = (path / layout.root_path(1)).read_bytes()
    blobs = inline_nodes_of(data, "vn/x", 1)
    leaves = [decode_node(b, "vn/x/0").node for b in blobs]
    leaves = [n for n in leaves if n.is_leaf]
    assert leaves
    for leaf in leaves:
        content = sum(map(len, leaf.keys)) + sum(map(len, leaf.values))
        assert node_weight(leaf) == content + 96 * len(leaf.keys)
    biggest = max(leaves, key=node_weight)
    assert node_weight(biggest) > 60_000
    assert min(map(len, blobs)) < 10_000  # a compressed file says far less


def test_a_catalog_that_caches_nothing_reads_every_node_again_and_stays_correct(tmp_path):
    path = tmp_path / "c"
    setup = olympia.create_catalog(str(path), node_order=4)
    with setup.transaction() as t:
        t.create_namespace("ns")
        for i in range(40):
            t.create_table("ns", f"t{i}", f"s3://b/{i}/v1.json")
    storage = FaultyStorage(open_storage(str(path)))
    a = olympia.load_catalog(storage, cache_bytes=0)
    b = olympia.load_catalog(str(path), cache_bytes=0)
    assert len(a.store._nodes) == 0
    start = a.version
    # Two writers race on disjoint tables: the loser rebases with nothing cached.
    ta, tb = a.begin(), b.begin()
    ta.update_table("ns", "t1", "s3://b/1/v2.json")
    tb.update_table("ns", "t2", "s3://b/2/v2.json")
    assert tb.commit() == start + 1
    assert ta.commit() == start + 2
    view = a.latest()
    assert view.describe_table("ns", "t1").metadata_location == "s3://b/1/v2.json"
    assert view.describe_table("ns", "t2").metadata_location == "s3://b/2/v2.json"
    assert a.at_version(start).describe_table("ns", "t1").metadata_location == "s3://b/1/v1.json"
    assert sorted(a.latest().list_tables("ns")) == sorted(f"t{i}" for i in range(40))
    # Nothing is kept, so describing one table twice reads its nodes twice.
    storage.reset()
    view.describe_table("ns", "t7")
    first = [c.path for c in storage.calls if c.op == "read"]
    view.describe_table("ns", "t7")
    second = [c.path for c in storage.calls if c.op == "read"][len(first) :]
    assert first and second == first
    assert len(a.store._nodes) == 0 and a.store._nodes.weight == 0
    # The default budget keeps them: a second describe reads nothing.
    c = olympia.load_catalog(storage)
    assert c.store._nodes._max_bytes == DEFAULT_CACHE_BYTES - 4 * (DEFAULT_CACHE_BYTES // 16)
    again = c.latest()
    again.describe_table("ns", "t7")
    storage.reset()
    again.describe_table("ns", "t7")
    assert not [x for x in storage.calls if x.op == "read"]
    for cat in (a, b, c, setup):
        cat.close()


def test_pyiceberg_catalog_property_cache_bytes_bounds_the_olympia_cache(tmp_path):
    from pyiceberg.catalog import load_catalog

    def props(**extra: str) -> dict[str, str]:
        return {
            "py-catalog-impl": "olympia.iceberg.OlympiaCatalog",
            "warehouse": str(tmp_path / "lake"),
            **extra,
        }

    small = load_catalog("lake", **props(**{"cache-bytes": "65536"}))
    assert small.olympia.store._nodes._max_bytes == 65536 - 4 * (65536 // 16)
    default = load_catalog("lake", **props())
    assert default.olympia.store._nodes._max_bytes == DEFAULT_CACHE_BYTES - 4 * (
        DEFAULT_CACHE_BYTES // 16
    )
    for bad in ("-1", "lots", "1.5"):
        with pytest.raises(ValueError, match="'cache-bytes'.*" + bad):
            load_catalog("lake", **props(**{"cache-bytes": bad}))


def test_olympia_serve_takes_its_cache_budget_in_mib(tmp_path, monkeypatch, capsys):
    """A long-running server is where the bound matters most: ``--cache-mib``
    reaches the catalog it serves; a bad value is a usage error (exit 2)."""
    import olympia.rest.server as server
    from olympia.cli import main

    uri = str(tmp_path / "lake")
    olympia.create_catalog(uri).close()
    budgets: list[int | None] = []

    def fake_serve(warehouse: str, properties: dict[str, str], **_: object) -> None:
        served = server.open_catalog(warehouse, properties)
        budgets.append(served.olympia.store._nodes._max_bytes)

    monkeypatch.setattr(server, "serve", fake_serve)
    assert main(["serve", "-w", uri, "--cache-mib", "3"]) == 0
    assert main(["serve", "-w", uri]) == 0
    assert main(["serve", "-w", uri, "--cache-mib", "0"]) == 0
    three = 3 * 1024 * 1024
    assert budgets == [
        three - 4 * (three // 16),
        DEFAULT_CACHE_BYTES - 4 * (DEFAULT_CACHE_BYTES // 16),
        0,
    ]
    for bad in ("-1", "lots", "2.5"):
        with pytest.raises(SystemExit) as info:
            main(["serve", "-w", uri, "--cache-mib", bad])
        assert info.value.code == 2
        assert bad in capsys.readouterr().err


def _hot_writer(uri: str, k: int, seconds: float, out: Any) -> None:
    cat = olympia.load_catalog(uri, cache_bytes=0)
    done = lost = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            with cat.transaction() as t:
                generation = int(t.describe_table("ns", "hot").metadata_location.rsplit("/", 1)[1])
                t.update_table("ns", "hot", f"s3://b/hot/{generation + 1}")
                t.update_table("ns", f"t{k}", f"s3://b/t{k}/{done}")
            done += 1
        except CommitConflictError:
            lost += 1
    cat.close()
    out.put((k, done, lost))


def test_writers_that_cache_nothing_race_on_one_table_and_lose_no_update(tmp_path):
    """Three processes with cache_bytes=0 read-modify-write one table (and
    each its own) for a fixed time: every commit they were told succeeded is
    in the final generation, and each wrote its own table's last value."""
    uri = str(tmp_path / "c")
    cat = olympia.create_catalog(uri)
    with cat.transaction() as t:
        t.create_namespace("ns")
        t.create_table("ns", "hot", "s3://b/hot/0")
        for k in range(3):
            t.create_table("ns", f"t{k}", f"s3://b/t{k}/none")
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_hot_writer, args=(uri, k, 2.0, out)) for k in range(3)]
    for p in procs:
        p.start()
    results = sorted(out.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    view = olympia.load_catalog(uri).latest()
    final = int(view.describe_table("ns", "hot").metadata_location.rsplit("/", 1)[1])
    assert final == sum(done for _, done, _ in results) > 0
    for k, done, _ in results:
        assert done > 0
        assert view.describe_table("ns", f"t{k}").metadata_location == f"s3://b/t{k}/{done - 1}"
