"""The ``olympia`` command line, run as a user runs it: the console script in a
subprocess, checking output and exit codes, bad input included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import olympia

SCRIPT = Path(sys.executable).with_name("olympia")


def run(*args: str, warehouse: str | None = None, env: dict[str, str] | None = None) -> Any:
    command = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "olympia.cli"]
    full_env = {k: v for k, v in os.environ.items() if k != "OLYMPIA_WAREHOUSE"}
    if warehouse is not None:
        full_env["OLYMPIA_WAREHOUSE"] = warehouse
    full_env.update(env or {})
    return subprocess.run(
        [*command, *args], capture_output=True, text=True, env=full_env, timeout=120
    )


def run_json(*args: str, warehouse: str) -> Any:
    res = run(*args, "--json", warehouse=warehouse)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_console_script_is_installed() -> None:
    # `pip install` of the project declares it (pyproject [project.scripts]).
    assert SCRIPT.exists(), f"{SCRIPT} missing: reinstall the project (pip install -e .)"


def test_common_options_may_come_before_the_command(tmp_path: Path) -> None:
    """``olympia -w LAKE ls`` (as git -C, kubectl -n) was a usage error
    saying that ``LAKE`` was no command; given on both sides, the one after
    the command wins."""
    lake = str(tmp_path / "lake")
    assert run("-w", lake, "init").returncode == 0
    listed = run("--json", "-w", lake, "ls")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["version"] == 0
    with_option = run("-o", "s3.region=eu-west-1", "-w", lake, "ls", "--json")
    assert with_option.returncode == 0, with_option.stderr
    later_wins = run("-w", str(tmp_path / "nothing"), "ls", "-w", lake)
    assert later_wins.returncode == 0, later_wins.stderr
    missing = run("-w", str(tmp_path / "nothing"), "ls")
    assert missing.returncode == 2 and "no olympia catalog" in missing.stderr
    bad = run("-o", "s3.colour=red", "-w", lake, "ls")
    assert bad.returncode == 2 and "s3.colour" in bad.stderr


@pytest.fixture
def lake(tmp_path: Path) -> str:
    """A catalog with a few versions: namespaces, tables, a view, a rebased commit."""
    uri = str(tmp_path / "lake")
    res = run("init", "--isolation", "serializable", warehouse=uri)
    assert res.returncode == 0, res.stderr
    assert "created an empty catalog" in res.stdout
    cat = olympia.load_catalog(uri)
    with cat.transaction() as t:  # version 1
        t.create_namespace("sales", {"owner": "ops"})
        t.create_namespace("finance")
        t.create_table("sales", "orders", "s3://lake/orders/v1.json")
        t.create_view("sales", "recent", sql_text="select 1", dialect="spark")
    a, b = cat.begin(), cat.begin()
    a.create_table("finance", "ledger", "s3://lake/ledger/v1.json")
    b.update_table("sales", "orders", metadata_location="s3://lake/orders/v2.json")
    a.commit()  # version 2
    b.commit()  # version 3, rebased over version 2
    return uri


def test_ls_namespaces_tables_and_time_travel(lake: str) -> None:
    res = run("ls", warehouse=lake)
    assert res.returncode == 0, res.stderr
    assert "sales" in res.stdout and "finance" in res.stdout
    data = run_json("ls", warehouse=lake)
    assert data["version"] == 3
    assert {n["name"]: (n["tables"], n["views"]) for n in data["namespaces"]} == {
        "finance": (1, 0),
        "sales": (1, 1),
    }
    assert run_json("ls", "finance", warehouse=lake)["tables"] == ["ledger"]
    assert run_json("ls", "finance", "--version", "1", warehouse=lake)["tables"] == []
    # --as-of a time before version 2 existed
    created_1 = run_json("log", warehouse=lake)[1]["created_at"]
    old = run_json("ls", "finance", "--as-of", created_1, warehouse=lake)
    assert old["version"] in (1, 2, 3)  # same millisecond is allowed; normally 1
    res = run("ls", "nosuch", warehouse=lake)
    assert res.returncode == 2
    assert "nosuch" in res.stderr


def test_show_objects(lake: str) -> None:
    t = run_json("show", "table", "sales", "orders", warehouse=lake)
    assert t["metadata_location"] == "s3://lake/orders/v2.json"
    assert t["version"] == 3
    old = run_json("show", "table", "sales", "orders", "--version", "1", warehouse=lake)
    assert old["metadata_location"] == "s3://lake/orders/v1.json"
    ns = run_json("show", "namespace", "sales", warehouse=lake)
    assert ns["properties"] == {"owner": "ops"}
    v = run_json("show", "view", "sales", "recent", warehouse=lake)
    assert v["sql_text"] == "select 1"
    human = run("show", "table", "sales", "orders", warehouse=lake)
    assert "s3://lake/orders/v2.json" in human.stdout
    missing = run("show", "table", "sales", "nope", warehouse=lake)
    assert missing.returncode == 2
    assert "sales.nope" in missing.stderr and "Traceback" not in missing.stderr
    bad = run("show", "table", "sales", "bad\\name", warehouse=lake)
    assert bad.returncode == 2
    assert "bad\\\\name" in bad.stderr and "Traceback" not in bad.stderr


def test_log_json_table_and_graph(lake: str) -> None:
    log = run_json("log", warehouse=lake)
    assert [e["version"] for e in log] == [0, 1, 2, 3]
    assert log[3]["begin_version"] == 1 and log[3]["isolation"] == "serializable"
    assert {"kind": "table", "name": "sales.orders", "change": "updated"} in log[3]["transactions"][
        0
    ]["changes"]
    table = run("log", warehouse=lake)
    assert table.returncode == 0
    assert "sales.orders updated" in table.stdout
    graph = run("log", "--graph", warehouse=lake)
    assert graph.returncode == 0
    assert "began at 1, rebased over 1 version(s)" in graph.stdout
    assert graph.stdout.count("*") == 4
    assert len(run_json("log", "--limit", "2", warehouse=lake)) == 2
    assert [e["version"] for e in run_json("log", "--since", "2", warehouse=lake)] == [2, 3]


def test_diff_between_versions(lake: str) -> None:
    d = run_json("diff", "1", "3", warehouse=lake)
    assert sorted((c["change"], c["kind"], ".".join(c["name"])) for c in d["changes"]) == [
        ("added", "table", "finance.ledger"),
        ("changed", "table", "sales.orders"),
    ]
    back = run_json("diff", "3", "1", warehouse=lake)
    assert ("removed", "table", ["finance", "ledger"]) in [
        (c["change"], c["kind"], c["name"]) for c in back["changes"]
    ]
    assert run_json("diff", "2", warehouse=lake)["to_version"] == 3
    res = run("diff", "1", "99", warehouse=lake)
    assert res.returncode == 2 and "99" in res.stderr
    res = run("diff", "x", warehouse=lake)
    assert res.returncode == 2 and "x" in res.stderr


def test_rollback_export_expire(lake: str, tmp_path: Path) -> None:
    out = run_json("rollback", "1", warehouse=lake)
    assert out == {"rolled_back_to": 1, "version": 4}
    assert run_json("ls", "finance", warehouse=lake)["tables"] == []
    target = str(tmp_path / "backup")
    exp = run_json("export", "nightly", target, warehouse=lake)
    assert exp["version"] == 4
    assert olympia.load_catalog(target).latest().list_tables("sales") == ["orders"]
    again = run("export", "nightly", str(tmp_path / "other"), warehouse=lake)
    assert again.returncode != 0 and "nightly" in again.stderr
    res = run_json(
        "expire", "--keep-last", "1", "--grace-seconds", "0", "--allow-short-grace", warehouse=lake
    )
    assert res["oldest_version"] == 4
    assert res["deleted_roots"] >= 3
    assert res["deleted_markers"] == 0  # markers go only once a horizon has matured
    assert run("ls", "--version", "1", warehouse=lake).returncode == 2
    assert run_json("export", "--drop", "nightly", warehouse=lake) == {"dropped": "nightly"}
    bad = run("expire", "--older-than", "yesterday", warehouse=lake)
    assert bad.returncode == 2 and "yesterday" in bad.stderr


def test_txn_list_show_rollback(lake: str) -> None:
    cat = olympia.load_catalog(lake)
    txn = cat.begin()
    txn.create_table("sales", "staged", "s3://lake/staged.json")
    txn_id = txn.distribute()
    listed = run_json("txn", "list", warehouse=lake)
    assert [t["id"] for t in listed] == [txn_id]
    shown = run_json("txn", "show", txn_id, warehouse=lake)
    assert shown["begin_version"] == 3
    assert {"kind": "table", "name": "sales.staged", "change": "created"} in shown["actions"]
    assert run_json("txn", "rollback", txn_id, warehouse=lake)["rolled_back"] is True
    assert run_json("txn", "list", warehouse=lake) == []
    res = run("txn", "show", "0" * 32, warehouse=lake)
    assert res.returncode == 2
    res = run("txn", "show", "not an id", warehouse=lake)
    assert res.returncode == 2 and "Traceback" not in res.stderr


def test_fsck_finds_missing_damaged_and_orphan_files(tmp_path: Path) -> None:
    uri = str(tmp_path / "lake")
    assert run("init", "--node-order", "4", warehouse=uri).returncode == 0
    cat = olympia.load_catalog(uri)
    with cat.transaction() as t:
        t.create_namespace("ns")
        for i in range(60):  # more new nodes than a root carries inline
            t.create_table("ns", f"t{i:02d}", f"s3://x/{i}.json")
        # a value above inline_value_max_bytes goes to a definition file
        t.create_table("ns", "big", "s3://x/big.json", properties={"k": "v" * 5000})
    clean = run_json("fsck", warehouse=uri)
    assert clean["ok"] is True and clean["missing"] == [] and clean["damaged"] == []
    root = Path(uri)
    orphan = root / "node" / "0000000000001-00000000000000000000000000000000.arrow"
    orphan.write_bytes(b"nobody needs me")
    res = run("fsck", warehouse=uri)
    assert res.returncode == 0
    assert orphan.name in res.stdout
    # a damaged byte in a definition file
    def_file = next((root / "def").iterdir())
    data = bytearray(def_file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    def_file.write_bytes(bytes(data))
    res = run("fsck", "--json", warehouse=uri)
    assert res.returncode == 1
    report = json.loads(res.stdout)
    assert report["ok"] is False
    assert any(def_file.name in d for d in report["damaged"])
    # a deleted node file
    node = next(p for p in (root / "node").iterdir() if p != orphan)
    node.unlink()
    res = run("fsck", warehouse=uri)
    assert res.returncode == 1
    assert node.name in res.stdout and "DAMAGED" in res.stdout


def test_bad_input_is_a_clear_error(tmp_path: Path) -> None:
    res = run("ls")
    assert res.returncode == 2 and "OLYMPIA_WAREHOUSE" in res.stderr
    missing = str(tmp_path / "none")
    res = run("ls", warehouse=missing)
    assert res.returncode == 2
    assert "olympia init" in res.stderr and "Traceback" not in res.stderr
    uri = str(tmp_path / "lake")
    assert run("init", warehouse=uri).returncode == 0
    res = run("init", warehouse=uri)
    assert res.returncode == 2 and "already" in res.stderr
    res = run("ls", "-o", "novalue", warehouse=uri)
    assert res.returncode == 2 and "KEY=VALUE" in res.stderr
    res = run("ls", "--version", "-1", warehouse=uri)
    assert res.returncode == 2
    res = run("ls", "--version", "1", "--as-of", "2026-01-01", warehouse=uri)
    assert res.returncode == 2 and "not both" in res.stderr
    res = run("rollback", "7", warehouse=uri)
    assert res.returncode == 2 and "7" in res.stderr
    res = run("frobnicate", warehouse=uri)
    assert res.returncode == 2
    res = run("--help")
    assert res.returncode == 0 and "examples:" in res.stdout
    for command in (
        "init",
        "ls",
        "show",
        "log",
        "diff",
        "rollback",
        "export",
        "expire",
        "fsck",
        "orphans",
        "txn",
    ):
        res = run(command, "--help")
        assert res.returncode == 0 and "examples:" in res.stdout, command
    for action in ("list", "show", "rollback"):  # the actions below a command too
        res = run("txn", action, "--help")
        assert res.returncode == 0 and "examples:" in res.stdout, action
    assert "full (default): every kept version" in run("export", "--help").stdout


def test_an_object_missing_at_an_older_version_says_which_version(lake: str) -> None:
    """finance.ledger was created by version 2: read as of version 1, the
    message named no version and read as a wrong name."""
    res = run("show", "table", "finance.ledger", "--version", "1", warehouse=lake)
    assert res.returncode == 2
    assert "finance.ledger does not exist at version 1" in res.stderr
    res = run("show", "table", "finance.nope", warehouse=lake)
    assert res.returncode == 2 and "does not exist" in res.stderr and "at version" not in res.stderr


def test_damaged_root_is_exit_3(tmp_path: Path) -> None:
    uri = str(tmp_path / "lake")
    assert run("init", warehouse=uri).returncode == 0
    cat = olympia.load_catalog(uri)
    with cat.transaction() as t:
        t.create_namespace("ns")
    root_file = Path(uri) / "vn" / ("1" + "0" * 63)
    root_file.write_bytes(b"garbage")
    res = run("ls", warehouse=uri)
    assert res.returncode == 3
    assert "Traceback" not in res.stderr and "damaged" in res.stderr.lower()


def test_s3_catalog_through_moto(moto_server: Any) -> None:
    uri, _ = moto_server.location("cli")
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    opt = ["-o", f"endpoint_url={moto_server.endpoint_url}"]
    res = run("init", *opt, warehouse=uri, env=env)
    assert res.returncode == 0, res.stderr
    cat = olympia.load_catalog(uri, moto_server.storage_options)
    with cat.transaction() as t:
        t.create_namespace("s3ns")
    res = run("ls", *opt, "--json", warehouse=uri, env=env)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["namespaces"][0]["name"] == "s3ns"


def test_graph_writes_an_svg_of_history_and_shared_nodes(lake: str, tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    cat = olympia.load_catalog(lake)
    with cat.transaction() as t:  # enough tables for a tree of several levels
        for i in range(400):
            t.create_table("finance", f"t{i:03d}", "s3://x")
    with cat.transaction() as t:
        t.update_table("finance", "t007", metadata_location="s3://y")
    svg = tmp_path / "h.svg"
    res = run("graph", "--svg", str(svg), warehouse=lake)
    assert res.returncode == 0, res.stderr
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    text = svg.read_text()
    assert "version 4 (orange" in text and "version 5 (blue" in text
    shared = int(text.split("grey: ")[1].split(" node file")[0])
    assert shared > 0  # one update copies one path; the rest of the tree is shared
    assert text.count("<circle") == 6  # versions 0..5
    assert "dashed" not in text and "stroke-dasharray" in text  # the rebased version 3
    res = run("graph", "--svg", str(tmp_path / "no" / "such" / "dir.svg"), warehouse=lake)
    assert res.returncode == 2 and "cannot write" in res.stderr


def test_expire_refuses_a_grace_period_shorter_than_twice_the_commit_time_limit(tmp_path):
    uri = str(tmp_path / "lake")
    cat = olympia.create_catalog(uri, commit_time_limit_millis=60_000)
    for name in ("a", "b"):
        with cat.transaction() as t:
            t.create_namespace(name)
    res = run("expire", "--keep-last", "1", "--grace-seconds", "0", warehouse=uri)
    assert res.returncode == 2
    said = " ".join(res.stderr.split())
    assert "commit time limit (60 s)" in said and "--allow-short-grace" in said
    assert "Traceback" not in res.stderr
    assert olympia.load_catalog(uri).oldest_version == 0
    data = run_json(
        "expire", "--keep-last", "1", "--grace-seconds", "0", "--allow-short-grace", warehouse=uri
    )
    assert data["oldest_version"] == 2


# --- CLI habits (issue 22, item 7: part) --------------------------------------


def test_version_flag() -> None:
    for flag in ("--version", "--olympia-version"):
        res = run(flag)
        assert res.returncode == 0 and res.stdout.strip() == olympia.__version__


def test_a_bad_port_is_a_usage_error_not_a_traceback(tmp_path: Path) -> None:
    for port in ("99999", "-1", "http"):
        res = run("serve", "-w", f"file://{tmp_path}/w", "--port", port)
        assert res.returncode == 2, res.stderr
        assert "Traceback" not in res.stderr
        assert "port" in res.stderr


def test_a_closed_pipe_is_not_an_error(tmp_path: Path) -> None:
    uri = f"file://{tmp_path}/w"
    cat = olympia.create_catalog(uri)
    for i in range(300):
        with cat.transaction() as t:
            t.create_namespace(f"n{i:04d}", {"about": "x" * 200})
    command = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "olympia.cli"]
    reader = subprocess.Popen(
        [*command, "log", "-w", uri, "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert reader.stdout is not None and reader.stderr is not None
    assert reader.stdout.read(10)  # like `| head -c 10`: read a little, then go away
    reader.stdout.close()
    error = reader.stderr.read().decode()
    assert reader.wait(timeout=120) == 0, error
    assert "Traceback" not in error and "BrokenPipe" not in error


# --- safe expiration and a file check that reads right (issue 22: items 1, 7, 8) ------


def _all_files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_init_sets_the_retention_that_expire_without_options_applies(tmp_path: Path) -> None:
    uri = str(tmp_path / "lake")
    res = run(
        "init", "--expire-max-age-seconds", "3600", "--expire-min-versions", "2", warehouse=uri
    )
    assert res.returncode == 0, res.stderr
    assert "younger than 1 h" in res.stdout and "newest 2" in res.stdout
    cat = olympia.load_catalog(uri)
    assert cat.definition.expire_max_age_millis == 3_600_000
    assert cat.definition.expire_min_versions == 2
    for name in ("a", "b", "c"):
        with cat.transaction() as t:
            t.create_namespace(name)
    data = run_json("expire", "--grace-seconds", "0", "--allow-short-grace", warehouse=uri)
    assert data["oldest_version"] == 0 and data["expired_versions"] == 0  # all are young
    assert data["retention"] == {"max_age_millis": 3_600_000, "min_versions": 2}
    assert olympia.load_catalog(uri).oldest_version == 0
    for bad in ("0", "-5", "nan", "inf", "soon"):
        res = run("init", "--expire-max-age-seconds", bad, warehouse=str(tmp_path / "x"))
        assert res.returncode == 2 and "Traceback" not in res.stderr, (bad, res.stderr)
    assert not (tmp_path / "x" / "vn").exists()


def test_expire_dry_run_prints_what_would_go_and_deletes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    assert run("init", warehouse=str(root)).returncode == 0
    cat = olympia.load_catalog(str(root))
    for name in ("a", "b", "c", "d"):
        with cat.transaction() as t:
            t.create_namespace(name)
    cat.store.wait_for_background_writes()
    before = _all_files(root)
    args = ["expire", "--keep-last", "2", "--grace-seconds", "0", "--allow-short-grace"]
    res = run(*args, "--dry-run", warehouse=str(root))
    assert res.returncode == 0, res.stderr
    assert "dry run" in res.stdout and "would delete" in res.stdout
    data = run_json(*args, "--dry-run", warehouse=str(root))
    assert _all_files(root) == before
    assert data["dry_run"] is True and data["oldest_version"] == 3
    assert (data["first_expired_version"], data["last_expired_version"]) == (0, 2)
    assert data["deleted_roots"] == 3
    assert {p for p in data["paths"] if p.startswith("vn/")} == {
        f"vn/{n}" for n in ("0" * 64, "1" + "0" * 63, "01" + "0" * 62)
    }
    done = run_json(*args, warehouse=str(root))
    assert done["dry_run"] is False and done["deleted_roots"] == 3 and "paths" not in done
    after = _all_files(root)
    assert {p for p in before if after.get(p) != before[p]} - {"vn/oldest"} == set(data["paths"])
    res = run("expire", "--help")
    assert "--dry-run" in res.stdout and "retention" in res.stdout


def test_fsck_after_a_distributed_commit_has_no_orphans(tmp_path: Path) -> None:
    uri = str(tmp_path / "lake")
    assert run("init", warehouse=uri).returncode == 0
    cat = olympia.load_catalog(uri)
    txn = cat.begin()
    txn.create_namespace("d")
    txn_id = txn.distribute()
    cat.resume(txn_id).commit()
    res = run("fsck", warehouse=uri)
    assert res.returncode == 0, res.stderr
    assert "0 orphan(s)" in res.stdout and "2 awaiting expiration" in res.stdout
    data = run_json("fsck", warehouse=uri)
    assert data["orphans"] == [] and len(data["awaiting_expiration"]) == 2
    assert all(p.startswith(f"dtxn/{txn_id}/") for p in data["awaiting_expiration"])
    run_json(
        "expire", "--keep-last", "1", "--grace-seconds", "0", "--allow-short-grace", warehouse=uri
    )
    data = run_json("fsck", warehouse=uri)
    assert data["ok"] and data["orphans"] == [] and data["awaiting_expiration"] == []


def test_fsck_lists_a_damaged_root_under_damaged_with_exit_1(tmp_path: Path) -> None:
    uri = str(tmp_path / "lake")
    assert run("init", warehouse=uri).returncode == 0
    cat = olympia.load_catalog(uri)
    for name in ("a", "b", "c"):
        with cat.transaction() as t:
            t.create_namespace(name)
    old_root = Path(uri) / "vn" / ("1" + "0" * 63)  # version 1
    old_root.write_bytes(b"garbage")
    res = run("fsck", "--json", warehouse=uri)
    assert res.returncode == 1, res.stderr
    data = json.loads(res.stdout)
    assert not data["ok"] and data["missing"] == []
    assert len(data["damaged"]) == 1 and data["damaged"][0].startswith(f"vn/{old_root.name}: ")
    assert "version 1" in data["damaged"][0]
    # The latest root damaged: the catalog cannot be opened, but fsck still says which file.
    latest = Path(uri) / "vn" / ("11" + "0" * 62)  # version 3
    latest.write_bytes(b"garbage too")
    assert run("ls", warehouse=uri).returncode == 3
    res = run("fsck", warehouse=uri)
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert "DAMAGED" in res.stdout and latest.name in res.stdout and "2 damaged" in res.stdout


def test_piped_output_never_breaks_a_line_or_reads_user_data_as_markup(tmp_path: Path) -> None:
    """Piped, every message is one line however long (scripts read lines), and
    a path or name with ``[...]`` in it is printed as it is, not as rich markup."""
    deep = tmp_path / ("d" * 120) / "[bold]lake[/bold]" / ("e" * 120)
    uri = str(deep)
    res = run("init", warehouse=uri)
    assert res.returncode == 0, res.stderr
    (line,) = res.stdout.splitlines()
    assert line.startswith(f"created an empty catalog at {uri} (version 0")
    assert line.endswith("at least the newest 1)")
    cat = olympia.load_catalog(uri)
    with cat.transaction() as t:
        t.create_namespace("sales")
    cat.close()
    res = run("fsck", warehouse=uri)
    assert res.returncode == 0, res.stderr
    (verdict,) = [x for x in res.stdout.splitlines() if x.strip()]
    assert verdict.startswith("ok: versions 0..1, 2 kept") and verdict.endswith(
        "awaiting expiration"
    )
    res = run("rollback", "0", warehouse=uri)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["version 2 now holds the catalog as of version 0"]


def test_serve_refuses_an_allowed_location_no_file_io_can_write(tmp_path: Path) -> None:
    """An --allowed-location of a scheme PyIceberg has no FileIO for is an
    operator's mistake that would surface only as tables no one can write:
    refused when the server starts, naming the location and the scheme."""
    uri = str(tmp_path / "lake")
    assert run("init", warehouse=uri).returncode == 0
    res = run("serve", "--port", "8197", "--allowed-location", "ftp://host/data", warehouse=uri)
    assert res.returncode == 2
    assert "ftp://host/data" in res.stderr and "'ftp'" in res.stderr
    assert "Traceback" not in res.stderr and "Uvicorn running" not in res.stderr


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--allowed-location", ""), "a location is empty"),
        (("--allowed-location", "  "), "a location is empty"),
        (("--transaction-idle-seconds", "-5"), "finite number above 0"),
        (("--transaction-idle-seconds", "nan"), "finite number above 0"),
        (("--transaction-idle-seconds", "0"), "finite number above 0"),
    ],
)
def test_serve_refuses_settings_that_would_misbehave(
    tmp_path: Path, flags: tuple[str, ...], message: str
) -> None:
    """An empty --allowed-location (an unset shell variable) named the
    working folder; a negative idle time rolled back every /txn transaction
    before its first use, and nan never rolled any back."""
    uri = str(tmp_path / "lake")
    assert run("init", warehouse=uri).returncode == 0
    res = run("serve", "--port", "8198", *flags, warehouse=uri)
    assert res.returncode == 2, res.stderr
    assert message in res.stderr
    assert "Traceback" not in res.stderr and "Uvicorn running" not in res.stderr


def test_serve_says_when_it_cannot_listen(tmp_path: Path) -> None:
    import socket

    uri = str(tmp_path / "lake")
    assert run("init", warehouse=uri).returncode == 0
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = str(taken.getsockname()[1])
        res = run("serve", "--port", port, warehouse=uri)
    assert res.returncode == 2, res.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in res.stderr
    res = run("serve", "--host", "nosuchhost.invalid", "--port", "8199", warehouse=uri)
    assert res.returncode == 2 and "cannot listen on nosuchhost.invalid:8199" in res.stderr
    assert "ERROR:" not in res.stderr and "Traceback" not in res.stderr


def test_serve_says_where_it_listens_and_a_busy_port_makes_no_catalog(tmp_path: Path) -> None:
    """uvicorn, given a bound socket, never said where it listened; and a
    port in use still left a new catalog behind."""
    import socket

    fresh = tmp_path / "fresh"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        res = run("serve", "--port", str(taken.getsockname()[1]), warehouse=str(fresh))
    assert res.returncode == 2, res.stderr
    assert not fresh.exists()  # nothing made
    server, port = _start_serve(fresh)
    try:
        assert server.stderr is not None
        line = server.stderr.readline()
        assert f"the catalog at {fresh} on http://127.0.0.1:{port}" in line, line
    finally:
        server.terminate()
        server.wait(timeout=60)


def _start_serve(warehouse: Path) -> tuple[subprocess.Popen[str], int]:
    """``olympia serve`` of ``warehouse`` on a free port, as a process (its
    standard error piped)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "olympia.cli"]
    server = subprocess.Popen(
        [*command, "serve", "-w", str(warehouse), "--port", str(port)],
        stderr=subprocess.PIPE,
        text=True,
    )
    return server, port


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
def test_a_stopped_server_rolls_back_its_open_transactions_and_exits_0(
    tmp_path: Path, signal_name: str
) -> None:
    """Ctrl-C printed 'olympia: error: interrupted' (exit 130) for the way a
    server in a terminal is stopped, and a /txn transaction open then left
    its files for good. Both signals stop it cleanly, rolling them back."""
    import signal
    import time

    import requests

    fresh = tmp_path / "lake"
    server, port = _start_serve(fresh)
    try:
        assert server.stderr is not None
        assert "on http://127.0.0.1" in server.stderr.readline()
        uri = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                requests.get(f"{uri}/v1/config", timeout=5)
                break
            except requests.ConnectionError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        namespace = requests.post(
            f"{uri}/v1/olympia/namespaces", json={"namespace": ["s"]}, timeout=10
        )
        assert namespace.status_code == 200, namespace.text
        begun = requests.post(f"{uri}/txn", json={}, timeout=10).json()
        inside = f"{uri}/txn/{begun['id']}/v1/olympia/namespaces/s/tables"
        schema = {"type": "struct", "schema-id": 0, "fields": []}
        created = requests.post(inside, json={"name": "t", "schema": schema}, timeout=10)
        assert created.status_code == 200, created.text
        assert list((fresh / "s.db" / "t").rglob("*.metadata.json"))
        server.send_signal(getattr(signal, signal_name))
        assert server.wait(timeout=60) == 0
        rest = server.stderr.read()
        assert "error" not in rest, rest
        assert not [p for p in (fresh / "s.db" / "t").rglob("*") if p.is_file()]
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=60)


def test_commands_refuse_catalogs_that_end_with_the_command(lake: str) -> None:
    """Each command is a process of its own: a memory:// catalog or export
    target would be gone when it returns (an export 'succeeded' and its
    record pinned a version for good)."""
    for args in (
        ("init", "-w", "memory://x"),
        ("ls", "-w", "memory://x"),
        ("export", "e", "memory://b"),
    ):
        res = run(*args, warehouse=lake)
        assert res.returncode == 2, (args, res.stderr)
        assert "is in memory: it would be gone when this command exits" in res.stderr
    assert olympia.load_catalog(lake).store.storage.exists("exports/e.json") is False


def test_graph_never_writes_into_the_catalog_and_starts_at_the_oldest_kept(
    lake: str, tmp_path: Path
) -> None:
    roots = sorted((Path(lake) / "vn").iterdir())
    first = roots[0].read_bytes()
    res = run("graph", "--svg", str(roots[0]), warehouse=lake)
    assert res.returncode == 2 and "lies inside the catalog" in res.stderr
    assert roots[0].read_bytes() == first
    cat = olympia.load_catalog(lake)
    cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
    picture = tmp_path / "g.svg"
    res = run("graph", "--svg", str(picture), warehouse=lake)
    assert res.returncode == 0, res.stderr
    assert "<svg" in picture.read_text()


def test_options_given_before_a_txn_action_count(lake: str) -> None:
    for args in (("txn", "-w", lake, "--json", "list"), ("txn", "list", "-w", lake, "--json")):
        res = run(*args)
        assert res.returncode == 0, (args, res.stderr)
        assert json.loads(res.stdout) == []


def test_a_storage_failure_while_writing_exits_3(tmp_path: Path) -> None:
    """Writing a catalog where a file is (init), as when a folder cannot be
    written: a storage failure (3), not a conflict (1)."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    res = run("init", warehouse=str(afile))
    assert res.returncode == 3, res.stderr
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
