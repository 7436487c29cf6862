"""Concurrent plain appends to one table, olympia against PyIceberg's SqlCatalog.

What a PyIceberg user runs: P processes (``--procs``, default 1, 4, 8), each
loading its catalog with ``pyiceberg.catalog.load_catalog`` (olympia through
``py-catalog-impl``; the peer is SqlCatalog on one SQLite file), then, for a
fixed time (``--seconds``, default 20), looping
``catalog.load_table("n.t").append(<10 rows>)`` on the same table with
PyIceberg's default commit retries. Each process reports how many appends it
finished and how many raised (and the first errors); afterwards the table is
scanned and its rows are checked against the finished appends (each append's
rows carry the process number and a per-process sequence, so a lost or
doubled append is found). A fixed time rather than a fixed count per process,
so that a starved process shows as a low count.

Goal (issue 20): no failed append on olympia at any P, rows equal to the
finished appends. Throughput is reported beside the peer's; nothing here
asserts. Run from the project root::

    python -m benchmarks.bench_appends            # writes benchmarks/results/appends-<date>.md
    python -m benchmarks.bench_appends --quick    # smoke run, not saved unless --out
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

try:
    from benchmarks import harness
except ImportError:  # run as a script: benchmarks/ is on sys.path
    import harness  # type: ignore[no-redef]

ROWS_PER_APPEND = 10


def catalog(kind: str, folder: str) -> Any:
    if kind == "olympia":
        return harness.load_olympia_catalog(f"file://{folder}")
    return harness.load_sql_catalog(folder)


def batch(worker: int, seq: int) -> Any:
    import pyarrow as pa

    return pa.table(
        {
            "worker": pa.array([worker] * ROWS_PER_APPEND, pa.int32()),
            "seq": pa.array([seq] * ROWS_PER_APPEND, pa.int64()),
            "k": pa.array(range(ROWS_PER_APPEND), pa.int32()),
        }
    )


def prepare(kind: str, folder: str) -> None:
    cat = catalog(kind, folder)
    cat.create_namespace("n")
    cat.create_table("n.t", batch(0, 0).schema)


def appender(kind: str, folder: str, worker: int, start: float, seconds: float, out: Any) -> None:
    cat = catalog(kind, folder)
    done = failed = 0
    errors: list[str] = []
    latencies: list[float] = []
    while time.time() < start:
        time.sleep(0.001)
    end = start + seconds
    while time.time() < end:
        t0 = time.perf_counter()
        try:
            cat.load_table("n.t").append(batch(worker, done))
            done += 1
            latencies.append(time.perf_counter() - t0)
        except Exception as exc:  # counted and reported
            failed += 1
            if len(errors) < 3:
                errors.append(f"{type(exc).__name__}: {str(exc)[:160]}")
    out.put((worker, done, failed, errors, latencies))


@dataclass
class Run:
    kind: str
    procs: int
    seconds: float
    per_process: list[tuple[int, int]]  # (finished, failed) per process
    errors: list[str]
    p50_ms: float
    rows: int
    rows_ok: bool
    detail: str

    @property
    def finished(self) -> int:
        return sum(d for d, _ in self.per_process)

    @property
    def failed(self) -> int:
        return sum(f for _, f in self.per_process)


def run(kind: str, tmp: str, procs: int, seconds: float) -> Run:
    folder = tempfile.mkdtemp(prefix=f"{kind}-{procs}-", dir=tmp)
    prepare(kind, folder)
    start = time.time() + 3.0  # every process has loaded its catalog by then
    results = sorted(
        harness.run_queued(
            appender,
            [(kind, folder, i + 1, start, seconds) for i in range(procs)],
            timeout=seconds + 600,
            join_timeout=60,
        )
    )
    table = catalog(kind, folder).load_table("n.t").scan().to_arrow()
    got = Counter(zip(table["worker"].to_pylist(), table["seq"].to_pylist(), strict=True))
    want = Counter(
        {(worker, seq): ROWS_PER_APPEND for worker, done, *_ in results for seq in range(done)}
    )
    lost = sum((want - got).values())
    extra = sum((got - want).values())
    latencies = sorted(x for r in results for x in r[4])
    p50 = latencies[len(latencies) // 2] * 1000 if latencies else float("nan")
    shutil.rmtree(folder, ignore_errors=True)
    return Run(
        kind,
        procs,
        seconds,
        [(r[1], r[2]) for r in results],
        [e for r in results for e in r[3]][:3],
        p50,
        table.num_rows,
        lost == 0 and extra == 0,
        f"{lost} rows missing, {extra} rows extra",
    )


def report(argv: Sequence[str], started: datetime.datetime, took: float, runs: list[Run]) -> str:
    import pyiceberg
    import sqlalchemy

    import olympia

    command = harness.command_line("bench_appends", argv)
    lines = [
        f"# Concurrent plain appends, {started:%Y-%m-%d}",
        "",
        f"Command (from the project root): `{command}`",
        "",
        f"Started {started:%Y-%m-%d %H:%M} UTC, took {took:.0f} s; 1-minute load average "
        f"at the end {harness.load_average():.1f}. Machine: {os.cpu_count()} cores, "
        f"{harness.python_text()}, "
        f"olympia {olympia.__version__}, pyiceberg {pyiceberg.__version__}, "
        f"SQLAlchemy {sqlalchemy.__version__}; catalogs on the local disk.",
        "",
        "See the docstring of benchmarks/bench_appends.py for exactly what is measured. "
        'Every append is `catalog.load_table("n.t").append(10 rows)` through PyIceberg '
        "with its default commit retries; `finished` and `failed` are per process, "
        "in process order; `rows` is checked against the finished appends.",
        "",
        "| catalog | P | seconds | finished per process | failed per process | "
        "appends/s | p50 ms | rows | rows = finished |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        lines.append(
            f"| {r.kind} | {r.procs} | {r.seconds:.0f} | "
            f"{', '.join(str(d) for d, _ in r.per_process)} | "
            f"{', '.join(str(f) for _, f in r.per_process)} | "
            f"{r.finished / r.seconds:.1f} | {r.p50_ms:.1f} | {r.rows} | "
            f"{'yes' if r.rows_ok else 'NO: ' + r.detail} |"
        )
    lines += ["", "Ratios olympia / SqlCatalog of appends finished per second:", ""]
    by = {(r.kind, r.procs): r for r in runs}
    for procs in sorted({r.procs for r in runs}):
        a, b = by.get(("olympia", procs)), by.get(("sql", procs))
        if a and b and b.finished:
            lines.append(f"- P = {procs}: {a.finished / b.finished:.2f}")
    errors = [(r.kind, r.procs, e) for r in runs for e in r.errors]
    if errors:
        lines += ["", "First errors of failed appends:", ""]
        lines += [f"- {kind}, P = {procs}: `{e}`" for kind, procs, e in errors]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--procs", default="1,4,8", help="process counts (1,4,8)")
    ap.add_argument("--seconds", type=float, default=None, help="seconds per run (20)")
    ap.add_argument("--catalogs", default="olympia,sql")
    ap.add_argument("--quick", action="store_true", help="5-second runs, not saved")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(args_list)
    seconds = args.seconds or (5.0 if args.quick else 20.0)
    started = datetime.datetime.now(datetime.UTC)
    t0 = time.perf_counter()
    tmp = tempfile.mkdtemp(prefix="bench_appends_")
    runs: list[Run] = []
    try:
        for procs in (int(p) for p in args.procs.split(",")):
            for kind in args.catalogs.split(","):
                print(f"{kind}: {procs} process(es) for {seconds:.0f} s", flush=True)
                runs.append(run(kind, tmp, procs, seconds))
                r = runs[-1]
                print(
                    f"  finished {[d for d, _ in r.per_process]}, failed {r.failed}, "
                    f"rows ok {r.rows_ok}",
                    flush=True,
                )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    text = report(args_list, started, time.perf_counter() - t0, runs)
    print(text)
    if args.out or not args.quick:
        out = harness.results_path(args.out, f"appends-{started:%Y-%m-%d}.md")
        harness.write_results(out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
