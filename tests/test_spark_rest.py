"""Spark through the olympia REST server: real pyspark, the real Iceberg
runtime jar, real HTTP (spec/rest.md §7). One Spark session for the module."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from iceberg_helpers import ids_of, olympia_catalog, rows
from pyiceberg.catalog import load_catalog

from olympia import spark as olympia_spark
from olympia.errors import CommitConflictError, InvalidArgumentError
from olympia.iceberg import purge
from olympia.rest import start_background
from olympia.spark import SparkSetupError

if shutil.which("java") is None:
    pytest.skip("Spark tests need Java (no 'java' on the PATH)", allow_module_level=True)


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"file://{tmp_path_factory.mktemp('spark')}/warehouse"


@pytest.fixture(scope="module")
def spark(warehouse: str) -> Iterator[Any]:
    session = olympia_spark.session(warehouse=warehouse)
    yield session
    session.stop()


def collect(spark: Any, sql: str) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in spark.sql(sql).collect()]


def test_dml_across_two_tables(spark: Any, warehouse: str) -> None:
    spark.sql("CREATE NAMESPACE lake.shop")
    spark.sql("CREATE TABLE lake.shop.stock (id BIGINT, item STRING, qty INT) USING iceberg")
    spark.sql("CREATE TABLE lake.shop.deliveries (id BIGINT, item STRING, qty INT) USING iceberg")
    spark.sql("INSERT INTO lake.shop.stock VALUES (1, 'apple', 5), (2, 'pear', 3), (3, 'fig', 1)")
    spark.sql("INSERT INTO lake.shop.deliveries VALUES (2, 'pear', 10), (4, 'kiwi', 7)")
    spark.sql("UPDATE lake.shop.stock SET qty = qty + 1 WHERE item = 'apple'")
    spark.sql("DELETE FROM lake.shop.stock WHERE item = 'fig'")
    spark.sql(
        """MERGE INTO lake.shop.stock s USING lake.shop.deliveries d ON s.id = d.id
           WHEN MATCHED THEN UPDATE SET s.qty = s.qty + d.qty
           WHEN NOT MATCHED THEN INSERT *"""
    )
    assert collect(spark, "SELECT id, item, qty FROM lake.shop.stock ORDER BY id") == [
        (1, "apple", 6),
        (2, "pear", 13),
        (4, "kiwi", 7),
    ]
    joined = collect(
        spark,
        """SELECT s.item, s.qty, d.qty FROM lake.shop.stock s
           JOIN lake.shop.deliveries d ON s.id = d.id ORDER BY s.id""",
    )
    assert joined == [("pear", 13, 10), ("kiwi", 7, 7)]
    # PyIceberg, straight on the olympia catalog, reads what Spark wrote
    direct = olympia_catalog(warehouse)
    assert ids_of(direct.load_table(("shop", "stock"))) == [1, 2, 4]


def test_ddl_ctas_rtas_alter_rename_view_purge(spark: Any, warehouse: str) -> None:
    direct = olympia_catalog(warehouse)
    spark.sql("CREATE NAMESPACE lake.ddl")
    spark.sql("CREATE TABLE lake.ddl.src (id BIGINT, v STRING) USING iceberg")
    spark.sql("INSERT INTO lake.ddl.src VALUES (1, 'a'), (2, 'b')")
    # CTAS and RTAS go through a staged create and an atomic replace
    spark.sql("CREATE TABLE lake.ddl.copy USING iceberg AS SELECT * FROM lake.ddl.src")
    assert collect(spark, "SELECT id FROM lake.ddl.copy ORDER BY id") == [(1,), (2,)]
    spark.sql("REPLACE TABLE lake.ddl.copy USING iceberg AS SELECT id * 10 AS id FROM lake.ddl.src")
    assert collect(spark, "SELECT id FROM lake.ddl.copy ORDER BY id") == [(10,), (20,)]
    spark.sql("ALTER TABLE lake.ddl.src ADD COLUMN extra INT")
    spark.sql("INSERT INTO lake.ddl.src VALUES (3, 'c', 7)")
    assert collect(spark, "SELECT id, extra FROM lake.ddl.src ORDER BY id") == [
        (1, None),
        (2, None),
        (3, 7),
    ]
    # Spark takes the new name inside the same catalog
    spark.sql("ALTER TABLE lake.ddl.src RENAME TO ddl.renamed")
    assert collect(spark, "SHOW TABLES IN lake.ddl") == [
        ("ddl", "copy", False),
        ("ddl", "renamed", False),
    ]
    spark.sql("CREATE VIEW lake.ddl.big AS SELECT id FROM lake.ddl.copy WHERE id > 10")
    assert collect(spark, "SELECT * FROM lake.ddl.big") == [(20,)]
    assert direct.view_exists(("ddl", "big"))
    spark.sql("DROP VIEW lake.ddl.big")
    assert not direct.view_exists(("ddl", "big"))
    spark.sql("DROP TABLE lake.ddl.copy PURGE")
    assert not direct.table_exists(("ddl", "copy"))
    assert direct.load_table(("ddl", "renamed")).schema().find_field("extra").name == "extra"


def test_each_spark_commit_is_one_olympia_version(spark: Any, warehouse: str) -> None:
    direct = olympia_catalog(warehouse)
    spark.sql("CREATE NAMESPACE lake.ver")
    spark.sql("CREATE TABLE lake.ver.t (id BIGINT, v STRING) USING iceberg")
    before = direct.olympia.version
    spark.sql("INSERT INTO lake.ver.t VALUES (1, 'a')")
    spark.sql("INSERT INTO lake.ver.t VALUES (2, 'b')")
    assert direct.olympia.version == before + 2
    assert ids_of(direct.load_table(("ver", "t"))) == [1, 2]


def test_pyiceberg_rest_client_and_spark_share_tables(spark: Any) -> None:
    uri = spark.conf.get("spark.sql.catalog.lake.uri")
    rest = load_catalog("r", **{"type": "rest", "uri": uri})
    rest.create_namespace("mixed")
    table = rest.create_table(("mixed", "t"), rows([1]).schema)
    table.append(rows([1, 2]))
    spark.sql("INSERT INTO lake.mixed.t VALUES (3, 'x3')")
    assert collect(spark, "SELECT id FROM lake.mixed.t ORDER BY id") == [(1,), (2,), (3,)]
    assert ids_of(rest.load_table(("mixed", "t"))) == [1, 2, 3]
    assert collect(spark, "SHOW NAMESPACES IN lake LIKE 'mixed'") == [("mixed",)]


# --- BEGIN / COMMIT / ROLLBACK from PySpark ----------------------------------------


def test_transaction_block_commits_two_tables_as_one_version(spark: Any, warehouse: str) -> None:
    direct = olympia_catalog(warehouse)
    spark.sql("CREATE NAMESPACE lake.bank")
    spark.sql("CREATE TABLE lake.bank.accounts (id BIGINT, balance BIGINT) USING iceberg")
    spark.sql("CREATE TABLE lake.bank.ledger (id BIGINT, amount BIGINT) USING iceberg")
    spark.sql("INSERT INTO lake.bank.accounts VALUES (1, 100), (2, 0)")
    before = direct.olympia.version
    with olympia_spark.transaction(spark, isolation="serializable") as tx:
        spark.sql("UPDATE lake.bank.accounts SET balance = balance - 30 WHERE id = 1")
        spark.sql("UPDATE lake.bank.accounts SET balance = balance + 30 WHERE id = 2")
        spark.sql("INSERT INTO lake.bank.ledger VALUES (1, -30), (2, 30)")
        # the block reads its own writes; nobody else sees them yet
        assert collect(spark, "SELECT sum(amount) FROM lake.bank.ledger") == [(0,)]
        assert ids_of(direct.load_table(("bank", "ledger"))) == []
        assert direct.olympia.version == before
    assert tx.version == before + 1 == direct.olympia.version
    assert collect(spark, "SELECT id, balance FROM lake.bank.accounts ORDER BY id") == [
        (1, 70),
        (2, 30),
    ]
    assert ids_of(direct.load_table(("bank", "ledger"))) == [1, 2]


def test_transaction_block_rolls_back_on_exception(spark: Any, warehouse: str) -> None:
    direct = olympia_catalog(warehouse)
    spark.sql("CREATE NAMESPACE lake.rb")
    spark.sql("CREATE TABLE lake.rb.t (id BIGINT, v STRING) USING iceberg")
    spark.sql("INSERT INTO lake.rb.t VALUES (1, 'a')")
    before = direct.olympia.version
    with pytest.raises(RuntimeError, match="changed my mind"), olympia_spark.transaction(spark):
        spark.sql("INSERT INTO lake.rb.t VALUES (2, 'b')")
        spark.sql("CREATE TABLE lake.rb.new (id BIGINT) USING iceberg")
        raise RuntimeError("changed my mind")
    assert direct.olympia.version == before
    assert collect(spark, "SELECT id FROM lake.rb.t") == [(1,)]
    assert collect(spark, "SHOW TABLES IN lake.rb") == [("rb", "t", False)]
    table = Path(warehouse.removeprefix("file://")) / "rb.db" / "t"
    # the rolled-back insert's files are deleted: what is left is the first insert's
    assert len(list((table / "metadata").glob("snap-*.avro"))) == 1
    assert len(list((table / "data").glob("*.parquet"))) == 1


def test_transaction_block_conflict_is_refused(spark: Any, warehouse: str) -> None:
    direct = olympia_catalog(warehouse)
    spark.sql("CREATE NAMESPACE lake.cf")
    spark.sql("CREATE TABLE lake.cf.t (id BIGINT, v STRING) USING iceberg")
    spark.sql("INSERT INTO lake.cf.t VALUES (1, 'a'), (2, 'b')")
    block = olympia_spark.transaction(spark, isolation="serializable")
    with pytest.raises(CommitConflictError, match="cf.t"), block:
        # both rewrite the file holding row 1: the block's rewrite cannot be rebased
        spark.sql("UPDATE lake.cf.t SET v = 'z' WHERE id = 1")
        direct.load_table(("cf", "t")).delete("id = 1")  # lands first
    assert collect(spark, "SELECT id, v FROM lake.cf.t") == [(2, "b")]


def test_seed_two_sessions_serializable_both_commit(spark: Any, warehouse: str) -> None:
    """The seed's example: Jack reads t1 and updates t2 from it while Drew
    inserts into t1; under SERIALIZABLE both commit (Jack's order is before Drew's)."""
    direct = olympia_catalog(warehouse)
    spark.sql("CREATE NAMESPACE lake.ns1")
    spark.sql("CREATE TABLE lake.ns1.t1 (c1 STRING, c2 STRING) USING iceberg")
    spark.sql("CREATE TABLE lake.ns1.t2 (c1 STRING, c2 STRING) USING iceberg")
    spark.sql("INSERT INTO lake.ns1.t1 VALUES ('x', 'x1')")
    spark.sql("INSERT INTO lake.ns1.t2 VALUES ('x', 'v1'), ('a', 'v1')")
    drew = spark.newSession()
    before = direct.olympia.version
    with olympia_spark.transaction(spark, isolation="serializable") as jack:
        spark.sql("CREATE OR REPLACE TEMP VIEW temp_view AS SELECT c1 FROM lake.ns1.t1")
        with olympia_spark.transaction(drew, isolation="serializable") as drew_tx:
            drew.sql("INSERT INTO lake.ns1.t1 VALUES ('a', 'bcd')")
        spark.sql("UPDATE lake.ns1.t2 SET c2 = 'v2' WHERE c1 IN (SELECT * FROM temp_view)")
    assert drew_tx.version == before + 1
    assert jack.version == before + 2
    assert collect(spark, "SELECT c1, c2 FROM lake.ns1.t2 ORDER BY c1") == [
        ("a", "v1"),
        ("x", "v2"),
    ]
    assert collect(spark, "SELECT c1 FROM lake.ns1.t1 ORDER BY c1") == [("a",), ("x",)]


def test_two_spark_sessions_in_conflict_one_refused(spark: Any) -> None:
    spark.sql("CREATE NAMESPACE lake.acct")
    spark.sql("CREATE TABLE lake.acct.balance (id BIGINT, amount BIGINT) USING iceberg")
    spark.sql("INSERT INTO lake.acct.balance VALUES (1, 100)")
    other = spark.newSession()
    refused = olympia_spark.transaction(spark, isolation="serializable")
    with pytest.raises(CommitConflictError, match="acct.balance"), refused:
        spark.sql("UPDATE lake.acct.balance SET amount = amount - 10 WHERE id = 1")
        with olympia_spark.transaction(other, isolation="serializable"):
            other.sql("UPDATE lake.acct.balance SET amount = amount - 50 WHERE id = 1")
    assert collect(spark, "SELECT amount FROM lake.acct.balance") == [(50,)]


def test_drop_purge_leaves_the_files_to_expiration(spark: Any, warehouse: str) -> None:
    """Iceberg's SparkCatalog deleted a purged table's files from the driver
    at once: a transaction rolled back, or a catalog rollback, brought back a
    table whose files were gone. OlympiaSparkCatalog asks the server to
    purge, which deletes them once no kept version reaches the table."""
    assert spark.conf.get("spark.sql.catalog.lake") == olympia_spark.CATALOG_CLASS
    direct = olympia_catalog(warehouse)
    spark.sql("CREATE NAMESPACE lake.pg")
    spark.sql("CREATE TABLE lake.pg.keep (id BIGINT) USING iceberg")
    spark.sql("INSERT INTO lake.pg.keep VALUES (1), (2)")

    class Stop(Exception):
        pass

    with pytest.raises(Stop), olympia_spark.transaction(spark):
        spark.sql("DROP TABLE lake.pg.keep PURGE")
        raise Stop
    assert collect(spark, "SELECT id FROM lake.pg.keep ORDER BY id") == [(1,), (2,)]
    before = direct.olympia.version
    spark.sql("DROP TABLE lake.pg.keep PURGE")
    assert not direct.table_exists(("pg", "keep"))
    records = [r for r in purge.records(direct)[0] if r.table == "pg.keep"]
    assert len(records) == 1  # recorded, nothing deleted yet
    direct.olympia.rollback_to(before)
    assert collect(spark, "SELECT id FROM lake.pg.keep ORDER BY id") == [(1,), (2,)]


def test_expire_snapshots_inside_a_transaction_is_refused(spark: Any) -> None:
    """Spark's expire_snapshots deletes the expired snapshots' files as soon
    as its commit is answered; inside a transaction a rollback then
    restored snapshots without files, and the table could not be read."""
    spark.sql("CREATE NAMESPACE lake.ex")
    spark.sql("CREATE TABLE lake.ex.t (id BIGINT) USING iceberg")
    for i in range(3):
        spark.sql(f"INSERT INTO lake.ex.t VALUES ({i})")
    with pytest.raises(Exception, match="expire_snapshots"), olympia_spark.transaction(spark):
        spark.sql(
            "CALL lake.system.expire_snapshots(table => 'ex.t', older_than => TIMESTAMP '9999-12-31 00:00:00', retain_last => 1)"
        )
    assert collect(spark, "SELECT id FROM lake.ex.t ORDER BY id") == [(0,), (1,), (2,)]
    assert collect(spark, "SELECT count(*) FROM lake.ex.t.snapshots") == [(3,)]


def test_remove_orphan_files_keeps_what_kept_catalog_versions_read(
    spark: Any, warehouse: str
) -> None:
    """Iceberg's remove_orphan_files counts as orphans what the current
    metadata does not reach: after a catalog rollback it deleted the newer
    version's files, and (past write.metadata.previous-versions-max) the
    metadata files older versions name. OlympiaSparkCatalog's procedure asks
    the server, which keeps every file a kept catalog version reads."""
    from test_orphan_files import age, every_kept_version_reads

    direct = olympia_catalog(warehouse)
    spark.sql("CREATE NAMESPACE lake.orph")
    spark.sql(
        "CREATE TABLE lake.orph.t (id BIGINT) USING iceberg "
        "TBLPROPERTIES ('write.metadata.previous-versions-max' = '1')"
    )
    spark.sql("INSERT INTO lake.orph.t VALUES (1)")
    first = direct.olympia.version
    spark.sql("INSERT INTO lake.orph.t VALUES (2)")
    for i in range(3):
        spark.sql(f"ALTER TABLE lake.orph.t SET TBLPROPERTIES ('step' = '{i}')")
    direct.olympia.rollback_to(first)
    root = Path(warehouse.removeprefix("file://"))
    folder = root / "orph.db" / "t"
    stray = folder / "data" / "stray.parquet"
    stray.write_bytes(b"left by a killed writer")
    age(folder)
    rows_read = every_kept_version_reads(direct)
    dry = collect(spark, "CALL lake.system.remove_orphan_files(table => 'orph.t', dry_run => true)")
    assert [Path(f.removeprefix("file://").removeprefix("file:")) for (f,) in dry] == [stray]
    assert stray.exists()
    done = collect(
        spark,
        "CALL lake.system.remove_orphan_files(table => 'lake.orph.t', "
        "older_than => TIMESTAMP '2000-01-01 00:00:00')",
    )
    assert done == []  # nothing that old
    done = collect(spark, "CALL lake.system.remove_orphan_files(table => 'orph.t')")
    assert done == dry
    assert not stray.exists()
    assert every_kept_version_reads(direct) == rows_read
    assert collect(spark, "SELECT id FROM lake.orph.t ORDER BY id") == [(1,)]
    with pytest.raises(Exception, match="24 hours"):
        spark.sql(
            "CALL lake.system.remove_orphan_files(table => 'orph.t', "
            "older_than => TIMESTAMP '9999-12-31 00:00:00')"
        ).collect()
    with pytest.raises(Exception, match="inside a transaction"), olympia_spark.transaction(spark):
        spark.sql("CALL lake.system.remove_orphan_files(table => 'orph.t')").collect()


def _race(spark: Any, statement: str) -> list[str]:
    """Two SERIALIZABLE transactions, in two sessions, each running
    ``statement`` (formatted with its name); the second commits first."""
    other = spark.newSession()
    out = []
    try:
        with olympia_spark.transaction(spark, isolation="serializable"):
            spark.sql(statement.format(who="A"))
            try:
                with olympia_spark.transaction(other, isolation="serializable"):
                    other.sql(statement.format(who="B"))
                out.append("B")
            except CommitConflictError:
                out.append("B refused")
        out.append("A")
    except CommitConflictError as exc:
        assert exc.rule == "scan-filter-matches", exc
        out.append("A refused")
    return out


def test_serializable_transactions_that_read_and_append_one_table_do_not_both_commit(
    spark: Any,
) -> None:
    """Each takes max(id) + 1 as its next id, or MERGE-upserts one new key:
    both committed, and the table held the id twice. Spark reads a table's
    files itself and tells the server only in its scan report, which the
    server now records as a read of the whole table."""
    spark.sql("CREATE NAMESPACE lake.seq")
    spark.sql("CREATE TABLE lake.seq.ids (id BIGINT, who STRING) USING iceberg")
    spark.sql("INSERT INTO lake.seq.ids VALUES (1, 'seed')")
    got = _race(spark, "INSERT INTO lake.seq.ids SELECT max(id) + 1, '{who}' FROM lake.seq.ids")
    assert got == ["B", "A refused"]
    assert collect(spark, "SELECT id, who FROM lake.seq.ids ORDER BY id") == [(1, "seed"), (2, "B")]
    spark.sql("CREATE TABLE lake.seq.kv (id BIGINT, v STRING) USING iceberg")
    spark.sql("INSERT INTO lake.seq.kv VALUES (1, 'one')")
    merge = (
        "MERGE INTO lake.seq.kv t USING (SELECT 7 AS id, '{who}' AS v) s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    )
    assert _race(spark, merge) == ["B", "A refused"]
    assert collect(spark, "SELECT id, v FROM lake.seq.kv ORDER BY id") == [(1, "one"), (7, "B")]
    # A branch's rows change with every commit to it (write-audit-publish):
    # its reads are checked against its own history.
    spark.sql("ALTER TABLE lake.seq.kv CREATE BRANCH audit")
    branch = (
        "INSERT INTO lake.seq.kv.branch_audit "
        "SELECT max(id) + 1, '{who}' FROM lake.seq.kv.branch_audit"
    )
    assert _race(spark, branch) == ["B", "A refused"]
    assert collect(spark, "SELECT id, v FROM lake.seq.kv.branch_audit ORDER BY id") == [
        (1, "one"),
        (7, "B"),
        (8, "B"),
    ]
    # Under SNAPSHOT the same appends both land (no scan is checked).
    other = spark.newSession()
    with olympia_spark.transaction(spark, isolation="snapshot"):
        spark.sql("INSERT INTO lake.seq.ids SELECT max(id) + 1, 'C' FROM lake.seq.ids")
        with olympia_spark.transaction(other, isolation="snapshot"):
            other.sql("INSERT INTO lake.seq.ids SELECT max(id) + 1, 'D' FROM lake.seq.ids")
    assert collect(spark, "SELECT who FROM lake.seq.ids WHERE id = 3 ORDER BY who") == [
        ("C",),
        ("D",),
    ]


# --- distributed transactions as namespaces ------------------------------------------


def test_dtxn_namespaces_from_two_spark_sessions(spark: Any, warehouse: str) -> None:
    direct = olympia_catalog(warehouse)
    dtxn = "lake.sys.dtxns.dtxn_1234"
    spark.sql(f"CREATE NAMESPACE {dtxn} WITH DBPROPERTIES ('isolation-level'='serializable')")
    spark.sql(f"CREATE NAMESPACE {dtxn}.dist")
    spark.sql(f"CREATE TABLE {dtxn}.dist.t1 (id BIGINT, v STRING) USING iceberg")
    spark.sql(f"INSERT INTO {dtxn}.dist.t1 VALUES (1, 'a')")
    # a second Spark session, through a second server on the same warehouse
    with start_background(warehouse) as server:
        other = spark.newSession()
        other.conf.set("spark.sql.catalog.lake.uri", server.uri)
        assert collect(other, f"SELECT id FROM {dtxn}.dist.t1") == [(1,)]
        other.sql(f"INSERT INTO {dtxn}.dist.t1 VALUES (2, 'b')")
        assert ("sys.dtxns.dtxn_1234",) in collect(other, "SHOW NAMESPACES IN lake.sys.dtxns")
    assert not direct.namespace_exists("dist")
    spark.sql(f"ALTER NAMESPACE {dtxn} SET DBPROPERTIES ('commit'='true')")
    assert collect(spark, "SELECT id FROM lake.dist.t1 ORDER BY id") == [(1,), (2,)]
    assert ids_of(direct.load_table(("dist", "t1"))) == [1, 2]
    assert collect(spark, "SHOW NAMESPACES IN lake.sys.dtxns") == []


def test_dtxn_namespace_drop_rolls_back_from_spark(spark: Any, warehouse: str) -> None:
    direct = olympia_catalog(warehouse)
    dtxn = "lake.sys.dtxns.dtxn_rollback"
    spark.sql(f"CREATE NAMESPACE {dtxn}")
    spark.sql(f"CREATE NAMESPACE {dtxn}.gone")
    spark.sql(f"CREATE TABLE {dtxn}.gone.t (id BIGINT) USING iceberg")
    spark.sql(f"INSERT INTO {dtxn}.gone.t VALUES (1)")
    spark.sql(f"DROP NAMESPACE {dtxn} CASCADE")
    assert not direct.namespace_exists("gone")
    assert collect(spark, "SHOW NAMESPACES IN lake.sys.dtxns") == []


def test_commit_metadata_from_spark_block_and_sql(spark: Any, warehouse: str) -> None:
    direct = olympia_catalog(warehouse)
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.meta")
    spark.sql("CREATE TABLE lake.meta.t (id BIGINT) USING iceberg")
    props = {"job": "nightly"}
    with olympia_spark.transaction(spark, message="spark block", author="etl", properties=props):
        spark.sql("INSERT INTO lake.meta.t VALUES (1)")
    info = direct.olympia.history()[-1]
    assert (info.message, info.author, dict(info.properties)) == ("spark block", "etl", props)
    dtxn = "lake.sys.dtxns.dtxn_meta"
    spark.sql(f"CREATE NAMESPACE {dtxn} WITH DBPROPERTIES ('commit.message'='from SQL')")
    spark.sql(f"INSERT INTO {dtxn}.meta.t VALUES (2)")
    spark.sql(f"ALTER NAMESPACE {dtxn} SET DBPROPERTIES ('commit'='true', 'commit.author'='sql')")
    info = direct.olympia.history()[-1]
    assert (info.transaction_id, info.message, info.author) == ("dtxn_meta", "from SQL", "sql")
    bad = olympia_spark.transaction(spark, message=7)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="'message'"), bad:
        pass


# --- setup errors (no JVM) --------------------------------------------------------


def test_runtime_jar_is_the_complete_one() -> None:
    jar = Path(olympia_spark.runtime_jar())
    assert jar.name == "iceberg-spark-runtime-3.5_2.12-1.10.2.jar" and jar.is_file()


def test_missing_java_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(SparkSetupError, match="Java"):
        olympia_spark.session(uri="http://127.0.0.1:1")


def test_a_session_on_a_server_that_is_not_there_says_so_before_spark_starts() -> None:
    """Spark started (about 14 s) and its first statement failed with a Java
    stack trace whose cause, connection refused, was far down."""
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(
        SparkSetupError, match=f"no Iceberg REST server answers at http://127.0.0.1:{port}"
    ):
        olympia_spark.session(uri=f"http://127.0.0.1:{port}")


def test_a_server_started_for_a_relative_warehouse_uses_its_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """session(warehouse="lake"), as the README shows it, failed: the relative
    folder was refused as an allowed location, after the catalog was made."""
    monkeypatch.chdir(tmp_path)
    server = start_background("lake")
    try:
        client = load_catalog("r", **{"type": "rest", "uri": server.uri})
        client.create_namespace("rel")
        table = client.create_table(("rel", "t"), pa.schema([("id", pa.int64())]))
        assert table.metadata.location == str(tmp_path / "lake" / "rel.db" / "t")
    finally:
        server.stop()


def test_session_needs_one_of_warehouse_and_uri() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        olympia_spark.session()
    with pytest.raises(ValueError, match="exactly one"):
        olympia_spark.session(warehouse="memory://x", uri="http://127.0.0.1:1")
