"""The fill invariant of spec/format.md §4 through the public API.

Random transactions create and drop namespaces and tables on catalogs of
small node orders; every version they publish must satisfy every tree
invariant (``check_tree`` loads every node file) and list exactly the
objects a plain model holds.
"""

from __future__ import annotations

import random

import pytest

import olympia


@pytest.mark.parametrize(("order", "seed"), [(3, 1), (3, 2), (4, 3), (4, 4), (5, 5), (8, 6)])
def test_random_creates_and_drops_keep_every_version_a_valid_tree(tmp_path, order, seed):
    rng = random.Random(seed)
    cat = olympia.create_catalog(str(tmp_path / "cat"), node_order=order)
    model: dict[str, set[str]] = {}
    history: dict[int, dict[str, set[str]]] = {0: {}}
    serial = 0
    for _ in range(40):
        with cat.transaction() as txn:
            for _ in range(rng.randint(1, 8)):
                spaces = sorted(model)
                roll = rng.random()
                if not spaces or roll < 0.1:
                    name = f"n{rng.randint(0, 5)}"
                    if name not in model:
                        txn.create_namespace(name)
                        model[name] = set()
                elif roll < 0.5:
                    space = rng.choice(spaces)
                    for _ in range(rng.randint(1, 6)):
                        serial += 1
                        table = f"t{serial:04d}"
                        txn.create_table(space, table, f"s3://b/{table}.json")
                        model[space].add(table)
                elif roll < 0.9:
                    space = rng.choice(spaces)
                    # Drop a contiguous run of tables: it empties whole leaves.
                    tables = sorted(model[space])
                    start = rng.randint(0, len(tables))
                    for table in tables[start : start + rng.randint(1, 8)]:
                        txn.drop_table(space, table)
                        model[space].discard(table)
                else:
                    space = rng.choice(spaces)
                    for table in sorted(model[space]):
                        txn.drop_table(space, table)
                    txn.drop_namespace(space)
                    del model[space]
        history[cat.version] = {k: set(v) for k, v in model.items()}
    assert sorted(history) == list(range(cat.version + 1))
    fresh = olympia.load_catalog(str(tmp_path / "cat"))  # every node file read from storage
    for version, expected in history.items():
        root = fresh.store.load_root(version)
        count = fresh.store.check_tree(root)
        assert count == len(expected) + sum(len(t) for t in expected.values())
        view = fresh.at_version(version)
        assert view.list_namespaces() == sorted(expected)
        for space, tables in expected.items():
            assert view.list_tables(space) == sorted(tables)
