"""A purge never breaks history (spec/iceberg.md §4, "Purge"): a purged
table's files stay while a kept version reaches the table, and go when
expiration drops the last such version."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from iceberg_helpers import ids_of, olympia_catalog, rows, table_files
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from olympia.errors import VersionNotFoundError
from olympia.iceberg import OlympiaCatalog, purge

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "v", StringType(), required=False),
)
DATA = (".parquet", ".avro", ".json")


def expire(cat: OlympiaCatalog) -> purge.PurgeResult:
    return cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True).purges


def files(root: Path, folder: str) -> list[str]:
    return sorted(f for f in table_files(root) if folder in f and f.endswith(DATA))


@pytest.fixture
def lake(tmp_path: Path) -> tuple[OlympiaCatalog, Path]:
    root = tmp_path / "lake"
    cat = olympia_catalog(f"file://{root}")
    assert isinstance(cat, OlympiaCatalog)
    cat.create_namespace("ns")
    cat.create_table("ns.t", SCHEMA).append(rows([1, 2]))
    return cat, root


def test_time_travel_and_rollback_to_before_a_purge_read_the_table(lake) -> None:
    cat, root = lake
    before = cat.olympia.version
    kept = files(root, "ns.db/t/")
    cat.purge_table("ns.t")
    with pytest.raises(NoSuchTableError):
        cat.load_table("ns.t")
    assert files(root, "ns.db/t/") == kept  # nothing deleted while history reaches it
    # The version before the purge still reads, whole.
    old = cat.olympia.at_version(before).describe_table("ns", "t")
    assert Path(old.metadata_location.removeprefix("file://")).is_file()
    cat.olympia.rollback_to(before)
    assert ids_of(cat.load_table("ns.t")) == [1, 2]
    assert cat.olympia.fsck().ok


def test_expiration_deletes_a_purged_tables_files_once_no_version_reaches_it(lake) -> None:
    cat, root = lake
    assert files(root, "ns.db/t/")
    cat.purge_table("ns.t")
    assert len(purge.records(cat)[0]) == 1
    result = expire(cat)
    assert (result.purged_tables, result.pending_tables) == (1, 0)
    assert result.deleted_files >= 4  # metadata files, manifest list, manifest, data file
    assert files(root, "ns.db/t/") == []
    assert purge.records(cat) == ([], [])
    with pytest.raises(VersionNotFoundError):
        cat.olympia.at_version(1)
    assert cat.olympia.fsck().ok


def test_a_purge_waits_for_pinned_versions(lake) -> None:
    cat, root = lake
    exported = cat.olympia.export_snapshot("keep", f"file://{root.parent}/export")
    cat.purge_table("ns.t")
    assert cat.olympia.version == exported + 1
    result = expire(cat)
    assert (result.purged_tables, result.pending_tables) == (0, 1)
    assert files(root, "ns.db/t/")
    cat.olympia.drop_export("keep")
    assert expire(cat).purged_tables == 1
    assert files(root, "ns.db/t/") == []


def test_a_table_created_again_at_the_same_place_keeps_its_files(lake) -> None:
    cat, root = lake
    old = set(files(root, "ns.db/t/"))
    cat.purge_table("ns.t")
    again = cat.create_table("ns.t", SCHEMA)
    again.append(rows([7]))
    new = set(files(root, "ns.db/t/")) - old
    assert new
    assert expire(cat).purged_tables == 1
    assert set(files(root, "ns.db/t/")) == new  # the old table's files went, the new one's stay
    assert ids_of(cat.load_table("ns.t")) == [7]


def test_a_table_brought_back_by_rollback_keeps_its_files(lake) -> None:
    cat, _ = lake
    before = cat.olympia.version
    cat.purge_table("ns.t")
    cat.olympia.rollback_to(before)  # the purged table is back, in a new version
    cat.load_table("ns.t").append(rows([3]))
    assert expire(cat).purged_tables == 1
    assert ids_of(cat.load_table("ns.t")) == [1, 2, 3]
    assert cat.olympia.fsck().ok


def test_purge_in_a_transaction_is_recorded_at_its_version(lake) -> None:
    cat, root = lake
    with cat.transaction() as tx:
        tx.purge_table("ns.t")
        tx.create_table("ns.u", SCHEMA).append(rows([5]))
    (record,), _ = purge.records(cat)
    assert record.version == cat.olympia.version and record.table == "ns.t"
    # A rolled-back purge records nothing.
    tx = cat.begin()
    tx.purge_table("ns.u")
    tx.rollback()
    assert len(purge.records(cat)[0]) == 1
    assert expire(cat).purged_tables == 1
    assert files(root, "ns.db/t/") == [] and files(root, "ns.db/u/")


def test_a_damaged_purge_record_is_reported_and_left_alone(lake) -> None:
    cat, root = lake
    cat.purge_table("ns.t")
    bad = root / purge.FOLDER / "00000000000000000001-bad.json"
    bad.write_text(json.dumps({"format": 99}))
    result = expire(cat)
    assert result.damaged == (f"{purge.FOLDER}/{bad.name}",)
    assert result.purged_tables == 1
    assert bad.exists()


def test_the_cli_expire_runs_due_purges(lake) -> None:
    cat, root = lake
    cat.purge_table("ns.t")
    command = [sys.executable, "-m", "olympia.cli", "expire", "-w", f"file://{root}", "--json"]
    command += ["--keep-last", "1", "--grace-seconds", "0", "--allow-short-grace"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["purged_tables"] == 1 and report["deleted_table_files"] >= 4
    assert files(root, "ns.db/t/") == []


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_a_dry_run_counts_the_purges_a_run_would_make_and_changes_nothing(lake) -> None:
    cat, root = lake
    cat.purge_table("ns.t")
    before = _tree(root)
    dry = cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True, dry_run=True)
    assert dry.dry_run and dry.paths
    assert (dry.purges.purged_tables, dry.purges.pending_tables) == (1, 0)
    assert dry.purges.deleted_files == 0
    assert _tree(root) == before  # not a byte written or deleted
    real = expire(cat)
    assert (real.purged_tables, real.pending_tables) == (1, 0)
    assert files(root, "ns.db/t/") == []


def test_a_dry_run_keeps_a_purge_a_pin_holds_back_pending(lake) -> None:
    cat, root = lake
    cat.olympia.export_snapshot("keep", f"file://{root.parent}/export")
    cat.purge_table("ns.t")
    dry = cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True, dry_run=True)
    assert (dry.purges.purged_tables, dry.purges.pending_tables) == (0, 1)
    assert files(root, "ns.db/t/")


def _metadata_of(cat: OlympiaCatalog, name: str) -> str:
    return cat.load_table(name).metadata_location


def test_a_register_in_an_open_transaction_holds_back_a_due_purge(lake) -> None:
    """The purged table registered again inside a transaction left open while
    expiration ran: the purge deleted the files the transaction had
    registered, and its commit then published a table whose metadata was
    gone. The register holds the purge back (its claim), the run skips it,
    and the commit undoes the purge (its record goes)."""
    cat, root = lake
    metadata = _metadata_of(cat, "ns.t")
    kept = files(root, "ns.db/t/")
    cat.purge_table("ns.t")
    tx = cat.begin()
    tx.register_table("ns.back", metadata)
    result = expire(cat)
    assert (result.purged_tables, result.pending_tables, result.deleted_files) == (0, 1, 0)
    assert files(root, "ns.db/t/") == kept
    tx.commit()
    assert ids_of(cat.load_table("ns.back")) == [1, 2]
    assert purge.records(cat) == ([], [])
    assert not list((root / purge.FOLDER).iterdir())  # no claim left either
    assert expire(cat).purged_tables == 0
    assert ids_of(cat.load_table("ns.back")) == [1, 2]


def _two_registers_of_a_purged_table(cat: OlympiaCatalog) -> tuple[Any, Any]:
    """ns.t purged, then registered again by two open transactions."""
    metadata = _metadata_of(cat, "ns.t")
    cat.purge_table("ns.t")
    first, second = cat.begin(), cat.begin()
    first.register_table("ns.back", metadata)
    second.register_table("ns.again", metadata)
    return first, second


def test_a_register_rolled_back_gives_the_purge_back(lake) -> None:
    """A rolled-back register left its claim for good (another open register
    might share it), so the purged table's files were never deleted. Each
    register now holds the purge with a file of its own: the last one to
    end without committing gives the purge back to expiration."""
    cat, root = lake
    kept = files(root, "ns.db/t/")
    first, second = _two_registers_of_a_purged_table(cat)
    first.rollback()
    # The second still holds it: nothing is deleted.
    assert expire(cat).purged_tables == 0
    assert files(root, "ns.db/t/") == kept
    second.rollback()
    assert expire(cat).purged_tables == 1
    assert files(root, "ns.db/t/") == []
    assert purge.records(cat) == ([], [])
    assert not list((root / purge.FOLDER).iterdir())  # no claim or hold left


def test_a_register_refused_at_commit_gives_the_purge_back(lake) -> None:
    """A register whose commit is refused (here: the name was taken
    meanwhile) published nothing and gives its hold back too."""
    cat, root = lake
    metadata = _metadata_of(cat, "ns.t")
    cat.purge_table("ns.t")
    tx = cat.begin()
    tx.register_table("ns.back", metadata)
    cat.create_table("ns.back", SCHEMA)
    with pytest.raises(Exception, match="back"):
        tx.commit()
    assert expire(cat).purged_tables == 1
    assert files(root, "ns.db/t/") == []


def test_a_register_that_shared_a_claim_now_gone_still_holds_the_purge(lake) -> None:
    """A register that found another's claim relies on its own hold: when the
    other ends and the claim goes, a run sees the hold and waits."""
    cat, root = lake
    kept = files(root, "ns.db/t/")
    first, second = _two_registers_of_a_purged_table(cat)
    (rec,), _ = purge.records(cat)
    storage = cat.olympia.store.storage
    storage.delete(purge.hold_path(rec, first.id))
    storage.delete(purge.claim_path(rec))  # as an earlier build's rollback might leave it
    assert expire(cat).purged_tables == 0
    assert files(root, "ns.db/t/") == kept
    assert not storage.exists(purge.claim_path(rec))  # the run gave its claim back
    second.commit()
    assert ids_of(cat.load_table("ns.again")) == [1, 2]
    assert purge.records(cat) == ([], [])
    assert expire(cat).purged_tables == 0
    assert ids_of(cat.load_table("ns.again")) == [1, 2]


def test_a_register_while_a_run_deletes_the_files_is_refused(lake) -> None:
    cat, root = lake
    metadata = _metadata_of(cat, "ns.t")
    cat.purge_table("ns.t")
    (rec,), _ = purge.records(cat)
    storage = cat.olympia.store.storage
    assert purge.claim(storage, rec, purge.PURGING) == (True, purge.PURGING)  # a run's claim
    with pytest.raises(ValueError, match="ns.t .*purged by version .* are being deleted"):
        cat.register_table("ns.back", metadata)
    assert not cat.table_exists("ns.back")
    # The run that claimed it carries on (a run that died midway is completed).
    assert expire(cat).purged_tables == 1
    assert files(root, "ns.db/t/") == []


def test_a_register_after_a_run_finished_is_refused(lake) -> None:
    cat, _ = lake
    metadata = _metadata_of(cat, "ns.t")
    cat.purge_table("ns.t")
    assert expire(cat).purged_tables == 1
    with pytest.raises(Exception, match="metadata"):
        cat.register_table("ns.back", metadata)
    assert not cat.table_exists("ns.back")


def test_a_run_racing_a_register_keeps_the_registered_table_whole(lake, monkeypatch) -> None:
    """The register commits between the run's claim and its deletions: it
    is refused before it stages anything, so no published table names a
    deleted file."""
    cat, root = lake
    metadata = _metadata_of(cat, "ns.t")
    cat.purge_table("ns.t")
    refused: list[BaseException] = []
    real = purge._kept_files

    def kept_then_register(*args, **kwargs):  # type: ignore[no-untyped-def]
        try:
            cat.register_table("ns.back", metadata)
        except ValueError as exc:
            refused.append(exc)
        return real(*args, **kwargs)

    monkeypatch.setattr(purge, "_kept_files", kept_then_register)
    assert expire(cat).purged_tables == 1
    assert len(refused) == 1 and not cat.table_exists("ns.back")
    assert files(root, "ns.db/t/") == []


def test_a_purge_in_a_distributed_transaction_is_recorded_by_whoever_commits_it(lake) -> None:
    cat, root = lake
    tx = cat.begin()
    tx.purge_table("ns.t")
    txn_id = tx.distribute()
    other = olympia_catalog(f"file://{root}")  # as another process
    assert isinstance(other, OlympiaCatalog)
    version = other.resume(txn_id).commit()
    (record,), _ = purge.records(cat)
    assert (record.table, record.version) == ("ns.t", version)
    assert expire(cat).purged_tables == 1
    assert files(root, "ns.db/t/") == []


def test_a_register_in_a_distributed_transaction_releases_the_purge_when_committed_elsewhere(
    lake,
) -> None:
    cat, root = lake
    metadata = _metadata_of(cat, "ns.t")
    cat.purge_table("ns.t")
    tx = cat.begin()
    tx.register_table("ns.back", metadata)
    txn_id = tx.distribute()
    assert expire(cat).purged_tables == 0
    other = olympia_catalog(f"file://{root}")
    assert isinstance(other, OlympiaCatalog)
    other.resume(txn_id).commit()
    assert purge.records(cat) == ([], [])
    assert ids_of(cat.load_table("ns.back")) == [1, 2]
