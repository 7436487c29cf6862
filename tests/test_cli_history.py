"""The command line as an operator reads it (issue 22): a log by names with
who and why, rollbacks named by their target, Iceberg details in ``show``,
dotted and nested names, and errors that are one line, JSON under
``--json`` and exit with the codes the README gives."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog
from test_cli import run, run_json

import olympia
from olympia import changes, layout

#: An internal object key: a 4-character type prefix then a name
#: (``AAACsales orders``); the log must never show one.
INTERNAL_KEY = re.compile(r"AAA[A-E][A-Za-z0-9]")


@pytest.fixture
def shop(tmp_path: Path) -> str:
    """Versions 1-4: a commit with a message and an author, one with reads,
    one that renames, and a rollback to version 1."""
    uri = str(tmp_path / "shop")
    cat = olympia.create_catalog(uri)
    with cat.transaction(message="set up the shop", author="alice") as t:  # 1
        t.create_namespace("sales.eu", {"owner": "ops"})
        t.create_table("sales.eu", "orders", metadata_location="s3://lake/o/v1.json")
    with cat.transaction(author="bob", properties={"job": "nightly"}) as t:  # 2
        t.list_tables("sales.eu")
        t.describe_table("sales.eu", "orders")
        t.update_table("sales.eu", "orders", metadata_location="s3://lake/o/v2.json")
        t.create_table("sales.eu", "audit", metadata_location="s3://lake/a/v1.json")
    with cat.transaction() as t:  # 3
        t.rename_table("sales.eu", "audit", "sales.eu", "audit_log")
        t.alter_namespace("sales.eu", {"tier": "gold"})
    cat.rollback_to(1)  # 4
    return uri


def test_log_names_objects_authors_and_messages(shop: str) -> None:
    res = run("log", warehouse=shop)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    for text in (
        "sales.eu created",
        "sales.eu.orders created",
        "sales.eu.orders updated",
        "sales.eu.audit created",
        "sales.eu.audit renamed to sales.eu.audit_log",
        "sales.eu altered (set tier)",
        "set up the shop",
        "alice",
        "bob",
        "rollback to version 1",
    ):
        assert text in out, (text, out)
    assert "table_update" not in out and "table_create" not in out
    assert not INTERNAL_KEY.search(out), out
    # reads only with --reads
    assert "read sales.eu.orders" not in out
    assert "listed tables of sales.eu" not in out
    with_reads = run("log", "--reads", warehouse=shop).stdout
    assert "read sales.eu.orders" in with_reads
    assert "listed tables of sales.eu" in with_reads


def test_log_json_is_structured_by_name(shop: str) -> None:
    log = run_json("log", warehouse=shop)
    text = json.dumps(log)
    assert not INTERNAL_KEY.search(text), text
    assert [e["version"] for e in log] == [0, 1, 2, 3, 4]
    first = log[1]["transactions"][0]
    assert (first["message"], first["author"]) == ("set up the shop", "alice")
    assert first["changes"] == [
        {"kind": "namespace", "name": "sales.eu", "change": "created"},
        {"kind": "table", "name": "sales.eu.orders", "change": "created"},
    ]
    second = log[2]["transactions"][0]
    assert second["author"] == "bob" and second["properties"] == {"job": "nightly"}
    assert {c["name"]: c["change"] for c in second["changes"]} == {
        "sales.eu.orders": "updated",
        "sales.eu.audit": "created",
    }
    assert all("read_only" not in c for c in second["changes"])
    rename = log[3]["transactions"][0]["changes"][0]
    assert rename == {
        "kind": "table",
        "name": "sales.eu.audit",
        "change": "renamed",
        "target": "sales.eu.audit_log",
    }
    assert log[4]["rollback_to"] == 1 and log[3]["rollback_to"] is None
    reads = run_json("log", "--reads", warehouse=shop)[2]["transactions"][0]["changes"]
    assert {"kind": "table", "name": "sales.eu.orders", "change": "read", "read_only": True} in (
        reads
    )


def test_log_graph_names_the_rollback_target_and_changes(shop: str) -> None:
    graph = run("log", "--graph", warehouse=shop).stdout
    assert "rollback to version 1" in graph
    assert "tree of 3" not in graph  # the version before the rollback is not its target
    assert "sales.eu.orders updated" in graph
    assert 'alice: "set up the shop"' in graph
    assert graph.count("* ") == 5


def test_txn_show_lists_actions_by_name(shop: str) -> None:
    cat = olympia.load_catalog(shop)
    txn = cat.begin()
    txn.create_table("sales.eu", "staged", "s3://lake/staged.json")
    txn_id = txn.distribute()
    shown = run_json("txn", "show", txn_id, warehouse=shop)
    assert {"kind": "table", "name": "sales.eu.staged", "change": "created"} in shown["actions"]
    assert not INTERNAL_KEY.search(json.dumps(shown))
    cat.resume(txn_id).rollback()


# --- names --------------------------------------------------------------------------------


def test_dotted_and_nested_names(shop: str) -> None:
    dotted = run_json("show", "table", "sales.eu.orders", warehouse=shop)
    assert (dotted["namespace"], dotted["name"]) == ("sales.eu", "orders")
    two = run_json("show", "table", "sales.eu", "orders", warehouse=shop)
    assert two["metadata_location"] == dotted["metadata_location"] == "s3://lake/o/v1.json"
    missing = run("show", "table", "sales.eu.nope", warehouse=shop)
    assert missing.returncode == 2 and "nope" in missing.stderr
    assert "Traceback" not in missing.stderr
    undotted = run("show", "table", "orders", warehouse=shop)
    assert undotted.returncode == 2 and "NAMESPACE.NAME" in undotted.stderr
    # `ls sales` when only `sales.eu` exists lists the nested namespace
    listing = run_json("ls", "sales", warehouse=shop)
    assert listing["namespaces"] == ["sales.eu"] and listing["tables"] == []
    assert "sales.eu" in run("ls", "sales", warehouse=shop).stdout
    assert run_json("ls", "sales.eu", warehouse=shop)["tables"] == ["orders"]
    assert run("ls", "nosuch", warehouse=shop).returncode == 2


def test_a_table_name_holding_a_dot(tmp_path: Path) -> None:
    uri = str(tmp_path / "lake")
    cat = olympia.create_catalog(uri)
    with cat.transaction() as t:
        t.create_namespace("a")
        t.create_table("a", "b.c", "s3://lake/abc.json")
    shown = run_json("show", "table", "a.b.c", warehouse=uri)
    assert (shown["namespace"], shown["name"]) == ("a", "b.c")


# --- show with Iceberg details ------------------------------------------------------------


def test_show_table_and_view_with_iceberg_details(tmp_path: Path) -> None:
    warehouse = str(tmp_path / "lake")
    ice = load_catalog(
        "lake", **{"py-catalog-impl": "olympia.iceberg.OlympiaCatalog", "warehouse": warehouse}
    )
    ice.create_namespace(("shop",))
    df = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "item": ["tea", "jam", "oil"]})
    orders = ice.create_table("shop.orders", df.schema)
    orders.append(df)
    orders.append(df.slice(0, 1))
    snapshot = ice.load_table("shop.orders").current_snapshot()
    assert snapshot is not None

    shown = run_json("show", "table", "shop.orders", warehouse=warehouse)
    details = shown["iceberg"]
    assert [(f["name"], f["type"]) for f in details["schema"]] == [
        ("id", "long"),
        ("item", "string"),
    ]
    assert details["current_snapshot_id"] == snapshot.snapshot_id
    assert details["snapshots"] == 2 and details["rows"] == 4
    assert details["summary"]["operation"] == "append"
    assert details["location"].endswith("shop.db/orders")
    text = run("show", "table", "shop.orders", warehouse=warehouse).stdout
    for word in ("schema", "item", "string", str(snapshot.snapshot_id), "total-records"):
        assert word in text, (word, text)

    cat = olympia.load_catalog(warehouse)
    with cat.transaction() as t:
        t.create_view("shop", "recent", sql_text="SELECT * FROM shop.orders", dialect="spark")
    view = run_json("show", "view", "shop.recent", warehouse=warehouse)
    assert view["sql_text"] == "SELECT * FROM shop.orders"
    assert (
        "SELECT * FROM shop.orders"
        in run("show", "view", "shop.recent", warehouse=warehouse).stdout
    )


def test_show_table_whose_metadata_cannot_be_read_says_so(tmp_path: Path) -> None:
    uri = str(tmp_path / "lake")
    cat = olympia.create_catalog(uri)
    with cat.transaction() as t:
        t.create_namespace("n")
        t.create_table("n", "t", str(tmp_path / "gone.metadata.json"))
    shown = run("show", "table", "n.t", warehouse=uri)
    assert shown.returncode == 0, shown.stderr
    assert "cannot read the metadata" in shown.stdout
    assert "Traceback" not in shown.stderr


# --- errors -------------------------------------------------------------------------------


def test_usage_errors_are_json_under_json(shop: str) -> None:
    res = run("log", "--bogus", "--json", warehouse=shop)
    assert res.returncode == 2
    doc = json.loads(res.stdout)
    assert doc["exit_code"] == 2 and "--bogus" in doc["error"]
    assert doc["usage"].startswith("usage: olympia")
    assert "Traceback" not in res.stderr
    res = run("ls", "--version", "x", "--json", warehouse=shop)
    assert res.returncode == 2 and "not a version number" in json.loads(res.stdout)["error"]
    res = run("nosuchcommand", "--json", warehouse=shop)
    assert res.returncode == 2 and json.loads(res.stdout)["exit_code"] == 2
    plain = run("log", "--bogus", warehouse=shop)
    assert plain.returncode == 2 and plain.stdout == ""
    assert "usage: olympia" in plain.stderr and "--bogus" in plain.stderr
    missing = run("log", "--since", "--json", warehouse=shop)  # a subcommand's own error
    assert json.loads(missing.stdout)["usage"].startswith("usage: olympia log")


def test_errors_are_one_line_on_a_piped_stderr(shop: str) -> None:
    long_name = "n" * 120
    res = run("show", "table", "sales.eu", long_name, warehouse=shop)
    assert res.returncode == 2
    lines = [line for line in res.stderr.splitlines() if line]
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("olympia: error:") and long_name in lines[0]


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (("export", "--drop", "nope"), 2, "nope"),
        (("show", "table", "sales.eu.nope"), 2, "nope"),
        (("ls", "--version", "99"), 2, "99"),
        (("diff", "0", "99"), 2, "99"),
        (("txn", "show", "0" * 32), 2, "0" * 32),
        (("rollback", "99"), 2, "99"),
        (("show", "table", "bad\\name.x"), 2, "bad"),
    ],
)
def test_exit_codes_are_the_readmes(
    shop: str, args: tuple[str, ...], code: int, words: str
) -> None:
    res = run(*args, warehouse=shop)
    assert res.returncode == code, (args, res.returncode, res.stderr)
    assert words in res.stderr and "Traceback" not in res.stderr
    as_json = run(*args, "--json", warehouse=shop)
    assert json.loads(as_json.stdout) == {
        "error": json.loads(as_json.stdout)["error"],
        "exit_code": code,
    }


def test_exit_codes_for_a_missing_and_a_damaged_catalog(tmp_path: Path, shop: str) -> None:
    res = run("ls", warehouse=str(tmp_path / "nothing"))
    assert res.returncode == 2 and "olympia init" in res.stderr
    cat = olympia.load_catalog(shop)
    latest = Path(shop) / layout.root_path(cat.version)
    latest.write_bytes(b"not an arrow file")
    damaged = run("ls", warehouse=shop)
    assert damaged.returncode == 3, damaged.stderr
    assert "Traceback" not in damaged.stderr


def _readme_exit_codes() -> dict[int, str]:
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    start = readme.index("Exit codes:")
    line = " ".join(readme[start : readme.index("\n\n", start)].split())
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"(\d) ([^;]+)", line)}


def test_the_readme_states_these_exit_codes() -> None:
    codes = _readme_exit_codes()
    assert set(codes) == {0, 1, 2, 3}
    assert "unknown" in codes[2] and "name" in codes[2]


def test_every_help_example_parses() -> None:
    """Each command's ``--help`` examples are command lines its parser takes."""
    import shlex

    from olympia.cli import COMMANDS, build_parser

    parser = build_parser()
    seen = 0
    for command in COMMANDS:
        for example in command.examples:
            words = shlex.split(example, comments=True)
            assert words[:2] == ["olympia", command.name], example
            args = parser.parse_args(words[1:])
            assert args.fn is command.run
            seen += 1
    assert seen >= 2 * len(COMMANDS)


def test_an_object_created_then_updated_in_one_transaction_reads_created() -> None:
    from olympia import changes
    from olympia.proto import actions_pb2 as apb

    A = apb.ActionType
    key = "AAACsales orders"  # a compact table key: type 2, namespace, name
    named = changes.describe(
        [
            apb.Action(type=A.TABLE_CREATE, object_key=key),
            apb.Action(type=A.TABLE_UPDATE, object_key=key),
            apb.Action(type=A.TABLE_UPDATE, object_key="AAACsales audit"),
            apb.Action(type=A.TABLE_UPDATE, object_key="AAACsales audit"),
            apb.Action(type=A.TABLE_DESCRIBE, object_key=key, read_only=True),
        ]
    )
    assert [n.text() for n in named] == ["sales.orders created", "sales.audit updated"]
    padded = "AAAC" + "sales".ljust(128) + "orders".ljust(128)  # format version 1 keys
    assert changes.name_of(apb.Action(type=A.TABLE_DROP, object_key=padded)).text() == (
        "sales.orders dropped"
    )


def test_a_table_goes_into_an_implicit_parent_namespace(tmp_path: Path) -> None:
    """namespace_exists says yes for the parent of a nested namespace (as in
    SqlCatalog), so a table can be created there: found by the README's
    Spark example (CREATE NAMESPACE IF NOT EXISTS, then CREATE TABLE)."""
    ice = load_catalog(
        "lake",
        **{"py-catalog-impl": "olympia.iceberg.OlympiaCatalog", "warehouse": str(tmp_path)},
    )
    ice.create_namespace(("sales", "eu"))
    assert ice.namespace_exists("sales")
    ice.create_table("sales.orders", pa.schema([("id", pa.int64())]))
    assert ice.list_tables("sales") == [("sales", "orders")]
    assert ice.load_namespace_properties("sales") == {}
    history = olympia.load_catalog(str(tmp_path)).history()
    created = [n.name for t in history[-1].transactions for n in changes.describe(t.actions)]
    assert created == ["sales", "sales.orders"]  # one version: the namespace and its table
