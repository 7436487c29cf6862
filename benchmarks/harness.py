"""What the benchmarks share: the machine and its load, child processes,
the peer (PyIceberg's SqlCatalog on SQLite), statistics, and writing the
Markdown results.

Each bench file imports it as ``from benchmarks import harness`` (or as
``import harness`` when run as a script, with benchmarks/ on sys.path). Only
the plumbing lives here: what a benchmark measures, and the text of its
report, stay in the bench file.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import platform
import resource
import shlex
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

HERE = Path(__file__).resolve().parent
PROJECT_ROOT = HERE.parent
RESULTS = HERE / "results"
#: the peer's catalog name (SqlCatalog's ``catalog_name`` column)
PEER_NAME = "bench"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --- statistics and timing ---------------------------------------------------------


def percentile(data: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``data``, linear interpolation between order statistics."""
    s = sorted(data)
    if not s:
        return float("nan")
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def median(data: Sequence[float]) -> float:
    """The median, NaN for no data."""
    return statistics.median(data) if data else float("nan")


def p50(xs: Sequence[float]) -> float | None:
    """The median, None for no data."""
    return statistics.median(xs) if xs else None


def timed(fn: Callable[[], object]) -> float:
    """Seconds one call of ``fn`` takes."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def fmt_ratio(a: float | None, b: float | None) -> str:
    """``a / b`` with two decimals; "n/a" when either is missing, NaN or ``b`` is 0."""
    if a is None or b is None or not b or b != b or a != a:
        return "n/a"
    return f"{a / b:.2f}"


# --- memory of this process -----------------------------------------------------------


def rss_now_kb() -> int | None:
    """Current resident set size (Linux), in KiB."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") // 1024


def peak_rss_kb() -> int:
    """Peak resident set size of this process so far, in KiB: ``VmHWM`` of
    /proc/self/status where there is one. Not ``ru_maxrss`` first: on Linux it
    survives ``execve``, so a spawned child would report its parent's peak
    when the parent was bigger."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak // 1024 if sys.platform == "darwin" else peak  # macOS reports bytes


# --- the machine ------------------------------------------------------------------------


def load_average() -> float:
    """The machine's 1-minute load average (NaN where there is none)."""
    with contextlib.suppress(OSError, AttributeError):
        return os.getloadavg()[0]
    return float("nan")


def usable_cpus() -> int:
    """CPUs this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 0


def cpu_model() -> str:
    model = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    return model or platform.processor()


def python_text() -> str:
    return f"{platform.python_implementation()} {platform.python_version()}"


def package_version(name: str) -> str:
    """The installed version of distribution ``name``, or "not installed"."""
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:
        return "not installed"


def mount_of(path: str) -> str:
    """File system type and mount point holding ``path`` (Linux), for the report."""
    best = ("", "?", "?")
    try:
        with open("/proc/mounts") as f:
            for line in f:
                dev, mnt, fstype = line.split()[:3]
                if os.path.realpath(path).startswith(mnt) and len(mnt) >= len(best[1]):
                    best = (dev, mnt, fstype)
    except OSError:
        return "unknown"
    return f"{best[2]} at {best[1]}"


def creation_probe(folder: str, files: int = 40) -> tuple[float, float]:
    """Median microseconds, in a new subfolder of ``folder``, to create an
    empty file, and to create one, write 4 KiB, fsync it and link it under a
    second name (what a local commit does for its root), each file removed
    afterwards. On ext4 without a journal a file system does not reuse an
    inode freed in the last minutes and searches past every one of them to
    create a file: in a folder where many files were just deleted (another
    benchmark's catalogs, SQLite's journal of every transaction) creating one
    cost 0.3-1.4 ms on the benchmark machine, against 25 us in a fresh folder.
    Reported at the start and end of a benchmark, so that its figures can be
    read knowing what the folder cost."""
    probe = tempfile.mkdtemp(prefix="probe-", dir=folder)
    plain: list[float] = []
    commit: list[float] = []
    try:
        for i in range(files):
            t0 = time.perf_counter()
            os.close(os.open(os.path.join(probe, f"e{i}"), os.O_CREAT | os.O_WRONLY | os.O_EXCL))
            plain.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            path = os.path.join(probe, f"f{i}")
            fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_EXCL)
            try:
                os.write(fd, b"\0" * 4096)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.link(path, path + ".linked")
            commit.append(time.perf_counter() - t0)
    finally:
        shutil.rmtree(probe, ignore_errors=True)
    return median(plain) * 1e6, median(commit) * 1e6


def creation_row(start: tuple[float, float], end: tuple[float, float]) -> tuple[str, str]:
    """The machine-table row of two :func:`creation_probe` results."""
    return (
        "new file in the catalog folders (p50)",
        f"create {start[0]:.0f} us, create + 4 KiB + fsync + link {start[1]:.0f} us at the "
        f"start; {end[0]:.0f} us and {end[1]:.0f} us at the end",
    )


def machine_info(tmp: str) -> list[tuple[str, str]]:
    """The machine table of the reports (nproc, cpu, versions; catalogs under ``tmp``)."""
    import olympia

    return [
        ("nproc", str(usable_cpus())),
        ("cpu", cpu_model() or "?"),
        ("python", python_text()),
        ("os", platform.platform()),
        ("catalog folders", f"under {tmp} ({mount_of(tmp)})"),
        ("olympia", olympia.__version__),
        ("pyiceberg", package_version("pyiceberg")),
        ("sqlalchemy", package_version("sqlalchemy")),
        ("sqlite", sqlite3.sqlite_version),
        ("pyarrow", package_version("pyarrow")),
    ]


def machine_list() -> list[tuple[str, str]]:
    """The machine as the core benchmark lists it (nproc of all, memory, module versions)."""
    info: list[tuple[str, str]] = []
    cpus = os.cpu_count() or 0
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = cpus
    info.append(("nproc", str(usable) + ("" if usable == cpus else f" (of {cpus})")))
    info.append(("cpu", cpu_model() or "unknown"))
    with contextlib.suppress(OSError, ValueError, IndexError):
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
        info.append(("memory", f"{kb / 1024 / 1024:.1f} GiB"))
    info.append(("os", platform.platform()))
    info.append(("python", python_text()))
    versions = []
    for module in ("olympia", "pyarrow", "google.protobuf", "pyiceberg", "sqlalchemy"):
        with contextlib.suppress(ImportError):
            mod = __import__(module, fromlist=["__version__"])
            versions.append(f"{module} {getattr(mod, '__version__', '?')}")
    versions.append(f"sqlite {sqlite3.sqlite_version}")
    info.append(("packages", ", ".join(versions)))
    return info


# --- the command line --------------------------------------------------------------------


def command_line(module: str, argv: Sequence[str], *, as_run: bool = False) -> str:
    """``python -m benchmarks.<module> <argv>``; with ``as_run``, ``python
    benchmarks/<module>.py <argv>`` when the benchmark was started as a script."""
    main_spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if as_run and (main_spec is None or main_spec.name != f"benchmarks.{module}"):
        try:
            script = os.path.relpath(sys.argv[0], PROJECT_ROOT)
        except ValueError:
            script = sys.argv[0]
        cmd = f"python {script}"
    else:
        cmd = f"python -m benchmarks.{module}"
    return f"{cmd} {shlex.join(argv)}".strip()


def parse_sizes(text: str) -> list[int]:
    """An argparse type: comma-separated positive integers (``10000``, ``10_000``, ``1e4``)."""
    try:
        sizes = [int(float(x.replace("_", ""))) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of sizes: {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"sizes must be positive: {text!r}")
    return sizes


def add_common_options(
    parser: argparse.ArgumentParser,
    results: str,
    *,
    parts: Sequence[str] = (),
    seed: int | None = None,
    peer: bool = True,
) -> None:
    """The options the benchmarks share: ``--only`` (a choice of ``parts``, when
    given; default all), ``--seed`` (when ``seed`` is given), ``--tmp``,
    ``--no-peer`` (when ``peer``), ``--out`` and ``--no-save``; ``results``
    names the default results file in the help."""
    if parts:
        parser.add_argument(
            "--only",
            type=parts_type(parts),
            default=tuple(parts),
            help=f"comma-separated parts to run, of {','.join(parts)} (default: all)",
        )
    if seed is not None:
        parser.add_argument("--seed", type=int, default=seed)
    parser.add_argument("--tmp", help="folder for the temporary catalogs (default: system temp)")
    if peer:
        parser.add_argument("--no-peer", action="store_true", help="skip the SqlCatalog peer")
    parser.add_argument(
        "--out", help=f"Markdown results file (default benchmarks/results/{results})"
    )
    parser.add_argument("--no-save", action="store_true", help="print only, write no file")


def parts_type(parts: Sequence[str]) -> Callable[[str], tuple[str, ...]]:
    """An argparse type: a comma-separated choice of ``parts``."""

    def parse(text: str) -> tuple[str, ...]:
        chosen = tuple(x.strip() for x in text.split(",") if x.strip())
        unknown = sorted(set(chosen) - set(parts))
        if not chosen or unknown:
            raise argparse.ArgumentTypeError(
                f"unknown part(s) {unknown}; choose from {tuple(parts)}"
            )
        return chosen

    return parse


# --- child processes ---------------------------------------------------------------------


def in_child(fn: Callable[..., Any], *args: Any) -> Any:
    """Run ``fn(*args)`` in a fresh process (clean caches and heap)."""
    with ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


def _spawned_main(
    run: Callable[..., None], result_type: type, job: Any, w: int, barrier: Any, queue: Any
) -> None:
    res = result_type(worker=w)
    try:
        run(job, w, lambda: barrier.wait(timeout=600), res)
    except BaseException:
        res.error = traceback.format_exc()[-2000:]
        with contextlib.suppress(Exception):
            barrier.abort()
    queue.put(asdict(res))


def run_spawned(
    run: Callable[..., None], result_type: type, job: Any, procs: int, timeout: float
) -> list[Any]:
    """Run ``run(job, w, start, result)`` in ``procs`` fresh (spawned) processes
    that start together at a barrier; return their ``result_type`` results, by
    worker. ``run`` and ``result_type`` must be importable (top-level) so that
    the spawn start method can pickle them; ``result_type`` is a dataclass with
    ``worker`` and ``error`` fields."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(procs)
    queue = ctx.Queue()
    children = [
        ctx.Process(target=_spawned_main, args=(run, result_type, job, w, barrier, queue))
        for w in range(procs)
    ]
    for c in children:
        c.start()
    results: list[Any] = []
    try:
        for _ in children:
            results.append(result_type(**queue.get(timeout=timeout)))
    finally:
        for c in children:
            c.join(timeout=60)
            if c.is_alive():
                c.kill()
    errors = [r.error for r in results if r.error]
    if errors:
        raise RuntimeError(f"a worker process crashed:\n{errors[0]}")
    return sorted(results, key=lambda r: r.worker)


def run_queued(
    target: Callable[..., None],
    args: Iterable[tuple[Any, ...]],
    timeout: float | None = None,
    join_timeout: float | None = None,
) -> list[Any]:
    """Start one spawned process per tuple of ``args``, each running
    ``target(*a, queue)`` and putting one result on the queue; return the
    results in the order they arrive."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    children = [ctx.Process(target=target, args=(*a, queue)) for a in args]
    for c in children:
        c.start()
    results = [queue.get(timeout=timeout) for _ in children]
    for c in children:
        c.join(timeout=join_timeout)
    return results


# --- the peer: PyIceberg's SqlCatalog on SQLite --------------------------------------------


def peer_available() -> str:
    """Empty if the peer can run, else why not."""
    try:
        import pyiceberg.catalog.sql  # noqa: F401
    except ImportError as exc:
        return f"PyIceberg SqlCatalog not importable ({exc}); pip install 'pyiceberg[sql-sqlite]'"
    return ""


def peer_paths(folder: str) -> tuple[str, str]:
    """The peer's SQLite file and warehouse folder in ``folder`` (made if missing)."""
    db_path = os.path.join(folder, "peer.db")
    warehouse = os.path.join(folder, "wh")
    os.makedirs(warehouse, exist_ok=True)
    return db_path, warehouse


def sql_catalog(db_path: str, warehouse: str) -> Any:
    """A new ``SqlCatalog`` (new engine) on the SQLite file ``db_path``; creates
    its tables on first use."""
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog(PEER_NAME, uri=f"sqlite:///{db_path}", warehouse=f"file://{warehouse}")


def load_sql_catalog(folder: str) -> Any:
    """The peer as a PyIceberg user loads it: ``load_catalog(type=sql)`` on
    ``folder``/catalog.db, warehouse ``folder``/warehouse."""
    from pyiceberg.catalog import load_catalog

    return load_catalog(
        PEER_NAME,
        **{
            "type": "sql",
            "uri": f"sqlite:///{folder}/catalog.db",
            "warehouse": f"file://{folder}/warehouse",
        },
    )


def load_olympia_catalog(warehouse: str) -> Any:
    """Olympia as a PyIceberg user loads it: ``load_catalog`` with ``py-catalog-impl``."""
    from pyiceberg.catalog import load_catalog

    return load_catalog(
        PEER_NAME,
        **{"py-catalog-impl": "olympia.iceberg.OlympiaCatalog", "warehouse": warehouse},
    )


#: (catalog_name, namespace, property_key, property_value)
NamespaceRow = tuple[str, str, str, str]
#: (catalog_name, table_namespace, table_name, metadata_location, previous_metadata_location)
TableRow = tuple[str, str, str, str, "str | None"]


def bulk_insert(
    db_path: str, namespaces: Sequence[NamespaceRow], tables: Sequence[TableRow]
) -> None:
    """Insert namespace property rows and table rows straight into the tables
    SqlCatalog created, in one SQLite transaction."""
    with contextlib.closing(sqlite3.connect(db_path)) as con, con:
        con.executemany(
            "INSERT INTO iceberg_namespace_properties"
            " (catalog_name, namespace, property_key, property_value) VALUES (?, ?, ?, ?)",
            namespaces,
        )
        con.executemany(
            "INSERT INTO iceberg_tables (catalog_name, table_namespace, table_name,"
            " metadata_location, previous_metadata_location, iceberg_type)"
            " VALUES (?, ?, ?, ?, ?, 'TABLE')",
            tables,
        )


# --- the results ---------------------------------------------------------------------------


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str = "---") -> str:
    """A Markdown table; ``align`` is each column's delimiter cell ("---:": right)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def results_path(out: str | None, name: str) -> Path:
    """``out`` if given, else benchmarks/results/``name``."""
    return Path(out) if out else RESULTS / name


def write_results(path: Path, text: str) -> None:
    """Write a results file (its folder made if missing) and say so on stderr."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    log(f"wrote {path}")


def save_report(path: Path, lines: list[str], problems: Sequence[str]) -> None:
    """Write a results file of ``lines``, with a "Problems" section when any."""
    if problems:
        lines = [*lines, "## Problems", "", *[f"* {x}" for x in problems], ""]
    write_results(path, "\n".join(lines))


def exit_code(problems: Sequence[str]) -> int:
    """Say each problem on stderr; 1 if there was any, else 0."""
    for x in problems:
        log(f"FAILED: {x}")
    return 1 if problems else 0


class TimedWorker(Protocol):
    """What a process that commits for a fixed time reports (each bench's
    ``Worker`` dataclass has these fields, and more of its own)."""

    commits: int
    failures: dict[str, int]
    t_start: float
    t_end: float


W = TypeVar("W", bound=TimedWorker)


class FailingWorker(Protocol):
    """A :class:`TimedWorker` that also keeps its first failure's text."""

    failures: dict[str, int]
    first_failure: str


def count_failure(res: FailingWorker, exc: BaseException, *, note_conflict: bool = True) -> None:
    """Count a failed commit in ``res``: a ``CommitConflictError`` by its rule,
    anything else by its type; keep the first failure's text (for a conflict
    only with ``note_conflict``: where conflicts are the expected outcome)."""
    from olympia import CommitConflictError

    if isinstance(exc, CommitConflictError):
        key = exc.rule or "unknown"
        if not note_conflict:
            res.failures[key] = res.failures.get(key, 0) + 1
            return
    else:
        key = type(exc).__name__
    res.failures[key] = res.failures.get(key, 0) + 1
    res.first_failure = res.first_failure or f"{type(exc).__name__}: {exc}"[:300]


@dataclass
class TimedRun(Generic[W]):
    """``procs`` processes that committed for a fixed time: each one's count
    (a fixed count per process would hide starvation), the rate over the
    span from the first start to the last end, and failures by kind."""

    label: str
    system: str
    procs: int
    workers: list[W]
    load: tuple[float, float]
    problems: list[str] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)
    kind: str = ""
    #: The round of an interleaved part that the run belongs to (0: none).
    round: int = 0

    @property
    def counts(self) -> list[int]:
        return [w.commits for w in self.workers]

    @property
    def commits(self) -> int:
        return sum(self.counts)

    @property
    def rate(self) -> float:
        elapsed = max(w.t_end for w in self.workers) - min(w.t_start for w in self.workers)
        return self.commits / elapsed if elapsed > 0 else float("nan")

    @property
    def failures(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for w in self.workers:
            total.update(w.failures)
        return total
