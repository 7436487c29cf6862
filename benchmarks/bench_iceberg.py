"""PyIceberg benchmark: olympia's PyIceberg catalog against PyIceberg's SqlCatalog.

Both catalogs are loaded as a PyIceberg user loads them
(``pyiceberg.catalog.load_catalog``; olympia through ``py-catalog-impl``) and
every timed call is a public PyIceberg call on them, in one run, on the same
local disk. For catalogs of N tables (``--sizes``, default 10^3, 10^4, 10^5,
spread over 100 namespaces), p50 / p90 of:

- ``create_table``: a new table with a 3-column schema (writes its first
  metadata.json and the catalog entry);
- ``load_table``: a random existing table (the catalog lookup plus reading its
  metadata.json);
- ``append``: ``table.append`` of a 10-row Arrow table to a table of its own
  (data file, manifest, manifest list, metadata.json, catalog commit). Where
  the time goes is split three ways by wrapping PyIceberg's own functions:
  *data+manifests* (the append before ``commit_table``), *metadata I/O*
  (reading and writing metadata.json files inside ``commit_table``:
  ``FromInputFile.table_metadata`` / ``ToOutputFile.table_metadata``) and
  *catalog* (the rest of ``commit_table``: olympia's transaction and commit,
  or SqlCatalog's SQL);
- ``list_tables`` of one namespace (N / 100 tables).

Building the catalogs is not timed: one template table is created through
each catalog, then the N entries pointing at its metadata.json are added
below the PyIceberg API (olympia: one ``olympia`` transaction through its own
public API; SqlCatalog: rows inserted into its tables with raw SQL). Calls on
the two catalogs alternate, so that other load on the machine slows both
alike; 5 warm-up calls of each kind are not counted. Ratios are olympia /
SqlCatalog (< 1: olympia is faster). Also reported: olympia's p50 at the
largest size over its p50 at the smallest.

Nothing here asserts on timings. Run from the project root::

    python -m benchmarks.bench_iceberg            # writes benchmarks/results/iceberg-<date>.md
    python -m benchmarks.bench_iceberg --quick    # smoke run (iceberg-<date>-quick.md)
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import olympia

try:
    from benchmarks import harness
except ImportError:  # run as a script: benchmarks/ is on sys.path
    import harness  # type: ignore[no-redef]

N_NAMESPACES = 100
WARMUP = 5
OPS = ("create_table", "load_table", "append", "list_tables")
SPLIT = ("data+manifests", "metadata I/O", "catalog")


def namespace(j: int) -> str:
    return f"ns{j % N_NAMESPACES:03d}"


def table(j: int) -> str:
    return f"t{j:07d}"


def schema() -> Any:
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType, TimestampType

    return Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "name", StringType(), required=False),
        NestedField(3, "ts", TimestampType(), required=False),
    )


def rows(i: int) -> Any:
    import pyarrow as pa

    return pa.table(
        {
            "id": pa.array(range(i * 10, i * 10 + 10), pa.int64()),
            "name": pa.array([f"row {k}" for k in range(10)], pa.string()),
            "ts": pa.array([datetime.datetime(2026, 11, 23, 12, 0, k) for k in range(10)]),
        }
    )


def build(warehouse: str, peer_folder: str, n: int) -> dict[str, float]:
    """Both catalogs with N tables over 100 namespaces; returns build times."""
    out: dict[str, float] = {}
    t0 = time.perf_counter()
    cat = harness.load_olympia_catalog(warehouse)
    cat.create_namespace("template")
    tmpl = cat.create_table(("template", "t"), schema())
    ocat = olympia.load_catalog(warehouse)
    with ocat.transaction() as txn:
        for j in range(N_NAMESPACES):
            txn.create_namespace(namespace(j))
        for j in range(n):
            txn.create_table(namespace(j), table(j), metadata_location=tmpl.metadata_location)
    out["olympia_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    peer = harness.load_sql_catalog(peer_folder)
    peer.create_namespace("template")
    ptmpl = peer.create_table(("template", "t"), schema())
    for j in range(N_NAMESPACES):
        peer.create_namespace(namespace(j))
    harness.bulk_insert(
        os.path.join(peer_folder, "catalog.db"),
        [],
        [("bench", namespace(j), table(j), ptmpl.metadata_location, None) for j in range(n)],
    )
    out["peer_s"] = time.perf_counter() - t0
    return out


@dataclass
class Split:
    """Seconds inside ``commit_table`` spent reading/writing metadata files."""

    commit: float = 0.0
    metadata_io: float = 0.0
    depth: int = 0


@contextlib.contextmanager
def split_timer(catalogs: Sequence[Any], split: Split) -> Iterator[None]:
    """Wrap commit_table of each catalog and PyIceberg's metadata file reader and writer."""
    from pyiceberg.serializers import FromInputFile, ToOutputFile

    saved: list[tuple[Any, str, Any]] = []

    def timed(fn: Callable[..., Any], into: str) -> Callable[..., Any]:
        def wrapper(*a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                setattr(split, into, getattr(split, into) + time.perf_counter() - t0)

        return wrapper

    for owner, name in ((FromInputFile, "table_metadata"), (ToOutputFile, "table_metadata")):
        fn = owner.__dict__[name]
        saved.append((owner, name, fn))
        setattr(owner, name, staticmethod(timed(fn.__func__, "metadata_io")))
    for cat in catalogs:
        saved.append((cat, "commit_table", None))
        cat.commit_table = timed(cat.commit_table, "commit")
    try:
        yield
    finally:
        for owner, name, fn in saved:
            if fn is None:
                delattr(owner, name)
            else:
                setattr(owner, name, fn)


@dataclass
class SizeResult:
    n: int
    build: dict[str, float] = field(default_factory=dict)
    #: (system, op) -> seconds per call
    times: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    #: (system, part) -> seconds per append
    split: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    listed: dict[str, int] = field(default_factory=dict)


def measure(warehouse: str, peer_folder: str, n: int, calls: int, seed: int) -> SizeResult:
    rng = random.Random(seed)
    res = SizeResult(n)
    cats = {
        "olympia": harness.load_olympia_catalog(warehouse),
        "sql": harness.load_sql_catalog(peer_folder),
    }
    appended = {s: c.create_table(("template", "appended"), schema()) for s, c in cats.items()}
    split = Split()
    with split_timer(list(cats.values()), split):
        for i in range(calls + WARMUP):
            j = rng.randrange(n)
            count = i >= WARMUP
            for system, cat in cats.items():

                def timed(
                    op: str,
                    fn: Callable[..., Any],
                    *args: Any,
                    system: str = system,
                    count: bool = count,
                ) -> Any:
                    t0 = time.perf_counter()
                    out = fn(*args)
                    if count:
                        res.times.setdefault((system, op), []).append(time.perf_counter() - t0)
                    return out

                timed("create_table", cat.create_table, (namespace(j), f"new{i:06d}"), schema())
                loaded = timed("load_table", cat.load_table, (namespace(j), table(j)))
                if not loaded.metadata_location.endswith(".metadata.json"):
                    raise RuntimeError(f"{system}: unexpected metadata location")
                split.commit = split.metadata_io = 0.0
                t0 = time.perf_counter()
                appended[system].append(rows(i))
                total = time.perf_counter() - t0
                if count:
                    res.times.setdefault((system, "append"), []).append(total)
                    parts = {
                        "data+manifests": total - split.commit,
                        "metadata I/O": split.metadata_io,
                        "catalog": split.commit - split.metadata_io,
                    }
                    for part, v in parts.items():
                        res.split.setdefault((system, part), []).append(v)
                listed = timed("list_tables", cat.list_tables, namespace(j))
                res.listed[system] = len(listed)
    for system, t in appended.items():
        got = cats[system].load_table(("template", "appended")).scan().to_arrow().num_rows
        if got != 10 * (calls + WARMUP):
            raise RuntimeError(f"{system}: {got} rows after {calls + WARMUP} appends of 10")
        del t
    return res


def p(xs: Sequence[float] | None, q: float = 0.5) -> float | None:
    return None if not xs else harness.percentile(xs, q)


def ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 1e3:.2f}"


def report(results: Sequence[SizeResult], calls: int) -> str:
    out = [
        "## Latency per call, p50 (p90), ms",
        "",
        f"{calls} calls of each kind per size after {WARMUP} warm-up calls; "
        "ratio = olympia p50 / SqlCatalog p50.",
        "",
    ]
    rows_ = []
    for r in results:
        for op in OPS:
            o, s = r.times.get(("olympia", op)), r.times.get(("sql", op))
            rows_.append(
                [
                    f"{r.n:,}",
                    op,
                    f"{ms(p(o))} ({ms(p(o, 0.9))})",
                    f"{ms(p(s))} ({ms(p(s, 0.9))})",
                    harness.fmt_ratio(p(o), p(s)),
                ]
            )
    out.append(harness.md_table(["tables", "operation", "olympia", "SqlCatalog", "ratio"], rows_))
    out += ["", "## Where an append's time goes, p50 of each part, ms", ""]
    rows_ = []
    for r in results:
        for system in ("olympia", "sql"):
            rows_.append(
                [f"{r.n:,}", system] + [ms(p(r.split.get((system, part)))) for part in SPLIT]
            )
    out.append(harness.md_table(["tables", "system", *SPLIT], rows_))
    if len(results) > 1:
        first, last = results[0], results[-1]
        out += [
            "",
            f"## Growth: olympia p50 at {last.n:,} tables / at {first.n:,}",
            "",
        ]
        out.append(
            harness.md_table(
                ["operation", "olympia", "SqlCatalog"],
                [
                    [
                        op,
                        harness.fmt_ratio(
                            p(last.times.get(("olympia", op))), p(first.times.get(("olympia", op)))
                        ),
                        harness.fmt_ratio(
                            p(last.times.get(("sql", op))), p(first.times.get(("sql", op)))
                        ),
                    ]
                    for op in OPS
                ],
            )
        )
    out += ["", "## Building (not timed per call)", ""]
    out.append(
        harness.md_table(
            ["tables", "olympia build s", "SqlCatalog build s", "listed olympia / SqlCatalog"],
            [
                [
                    f"{r.n:,}",
                    f"{r.build.get('olympia_s', 0):.1f}",
                    f"{r.build.get('peer_s', 0):.1f}",
                    f"{r.listed.get('olympia')} / {r.listed.get('sql')}",
                ]
                for r in results
            ],
        )
    )
    return "\n".join(out) + "\n"


def run_size(tmp: str, n: int, calls: int, seed: int) -> SizeResult:
    folder = os.path.join(tmp, f"size-{n}")
    warehouse = os.path.join(folder, "olympia")
    peer_folder = os.path.join(folder, "sql")
    os.makedirs(os.path.join(peer_folder, "warehouse"))
    harness.log(f"N={n}: building both catalogs")
    built = harness.in_child(build, warehouse, peer_folder, n)
    harness.log(
        f"  olympia {built['olympia_s']:.1f} s, SqlCatalog {built['peer_s']:.1f} s; measuring"
    )
    res: SizeResult = harness.in_child(measure, warehouse, peer_folder, n, calls, seed)
    res.build = built
    for op in OPS:
        o, s = p(res.times.get(("olympia", op))), p(res.times.get(("sql", op)))
        harness.log(
            f"  {op}: olympia {ms(o)} ms, SqlCatalog {ms(s)} ms, ratio {harness.fmt_ratio(o, s)}"
        )
    shutil.rmtree(folder, ignore_errors=True)
    return res


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="sizes 10^3 and 10^4, 20 calls")
    parser.add_argument("--sizes", type=harness.parse_sizes, help="comma-separated catalog sizes")
    parser.add_argument("--calls", type=int, help="calls of each kind per size (default 100)")
    harness.add_common_options(parser, "iceberg-<date>[-quick].md", seed=20261123, peer=False)
    args = parser.parse_args(argv)
    sizes = args.sizes or ([1_000, 10_000] if args.quick else [1_000, 10_000, 100_000])
    calls = args.calls or (20 if args.quick else 100)
    tmp = tempfile.mkdtemp(prefix="olympia-bench-iceberg-", dir=args.tmp)
    started = datetime.datetime.now(datetime.UTC)
    try:
        results = [run_size(tmp, n, calls, args.seed) for n in sizes]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    finished = datetime.datetime.now(datetime.UTC)
    command = harness.command_line("bench_iceberg", argv)
    machine = harness.machine_info(tmp)
    text = "\n".join(
        [
            f"# PyIceberg catalog benchmark, {started:%Y-%m-%d}",
            "",
            f"Command: `{command}` (from the project root). Started {started:%Y-%m-%d %H:%M} UTC, "
            f"took {(finished - started).total_seconds() / 60:.1f} min.",
            "",
            "What is measured and how: the docstring of `benchmarks/bench_iceberg.py`.",
            "",
            harness.md_table(["machine", ""], [[k, v] for k, v in machine]),
            "",
            report(results, calls),
        ]
    )
    print(text)
    if not args.no_save:
        name = f"iceberg-{started:%Y-%m-%d}{'-quick' if args.quick else ''}.md"
        harness.write_results(harness.results_path(args.out, name), text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
