"""Spark benchmark: one Spark job through olympia's REST catalog and through Iceberg's
``hadoop`` catalog, in the same run; and the REST server's requests per second.

Three parts (``--only``):

1. ``spark``: ONE SparkSession (one JVM, ``local[2]``, the jars and settings of
   ``olympia.spark.session``) with two Iceberg catalogs: ``lake``, Iceberg's
   REST client (``type=rest``) talking HTTP to the olympia REST server, which
   runs in a thread of this Python process (``olympia.rest.server``'s
   ``BackgroundServer``, uvicorn, one worker) on a local-directory olympia
   catalog; and ``h``, Iceberg's built-in ``HadoopCatalog`` (``type=hadoop``)
   with its warehouse in a local folder on the same disk. Both catalogs have
   Iceberg's table cache off (``cache-enabled=false``, what
   ``olympia.spark.session`` sets for ``lake`` so that transactions see every
   commit), so every statement loads its tables from the catalog on both
   sides. The job, on catalog C, in a namespace of its own per repetition:
   ``CREATE NAMESPACE``; ``CREATE TABLE`` x T (``--tables``, default 3;
   ``id BIGINT, item STRING, qty INT``); ``INSERT INTO ... SELECT`` of R rows
   (``--rows``, default 1000) into each; ``UPDATE ... SET qty = qty + 1
   WHERE id % 3 = 0`` on each (copy-on-write: a new data file); and a
   ``SELECT count(*), sum(qty)`` of each, whose result is checked (the script
   exits 1 when the two catalogs disagree or a result is wrong). Repetitions
   (``--reps``, default 10, after ``--warmup`` uncounted ones, default 2)
   alternate which catalog goes first, so that JIT warm-up, other work on the
   machine and the disk's state slow both alike. Reported: the median job
   time per catalog and the ratio lake / h (the issue's goal: at most 1.10),
   the median time of each statement kind, and, from a counting ASGI
   wrapper around the server, the REST requests each statement kind made and
   the time the server spent inside them (from the request's arrival at the
   ASGI app to its last response byte; uvicorn's HTTP parsing and the network
   are outside it).
2. ``rest``: requests per second of the REST server for load-table
   (``GET /v1/{prefix}/namespaces/{ns}/tables/{t}``) and commit
   (``POST`` of the same path with one ``assert-table-uuid`` requirement and
   one ``set-properties`` update: a new metadata.json and one catalog
   version per request). The server is ``olympia serve`` in its own process
   (one uvicorn worker, a local-directory catalog); clients are P processes
   (``--procs``, default 4) of plain HTTP (``http.client``, one kept-alive
   connection each), each on a table of its own (commits never conflict; any
   non-2xx response is counted and makes the script exit 1), for a fixed
   time (``--seconds``, default 10), after 1 s of warm-up; and one process
   alone for the same time, whose latency (p50, p90) is reported too. The
   tables each carry one snapshot (one appended data file). For scale: the
   same two calls on PyIceberg's API of the olympia catalog directly (no
   HTTP), one thread: ``catalog.load_table`` and a one-property
   ``Transaction.commit_transaction``.
3. ``profile``: where a request's time goes. The same server, in this
   process, with ``cProfile`` on every thread (the event loop and the
   threadpool that runs FastAPI's endpoints); one client thread sends
   ``--profile-requests`` load-tables (default 300), then as many commits;
   the top functions by own time and by cumulative time are reported.

Nothing here asserts on timings; this is a measurement, not a test. On a
machine with 2 cores, the client processes of part 2 compete with the server
for the cores, and Spark's executors with the REST server in part 1: the
results file gives the load average.

Run from the project root::

    python -m benchmarks.bench_spark              # ~4 minutes, writes benchmarks/results/spark-<date>.md
    python -m benchmarks.bench_spark --quick      # smoke run (spark-<date>-quick.md)
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import http.client
import json
import multiprocessing as mp
import os
import pstats
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    from benchmarks import harness
except ImportError:  # run as a script: benchmarks/ is on sys.path
    import harness  # type: ignore[no-redef]

PARTS = ("spark", "rest", "profile")
KINDS = ("create namespace", "create table", "insert", "update", "select")
PREFIX = "olympia"


def ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 1e3:.1f}"


# --- counting what the server does --------------------------------------------------


@dataclass
class Counter:
    """Requests seen by the server: per (label, route) count and seconds inside the app."""

    label: str = ""
    count: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    seconds: dict[tuple[str, str], float] = field(default_factory=lambda: defaultdict(float))
    statuses: dict[int, int] = field(default_factory=lambda: defaultdict(int))


class CountingApp:
    """An ASGI wrapper that records each HTTP request's route template and time."""

    def __init__(self, app: Any, counter: Counter) -> None:
        self.app = app
        self.counter = counter

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = [0]

        async def send_status(message: Any) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        label = self.counter.label
        t0 = time.perf_counter()
        try:
            await self.app(scope, receive, send_status)
        finally:
            elapsed = time.perf_counter() - t0
            route = scope.get("route")
            path = getattr(route, "path", scope["path"]).replace(f"/v1/{PREFIX}", "")
            key = (label, f"{scope['method']} {path}")
            self.counter.count[key] += 1
            self.counter.seconds[key] += elapsed
            self.counter.statuses[status[0]] += 1


class ThreadServer:
    """uvicorn serving ``app`` from a thread of this process, started from a host
    and port as ``olympia serve`` starts it (``uvicorn.run(app, host, port)``).

    Not ``olympia.rest.server.BackgroundServer``: that one hands uvicorn a socket
    made with ``socket.socket(AF_INET, SOCK_STREAM)`` (protocol 0), and asyncio
    sets TCP_NODELAY only on sockets whose protocol is IPPROTO_TCP, so its
    responses with a body wait ~40 ms for the client's delayed ACK (Nagle).
    ``--server shipped`` measures that one."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan="off",
            access_log=False,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def start(self) -> ThreadServer:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the REST server on {self.uri} did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)


def start_server(warehouse: str, counter: Counter | None = None, mode: str = "thread") -> Any:
    """The olympia REST app on ``warehouse``, wrapped in ``counter``, served from a
    thread: by :class:`ThreadServer` (``thread``) or by olympia's own
    ``BackgroundServer`` (``shipped``)."""
    from olympia.rest.app import create_app
    from olympia.rest.server import BackgroundServer, open_catalog

    app: Any = create_app(open_catalog(warehouse), prefix=PREFIX)
    if counter is not None:
        app = CountingApp(app, counter)
    if mode == "shipped":
        return BackgroundServer(app).start()
    return ThreadServer(app).start()


# --- part 1: the Spark job ----------------------------------------------------------


def job(spark: Any, cat: str, rep: int, tables: int, rows: int) -> dict[str, float]:
    """The job on catalog ``cat``; seconds per statement kind. Raises on a wrong result."""
    ns = f"{cat}.r{rep:03d}"
    names = [f"{ns}.t{i}" for i in range(tables)]
    statements: list[tuple[str, str]] = [("create namespace", f"CREATE NAMESPACE {ns}")]
    statements += [
        ("create table", f"CREATE TABLE {n} (id BIGINT, item STRING, qty INT) USING iceberg")
        for n in names
    ]
    statements += [
        (
            "insert",
            f"INSERT INTO {n} SELECT id, concat('item-', CAST(id AS STRING)), "
            f"CAST(id % 10 AS INT) FROM range({rows})",
        )
        for n in names
    ]
    statements += [("update", f"UPDATE {n} SET qty = qty + 1 WHERE id % 3 = 0") for n in names]
    times: dict[str, float] = defaultdict(float)
    for kind, sql in statements:
        t0 = time.perf_counter()
        spark.sql(sql).collect()
        times[kind] += time.perf_counter() - t0
    expected = (rows, sum(i % 10 for i in range(rows)) + len(range(0, rows, 3)))
    for n in names:
        t0 = time.perf_counter()
        got = tuple(spark.sql(f"SELECT count(*), sum(qty) FROM {n}").collect()[0])
        times["select"] += time.perf_counter() - t0
        if got != expected:
            raise RuntimeError(f"{n}: SELECT count(*), sum(qty) gave {got}, expected {expected}")
    times["job"] = sum(times[k] for k in KINDS)
    return dict(times)


@dataclass
class SparkResult:
    times: dict[str, dict[str, list[float]]]  # catalog -> kind -> seconds per rep
    requests: dict[tuple[str, str], int]  # (kind, route) -> count over the counted reps
    server_seconds: dict[tuple[str, str], float]
    statuses: dict[int, int]
    reps: int
    startup_s: float
    versions: dict[str, str]


def part_spark(
    tmp: str,
    reps: int,
    warmup: int,
    tables: int,
    rows: int,
    metrics: bool = True,
    mode: str = "thread",
) -> SparkResult:
    from olympia import spark as olympia_spark

    os.makedirs(tmp, exist_ok=True)
    counter = Counter()
    lake_wh = f"file://{tmp}/olympia"
    hadoop_wh = f"file://{tmp}/hadoop"
    server = start_server(lake_wh, counter, mode)
    t0 = time.perf_counter()
    spark = olympia_spark.session(
        uri=server.uri,
        app_name="bench_spark",
        conf={
            "spark.sql.catalog.h": "org.apache.iceberg.spark.SparkCatalog",
            "spark.sql.catalog.h.type": "hadoop",
            "spark.sql.catalog.h.warehouse": hadoop_wh,
            "spark.sql.catalog.h.cache-enabled": "false",
            **(
                {}
                if metrics
                else {"spark.sql.catalog.lake.rest-metrics-reporting-enabled": "false"}
            ),
        },
    )
    startup = time.perf_counter() - t0
    versions = {
        "spark": spark.version,
        "java": spark.sparkContext._jvm.java.lang.System.getProperty("java.version"),
    }
    times: dict[str, dict[str, list[float]]] = {"lake": defaultdict(list), "h": defaultdict(list)}
    try:
        for rep in range(warmup + reps):
            order = ("lake", "h") if rep % 2 == 0 else ("h", "lake")
            line = []
            for cat in order:
                counted = rep >= warmup
                result = _labelled_job(spark, cat, rep, tables, rows, counter, counted)
                if counted:
                    for kind, secs in result.items():
                        times[cat][kind].append(secs)
                line.append(f"{cat} {result['job']:.2f} s")
            harness.log(f"  rep {rep}{' (warm-up)' if rep < warmup else ''}: {', '.join(line)}")
    finally:
        spark.stop()
        server.stop()
    requests = {k: v for k, v in counter.count.items() if k[0]}
    seconds = {k: v for k, v in counter.seconds.items() if k[0]}
    return SparkResult(
        {c: dict(v) for c, v in times.items()},
        requests,
        seconds,
        dict(counter.statuses),
        reps,
        startup,
        versions,
    )


def _labelled_job(
    spark: Any, cat: str, rep: int, tables: int, rows: int, counter: Counter, counted: bool
) -> dict[str, float]:
    """``job``, with the counter's label set to the statement kind while ``lake`` runs."""

    class Labelling:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def sql(self, text: str) -> Any:
            kind = _kind_of(text)
            counter.label = kind if counted and cat == "lake" else ""
            return self.inner.sql(text)

    try:
        return job(Labelling(spark), cat, rep, tables, rows)
    finally:
        counter.label = ""


def _kind_of(sql: str) -> str:
    head = sql.split()[0:2]
    if head[0] == "CREATE":
        return "create namespace" if head[1] == "NAMESPACE" else "create table"
    return head[0].lower()


# --- part 2: requests per second -----------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_process(warehouse: str, port: int) -> subprocess.Popen[bytes]:
    """``olympia serve`` in a child process; returns once it answers /v1/config."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "olympia.cli", "serve", "-w", warehouse, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=harness.PROJECT_ROOT,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/v1/config")
            if conn.getresponse().status == 200:
                conn.close()
                return proc
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            err = proc.stderr.read().decode() if proc.stderr else ""
            proc.kill()
            raise RuntimeError(f"olympia serve did not start: {err[-2000:]}")
        time.sleep(0.2)


def make_tables(uri: str, n: int) -> list[str]:
    """Namespace ``bench`` with tables w0..w{n-1}, each with one appended data file,
    through PyIceberg's REST client; returns their table UUIDs."""
    import pyarrow as pa
    from pyiceberg.catalog import load_catalog

    rest = load_catalog("bench", type="rest", uri=uri)
    if ("bench",) not in rest.list_namespaces():
        rest.create_namespace("bench")
    data = pa.table({"id": pa.array(range(100), pa.int64()), "v": [f"v{i}" for i in range(100)]})
    uuids = []
    for w in range(n):
        ident = ("bench", f"w{w}")
        table = rest.load_table(ident) if rest.table_exists(ident) else None
        if table is None:
            table = rest.create_table(ident, schema=data.schema)
            table.append(data)
        uuids.append(str(table.metadata.table_uuid))
    return uuids


def http_worker(
    port: int, kind: str, table: str, uuid: str, seconds: float, warm: float, q: Any
) -> None:
    """One client process: ``kind`` requests on ``table`` for ``warm`` + ``seconds`` s."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    path = f"/v1/{PREFIX}/namespaces/bench/tables/{table}"
    lat: list[float] = []
    bad: dict[int, int] = defaultdict(int)
    i = 0
    start = time.perf_counter()
    t_end_warm = start + warm
    t_end = t_end_warm + seconds
    while True:
        now = time.perf_counter()
        if now >= t_end:
            break
        if kind == "load":
            conn.request("GET", path)
        else:
            body = {
                "requirements": [{"type": "assert-table-uuid", "uuid": uuid}],
                "updates": [{"action": "set-properties", "updates": {"bench.n": str(i)}}],
            }
            conn.request(
                "POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"}
            )
        response = conn.getresponse()
        response.read()
        done = time.perf_counter()
        i += 1
        if now >= t_end_warm:
            if 200 <= response.status < 300:
                lat.append(done - now)
            else:
                bad[response.status] += 1
    conn.close()
    q.put((lat, dict(bad)))


@dataclass
class RateResult:
    kind: str
    procs: int
    seconds: float
    ok: int
    bad: dict[int, int]
    latencies: list[float]

    @property
    def rate(self) -> float:
        return self.ok / self.seconds


def run_clients(
    port: int, kind: str, procs: int, uuids: Sequence[str], seconds: float
) -> RateResult:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    workers = [
        ctx.Process(
            target=http_worker, args=(port, kind, f"w{w}", uuids[w], seconds, 1.0, q), daemon=True
        )
        for w in range(procs)
    ]
    for p in workers:
        p.start()
    results = [q.get(timeout=seconds + 120) for _ in workers]
    for p in workers:
        p.join(timeout=30)
    lat = [x for r in results for x in r[0]]
    bad: dict[int, int] = defaultdict(int)
    for r in results:
        for status, n in r[1].items():
            bad[status] += n
    return RateResult(kind, procs, seconds, len(lat), dict(bad), lat)


def direct_calls(warehouse: str, n: int) -> dict[str, list[float]]:
    """PyIceberg's API on the olympia catalog, no HTTP: load_table and a
    one-property commit of table w0, ``n`` times each (first 5 not counted)."""
    from olympia.rest.server import open_catalog

    cat = open_catalog(warehouse)
    out: dict[str, list[float]] = {"load": [], "commit": []}
    for i in range(n + 5):
        t0 = time.perf_counter()
        cat.load_table(("bench", "w0"))
        if i >= 5:
            out["load"].append(time.perf_counter() - t0)
    table = cat.load_table(("bench", "w0"))
    for i in range(n + 5):
        t0 = time.perf_counter()
        with table.transaction() as txn:  # commits on exit; ``table`` follows
            txn.set_properties({"bench.direct": str(i)})
        if i >= 5:
            out["commit"].append(time.perf_counter() - t0)
    return out


@dataclass
class RestResult:
    runs: list[RateResult]
    direct: dict[str, list[float]]


def part_rest(tmp: str, procs: int, seconds: float, direct_n: int) -> RestResult:
    warehouse = f"file://{tmp}/serve"
    port = free_port()
    proc = serve_process(warehouse, port)
    runs: list[RateResult] = []
    try:
        uuids = make_tables(f"http://127.0.0.1:{port}", max(procs, 1))
        for kind in ("load", "commit"):
            for p in (1, procs):
                harness.log(f"rest: {kind} with {p} client process(es) for {seconds:.0f} s")
                r = run_clients(port, kind, p, uuids, seconds)
                harness.log(
                    f"  {r.rate:.1f} requests/s, p50 {ms(harness.p50(r.latencies))} ms, bad {r.bad}"
                )
                runs.append(r)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    harness.log("rest: direct PyIceberg calls (no HTTP)")
    direct = harness.in_child(direct_calls, warehouse, direct_n)
    return RestResult(runs, direct)


# --- part 3: profile ------------------------------------------------------------------


def part_profile(tmp: str, n: int, top: int) -> dict[str, str]:
    """cProfile on every thread of an in-process server while one client sends
    ``n`` load-tables, then ``n`` commits; the top functions of each phase."""
    warehouse = f"file://{tmp}/profile"
    profiles: list[cProfile.Profile] = []
    lock = threading.Lock()
    enabled = threading.Event()

    def bootstrap(frame: Any, event: str, arg: Any) -> None:
        sys.setprofile(None)
        if enabled.is_set():
            prof = cProfile.Profile()
            with lock:
                profiles.append(prof)
            prof.enable()

    server = start_server(warehouse)
    out: dict[str, str] = {}
    try:
        uuids = make_tables(server.uri, 1)
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        path = f"/v1/{PREFIX}/namespaces/bench/tables/w0"
        for kind in ("load", "commit"):
            # new threads start profiled; the server's existing threads are
            # replaced by restarting the server on the same catalog
            server.stop()
            profiles.clear()
            enabled.set()
            threading.setprofile(bootstrap)
            server = start_server(warehouse)
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
            t0 = time.perf_counter()
            for i in range(n):
                if kind == "load":
                    conn.request("GET", path)
                else:
                    body = {
                        "requirements": [{"type": "assert-table-uuid", "uuid": uuids[0]}],
                        "updates": [{"action": "set-properties", "updates": {"p": str(i)}}],
                    }
                    conn.request(
                        "POST",
                        path,
                        body=json.dumps(body),
                        headers={"Content-Type": "application/json"},
                    )
                response = conn.getresponse()
                response.read()
                if response.status >= 300:
                    raise RuntimeError(f"profile: {kind} got HTTP {response.status}")
            wall = time.perf_counter() - t0
            threading.setprofile(None)
            enabled.clear()
            conn.close()
            server.stop()
            with lock:
                stats = None
                for prof in profiles:
                    prof.create_stats()
                    if stats is None:
                        stats = pstats.Stats(prof)
                    else:
                        stats.add(prof)
            assert stats is not None
            out[kind] = f"{n} requests in {wall:.2f} s ({n / wall:.0f}/s under the profiler)\n" + (
                summarize(stats, n, top)
            )
            server = start_server(warehouse)
    finally:
        threading.setprofile(None)
        server.stop()
    return out


#: Functions in which a thread waits for work (event loop, thread pools): not busy time.
IDLE = (
    "<method 'acquire' of '_thread.lock' objects>",
    "<method 'poll' of 'select.epoll' objects>",
    "<method 'get' of '_queue.SimpleQueue' objects>",
)
#: Where a function's file lives -> the layer it is counted in.
LAYERS = (
    ("/olympia/rest/", "olympia.rest (the endpoints)"),
    ("/olympia/iceberg/", "olympia.iceberg (PyIceberg catalog on olympia)"),
    ("/olympia/", "olympia core (transactions, tree, storage)"),
    ("/pyiceberg/", "pyiceberg (metadata, serializers, FileIO)"),
    ("/pydantic", "pydantic (validation, JSON)"),
    ("/fastapi/", "fastapi"),
    ("/starlette/", "starlette"),
    ("/anyio/", "anyio (threadpool hand-off)"),
    ("/uvicorn/", "uvicorn + h11 (HTTP)"),
    ("/h11/", "uvicorn + h11 (HTTP)"),
    ("/pyarrow/", "pyarrow"),
    ("/asyncio/", "asyncio event loop"),
)


def layer_of(filename: str, func: str) -> str:
    for marker, name in LAYERS:
        if marker in filename:
            return name
    if filename == "~":
        if any(w in func for w in ("fsync", "replace", "open", "stat", "write", "read", "mkdir")):
            return "file system calls"
        if any(w in func for w in ("send", "recv", "socket")):
            return "socket calls"
        return "other built-ins"
    return "other Python (stdlib, ...)"


def summarize(stats: pstats.Stats, n: int, top: int) -> str:
    """Busy time by layer (own time, idle waits left out) and the top functions."""
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, Any]] = stats.stats  # type: ignore[attr-defined]
    busy = {k: v for k, v in raw.items() if k[2] not in IDLE}
    total = sum(v[2] for v in busy.values())
    layers: dict[str, float] = defaultdict(float)
    for (filename, _, func), v in busy.items():
        layers[layer_of(filename, func)] += v[2]
    lines = [
        f"busy (own time of every function but the idle waits): {total:.3f} s, "
        f"{total / n * 1e3:.2f} ms per request under the profiler",
        "",
        "own time by layer:",
    ]
    for name, t in sorted(layers.items(), key=lambda kv: -kv[1]):
        lines.append(f"  {t / total * 100:5.1f}%  {t * 1e3 / n:7.3f} ms/request  {name}")

    def label(k: tuple[str, int, str]) -> str:
        filename, line, func = k
        if filename == "~":
            return func
        parts = Path(filename).parts
        short = "/".join(parts[-2:]) if len(parts) > 1 else filename
        return f"{short}:{line}({func})"

    lines += ["", f"top {top} by own time (ms per request, calls per request):"]
    for k, v in sorted(busy.items(), key=lambda kv: -kv[1][2])[:top]:
        lines.append(f"  {v[2] * 1e3 / n:7.3f}  {v[1] / n:6.1f}  {label(k)}")
    ours = {
        k: v
        for k, v in busy.items()
        if any(m in k[0] for m in ("/olympia/", "/pyiceberg/", "/fastapi/"))
    }
    lines += ["", f"top {top} by cumulative time in olympia, pyiceberg, fastapi (ms per request):"]
    for k, v in sorted(ours.items(), key=lambda kv: -kv[1][3])[:top]:
        lines.append(f"  {v[3] * 1e3 / n:7.3f}  {v[1] / n:6.1f}  {label(k)}")
    return "\n".join(lines)


# --- report -------------------------------------------------------------------------------


def machine_info(tmp: str, spark: SparkResult | None) -> list[tuple[str, str]]:
    rows = harness.machine_info(tmp)
    rows = [r for r in rows if r[0] not in ("sqlalchemy", "sqlite")]
    for mod in ("pyspark", "fastapi", "uvicorn", "snowpark-connect-deps-iceberg"):
        rows.append((mod, harness.package_version(mod)))
    if spark is not None:
        rows.append(("java", spark.versions["java"]))
        rows.append(("iceberg runtime", "iceberg-spark-runtime-3.5_2.12-1.10.2"))
    return rows


def report(
    argv: Sequence[str],
    started: datetime.datetime,
    took: float,
    tmp: str,
    args: argparse.Namespace,
    spark: SparkResult | None,
    rest: RestResult | None,
    profile: dict[str, str] | None,
    loads: list[float],
) -> str:
    out = [
        f"# Spark benchmark, {started:%Y-%m-%d}",
        "",
        f"Command (from the project root): `{harness.command_line('bench_spark', argv)}`",
        "",
        f"Started {started:%Y-%m-%d %H:%M} UTC, took {took:.0f} s; 1-minute load average "
        f"before / after each part: {', '.join(f'{x:.1f}' for x in loads)} "
        "(other work shared the 2 cores).",
        "",
        harness.md_table(["machine", ""], machine_info(tmp, spark)),
        "",
        "See the docstring of benchmarks/bench_spark.py for exactly what is measured.",
    ]
    if spark is not None:
        lake, h = spark.times["lake"], spark.times["h"]
        job_l, job_h = harness.p50(lake["job"]), harness.p50(h["job"])
        paired = harness.p50([a / b for a, b in zip(lake["job"], h["job"], strict=True)])
        out += [
            "",
            "## 1. The same Spark job through olympia's REST catalog and the hadoop catalog",
            "",
            f"One SparkSession (Spark {spark.versions['spark']}, `local[2]`, started in "
            f"{spark.startup_s:.0f} s) with catalogs `lake` (Iceberg REST client -> olympia "
            "REST server in this Python process -> local-directory olympia catalog; "
            + (
                "server: `olympia.rest.server.BackgroundServer`, as `olympia.spark.session("
                "warehouse=...)` starts it, without TCP_NODELAY"
                if args.server == "shipped"
                else "server: uvicorn started from host and port in a thread, as `olympia serve` "
                "starts it, with TCP_NODELAY"
            )
            + ") and `h` "
            "(Iceberg HadoopCatalog, local folder); table cache off on both. Job per "
            f"repetition: CREATE NAMESPACE, {args.tables} x CREATE TABLE, {args.tables} x "
            f"INSERT of {args.rows} rows, {args.tables} x UPDATE (a third of the rows), "
            f"{args.tables} x SELECT count/sum (checked). "
            + ("lake's scan/commit reports (`/metrics`) off. " if args.no_metrics else "")
            + f"{spark.reps} counted repetitions "
            f"after {args.warmup} warm-up ones, the catalog going first alternating.",
            "",
            f"**Job time, median: lake {ms(job_l)} ms, h {ms(job_h)} ms; "
            f"lake / h = {harness.fmt_ratio(job_l, job_h)}** (goal: at most 1.10). "
            "Less sensitive to other work on the machine: the median of the per-repetition "
            f"ratios (the two catalogs ran back to back) {harness.fmt_ratio(paired, 1.0)}; "
            f"fastest job of each, lake / h {harness.fmt_ratio(min(lake['job']), min(h['job']))}.",
            "",
        ]
        rows = []
        for kind in (*KINDS, "job"):
            n = args.tables if kind not in ("create namespace", "job") else 1
            reqs = sum(c for (k, _), c in spark.requests.items() if k == kind or kind == "job")
            secs = sum(
                s for (k, _), s in spark.server_seconds.items() if k == kind or kind == "job"
            )
            diff = (harness.p50(lake[kind]) or 0) - (harness.p50(h[kind]) or 0)
            rows.append(
                [
                    kind,
                    str(n),
                    ms(harness.p50(lake[kind])),
                    ms(harness.p50(h[kind])),
                    harness.fmt_ratio(harness.p50(lake[kind]), harness.p50(h[kind])),
                    ms(diff),
                    f"{reqs / spark.reps:.1f}",
                    ms(secs / spark.reps),
                ]
            )
        out += [
            "Median milliseconds per repetition for all statements of a kind; *difference* "
            "is lake - h; *requests* and *server ms* are the REST requests those statements "
            "made per repetition and the time the server spent inside them (mean over the "
            "counted repetitions).",
            "",
            harness.md_table(
                [
                    "statements",
                    "count",
                    "lake ms",
                    "h ms",
                    "lake / h",
                    "difference ms",
                    "requests",
                    "server ms",
                ],
                rows,
            ),
            "",
            "REST requests by route over the counted repetitions (count per repetition, "
            "mean server ms per request):",
            "",
        ]
        by_route: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
        for (_, route), c in spark.requests.items():
            by_route[route][0] += c
        for (_, route), s in spark.server_seconds.items():
            by_route[route][1] += s
        route_rows = [
            [f"`{route}`", f"{c / spark.reps:.1f}", ms(s / c if c else None)]
            for route, (c, s) in sorted(by_route.items(), key=lambda kv: -kv[1][1])
        ]
        out += [harness.md_table(["route", "per repetition", "server ms each"], route_rows), ""]
        out.append(
            "HTTP statuses: "
            + ", ".join(f"{k}: {v}" for k, v in sorted(spark.statuses.items()))
            + " (all repetitions, warm-up included)."
        )
        out.append("")
        out.append(
            "Job times per repetition (s): lake "
            + ", ".join(f"{x:.2f}" for x in lake["job"])
            + "; h "
            + ", ".join(f"{x:.2f}" for x in h["job"])
            + "."
        )
    if rest is not None:
        out += [
            "",
            "## 2. REST server: requests per second",
            "",
            "`olympia serve` in its own process (one uvicorn worker, local-directory "
            "catalog); P client processes of plain HTTP/1.1 (`http.client`, kept-alive), each "
            f"on its own table, {args.seconds:.0f} s after 1 s of warm-up. load-table is "
            "`GET .../tables/{t}`; commit is `POST .../tables/{t}` with `assert-table-uuid` "
            "and one `set-properties` (a new metadata.json and a new catalog version each). "
            "Latency is client-side, per request.",
            "",
        ]
        rows = [
            [
                r.kind if r.kind == "load" else "commit",
                str(r.procs),
                str(r.ok),
                f"{r.rate:.1f}",
                ms(harness.p50(r.latencies)),
                ms(harness.percentile(r.latencies, 0.9) if r.latencies else None),
                str(sum(r.bad.values())),
            ]
            for r in rest.runs
        ]
        out += [
            harness.md_table(
                ["request", "client processes", "ok", "requests/s", "p50 ms", "p90 ms", "non-2xx"],
                rows,
            ),
            "",
            "For scale, the same calls on PyIceberg's API of the olympia catalog, no HTTP, "
            "one thread: load_table p50 "
            f"{ms(harness.p50(rest.direct['load']))} ms, one-property commit_transaction p50 "
            f"{ms(harness.p50(rest.direct['commit']))} ms ({len(rest.direct['load'])} calls each).",
        ]
    if profile is not None:
        out += ["", "## 3. Profile of the server (cProfile on all its threads)", ""]
        for kind, text in profile.items():
            out += [f"### {kind}", "", "```", text, "```", ""]
    return "\n".join(out).rstrip() + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small smoke run")
    ap.add_argument("--reps", type=int, default=None, help="counted repetitions (10)")
    ap.add_argument("--warmup", type=int, default=None, help="uncounted repetitions (2)")
    ap.add_argument("--tables", type=int, default=3)
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument(
        "--no-metrics",
        action="store_true",
        help="lake's REST client does not POST scan/commit reports (/metrics)",
    )
    ap.add_argument(
        "--server",
        choices=("thread", "shipped"),
        default="thread",
        help="part 1's server: uvicorn from host and port in a thread (thread), or "
        "olympia.rest.server.BackgroundServer as olympia.spark.session starts it (shipped)",
    )
    ap.add_argument("--procs", type=int, default=4, help="client processes in part 2")
    ap.add_argument("--seconds", type=float, default=None, help="seconds per rate run (10)")
    ap.add_argument("--profile-requests", type=int, default=None, help="(300)")
    harness.add_common_options(ap, "spark-<date>[-quick][-shipped].md", parts=PARTS, peer=False)
    args = ap.parse_args(argv)
    args.reps = args.reps if args.reps is not None else (3 if args.quick else 10)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.quick else 2)
    args.seconds = args.seconds if args.seconds is not None else (3.0 if args.quick else 10.0)
    n_prof = args.profile_requests or (50 if args.quick else 300)
    parts = args.only

    started = datetime.datetime.now(datetime.UTC)
    t_start = time.perf_counter()
    tmp = tempfile.mkdtemp(prefix="bench_spark_", dir=args.tmp)
    loads = [harness.load_average()]
    spark_res = rest_res = None
    profile_res = None
    try:
        if "spark" in parts:
            harness.log(f"spark: {args.warmup} + {args.reps} repetitions on lake and h")
            spark_res = part_spark(
                os.path.join(tmp, "spark"),
                args.reps,
                args.warmup,
                args.tables,
                args.rows,
                metrics=not args.no_metrics,
                mode=args.server,
            )
            loads.append(harness.load_average())
        if "rest" in parts:
            rest_res = part_rest(
                os.path.join(tmp, "rest"), args.procs, args.seconds, 50 if args.quick else 200
            )
            loads.append(harness.load_average())
        if "profile" in parts:
            harness.log(f"profile: {n_prof} load-tables, {n_prof} commits")
            profile_res = part_profile(os.path.join(tmp, "profile"), n_prof, 25)
            loads.append(harness.load_average())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    took = time.perf_counter() - t_start
    text = report(argv, started, took, tmp, args, spark_res, rest_res, profile_res, loads)
    print(text)
    failed = rest_res is not None and any(r.bad for r in rest_res.runs)
    if not args.no_save:
        suffix = ("-quick" if args.quick else "") + ("-shipped" if args.server == "shipped" else "")
        out = harness.results_path(args.out, f"spark-{started:%Y-%m-%d}{suffix}.md")
        harness.write_results(out, text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
