"""Transaction benchmark: commits per second and commit latency, against a SQL catalog peer.

Four measurements, each on a local-directory olympia catalog (default
definition) and on the peer, PyIceberg's ``SqlCatalog`` on SQLite, in the same
run, reported with the olympia/peer ratio:

1. one writer: N sequential single-object commits;
2. 8 processes on disjoint objects (each process commits to its own object):
   aggregate commits/s. No commit may fail: the script checks that every
   commit returned, that the new versions hold exactly one transaction per
   commit (several may share a version: group commit), each in the version
   its ``commit()`` returned, and that every object holds its last write; it exits non-zero
   otherwise (after writing the report);
3. 8 processes on one object: each does read-modify-write (read, then write
   the incremented value) and starts a fresh transaction when its commit
   raises ``CommitConflictError``; successful commits/s, conflicts, and a
   check that no increment was lost;
4. commit latency against catalog size: catalogs of 10^3, 10^4, 10^5 tables
   (olympia: created in one transaction; peer: the same rows bulk-inserted
   into SqlCatalog's tables), then the median / p90 latency of single-object
   commits, measured in a fresh process.

The single-object commit is measured on two kinds of object:

* namespace properties: olympia ``alter_namespace(ns, set={...})`` in a
  SNAPSHOT transaction; peer ``SqlCatalog.update_namespace_properties``. The
  peer has no compare-and-swap for namespace properties, so its
  read-modify-write on one namespace is a blind write that can lose updates
  (the report counts them);
* a table's metadata pointer: olympia ``update_table(ns, t,
  metadata_location=...)`` in a SNAPSHOT transaction (after ``describe_table``
  in the read-modify-write case); peer: the SQL that
  ``SqlCatalog.commit_table`` runs, on its engine and ORM model: the SELECT of
  ``load_table``, then ``UPDATE ... WHERE metadata_location = <current>`` (a
  compare-and-swap; 0 rows matched is a conflict) and COMMIT, without reading
  or writing Iceberg metadata.json files (olympia writes none either).

Olympia's retries inside one commit (a lost race for the next version,
rebased on the new latest version) are counted by wrapping the store's
``commit`` method of each process's catalog: every ``version-taken`` error is
one lost race.

Nothing here asserts on timings; this is a measurement, not a test.

Run from the project root::

    python -m benchmarks.bench_txn            # full run, writes benchmarks/results/txn-<date>.md
    python -m benchmarks.bench_txn --quick    # small smoke run (writes txn-<date>-quick.md)
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import olympia

try:
    from benchmarks import harness
except ImportError:  # run as a script: benchmarks/ is on sys.path
    import harness  # type: ignore[no-redef]

PEER_NAME = harness.PEER_NAME
N_NAMESPACES = 100
SHARED_NS = "shared"
SHARED_TABLE = "t_shared"
WORKER_TIMEOUT_S = 1800.0


# --- names and values -------------------------------------------------------------


def namespace_of(j: int) -> str:
    return f"ns_{j % N_NAMESPACES:03d}"


def table_name(j: int) -> str:
    return f"tbl_{j:08d}"


def worker_namespace(w: int) -> str:
    return f"w{w:02d}"


def worker_table(w: int) -> str:
    return f"t{w:02d}"


def location(ns: str, name: str, generation: int) -> str:
    """An Iceberg-like metadata.json location whose generation can be read back."""
    return f"s3://wh/{ns}/{name}/metadata/{generation:05d}-0f3a9c1e.metadata.json"


_GEN = re.compile(r"/metadata/(\d+)-[0-9a-f]+\.metadata\.json$")


def generation_of(loc: str) -> int:
    m = _GEN.search(loc)
    if m is None:
        raise RuntimeError(f"unexpected metadata location {loc!r}")
    return int(m.group(1))


# --- results ----------------------------------------------------------------------


@dataclass
class WorkerResult:
    """What one process did in one scenario."""

    worker: int
    commits: int = 0
    #: errors other than conflicts (each one a failed commit, then retried)
    failures: list[str] = field(default_factory=list)
    #: CommitConflictError by rule (olympia) or CAS misses ("cas", peer)
    conflicts: dict[str, int] = field(default_factory=dict)
    #: olympia: lost races for the next version, rebased and retried inside commit()
    lost_races: int = 0
    #: olympia: most publish attempts one commit() needed
    max_attempts: int = 0
    versions: list[int] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    t_start: float = 0.0
    t_end: float = 0.0
    timed_out: bool = False
    error: str = ""


@dataclass
class Run:
    """One scenario on one system, all processes together."""

    system: str
    scenario: str
    repeat: int
    workers: list[WorkerResult]
    #: 1-minute load average before and after the run (other work on the machine)
    load: tuple[float, float] = (0.0, 0.0)
    checks: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def commits(self) -> int:
        return sum(w.commits for w in self.workers)

    @property
    def elapsed(self) -> float:
        return max(w.t_end for w in self.workers) - min(w.t_start for w in self.workers)

    @property
    def rate(self) -> float:
        return self.commits / self.elapsed if self.elapsed > 0 else float("nan")

    @property
    def failures(self) -> int:
        return sum(len(w.failures) for w in self.workers)

    @property
    def conflicts(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for w in self.workers:
            total.update(w.conflicts)
        return total

    @property
    def lost_races(self) -> int:
        return sum(w.lost_races for w in self.workers)

    @property
    def max_attempts(self) -> int:
        return max((w.max_attempts for w in self.workers), default=0)


@dataclass
class SizeResult:
    n: int
    olympia_create_s: float = 0.0
    olympia_create_build_s: float = 0.0
    olympia_root_bytes: int = 0
    olympia_height: int = 0
    olympia_table_s: list[float] = field(default_factory=list)
    olympia_ns_s: list[float] = field(default_factory=list)
    peer_insert_s: float = 0.0
    peer_table_s: list[float] = field(default_factory=list)
    peer_ns_s: list[float] = field(default_factory=list)


# --- olympia side -----------------------------------------------------------------


class CommitProbe:
    """Counts the publish attempts of a catalog's commits by wrapping its
    store's ``commit`` (an instance attribute shadows the method; the
    transaction calls ``store.commit`` once per attempt)."""

    def __init__(self, cat: olympia.Catalog) -> None:
        self.calls = 0
        self.lost = 0
        store = cat.store
        original = store.commit

        def commit(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            try:
                return original(*args, **kwargs)
            except olympia.CommitConflictError as exc:
                if exc.rule == "version-taken":
                    self.lost += 1
                raise

        store.commit = commit  # type: ignore[method-assign]


def olympia_alter(cat: olympia.Catalog, ns: str, value: int) -> int:
    txn = cat.begin("snapshot")
    txn.alter_namespace(ns, set={"seq": str(value)})
    return txn.commit()


def olympia_update(cat: olympia.Catalog, ns: str, name: str, generation: int) -> int:
    txn = cat.begin("snapshot")
    txn.update_table(ns, name, metadata_location=location(ns, name, generation))
    return txn.commit()


def olympia_rmw_namespace(cat: olympia.Catalog) -> int:
    """Read the shared counter and write it incremented, in one SNAPSHOT transaction."""
    txn = cat.begin("snapshot")
    current = int(txn.describe_namespace(SHARED_NS).properties["counter"])
    txn.alter_namespace(SHARED_NS, set={"counter": str(current + 1)})
    return txn.commit()


def olympia_rmw_table(cat: olympia.Catalog) -> int:
    """Read the shared table's pointer and move it to the next generation."""
    txn = cat.begin("snapshot")
    current = generation_of(txn.describe_table(SHARED_NS, SHARED_TABLE).metadata_location)
    txn.update_table(
        SHARED_NS, SHARED_TABLE, metadata_location=location(SHARED_NS, SHARED_TABLE, current + 1)
    )
    return txn.commit()


def olympia_setup(uri: str, workers: int) -> None:
    """Namespaces (and one table each) for the worker processes and the shared object."""
    cat = olympia.create_catalog(uri)
    with cat.transaction() as txn:
        for w in range(workers):
            ns = worker_namespace(w)
            txn.create_namespace(ns, {"seq": "-1"})
            txn.create_table(ns, worker_table(w), metadata_location=location(ns, "t", 0))
        txn.create_namespace(SHARED_NS, {"counter": "0"})
        txn.create_table(
            SHARED_NS, SHARED_TABLE, metadata_location=location(SHARED_NS, SHARED_TABLE, 0)
        )
    cat.close()


# --- peer side: PyIceberg SqlCatalog on SQLite ---------------------------------------


class Peer:
    """A SqlCatalog on a SQLite file, and the commit operations we compare."""

    def __init__(self, folder: str) -> None:
        self.db_path, warehouse = harness.peer_paths(folder)
        self.catalog = harness.sql_catalog(self.db_path, warehouse)

    def close(self) -> None:
        self.catalog.engine.dispose()

    def alter(self, ns: str, value: int) -> None:
        self.catalog.update_namespace_properties(ns, updates={"seq": str(value)})

    def rmw_namespace(self) -> None:
        """Read then blindly write the shared counter (no CAS for namespace properties)."""
        current = int(self.catalog.load_namespace_properties(SHARED_NS)["counter"])
        self.catalog.update_namespace_properties(SHARED_NS, updates={"counter": str(current + 1)})

    def _where(self, ns: str, name: str) -> Any:
        from pyiceberg.catalog.sql import IcebergTables

        return (
            (IcebergTables.catalog_name == PEER_NAME)
            & (IcebergTables.table_namespace == ns)
            & (IcebergTables.table_name == name)
        )

    def current_location(self, ns: str, name: str) -> str:
        """The SELECT of SqlCatalog.load_table (without reading metadata.json)."""
        from pyiceberg.catalog.sql import IcebergTables
        from sqlalchemy import select
        from sqlalchemy.orm import Session

        with Session(self.catalog.engine) as session:
            row = session.scalar(select(IcebergTables).where(self._where(ns, name)))
            if row is None:
                raise RuntimeError(f"peer table {ns}.{name} not found")
            return str(row.metadata_location)

    def cas(self, ns: str, name: str, current: str, new: str) -> bool:
        """The UPDATE of SqlCatalog.commit_table; False when another writer moved the row."""
        from pyiceberg.catalog.sql import IcebergTables
        from sqlalchemy import update
        from sqlalchemy.orm import Session

        with Session(self.catalog.engine) as session:
            result = session.execute(
                update(IcebergTables)
                .where(self._where(ns, name), IcebergTables.metadata_location == current)
                .values(metadata_location=new, previous_metadata_location=current)
            )
            if result.rowcount < 1:  # type: ignore[attr-defined]
                session.rollback()
                return False
            session.commit()
            return True

    def update(self, ns: str, name: str, generation: int) -> bool:
        current = self.current_location(ns, name)
        return self.cas(ns, name, current, location(ns, name, generation))

    def rmw_table(self) -> bool:
        current = self.current_location(SHARED_NS, SHARED_TABLE)
        new = location(SHARED_NS, SHARED_TABLE, generation_of(current) + 1)
        return self.cas(SHARED_NS, SHARED_TABLE, current, new)


def peer_setup(folder: str, workers: int) -> None:
    peer = Peer(folder)
    cat = peer.catalog
    for w in range(workers):
        ns = worker_namespace(w)
        cat.create_namespace(ns, {"seq": "-1"})
    cat.create_namespace(SHARED_NS, {"counter": "0"})
    rows: list[harness.TableRow] = [
        (
            PEER_NAME,
            worker_namespace(w),
            worker_table(w),
            location(worker_namespace(w), "t", 0),
            None,
        )
        for w in range(workers)
    ]
    rows.append((PEER_NAME, SHARED_NS, SHARED_TABLE, location(SHARED_NS, SHARED_TABLE, 0), None))
    peer.close()
    harness.bulk_insert(peer.db_path, [], rows)


# --- the worker processes -----------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """What one worker process runs: ``system`` x ``op`` for ``commits`` successes."""

    system: str  # "olympia" or "peer"
    op: str  # "alter", "update", "rmw_namespace", "rmw_table"
    location: str  # olympia catalog folder, or the peer's folder
    commits: int
    deadline_s: float


def _one(job: Job, w: int, handle: Any, i: int) -> tuple[bool, int | None]:
    """One commit attempt: (succeeded, olympia version or None). A conflict
    raises CommitConflictError (olympia) or returns False (peer CAS miss)."""
    if job.system == "olympia":
        if job.op == "alter":
            return True, olympia_alter(handle, worker_namespace(w), i)
        if job.op == "update":
            return True, olympia_update(handle, worker_namespace(w), worker_table(w), i + 1)
        if job.op == "rmw_namespace":
            return True, olympia_rmw_namespace(handle)
        return True, olympia_rmw_table(handle)
    if job.op == "alter":
        handle.alter(worker_namespace(w), i)
        return True, None
    if job.op == "update":
        return handle.update(worker_namespace(w), worker_table(w), i + 1), None
    if job.op == "rmw_namespace":
        handle.rmw_namespace()
        return True, None
    return handle.rmw_table(), None


def run_job(job: Job, w: int, start: Callable[[], None], res: WorkerResult) -> None:
    """Open the catalog, wait for ``start``, then commit until ``job.commits`` succeeded."""
    probe: CommitProbe | None = None
    handle: Any
    if job.system == "olympia":
        handle = olympia.load_catalog(job.location)
        probe = CommitProbe(handle)
    else:
        handle = Peer(job.location)
    start()
    res.t_start = time.time()
    deadline = time.monotonic() + job.deadline_s
    i = 0
    try:
        while res.commits < job.commits:
            if time.monotonic() > deadline:
                res.timed_out = True
                break
            calls = probe.calls if probe else 0
            t0 = time.perf_counter()
            try:
                ok, version = _one(job, w, handle, i)
            except olympia.CommitConflictError as exc:
                rule = exc.rule or "unknown"
                res.conflicts[rule] = res.conflicts.get(rule, 0) + 1
                continue
            except Exception as exc:  # a failed commit: recorded, then retried
                res.failures.append(f"{type(exc).__name__}: {exc}"[:300])
                continue
            finally:
                if probe:
                    res.max_attempts = max(res.max_attempts, probe.calls - calls)
            if not ok:
                res.conflicts["cas"] = res.conflicts.get("cas", 0) + 1
                continue
            res.latencies.append(time.perf_counter() - t0)
            if version is not None:
                res.versions.append(version)
            res.commits += 1
            i += 1
    finally:
        res.t_end = time.time()
        if probe:
            res.lost_races = probe.lost
            handle.close()
        else:
            handle.close()


def run_processes(job: Job, procs: int) -> list[WorkerResult]:
    """Run ``job`` in ``procs`` fresh processes that start committing together."""
    return harness.run_spawned(run_job, WorkerResult, job, procs, job.deadline_s + 660)


def run_in_process(job: Job) -> WorkerResult:
    """One writer, in this process."""
    res = WorkerResult(worker=0)
    run_job(job, 0, lambda: None, res)
    return res


# --- checking the outcome -------------------------------------------------------------


def check_olympia(run: Run, uri: str, begin_version: int, expect: dict[str, Any]) -> None:
    """Every commit is in exactly one version (group commit may put several
    in one), and the objects hold what was written last."""
    cat = olympia.load_catalog(uri)
    try:
        returned = Counter(v for w in run.workers for v in w.versions)
        end = cat.version
        total = run.commits
        held = Counter(
            {i.version: len(i.transactions) for i in cat.history(since=begin_version + 1)}
        )
        if sum(held.values()) != total:
            run.problems.append(
                f"catalog advanced {end - begin_version} versions holding "
                f"{sum(held.values())} transactions for {total} commits"
            )
        if returned != held:
            run.problems.append(
                "the versions returned by commit() do not match the transactions the versions hold"
            )
        else:
            run.checks.append(
                f"{total} commits in {end - begin_version} new versions "
                f"({begin_version + 1}..{end}), each commit in the version it returned"
            )
        view = cat.latest()
        if expect.get("kind") == "alter":
            for w, want in expect["last"].items():
                got = view.describe_namespace(worker_namespace(w)).properties["seq"]
                if got != str(want):
                    run.problems.append(f"namespace {worker_namespace(w)} seq={got}, want {want}")
            run.checks.append("every namespace holds its process's last value")
        elif expect.get("kind") == "update":
            for w, want in expect["last"].items():
                loc = view.describe_table(worker_namespace(w), worker_table(w)).metadata_location
                if generation_of(loc) != want:
                    run.problems.append(f"table {worker_table(w)} at {loc}, want gen {want}")
            run.checks.append("every table points at its process's last generation")
        elif expect.get("kind") == "rmw_namespace":
            counter = int(view.describe_namespace(SHARED_NS).properties["counter"])
            want = expect["start"] + total
            if counter != want:
                run.problems.append(
                    f"counter is {counter} after {total} increments from "
                    f"{expect['start']}: {want - counter} increments lost"
                )
            else:
                run.checks.append(f"counter {expect['start']} -> {counter}: no increment lost")
        elif expect.get("kind") == "rmw_table":
            loc = view.describe_table(SHARED_NS, SHARED_TABLE).metadata_location
            gen, want = generation_of(loc), expect["start"] + total
            if gen != want:
                run.problems.append(f"pointer at generation {gen}, want {want}: lost updates")
            else:
                run.checks.append(f"pointer generation {expect['start']} -> {gen}: none lost")
    finally:
        cat.close()


def check_peer(run: Run, folder: str, expect: dict[str, Any]) -> None:
    peer = Peer(folder)
    try:
        total = run.commits
        cat = peer.catalog
        if expect.get("kind") == "alter":
            bad = [
                w
                for w, want in expect["last"].items()
                if cat.load_namespace_properties(worker_namespace(w))["seq"] != str(want)
            ]
            if bad:
                run.problems.append(f"namespaces of workers {bad} do not hold their last value")
            else:
                run.checks.append("every namespace holds its process's last value")
        elif expect.get("kind") == "update":
            bad = [
                w
                for w, want in expect["last"].items()
                if generation_of(peer.current_location(worker_namespace(w), worker_table(w)))
                != want
            ]
            if bad:
                run.problems.append(f"tables of workers {bad} do not hold their last generation")
            else:
                run.checks.append("every table points at its process's last generation")
        elif expect.get("kind") == "rmw_namespace":
            got = int(cat.load_namespace_properties(SHARED_NS)["counter"])
            want = expect["start"] + total
            lost = want - got
            run.checks.append(
                f"counter {expect['start']} -> {got} after {total} increments: {lost} lost "
                f"(blind write, no CAS)"
            )
            run.notes.append(f"lost updates: {lost}")
        elif expect.get("kind") == "rmw_table":
            got = generation_of(peer.current_location(SHARED_NS, SHARED_TABLE))
            want = expect["start"] + total
            if got != want:
                run.problems.append(f"pointer at generation {got}, want {want}: lost updates")
            else:
                run.checks.append(f"pointer generation {expect['start']} -> {got}: none lost")
    finally:
        peer.close()


def read_shared_start(system: str, where: str, kind: str) -> int:
    if system == "olympia":
        cat = olympia.load_catalog(where)
        try:
            view = cat.latest()
            if kind == "rmw_namespace":
                return int(view.describe_namespace(SHARED_NS).properties["counter"])
            return generation_of(view.describe_table(SHARED_NS, SHARED_TABLE).metadata_location)
        finally:
            cat.close()
    peer = Peer(where)
    try:
        if kind == "rmw_namespace":
            return int(peer.catalog.load_namespace_properties(SHARED_NS)["counter"])
        return generation_of(peer.current_location(SHARED_NS, SHARED_TABLE))
    finally:
        peer.close()


def scenario(
    system: str,
    op: str,
    where: str,
    procs: int,
    commits: int,
    deadline_s: float,
    label: str,
    repeat: int,
) -> Run:
    """Run one scenario on one system and check its outcome."""
    begin_version = 0
    if system == "olympia":
        with olympia.load_catalog(where) as cat:
            begin_version = cat.version
    expect: dict[str, Any] = {"kind": op}
    if op.startswith("rmw"):
        expect["start"] = read_shared_start(system, where, op)
    else:  # worker w wrote values 0..commits-1 (alter) or generations 1..commits (update)
        expect["last"] = {w: commits - 1 if op == "alter" else commits for w in range(procs)}
    job = Job(system, op, where, commits, deadline_s)
    harness.log(f"  {system:7s} {label}: {procs} x {commits} commits (repeat {repeat + 1})")
    load0 = harness.load_average()
    workers = [run_in_process(job)] if procs == 1 else run_processes(job, procs)
    run = Run(system, label, repeat, workers, (load0, harness.load_average()))
    for w in workers:
        if w.timed_out:
            run.problems.append(
                f"process {w.worker} stopped at its {deadline_s:.0f} s deadline after "
                f"{w.commits} of {commits} commits"
            )
    if not any(w.timed_out for w in workers):
        if system == "olympia":
            check_olympia(run, where, begin_version, expect)
        else:
            check_peer(run, where, expect)
    if run.failures:
        first = next(f for w in workers for f in w.failures)
        run.problems.append(f"{run.failures} failed commits (first: {first})")
    harness.log(
        f"    {run.commits} commits in {run.elapsed:.2f} s = {run.rate:.1f}/s; failures "
        f"{run.failures}; conflicts {dict(run.conflicts)}; lost races {run.lost_races}"
        + (f"; PROBLEMS: {run.problems}" if run.problems else "")
    )
    return run


# --- commit latency against catalog size ----------------------------------------------


def olympia_bulk_create(uri: str, n: int) -> dict[str, Any]:
    """100 namespaces and ``n`` tables in one transaction (in a child process)."""
    cat = olympia.create_catalog(uri)
    t0 = time.perf_counter()
    txn = cat.begin("snapshot")
    for k in range(min(n, N_NAMESPACES)):
        txn.create_namespace(namespace_of(k))
    for j in range(n):
        ns, name = namespace_of(j), table_name(j)
        txn.create_table(ns, name, metadata_location=location(ns, name, 1))
    t1 = time.perf_counter()
    version = txn.commit()
    t2 = time.perf_counter()
    root = cat.store.load_root(version)
    root_bytes = os.path.getsize(os.path.join(uri, *root.path.split("/")))
    cat.close()
    return {
        "build_s": t1 - t0,
        "total_s": t2 - t0,
        "root_bytes": root_bytes,
        "height": root.node.height,
    }


def peer_bulk_insert(folder: str, n: int) -> float:
    """The same namespaces and tables as rows of SqlCatalog's tables, in one SQL transaction."""
    peer = Peer(folder)  # creates SqlCatalog's tables
    peer.close()
    namespaces = [
        (PEER_NAME, namespace_of(k), "exists", "true") for k in range(min(n, N_NAMESPACES))
    ]
    rows = [
        (
            PEER_NAME,
            namespace_of(j),
            table_name(j),
            location(namespace_of(j), table_name(j), 1),
            None,
        )
        for j in range(n)
    ]
    t0 = time.perf_counter()
    harness.bulk_insert(str(peer.db_path), namespaces, rows)
    return time.perf_counter() - t0


def measure_latency(
    olympia_uri: str, peer_folder: str | None, n: int, commits: int, seed: int
) -> dict[str, list[float]]:
    """Single-object commits on catalogs of ``n`` tables, in a fresh process:
    table-pointer updates of random tables, then namespace property updates.
    Olympia and peer commits alternate (in alternating order), so that other
    work on the machine slows both alike."""
    rng = random.Random(seed)
    warmup = 5
    picks = [rng.randrange(n) for _ in range(commits + warmup)]
    out: dict[str, list[float]] = {k: [] for k in ("o_table", "o_ns", "p_table", "p_ns")}
    cat = olympia.load_catalog(olympia_uri)
    peer = Peer(peer_folder) if peer_folder else None

    def one(who: str, kind: str, i: int, j: int) -> None:
        ns, name = namespace_of(j), table_name(j)
        t0 = time.perf_counter()
        if who == "o" and kind == "table":
            olympia_update(cat, ns, name, 2 + i)
        elif who == "o":
            olympia_alter(cat, ns, i)
        elif peer is None:
            return
        elif kind == "ns":
            peer.alter(ns, i)
        elif not peer.update(ns, name, 2 + i):
            raise RuntimeError("peer CAS missed with a single writer")
        if i >= warmup:
            out[f"{who}_{kind}"].append(time.perf_counter() - t0)

    try:
        for kind in ("table", "ns"):
            for i, j in enumerate(picks):
                for who in ("o", "p") if i % 2 == 0 else ("p", "o"):
                    one(who, kind, i, j)
    finally:
        cat.close()
        if peer:
            peer.close()
    return out


def latency_vs_size(
    tmp: str, sizes: Sequence[int], commits: int, seed: int, peer: bool
) -> list[SizeResult]:
    out: list[SizeResult] = []
    for n in sizes:
        res = SizeResult(n)
        folder = os.path.join(tmp, f"size-{n}")
        os.makedirs(folder)
        uri = os.path.join(folder, "olympia")
        harness.log(f"  N={n}: olympia bulk create in one transaction")
        made = harness.in_child(olympia_bulk_create, uri, n)
        res.olympia_create_build_s, res.olympia_create_s = made["build_s"], made["total_s"]
        res.olympia_root_bytes, res.olympia_height = made["root_bytes"], made["height"]
        harness.log(
            f"    {res.olympia_create_s:.2f} s (building {res.olympia_create_build_s:.2f} s)"
        )
        peer_folder = None
        if peer:
            peer_folder = os.path.join(folder, "peer")
            os.makedirs(peer_folder)
            res.peer_insert_s = harness.in_child(peer_bulk_insert, peer_folder, n)
        got = harness.in_child(measure_latency, uri, peer_folder, n, commits, seed)
        res.olympia_table_s, res.olympia_ns_s = got["o_table"], got["o_ns"]
        res.peer_table_s, res.peer_ns_s = got["p_table"], got["p_ns"]
        for who, t, ns in (
            ("olympia", res.olympia_table_s, res.olympia_ns_s),
            ("peer", res.peer_table_s, res.peer_ns_s),
        ):
            if t:
                harness.log(
                    f"    {who} median table {statistics.median(t) * 1e3:.2f} ms, "
                    f"namespace {statistics.median(ns) * 1e3:.2f} ms"
                )
        shutil.rmtree(folder, ignore_errors=True)
        out.append(res)
    return out


# --- report -------------------------------------------------------------------------


def fmt_rate(run: Run | None) -> str:
    return "n/a" if run is None else f"{run.rate:,.0f}"


def ms(x: float) -> str:
    return f"{x * 1e3:.2f}"


def conflicts_text(run: Run) -> str:
    c = run.conflicts
    return ", ".join(f"{k} {v}" for k, v in sorted(c.items())) if c else "0"


def best(runs: Sequence[Run]) -> Run | None:
    """The least disturbed run: the fastest."""
    return max(runs, key=lambda r: r.rate) if runs else None


def median_rate(runs: Sequence[Run]) -> float | None:
    return statistics.median(r.rate for r in runs) if runs else None


def report(
    pairs: Sequence[tuple[str, list[Run], list[Run]]], sizes: Sequence[SizeResult], peer: bool
) -> str:
    parts: list[str] = []
    parts.append(
        "### Commits per second (olympia / peer > 1: olympia faster)\n\n"
        "Best of the repeats (the least disturbed run), median of the repeats in brackets.\n"
    )
    rows = []
    for label, o, p in pairs:
        bo, bp, mo, mp = best(o), best(p), median_rate(o), median_rate(p)
        assert bo is not None
        rows.append(
            [
                label,
                f"{bo.commits}",
                f"{fmt_rate(bo)} ({mo:,.0f})",
                f"{fmt_rate(bp)} ({mp:,.0f})" if bp and mp else "n/a",
                f"{harness.fmt_ratio(bo.rate, bp.rate if bp else None)} "
                f"({harness.fmt_ratio(mo, mp)})",
            ]
        )
    parts.append(
        harness.md_table(
            ["scenario", "commits", "olympia commits/s", "peer commits/s", "olympia / peer"], rows
        )
    )
    parts.append(
        "\n### Details of every run\n\n"
        "Load: the machine's 1-minute load average before -> after the run (other work "
        "running at the same time disturbs the numbers).\n"
    )
    rows = []
    for label, o, p in pairs:
        for run in sorted(o + p, key=lambda r: (r.system, r.repeat)):
            lat = [x for w in run.workers for x in w.latencies]
            rows.append(
                [
                    label,
                    run.system,
                    f"{run.repeat + 1}",
                    f"{run.load[0]:.1f} -> {run.load[1]:.1f}",
                    f"{len(run.workers)}",
                    f"{run.commits}",
                    f"{run.elapsed:.2f}",
                    f"{run.rate:,.0f}",
                    f"{run.failures}",
                    conflicts_text(run),
                    f"{run.lost_races}" if run.system == "olympia" else "-",
                    f"{run.max_attempts}" if run.system == "olympia" else "-",
                    ms(statistics.median(lat)) if lat else "-",
                    ms(harness.percentile(lat, 0.9)) if lat else "-",
                    "; ".join(run.checks + run.notes + [f"**{x}**" for x in run.problems]) or "-",
                ]
            )
    parts.append(
        harness.md_table(
            [
                "scenario",
                "system",
                "repeat",
                "load",
                "procs",
                "commits",
                "wall s",
                "commits/s",
                "failed",
                "conflicts (retried)",
                "lost races (rebased)",
                "max attempts / commit",
                "median ms",
                "p90 ms",
                "checks",
            ],
            rows,
        )
    )
    if sizes:
        parts.append(
            "\n### Commit latency against catalog size (olympia / peer < 1: olympia faster)\n"
        )
        rows = []
        for r in sizes:
            for what, ot, pt in (
                ("table pointer", r.olympia_table_s, r.peer_table_s),
                ("namespace props", r.olympia_ns_s, r.peer_ns_s),
            ):
                om, pm = statistics.median(ot), (statistics.median(pt) if pt else None)
                rows.append(
                    [
                        f"{r.n:,}",
                        what,
                        f"{len(ot)}",
                        ms(om),
                        ms(harness.percentile(ot, 0.9)),
                        ms(pm) if pm is not None else "n/a",
                        ms(harness.percentile(pt, 0.9)) if pt else "n/a",
                        harness.fmt_ratio(om, pm),
                    ]
                )
        parts.append(
            harness.md_table(
                [
                    "tables",
                    "commit",
                    "commits",
                    "olympia median ms",
                    "olympia p90 ms",
                    "peer median ms",
                    "peer p90 ms",
                    "olympia / peer (median)",
                ],
                rows,
            )
        )
        parts.append(
            "\nCreating the catalogs (not compared: the peer's rows are inserted with "
            "raw SQL, not through its API):\n"
        )
        rows = [
            [
                f"{r.n:,}",
                f"{r.olympia_create_s:.2f}",
                f"{r.olympia_create_build_s:.2f}",
                f"{r.olympia_height}",
                f"{r.olympia_root_bytes / 1e6:.2f}",
                f"{r.peer_insert_s:.2f}" if peer else "n/a",
            ]
            for r in sizes
        ]
        parts.append(
            harness.md_table(
                [
                    "tables",
                    "olympia one-transaction create s",
                    "of which building the transaction s",
                    "tree height",
                    "root file MB (holds the actions)",
                    "peer SQL bulk insert s",
                ],
                rows,
            )
        )
    return "\n".join(parts) + "\n"


# --- main ---------------------------------------------------------------------------


PARTS = ("single", "disjoint", "contended", "latency")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts and sizes (smoke run)")
    parser.add_argument("--procs", type=int, default=8, help="processes for the concurrent runs")
    parser.add_argument("--single", type=int, help="one-writer commits (default 200)")
    parser.add_argument("--disjoint", type=int, help="commits per process, disjoint (default 50)")
    parser.add_argument(
        "--contended", type=int, help="successful commits per process, one object (default 25)"
    )
    parser.add_argument(
        "--sizes", type=harness.parse_sizes, help="catalog sizes (default 1000,10000,100000)"
    )
    parser.add_argument("--latency-commits", type=int, help="commits per size (default 100)")
    parser.add_argument(
        "--deadline",
        type=float,
        default=900.0,
        help="seconds after which a process stops (reported as a problem)",
    )
    parser.add_argument(
        "--repeats", type=int, help="runs of each commits/s scenario (default 3, 1 with --quick)"
    )
    harness.add_common_options(parser, "txn-<date>[-quick].md", parts=PARTS, seed=20240601)
    args = parser.parse_args(argv)

    quick = args.quick
    single = args.single or (40 if quick else 200)
    disjoint = args.disjoint or (10 if quick else 50)
    contended = args.contended or (5 if quick else 25)
    sizes = args.sizes or ([1_000, 10_000] if quick else [1_000, 10_000, 100_000])
    latency_commits = args.latency_commits or (20 if quick else 100)
    procs = args.procs
    repeats = args.repeats or (1 if quick else 3)

    skip = "disabled with --no-peer" if args.no_peer else harness.peer_available()
    peer = not skip
    if skip:
        harness.log(f"peer skipped: {skip}")

    base_tmp = tempfile.mkdtemp(prefix="olympia-bench-txn-", dir=args.tmp)
    started = datetime.datetime.now(datetime.UTC)
    pairs: list[tuple[str, list[Run], list[Run]]] = []
    try:
        plan = [
            ("single", "1 writer, namespace properties", "alter", 1, single),
            ("single", "1 writer, table pointer", "update", 1, single),
            ("disjoint", f"{procs} procs, disjoint namespaces", "alter", procs, disjoint),
            ("disjoint", f"{procs} procs, disjoint tables", "update", procs, disjoint),
            ("contended", f"{procs} procs, one namespace (RMW)", "rmw_namespace", procs, contended),
            ("contended", f"{procs} procs, one table (RMW)", "rmw_table", procs, contended),
        ]
        for k, (part, label, op, nprocs, commits) in enumerate(plan):
            if part not in args.only:
                continue
            harness.log(f"{label}")
            runs: dict[str, list[Run]] = {"olympia": [], "peer": []}
            for r in range(repeats):
                systems = ["olympia", "peer"] if peer else ["olympia"]
                for system in systems if r % 2 == 0 else systems[::-1]:
                    folder = os.path.join(base_tmp, f"s{k}-{r}-{system}")
                    if system == "olympia":
                        olympia_setup(folder, nprocs)
                    else:
                        os.makedirs(folder)
                        peer_setup(folder, nprocs)
                    runs[system].append(
                        scenario(system, op, folder, nprocs, commits, args.deadline, label, r)
                    )
                    shutil.rmtree(folder, ignore_errors=True)
            pairs.append((label, runs["olympia"], runs["peer"]))
        size_results: list[SizeResult] = []
        if "latency" in args.only:
            harness.log("commit latency against catalog size")
            size_results = latency_vs_size(base_tmp, sizes, latency_commits, args.seed, peer)
    finally:
        shutil.rmtree(base_tmp, ignore_errors=True)
    finished = datetime.datetime.now(datetime.UTC)
    machine = harness.machine_info(os.path.dirname(base_tmp))

    tables = report(pairs, size_results, peer)
    print(tables)
    # Reported: every problem of every run. Fatal (exit 1): any olympia problem, and
    # any failed or conflicting commit of olympia on disjoint objects.
    problems = [
        f"{label} ({run.system}, repeat {run.repeat + 1}): {x}"
        for label, o, p in pairs
        for run in o + p
        for x in run.problems
    ]
    fatal = [
        f"{label} (repeat {run.repeat + 1}): {x}"
        for label, o, _ in pairs
        for run in o
        for x in run.problems
    ]
    fatal += [
        f"{label} (repeat {run.repeat + 1}): {run.failures} failed commits, conflicts "
        f"{dict(run.conflicts)} (none allowed)"
        for label, o, _ in pairs
        for run in o
        if "disjoint" in label and (run.failures or run.conflicts)
    ]
    cpus = machine[0][1]

    if not args.no_save:
        today = started.date().isoformat()
        out = harness.results_path(args.out, f"txn-{today}{'-quick' if quick else ''}.md")
        lines = [
            f"# Transaction benchmark, {today}",
            "",
            f"Command (from the project root): `{harness.command_line('bench_txn', argv)}`",
            "",
            f"Started {started:%Y-%m-%d %H:%M} UTC, took {(finished - started).total_seconds():.0f} s.",
            "",
            harness.md_table(["machine", ""], [[k, v] for k, v in machine]),
            "",
            "What is measured (see the docstring of benchmarks/bench_txn.py):",
            "",
            "* olympia: a local-directory catalog, default definition; every commit is a",
            "  SNAPSHOT transaction: `alter_namespace(ns, set={...})` (namespace properties) or",
            "  `update_table(ns, t, metadata_location=...)` (table pointer); in the",
            "  read-modify-write (RMW) runs after `describe_namespace` / `describe_table`.",
            "* peer: PyIceberg `SqlCatalog` on a SQLite file (default settings):",
            "  `update_namespace_properties` for namespace properties. It has no",
            "  compare-and-swap, so its RMW is a blind write that can lose updates (counted).",
            "  For the table pointer: the SQL of `SqlCatalog.commit_table` on its engine and",
            "  ORM model (SELECT, then `UPDATE ... WHERE metadata_location = <current>`,",
            "  COMMIT; 0 rows is a conflict), without metadata.json I/O (olympia does none",
            "  either). A peer commit that raised is counted as failed and retried.",
            '* "conflicts (retried)": olympia `CommitConflictError` by rule, or peer CAS misses;',
            '  each was retried with a fresh transaction. "lost races (rebased)": olympia',
            "  commit attempts that found their version taken (they rebase on the newer",
            '  version inside `commit()`; counted by wrapping `CatalogStore.commit`); "max',
            '  attempts": the most versions one `commit()` tried to publish.',
            f"* {procs} processes on {cpus} cores; the processes open their catalog, then",
            "  start together; commits/s = all commits / (last end - first start). Each",
            f"  scenario ran {repeats} time(s), olympia and peer in alternating order, each on",
            "  a fresh catalog.",
            "* Latency against size: one fresh process per size holds both catalogs and",
            "  alternates olympia and peer commits (random tables; then namespaces), so that",
            "  other work on the machine slows both alike; 5 warm-up commits are not counted.",
            "",
            tables,
        ]
        if problems or fatal:
            lines += ["## Problems", ""] + [f"* {x}" for x in dict.fromkeys(problems + fatal)]
            lines.append("")
        harness.write_results(out, "\n".join(lines))

    for x in problems:
        harness.log(f"problem: {x}")
    if fatal:
        for x in fatal:
            harness.log(f"FAILED: {x}")
        return 1
    harness.log("no commit failed on disjoint objects; no update lost on olympia")
    return 0


if __name__ == "__main__":
    sys.exit(main())
