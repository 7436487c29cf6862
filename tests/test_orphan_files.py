"""Orphan files (spec/iceberg.md §4, "Orphan files"): a file is an orphan
only when no kept catalog version reaches it. Iceberg's own clean-up
(Spark's remove_orphan_files) keeps only what the current metadata reaches,
and deleted what older catalog versions read: the table before a catalog
rollback, a table dropped and created again at the same place, metadata
files that write.metadata.previous-versions-max dropped from the log."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from iceberg_helpers import files_under, ids_of, olympia_catalog, rows
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.schema import Schema
from pyiceberg.table import StaticTable
from pyiceberg.types import LongType, NestedField, StringType

import olympia
from olympia.iceberg import OlympiaCatalog

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "v", StringType(), required=False),
)


def age(root: Path, days: float = 4.0) -> None:
    """Make every file under ``root`` look ``days`` old (a weekly clean-up)."""
    past = time.time() - days * 86400
    for folder, _, files in os.walk(root):
        for name in files:
            os.utime(os.path.join(folder, name), (past, past))


def every_kept_version_reads(cat: OlympiaCatalog) -> int:
    """Scan every table of every kept catalog version; the rows read."""
    core = cat.olympia
    read = 0
    for version in range(core.oldest_version, core.version + 1):
        view = core.at_version(version)
        for namespace in view.list_namespaces():
            for name in view.list_tables(namespace):
                location = view.describe_table(namespace, name).metadata_location
                table = StaticTable.from_metadata(location, properties=cat.properties)
                read += len(table.scan().to_arrow())
    return read


def history(tmp_path: Path) -> tuple[OlympiaCatalog, Path, set[Path]]:
    """A table whose kept catalog versions read files its current metadata
    does not reach (the three cases above), and one real orphan."""
    root = tmp_path / "lake"
    cat = olympia_catalog(f"file://{root}")
    assert isinstance(cat, OlympiaCatalog)
    cat.create_namespace("ns")
    t = cat.create_table("ns.t", SCHEMA, properties={"write.metadata.previous-versions-max": "1"})
    t.append(rows([1]))
    before_rollback = cat.olympia.version
    t.append(rows([2]))
    for i in range(3):  # each drops the oldest metadata file from the log
        t.transaction().set_properties(step=str(i)).commit_transaction()
    cat.olympia.rollback_to(before_rollback)  # the table as it was: [1]
    u = cat.create_table("ns.u", SCHEMA)
    u.append(rows([5]))
    cat.drop_table("ns.u")
    cat.create_table("ns.u", SCHEMA).append(rows([6]))  # the same place again
    folder = root / "ns.db" / "t"
    stray = folder / "data" / "stray.parquet"  # what a killed writer left
    stray.write_bytes(b"not reached by anything")
    # Hidden files stay, as Iceberg's own clean-up leaves them (Hadoop's
    # checksum files, a _temporary folder); a partition folder is not hidden.
    (folder / "data" / ".kept.parquet.crc").write_bytes(b"crc")
    (folder / "data" / "_temporary").mkdir()
    (folder / "data" / "_temporary" / "part-0").write_bytes(b"x")
    (folder / "data" / "_p=1").mkdir()
    (folder / "data" / "_p=1" / "stray.parquet").write_bytes(b"y")
    age(root)
    return cat, root, {stray, folder / "data" / "_p=1" / "stray.parquet"}


def test_orphan_clean_up_keeps_every_file_a_kept_catalog_version_reads(tmp_path: Path) -> None:
    cat, root, strays = history(tmp_path)
    rows_read = every_kept_version_reads(cat)
    files = files_under(root)
    found = cat.remove_orphan_files("ns.t", dry_run=True)
    assert found.dry_run and {Path(f.removeprefix("file://")) for f in found.files} == strays
    assert files_under(root) == files
    done = cat.remove_orphan_files("ns.t")
    assert done.files == found.files and not done.dry_run
    assert files_under(root) == files - {os.path.relpath(s, root) for s in strays}
    assert every_kept_version_reads(cat) == rows_read
    for name in ("ns.t", "ns.u"):
        done = cat.remove_orphan_files(name)
        assert done.files == ()
    assert every_kept_version_reads(cat) == rows_read
    assert ids_of(cat.load_table("ns.t")) == [1]
    assert ids_of(cat.load_table("ns.u")) == [6]
    # Once the versions that read them are expired, they are orphans.
    cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
    age(root)
    gone = {Path(f.removeprefix("file://")).name for f in cat.remove_orphan_files("ns.t").files}
    assert any(n.endswith(".parquet") for n in gone)  # the data of [2]
    assert any(n.endswith(".metadata.json") for n in gone)
    assert ids_of(cat.load_table("ns.t")) == [1]
    old_u = cat.remove_orphan_files("ns.u").files  # the table dropped: [5]
    assert any(f.endswith(".parquet") for f in old_u)
    assert ids_of(cat.load_table("ns.u")) == [6]
    assert every_kept_version_reads(cat) == 2


def test_orphan_clean_up_keeps_what_an_open_distributed_transaction_staged(
    tmp_path: Path,
) -> None:
    root = tmp_path / "lake"
    cat = olympia_catalog(f"file://{root}")
    assert isinstance(cat, OlympiaCatalog)
    cat.create_namespace("ns")
    cat.create_table("ns.t", SCHEMA).append(rows([1]))
    tx = cat.begin()
    tx.load_table("ns.t").append(rows([2]))
    txn_id = tx.distribute()
    age(root)
    assert cat.remove_orphan_files("ns.t").files == ()
    resumed = cat.resume(txn_id)
    resumed.commit()
    assert ids_of(cat.load_table("ns.t")) == [1, 2]


def test_orphan_clean_up_refuses_what_it_cannot_judge(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    cat = olympia_catalog(f"file://{root}")
    assert isinstance(cat, OlympiaCatalog)
    cat.create_namespace("ns")
    cat.create_table("ns.t", SCHEMA).append(rows([1]))
    cat.create_table("ns.other", SCHEMA)
    with pytest.raises(ValueError, match="less than 24 hours ago"):
        cat.remove_orphan_files("ns.t", older_than=datetime.now(UTC) - timedelta(hours=1))
    with pytest.raises(ValueError, match="not inside the location"):
        cat.remove_orphan_files("ns.t", location=f"file://{root}/ns.db/other")
    with pytest.raises(ValueError, match="holds the catalog's own files"):
        cat.remove_orphan_files("ns.t", location=f"file://{root}")
    with pytest.raises(ValueError, match="'..' segment"):
        cat.remove_orphan_files("ns.t", location=f"file://{root}/ns.db/t/../other")
    with pytest.raises(NoSuchTableError):
        cat.remove_orphan_files("ns.nope")
    with pytest.raises(olympia.InvalidArgumentTypeError, match="older_than"):
        cat.remove_orphan_files("ns.t", older_than="2026-01-01")  # type: ignore[arg-type]
    with pytest.raises(olympia.InvalidArgumentError, match="timezone-aware"):
        cat.remove_orphan_files("ns.t", older_than=datetime(2026, 1, 1))
    with pytest.raises(olympia.InvalidArgumentTypeError, match="dry_run"):
        cat.remove_orphan_files("ns.t", dry_run="no")  # type: ignore[arg-type]
    with pytest.raises(olympia.InvalidArgumentTypeError, match="location"):
        cat.remove_orphan_files("ns.t", location=3)  # type: ignore[arg-type]
    # A kept table's manifest list is unreadable: nothing can be told, nothing goes.
    stray = root / "ns.db" / "t" / "data" / "stray.parquet"
    stray.write_bytes(b"x")
    manifest_list = cat.load_table("ns.t").current_snapshot().manifest_list
    os.chmod(manifest_list.removeprefix("file://"), 0)
    age(root)
    try:
        if os.access(manifest_list.removeprefix("file://"), os.R_OK):
            Path(manifest_list.removeprefix("file://")).write_bytes(b"damaged")
        with pytest.raises(olympia.OlympiaError, match="nothing was deleted"):
            cat.remove_orphan_files("ns.t")
    finally:
        os.chmod(manifest_list.removeprefix("file://"), 0o644)
    assert stray.exists()


def test_orphan_clean_up_over_rest(tmp_path: Path) -> None:
    """``POST .../tables/{table}/orphan-files`` (spec/rest.md §11): what
    olympia.spark.OlympiaSparkCatalog sends for Spark's remove_orphan_files."""
    import requests
    from rest_helpers import PREFIX, serve

    with serve(tmp_path) as served:
        client = served.client()
        client.create_namespace("ns")
        t = client.create_table(("ns", "t"), SCHEMA)
        t.append(rows([1]))
        first = olympia.load_catalog(served.warehouse).version
        t.append(rows([2]))
        olympia.load_catalog(served.warehouse).rollback_to(first)
        root = Path(served.warehouse.removeprefix("file://"))
        stray = root / "ns.db" / "t" / "data" / "stray.parquet"
        stray.write_bytes(b"x")
        age(root)
        files = files_under(root)
        rows_read = every_kept_version_reads(served.catalog)
        url = f"{served.uri}/v1/{PREFIX}/namespaces/ns/tables/t/orphan-files"
        dry = requests.post(url, json={"dry-run": True}, timeout=30)
        assert dry.status_code == 200, dry.text
        assert [Path(f.removeprefix("file://")) for f in dry.json()["orphan-file-locations"]] == [
            stray
        ]
        assert files_under(root) == files
        two_days_ago = int(time.time() * 1000) - 2 * 86400_000
        done = requests.post(url, json={"older-than-ms": two_days_ago}, timeout=30)
        assert done.status_code == 200 and done.json()["dry-run"] is False
        assert not stray.exists()
        assert files_under(root) == files - {os.path.relpath(stray, root)}
        assert every_kept_version_reads(served.catalog) == rows_read
        young = requests.post(url, json={"older-than-ms": int(time.time() * 1000)}, timeout=30)
        assert young.status_code == 400 and "24 hours" in young.text
        elsewhere = requests.post(url, json={"location": f"file://{root}"}, timeout=30)
        assert elsewhere.status_code == 400 and "catalog's own files" in elsewhere.text
        other = requests.post(url, json={"location": f"file://{root}/ns.db"}, timeout=30)
        assert other.status_code == 400 and "not inside the location" in other.text
        loose = requests.post(url, json={"dry-run": "no"}, timeout=30)
        assert loose.status_code == 400, loose.text  # a string is no boolean: nothing deleted
        begun = requests.post(f"{served.uri}/txn", json={}, timeout=10).json()
        inside = f"{served.uri}/txn/{begun['id']}/v1/{PREFIX}/namespaces/ns/tables/t/orphan-files"
        refused = requests.post(inside, json={}, timeout=30)
        assert refused.status_code == 400 and "inside a transaction" in refused.text
        missing = requests.post(url.replace("/t/", "/nope/"), json={}, timeout=30)
        assert missing.status_code == 404


@pytest.mark.parametrize("file_io", ["pyarrow", "fsspec"])
def test_orphan_clean_up_on_s3(
    moto_server: Any, monkeypatch: pytest.MonkeyPatch, file_io: str
) -> None:
    """On S3 (moto over HTTP), through PyIceberg's PyArrow and fsspec FileIOs:
    the listing, the kept versions, the deletion. Storage stamps the objects
    now, so the 24-hour floor is lowered for the test."""
    from olympia.iceberg import orphans

    monkeypatch.setattr(orphans, "MIN_AGE", timedelta(0))
    uri, _ = moto_server.location(f"orphans-{file_io}")
    props = {
        "s3.endpoint": moto_server.endpoint_url,
        "s3.region": "us-east-1",
        "s3.access-key-id": "testing",
        "s3.secret-access-key": "testing",
        "py-io-impl": {
            "pyarrow": "pyiceberg.io.pyarrow.PyArrowFileIO",
            "fsspec": "pyiceberg.io.fsspec.FsspecFileIO",
        }[file_io],
    }
    cat = olympia_catalog(uri, **props)
    assert isinstance(cat, OlympiaCatalog)
    cat.create_namespace("ns")
    t = cat.create_table("ns.t", SCHEMA)
    t.append(rows([1]))
    first = cat.olympia.version
    t.append(rows([2]))
    cat.olympia.rollback_to(first)
    client = moto_server.boto3_client()
    prefix = uri.split("/", 3)[3]
    stray = f"{prefix}/ns.db/t/data/stray.parquet"
    client.put_object(Bucket=moto_server.bucket, Key=stray, Body=b"x")
    client.put_object(Bucket=moto_server.bucket, Key=f"{prefix}/ns.db/t/data/.x.crc", Body=b"x")
    rows_read = every_kept_version_reads(cat)

    def keys() -> set[str]:
        listed = client.list_objects_v2(Bucket=moto_server.bucket, Prefix=f"{prefix}/ns.db/")
        # pyarrow's S3 file system leaves a folder marker ("data/") behind
        # a delete: not a file
        return {o["Key"] for o in listed["Contents"] if not o["Key"].endswith("/")}

    before = keys()
    time.sleep(1.1)  # S3 times are whole seconds
    later = datetime.now(UTC)
    found = cat.remove_orphan_files("ns.t", older_than=later)
    assert found.files == (f"s3://{moto_server.bucket}/{stray}",)
    assert keys() == before - {stray}
    assert every_kept_version_reads(cat) == rows_read
    assert ids_of(cat.load_table("ns.t")) == [1]


def test_fsck_tables_finds_a_file_a_kept_version_reads_gone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`olympia fsck` checks the catalog's own files: a table file of a kept
    version deleted by a tool that knows nothing of catalog versions (as
    Iceberg's own orphan clean-up did) went unnoticed. `--tables` reads the
    kept versions' tables and names what is gone."""
    import json

    from olympia.cli import main

    cat, root, _ = history(tmp_path)
    assert main(["fsck", "--tables", "--json", "-w", str(root)]) == 0
    healthy = json.loads(capsys.readouterr().out)
    assert healthy["ok"] and healthy["tables"]["ok"]
    assert healthy["tables"]["checked_tables"] >= 5 and healthy["tables"]["missing"] == []
    # The metadata file a kept version names, gone from under it.
    current = cat.load_table("ns.t")
    known = {current.metadata_location, *(e.metadata_file for e in current.metadata.metadata_log)}
    named = [
        cat.olympia.at_version(v).describe_table("ns", "t").metadata_location
        for v in range(cat.olympia.oldest_version, cat.olympia.version + 1)
        if cat.olympia.at_version(v).table_exists("ns", "t")
    ]
    metadata = next(m for m in named if m not in known)  # what Iceberg's clean-up deletes
    Path(metadata.removeprefix("file://")).unlink()
    data_file = next((root / "ns.db" / "u" / "data").glob("*.parquet"))
    data_file.unlink()
    assert main(["fsck", "--json", "-w", str(root)]) == 0  # the catalog's own files are whole
    capsys.readouterr()
    assert main(["fsck", "--tables", "--json", "-w", str(root)]) == 1
    found = json.loads(capsys.readouterr().out)
    assert not found["ok"] and not found["tables"]["ok"]
    gone = {entry["file"].removeprefix("file://") for entry in found["tables"]["missing"]}
    assert gone == {metadata.removeprefix("file://"), str(data_file)}


def test_orphan_clean_up_never_follows_a_symbolic_link_out_of_the_folder(tmp_path: Path) -> None:
    """PyArrow's local file system lists through a link to a folder: a link
    in a table's folder to another place made that place's files orphans
    of this table, and deleting them through the link deleted the files
    themselves."""
    root = tmp_path / "lake"
    cat = olympia_catalog(f"file://{root}")
    assert isinstance(cat, OlympiaCatalog)
    cat.create_namespace("ns")
    cat.create_table("ns.t", SCHEMA).append(rows([1]))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious.parquet").write_bytes(b"not the table's")
    (root / "ns.db" / "t" / "data" / "link").symlink_to(elsewhere)
    age(root)
    age(elsewhere)
    assert cat.remove_orphan_files("ns.t").files == ()
    assert (elsewhere / "precious.parquet").exists()


def test_orphan_clean_up_keeps_a_file_a_commit_named_while_it_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit that lands between the reading of the kept versions and the
    deletion (here add_files of an old parquet file) names a file the first
    reading did not see: the versions committed meanwhile are read again."""
    import pyarrow.parquet as pq

    from olympia.iceberg import orphans

    root = tmp_path / "lake"
    cat = olympia_catalog(f"file://{root}")
    assert isinstance(cat, OlympiaCatalog)
    cat.create_namespace("ns")
    cat.create_table("ns.t", SCHEMA).append(rows([1]))
    old = root / "ns.db" / "t" / "data" / "imported.parquet"
    pq.write_table(rows([7]), old)
    age(root)
    real = orphans._reached
    calls = []

    def reached_then_commit(*args: Any, **kwargs: Any) -> set[str]:
        out = real(*args, **kwargs)
        if not calls:
            cat.load_table("ns.t").add_files([f"file://{old}"])
        calls.append(1)
        return out

    monkeypatch.setattr(orphans, "_reached", reached_then_commit)
    assert cat.remove_orphan_files("ns.t").files == ()
    assert old.exists() and len(calls) == 2
    assert ids_of(cat.load_table("ns.t")) == [1, 7]


def test_olympia_orphans_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from olympia.cli import main

    cat, root, strays = history(tmp_path)
    files = files_under(root)
    assert main(["orphans", "ns.t", "--dry-run", "--json", "-w", str(root)]) == 0
    found = json.loads(capsys.readouterr().out)
    assert (
        found["dry_run"]
        and {Path(f.removeprefix("file://")) for f in found["orphan_files"]} == strays
    )
    assert files_under(root) == files
    assert main(["orphans", "ns.t", "-w", str(root)]) == 0
    assert "deleted 2 orphan file(s)" in capsys.readouterr().out
    assert not any(s.exists() for s in strays)
    assert every_kept_version_reads(cat) > 0
    for args, says in (
        (["orphans", "ns.nope"], "Table does not exist: ns.nope"),
        (["orphans", "ns.t", "--older-than", "2999-01-01T00:00:00Z"], "less than 24 hours"),
        (["orphans", "ns.t", "--location", str(tmp_path)], "catalog's own files"),
        (["orphans", "ns.t", "--location", str(root / "ns.db")], "not inside the location"),
    ):
        with pytest.raises(SystemExit) as exited:
            main([*args, "-w", str(root)])
        assert exited.value.code == 2
        assert says in capsys.readouterr().err


def test_orphan_clean_up_keeps_files_other_tables_and_views_keep_in_its_folder(
    tmp_path: Path,
) -> None:
    """The first build kept only what the metadata lying inside the table's
    places reached, with the overlap rule on (the adversary, 3 of 3 each):
    another table's data kept in a write.data.path it gave up since, where
    this table was then created; the data of a dropped table inside whose
    folder this one was created; the table's own data when its metadata had
    been kept elsewhere (write.metadata.path, since removed); and a view's
    metadata file kept in the table's folder."""
    from test_views import version

    root = tmp_path / "lake"
    cat = olympia_catalog(f"file://{root}", **{"allow-overlapping-locations": "false"})
    assert isinstance(cat, OlympiaCatalog)
    cat.create_namespace("ns")
    # 1: b keeps its data in <root>/shared, then gives that place up.
    b = cat.create_table("ns.b", SCHEMA, properties={"write.data.path": f"file://{root}/shared"})
    b.append(rows([1]))
    b.transaction().remove_properties("write.data.path").commit_transaction()
    cat.create_table("ns.c", SCHEMA, location=f"file://{root}/shared")
    # 2: d dropped (not purged); e created inside its folder.
    d = cat.create_table("ns.d", SCHEMA)
    d.append(rows([2]))
    d_location = d.location()
    cat.drop_table("ns.d")
    cat.create_table("ns.e", SCHEMA, location=f"{d_location}/data")
    # 3: a kept its metadata elsewhere, was rolled back, then stopped.
    a = cat.create_table(
        "ns.a", SCHEMA, properties={"write.metadata.path": f"file://{root}/ns.db/a-meta"}
    )
    a.append(rows([3]))
    before = cat.olympia.version
    a.append(rows([4]))
    cat.olympia.rollback_to(before)
    cat.load_table("ns.a").transaction().remove_properties(
        "write.metadata.path"
    ).commit_transaction()
    # 4: a view whose metadata lies in a table's folder.
    cat.create_view(
        "ns.v", SCHEMA, version("select * from ns.c"), location=f"file://{root}/shared/views/v"
    )
    age(root)
    rows_read = every_kept_version_reads(cat)
    files = files_under(root)
    for name in ("ns.c", "ns.e", "ns.a"):
        assert cat.remove_orphan_files(name).files == (), name
    assert files_under(root) == files
    assert every_kept_version_reads(cat) == rows_read
    assert ids_of(cat.load_table("ns.b")) == [1]
    assert cat.load_view("ns.v").metadata.location == f"file://{root}/shared/views/v"


def test_orphan_clean_up_over_rest_keeps_what_the_servers_open_transactions_staged(
    tmp_path: Path,
) -> None:
    """A /txn transaction lives in the server's memory: an old file it adds
    with add_files was deleted by a clean-up that ran while it was open
    (the adversary), and its commit then published a table that could not
    be read. The server now keeps what its own open transactions staged."""
    import pyarrow.parquet as pq
    import requests
    from pyiceberg.catalog import load_catalog
    from rest_helpers import PREFIX, serve

    with serve(tmp_path) as served:
        client = served.client()
        client.create_namespace("ns")
        client.create_table(("ns", "t"), SCHEMA).append(rows([1]))
        root = Path(served.warehouse.removeprefix("file://"))
        imported = root / "ns.db" / "t" / "data" / "import" / "old.parquet"
        imported.parent.mkdir()
        pq.write_table(rows([9]), imported)
        age(root)
        begun = requests.post(f"{served.uri}/txn", json={}, timeout=10).json()
        inside = load_catalog("in", **{"type": "rest", "uri": f"{served.uri}/txn/{begun['id']}"})
        inside.load_table(("ns", "t")).add_files([f"file://{imported}"])
        url = f"{served.uri}/v1/{PREFIX}/namespaces/ns/tables/t/orphan-files"
        done = requests.post(url, json={}, timeout=30)
        assert done.status_code == 200 and done.json()["orphan-file-locations"] == []
        assert imported.exists()
        assert requests.post(f"{served.uri}/txn/{begun['id']}/commit", timeout=30).ok
        assert ids_of(client.load_table(("ns", "t"))) == [1, 9]
