"""Pin and export records that cannot be read never let expiration delete
what they might protect (spec/transactions.md §8.1, §8.3)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

import olympia
from olympia import layout, maintenance
from olympia.errors import CorruptCatalogError

FOLDERS = ("vn", "node", "def", "dtxn", "pins", "exports")
NOW = int(time.time() * 1000)


def _catalog(tmp_path) -> tuple[olympia.Catalog, int]:
    """A catalog whose version 2 is pinned by the finished export ``snap``
    and shares no file with the latest version."""
    cat = olympia.create_catalog(str(tmp_path / "c"), node_order=3, inline_value_max_bytes=16)
    with cat.transaction() as t:
        t.create_namespace("n")
    with cat.transaction() as t:
        for i in range(6):
            t.create_table("n", f"a{i}", f"m/a{i}", {"p": "x" * 40})
    assert cat.export_snapshot("snap", str(tmp_path / "t"), mode="minimal") == 2
    with cat.transaction() as t:
        for i in range(6):
            t.drop_table("n", f"a{i}")
        for i in range(6):
            t.create_table("n", f"b{i}", f"m/b{i}", {"p": "y" * 40})
    with cat.transaction() as t:
        t.create_table("n", "c", "m/c")
    return cat, 2


def _files(cat: olympia.Catalog) -> dict[str, bytes]:
    """Every file of the catalog with its content, but the ``vn/latest`` hint
    (written in the background after each commit)."""
    storage = cat.store.storage
    paths = [p for folder in FOLDERS for p in storage.list(folder) if p != "vn/latest"]
    return {p: storage.read(p) for p in paths}


def _tables(cat: olympia.Catalog, version: int) -> list[str]:
    return olympia.load_catalog(cat.uri).at_version(version).list_tables("n")


BAD_EXPORT_RECORDS: dict[str, bytes] = {
    "truncated JSON": b'{"name": "snap", "version": 2, "mode": "mini',
    "not UTF-8": b'{"version": 2, "name": "sn\xffap"}',
    "empty file": b"",
    "a JSON list": b"[2]",
    "a JSON number": b"2",
    "no version": json.dumps({"name": "snap", "mode": "minimal"}).encode(),
    "version as text": json.dumps({"name": "snap", "version": "2"}).encode(),
    "version as a fraction": json.dumps({"name": "snap", "version": 2.0}).encode(),
    "version true": json.dumps({"name": "snap", "version": True}).encode(),
    "version null": json.dumps({"name": "snap", "version": None}).encode(),
    "version NaN": b'{"name": "snap", "version": NaN}',
    "version Infinity": b'{"name": "snap", "version": Infinity}',
    "negative version": json.dumps({"name": "snap", "version": -1}).encode(),
    "version 2**63": json.dumps({"name": "snap", "version": 2**63}).encode(),
    "huge version": json.dumps({"name": "snap", "version": 10**40}).encode(),
    "from_version as text": json.dumps({"version": 2, "from_version": "0"}).encode(),
    "negative from_version": json.dumps({"version": 2, "from_version": -(10**15)}).encode(),
    "from_version above version": json.dumps({"version": 2, "from_version": 3}).encode(),
    "unknown state": json.dumps({"version": 2, "state": "finished"}).encode(),
    "copying without times": json.dumps({"version": 2, "state": "copying"}).encode(),
    "renewed as text": json.dumps(
        {"version": 2, "state": "copying", "renewed_at_millis": str(NOW)}
    ).encode(),
    "created as a fraction": json.dumps({"version": 2, "created_at_millis": 1.5}).encode(),
}


@pytest.mark.parametrize("damage", sorted(BAD_EXPORT_RECORDS))
def test_an_unreadable_export_record_stops_expiration_before_anything_changes(tmp_path, damage):
    cat, pinned = _catalog(tmp_path)
    storage = cat.store.storage
    storage.overwrite("exports/snap.json", BAD_EXPORT_RECORDS[damage])
    before = _files(cat)
    for _ in range(2):  # refused every time, not only once
        with pytest.raises(CorruptCatalogError, match=r"exports/snap\.json") as info:
            cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
        assert type(info.value) is CorruptCatalogError
        assert "drop_export('snap')" in str(info.value)
        assert _files(cat) == before  # not even the floor moved
    assert cat.oldest_version == 0
    assert _tables(cat, pinned) == [f"a{i}" for i in range(6)]
    check = cat.fsck()
    assert not check.ok and any(d.startswith("exports/snap.json") for d in check.damaged)
    assert "exports/snap.json" not in check.orphans
    with pytest.raises(CorruptCatalogError, match=r"exports/snap\.json"):
        maintenance.exports(storage)
    # The fix the message names: the export is dropped, expiration runs.
    cat.drop_export("snap")
    result = cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
    assert result.oldest_version == cat.version
    # every root below the floor is gone but those carrying inline nodes the
    # latest tree uses (format.md §3.6)
    whole = [
        v for v in range(cat.version) if storage.read(layout.root_path(v)) != layout.EXPIRED_ROOT
    ]
    assert whole == [cat.version - 1]
    assert result.deleted_roots == cat.version - len(whole)
    assert cat.fsck().clean


@pytest.mark.parametrize(("low", "high"), [(5, 5), (1000, 1000), (0, 2**63 - 1)])
def test_an_export_record_pinning_a_version_above_the_latest_deletes_nothing(tmp_path, low, high):
    cat, pinned = _catalog(tmp_path)
    assert cat.version == 4
    storage = cat.store.storage
    record = json.loads(storage.read("exports/snap.json"))
    record["from_version"], record["version"] = low, high  # e.g. a flipped digit
    storage.overwrite("exports/snap.json", json.dumps(record).encode())
    before = _files(cat)
    with pytest.raises(CorruptCatalogError, match=r"exports/snap\.json.*above the latest"):
        cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
    after = _files(cat)
    # The floor may have moved (the record reads well in itself), nothing else changed.
    assert {p: d for p, d in after.items() if p != "vn/oldest"} == {
        p: d for p, d in before.items() if p != "vn/oldest"
    }
    assert any(d.startswith("exports/snap.json") for d in cat.fsck().damaged)
    # Repaired, the record protects its version again.
    record["version"] = record["from_version"] = pinned
    storage.overwrite("exports/snap.json", json.dumps(record).encode())
    result = cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
    assert result.oldest_version == cat.version and result.broken_pins == ()
    check = cat.fsck()
    assert check.clean and check.kept_versions == (pinned, cat.version)


@pytest.mark.parametrize(
    "data",
    [
        b"{not json",
        json.dumps({"kind": "rollback", "from_version": 2}).encode(),
        json.dumps({"kind": "rollback", "version": 2}).encode(),  # when does it lapse?
        json.dumps({"kind": 7, "version": 2, "renewed_at_millis": NOW}).encode(),
        json.dumps({"version": [2], "renewed_at_millis": NOW}).encode(),
    ],
    ids=["bad JSON", "no version", "no times", "kind not text", "version a list"],
)
def test_an_unreadable_rollback_pin_stops_expiration(tmp_path, data):
    cat, pinned = _catalog(tmp_path)
    cat.drop_export("snap")
    storage = cat.store.storage
    storage.put_if_absent("pins/p1.json", data)
    before = _files(cat)
    with pytest.raises(CorruptCatalogError, match=r"pins/p1\.json.*delete the file"):
        cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
    assert _files(cat) == before
    assert _tables(cat, pinned) == [f"a{i}" for i in range(6)]
    storage.delete("pins/p1.json")
    assert (
        cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True).oldest_version
        == cat.version
    )


def test_readable_records_of_every_kind_still_pin(tmp_path):
    """Records as writers of this and earlier releases produce them are
    honoured, and the lapsed one is removed."""
    cat, pinned = _catalog(tmp_path)
    storage = cat.store.storage
    old: dict[str, Any] = {"name": "old", "version": 1, "target": "x", "mode": "full"}
    storage.put_if_absent("exports/old.json", json.dumps(old).encode())  # no times, no state
    pin = {"kind": "rollback", "version": 3, "created_at_millis": NOW}  # renewed defaults
    storage.put_if_absent("pins/live.json", json.dumps(pin).encode())
    lapsed = {"kind": "rollback", "version": 0, "from_version": 0, "renewed_at_millis": 5}
    storage.put_if_absent("pins/lapsed.json", json.dumps(lapsed).encode())
    assert sorted(maintenance.exports(storage)) == ["old", "snap"]
    result = cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
    assert result.oldest_version == cat.version and result.deleted_pins == 1
    assert cat.fsck().kept_versions == (1, pinned, 3, cat.version)
    assert storage.list("pins") == ["pins/live.json"]
