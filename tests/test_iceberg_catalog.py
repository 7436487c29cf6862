"""OlympiaCatalog as a PyIceberg catalog: the behaviour it shares with
SqlCatalog (parametrized over both) and what only it has (names, layout,
configuration, the layering rule)."""

from __future__ import annotations

import ast
from pathlib import Path

import pyarrow as pa
import pytest
from iceberg_helpers import ids_of, olympia_catalog, rows, sql_catalog, table_files
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import IntegerType, LongType, NestedField, StringType

import olympia
from olympia.iceberg import OlympiaCatalog

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "v", StringType(), required=False),
)


@pytest.fixture(params=["olympia", "sql"])
def catalog(request: pytest.FixtureRequest, tmp_path: Path) -> Catalog:
    if request.param == "olympia":
        return olympia_catalog(f"file://{tmp_path}/lake")
    return sql_catalog(tmp_path)


# --- namespaces -----------------------------------------------------------------------


def test_namespace_lifecycle(catalog: Catalog) -> None:
    catalog.create_namespace("sales", {"owner": "ops"})
    assert catalog.namespace_exists("sales")
    assert ("sales",) in catalog.list_namespaces()
    assert catalog.load_namespace_properties("sales")["owner"] == "ops"
    summary = catalog.update_namespace_properties(
        "sales", removals={"owner"}, updates={"tier": "gold"}
    )
    assert summary.removed == ["owner"] and summary.updated == ["tier"]
    props = catalog.load_namespace_properties("sales")
    assert props.get("tier") == "gold" and "owner" not in props
    catalog.drop_namespace("sales")
    assert not catalog.namespace_exists("sales")


def test_namespace_errors_name_the_namespace(catalog: Catalog) -> None:
    catalog.create_namespace("ns")
    with pytest.raises(NamespaceAlreadyExistsError, match="ns"):
        catalog.create_namespace("ns")
    with pytest.raises(NoSuchNamespaceError, match="missing"):
        catalog.load_namespace_properties("missing")
    with pytest.raises(NoSuchNamespaceError, match="missing"):
        catalog.list_tables("missing")
    catalog.create_table("ns.t", SCHEMA)
    with pytest.raises(NamespaceNotEmptyError, match="ns"):
        catalog.drop_namespace("ns")


def test_multi_level_namespaces(catalog: Catalog) -> None:
    catalog.create_namespace(("a", "b"))
    catalog.create_namespace(("a", "c", "d"))
    catalog.create_namespace("x")
    assert sorted(catalog.list_namespaces()) == [("a",), ("x",)]
    assert sorted(catalog.list_namespaces(("a",))) == [("a", "b"), ("a", "c")]
    assert catalog.namespace_exists(("a", "b"))
    table = catalog.create_table(("a", "b", "t"), SCHEMA)
    table.append(rows([1, 2]))
    assert catalog.list_tables(("a", "b")) == [("a", "b", "t")]
    assert ids_of(catalog.load_table("a.b.t")) == [1, 2]


# --- tables ----------------------------------------------------------------------------


def test_table_lifecycle(catalog: Catalog) -> None:
    catalog.create_namespace("ns")
    catalog.create_namespace("other")
    catalog.create_table("ns.t", SCHEMA)
    assert catalog.table_exists("ns.t")
    assert catalog.list_tables("ns") == [("ns", "t")]
    with pytest.raises(TableAlreadyExistsError, match="t"):
        catalog.create_table("ns.t", SCHEMA)
    renamed = catalog.rename_table("ns.t", "other.u")
    assert renamed.name() == ("other", "u")
    assert not catalog.table_exists("ns.t")
    with pytest.raises(NoSuchTableError, match="t"):
        catalog.load_table("ns.t")
    catalog.drop_table("other.u")
    assert catalog.list_tables("other") == []
    with pytest.raises(NoSuchTableError):
        catalog.drop_table("other.u")
    with pytest.raises(NoSuchNamespaceError):
        catalog.create_table("missing.t", SCHEMA)


def test_append_overwrite_delete_round_trip(catalog: Catalog) -> None:
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.t", SCHEMA)
    table.append(rows([1, 2, 3]))
    table.append(rows([4]))
    assert ids_of(catalog.load_table("ns.t")) == [1, 2, 3, 4]
    table.delete("id = 2")
    assert ids_of(catalog.load_table("ns.t")) == [1, 3, 4]
    table.overwrite(rows([10, 11]), overwrite_filter="id >= 3")
    loaded = catalog.load_table("ns.t")
    assert ids_of(loaded) == [1, 10, 11]
    assert loaded.scan(row_filter="id = 10").to_arrow()["v"].to_pylist() == ["x10"]
    assert len(loaded.history()) == len(table.metadata.snapshots)


def test_schema_and_partition_evolution(catalog: Catalog) -> None:
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.t", SCHEMA)
    table.append(rows([1, 2]))
    with table.update_schema() as update:
        update.add_column("score", IntegerType())
    with table.update_spec() as spec:
        spec.add_identity("v")
    table.append(
        pa.table(
            {
                "id": pa.array([3], pa.int64()),
                "v": pa.array(["x3"]),
                "score": pa.array([7], pa.int32()),
            }
        )
    )
    loaded = catalog.load_table("ns.t")
    assert [f.name for f in loaded.schema().fields] == ["id", "v", "score"]
    assert [f.name for f in loaded.spec().fields] == ["v"]
    got = loaded.scan().to_arrow().sort_by("id")
    assert got["score"].to_pylist() == [None, None, 7]


def test_snapshot_refs_round_trip(catalog: Catalog) -> None:
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.t", SCHEMA)
    table.append(rows([1]))
    first = table.current_snapshot()
    assert first is not None
    table.manage_snapshots().create_tag(first.snapshot_id, "v1").create_branch(
        first.snapshot_id, "dev"
    ).commit()
    table.append(rows([2]))
    loaded = catalog.load_table("ns.t")
    assert set(loaded.refs()) == {"main", "v1", "dev"}
    assert ids_of(loaded) == [1, 2]
    assert sorted(
        loaded.scan(snapshot_id=loaded.refs()["v1"].snapshot_id).to_arrow()["id"].to_pylist()
    ) == [1]


def test_partitioned_table(catalog: Catalog) -> None:
    catalog.create_namespace("ns")
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "v"))
    table = catalog.create_table("ns.p", SCHEMA, partition_spec=spec)
    table.append(rows([1, 2, 3]))
    table.delete("v = 'x2'")
    assert ids_of(catalog.load_table("ns.p")) == [1, 3]


def test_create_table_transaction(catalog: Catalog) -> None:
    catalog.create_namespace("ns")
    with catalog.create_table_transaction("ns.t", SCHEMA) as txn:
        txn.set_properties(owner="me")
    loaded = catalog.load_table("ns.t")
    assert loaded.properties["owner"] == "me"


def test_register_table(catalog: Catalog) -> None:
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.t", SCHEMA)
    table.append(rows([5]))
    catalog.register_table("ns.copy", table.metadata_location)
    assert ids_of(catalog.load_table("ns.copy")) == [5]
    with pytest.raises(TableAlreadyExistsError):
        catalog.register_table("ns.copy", table.metadata_location)


def test_failed_requirement_raises_commit_failed(catalog: Catalog) -> None:
    from uuid import uuid4

    from pyiceberg.table.update import AssertTableUUID, SetPropertiesUpdate

    catalog.create_namespace("ns")
    table = catalog.create_table("ns.t", SCHEMA)
    with pytest.raises(CommitFailedException, match="UUID"):
        catalog.commit_table(
            table, (AssertTableUUID(uuid=uuid4()),), (SetPropertiesUpdate(updates={"k": "v"}),)
        )
    assert "k" not in catalog.load_table("ns.t").properties


def test_purge_table_deletes_files(tmp_path: Path) -> None:
    cat = olympia_catalog(str(tmp_path / "lake"))
    cat.create_namespace("ns")
    table = cat.create_table("ns.t", SCHEMA)
    table.append(rows([1, 2]))
    assert table_files(tmp_path / "lake")
    cat.purge_table("ns.t")
    assert not cat.table_exists("ns.t")
    cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)  # type: ignore[attr-defined]
    assert [
        f for f in table_files(tmp_path / "lake") if f.endswith((".parquet", ".json", ".avro"))
    ] == []


# --- olympia only ---------------------------------------------------------------------


def test_default_table_location_is_namespace_db_folder(tmp_path: Path) -> None:
    cat = olympia_catalog(f"file://{tmp_path}/lake")
    cat.create_namespace(("a", "b"))
    table = cat.create_table(("a", "b", "t"), SCHEMA)
    assert table.location() == f"file://{tmp_path}/lake/a.b.db/t"
    assert table.metadata_location.startswith(f"file://{tmp_path}/lake/a.b.db/t/metadata/00000-")
    table.append(rows([1]))
    assert cat.load_table("a.b.t").metadata_location.split("/")[-1].startswith("00001-")
    info = cat.olympia.latest().describe_table("a.b", "t")  # type: ignore[attr-defined]
    assert info.format == "iceberg" and info.properties == {}


def test_namespace_location_property(tmp_path: Path) -> None:
    cat = olympia_catalog(str(tmp_path / "lake"))
    cat.create_namespace("ns", {"location": f"file://{tmp_path}/elsewhere"})
    table = cat.create_table("ns.t", SCHEMA)
    assert table.location() == f"file://{tmp_path}/elsewhere/t"


@pytest.mark.parametrize(
    ("namespace", "message"),
    [(("a.b",), "contains '.'"), (("a", ""), "empty level"), ((), "empty namespace")],
)
def test_refused_namespace_names(tmp_path: Path, namespace: tuple[str, ...], message: str) -> None:
    cat = olympia_catalog(str(tmp_path / "lake"))
    with pytest.raises(ValueError, match=message):
        cat.create_namespace(namespace)
    assert cat.list_namespaces() == []


def test_refused_table_identifiers(tmp_path: Path) -> None:
    cat = olympia_catalog(str(tmp_path / "lake"))
    cat.create_namespace("ns")
    with pytest.raises(ValueError, match="needs a namespace"):
        cat.create_table("t", SCHEMA)
    with pytest.raises(ValueError, match=r"contains '\.'"):
        cat.create_table(("ns.a", "b"), SCHEMA)
    with pytest.raises(ValueError, match="forbidden character"):
        cat.create_table(("ns", "a\\b"), SCHEMA)
    assert cat.list_tables("ns") == []


def test_table_name_with_dot_is_one_level(tmp_path: Path) -> None:
    cat = olympia_catalog(str(tmp_path / "lake"))
    cat.create_namespace("ns")
    cat.create_namespace(("ns", "a"))
    dotted = cat.create_table(("ns", "a.b"), SCHEMA)
    nested = cat.create_table(("ns", "a", "b"), SCHEMA)
    assert cat.list_tables("ns") == [("ns", "a.b")]
    assert cat.list_tables(("ns", "a")) == [("ns", "a", "b")]
    assert cat.load_table(("ns", "a.b")).metadata_location == dotted.metadata_location
    assert dotted.location() != nested.location()
    cat.drop_table(("ns", "a.b"))
    assert cat.table_exists(("ns", "a", "b"))
    assert not cat.table_exists(("ns", "a.b"))


def test_empty_warehouse_without_create(tmp_path: Path) -> None:
    with pytest.raises(olympia.CatalogNotFoundError, match="olympia init -w"):
        olympia_catalog(str(tmp_path / "none"), **{"create-catalog": "false"})
    olympia.create_catalog(str(tmp_path / "made"))
    cat = olympia_catalog(str(tmp_path / "made"), **{"create-catalog": "false"})
    assert cat.list_namespaces() == []


def test_first_use_creates_catalog(tmp_path: Path) -> None:
    olympia_catalog(str(tmp_path / "lake")).create_namespace("ns")
    again = olympia_catalog(str(tmp_path / "lake"))
    assert again.list_namespaces() == [("ns",)]
    assert olympia.load_catalog(str(tmp_path / "lake")).version == 1


def test_bad_properties(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="warehouse"):
        OlympiaCatalog("lake")
    with pytest.raises(ValueError, match="isolation"):
        olympia_catalog(str(tmp_path), isolation="chaos")
    with pytest.raises(ValueError, match="create-catalog"):
        olympia_catalog(str(tmp_path), **{"create-catalog": "maybe"})


def test_views(tmp_path: Path) -> None:
    from pyiceberg.exceptions import NoSuchViewError, ViewAlreadyExistsError
    from pyiceberg.view.metadata import SQLViewRepresentation, ViewVersion

    cat = olympia_catalog(str(tmp_path / "lake"))
    cat.create_namespace("ns")
    version = ViewVersion(
        version_id=1,
        schema_id=0,
        timestamp_ms=1,
        representations=[SQLViewRepresentation(type="sql", sql="SELECT 1 AS id", dialect="spark")],
        default_namespace=("ns",),
    )
    view = cat.create_view("ns.v", SCHEMA, version)
    assert view.name() == ("ns", "v")
    assert cat.view_exists("ns.v") and cat.list_views("ns") == [("ns", "v")]
    loaded = cat.load_view("ns.v")
    sql = loaded.sql_for("spark")
    assert sql is not None and sql.sql == "SELECT 1 AS id"
    assert [f.name for f in loaded.schema().fields] == ["id", "v"]
    with pytest.raises(ViewAlreadyExistsError, match="ns.v"):
        cat.create_view("ns.v", SCHEMA, version)
    cat.drop_view("ns.v")
    assert not cat.view_exists("ns.v")
    with pytest.raises(NoSuchViewError, match="ns.v"):
        cat.load_view("ns.v")
    with pytest.raises(NoSuchViewError):
        cat.drop_view("ns.v")


def test_only_olympia_iceberg_imports_pyiceberg() -> None:
    root = Path(olympia.__file__).parent
    offenders = []
    for path in root.rglob("*.py"):
        # the Iceberg layer, and the layers above it (REST server, Spark helper,
        # jobs, and the CLI, which runs the purges of Iceberg tables on expire)
        if any((root / layer) in path.parents for layer in ("iceberg", "rest", "jobs", "cli")):
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                if name.split(".")[0] == "pyiceberg" or name.startswith("olympia.iceberg"):
                    offenders.append(f"{path.relative_to(root)}: {name}")
    assert offenders == []
    assert (root / "iceberg" / "catalog.py").exists()


def test_catalog_maintenance_leaves_table_files_alone(tmp_path: Path) -> None:
    """The warehouse is the catalog root: fsck and expire_versions look only
    at the catalog's own folders, never at the tables' *.db folders."""
    import datetime

    root = tmp_path / "lake"
    cat = olympia_catalog(str(root))
    assert isinstance(cat, OlympiaCatalog)
    cat.create_namespace("ns")
    table = cat.create_table("ns.t", SCHEMA)
    for i in range(3):
        table.append(rows([i]))
    files = table_files(root)
    report = cat.olympia.fsck()
    assert report.ok
    assert not [o for o in report.orphans if ".db/" in str(o)]
    cat.olympia.expire_versions(
        older_than=datetime.datetime.now(datetime.UTC),
        grace_seconds=0,
        allow_short_grace=True,
    )
    assert table_files(root) == files
    assert ids_of(cat.load_table("ns.t")) == [0, 1, 2]


def test_a_location_of_a_scheme_without_file_io_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    """Without allowed locations the plugin takes any absolute location, but
    not one whose scheme no FileIO can write (``ftp://``): refused at once,
    naming the scheme, rather than a table left that no one can write."""
    from olympia.iceberg.locations import LocationNotAllowedError

    cat = olympia_catalog(str(tmp_path / "wh"))
    cat.create_namespace("ns")
    before = olympia.load_catalog(str(tmp_path / "wh")).latest().version
    schema = Schema(NestedField(1, "id", LongType(), required=False))
    with pytest.raises(LocationNotAllowedError, match="scheme 'ftp'"):
        cat.create_table(("ns", "t"), schema, location="ftp://host/data/t")
    assert olympia.load_catalog(str(tmp_path / "wh")).latest().version == before
    assert cat.list_tables("ns") == []


def test_a_table_an_earlier_build_left_at_a_relative_location_reads_and_says_why_it_cannot_be_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An earlier build took a relative warehouse as given (the README's
    ``"warehouse": "lake"``) and committed tables at ``lake/ns.db/t``. This
    build refused their appends, naming the manifest list PyIceberg wrote
    as a relative location the user had given: the refusal now names the
    table's committed location, says where it came from and what to do;
    reading still works."""
    import json

    from pyiceberg.exceptions import ForbiddenError

    monkeypatch.chdir(tmp_path)
    cat = olympia_catalog(f"file://{tmp_path}/wh")
    cat.create_namespace("ns")
    table = cat.create_table(("ns", "t"), rows([1]).schema)
    table.append(rows([1, 2]))
    current = table.metadata_location
    document = json.loads(Path(current.removeprefix("file://")).read_text())
    document["location"] = "wh/ns.db/t"  # what the earlier build recorded
    relative = tmp_path / "wh" / "ns.db" / "t" / "metadata" / "99999-relative.metadata.json"
    relative.write_text(json.dumps(document))
    core = olympia.load_catalog(str(tmp_path / "wh"))
    with core.transaction() as t:
        t.update_table("ns", "t", metadata_location=f"file://{relative}")
    old = cat.load_table(("ns", "t"))
    assert sorted(ids_of(old)) == [1, 2]
    before = core.latest().version
    with pytest.raises(ForbiddenError) as err:
        old.append(rows([3]))
    message = str(err.value)
    assert "table ns.t cannot be written: its committed location 'wh/ns.db/t'" in message
    assert "relative" in message and "copy it into a table at an absolute location" in message
    assert olympia.load_catalog(str(tmp_path / "wh")).latest().version == before
