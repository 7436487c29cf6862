"""A commit that loses races: what each retry re-examines (spec/transactions.md §3).

Every retry must cost O(versions committed since the previous attempt): no
version is checked twice, a rebase that no new version touches is not
replayed, and a loser retries at once instead of sleeping.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import olympia
from olympia import commit as commit_module
from olympia.conflicts import Footprint
from olympia.errors import CommitConflictError

RACES = 12


def _setup(tmp_path: Path) -> tuple[olympia.Catalog, olympia.Catalog]:
    uri = str(tmp_path / "cat")
    cat = olympia.create_catalog(uri)
    with cat.begin() as txn:
        txn.create_namespace("ns", {"owner": "a"})
        for name in ("mine", "theirs", "read"):
            txn.create_table("ns", name, f"s3://data/{name}/v0.json")
    return cat, olympia.load_catalog(uri)


def _lose_races(
    monkeypatch: pytest.MonkeyPatch, cat: olympia.Catalog, races: int, rival: Callable[[int], None]
) -> list[int]:
    """Make ``cat``'s next commits lose ``races`` races: just before each of
    its root puts, ``rival(i)`` publishes that version. Returns the versions
    the commit tried."""
    tried: list[int] = []
    store = cat.store
    original = store.commit

    def commit(version: int, *args: Any, **kwargs: Any) -> Any:
        tried.append(version)
        if len(tried) <= races:
            rival(len(tried))
        return original(version, *args, **kwargs)

    monkeypatch.setattr(store, "commit", commit)
    return tried


def _count_footprints(monkeypatch: pytest.MonkeyPatch) -> Counter[int]:
    loads: Counter[int] = Counter()
    original = commit_module.footprint_of

    def counted(store: Any, version: int) -> Footprint:
        loads[version] += 1
        return original(store, version)

    monkeypatch.setattr(commit_module, "footprint_of", counted)
    return loads


@pytest.mark.parametrize("isolation", ["snapshot", "serializable"])
def test_a_retry_checks_only_the_versions_committed_since_the_previous_attempt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolation: str
) -> None:
    cat, other = _setup(tmp_path)

    def rival(i: int) -> None:
        with other.begin() as t:
            t.update_table("ns", "theirs", metadata_location=f"s3://data/theirs/v{i}.json")
            if i % 3 == 0:  # and sometimes a table this transaction read
                t.update_table("ns", "read", metadata_location=f"s3://data/read/v{i}.json")

    txn = cat.begin(isolation)
    begin = txn.begin_version
    assert txn.describe_table("ns", "read").metadata_location == "s3://data/read/v0.json"
    txn.update_table("ns", "mine", metadata_location="s3://data/mine/v1.json")
    loads = _count_footprints(monkeypatch)
    tried = _lose_races(monkeypatch, cat, RACES, rival)
    # Under SERIALIZABLE the rivals' updates of "read" come after this
    # transaction's read of it: it commits, serialized before them.
    version = txn.commit()
    assert tried == list(range(begin + 1, begin + RACES + 2))
    assert version == begin + RACES + 1
    # every concurrent version was examined exactly once over all attempts
    assert loads == Counter(range(begin + 1, version))
    latest = cat.latest()
    assert latest.describe_table("ns", "mine").metadata_location == "s3://data/mine/v1.json"
    assert latest.describe_table("ns", "theirs").metadata_location == (
        f"s3://data/theirs/v{RACES}.json"
    )
    assert latest.describe_table("ns", "read").metadata_location == "s3://data/read/v12.json"
    if isolation == "serializable":
        info = cat.history(since=version)[0]
        # before the first rival that wrote "read", and all it reaches (they
        # all write "theirs", so each precedes the next)
        assert list(info.serialized_before) == list(range(begin + 3, version))
    other.close()
    cat.close()


def test_a_rebase_replays_only_when_a_new_version_wrote_what_the_writes_depend_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cat, other = _setup(tmp_path)

    def rival(i: int) -> None:
        with other.begin() as t:
            if i == RACES:  # the last one alters the namespace this transaction alters too
                t.alter_namespace("ns", set={"team": "x"})
            else:
                t.update_table("ns", "theirs", metadata_location=f"s3://data/theirs/v{i}.json")

    replays: list[int] = []
    original = commit_module.Commit._replay

    def replay(self: Any, target: Any) -> Any:
        replays.append(target.version)
        return original(self, target)

    txn = cat.begin()
    begin = txn.begin_version
    txn.update_table("ns", "mine", metadata_location="s3://data/mine/v1.json")
    txn.alter_namespace("ns", set={"size": "big"})
    monkeypatch.setattr(commit_module.Commit, "_replay", replay)
    _lose_races(monkeypatch, cat, RACES, rival)
    version = txn.commit()
    assert version == begin + RACES + 1
    # only the attempt after the namespace change replays (and merges it)
    assert replays == [begin + RACES]
    latest = cat.latest()
    assert latest.describe_namespace("ns").properties == {"owner": "a", "team": "x", "size": "big"}
    assert latest.describe_table("ns", "mine").metadata_location == "s3://data/mine/v1.json"
    other.close()
    cat.close()


def test_a_loser_retries_at_once_and_gives_up_only_after_max_attempts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cat, other = _setup(tmp_path)

    def rival(i: int) -> None:
        with other.begin() as t:
            t.update_table("ns", "theirs", metadata_location=f"s3://data/theirs/v{i}.json")

    sleeps: list[float] = []
    monkeypatch.setattr(commit_module.time, "sleep", sleeps.append)
    txn = cat.begin()
    txn.update_table("ns", "mine", metadata_location="s3://data/mine/v1.json")
    tried = _lose_races(monkeypatch, cat, 3, rival)
    assert txn.commit() == txn.begin_version + 4
    assert len(tried) == 4
    assert sleeps == []  # three lost races without a conflict: no pause

    monkeypatch.undo()
    txn = cat.begin(max_attempts=5)
    txn.update_table("ns", "mine", metadata_location="s3://data/mine/v2.json")
    tried = _lose_races(monkeypatch, cat, 100, rival)
    with pytest.raises(CommitConflictError) as info:
        txn.commit()
    assert info.value.rule == "retries-exhausted"
    assert "max_attempts" in str(info.value)
    assert len(tried) == 5
    assert cat.latest().describe_table("ns", "mine").metadata_location == "s3://data/mine/v1.json"
    other.close()
    cat.close()
