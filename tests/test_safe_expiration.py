"""Expiration people cannot misuse (issue 22): a retention in the catalog
definition that expiration without options applies, dry runs that write
nothing and tell exactly what a run removes, and a file check that reads
right (finished distributed transactions, damaged roots)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

import olympia
from olympia import definition as defn
from olympia import layout, maintenance
from olympia.errors import InvalidDefinitionError, VersionNotFoundError
from olympia.node import EMPTY_LEAF
from olympia.storage import open_storage
from olympia.storage.local import TMP_DIR
from olympia.store import CatalogStore

HOUR = 3600 * 1000
FIVE_DAYS = 5 * 24 * HOUR
SHORT = {"grace_seconds": 0, "allow_short_grace": True}


def _versions(cat: olympia.Catalog, count: int, prefix: str = "n") -> None:
    for i in range(count):
        with cat.transaction() as t:
            t.create_namespace(f"{prefix}{i}")


def _created(cat: olympia.Catalog, version: int) -> int:
    return cat.store.load_root(version).created_at_millis


def _clock_at(monkeypatch: pytest.MonkeyPatch, millis: int) -> None:
    """Expiration's clock reads ``millis`` (its T0): versions get old without waiting."""
    monkeypatch.setattr(maintenance, "expiration_clock_millis", lambda: millis)


def _snapshot(cat: olympia.Catalog, root: Path) -> dict[str, bytes]:
    """Every file under the catalog's folder, with its bytes."""
    cat.store.wait_for_background_writes()
    out: dict[str, bytes] = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = Path(folder, name)
            out[path.relative_to(root).as_posix()] = path.read_bytes()
    return out


def _changed(before: dict[str, bytes], after: dict[str, bytes]) -> set[str]:
    """The files a run deleted or replaced (by an expired-root marker); the
    floor and the marker horizon it writes, ``vn/oldest`` and ``vn/horizon``,
    aside."""
    written = {layout.OLDEST_FLOOR, layout.MARKER_HORIZON}
    after = {p: d for p, d in after.items() if p not in written}
    assert set(after) <= set(before), "expiration created files"
    return {p for p, data in before.items() if after.get(p) != data} - written


# --- the retention in the definition ------------------------------------------------


def test_expire_without_options_on_a_new_catalog_keeps_its_history(any_storage_location):
    """The report of issue 22: a new user's ``expire`` deleted every version
    but the latest. Versions younger than five days now stay."""
    uri, opts = any_storage_location
    cat = olympia.create_catalog(uri, opts)
    _versions(cat, 5)
    result = cat.expire_versions(**SHORT)
    assert (result.oldest_version, result.deleted_roots, result.deleted_files) == (0, 0, 0)
    assert [h.version for h in cat.history()] == list(range(6))


def test_no_options_keep_every_version_younger_than_the_retention(tmp_path, monkeypatch):
    root = tmp_path / "c"
    cat = olympia.create_catalog(str(root), expire_max_age_millis=HOUR)
    _versions(cat, 3, "old")  # versions 1..3
    while int(time.time() * 1000) <= _created(cat, 3):
        time.sleep(0.002)  # the next version is created in a later millisecond
    _versions(cat, 3, "new")  # versions 4..6
    # With the real clock every version is younger than an hour: none goes.
    result = cat.expire_versions(**SHORT)
    assert result.oldest_version == 0 and result.deleted_roots == 0
    assert result.retention == (HOUR, 1) and result.expired_versions == range(0)
    assert [h.version for h in cat.history()] == list(range(7))
    # An hour after version 4 less a millisecond: versions 0..3 are older;
    # version 3 was the one in effect at that moment and stays.
    _clock_at(monkeypatch, _created(cat, 4) - 1 + HOUR)
    before = _snapshot(cat, root)
    dry = cat.expire_versions(dry_run=True, **SHORT)
    assert _snapshot(cat, root) == before
    assert dry.dry_run and dry.oldest_version == 3 and dry.expired_versions == range(0, 3)
    real = cat.expire_versions(**SHORT)
    assert not real.dry_run and real.oldest_version == 3 and real.paths == ()
    assert real.expired_versions == range(0, 3) and real.deleted_roots == 3
    assert _changed(before, _snapshot(cat, root)) == set(dry.paths)
    with pytest.raises(VersionNotFoundError):
        cat.at_version(2)
    assert "old2" in [n for n in cat.at_version(3).list_namespaces()]
    assert cat.fsck().ok


def test_no_options_keep_at_least_the_minimum_number_of_versions(tmp_path, monkeypatch):
    cat = olympia.create_catalog(str(tmp_path / "c"), expire_min_versions=3)
    _versions(cat, 6)
    _clock_at(monkeypatch, _created(cat, 6) + 10 * FIVE_DAYS)
    result = cat.expire_versions(**SHORT)  # every version is far older than five days
    assert result.retention == (FIVE_DAYS, 3)
    assert result.oldest_version == 4 and [h.version for h in cat.history()] == [4, 5, 6]
    # The default minimum is 1: the latest version is always kept.
    other = olympia.create_catalog(str(tmp_path / "d"))
    _versions(other, 2)
    assert other.expire_versions(**SHORT).oldest_version == 2


def test_explicit_options_do_what_they_say_whatever_the_retention(tmp_path):
    cat = olympia.create_catalog(str(tmp_path / "c"), expire_min_versions=5)
    _versions(cat, 4)
    result = cat.expire_versions(keep_last=1, **SHORT)
    assert result.oldest_version == 4 and result.retention is None
    assert result.expired_versions == range(0, 4)


def test_retention_is_a_definition_option(tmp_path):
    cat = olympia.create_catalog(
        str(tmp_path / "a"), expire_max_age_millis=60_000, expire_min_versions=7
    )
    loaded = olympia.load_catalog(cat.uri).definition
    assert (loaded.expire_max_age_millis, loaded.expire_min_versions) == (60_000, 7)
    fresh = olympia.create_catalog(str(tmp_path / "b")).definition
    assert defn.expire_retention(fresh) == (5 * 24 * HOUR, 1)
    for name in ("expire_max_age_millis", "expire_min_versions"):
        for bad in (0, -1, 1.5, "60", True, None):
            with pytest.raises(InvalidDefinitionError, match=name):
                olympia.create_catalog(str(tmp_path / "c"), **{name: bad})
    assert not (tmp_path / "c" / "vn").exists()


def test_a_catalog_written_before_the_retention_fields_gets_the_defaults(tmp_path, monkeypatch):
    definition = defn.build_definition({})
    definition.ClearField("expire_max_age_millis")
    definition.ClearField("expire_min_versions")
    assert defn.stored_definition_problem(definition) is None
    assert defn.expire_retention(definition) == (FIVE_DAYS, 1)
    uri = str(tmp_path / "old")
    store = CatalogStore(open_storage(uri))
    store.commit(0, EMPTY_LEAF, definition, transaction_id=store.new_transaction_id())
    store.close()
    cat = olympia.load_catalog(uri)
    assert cat.definition.expire_max_age_millis == 0 == cat.definition.expire_min_versions
    _versions(cat, 3)
    result = cat.expire_versions(**SHORT)
    assert result.oldest_version == 0 and result.retention == (FIVE_DAYS, 1)
    _clock_at(monkeypatch, _created(cat, 3) + FIVE_DAYS + 1)
    assert cat.expire_versions(**SHORT).oldest_version == 3


# --- dry runs ---------------------------------------------------------------------------


def test_a_dry_run_deletes_nothing_and_tells_exactly_what_a_run_deletes(tmp_path):
    root = tmp_path / "c"
    cat = olympia.create_catalog(str(root), node_order=3)
    _versions(cat, 6)
    cat.export_snapshot("keep", str(tmp_path / "copy"), mode="minimal")  # pins version 6
    _versions(cat, 3, "m")
    txn = cat.begin()
    txn.create_namespace("d")
    cat.resume(txn.distribute()).commit()  # leaves the state files of a finished transaction
    lapsed = {"kind": "rollback", "version": 2, "created_at_millis": 1, "renewed_at_millis": 1}
    (root / "pins").mkdir(exist_ok=True)
    (root / "pins" / "lapsed.json").write_text(json.dumps(lapsed))
    stray = root / "node" / "0000000000001-00000000000000000000000000000000.arrow"
    stray.parent.mkdir(exist_ok=True)
    stray.write_bytes(b"nobody needs me")
    (root / TMP_DIR).mkdir(exist_ok=True)
    leftover = root / TMP_DIR / "killed-writer"
    leftover.write_bytes(b"half a file")
    os.utime(leftover, (1, 1))
    before = _snapshot(cat, root)
    dry = cat.expire_versions(keep_last=2, dry_run=True, **SHORT)
    assert _snapshot(cat, root) == before  # byte for byte
    assert cat.oldest_version == 0
    assert dry.dry_run and dry.oldest_version == cat.version - 1
    assert dry.deleted_roots > 0 and dry.deleted_files > 0
    assert dry.deleted_pins == 1 and dry.deleted_temporary_files == 1
    assert "pins/lapsed.json" in dry.paths and f"{TMP_DIR}/killed-writer" in dry.paths
    assert f"node/{stray.name}" in dry.paths
    real = cat.expire_versions(keep_last=2, **SHORT)
    assert _changed(before, _snapshot(cat, root)) == set(dry.paths)
    for field in (
        "oldest_version",
        "previous_oldest_version",
        "deleted_roots",
        "deleted_files",
        "deleted_pins",
        "deleted_temporary_files",
        "broken_pins",
    ):
        assert getattr(dry, field) == getattr(real, field), field
    assert dry.expired_versions == real.expired_versions == range(0, cat.version - 1)
    assert olympia.maintenance._load_pinned(cat.store, 6).version == 6  # the export's pin held


def test_dry_run_must_be_a_bool(tmp_path):
    cat = olympia.create_catalog(str(tmp_path / "c"))
    with pytest.raises(olympia.InvalidArgumentError, match="dry_run"):
        cat.expire_versions(dry_run="yes")  # type: ignore[arg-type]


# --- the file check -----------------------------------------------------------------------


def test_finished_distributed_transactions_await_expiration_not_orphans(tmp_path):
    cat = olympia.create_catalog(str(tmp_path / "c"))
    committed = cat.begin()
    committed.create_namespace("a")
    committed_id = committed.distribute()
    cat.resume(committed_id).commit()
    rolled = cat.begin()
    rolled.create_namespace("b")
    rolled_id = rolled.distribute()
    cat.resume(rolled_id).rollback()
    still_open = cat.begin()
    still_open.create_namespace("c")
    open_id = still_open.distribute()
    check = cat.fsck()
    assert check.ok and check.orphans == ()
    assert check.awaiting_expiration
    assert {p.split("/")[1] for p in check.awaiting_expiration} == {committed_id, rolled_id}
    assert not check.clean
    cat.expire_versions(keep_last=1, **SHORT)
    check = cat.fsck()
    assert check.awaiting_expiration == () and check.orphans == ()
    assert check.clean
    assert {p.split("/")[1] for p in cat.store.storage.list("dtxn")} == {open_id}


def test_a_damaged_old_root_is_listed_under_damaged(tmp_path):
    root = tmp_path / "c"
    cat = olympia.create_catalog(str(root))
    _versions(cat, 3)
    (root / layout.root_path(1)).write_bytes(b"garbage")
    check = olympia.load_catalog(str(root)).fsck()
    assert not check.ok and check.missing == ()
    assert len(check.damaged) == 1
    assert (
        check.damaged[0].startswith(f"{layout.root_path(1)}: ") and "version 1" in check.damaged[0]
    )
    assert check.kept_versions == (0, 1, 2, 3)
    assert not [o for o in check.orphans if o.startswith(("node/", "def/", "act/"))]


def test_a_dry_run_of_the_cli_counts_due_purges_and_deletes_no_table_file(tmp_path):
    import subprocess
    import sys

    from iceberg_helpers import olympia_catalog, rows
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    root = tmp_path / "lake"
    cat = olympia_catalog(f"file://{root}")
    cat.create_namespace("ns")
    schema = Schema(NestedField(1, "id", LongType()), NestedField(2, "v", StringType()))
    cat.create_table("ns.t", schema).append(rows([1]))
    cat.purge_table("ns.t")
    command = [sys.executable, "-m", "olympia.cli", "expire", "-w", f"file://{root}", "--json"]
    command += ["--keep-last", "1", "--grace-seconds", "0", "--allow-short-grace"]
    cat.olympia.store.wait_for_background_writes()
    before = _snapshot(cat.olympia, root)
    assert [p for p in before if p.startswith("ns.db/t/data/")]
    done = subprocess.run([*command, "--dry-run"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["dry_run"] and report["purged_tables"] == 1 and report["pending_purges"] == 0
    assert "deleted_table_files" not in report  # counting them would mean reading the tables
    assert _snapshot(cat.olympia, root) == before
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["purged_tables"] == 1
    assert not [p for p in _snapshot(cat.olympia, root) if p.startswith("ns.db/t/data/")]
