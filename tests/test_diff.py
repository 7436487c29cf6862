"""Catalog.diff / tree.diff: the objects that differ between two versions,
checked against a full comparison of both versions' contents."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import olympia
from olympia.errors import VersionNotFoundError


def contents(cat: olympia.Catalog, version: int) -> dict[str, bytes]:
    view = cat.at_version(version)
    return dict(view.scan(""))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_diff_matches_a_full_comparison(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    cat = olympia.create_catalog(str(tmp_path / "c"), node_order=4)
    with cat.transaction() as t:
        for n in range(4):
            t.create_namespace(f"n{n}")
        for i in range(300):
            t.create_table(f"n{i % 4}", f"t{i:04d}", f"s3://x/{i}")
    live = {(f"n{i % 4}", f"t{i:04d}") for i in range(300)}
    for _ in range(6):
        with cat.transaction() as t:
            for _ in range(rng.randrange(1, 8)):
                ns, name = rng.choice(sorted(live))
                op = rng.randrange(3)
                if op == 0:
                    t.update_table(ns, name, metadata_location=f"s3://y/{rng.random()}")
                elif op == 1:
                    t.drop_table(ns, name)
                    live.discard((ns, name))
                else:
                    new = f"new{rng.randrange(10**6)}"
                    t.create_table(ns, new, "s3://z")
                    live.add((ns, new))
    versions = list(range(cat.version + 1))
    for a in versions:
        for b in versions:
            before, after = contents(cat, a), contents(cat, b)
            expected = {
                k: ("added" if k not in before else "removed" if k not in after else "changed")
                for k in before.keys() | after.keys()
                if before.get(k) != after.get(k)
            }
            got = cat.diff(a, b)
            keys = cat.latest().keys
            assert len(got) == len(expected)
            for change in got:
                key = (
                    keys.namespace(*change.parts)
                    if change.kind == "namespace"
                    else keys.table(*change.parts)
                )
                assert expected[key] == change.change


def test_diff_of_an_unknown_version(tmp_path: Path) -> None:
    cat = olympia.create_catalog(str(tmp_path / "c"))
    with pytest.raises(VersionNotFoundError):
        cat.diff(0, 5)
    with pytest.raises(olympia.InvalidArgumentError):
        cat.diff(-1, 0)
