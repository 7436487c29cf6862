"""The main job (olympia/jobs/orders.py) run as a user runs it: a subprocess,
scaled down, one Spark JVM, run once for the tests of this module. Its output
must show progress before the slow steps, the rebased commit, the refused one
(with its reason in words), the history as ``olympia log`` prints it and the
invariant at every version; the catalog it leaves is checked on its own, and
the folder it ran from stays empty."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
from iceberg_helpers import olympia_catalog

import olympia
from olympia import cli
from olympia.proto import actions_pb2 as apb

if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("the main job runs Spark, which needs Java", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[1]
BATCH_TABLES = {"shop.orders_raw", "shop.orders", "shop.customer_totals", "shop.inventory"}


def run_job(*args: str, timeout: float = 600, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "olympia.jobs.orders", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=cwd,
    )


def written(info: olympia.maintenance.VersionInfo) -> set[str]:
    return {
        f"{a.table.namespace}.{a.table.name}"
        for a in info.actions
        if a.type in (apb.TABLE_CREATE, apb.TABLE_UPDATE) and not a.read_only
    }


@dataclass(frozen=True)
class JobRun:
    """The one scaled-down run of the job the tests below look at."""

    result: subprocess.CompletedProcess[str]
    warehouse: str
    storage_options: dict[str, Any]
    data: Path
    cwd: Path
    options: tuple[str, ...]

    @property
    def lines(self) -> list[str]:
        return self.result.stdout.splitlines()

    def index(self, prefix: str) -> int:
        """The index of the first output line that starts with ``prefix``."""
        found = [i for i, line in enumerate(self.lines) if line.startswith(prefix)]
        assert found, f"no line starts with {prefix!r}:\n{self.result.stdout}"
        return found[0]


@pytest.fixture(scope="module")
def job(moto_server: Any, tmp_path_factory: pytest.TempPathFactory) -> JobRun:
    """One run (one JVM), with the catalog on S3 (moto) and the tables' files
    in a local folder (Spark's Iceberg runtime reaches S3 only with Iceberg's
    AWS bundle, which PyPI does not ship), from a fresh, empty folder."""
    warehouse, storage_options = moto_server.location("main-job")
    data = tmp_path_factory.mktemp("data")
    cwd = tmp_path_factory.mktemp("cwd")
    options = (
        "-o", f"s3.endpoint={moto_server.endpoint_url}", "-o", "s3.access-key-id=testing",
        "-o", "s3.secret-access-key=testing", "-o", "s3.region=us-east-1",
    )  # fmt: skip
    result = run_job(
        "--warehouse", warehouse, "--data", str(data), *options,
        "--batches", "2", "--orders-per-batch", "120", "--seed", "3",
        cwd=cwd,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return JobRun(result, warehouse, storage_options, data, cwd, options)


def test_main_job_scaled_down(job: JobRun) -> None:
    out = job.result.stdout
    assert "batch 1/2: 120 raw orders" in out and "batch 2/2: 120 raw orders" in out
    assert "commit was REBASED over 1 version(s) and landed as version 4" in out
    assert "VIP report REFUSED under SERIALIZABLE (rule scan-filter-matches, version 3)" in out
    assert "check: each of the 2 batches is one version writing all 4 tables" in out
    assert "check: invariant holds at every version (4 versions, 1..4)" in out
    assert "time travel: the tables as of version 2 (after batch 1)" in out
    assert "elapsed:" in out
    assert "Traceback" not in job.result.stderr


def test_main_job_leaves_a_consistent_catalog(job: JobRun, moto_server: Any) -> None:
    # What the catalog holds, read on its own: setup, batch 1, batch 2, the
    # partner feed (rebased) -- and no version for the refused report.
    cat = olympia.load_catalog(job.warehouse, job.storage_options)
    history = cat.history()
    assert [i.version for i in history] == [0, 1, 2, 3, 4]
    batches = [i for i in history if written(i) == BATCH_TABLES]
    assert [i.version for i in batches] == [2, 3]
    feed = history[4]
    assert written(feed) == {"shop.orders_raw"}
    assert feed.begin_version == 2 and feed.isolation == "serializable"
    assert (job.data / "shop.db" / "orders" / "data").is_dir()

    tables = olympia_catalog(
        job.warehouse,
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


def test_main_job_shows_progress_before_the_slow_steps(job: JobRun) -> None:
    # Not a terminal: plain lines, each printed before the step it announces.
    assert job.index("starting Spark") < job.index("Spark 3.")
    for batch in (1, 2):
        announced = job.index(f"batch {batch}/2: writing 120 raw orders to 4 tables")
        assert announced < job.index(f"batch {batch}/2: 120 raw orders ->")
    assert job.index("starting Spark") < job.index("batch 1/2: writing")


def test_main_job_says_why_a_commit_was_refused_in_words(job: JobRun) -> None:
    error = job.lines[job.index("  the error: ")]
    assert "can match the filter total_cents >= 1 of a scan" in error, error
    for python in ("Reference(", "term=", "Literal(", "GreaterThanOrEqual"):
        assert python not in error, error


def test_main_job_leaves_nothing_in_the_folder_it_ran_from(job: JobRun) -> None:
    assert sorted(p.name for p in job.cwd.iterdir()) == []


def test_main_job_history_is_olympia_log(job: JobRun, capsys: pytest.CaptureFixture[str]) -> None:
    header = job.index("the catalog's version history (olympia log -w ")
    end = job.index("not in the history: second writer: VIP report")
    printed = "\n".join(job.lines[header + 1 : end]).strip()
    capsys.readouterr()
    assert cli.main(["log", "-w", job.warehouse, *job.options]) == 0
    assert printed == capsys.readouterr().out.strip()
    # each commit says what it was
    for message in ("setup: namespace, 5 tables, stock", "batch 1", "batch 2", "partner feed"):
        assert message in printed, printed
    assert "as `olympia log` shows it" not in job.result.stdout


def test_main_job_refuses_a_used_warehouse(job: JobRun) -> None:
    # the same warehouse again: refused before Spark starts, no traceback
    again = run_job("--warehouse", job.warehouse, "--data", str(job.data), *job.options)
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
