"""Writers of one host for a fixed time: scaling on disjoint tables, and one hot table.

Issue 24's items 1 and 2, through the public API only (``olympia.load_catalog``,
``cat.begin()``, ``describe_table`` / ``update_table``, ``commit()``), on a
local-directory catalog with the default definition (SNAPSHOT). Every run
starts P fresh processes at a barrier (``harness.run_spawned``) and lets each
commit for a fixed time T (``--seconds``).

1. ``scaling``: P processes (``--procs``, default 1..8) each update their own
   table (``begin``, ``update_table(metadata_location=...)``, ``commit``).
   Reported per P: commits per process, min / max, failed commits, aggregate
   commits/s and its ratio to P = 1. The runs go in rounds (``--rounds``,
   default 4), each running every P once in an order of its own (shuffled,
   ``--seed``): this machine's speed drifts by half within minutes, so a
   ratio is taken between runs of one round (P's rate over the P = 1 run of
   its round) and the figure for P is the median of its rounds' ratios. Checked: the versions
   the catalog gained hold exactly one transaction per commit, and every
   table holds its process's last update. Issue 24's target: every P at least
   as fast as P = 1 (in particular P = 2 >= 1.0x).
2. ``hot``: P processes (``--hot-procs``, default 4 and 8) do read-modify-write
   of ONE table's metadata location: ``describe_table``, then
   ``update_table`` to the location whose generation number is one more than
   the one read, ``commit``; a ``CommitConflictError`` is counted (by rule) and
   followed by a fresh transaction. The peer, PyIceberg's ``SqlCatalog`` on
   SQLite, runs the same loop with the SQL of ``SqlCatalog.commit_table``:
   the SELECT of ``load_table``, then the compare-and-swap ``UPDATE ... WHERE
   metadata_location = <read>`` (0 rows: a conflict). Olympia and peer runs
   alternate (olympia, peer, peer, olympia for each P). Reported: successful
   commits/s, conflicts, and the olympia / peer ratio (> 1: olympia faster).
   Checked on both sides: the final generation equals the number of
   successful commits (an update lost would leave it lower), and (olympia)
   the versions gained hold exactly one transaction per commit.

Nothing here asserts on timings. The script exits 1 only when a check fails.

Run from the project root::

    python -m benchmarks.bench_writers                 # both parts, writes results/writers-<date>.md
    python -m benchmarks.bench_writers --only scaling --seconds 5 --rounds 6
    python -m benchmarks.bench_writers --only hot --hot-procs 4,8 --seconds 15
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
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
    from benchmarks import bench_txn, harness
except ImportError:  # run as a script: benchmarks/ is on sys.path
    import bench_txn  # type: ignore[no-redef]
    import harness  # type: ignore[no-redef]

PARTS = ("scaling", "hot")
location = bench_txn.location
generation_of = bench_txn.generation_of
HOT_NS, HOT_TABLE = "hot", "t"


@dataclass
class Worker:
    worker: int
    commits: int = 0
    #: conflicts and failures, by rule (olympia) or "cas" (peer) or exception type
    failures: dict[str, int] = field(default_factory=dict)
    first_failure: str = ""
    t_start: float = 0.0
    t_end: float = 0.0
    error: str = ""


@dataclass(frozen=True)
class Job:
    system: str  # "olympia" or "peer"
    kind: str  # "disjoint" or "hot"
    where: str
    seconds: float


def worker_ns(w: int) -> str:
    return f"w{w:02d}"


def setup(job: Job, procs: int) -> int:
    """The tables of a run; the olympia version reached (0 for the peer)."""
    if job.kind == "hot":
        tables = [(HOT_NS, HOT_TABLE)]
    else:
        tables = [(worker_ns(w), "t") for w in range(procs)]
    if job.system == "olympia":
        with olympia.create_catalog(job.where) as cat:
            txn = cat.begin()
            for ns, name in tables:
                txn.create_namespace(ns)
                txn.create_table(ns, name, metadata_location=location(ns, name, 0))
            return txn.commit()
    os.makedirs(job.where, exist_ok=True)
    peer = bench_txn.Peer(job.where)
    db_path = peer.db_path
    peer.close()
    harness.bulk_insert(
        db_path,
        [(harness.PEER_NAME, ns, "exists", "true") for ns, _ in tables],
        [(harness.PEER_NAME, ns, name, location(ns, name, 0), None) for ns, name in tables],
    )
    return 0


def _olympia_once(cat: olympia.Catalog, kind: str, w: int, gen: int) -> None:
    txn = cat.begin()
    if kind == "hot":
        read = generation_of(txn.describe_table(HOT_NS, HOT_TABLE).metadata_location)
        txn.update_table(HOT_NS, HOT_TABLE, metadata_location=location(HOT_NS, HOT_TABLE, read + 1))
    else:
        ns = worker_ns(w)
        txn.update_table(ns, "t", metadata_location=location(ns, "t", gen))
    txn.commit()


def _peer_once(peer: Any, kind: str, w: int, gen: int) -> bool:
    if kind == "hot":
        current = peer.current_location(HOT_NS, HOT_TABLE)
        new = location(HOT_NS, HOT_TABLE, generation_of(current) + 1)
        return bool(peer.cas(HOT_NS, HOT_TABLE, current, new))
    return bool(peer.update(worker_ns(w), "t", gen))


def run_worker(job: Job, w: int, start: Callable[[], None], res: Worker) -> None:
    """Open the catalog, wait for ``start``, commit for ``job.seconds``."""
    handle: Any = (
        olympia.load_catalog(job.where) if job.system == "olympia" else bench_txn.Peer(job.where)
    )
    start()
    res.t_start = time.time()
    end = time.monotonic() + job.seconds
    gen = 1
    try:
        while time.monotonic() < end:
            try:
                if job.system == "olympia":
                    _olympia_once(handle, job.kind, w, gen)
                elif not _peer_once(handle, job.kind, w, gen):
                    res.failures["cas"] = res.failures.get("cas", 0) + 1
                    continue
            except Exception as exc:  # a conflict is what the hot part expects
                harness.count_failure(res, exc, note_conflict=False)
                continue
            res.commits += 1
            gen += 1
    finally:
        res.t_end = time.time()
        handle.close()


#: One timed run: counts, rate and failures (benchmarks/harness.py).
Run = harness.TimedRun[Worker]


def one_run(
    label: str, system: str, kind: str, where: str, procs: int, seconds: float, round_: int = 0
) -> Run:
    job = Job(system, kind, where, seconds)
    base = setup(job, procs)
    harness.log(f"  {label}: {system}, {kind}, {procs} process(es) for {seconds:.0f} s")
    load0 = harness.load_average()
    workers = harness.run_spawned(run_worker, Worker, job, procs, seconds + 900)
    load = (load0, harness.load_average())
    run = Run(label, system, procs, workers, load, kind=kind, round=round_)
    check(run, where, base)
    harness.log(
        f"    counts {run.counts}, {run.rate:.1f} commits/s, failures {dict(run.failures)}"
        + (f"; PROBLEMS {run.problems}" if run.problems else "")
    )
    # The catalog stays until the whole benchmark ends (its temporary folder
    # is removed then): on ext4, allocating a file skips every inode freed in
    # the last seconds, so a run right after removing thousands of files
    # measured that removal, not commits (a third of a commit's kernel time).
    os.sync()  # this run's write-back now, not during the next run's fsyncs
    return run


def check(run: Run, where: str, base: int) -> None:
    """No update lost; (olympia) one transaction per commit in the versions gained."""
    if run.system == "olympia":
        with olympia.load_catalog(where) as cat:
            held = sum(len(i.transactions) for i in cat.history(since=base + 1))
            gained = cat.version - base
            if held != run.commits:
                run.problems.append(
                    f"catalog gained {gained} versions holding {held} transactions "
                    f"for {run.commits} commits"
                )
            else:
                run.checks.append(f"{gained} versions, {held} transactions")
            view = cat.latest()

            def current(ns: str, name: str) -> str:
                return view.describe_table(ns, name).metadata_location

            _check_locations(run, current)
    else:
        peer = bench_txn.Peer(where)
        try:
            _check_locations(run, peer.current_location)
        finally:
            peer.close()
    firsts = [w.first_failure for w in run.workers if w.first_failure]
    if firsts:
        run.checks.append(f"first failure: {firsts[0]}")


def _check_locations(run: Run, current: Callable[[str, str], str]) -> None:
    if run.kind == "hot":
        final = generation_of(current(HOT_NS, HOT_TABLE))
        if final != run.commits:
            run.problems.append(
                f"final generation {final} for {run.commits} successful commits (updates lost)"
            )
        else:
            run.checks.append(f"final generation {final} = successful commits")
        return
    for w in run.workers:
        ns = worker_ns(w.worker)
        if w.commits and current(ns, "t") != location(ns, "t", w.commits):
            run.problems.append(f"table of process {w.worker} lost its last update")
    if not run.problems:
        run.checks.append("every table holds its process's last update")


# --- the parts ------------------------------------------------------------------------------


def part_scaling(
    tmp: str, procs: Sequence[int], seconds: float, rounds: int, seed: int
) -> list[Run]:
    """``rounds`` rounds, each running every P once in an order of its own
    (shuffled with ``seed``): the speed of this machine drifts by half within
    minutes, and a P measured in every round meets the same drift as P = 1."""
    rng = random.Random(seed)
    runs = []
    k = 0
    for round_ in range(1, rounds + 1):
        order = list(procs)
        rng.shuffle(order)
        for p in order:
            label = f"{p} process{'es' if p > 1 else ''} (round {round_})"
            where = os.path.join(tmp, f"s{k}")
            runs.append(one_run(label, "olympia", "disjoint", where, p, seconds, round_))
            k += 1
    return runs


def part_hot(tmp: str, procs: Sequence[int], seconds: float, peer: bool) -> list[Run]:
    runs = []
    k = 0
    for p in procs:
        systems = ["olympia", "peer", "peer", "olympia"] if peer else ["olympia", "olympia"]
        seen: Counter[str] = Counter()
        for system in systems:
            seen[system] += 1
            label = f"{p} processes (run {seen[system]})"
            runs.append(one_run(label, system, "hot", os.path.join(tmp, f"h{k}"), p, seconds))
            k += 1
    return runs


def _row(r: Run, one: float | None) -> list[str]:
    counts = r.counts
    return [
        r.label,
        r.system,
        f"{r.load[0]:.1f} -> {r.load[1]:.1f}",
        str(counts),
        harness.fmt_ratio(min(counts), max(counts)),
        ", ".join(f"{k} {v}" for k, v in sorted(r.failures.items())) or "0",
        f"{r.rate:,.1f}",
        harness.fmt_ratio(r.rate, one) if one else "-",
        "; ".join(r.checks + [f"**{x}**" for x in r.problems]) or "-",
    ]


def scaling_ratios(runs: Sequence[Run]) -> dict[int, tuple[float, float, list[float]]]:
    """Per P: the median rate, the median of its ratios to P = 1 in the same
    round (the figure against the target), and those ratios."""
    ones = {r.round: r.rate for r in runs if r.procs == 1}
    out: dict[int, tuple[float, float, list[float]]] = {}
    for p in sorted({r.procs for r in runs}):
        mine = [r for r in runs if r.procs == p]
        paired = [r.rate / ones[r.round] for r in mine if ones.get(r.round)]
        out[p] = (
            statistics.median(r.rate for r in mine),
            statistics.median(paired) if paired else float("nan"),
            paired,
        )
    return out


def report_scaling(runs: Sequence[Run], seconds: float) -> str:
    ones = [r.rate for r in runs if r.procs == 1]
    one = statistics.median(ones) if ones else None
    rows = [_row(r, one) for r in runs]
    ratios = scaling_ratios(runs)
    summary = "; ".join(
        f"P={p} {rate:,.0f}/s, {ratio:.2f} ({', '.join(f'{x:.2f}' for x in paired)})"
        for p, (rate, ratio, paired) in ratios.items()
    )
    return "\n".join(
        [
            "### Disjoint tables: scaling with P\n",
            f"Each process updates its own table for {seconds:.0f} s. Every round runs each P "
            "once, in an order of its own; */ P = 1* is against the median of the P = 1 runs. "
            "Target: >= 1.0 for every P, judged by the median over the rounds of each run's "
            "ratio to the P = 1 run of its round.\n",
            harness.md_table(
                [
                    "run",
                    "system",
                    "load",
                    "commits per process",
                    "min / max",
                    "failed (rule)",
                    "commits/s",
                    "/ P = 1",
                    "checks",
                ],
                rows,
            ),
            f"\nPer P: median commits/s, median ratio to P = 1 of the same round (each "
            f"round's ratio): {summary}.\n",
        ]
    )


def report_hot(runs: Sequence[Run], seconds: float) -> str:
    rows = [_row(r, None) for r in runs]
    by: dict[tuple[int, str], list[float]] = {}
    for r in runs:
        by.setdefault((r.procs, r.system), []).append(r.rate)
    lines = []
    for p in sorted({r.procs for r in runs}):
        o, s = by.get((p, "olympia")), by.get((p, "peer"))
        om = sum(o) / len(o) if o else None
        sm = sum(s) / len(s) if s else None
        text = f"P={p}: olympia {om:,.0f}/s" if om is not None else f"P={p}:"
        if sm is not None:
            text += f", SqlCatalog {sm:,.0f}/s, olympia / peer {harness.fmt_ratio(om, sm)}"
        lines.append(text)
    return "\n".join(
        [
            "### One hot table: read-modify-write for a fixed time\n",
            f"Each process reads the table's metadata location and moves it one generation on, "
            f"for {seconds:.0f} s; conflicts are followed by a fresh transaction. Target: "
            "olympia >= SqlCatalog at P = 4 and 8.\n",
            harness.md_table(
                [
                    "run",
                    "system",
                    "load",
                    "successful commits per process",
                    "min / max",
                    "conflicts / failures",
                    "commits/s",
                    "-",
                    "checks",
                ],
                rows,
            ),
            "\nMeans of both runs: " + "; ".join(lines) + ".\n",
        ]
    )


def _ints(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers: {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"process counts must be positive: {text!r}")
    return values


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--procs", type=_ints, default=list(range(1, 9)), help="scaling P values")
    parser.add_argument("--hot-procs", type=_ints, default=[4, 8], help="hot-table P values")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds per run (10)")
    parser.add_argument(
        "--rounds", type=int, default=4, help="scaling rounds, each P once per round (4)"
    )
    harness.add_common_options(parser, "writers-<date>.md", parts=PARTS, seed=24)
    args = parser.parse_args(argv)
    peer = not args.no_peer and not harness.peer_available()
    base_tmp = tempfile.mkdtemp(prefix="olympia-bench-writers-", dir=args.tmp)
    started = datetime.datetime.now(datetime.UTC)
    sections: list[str] = []
    problems: list[str] = []
    probe_start = harness.creation_probe(base_tmp)
    probe_end = probe_start
    try:
        if "scaling" in args.only:
            runs = part_scaling(base_tmp, args.procs, args.seconds, args.rounds, args.seed)
            problems += [f"{r.label}: {x}" for r in runs for x in r.problems]
            sections.append(report_scaling(runs, args.seconds))
        if "hot" in args.only:
            runs = part_hot(base_tmp, args.hot_procs, args.seconds, peer)
            problems += [f"{r.label} ({r.system}): {x}" for r in runs for x in r.problems]
            sections.append(report_hot(runs, args.seconds))
        probe_end = harness.creation_probe(base_tmp)
    finally:
        shutil.rmtree(base_tmp, ignore_errors=True)
    finished = datetime.datetime.now(datetime.UTC)
    text = "\n".join(sections)
    print(text)
    if not args.no_save:
        today = started.date().isoformat()
        out = harness.results_path(args.out, f"writers-{today}.md")
        machine = harness.machine_info(os.path.dirname(base_tmp))
        machine.append(harness.creation_row(probe_start, probe_end))
        lines = [
            f"# Writers of one host, {today}",
            "",
            f"Command (from the project root): `{harness.command_line('bench_writers', argv)}`",
            "",
            f"Started {started:%Y-%m-%d %H:%M} UTC, took {(finished - started).total_seconds():.0f} s; "
            f"1-minute load average at the end {harness.load_average():.1f}.",
            "",
            harness.md_table(["machine", ""], [[k, v] for k, v in machine]),
            "",
            text,
        ]
        harness.save_report(out, lines, problems)
    return harness.exit_code(problems)


if __name__ == "__main__":
    sys.exit(main())
