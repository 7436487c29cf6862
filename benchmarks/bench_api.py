"""API benchmark: what a user runs, through the public API, against a SQL catalog peer.

Every olympia figure here goes through the public API only:
``olympia.create_catalog`` / ``load_catalog``, ``cat.begin()``, one call,
``txn.commit()``, ``cat.latest()``, ``cat.at_version()``. The peer is
PyIceberg's ``SqlCatalog`` on SQLite, measured in the same run; ratios are
olympia / peer (< 1: olympia is faster). Five parts (``--only``):

1. ``latency``: p50 / p90 of one-call transactions on catalogs of 10^3, 10^4,
   10^5, 10^6 tables (``--sizes``): ``update_table(metadata_location=...)``,
   ``create_table``, ``drop_table``, ``rename_table``, each as
   ``begin(); call; commit()`` with the catalog's default isolation, on
   distinct random tables. The catalog is built through the public API too,
   in one transaction (100 namespaces and N tables; time reported, not
   compared). Peer: the row of each table is bulk-inserted into SqlCatalog's
   tables with raw SQL (building only); then ``update`` is the SQL of
   ``SqlCatalog.commit_table`` (the SELECT of ``load_table``, then the
   compare-and-swap ``UPDATE ... WHERE metadata_location = <current>``,
   COMMIT), ``create`` the SQL of ``register_table`` (``namespace_exists``,
   INSERT, COMMIT), ``drop`` ``SqlCatalog.drop_table`` itself, ``rename`` the
   SQL of ``rename_table`` (``namespace_exists``, UPDATE, COMMIT). Neither
   side reads or writes Iceberg metadata.json files. Every size is built
   first; then each size's catalog is opened in a process of its own, and
   the calls run one at a time, in a shuffled order across the sizes
   (olympia and peer in a random order within a size), so that other work on the machine, or its
   CPU changing speed, slows every size and both sides alike; 5 warm-up
   calls of each kind are not counted. Also reported: our
   own p50 at the largest size over our own p50 at the smallest.
2. ``cold describe`` (part of ``latency``, measured after the writes): a
   fresh ``load_catalog`` + ``latest().describe_table`` of a random table,
   against a fresh ``SqlCatalog`` (new engine) + the SELECT of ``load_table``.
   The operating system's file cache is warm on both sides.
3. ``concurrency``: P processes (``--procs``, default 8, local directory; and
   ``--s3-procs``, default 4, on S3 through a moto server this script starts
   in a child process and reaches over HTTP on 127.0.0.1), each updating its
   own table (``begin``, ``update_table``, ``commit``) for a fixed time T
   (``--seconds``, default 30), against one process alone for the same T:
   per-process commit counts (list, min, max, min / max), failed commits by
   rule (``CommitConflictError.rule``, else the exception type; a failed
   commit is followed by the next transaction), aggregate commits/s. The
   versions the catalog gained must hold exactly one transaction per commit
   (checked; group commit puts several in one version). Peer
   (local only): the same with the CAS update of part 1 on disjoint rows.
   Each configuration runs twice, in the order 1, P, P, 1 (a run slows the
   next one down with the write-back it leaves on the disk; this order gives
   both the same share); "/ one process" is against the mean of the two
   single-process runs, and a line pools both runs of each.
4. ``requests``: S3 requests per public operation, on moto:
   ``load_catalog``, ``catalog.version``, ``begin``, the ``update_table``
   call, ``commit()`` of a one-table transaction, ``commit()`` of one that
   lost one race (another catalog object committed after it began),
   ``latest()`` and ``list_tables`` of a namespace of 10,000 tables
   (``--list-size``) on a freshly loaded catalog, ``at_version`` +
   ``describe_table`` on a freshly loaded catalog, and a cold describe. Method:
   ``tests/s3_requests.py`` wraps botocore's / aiobotocore's
   ``Endpoint._do_get_response`` (one call per HTTP attempt) and logs each
   request's operation, key and client-side send / reply times. *Rounds* are
   the longest chain of requests each sent after the previous one's reply
   came back (requests in flight together are one round); requests still in
   flight when the call returned (the background ``vn/latest`` hint) are
   counted apart as background. Each figure is compared with the budget of
   issue 7 (begin <= 2 rounds when the process has seen the catalog,
   commit <= 2, a lost race <= 2 more per retry, load_catalog <= 3, a listing
   of 10,000 tables <= 4).
5. ``bulk``: N tables (``--bulk``, default 10^6) created in ONE transaction
   through the public API, in a child process: wall time (building the
   transaction, commit) and peak RSS; then, each in a fresh child process,
   opening the version it wrote (``load_catalog`` + ``at_version(v)`` + one
   ``describe_table``) against opening a version written by a one-table
   transaction on the same catalog (a third version follows both, so that
   neither is the latest one, which ``load_catalog`` has read already): peak
   RSS, and the median time of 21 opens
   (each through a new ``load_catalog``, so each starts with empty caches;
   the process's first open is shown too). Peer, for reference:
   the raw SQL bulk insert of the same rows, and a cold load.

Nothing here asserts on timings; this is a measurement, not a test. The
script exits 1 only when a check of correctness fails (a catalog whose new
versions do not hold one transaction per commit, a listing that missed tables).

Run from the project root::

    python -m benchmarks.bench_api              # full run, writes benchmarks/results/api-<date>.md
    python -m benchmarks.bench_api --quick      # small smoke run (api-<date>-quick.md)
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing as mp
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
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

Peer = bench_txn.Peer
PEER_NAME = bench_txn.PEER_NAME
N_NAMESPACES = bench_txn.N_NAMESPACES
location = bench_txn.location
namespace_of = bench_txn.namespace_of
table_name = bench_txn.table_name
WARMUP = 5
OPS = ("update", "create", "drop", "rename")
LABEL = {"cold": "cold describe"}
PARTS = ("latency", "concurrency", "requests", "bulk")

#: issue 7's budgets of sequential rounds on S3 (None: no budget stated)
BUDGETS: dict[str, int | None] = {
    "load_catalog": 3,
    "catalog.version": None,
    "begin": 2,
    "update_table call": None,
    "commit (one table)": 2,
    "commit that lost one race": 4,
    "latest() on a fresh catalog": None,
    "list_tables": 4,
    "at_version + describe (fresh catalog)": None,
    "cold describe (load_catalog + latest + describe)": None,
}


def ms(x: float | None) -> str:
    return "n/a" if x is None or x != x else f"{x * 1e3:.2f}"


def peak_rss_mb() -> float:
    """Peak resident set size of this process, in MB (``harness.peak_rss_kb``)."""
    return harness.peak_rss_kb() / 1024


def rss_now_mb() -> float:
    kb = harness.rss_now_kb()
    return float("nan") if kb is None else kb / 1024


# --- olympia operations: each one public-API transaction ------------------------------


def o_update(cat: olympia.Catalog, ns: str, name: str, gen: int) -> None:
    txn = cat.begin()
    txn.update_table(ns, name, metadata_location=location(ns, name, gen))
    txn.commit()


def o_create(cat: olympia.Catalog, ns: str, name: str) -> None:
    txn = cat.begin()
    txn.create_table(ns, name, metadata_location=location(ns, name, 1))
    txn.commit()


def o_drop(cat: olympia.Catalog, ns: str, name: str) -> None:
    txn = cat.begin()
    txn.drop_table(ns, name)
    txn.commit()


def o_rename(cat: olympia.Catalog, ns: str, name: str, new_name: str) -> None:
    txn = cat.begin()
    txn.rename_table(ns, name, ns, new_name)
    txn.commit()


def o_cold_describe(uri: str, ns: str, name: str, options: dict[str, Any] | None = None) -> str:
    cat = olympia.load_catalog(uri, options)
    try:
        return cat.latest().describe_table(ns, name).metadata_location
    finally:
        cat.close()


# --- peer operations: the SQL SqlCatalog runs, without metadata.json I/O ----------------


class ApiPeer(Peer):
    """bench_txn's peer (update = commit_table's SELECT + CAS UPDATE) plus create,
    drop, rename and a cold load."""

    def create(self, ns: str, name: str) -> None:
        """The SQL of SqlCatalog.register_table: namespace_exists, INSERT, COMMIT."""
        from pyiceberg.catalog.sql import IcebergTables
        from sqlalchemy import insert
        from sqlalchemy.orm import Session

        if not self.catalog.namespace_exists(ns):
            raise RuntimeError(f"peer namespace {ns} missing")
        with Session(self.catalog.engine) as session:
            session.execute(
                insert(IcebergTables).values(
                    catalog_name=PEER_NAME,
                    table_namespace=ns,
                    table_name=name,
                    metadata_location=location(ns, name, 1),
                    previous_metadata_location=None,
                    iceberg_type="TABLE",
                )
            )
            session.commit()

    def drop(self, ns: str, name: str) -> None:
        self.catalog.drop_table((ns, name))

    def rename(self, ns: str, name: str, new_name: str) -> None:
        """The SQL of SqlCatalog.rename_table (its final load_table reads metadata.json:
        left out): namespace_exists, UPDATE, COMMIT."""
        from pyiceberg.catalog.sql import IcebergTables
        from sqlalchemy import update
        from sqlalchemy.orm import Session

        if not self.catalog.namespace_exists(ns):
            raise RuntimeError(f"peer namespace {ns} missing")
        with Session(self.catalog.engine) as session:
            result = session.execute(
                update(IcebergTables)
                .where(self._where(ns, name))
                .values(table_namespace=ns, table_name=new_name)
            )
            if result.rowcount < 1:  # type: ignore[attr-defined]
                raise RuntimeError(f"peer table {ns}.{name} missing")
            session.commit()


def peer_cold_describe(folder: str, ns: str, name: str) -> str:
    """A new SqlCatalog (new engine, new connection), then the SELECT of load_table."""
    peer = ApiPeer(folder)
    try:
        return peer.current_location(ns, name)
    finally:
        peer.close()


# --- part 1 and 2: latency against catalog size -------------------------------------


def build_olympia(uri: str, n: int) -> dict[str, float]:
    """100 namespaces and ``n`` tables in one transaction, through the public API."""
    t0 = time.perf_counter()
    cat = olympia.create_catalog(uri)
    txn = cat.begin()
    for k in range(min(n, N_NAMESPACES)):
        txn.create_namespace(namespace_of(k))
    for j in range(n):
        ns, name = namespace_of(j), table_name(j)
        txn.create_table(ns, name, metadata_location=location(ns, name, 1))
    t1 = time.perf_counter()
    version = txn.commit()
    t2 = time.perf_counter()
    cat.close()
    return {"build_s": t1 - t0, "commit_s": t2 - t1, "version": version, "rss_mb": peak_rss_mb()}


#: The peer's rows are built as bench_txn builds them (raw SQL, one transaction).
build_peer = bench_txn.peer_bulk_insert


class _SizeOps:
    """The calls of part 1 on the catalog of one size (and its peer): the
    tables each kind touches, distinct across kinds and never touched twice."""

    def __init__(self, uri: str, peer_folder: str | None, n: int, ops: int, seed: int) -> None:
        self.uri, self.peer_folder, self.n = uri, peer_folder, n
        rng = random.Random(seed)
        self.per_kind = ops + WARMUP
        distinct = min(n, 3 * self.per_kind)
        ids = rng.sample(range(n), distinct)
        self.chunk = distinct // 3
        c = self.chunk
        self.targets = {"update": ids[:c], "drop": ids[c : 2 * c], "rename": ids[2 * c :]}
        self.cat = olympia.load_catalog(uri)
        self.peer = ApiPeer(peer_folder) if peer_folder else None
        self.times: dict[str, list[float]] = {}

    def count(self, kind: str) -> int:
        return self.per_kind if kind == "create" else min(self.per_kind, self.chunk)

    def call(self, who: str, kind: str, i: int) -> Callable[[], Any]:
        if kind == "create":
            ns, name = namespace_of(i), f"new_{i:08d}"
        else:
            j = self.targets[kind][i % len(self.targets[kind])]
            ns, name = namespace_of(j), table_name(j)
        cat, peer = self.cat, self.peer
        if who == "o":
            if kind == "update":
                return lambda: o_update(cat, ns, name, 2 + i)
            if kind == "create":
                return lambda: o_create(cat, ns, name)
            if kind == "drop":
                return lambda: o_drop(cat, ns, name)
            return lambda: o_rename(cat, ns, name, f"{name}_r")
        assert peer is not None
        if kind == "update":
            return lambda: peer.update(ns, name, 2 + i) or _raise("peer CAS missed")
        if kind == "create":
            return lambda: peer.create(ns, name)
        if kind == "drop":
            return lambda: peer.drop(ns, name)
        return lambda: peer.rename(ns, name, f"{name}_r")

    def cold(self, who: str, i: int) -> Callable[[], Any]:
        """A cold describe of a table that still exists (never dropped or renamed)."""
        keep = list(self.targets["update"]) or [0]
        j = keep[i % len(keep)]
        ns, name = namespace_of(j), table_name(j)
        if who == "o":
            return lambda: o_cold_describe(self.uri, ns, name)
        folder = self.peer_folder
        assert folder is not None
        return lambda: peer_cold_describe(folder, ns, name)

    def close(self) -> None:
        self.cat.close()
        if self.peer:
            self.peer.close()


def _size_worker(conn: Any, uri: str, peer_folder: str | None, n: int, ops: int, seed: int) -> None:
    """One size's process for :func:`measure_ops`: opens the catalog (and the
    peer), then times each call the parent asks for, one at a time, until
    asked for its times."""
    s = _SizeOps(uri, peer_folder, n, ops, seed)
    conn.send(("ready", s.count("create"), s.count("update")))
    closed = False
    try:
        while True:
            msg = conn.recv()
            if msg[0] == "times":
                conn.send(s.times)
                return
            _, who, kind, i, counted = msg
            if kind == "cold" and not closed:
                s.cat.close()  # cold describes open their own handles
                closed = True
            fn = s.cold(who, i) if kind == "cold" else s.call(who, kind, i)
            t0 = time.perf_counter()
            fn()
            elapsed = time.perf_counter() - t0
            if counted:
                s.times.setdefault(f"{who}_{kind}", []).append(elapsed)
            conn.send("done")
    finally:
        s.close()


def measure_ops(
    catalogs: Sequence[tuple[int, str, str | None]], ops: int, cold: int, seed: int
) -> list[dict[str, list[float]]]:
    """For the catalogs of every size (``(n, uri, peer folder)``), each in a
    process of its own (its own caches and heap, as one user's process has):
    one-call transactions of each kind, then cold describes, run one call at
    a time across the processes in an order shuffled each round, olympia
    and peer in a random order within a size. So a change of the machine's speed
    during the run (this machine's CPU speed varies by half from minute to
    minute) slows every size and both sides alike."""
    ctx = mp.get_context("spawn")
    workers = []
    for n, uri, peer_folder in catalogs:
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_size_worker, args=(child, uri, peer_folder, n, ops, seed))
        proc.start()
        workers.append((parent, proc, peer_folder is not None))
    try:
        counts = {}
        for k, (conn, _, _) in enumerate(workers):
            _, creates, others = conn.recv()
            counts[k] = {kind: creates if kind == "create" else others for kind in OPS}

        def ask(k: int, who: str, kind: str, i: int, counted: bool) -> None:
            conn = workers[k][0]
            conn.send(("call", who, kind, i, counted))
            if conn.recv() != "done":
                raise RuntimeError(f"size {catalogs[k][0]}: unexpected reply")

        shuffle = random.Random(seed)

        def shuffled() -> list[int]:
            order = list(range(len(workers)))
            shuffle.shuffle(order)
            return order

        for kind in OPS:
            for i in range(max(c[kind] for c in counts.values())):
                for k in shuffled():
                    if i >= counts[k][kind]:
                        continue
                    whos = ["o", "p"] if workers[k][2] else ["o"]
                    for who in whos if shuffle.random() < 0.5 else whos[::-1]:
                        ask(k, who, kind, i, i >= WARMUP)
        for i in range(cold + 1):  # the first round warms up imports
            for k in shuffled():
                whos = ["o", "p"] if workers[k][2] else ["o"]
                for who in whos if shuffle.random() < 0.5 else whos[::-1]:
                    ask(k, who, "cold", i, i > 0)
        results = []
        for conn, _, _ in workers:
            conn.send(("times",))
            results.append(conn.recv())
        return results
    finally:
        for _, proc, _ in workers:
            proc.join(timeout=60)
            if proc.is_alive():
                proc.kill()


def _raise(msg: str) -> None:
    raise RuntimeError(msg)


@dataclass
class SizeResult:
    n: int
    build: dict[str, float] = field(default_factory=dict)
    peer_insert_s: float | None = None
    times: dict[str, list[float]] = field(default_factory=dict)


def part_latency(
    tmp: str, sizes: Sequence[int], ops: int, cold: int, seed: int, peer: bool
) -> list[SizeResult]:
    """Build the catalogs of every size (each in a child process), then
    measure them all interleaved, a process per size (:func:`measure_ops`)."""
    results: list[SizeResult] = []
    catalogs: list[tuple[int, str, str | None]] = []
    for n in sizes:
        folder = os.path.join(tmp, f"size-{n}")
        os.makedirs(folder)
        uri = os.path.join(folder, "olympia")
        res = SizeResult(n)
        harness.log(f"latency N={n}: building the catalog in one transaction")
        res.build = harness.in_child(build_olympia, uri, n)
        harness.log(f"  built in {res.build['build_s'] + res.build['commit_s']:.1f} s")
        peer_folder = None
        if peer:
            peer_folder = os.path.join(folder, "peer")
            os.makedirs(peer_folder)
            res.peer_insert_s = harness.in_child(build_peer, peer_folder, n)
        catalogs.append((n, uri, peer_folder))
        results.append(res)
    harness.log(f"latency: measuring {len(sizes)} sizes interleaved")
    for res, times in zip(results, measure_ops(catalogs, ops, cold, seed)):
        res.times = times
        for kind in (*OPS, "cold"):
            o, p = (
                harness.p50(res.times.get(f"o_{kind}", [])),
                harness.p50(res.times.get(f"p_{kind}", [])),
            )
            harness.log(
                f"  N={res.n} {kind:7s} olympia p50 {ms(o)} ms, peer p50 {ms(p)} ms, "
                f"ratio {harness.fmt_ratio(o, p)}"
            )
    for n in sizes:
        shutil.rmtree(os.path.join(tmp, f"size-{n}"), ignore_errors=True)
    return results


def report_latency(results: Sequence[SizeResult], peer: bool) -> str:
    parts = [
        "### 1. One-call transactions: latency against catalog size\n",
        "p50 / p90 in ms; olympia / peer is the ratio of the p50s (< 1: olympia faster). "
        "Issue 7's target: at most 1.0 at 10^3, 10^4, 10^5 tables.\n",
    ]
    rows = []
    for r in results:
        for kind in (*OPS, "cold"):
            o, p = r.times.get(f"o_{kind}", []), r.times.get(f"p_{kind}", [])
            rows.append(
                [
                    f"{r.n:,}",
                    LABEL.get(kind, kind),
                    str(len(o)),
                    ms(harness.p50(o)),
                    ms(harness.percentile(o, 0.9)),
                    ms(harness.p50(p)) if p else "n/a",
                    ms(harness.percentile(p, 0.9)) if p else "n/a",
                    harness.fmt_ratio(harness.p50(o), harness.p50(p)),
                ]
            )
    parts.append(
        harness.md_table(
            [
                "tables",
                "operation",
                "calls",
                "olympia p50",
                "olympia p90",
                "peer p50",
                "peer p90",
                "olympia / peer",
            ],
            rows,
        )
    )
    if len(results) >= 2:
        lo, hi = results[0], results[-1]
        parts.append(
            f"\nOur own p50 at {hi.n:,} tables over our own p50 at {lo.n:,} "
            "(issue 7's target at 10^6 / 10^3: at most 1.3):\n"
        )
        rows = [
            [
                LABEL.get(kind, kind),
                ms(harness.p50(lo.times.get(f"o_{kind}", []))),
                ms(harness.p50(hi.times.get(f"o_{kind}", []))),
                harness.fmt_ratio(
                    harness.p50(hi.times.get(f"o_{kind}", [])),
                    harness.p50(lo.times.get(f"o_{kind}", [])),
                ),
            ]
            for kind in (*OPS, "cold")
        ]
        parts.append(
            harness.md_table(["operation", f"p50 at {lo.n:,}", f"p50 at {hi.n:,}", "ratio"], rows)
        )
    parts.append(
        "\nBuilding the catalogs (not compared; olympia through the public API in one "
        "transaction, the peer's rows inserted with raw SQL):\n"
    )
    rows = [
        [
            f"{r.n:,}",
            f"{r.build.get('build_s', 0):.2f}",
            f"{r.build.get('commit_s', 0):.2f}",
            f"{r.build.get('rss_mb', 0):,.0f}",
            f"{r.peer_insert_s:.2f}" if r.peer_insert_s is not None else "n/a",
        ]
        for r in results
    ]
    parts.append(
        harness.md_table(
            [
                "tables",
                "olympia building the transaction s",
                "olympia commit s",
                "olympia peak RSS MB",
                "peer SQL bulk insert s",
            ],
            rows,
        )
    )
    return "\n".join(parts) + "\n"


# --- part 3: fixed-time concurrency -----------------------------------------------------


@dataclass
class Worker:
    worker: int
    commits: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    first_failure: str = ""
    #: olympia: publish attempts that found their version taken (rebased inside commit())
    lost_races: int = 0
    t_start: float = 0.0
    t_end: float = 0.0
    error: str = ""


@dataclass
class Job:
    system: str  # "olympia" or "peer"
    where: str
    options: dict[str, Any] | None
    seconds: float


def worker_ns(w: int) -> str:
    return f"w{w:02d}"


def worker_table(w: int) -> str:
    return f"t{w:02d}"


def setup_concurrency(job: Job, procs: int) -> int:
    """Create one namespace and table per worker; return the version reached."""
    if job.system == "olympia":
        cat = olympia.create_catalog(job.where, job.options)
        txn = cat.begin()
        for w in range(procs):
            txn.create_namespace(worker_ns(w))
            txn.create_table(worker_ns(w), worker_table(w), location(worker_ns(w), "t", 0))
        version = txn.commit()
        cat.close()
        return version
    os.makedirs(job.where, exist_ok=True)
    peer = ApiPeer(job.where)
    peer.close()
    ns_rows = [(PEER_NAME, worker_ns(w), "exists", "true") for w in range(procs)]
    rows = [
        (PEER_NAME, worker_ns(w), worker_table(w), location(worker_ns(w), "t", 0), None)
        for w in range(procs)
    ]
    harness.bulk_insert(peer.db_path, ns_rows, rows)
    return 0


def run_worker(job: Job, w: int, start: Callable[[], None], res: Worker) -> None:
    """Open the catalog, wait for ``start``, then commit updates of this worker's
    own table until ``job.seconds`` have passed."""
    ns, name = worker_ns(w), worker_table(w)
    handle: Any = (
        olympia.load_catalog(job.where, job.options)
        if job.system == "olympia"
        else ApiPeer(job.where)
    )
    # counts lost races by wrapping the store's commit (instrumentation only)
    probe = bench_txn.CommitProbe(handle) if job.system == "olympia" else None
    start()
    res.t_start = time.time()
    end = time.monotonic() + job.seconds
    gen = 1
    try:
        while time.monotonic() < end:
            try:
                if job.system == "olympia":
                    o_update(handle, ns, name, gen)
                elif not handle.update(ns, name, gen):
                    raise RuntimeError("CAS missed")
            except Exception as exc:
                harness.count_failure(res, exc)
                continue
            res.commits += 1
            gen += 1
    finally:
        res.t_end = time.time()
        res.lost_races = probe.lost if probe else 0
        handle.close()


def run_fixed_time(job: Job, procs: int) -> list[Worker]:
    """``procs`` fresh processes that start together and commit for ``job.seconds``."""
    return harness.run_spawned(run_worker, Worker, job, procs, job.seconds + 900)


#: One timed run: counts, rate and failures (benchmarks/harness.py).
ConcurrencyRun = harness.TimedRun[Worker]


def concurrency_run(
    label: str, system: str, where: str, options: dict[str, Any] | None, procs: int, seconds: float
) -> ConcurrencyRun:
    job = Job(system, where, options, seconds)
    base = setup_concurrency(job, procs)
    harness.log(f"  {label}: {system}, {procs} process(es) for {seconds:.0f} s")
    load0 = harness.load_average()
    workers = run_fixed_time(job, procs)
    run = ConcurrencyRun(label, system, procs, workers, (load0, harness.load_average()))
    if system == "olympia":
        with olympia.load_catalog(where, options) as cat:
            gained = cat.version - base
            # Group commit puts several transactions in one version.
            held = sum(len(i.transactions) for i in cat.history(since=base + 1))
            if held != run.commits:
                run.problems.append(
                    f"catalog gained {gained} versions holding {held} transactions "
                    f"for {run.commits} commits"
                )
            else:
                run.checks.append(
                    f"{gained} versions holding {held} transactions for {run.commits} commits"
                )
            view = cat.latest()
            for w in workers:
                ns, name = worker_ns(w.worker), worker_table(w.worker)
                got = view.describe_table(ns, name).metadata_location
                if w.commits and got != location(ns, name, w.commits):
                    run.problems.append(f"table of process {w.worker} lost its last update")
        if not run.problems:
            run.checks.append("every table holds its process's last update")
    else:
        peer = ApiPeer(where)
        try:
            for w in workers:
                want = location(worker_ns(w.worker), worker_table(w.worker), w.commits)
                got = peer.current_location(worker_ns(w.worker), worker_table(w.worker))
                if w.commits and got != want:
                    run.problems.append(f"row of process {w.worker} lost its last update")
        finally:
            peer.close()
        if not run.problems:
            run.checks.append("every row holds its process's last update")
    firsts = [w.first_failure for w in workers if w.first_failure]
    if firsts:
        run.checks.append(f"first failure: {firsts[0]}")
    harness.log(
        f"    counts {run.counts}, {run.rate:.1f} commits/s, failures {dict(run.failures)}"
        + (f"; PROBLEMS {run.problems}" if run.problems else "")
    )
    return run


def part_concurrency(
    tmp: str, procs: int, s3_procs: int, seconds: float, peer: bool, moto: Any
) -> list[ConcurrencyRun]:
    runs: list[ConcurrencyRun] = []
    # Each configuration twice, in the order 1, N, N, 1: a run that follows
    # another on this disk is slowed by the write-back the first one left
    # (tens of thousands of files), and this order gives both the same share.
    combos: list[tuple[str, str, int]] = [("local", "olympia", procs)]
    if peer:
        combos.append(("local", "peer", procs))
    if moto is not None and s3_procs > 0:
        combos.append(("s3", "olympia", s3_procs))
    plan = [
        (backend, system, n, i + 1)
        for backend, system, many in combos
        for i, n in enumerate((1, many, many, 1))
    ]
    for k, (backend, system, n, order) in enumerate(plan):
        run_no = 1 if order <= 2 else 2
        label = f"{backend}, {n} process{'es' if n > 1 else ''} (run {run_no})"
        if backend == "s3":
            where, options = moto.uri(f"conc-{k}"), moto.storage_options
        else:
            where, options = os.path.join(tmp, f"conc-{k}"), None
        runs.append(concurrency_run(label, system, where, options, n, seconds))
        if backend == "local":
            shutil.rmtree(where, ignore_errors=True)
            # Let the file system write back the removal of the run's tens of
            # thousands of files now, rather than during the next run's fsyncs.
            os.sync()
    return runs


def report_concurrency(runs: Sequence[ConcurrencyRun], seconds: float) -> str:
    parts = [
        "### 3. Disjoint writers for a fixed time\n",
        f"Each process updates its own table (`begin`, `update_table`, `commit`) for {seconds:.0f} s. "
        "Issue 7's targets: no commit fails; min / max >= 0.33; all processes together at least "
        "as fast as one alone (the last column, > 1 is better).\n",
    ]
    # "/ one process": against the mean rate of the same system's two
    # single-process runs on the same storage.
    singles: dict[tuple[str, str], list[float]] = {}
    for r in runs:
        if r.procs == 1:
            singles.setdefault((r.label.split(",")[0], r.system), []).append(r.rate)
    alone = {key: sum(v) / len(v) for key, v in singles.items()}
    rows = []
    for r in runs:
        counts = r.counts
        one = alone.get((r.label.split(",")[0], r.system))
        rows.append(
            [
                r.label,
                r.system,
                f"{r.load[0]:.1f} -> {r.load[1]:.1f}",
                str(counts) if len(counts) > 1 else str(counts[0]),
                str(min(counts)),
                str(max(counts)),
                harness.fmt_ratio(min(counts), max(counts)),
                ", ".join(f"{k} {v}" for k, v in sorted(r.failures.items())) or "0",
                str(sum(w.lost_races for w in r.workers)) if r.system == "olympia" else "-",
                f"{r.rate:,.1f}",
                harness.fmt_ratio(r.rate, one) if r.procs > 1 else "-",
                "; ".join(r.checks + [f"**{x}**" for x in r.problems]) or "-",
            ]
        )
    parts.append(
        harness.md_table(
            [
                "storage, processes",
                "system",
                "load",
                "commits per process",
                "min",
                "max",
                "min / max",
                "failed commits (rule)",
                "lost races (rebased)",
                "commits/s (all)",
                "/ one process",
                "checks",
            ],
            rows,
        )
    )
    pooled: dict[tuple[str, str, int], list[float]] = {}
    for r in runs:
        pooled.setdefault((r.label.split(",")[0], r.system, r.procs), []).append(r.rate)
    lines = []
    for (backend, system, n), rs in pooled.items():
        one = alone.get((backend, system))
        if n > 1 and one:
            mean = sum(rs) / len(rs)
            lines.append(
                f"{backend}, {system}: {n} processes {mean:,.1f} commits/s (mean of "
                f"{len(rs)} runs) / one process {one:,.1f} = {harness.fmt_ratio(mean, one)}"
            )
    if lines:
        parts.append(
            "\nBoth runs of each configuration together (runs in the order 1, N, N, 1): "
            + "; ".join(lines)
            + ".\n"
        )
    rates = {(r.label, r.system): r.rate for r in runs}
    pairs = [
        f"{label}: {harness.fmt_ratio(rates[(label, 'olympia')], rates[(label, 'peer')])}"
        for label, system in rates
        if system == "olympia" and (label, "peer") in rates
    ]
    if pairs:
        parts.append(
            "\nolympia / peer commits/s (> 1: olympia faster): " + "; ".join(pairs) + ".\n"
        )
    return "\n".join(parts) + "\n"


# --- part 4: S3 requests per operation ---------------------------------------------------


def measure_requests(
    endpoint_url: str, bucket: str, list_size: int, seed: int
) -> list[dict[str, Any]]:
    """In a fresh process: the S3 requests of each public operation."""
    moto = s3_requests.MotoProcess(endpoint_url, bucket, None)
    opts = moto.storage_options
    uri = moto.uri(f"requests-{seed}")
    rows: list[dict[str, Any]] = []

    # setup (not measured): a namespace of 3 tables and one of list_size tables
    setup = olympia.create_catalog(uri, opts)
    txn = setup.begin()
    txn.create_namespace("ns")
    for t in ("a", "b", "c"):
        txn.create_table("ns", t, location("ns", t, 1))
    txn.create_namespace("big")
    for j in range(list_size):
        txn.create_table("big", table_name(j), location("big", table_name(j), 1))
    txn.commit()
    txn = setup.begin()  # a small version on top, so the latest root is not the bulk one
    txn.update_table("ns", "c", metadata_location=location("ns", "c", 2))
    small = txn.commit()
    setup.close()

    with s3_requests.record_s3_requests() as rec:

        def add(name: str, fn: Callable[[], Any], note: str = "") -> Any:
            result, m = rec.measure(fn)
            rows.append(
                {
                    "operation": name,
                    "total": m.total,
                    "rounds": m.rounds,
                    "background": len(m.background),
                    "requests": m.operations(),
                    "ms": m.elapsed * 1e3,
                    "budget": BUDGETS.get(name),
                    "note": note,
                }
            )
            return result

        cat = add(
            "load_catalog", lambda: olympia.load_catalog(uri, opts), "first open in this process"
        )
        add("catalog.version", lambda: cat.version)
        txn = add("begin", cat.begin, "the process has seen the catalog")
        add(
            "update_table call",
            lambda: txn.update_table("ns", "a", metadata_location=location("ns", "a", 2)),
        )
        add("commit (one table)", txn.commit)
        # a lost race: another catalog object commits after this transaction began
        other = olympia.load_catalog(uri, opts)
        mine = cat.begin()
        mine.update_table("ns", "a", metadata_location=location("ns", "a", 3))
        theirs = other.begin()
        theirs.update_table("ns", "b", metadata_location=location("ns", "b", 2))
        theirs.commit()
        other.close()
        began = mine.begin_version
        committed = add("commit that lost one race", mine.commit)
        rows[-1]["note"] = (
            f"began at {began}, committed {committed}: "
            f"{committed - began - 1} concurrent version(s) checked and rebased over"
        )
        cat.close()

        fresh = olympia.load_catalog(uri, opts)
        view = add("latest() on a fresh catalog", fresh.latest)
        names = add(
            "list_tables", lambda: view.list_tables("big"), f"{list_size:,} tables, cold caches"
        )
        if len(names) != list_size:
            raise RuntimeError(f"list_tables returned {len(names)} of {list_size} tables")
        fresh.close()

        fresh = olympia.load_catalog(uri, opts)
        add(
            "at_version + describe (fresh catalog)",
            lambda: fresh.at_version(small).describe_table("ns", "c"),
            f"version {small}",
        )
        fresh.close()
        add(
            "cold describe (load_catalog + latest + describe)",
            lambda: o_cold_describe(uri, "ns", "a", opts),
        )
    return rows


def report_requests(rows: Sequence[dict[str, Any]]) -> str:
    parts = [
        "### 4. S3 requests per public operation (moto over HTTP)\n",
        "Counted in the client (botocore / aiobotocore `Endpoint._do_get_response`, one per "
        "HTTP attempt). *Rounds*: the longest chain of requests each sent after the previous "
        "one's reply (requests in flight together count once); *background*: requests still "
        "in flight when the call returned (not waited for, not in the rounds). Budgets are "
        "issue 7's, in sequential rounds.\n",
    ]
    table = []
    for r in rows:
        budget = r["budget"]
        verdict = "-" if budget is None else ("within" if r["rounds"] <= budget else "**over**")
        table.append(
            [
                r["operation"],
                str(r["total"]),
                str(r["rounds"]),
                str(r["background"]),
                "-" if budget is None else str(budget),
                verdict,
                f"{r['ms']:.1f}",
                r["requests"],
                r["note"] or "-",
            ]
        )
    parts.append(
        harness.md_table(
            [
                "operation",
                "requests",
                "rounds",
                "background",
                "budget (rounds)",
                "",
                "ms",
                "by S3 operation",
                "note",
            ],
            table,
        )
    )
    return "\n".join(parts) + "\n"


# --- part 5: bulk load in one transaction ------------------------------------------------


def bulk_write(uri: str, n: int) -> dict[str, float]:
    base = rss_now_mb()
    out = build_olympia(uri, n)
    out["rss_base_mb"] = base
    return out


def small_write(uri: str, name: str = "one_more") -> int:
    cat = olympia.load_catalog(uri)
    txn = cat.begin()
    txn.create_table(namespace_of(0), name, location(namespace_of(0), name, 1))
    version = txn.commit()
    cat.close()
    return version


def open_version(uri: str, version: int, ns: str, name: str) -> dict[str, float]:
    """load_catalog + at_version + one describe, in a fresh process.

    The first open is the process's first; then ``OPEN_REPEATS`` more, each
    through a new ``load_catalog`` (caches belong to a catalog object, so each
    starts cold); the figure is the median of all of them, since one open
    takes a few milliseconds and a single timing is mostly noise.
    """
    base = rss_now_mb()
    times = []
    for _ in range(1 + OPEN_REPEATS):
        t0 = time.perf_counter()
        cat = olympia.load_catalog(uri)
        cat.at_version(version).describe_table(ns, name)
        times.append(time.perf_counter() - t0)
        cat.close()
    return {
        "s": statistics.median(times),
        "first_s": times[0],
        "rss_mb": peak_rss_mb(),
        "rss_base_mb": base,
    }


#: Further opens of a version after the first, for the median of part 5.
OPEN_REPEATS = 20


def peer_cold_open(folder: str, ns: str, name: str) -> dict[str, float]:
    import pyiceberg.catalog.sql  # noqa: F401  (imports are not part of the open)
    import sqlalchemy.orm  # noqa: F401

    base = rss_now_mb()
    t0 = time.perf_counter()
    peer_cold_describe(folder, ns, name)
    return {"s": time.perf_counter() - t0, "rss_mb": peak_rss_mb(), "rss_base_mb": base}


def part_bulk(tmp: str, n: int, peer: bool) -> dict[str, Any]:
    folder = os.path.join(tmp, "bulk")
    os.makedirs(folder)
    uri = os.path.join(folder, "olympia")
    harness.log(f"bulk: {n:,} tables in one transaction")
    out: dict[str, Any] = {"n": n, "write": harness.in_child(bulk_write, uri, n)}
    harness.log(
        f"  {out['write']['build_s'] + out['write']['commit_s']:.1f} s, peak RSS {out['write']['rss_mb']:,.0f} MB"
    )
    bulk_version = int(out["write"]["version"])
    small_version = harness.in_child(small_write, uri)
    # Neither opened version is the latest: load_catalog reads the latest
    # root, at_version the opened one, for both alike.
    harness.in_child(small_write, uri, "the_latest")
    j = n // 2
    out["open_bulk"] = harness.in_child(
        open_version, uri, bulk_version, namespace_of(j), table_name(j)
    )
    out["open_small"] = harness.in_child(
        open_version, uri, small_version, namespace_of(j), table_name(j)
    )
    out["versions"] = (bulk_version, small_version)
    if peer:
        pf = os.path.join(folder, "peer")
        os.makedirs(pf)
        out["peer_insert_s"] = harness.in_child(build_peer, pf, n)
        out["peer_open"] = harness.in_child(peer_cold_open, pf, namespace_of(j), table_name(j))
    for k in ("open_bulk", "open_small", "peer_open"):
        if k in out:
            harness.log(f"  {k}: {out[k]['s'] * 1e3:.1f} ms, peak RSS {out[k]['rss_mb']:,.0f} MB")
    shutil.rmtree(folder, ignore_errors=True)
    return out


def report_bulk(b: dict[str, Any]) -> str:
    w = b["write"]
    parts = [
        f"### 5. {b['n']:,} tables in one transaction, and opening the version it wrote\n",
        "Each step in a fresh child process; peak RSS is the child's high-water mark (`VmHWM`) (it includes "
        "the interpreter and imports: see 'RSS before'). Issue 7's targets: the write at most "
        "60 s and 2 GB; opening any version costs the same whatever the size of the "
        "transaction that wrote it (the last column, 1.0 is the target).\n",
    ]
    rows = [
        [
            f"write: begin, {b['n']:,} x create_table, commit",
            f"{w['build_s'] + w['commit_s']:.2f} s (building {w['build_s']:.2f}, commit {w['commit_s']:.2f})",
            f"{w['rss_base_mb']:,.0f}",
            f"{w['rss_mb']:,.0f}",
            "-",
        ]
    ]
    small = b["open_small"]
    for key, label in (
        ("open_bulk", f"open version {b['versions'][0]} (written by the bulk transaction)"),
        ("open_small", f"open version {b['versions'][1]} (written by a one-table transaction)"),
    ):
        o = b[key]
        rows.append(
            [
                label + ": load_catalog + at_version + describe_table",
                f"{o['s'] * 1e3:.2f} ms (first {o['first_s'] * 1e3:.2f} ms)",
                f"{o['rss_base_mb']:,.0f}",
                f"{o['rss_mb']:,.0f}",
                f"time {harness.fmt_ratio(o['s'], small['s'])}, "
                f"RSS {harness.fmt_ratio(o['rss_mb'], small['rss_mb'])}",
            ]
        )
    if "peer_open" in b:
        rows.append(
            [
                "peer: raw SQL bulk insert of the same rows (reference, not its API)",
                f"{b['peer_insert_s']:.2f} s",
                "-",
                "-",
                "-",
            ]
        )
        o = b["peer_open"]
        rows.append(
            [
                "peer: new SqlCatalog + SELECT of load_table (one, the process's first)",
                f"{o['s'] * 1e3:.2f} ms",
                f"{o['rss_base_mb']:,.0f}",
                f"{o['rss_mb']:,.0f}",
                "-",
            ]
        )
    parts.append(
        harness.md_table(
            ["step", "time", "RSS before MB", "peak RSS MB", "/ opening the small version"], rows
        )
    )
    return "\n".join(parts) + "\n"


# --- main -------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, short runs (smoke run)")
    parser.add_argument(
        "--sizes",
        type=harness.parse_sizes,
        help="catalog sizes for latency (default 1000,10000,100000,1000000)",
    )
    parser.add_argument("--ops", type=int, help="calls of each kind per size (default 100)")
    parser.add_argument("--cold", type=int, help="cold describes per size (default 30)")
    parser.add_argument("--procs", type=int, default=8, help="local processes (default 8)")
    parser.add_argument("--s3-procs", type=int, default=4, help="S3 processes (default 4; 0: none)")
    parser.add_argument("--seconds", type=float, help="seconds per concurrency run (default 30)")
    parser.add_argument(
        "--list-size", type=int, help="tables in the listed namespace (default 10000)"
    )
    parser.add_argument("--bulk", type=int, help="tables of the bulk transaction (default 1000000)")
    harness.add_common_options(parser, "api-<date>[-quick].md", parts=PARTS, seed=20261123)
    args = parser.parse_args(argv)

    quick = args.quick
    sizes = args.sizes or ([1_000, 10_000] if quick else [1_000, 10_000, 100_000, 1_000_000])
    ops = args.ops or (20 if quick else 100)
    cold = args.cold or (10 if quick else 30)
    seconds = args.seconds or (3.0 if quick else 30.0)
    list_size = args.list_size or (2_000 if quick else 10_000)
    bulk = args.bulk or (20_000 if quick else 1_000_000)
    skip = "disabled with --no-peer" if args.no_peer else harness.peer_available()
    peer = not skip
    if skip:
        harness.log(f"peer skipped: {skip}")

    base_tmp = tempfile.mkdtemp(prefix="olympia-bench-api-", dir=args.tmp)
    started = datetime.datetime.now(datetime.UTC)
    sections: list[str] = []
    problems: list[str] = []
    moto = None
    probe_start = harness.creation_probe(base_tmp)
    probe_end = probe_start
    try:
        need_s3 = "requests" in args.only or ("concurrency" in args.only and args.s3_procs > 0)
        if need_s3:
            harness.log("starting a moto S3 server in a child process")
            moto = s3_requests.start_moto_process()
        if "latency" in args.only:
            sections.append(
                report_latency(part_latency(base_tmp, sizes, ops, cold, args.seed, peer), peer)
            )
        if "concurrency" in args.only:
            harness.log("disjoint writers for a fixed time")
            runs = part_concurrency(base_tmp, args.procs, args.s3_procs, seconds, peer, moto)
            problems += [f"{r.label} ({r.system}): {x}" for r in runs for x in r.problems]
            sections.append(report_concurrency(runs, seconds))
        if "requests" in args.only:
            assert moto is not None
            harness.log("S3 requests per operation")
            rows = harness.in_child(
                measure_requests, moto.endpoint_url, moto.bucket, list_size, args.seed
            )
            for r in rows:
                harness.log(
                    f"  {r['operation']}: {r['total']} requests, {r['rounds']} rounds ({r['requests']})"
                )
            sections.append(report_requests(rows))
        if "bulk" in args.only:
            sections.append(report_bulk(part_bulk(base_tmp, bulk, peer)))
        probe_end = harness.creation_probe(base_tmp)
    finally:
        if moto is not None:
            moto.stop()
        shutil.rmtree(base_tmp, ignore_errors=True)
    finished = datetime.datetime.now(datetime.UTC)
    machine = harness.machine_info(os.path.dirname(base_tmp))
    machine.append(harness.creation_row(probe_start, probe_end))
    machine += [
        ("moto", harness.package_version("moto")),
        ("s3fs", harness.package_version("s3fs")),
        ("aiobotocore", harness.package_version("aiobotocore")),
    ]
    text = "\n".join(sections)
    print(text)

    if not args.no_save:
        today = started.date().isoformat()
        out = harness.results_path(args.out, f"api-{today}{'-quick' if quick else ''}.md")
        lines = [
            f"# API benchmark, {today}",
            "",
            f"Command (from the project root): `{harness.command_line('bench_api', argv)}`",
            "",
            f"Started {started:%Y-%m-%d %H:%M} UTC, took {(finished - started).total_seconds():.0f} s; "
            f"1-minute load average at the end {harness.load_average():.1f}.",
            "",
            harness.md_table(["machine", ""], [[k, v] for k, v in machine]),
            "",
            "Everything olympia does here goes through the public API (see the docstring of "
            "benchmarks/bench_api.py for exactly what each part measures); the peer is "
            "PyIceberg's SqlCatalog on SQLite, in the same run. Local catalogs use the default "
            "definition (default isolation: snapshot).",
            "",
            text,
        ]
        harness.save_report(out, lines, problems)
    return harness.exit_code(problems)


if __name__ == "__main__":
    sys.exit(main())
