"""Sequential S3 request rounds of a lost race and of a large listing, and
the set-up cost of a second ``load_catalog`` in one process (issue 24, item 4).

Against a moto S3 server over HTTP in a child process (tests/s3_requests.py
starts it and counts the requests; its docstring defines *rounds*). Every
scenario runs ``--repeat`` times on a fresh catalog prefix; the report gives
the rounds as min / median / max, with the S3 operations of the last run.

Scenarios:

* **one lost race**: a transaction begins at version v; another catalog
  object commits v+1; the transaction commits (it puts v+1, loses, and
  publishes v+2).
* **two lost races, stale**: as above, but two versions are committed by the
  other catalog object before the commit starts.
* **two lost races, in turn**: the other object commits v+1 before the
  commit starts and v+2 while the commit, having lost v+1, is about to put
  again (its requests, made in that gap, are left out of the count).
* **list_tables**: ``list_tables`` of a namespace of ``--tables`` tables on a
  fresh catalog object, after ``latest()`` (the root is read; the listing
  then reads the levels below it).
* **commit (one table), no race**: for comparison (the put of the root
  reads that root along with it).
* **load_catalog**: the wall time of the first, second and third
  ``load_catalog`` of one location in a fresh process with equal options,
  then of one with other options (a client of its own), each followed by
  ``catalog.version`` (which sends the first requests), and the number of
  s3fs clients the process built.

``--busy N`` runs N busy loops beside the measurement (a loaded machine).

    python -m benchmarks.bench_s3_rounds               # writes results/s3-rounds-<date>.md
    python -m benchmarks.bench_s3_rounds --busy 4 --no-save
"""

from __future__ import annotations

import argparse
import datetime
import functools
import multiprocessing as mp
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any

import olympia

try:
    from benchmarks import bench_txn, harness
except ImportError:  # run as a script: benchmarks/ is on sys.path
    import bench_txn  # type: ignore[no-redef]
    import harness  # type: ignore[no-redef]

if str(harness.PROJECT_ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(harness.PROJECT_ROOT / "tests"))
import s3_requests  # tests/s3_requests.py: the request counter

Row = dict[str, Any]


def _loc(moto: s3_requests.MotoProcess, name: str) -> str:
    return moto.uri(f"rounds-{name}-{uuid.uuid4().hex[:8]}")


def _catalog(uri: str, opts: dict[str, Any], tables: int = 3) -> olympia.Catalog:
    cat = olympia.create_catalog(uri, opts)
    with cat.transaction() as txn:
        txn.create_namespace("ns")
        for i in range(tables):
            txn.create_table("ns", f"t{i}", f"s3://lake/ns/t{i}/v1.metadata.json")
    return cat


def _update(cat: olympia.Catalog, table: str, gen: int) -> int:
    txn = cat.begin()
    txn.update_table("ns", table, metadata_location=f"s3://lake/ns/{table}/v{gen}.metadata.json")
    return txn.commit()


def lost_races(
    moto: s3_requests.MotoProcess, rec: s3_requests.S3RequestLog, stale: int, in_turn: int
) -> tuple[s3_requests.Measured, int, int]:
    """A commit that loses ``stale`` races to versions committed before it
    starts and ``in_turn`` more to versions committed while it retries.
    Returns the measurement (without the other writer's requests), the
    begin version and the committed version."""
    opts = moto.storage_options
    uri = _loc(moto, "race")
    mine = _catalog(uri, opts)
    other = olympia.load_catalog(uri, opts)
    txn = mine.begin()
    txn.update_table("ns", "t0", metadata_location="s3://lake/ns/t0/v2.metadata.json")
    for g in range(stale):
        _update(other, "t1", 10 + g)
    gaps: list[tuple[float, float]] = []
    store = mine.store
    original = store.commit
    calls = [0]

    def commit(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if 1 < calls[0] <= 1 + in_turn:
            t0 = time.perf_counter()
            _update(other, "t2", 20 + calls[0])
            other.store.wait_for_background_writes()  # its hint too
            gaps.append((t0, time.perf_counter()))
        return original(*args, **kwargs)

    store.commit = commit  # type: ignore[method-assign]
    try:
        version, m = rec.measure(txn.commit)
    finally:
        del store.commit
    if gaps:
        m.waited = [r for r in m.waited if not any(a <= r.start <= b for a, b in gaps)]
        m.background = [r for r in m.background if not any(a <= r.start <= b for a, b in gaps)]
    mine.close()
    other.close()
    return m, txn.begin_version, version


def _listing_catalog(uri: str, opts: dict[str, Any], tables: int) -> None:
    """As benchmarks/bench_api.py's requests part: a namespace of 3 tables,
    one of ``tables`` tables, and a small version on top."""
    cat = _catalog(uri, opts)
    with cat.transaction() as txn:
        txn.create_namespace("big")
        for j in range(tables):
            name = bench_txn.table_name(j)
            txn.create_table("big", name, bench_txn.location("big", name, 1))
    _update(cat, "t0", 2)
    cat.close()


def listing(
    moto: s3_requests.MotoProcess, rec: s3_requests.S3RequestLog, uri: str, tables: int
) -> s3_requests.Measured:
    fresh = olympia.load_catalog(uri, moto.storage_options)
    view = fresh.latest()
    names, m = rec.measure(lambda: view.list_tables("big"))
    if len(names) != tables:
        raise RuntimeError(f"list_tables returned {len(names)} of {tables} tables")
    fresh.close()
    return m


def _load_times(endpoint: str, bucket: str, uri: str, queue: Any) -> None:
    """Child process: the first and second load_catalog + catalog.version."""
    import s3fs

    built = [0]
    init = s3fs.S3FileSystem.__init__

    @functools.wraps(init)
    def counting(self: Any, *a: Any, **k: Any) -> None:
        built[0] += 1
        init(self, *a, **k)

    s3fs.S3FileSystem.__init__ = counting  # type: ignore[method-assign]
    opts = s3_requests.MotoProcess(endpoint, bucket, None).storage_options
    out = []
    # three with equal options, then one with options no catalog of the
    # process had (so with a client of its own to set up)
    other = {**opts, "config_kwargs": {"connect_timeout": 61}}
    for options in (opts, opts, opts, other):
        t0 = time.perf_counter()
        cat = olympia.load_catalog(uri, dict(options))
        _ = cat.version
        out.append(time.perf_counter() - t0)
        cat.close()
    queue.put((out, built[0]))


def load_times(moto: s3_requests.MotoProcess, uri: str) -> tuple[list[float], int]:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_load_times, args=(moto.endpoint_url, moto.bucket, uri, queue))
    proc.start()
    result = queue.get(timeout=120)
    proc.join(30)
    return result  # type: ignore[no-any-return]


def _spread(xs: list[int]) -> str:
    return f"{min(xs)} / {statistics.median(xs):g} / {max(xs)}"


def run(repeat: int, tables: int, busy: int) -> str:
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    moto = s3_requests.start_moto_process("olympia-rounds")
    rows: list[tuple[str, list[int], s3_requests.Measured, str]] = []
    try:
        with s3_requests.record_s3_requests() as rec:
            for name, stale, in_turn in (
                ("commit (one table), no race", 0, 0),
                ("commit that lost one race", 1, 0),
                ("commit that lost two races (both versions there before it began)", 2, 0),
                ("commit that lost two races (the second while it retried)", 1, 1),
            ):
                counts: list[int] = []
                note = ""
                for _ in range(repeat):
                    m, began, committed = lost_races(moto, rec, stale, in_turn)
                    counts.append(m.rounds)
                    note = f"began at {began}, committed {committed}"
                    harness.log(f"{name}: {m.rounds} rounds ({m.operations()})")
                rows.append((name, counts, m, note))
            uri = _loc(moto, "list")
            _listing_catalog(uri, moto.storage_options, tables)
            counts = []
            for _ in range(repeat):
                m = listing(moto, rec, uri, tables)
                counts.append(m.rounds)
                harness.log(f"list_tables: {m.rounds} rounds ({m.operations()})")
            rows.append((f"list_tables, {tables:,} tables", counts, m, "after latest()"))
        times, built = load_times(moto, uri)
    finally:
        moto.stop()
        for p in loops:
            p.kill()
            p.wait()
    lines = [
        "| scenario | rounds min / median / max | requests (last run) | by S3 operation | note |",
        "|---|---|---|---|---|",
    ]
    for name, counts, m, note in rows:
        lines.append(f"| {name} | {_spread(counts)} | {m.total} | {m.operations()} | {note} |")
    lines.append("")
    lines.append(
        f"load_catalog + catalog.version in a fresh process: first {times[0] * 1e3:.1f} ms, "
        f"second {times[1] * 1e3:.1f} ms, third {times[2] * 1e3:.1f} ms (equal options); "
        f"with other options (a client of its own) {times[3] * 1e3:.1f} ms; "
        f"s3fs clients built for the four: {built}"
    )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--tables", type=int, default=10_000)
    parser.add_argument("--busy", type=int, default=0, help="busy loops beside the run")
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args(argv)
    started = datetime.datetime.now(datetime.UTC)
    report = run(args.repeat, args.tables, args.busy)
    head = (
        f"Run {started:%Y-%m-%d %H:%M} UTC, {args.busy} busy loops, "
        f"{args.repeat} runs per scenario\n\n"
    )
    print(head + report)
    if not args.no_save:
        out = harness.RESULTS / f"s3-rounds-{started:%Y-%m-%d}-raw.md"
        out.write_text(head + report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
