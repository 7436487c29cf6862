"""Many hosts on one S3 catalog, simulated on this machine (issue 24, item 5).

H simulated hosts (``--hosts``, default 1,2,4,8) of W writer processes each
(``--writers``, default 4) commit to ONE catalog on S3 for T seconds
(``--seconds``, default 30). S3 is a moto server over HTTP in a child process
(tests/s3_requests.py) that holds every request for a uniformly random
20-30 ms (``--latency-ms 20,30``) before answering it, requests in flight
together waiting together: a distance to S3.

**A host.** The writers of one host share what olympia shares between the
processes of a machine: the publish lock (a file in
``<temp dir>/olympia-locks-<uid>/``, spec/transactions.md §3.1) and the
group-commit folder (``/dev/shm/olympia-groups-<uid>/``, §3.2). Each host is
therefore a child command started as ``unshare -m`` with a private tmpfs
mounted on /dev/shm and its own ``TMPDIR``; it runs this module in worker
mode (``--host-worker``), which starts its W writers as fresh processes
(``harness.run_spawned``). Only the mount namespace is new: the network
(127.0.0.1, where moto listens) is shared. Without root (no ``unshare``) the
benchmark says so and exits 2.

**What a writer does**, through the public API only: ``olympia.load_catalog``
of the S3 location (PyIceberg's ``s3.*`` storage options; each process signs
with an access key of its own, ``h<host>w<writer>``, which moto accepts and
which lets the server count requests per process), then, for T seconds,
``begin()``, ``update_table(ns, "t", metadata_location=...)`` on its own
table (one namespace per process), ``commit()``. A ``CommitConflictError`` is
counted by its rule and any other exception by its type (failures), and the
writer goes on with a new transaction.

**Below the public API** is only the start signal: every writer opens the
catalog, waits at its host's barrier, writes a ready file and waits for a
start file that the parent writes once all H x W writers are ready; it holds
the time at which all of them start (one second later, wall clock of this
machine), and each writer stops T seconds after it.

**Lost races** are counted by the S3 server, since nothing public in olympia
reports them: the server's handler of PutObject counts conditional puts
(``If-None-Match: *``) of root files (``.../vn/<version>``: one per attempt
to publish a version) and those it answered ``412 Precondition Failed`` (the
version was taken: a lost race), per access key, so per process and per
host. It also counts every request per access key (requests per commit).
A writer whose transaction another writer of its host published (group
commit) makes no put of its own for it; ``Transaction.published_by_holder``
says so and is counted.

**Reported per run**: aggregate commits/s (all commits over the span from
the first writer's start to the last one's end), commits/s of each host and
the slowest / fastest host ratio, commits per process (min / max), failures,
root puts and lost races, versions gained and transactions per version,
S3 requests per commit, the median commit latency, and the ratio to the mean
of the H = 1 runs. **Load**: the 1-minute load average before and after,
the machine's CPU busy share over the run (/proc/stat, 100 % = every core
busy), the moto server's CPU time as a share of one core (/proc/<pid>/stat),
and the writers' own CPU time: a run that keeps the 2 cores busy measures
the machine, not olympia's waiting on S3.

**Checked after each run** (exit 1 otherwise): the versions gained hold
exactly one transaction per successful commit (``history()``), and every
table holds its process's last update. H values run in the order given and
then reversed (1,2,4,8,8,4,2,1), so that noise of the shared machine falls on
both ends. Nothing asserts on timings.

Issue 24's target: 0 failures, slowest host >= 1/3 of the fastest, aggregate
at H = 8 >= 0.9 x H = 1.

Run from the project root, as root::

    python -m benchmarks.bench_hosts                  # writes results/hosts-<date>.md
    python -m benchmarks.bench_hosts --seconds 10 --hosts 1,2 --no-save
    python -m benchmarks.bench_hosts --hosts 4 --once --trace /tmp/t   # request log in /tmp/t-0.json

``--trace PREFIX`` writes the server's log of each run's requests (arrival,
answer, access key, method, path, status) to ``PREFIX-<run>.json``, for
analysis (rounds per attempt, time between a host's puts, silences).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import olympia

try:
    from benchmarks import bench_txn, harness
except ImportError:  # run as a script: benchmarks/ is on sys.path
    import bench_txn  # type: ignore[no-redef]
    import harness  # type: ignore[no-redef]

if str(harness.PROJECT_ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(harness.PROJECT_ROOT / "tests"))
import s3_requests  # tests/s3_requests.py: moto over HTTP with a latency

location = bench_txn.location
#: The access key of the parent's own requests (set-up and checks).
SETUP_KEY = "bench"
#: How often a waiting writer looks for the start file (seconds).
_POLL = 0.02
#: Seconds between the start file and the common start.
_LEAD = 1.0


def access_key(host: int, w: int) -> str:
    return f"h{host:02d}w{w:02d}"


def writer_ns(host: int, w: int) -> str:
    return f"h{host:02d}w{w:02d}"


def s3_options(endpoint: str, key: str) -> dict[str, str]:
    """PyIceberg's storage options for the moto server, signed with ``key``."""
    return {
        "s3.endpoint": endpoint,
        "s3.region": "us-east-1",
        "s3.access-key-id": key,
        "s3.secret-access-key": "testing",
    }


# --- the S3 server's counters ----------------------------------------------------------

_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/")
#: Requests the server keeps in its trace (``--trace``).
_TRACE_LIMIT = 500_000
_ROOT = re.compile(r"(^|/)vn/[01]+$")


def _key_id(authorization: str | None) -> str:
    m = _CREDENTIAL.search(authorization or "")
    return m.group(1) if m else "?"


def moto_counters(control: Any) -> None:
    """Runs in the moto server's process (``start_moto_process(setup=...)``):
    counts requests, conditional root puts and their 412 answers per access
    key, and the time from each request's arrival (before the simulated
    latency) to its answer, and answers the parent on ``control``:
    ``"reset"`` clears the counts, ``"get"`` returns them (``{"requests":
    {key: n}, "root_puts": {key: n}, "lost": {key: n}, "answer_ms": [p50,
    p90]}``), ``"trace"`` the log of requests."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication
    from moto.s3.exceptions import PreconditionFailed
    from moto.s3.responses import S3Response

    lock = threading.Lock()
    counts: dict[str, Counter[str]] = {
        "requests": Counter(),
        "root_puts": Counter(),
        "lost": Counter(),
    }
    #: (arrived, answered, access key, method, path, status) of each request
    trace: list[tuple[float, float, str, str, str, str]] = []
    put = S3Response.put_object

    def put_object(self: Any, *args: Any, **kwargs: Any) -> Any:
        key = self.parse_key_name()
        if self.headers.get("If-None-Match") != "*" or not _ROOT.search(key):
            return put(self, *args, **kwargs)
        who = _key_id(self.headers.get("Authorization"))
        with lock:
            counts["root_puts"][who] += 1
        try:
            return put(self, *args, **kwargs)
        except PreconditionFailed:
            with lock:
                counts["lost"][who] += 1
            raise

    S3Response.put_object = put_object  # type: ignore[method-assign]
    call = DomainDispatcherApplication.__call__

    def counted(self: Any, environ: Any, start_response: Any) -> Any:
        who = _key_id(environ.get("HTTP_AUTHORIZATION"))
        arrived = time.time()
        with lock:
            counts["requests"][who] += 1

        def respond(status: str, *args: Any) -> Any:
            if len(trace) < _TRACE_LIMIT:
                path = environ.get("PATH_INFO", "")
                trace.append(
                    (arrived, time.time(), who, environ["REQUEST_METHOD"], path, status[:3])
                )
            return start_response(status, *args)

        return call(self, environ, respond)

    DomainDispatcherApplication.__call__ = counted  # type: ignore[method-assign]
    while True:
        message = control.recv()
        with lock:
            if message == "reset":
                for c in counts.values():
                    c.clear()
                trace.clear()
                control.send("ok")
            elif message == "trace":
                control.send(list(trace))
            else:
                answer = sorted(b - a for a, b, who, *_ in trace if who != SETUP_KEY)
                reply: dict[str, Any] = {k: dict(v) for k, v in counts.items()}
                reply["answer_ms"] = [
                    1000 * harness.percentile(answer, q) if answer else float("nan")
                    for q in (0.5, 0.9)
                ]
                reply["mix"] = dict(
                    Counter(f"{m} {st}" for _, _, who, m, _, st in trace if who != SETUP_KEY)
                )
                control.send(reply)


def ask_moto(moto: s3_requests.MotoProcess, message: str) -> Any:
    moto.control.send(message)
    if not moto.control.poll(30):
        raise RuntimeError("the moto server's counter did not answer")
    return moto.control.recv()


# --- the machine ---------------------------------------------------------------------------


def cpu_busy_ticks() -> tuple[int, int]:
    """(busy, total) clock ticks of all CPUs so far (/proc/stat)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (/proc/<pid>/stat)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


# --- a writer (in its host's child processes) ------------------------------------------------


@dataclass
class Writer:
    worker: int
    host: int = 0
    commits: int = 0
    #: failed commits, by CommitConflictError.rule or exception type
    failures: dict[str, int] = field(default_factory=dict)
    first_failure: str = ""
    #: commits that another writer of the host published (group commit)
    by_holder: int = 0
    #: seconds of each successful commit() call
    latencies: list[float] = field(default_factory=list)
    cpu_seconds: float = 0.0
    t_start: float = 0.0
    t_end: float = 0.0
    error: str = ""


@dataclass(frozen=True)
class HostJob:
    host: int
    uri: str
    endpoint: str
    signals: str
    seconds: float


def wait_for_start(signals: str, name: str) -> float:
    """Say this writer is ready; wait for the parent's start file; sleep
    until the common start time it holds, and return it."""
    with open(os.path.join(signals, f"ready-{name}"), "w"):
        pass
    path = os.path.join(signals, "start")
    while not os.path.exists(path):
        time.sleep(_POLL)
    with open(path) as f:
        start_at = float(f.read())
    time.sleep(max(0.0, start_at - time.time()))
    return start_at


def run_writer(job: HostJob, w: int, start: Callable[[], None], res: Writer) -> None:
    """Open the catalog, wait for the common start, commit for ``job.seconds``."""
    res.host = job.host
    ns = writer_ns(job.host, w)
    cat = olympia.load_catalog(job.uri, s3_options(job.endpoint, access_key(job.host, w)))
    _ = cat.version  # the client is built and the catalog read before the start
    start()  # this host's writers are all up
    start_at = wait_for_start(job.signals, ns)
    cpu0 = sum(os.times()[:2])
    res.t_start = time.time()
    end = start_at + job.seconds
    gen = 1
    try:
        while time.time() < end:
            t0 = time.perf_counter()
            try:
                txn = cat.begin()
                txn.update_table(ns, "t", metadata_location=location(ns, "t", gen))
                txn.commit()
            except Exception as exc:
                harness.count_failure(res, exc)
                continue
            res.latencies.append(time.perf_counter() - t0)
            res.by_holder += bool(txn.published_by_holder)
            res.commits += 1
            gen += 1
    finally:
        res.t_end = time.time()
        res.cpu_seconds = sum(os.times()[:2]) - cpu0
        cat.close()


def host_worker(job_file: str, out_file: str, writers: int) -> int:
    """Worker mode: run this host's writers; write their results as JSON."""
    with open(job_file) as f:
        job = HostJob(**json.load(f))
    results = harness.run_spawned(run_writer, Writer, job, writers, job.seconds + 900)
    tmp = out_file + ".tmp"
    with open(tmp, "w") as f:
        json.dump([asdict(r) for r in results], f)
    os.replace(tmp, out_file)
    return 0


# --- one run (in the parent) -----------------------------------------------------------------


@dataclass
class HostsRun:
    label: str
    hosts: int
    writers: int
    run: harness.TimedRun[Writer]
    versions: int = 0
    transactions: int = 0
    root_puts: dict[str, int] = field(default_factory=dict)
    lost: dict[str, int] = field(default_factory=dict)
    requests: dict[str, int] = field(default_factory=dict)
    #: p50 and p90 of the server's time from arrival to answer (ms), writers only
    answer_ms: tuple[float, float] = (float("nan"), float("nan"))
    #: The writers' requests by method and status ("GET 404": n), from the trace
    mix: dict[str, int] = field(default_factory=dict)
    cpu_busy: float = float("nan")
    moto_cpu: float = float("nan")
    wall: float = 0.0

    def host_rates(self) -> list[float]:
        rates = []
        for h in range(self.hosts):
            ws = [w for w in self.run.workers if w.host == h]
            span = max(w.t_end for w in ws) - min(w.t_start for w in ws)
            rates.append(sum(w.commits for w in ws) / span if span > 0 else float("nan"))
        return rates

    def host_sum(self, counts: dict[str, int], h: int) -> int:
        return sum(n for k, n in counts.items() if k.startswith(f"h{h:02d}w"))


def unshare_missing() -> str:
    """Empty if hosts can be simulated here, else why not."""
    if not sys.platform.startswith("linux"):
        return "simulated hosts need Linux mount namespaces"
    if os.geteuid() != 0:
        return "simulated hosts need root (unshare -m and a tmpfs on /dev/shm per host)"
    if shutil.which("unshare") is None:
        return "simulated hosts need the unshare command (util-linux)"
    return ""


def start_host(job: HostJob, writers: int, folder: str) -> tuple[subprocess.Popen[bytes], str]:
    """Start one host: a child under ``unshare -m`` with a private /dev/shm and
    TMPDIR, running this module in worker mode. Returns it and its result file."""
    tmpdir = os.path.join(folder, "tmp")
    os.makedirs(tmpdir, exist_ok=True)
    job_file = os.path.join(folder, "job.json")
    with open(job_file, "w") as f:
        json.dump(asdict(job), f)
    out_file = os.path.join(folder, "result.json")
    env = dict(os.environ, TMPDIR=tmpdir)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(harness.PROJECT_ROOT), *filter(None, [env.get("PYTHONPATH")])]
    )
    script = 'mount -t tmpfs -o mode=1777,size=256m tmpfs /dev/shm && exec "$@"'
    cmd = [
        "unshare", "-m", "sh", "-c", script, "sh",
        sys.executable, "-m", "benchmarks.bench_hosts",
        "--host-worker", job_file, "--host-out", out_file, "--writers", str(writers),
    ]  # fmt: skip
    with open(os.path.join(folder, "stderr.txt"), "wb") as err:
        proc = subprocess.Popen(cmd, cwd=harness.PROJECT_ROOT, env=env, stderr=err)
    return proc, out_file


def _host_error(folder: str) -> str:
    try:
        with open(os.path.join(folder, "stderr.txt")) as f:
            return f.read()[-2000:]
    except OSError:
        return "(no stderr)"


def setup_catalog(uri: str, endpoint: str, hosts: int, writers: int) -> int:
    with olympia.create_catalog(uri, s3_options(endpoint, SETUP_KEY)) as cat:
        txn = cat.begin()
        for h in range(hosts):
            for w in range(writers):
                ns = writer_ns(h, w)
                txn.create_namespace(ns)
                txn.create_table(ns, "t", metadata_location=location(ns, "t", 0))
        return txn.commit()


def one_run(
    label: str,
    moto: s3_requests.MotoProcess,
    tmp: str,
    k: int,
    hosts: int,
    writers: int,
    seconds: float,
    trace: str | None = None,
) -> HostsRun:
    uri = moto.uri(f"hosts-{k}")
    base = setup_catalog(uri, moto.endpoint_url, hosts, writers)
    signals = os.path.join(tmp, f"run{k}", "signals")
    os.makedirs(signals)
    harness.log(f"  {label}: {hosts} host(s) x {writers} writers for {seconds:.0f} s")
    started = [
        start_host(
            HostJob(h, uri, moto.endpoint_url, signals, seconds),
            writers,
            os.path.join(tmp, f"run{k}", f"host{h}"),
        )
        for h in range(hosts)
    ]
    try:
        deadline = time.monotonic() + 600
        while len([n for n in os.listdir(signals) if n.startswith("ready-")]) < hosts * writers:
            for h, (proc, _) in enumerate(started):
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"host {h} ended before the start:\n"
                        + _host_error(os.path.join(tmp, f"run{k}", f"host{h}"))
                    )
            if time.monotonic() > deadline:
                raise RuntimeError("the writers were not ready within 600 s")
            time.sleep(0.1)
        ask_moto(moto, "reset")
        load0 = harness.load_average()
        busy0, total0 = cpu_busy_ticks()
        moto0 = process_cpu_seconds(moto.process.pid)
        start_at = time.time() + _LEAD
        with open(os.path.join(signals, "start.tmp"), "w") as f:
            f.write(repr(start_at))
        os.replace(os.path.join(signals, "start.tmp"), os.path.join(signals, "start"))
        for h, (proc, _) in enumerate(started):
            if proc.wait(timeout=seconds + 900) != 0:
                raise RuntimeError(
                    f"host {h} failed:\n" + _host_error(os.path.join(tmp, f"run{k}", f"host{h}"))
                )
        wall = time.time() - start_at
        busy1, total1 = cpu_busy_ticks()
        moto1 = process_cpu_seconds(moto.process.pid)
        counts = ask_moto(moto, "get")
        if trace:
            with open(f"{trace}-{k}.json", "w") as f:
                json.dump({"start": start_at, "requests": ask_moto(moto, "trace")}, f)
        load1 = harness.load_average()
    finally:
        for proc, _ in started:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    workers: list[Writer] = []
    for h, (_, out_file) in enumerate(started):
        with open(out_file) as f:
            for d in json.load(f):
                d["worker"] = h * writers + d["worker"]
                workers.append(Writer(**d))
    result = HostsRun(
        label,
        hosts,
        writers,
        harness.TimedRun(label, "olympia", hosts * writers, workers, (load0, load1)),
        root_puts=counts["root_puts"],
        lost=counts["lost"],
        requests=counts["requests"],
        answer_ms=tuple(counts["answer_ms"]),
        mix=counts.get("mix", {}),
        cpu_busy=(busy1 - busy0) / (total1 - total0) if total1 > total0 else float("nan"),
        moto_cpu=(moto1 - moto0) / wall if wall > 0 else float("nan"),
        wall=wall,
    )
    check(result, uri, moto.endpoint_url, base)
    r = result.run
    harness.log(
        f"    {r.rate:.1f} commits/s, hosts {[f'{x:.1f}' for x in result.host_rates()]}, "
        f"failures {dict(r.failures)}, lost races {sum(result.lost.values())} of "
        f"{sum(result.root_puts.values())} root puts, cpu busy {result.cpu_busy:.0%}, "
        f"moto {result.moto_cpu:.0%} of a core" + (f"; PROBLEMS {r.problems}" if r.problems else "")
    )
    return result


def check(result: HostsRun, uri: str, endpoint: str, base: int) -> None:
    """One transaction per commit in the versions gained; every table holds
    its writer's last update."""
    run = result.run
    with olympia.load_catalog(uri, s3_options(endpoint, SETUP_KEY)) as cat:
        held = sum(len(i.transactions) for i in cat.history(since=base + 1))
        result.versions = cat.version - base
        result.transactions = held
        if held != run.commits:
            run.problems.append(
                f"catalog gained {result.versions} versions holding {held} transactions "
                f"for {run.commits} commits"
            )
        view = cat.latest()
        for w in run.workers:
            ns = writer_ns(w.host, w.worker % result.writers)
            if w.commits and view.describe_table(ns, "t").metadata_location != location(
                ns, "t", w.commits
            ):
                run.problems.append(f"table of process {ns} lost its last update")
    if not run.problems:
        run.checks.append(
            f"{result.versions} versions hold {held} transactions = commits; "
            "every table holds its process's last update"
        )
    firsts = [w.first_failure for w in run.workers if w.first_failure]
    if firsts:
        run.checks.append(f"first failure: {firsts[0]}")


# --- the report --------------------------------------------------------------------------------


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def report(runs: Sequence[HostsRun], seconds: float, latency: tuple[float, float]) -> str:
    ones = [r.run.rate for r in runs if r.hosts == 1]
    one = _mean(ones) if ones else None
    rows = []
    host_rows = []
    for r in runs:
        t = r.run
        rates = r.host_rates()
        lost = sum(r.lost.values())
        puts = sum(r.root_puts.values())
        requests = sum(v for k, v in r.requests.items() if k != SETUP_KEY)
        latencies = [x for w in t.workers for x in w.latencies]
        rows.append(
            [
                t.label,
                f"{t.load[0]:.1f} -> {t.load[1]:.1f}",
                f"{r.cpu_busy:.0%}",
                f"{r.moto_cpu:.0%}",
                f"{r.answer_ms[0]:.0f} / {r.answer_ms[1]:.0f}",
                f"{sum(w.cpu_seconds for w in t.workers) / r.wall:.2f}" if r.wall else "-",
                f"{t.rate:,.1f}",
                harness.fmt_ratio(t.rate, one),
                harness.fmt_ratio(min(rates), max(rates)),
                f"{min(t.counts)} / {max(t.counts)}",
                ", ".join(f"{k} {v}" for k, v in sorted(t.failures.items())) or "0",
                f"{lost} / {puts}",
                f"{r.versions} / {r.transactions / r.versions:.2f}" if r.versions else "-",
                f"{sum(w.by_holder for w in t.workers)}",
                f"{requests / t.commits:.1f}" if t.commits else "-",
                f"{harness.median(latencies) * 1000:.0f}",
                "; ".join(t.checks + [f"**{x}**" for x in t.problems]) or "-",
            ]
        )
        for h, rate in enumerate(rates):
            ws = [w for w in t.workers if w.host == h]
            commits = sum(w.commits for w in ws)
            host_rows.append(
                [
                    t.label,
                    str(h),
                    f"{rate:,.1f}",
                    str([w.commits for w in ws]),
                    str(sum(w.by_holder for w in ws)),
                    f"{r.host_sum(r.lost, h)} / {r.host_sum(r.root_puts, h)}",
                    f"{r.host_sum(r.requests, h) / commits:.1f}" if commits else "-",
                ]
            )
    by_h: dict[int, list[HostsRun]] = {}
    for r in runs:
        by_h.setdefault(r.hosts, []).append(r)
    summary = []
    for h, rs in sorted(by_h.items()):
        m = _mean([r.run.rate for r in rs])
        per_answer = _mean([r.run.rate * r.answer_ms[0] / 1000 for r in rs])
        worst = min(min(r.host_rates()) / max(r.host_rates()) for r in rs)
        fails = sum(sum(r.run.failures.values()) for r in rs)
        lost = sum(sum(r.lost.values()) for r in rs)
        commits = sum(r.run.commits for r in rs)
        summary.append(
            f"H={h}: {m:,.1f} commits/s ({harness.fmt_ratio(m, one)} of H=1), slowest/fastest "
            f"host {worst:.2f} (worst run), {fails} failures, "
            f"{lost / commits if commits else float('nan'):.2f} lost races per commit, "
            f"{per_answer:.2f} commits per median S3 answer time"
        )
    lo, hi = latency
    return "\n".join(
        [
            "### H hosts of W writers on one S3 catalog\n",
            f"Each process updates its own table for {seconds:.0f} s; S3 is moto over HTTP with "
            f"{lo * 1000:.0f}-{hi * 1000:.0f} ms per request. *load*: 1-minute load average before "
            "-> after; *CPU busy*: all cores over the run (100 % = both busy); *moto*: the S3 "
            "server's CPU time per second (100 % = one core); *S3 answer ms*: the server's time from "
            "a request's arrival to its answer, simulated latency included (the machine adds what "
            "is above 20-30 ms); *writers CPU*: the writers' CPU "
            "seconds per second; */ H=1*: against the mean of the H = 1 runs; *hosts*: "
            "slowest / fastest host's commits/s; *lost / puts*: root puts answered 412 / "
            "conditional root puts (counted by the server); *versions / txn per version*: "
            "versions gained and transactions each holds; *by holder*: commits published by "
            "another writer of the host (group commit); *req / commit*: S3 requests of the "
            "writers per commit; *p50 ms*: median commit() latency. *Commits per median S3 "
            "answer time* (in the means below): commits/s times the p50 answer time, what the "
            "protocol does with each of the server's answer times, apart from how long the "
            "server takes to answer.\n",
            harness.md_table(
                [
                    "run",
                    "load",
                    "CPU busy",
                    "moto",
                    "S3 answer ms p50 / p90",
                    "writers CPU",
                    "commits/s",
                    "/ H=1",
                    "hosts",
                    "per process min / max",
                    "failures",
                    "lost / puts",
                    "versions / txn per version",
                    "by holder",
                    "req / commit",
                    "p50 ms",
                    "checks",
                ],
                rows,
            ),
            "\nMeans per H: " + "; ".join(summary) + ".\n",
            "#### The writers' S3 requests per commit, by method and answer\n",
            "From the server's log of requests (the first "
            f"{_TRACE_LIMIT:,} of a run). *GET 404*: a root asked for that did not exist yet (a "
            "probe for the latest version); *GET 200*: a root or other file read; *PUT 412*: a "
            "lost race.\n",
            _mix_table(runs),
            "",
            "#### Per host\n",
            harness.md_table(
                [
                    "run",
                    "host",
                    "commits/s",
                    "commits per process",
                    "by holder",
                    "lost / puts",
                    "req / commit",
                ],
                host_rows,
            ),
            "",
        ]
    )


def _mix_table(runs: Sequence[HostsRun]) -> str:
    kinds = sorted({k for r in runs for k in r.mix}, key=lambda k: (k.split()[0], k))
    rows = []
    for r in runs:
        logged = sum(r.mix.values())
        commits: float = r.run.commits
        if logged >= _TRACE_LIMIT:  # the log stopped: its share of the run's commits
            commits *= logged / max(1, sum(r.requests.values()))
        rows.append(
            [r.label]
            + [f"{r.mix.get(k, 0) / commits:.1f}" if commits else "-" for k in kinds]
            + [f"{logged / commits:.1f}" if commits else "-"]
        )
    return harness.md_table(["run", *kinds, "all"], rows)


def target_check(runs: Sequence[HostsRun]) -> list[str]:
    """Issue 24's target, one line per condition."""
    lines = []
    fails = sum(sum(r.run.failures.values()) for r in runs)
    lines.append(f"0 failures: {'met' if not fails else f'MISSED ({fails} failures)'}")
    worst = min((min(r.host_rates()) / max(r.host_rates()), r.label) for r in runs)
    lines.append(
        f"slowest host >= 1/3 of the fastest in every run: "
        f"{'met' if worst[0] >= 1 / 3 else 'MISSED'} (worst {worst[0]:.2f}, {worst[1]})"
    )
    ones = [r.run.rate for r in runs if r.hosts == 1]
    top = max(r.hosts for r in runs)
    tops = [r.run.rate for r in runs if r.hosts == top]
    if ones and top > 1:
        ratio = _mean(tops) / _mean(ones)
        lines.append(
            f"aggregate at H={top} >= 0.9 x H=1: {'met' if ratio >= 0.9 else 'MISSED'} "
            f"({_mean(tops):,.1f} / {_mean(ones):,.1f} = {ratio:.2f})"
        )
    return lines


# --- the command line -----------------------------------------------------------------------------


def _ints(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers: {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"counts must be positive: {text!r}")
    return values


def _positive(text: str) -> int:
    (value,) = _ints(text) if "," not in text else (0,)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer: {text!r}")
    return value


def _latency(text: str) -> tuple[float, float]:
    try:
        lo, hi = (float(x) / 1000 for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LOW,HIGH in ms: {text!r}") from None
    if not 0 <= lo <= hi:
        raise argparse.ArgumentTypeError(f"need 0 <= LOW <= HIGH: {text!r}")
    return lo, hi


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--hosts", type=_ints, default=[1, 2, 4, 8], help="H values (1,2,4,8)")
    parser.add_argument(
        "--writers", type=_positive, default=4, help="writer processes per host (4)"
    )
    parser.add_argument("--seconds", type=float, default=30.0, help="seconds per run (30)")
    parser.add_argument(
        "--latency-ms", type=_latency, default=(0.020, 0.030), help="S3 latency LOW,HIGH (20,30)"
    )
    parser.add_argument(
        "--trace",
        metavar="PREFIX",
        help="write the server's request log of run k to PREFIX-k.json (for analysis)",
    )
    parser.add_argument("--once", action="store_true", help="each H once, not there and back")
    parser.add_argument("--host-worker", help=argparse.SUPPRESS)
    parser.add_argument("--host-out", help=argparse.SUPPRESS)
    harness.add_common_options(parser, "hosts-<date>.md", peer=False)
    args = parser.parse_args(argv)
    if args.host_worker:
        return host_worker(args.host_worker, args.host_out, args.writers)
    why = unshare_missing()
    if why:
        print(f"bench_hosts: {why}; nothing was run", file=sys.stderr)
        return 2
    base_tmp = tempfile.mkdtemp(prefix="olympia-bench-hosts-", dir=args.tmp)
    order = list(args.hosts) if args.once else list(args.hosts) + list(reversed(args.hosts))
    started = datetime.datetime.now(datetime.UTC)
    harness.log("starting a moto S3 server in a child process")
    moto = s3_requests.start_moto_process(latency=args.latency_ms, setup=moto_counters)
    runs: list[HostsRun] = []
    try:
        ask_moto(moto, "reset")  # the counters are in place
        seen: Counter[int] = Counter()
        for k, h in enumerate(order):
            seen[h] += 1
            label = f"H={h} (run {seen[h]})"
            runs.append(
                one_run(label, moto, base_tmp, k, h, args.writers, args.seconds, args.trace)
            )
    finally:
        moto.stop()
        shutil.rmtree(base_tmp, ignore_errors=True)
    finished = datetime.datetime.now(datetime.UTC)
    problems = [f"{r.label}: {x}" for r in runs for x in r.run.problems]
    targets = target_check(runs)
    text = "\n".join(
        [report(runs, args.seconds, args.latency_ms), "Target (issue 24 item 5):\n"]
        + [f"* {x}" for x in targets]
    )
    print(text)
    if not args.no_save:
        today = started.date().isoformat()
        out = harness.results_path(args.out, f"hosts-{today}.md")
        machine = harness.machine_info(os.path.dirname(base_tmp))
        lines = [
            f"# Many hosts on one S3 catalog (simulated), {today}",
            "",
            f"Command (from the project root, as root): "
            f"`{harness.command_line('bench_hosts', argv)}`",
            "",
            f"Started {started:%Y-%m-%d %H:%M} UTC, took "
            f"{(finished - started).total_seconds():.0f} s; 1-minute load average at the end "
            f"{harness.load_average():.1f}. Each host: `unshare -m` with a private tmpfs on "
            "/dev/shm and its own TMPDIR; the run order is the H values there and back.",
            "",
            harness.md_table(["machine", ""], [[k, v] for k, v in machine]),
            "",
            text,
        ]
        harness.save_report(out, lines, problems)
    return harness.exit_code(problems)


if __name__ == "__main__":
    sys.exit(main())
