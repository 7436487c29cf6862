"""The main job (olympia/jobs/orders.py) run as a user runs it: a subprocess,
scaled down, one Spark JVM. Its output must show the rebased commit, the
refused one and the invariant at every version; the catalog it leaves is
checked on its own."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
from iceberg_helpers import olympia_catalog

import olympia
from olympia.proto import actions_pb2 as apb

if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("the main job runs Spark, which needs Java", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[1]
BATCH_TABLES = {"shop.orders_raw", "shop.orders", "shop.customer_totals", "shop.inventory"}


def run_job(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "olympia.jobs.orders", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )


def written(info: olympia.maintenance.VersionInfo) -> set[str]:
    return {
        f"{a.table.namespace}.{a.table.name}"
        for a in info.actions
        if a.type in (apb.TABLE_CREATE, apb.TABLE_UPDATE) and not a.read_only
    }


def test_main_job_scaled_down(moto_server: Any, tmp_path: Path) -> None:
    """One run (one JVM), with the catalog on S3 (moto) and the tables' files
    in a local folder (Spark's Iceberg runtime reaches S3 only with Iceberg's
    AWS bundle, which PyPI does not ship)."""
    warehouse, storage_options = moto_server.location("main-job")
    result = run_job(
        "--warehouse", warehouse, "--data", str(tmp_path / "data"),
        "-o", f"s3.endpoint={moto_server.endpoint_url}", "-o", "s3.access-key-id=testing",
        "-o", "s3.secret-access-key=testing", "-o", "s3.region=us-east-1",
        "--batches", "2", "--orders-per-batch", "120", "--seed", "3",
    )  # fmt: skip
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "batch 1/2: 120 raw orders" in out and "batch 2/2: 120 raw orders" in out
    assert "commit was REBASED over 1 version(s) and landed as version 4" in out
    assert "VIP report REFUSED under SERIALIZABLE (rule scan-filter-matches, version 3)" in out
    assert "check: each of the 2 batches is one version writing all 4 tables" in out
    assert "check: invariant holds at every version (4 versions, 1..4)" in out
    assert "time travel: the tables as of version 2 (after batch 1)" in out
    assert "elapsed:" in out
    assert "Traceback" not in result.stderr

    # What the catalog holds, read on its own: setup, batch 1, batch 2, the
    # partner feed (rebased) -- and no version for the refused report.
    cat = olympia.load_catalog(warehouse, storage_options)
    history = cat.history()
    assert [i.version for i in history] == [0, 1, 2, 3, 4]
    batches = [i for i in history if written(i) == BATCH_TABLES]
    assert [i.version for i in batches] == [2, 3]
    feed = history[4]
    assert written(feed) == {"shop.orders_raw"}
    assert feed.begin_version == 2 and feed.isolation == "serializable"
    assert (tmp_path / "data" / "shop.db" / "orders" / "data").is_dir()

    tables = olympia_catalog(
        warehouse,
        **{
            "s3.endpoint": moto_server.endpoint_url,
            "s3.access-key-id": "testing",
            "s3.secret-access-key": "testing",
            "s3.region": "us-east-1",
        },
    )
    vip = tables.load_table("shop.vip_customers").scan().to_arrow()
    assert vip.num_rows == 0  # the refused report published nothing
    orders = tables.load_table("shop.orders").scan().to_arrow()
    totals = tables.load_table("shop.customer_totals").scan().to_arrow()
    assert pc.sum(orders["amount_cents"]).as_py() == pc.sum(totals["total_cents"]).as_py()
    assert pc.sum(totals["orders"]).as_py() == orders.num_rows
    raw = tables.load_table("shop.orders_raw").scan().to_arrow()
    sources = raw.group_by("source").aggregate([("order_id", "count")]).to_pylist()
    assert {r["source"]: r["order_id_count"] for r in sources} == {"web": 240, "partner": 10}

    # the same warehouse again: refused before Spark starts, no traceback
    again = run_job(
        "--warehouse", warehouse, "--data", str(tmp_path / "data"),
        "-o", f"s3.endpoint={moto_server.endpoint_url}", "-o", "s3.access-key-id=testing",
        "-o", "s3.secret-access-key=testing", "-o", "s3.region=us-east-1",
    )  # fmt: skip
    assert again.returncode == 2
    assert "already has a namespace 'shop'" in again.stderr
    assert "Traceback" not in again.stderr


def test_main_job_bad_options() -> None:
    too_few = run_job("--batches", "1", timeout=120)
    assert too_few.returncode == 2 and "--batches must be at least 2" in too_few.stderr
    bad_option = run_job("-o", "s3.endpoint", timeout=120)
    assert bad_option.returncode == 2 and "KEY=VALUE" in bad_option.stderr
    not_a_number = run_job("--orders-per-batch", "many", timeout=120)
    assert not_a_number.returncode == 2 and "not a whole number" in not_a_number.stderr
    s3 = run_job("--warehouse", "s3://bucket/lake", "-o", "s3.endpoint=http://127.0.0.1:1")
    assert s3.returncode == 2 and "--spark-jars" in s3.stderr and "AWS SDK" in s3.stderr
