"""Multi-table Iceberg transactions on OlympiaCatalog (spec/iceberg.md §6):
atomic commit, snapshot reads, rollback without orphaned files, distributed
transactions resumed in another process, and S3 through moto."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from iceberg_helpers import files_under, ids_of, olympia_catalog, rows, table_files
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

import olympia
from olympia.iceberg import CommitConflictException, IcebergTransaction, OlympiaCatalog
from olympia.proto.actions_pb2 import ActionType

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "v", StringType(), required=False),
)


@pytest.fixture
def lake(tmp_path: Path) -> tuple[OlympiaCatalog, Path]:
    root = tmp_path / "lake"
    cat = olympia_catalog(f"file://{root}")
    assert isinstance(cat, OlympiaCatalog)
    cat.create_namespace("ns")
    cat.create_table("ns.a", SCHEMA).append(rows([1]))
    cat.create_table("ns.b", SCHEMA).append(rows([2]))
    return cat, root


def test_multi_table_commit_is_one_version(lake: tuple[OlympiaCatalog, Path]) -> None:
    cat, _ = lake
    before = cat.olympia.version
    with cat.transaction() as tx:
        assert isinstance(tx, IcebergTransaction)
        tx.load_table("ns.a").append(rows([10]))
        tx.load_table("ns.b").append(rows([20]))
        tx.create_table("ns.c", SCHEMA).append(rows([30]))
        # Nothing is visible outside before the commit.
        assert ids_of(cat.load_table("ns.a")) == [1]
        assert not cat.table_exists("ns.c")
    assert cat.olympia.version == before + 1
    assert ids_of(cat.load_table("ns.a")) == [1, 10]
    assert ids_of(cat.load_table("ns.b")) == [2, 20]
    assert ids_of(cat.load_table("ns.c")) == [30]
    last = cat.olympia.history()[-1]
    written = {
        (a.table.namespace, a.table.name)
        for a in last.actions
        if a.type in (ActionType.TABLE_CREATE, ActionType.TABLE_UPDATE)
    }
    assert written == {("ns", "a"), ("ns", "b"), ("ns", "c")}


def test_transaction_reads_its_snapshot_and_own_writes(lake: tuple[OlympiaCatalog, Path]) -> None:
    cat, _ = lake
    tx = cat.begin()
    table = tx.load_table("ns.a")
    table.append(rows([5]))
    cat.load_table("ns.b").append(rows([99]))  # committed outside, after begin
    assert ids_of(tx.load_table("ns.a")) == [1, 5]
    assert ids_of(tx.load_table("ns.b")) == [2]
    with table.update_schema() as update:  # a second staged commit of the same table
        update.rename_column("v", "label")
    assert [f.name for f in tx.load_table("ns.a").schema().fields] == ["id", "label"]
    state = tx.tables[("ns", "a")]
    assert len(state.commits) == 2 and state.base_location is not None
    assert tx.commit() == cat.olympia.version
    loaded = cat.load_table("ns.a")
    assert ids_of(loaded) == [1, 5] and loaded.schema().fields[1].name == "label"
    assert ids_of(cat.load_table("ns.b")) == [2, 99]


def test_scans_and_delete_filters_are_recorded(lake: tuple[OlympiaCatalog, Path]) -> None:
    cat, _ = lake
    with cat.transaction(isolation="serializable") as tx:
        a = tx.load_table("ns.a")
        assert a.scan(row_filter="id > 0").to_arrow().num_rows == 1
        b = tx.load_table("ns.b")
        b.delete("id = 2")
        state_a, state_b = tx.tables[("ns", "a")], tx.tables[("ns", "b")]
        assert [str(s.row_filter) for s in state_a.scans] == [
            "GreaterThan(term=Reference(name='id'), literal=LongLiteral(0))"
        ]
        assert state_a.commits == []
        assert state_b.commits and state_b.commits[-1].conflict_filter is not None
        assert "id" in str(state_b.commits[-1].conflict_filter)
    assert ids_of(cat.load_table("ns.b")) == []


def test_rollback_changes_nothing_and_leaves_no_file(lake: tuple[OlympiaCatalog, Path]) -> None:
    cat, root = lake
    files = table_files(root)
    version = cat.olympia.version
    tx = cat.begin()
    tx.load_table("ns.a").append(rows([7, 8]))
    tx.load_table("ns.b").overwrite(rows([9]))
    tx.create_table("ns.c", SCHEMA).append(rows([3]))
    assert table_files(root) != files
    tx.rollback()
    assert tx.status == "rolled_back"
    assert table_files(root) == files
    assert cat.olympia.version == version
    assert ids_of(cat.load_table("ns.a")) == [1] and ids_of(cat.load_table("ns.b")) == [2]
    assert not cat.table_exists("ns.c")


def test_a_rollback_keeps_the_files_a_committed_snapshot_reads(
    lake: tuple[OlympiaCatalog, Path],
) -> None:
    """A staged snapshot that lists files the table holds already as added
    (add_files without its duplicate check) does not make them the
    transaction's: its rollback deletes only what it wrote."""
    cat, root = lake
    files = table_files(root)
    held = [task.file.file_path for task in cat.load_table("ns.a").scan().plan_files()]
    assert held
    tx = cat.begin()
    tx.load_table("ns.a").add_files(held, check_duplicate_files=False)
    assert sorted(ids_of(tx.load_table("ns.a"))) == [1, 1]
    assert table_files(root) != files
    tx.rollback()
    assert table_files(root) == files
    assert ids_of(cat.load_table("ns.a")) == [1]


def test_a_resumed_rollback_keeps_what_it_cannot_tell_is_not_committed(
    lake: tuple[OlympiaCatalog, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """A resumed transaction finds its files again from staged metadata: it
    deletes them only once it can tell that no committed version reads them."""
    cat, root = lake
    files = table_files(root)
    tx = cat.begin()
    tx.load_table("ns.a").append(rows([5]))
    written = table_files(root) - files
    assert any(f.endswith(".parquet") for f in written)
    resumed = cat.resume(tx.distribute())
    # A manifest of the committed table goes missing: which files the table
    # reads cannot be told any more, so the rollback deletes none of them.
    committed = cat.load_table("ns.a").current_snapshot()
    assert committed is not None
    manifest = committed.manifests(cat.load_table("ns.a").io)[0].manifest_path
    Path(manifest.removeprefix("file://")).unlink()
    with caplog.at_level("WARNING", logger="olympia"):
        resumed.rollback()
    assert written <= table_files(root)
    assert "leaves the" in caplog.text and "cannot be read" in caplog.text
    assert resumed.status == "rolled_back"


def test_a_rebased_commit_leaves_no_manifest_of_its_first_attempt(
    lake: tuple[OlympiaCatalog, Path],
) -> None:
    """The manifest list and manifests a transaction staged before a
    concurrent commit made it rebase are deleted once the rebased commit
    stands: every manifest file left is one the table's snapshots read."""
    cat, root = lake
    tx = cat.begin()
    tx.load_table("ns.a").append(rows([7]))
    cat.load_table("ns.a").append(rows([8]))  # a concurrent commit: the transaction rebases
    tx.commit()
    table = cat.load_table("ns.a")
    assert sorted(ids_of(table)) == [1, 7, 8]
    referenced = set()
    for snapshot in table.metadata.snapshots:
        referenced.add(snapshot.manifest_list)
        referenced |= {m.manifest_path for m in snapshot.manifests(table.io)}
    on_disk = {f for f in table_files(root) if f.startswith("ns.db/a/") and f.endswith(".avro")}
    assert on_disk == {str(Path(p.removeprefix("file://")).relative_to(root)) for p in referenced}


def test_exception_in_with_block_rolls_back(lake: tuple[OlympiaCatalog, Path]) -> None:
    cat, root = lake
    files = table_files(root)
    version = cat.olympia.version
    with pytest.raises(RuntimeError, match="boom"), cat.transaction() as tx:
        tx.load_table("ns.a").append(rows([7]))
        tx.drop_table("ns.b")
        raise RuntimeError("boom")
    assert table_files(root) == files
    assert cat.olympia.version == version
    assert ids_of(cat.load_table("ns.a")) == [1] and cat.table_exists("ns.b")


def test_conflicting_transaction_is_refused_and_cleans_up(
    lake: tuple[OlympiaCatalog, Path],
) -> None:
    cat, root = lake
    files = table_files(root)
    dropper, writer = cat.begin(), cat.begin()
    writer.load_table("ns.a").append(rows([4]))
    dropper.drop_table("ns.a")
    dropper.commit()
    with pytest.raises(CommitConflictException) as info:
        writer.commit()
    assert isinstance(info.value, CommitFailedException)
    assert "ns.a" in info.value.table and info.value.version == cat.olympia.version
    assert table_files(root) == files  # the writer's files are gone; the dropped table's stay
    with pytest.raises(NoSuchTableError):
        cat.load_table("ns.a")


def test_failed_requirement_in_single_commit_writes_no_metadata(
    lake: tuple[OlympiaCatalog, Path],
) -> None:
    cat, root = lake
    stale = cat.load_table("ns.a")
    with cat.load_table("ns.a").update_spec() as spec:
        spec.add_identity("v")
    current = cat.load_table("ns.a").metadata_location
    files = {f for f in table_files(root) if f.endswith(".metadata.json")}
    with pytest.raises(CommitFailedException, match="partition"), stale.update_spec() as spec:
        spec.add_identity("id")
    assert {f for f in table_files(root) if f.endswith(".metadata.json")} == files
    assert cat.load_table("ns.a").metadata_location == current


def _run(code: str, cwd: Path) -> str:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path.cwd()), str(Path(__file__).parent)]),
    }
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_distribute_and_commit_in_another_process(lake: tuple[OlympiaCatalog, Path]) -> None:
    cat, root = lake
    tx = cat.begin()
    tx.load_table("ns.a").append(rows([11]))
    txn_id = tx.distribute()
    out = _run(
        f"""
        from iceberg_helpers import olympia_catalog, rows, ids_of
        cat = olympia_catalog("file://{root}")
        tx = cat.resume({txn_id!r})
        state = tx.tables[("ns", "a")]
        assert len(state.commits) == 1 and not state.recovered
        assert any(f.endswith(".parquet") for f in tx.written_files)
        assert ids_of(tx.load_table("ns.a")) == [1, 11]
        tx.load_table("ns.b").append(rows([22]))
        print(tx.commit())
        """,
        root,
    )
    assert int(out) == cat.olympia.version
    assert ids_of(cat.load_table("ns.a")) == [1, 11]
    assert ids_of(cat.load_table("ns.b")) == [2, 22]
    assert not (root / "iceberg-txn" / f"{txn_id}.json").exists()


@pytest.mark.parametrize("sidecar", ["kept", "lost"])
def test_distribute_and_rollback_in_another_process(
    lake: tuple[OlympiaCatalog, Path], sidecar: str
) -> None:
    """Rollback after resume deletes what the transaction wrote, from its
    sidecar, or (sidecar lost) from its actions and staged metadata."""
    cat, root = lake
    files = table_files(root)
    version = cat.olympia.version
    tx = cat.begin()
    tx.load_table("ns.a").append(rows([11]))
    tx.create_table("ns.c", SCHEMA).append(rows([12]))
    txn_id = tx.distribute()
    assert table_files(root) != files
    state_file = root / "iceberg-txn" / f"{txn_id}.json"
    assert state_file.exists()
    if sidecar == "lost":
        state_file.unlink()
    _run(
        f"""
        from iceberg_helpers import olympia_catalog
        cat = olympia_catalog("file://{root}")
        cat.resume({txn_id!r}).rollback()
        """,
        root,
    )
    assert table_files(root) == files
    assert not state_file.exists()
    # The distributed transaction's own catalog object came and went; no table changed.
    assert cat.olympia.version == version + 2
    assert ids_of(cat.load_table("ns.a")) == [1] and not cat.table_exists("ns.c")


def test_s3_through_moto(moto_server: Any) -> None:
    uri, _ = moto_server.location("iceberg")
    props = {
        "s3.endpoint": moto_server.endpoint_url,
        "s3.region": "us-east-1",
        "s3.access-key-id": "testing",
        "s3.secret-access-key": "testing",
    }
    cat = olympia_catalog(uri, **props)
    cat.create_namespace("ns")
    table = cat.create_table("ns.t", SCHEMA)
    assert table.location() == f"{uri}/ns.db/t"
    table.append(rows([1, 2]))
    assert ids_of(cat.load_table("ns.t")) == [1, 2]
    with cat.transaction() as tx:  # type: ignore[attr-defined]
        tx.load_table("ns.t").append(rows([3]))
        tx.create_table("ns.u", SCHEMA).append(rows([4]))
    again = olympia_catalog(uri, **props)
    assert ids_of(again.load_table("ns.t")) == [1, 2, 3]
    assert ids_of(again.load_table("ns.u")) == [4]
    keys = {
        o["Key"]
        for o in moto_server.boto3_client().list_objects_v2(
            Bucket=moto_server.bucket, Prefix=uri.split("/", 3)[3]
        )["Contents"]
    }
    assert any("/ns.db/t/data/" in k for k in keys) and any("/vn/" in k for k in keys)


def test_files_outside_tables_are_the_catalogs_own(lake: tuple[OlympiaCatalog, Path]) -> None:
    _, root = lake
    tops = {f.split(os.sep, 1)[0] for f in files_under(root)}
    tops.discard(".olympia-tmp")  # the local backend's temporary files (format.md §2)
    assert "ns.db" in tops
    assert all(t.endswith(".db") or (not t.endswith(".db") and "." not in t) for t in tops)


def test_merge_hook_rebases_the_changed_tables(
    lake: tuple[OlympiaCatalog, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The content merge given to the core: keys() names the tables written or
    scanned; rebase() hands each changed table to rebase.rebase_table (written)
    or rebase.check_scans (only scanned) and writes the rebased metadata."""
    from pyiceberg.table.update import update_table_metadata

    from olympia.iceberg import rebase
    from olympia.iceberg.rebase import Rebased

    cat, _ = lake
    tx = cat.begin(isolation="serializable")
    tx.load_table("ns.a").transaction().set_properties(ours="1").commit_transaction()
    tx.load_table("ns.b").scan(row_filter="id = 2").to_arrow()
    keys = tx.key_codec()
    key_a, key_b = keys.table("ns", "a"), keys.table("ns", "b")
    assert sorted(tx.merge.keys()) == sorted([key_a, key_b])

    cat.load_table("ns.a").transaction().set_properties(theirs="1").commit_transaction()
    cat.load_table("ns.b").append(rows([3]))
    calls: list[tuple[str, int | None, int]] = []

    def fake_rebase(
        io,
        table,
        base,
        commits,
        theirs,
        *,
        isolation,
        scans=(),
        reads=None,
        version=None,
        **_,
    ):  # type: ignore[no-untyped-def]
        calls.append((table, version, len(commits)))
        metadata = theirs
        for commit in commits:
            metadata = update_table_metadata(metadata, commit.updates)
        return Rebased(metadata)

    def fake_check(io, table, base, theirs, scans, *, isolation, version=None):  # type: ignore[no-untyped-def]
        calls.append((table, version, len(scans)))

    monkeypatch.setattr(rebase, "rebase_table", fake_rebase)
    monkeypatch.setattr(rebase, "check_scans", fake_check)
    latest = cat.olympia.latest()
    out = tx.merge.rebase(latest, [key_a, key_b])
    assert list(out) == [key_a]
    merged = cat.read_metadata(out[key_a])
    assert merged.properties["ours"] == "1" and merged.properties["theirs"] == "1"
    theirs_location = latest.describe_table("ns", "a").metadata_location
    assert out[key_a].rsplit("/", 1)[-1].startswith("00003-")
    assert theirs_location.rsplit("/", 1)[-1].startswith("00002-")
    assert calls == [("ns.a", latest.version, 1), ("ns.b", latest.version, 1)]
    staged = tx.olympia_transaction.describe_table("ns", "a").metadata_location
    assert tx.merge.obsolete_files == [staged]
    assert tx.tables[("ns", "a")].metadata_files == [out[key_a]]
    tx.rollback()


def _append_loop(warehouse: str, first: int, count: int) -> None:
    cat = olympia_catalog(warehouse)
    for i in range(count):
        cat.load_table("ns.a").append(rows([first + i]))


def test_two_processes_appending_to_one_table(lake: tuple[OlympiaCatalog, Path]) -> None:
    """Every row lands: a commit that lost to the other process is retried by
    PyIceberg on the newer table (its CommitFailedException is ours)."""
    import multiprocessing

    cat, root = lake
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_append_loop, args=(str(root), b, 6)) for b in (100, 200)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
    assert [p.exitcode for p in procs] == [0, 0]
    assert ids_of(cat.load_table("ns.a")) == [1, *range(100, 106), *range(200, 206)]


def _apply_on_theirs(
    io, table, base, commits, theirs, *, isolation, scans=(), reads=None, version=None, **_
):  # type: ignore[no-untyped-def]
    """A stand-in for rebase.rebase_table: the staged updates applied on theirs."""
    from pyiceberg.table.update import update_table_metadata

    from olympia.iceberg.rebase import Rebased

    metadata = theirs
    for commit in commits:
        metadata = update_table_metadata(metadata, commit.updates)
    return Rebased(metadata)


def test_core_hook_merges_concurrent_commits_to_one_table(
    lake: tuple[OlympiaCatalog, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the core's content-merge hook: two transactions change one
    table; the second is rebased on the first instead of refused."""
    from olympia.iceberg import rebase

    cat, _ = lake
    monkeypatch.setattr(rebase, "rebase_table", _apply_on_theirs)
    first, second = cat.begin(), cat.begin()
    first.load_table("ns.a").transaction().set_properties(first="1").commit_transaction()
    second.load_table("ns.a").transaction().set_properties(second="2").commit_transaction()
    first.commit()
    version = second.commit()
    assert version == cat.olympia.version
    props = cat.load_table("ns.a").properties
    assert props["first"] == "1" and props["second"] == "2"
    assert ids_of(cat.load_table("ns.a")) == [1]


def test_core_hook_refusal_publishes_nothing_and_cleans_up(
    lake: tuple[OlympiaCatalog, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from olympia.iceberg import rebase

    def refuse(io, table, base, commits, theirs, *, isolation, version=None, **_):  # type: ignore[no-untyped-def]
        raise CommitConflictException(
            f"{table}: refused", table=table, version=version, rule="removed-file-gone"
        )

    cat, root = lake
    monkeypatch.setattr(rebase, "rebase_table", refuse)
    first, second = cat.begin(), cat.begin()
    first.load_table("ns.a").append(rows([5]))
    second.load_table("ns.a").append(rows([6]))
    first.commit()
    files = table_files(root)
    second_files = [f for f in second.written_files]
    assert second_files
    with pytest.raises(CommitConflictException) as info:
        second.commit()
    assert info.value.rule == "removed-file-gone" and info.value.table == "ns.a"
    assert second.status == "failed"
    assert table_files(root) == files - {
        os.path.relpath(f.removeprefix("file://"), root) for f in second_files
    }
    assert ids_of(cat.load_table("ns.a")) == [1, 5]


def test_resumed_transaction_is_rebased_from_its_sidecar(
    lake: tuple[OlympiaCatalog, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from olympia.iceberg import rebase

    cat, _ = lake
    monkeypatch.setattr(rebase, "rebase_table", _apply_on_theirs)
    tx = cat.begin()
    tx.load_table("ns.a").transaction().set_properties(staged="1").commit_transaction()
    txn_id = tx.distribute()
    cat.load_table("ns.a").transaction().set_properties(other="2").commit_transaction()
    resumed = olympia_catalog(cat.warehouse).resume(txn_id)  # type: ignore[attr-defined]
    assert [len(s.commits) for s in resumed.tables.values()] == [1]
    resumed.commit()
    props = cat.load_table("ns.a").properties
    assert props["staged"] == "1" and props["other"] == "2"


@pytest.mark.parametrize("where", ["local", "s3"])
@pytest.mark.parametrize("impl", ["pyarrow", "fsspec"])
def test_write_times_are_read_through_each_file_io(
    where: str, impl: str, tmp_path: Path, moto_server: Any
) -> None:
    """A rollback keeps claimed files written before its begin version
    (spec/iceberg.md §6), so the time storage gives a file must be read
    right through both of PyIceberg's FileIOs, locally and on S3; a FileIO
    that cannot tell gives None (the file is kept)."""
    from pyiceberg.io import FileIO, load_file_io

    from olympia.iceberg import filetimes

    props: dict[str, str] = {
        "py-io-impl": f"pyiceberg.io.{impl}.{'PyArrowFileIO' if impl == 'pyarrow' else 'FsspecFileIO'}"
    }
    if where == "s3":
        uri, _ = moto_server.location(f"mtime-{impl}")
        props |= {
            "s3.endpoint": moto_server.endpoint_url,
            "s3.region": "us-east-1",
            "s3.access-key-id": "testing",
            "s3.secret-access-key": "testing",
        }
    else:
        uri = f"file://{tmp_path}"
    io = load_file_io(props, uri)
    path = f"{uri}/data/f.parquet"
    started = time.time() * 1000
    with io.new_output(path).create() as out:
        out.write(b"x")
    written = filetimes.modified_millis(io, path)
    assert written is not None
    # S3 gives seconds (the Last-Modified header): up to a second below.
    assert started - 1500 <= written <= time.time() * 1000 + 1500
    assert filetimes.written_before(io, [path], int(written) + 5000) == {path}
    assert filetimes.written_before(io, [path], int(written) - 5000) == set()
    with pytest.raises(FileNotFoundError):
        filetimes.modified_millis(io, f"{uri}/data/missing.parquet")
    assert (
        filetimes.written_before(io, [f"{uri}/data/missing.parquet"], int(written) + 5000) == set()
    )

    class Opaque(FileIO):  # a FileIO of its own: no file system to ask
        def new_input(self, location: str) -> Any:
            return object()  # neither PyArrowFile nor FsspecInputFile

        def new_output(self, location: str) -> Any:
            raise NotImplementedError

        def delete(self, location: Any) -> None:
            raise NotImplementedError

    assert filetimes.modified_millis(Opaque(), path) is None
    assert filetimes.written_before(Opaque(), [path], 0) == {path}


def test_a_location_provider_named_by_a_table_property_is_refused(
    lake: tuple[OlympiaCatalog, Path],
) -> None:
    """``write.py-location-provider.impl`` would make the catalog import and
    call a class a table property names (the REST server too, for its
    clients): refused on create and on commit, nothing imported."""
    cat, _ = lake
    impl = {"write.py-location-provider.impl": "os.system"}
    with pytest.raises(ValueError, match="write.py-location-provider.impl"):
        cat.create_table("ns.p", SCHEMA, properties=impl)
    assert not cat.table_exists("ns.p")
    table = cat.create_table("ns.p", SCHEMA)
    with pytest.raises(ValueError, match="never imports a class a table property names"):
        table.transaction().set_properties(impl).commit_transaction()
    assert "write.py-location-provider.impl" not in cat.load_table("ns.p").properties
    table.transaction().set_properties(
        {"write.object-storage.enabled": "true"}
    ).commit_transaction()
    assert cat.load_table("ns.p").properties["write.object-storage.enabled"] == "true"


def test_a_rebased_transaction_logs_the_metadata_it_follows(
    lake: tuple[OlympiaCatalog, Path],
) -> None:
    """The metadata a rebased transaction writes follows the concurrent
    commit's file: that file is in its metadata log (it used to be skipped,
    left reachable from nothing but the catalog version that holds it)."""
    cat, root = lake
    tx = cat.transaction()  # type: ignore[attr-defined]
    tx.load_table("ns.a").append(rows([5]))
    other = olympia_catalog(f"file://{root}")
    other.load_table("ns.a").append(rows([6]))
    theirs = other.load_table("ns.a").metadata_location
    tx.commit()
    table = cat.load_table("ns.a")
    assert sorted(ids_of(table)) == [1, 5, 6]
    logged = [entry.metadata_file for entry in table.metadata.metadata_log]
    assert logged[-1] == theirs
    assert len(logged) == len(set(logged))


@pytest.mark.parametrize("ending", ["commit", "rollback"])
def test_a_table_of_an_ended_transaction_writes_nothing(
    lake: tuple[OlympiaCatalog, Path], ending: str
) -> None:
    """A table loaded through a transaction and used after it ended: a
    TransactionClosedError, and no data file, manifest or list left behind
    (after a rollback it used to fail with pyarrow's FileNotFoundError for
    the staged manifest list the rollback deleted)."""
    cat, root = lake
    tx = cat.transaction()  # type: ignore[attr-defined]
    table = tx.load_table("ns.a")
    table.append(rows([5]))
    getattr(tx, ending)()
    before = table_files(root)
    with pytest.raises(olympia.TransactionClosedError, match=f"is {tx.status}"):
        table.append(rows([6]))
    assert table_files(root) == before
    assert sorted(ids_of(cat.load_table("ns.a"))) == ([1, 5] if ending == "commit" else [1])


@pytest.mark.parametrize("isolation", ["snapshot", "serializable"])
def test_two_upserts_of_one_new_key(lake: tuple[OlympiaCatalog, Path], isolation: str) -> None:
    """Each upsert found no row for id 7 and appended one. Under
    SERIALIZABLE the second must be refused (one after the other, it would
    have found the first's row and updated it); under SNAPSHOT both land,
    as two appends do (spec/iceberg.md §8)."""
    cat, _ = lake
    first = cat.begin(isolation=isolation)  # type: ignore[attr-defined]
    second = cat.begin(isolation=isolation)  # type: ignore[attr-defined]
    first.load_table("ns.a").upsert(rows([7], "one"), join_cols=["id"])
    second.load_table("ns.a").upsert(rows([7], "two"), join_cols=["id"])
    first.commit()
    if isolation == "serializable":
        with pytest.raises(CommitConflictException) as refused:
            second.commit()
        assert refused.value.rule == "scan-filter-matches"
        assert sorted(ids_of(cat.load_table("ns.a"))) == [1, 7]
    else:
        second.commit()
        assert sorted(ids_of(cat.load_table("ns.a"))) == [1, 7, 7]


def test_expiration_rolls_back_an_expired_distributed_transaction_with_its_files(
    tmp_path: Path,
) -> None:
    """A distributed transaction nobody committed or rolled back before its
    TTL: expiration dropped its object, and the data files, manifests,
    metadata and sidecar it wrote stayed for good (nothing could find them
    again). Expiration now rolls it back with them first (spec/iceberg.md
    §6, "Expiry"); a committed table keeps every file."""
    root = tmp_path / "lake"
    olympia.create_catalog(str(root), distributed_txn_ttl_millis=1500)
    cat = olympia_catalog(f"file://{root}")
    assert isinstance(cat, OlympiaCatalog)
    cat.create_namespace("ns")
    cat.create_table("ns.a", SCHEMA).append(rows([1]))
    files = table_files(root)
    tx = cat.begin()
    tx.load_table("ns.a").append(rows([11]))
    tx.create_table("ns.c", SCHEMA).append(rows([12]))
    txn_id = tx.distribute()
    kept = cat.begin()  # one committed after it, whose files stay
    kept.create_table("ns.d", SCHEMA).append(rows([13]))
    kept.commit()
    files_after_d = table_files(root)
    sidecar_file = root / "iceberg-txn" / f"{txn_id}.json"
    assert sidecar_file.exists()
    assert any(
        f.startswith(f"ns.db{os.sep}c") and f.endswith(".parquet") for f in table_files(root)
    )
    time.sleep(1.6)
    result = cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
    assert result.dropped_transactions == (txn_id,)
    assert not sidecar_file.exists()
    d_files = {f for f in files_after_d if f.startswith(f"ns.db{os.sep}d")}
    assert d_files and d_files <= table_files(root)
    assert table_files(root) == files | d_files
    assert ids_of(cat.load_table("ns.a")) == [1]
    assert ids_of(cat.load_table("ns.d")) == [13]
    assert not cat.table_exists("ns.c")
    assert cat.olympia.list_transactions(include_expired=True) == []
    # The handle still open in this process can no longer commit it.
    with pytest.raises(CommitFailedException, match="transaction-claimed|rolled back"):
        tx.commit()
    assert ids_of(cat.load_table("ns.a")) == [1]


def test_a_rollback_deletes_the_hadoop_checksum_files_beside_what_it_wrote(
    lake: tuple[OlympiaCatalog, Path],
) -> None:
    """Spark on a local warehouse writes `.<name>.crc` beside each file; a
    rolled-back transaction's files went and their checksum files stayed
    (34 after one probe), named by nothing."""
    from olympia.iceberg.deletes import checksum_file

    cat, root = lake
    files = table_files(root)
    tx = cat.begin()
    tx.load_table("ns.a").append(rows([11]))
    tx.create_table("ns.c", SCHEMA).append(rows([12]))
    written = table_files(root) - files
    assert any(f.endswith(".parquet") for f in written)
    for name in written:  # as Hadoop's local file system would
        crc = checksum_file(str(root / name))
        assert crc is not None
        Path(crc).write_bytes(b"crc\x00\x00\x00\x02\x00")
    # A file of that name that is no checksum file (a table's data file, say) stays.
    lookalike = next(root / n for n in written if n.endswith(".parquet"))
    kept = Path(checksum_file(str(lookalike)) or "")
    kept.write_bytes(b"PAR1 a data file named like a checksum file")
    tx.rollback()
    assert table_files(root) == files | {str(kept.relative_to(root))}
    assert checksum_file("s3://bucket/t/data/x.parquet") is None
    assert checksum_file("file:/w/t/data/x.parquet") == "file:/w/t/data/.x.parquet.crc"
