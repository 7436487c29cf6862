"""Core benchmark: bulk load, single-object commits and lookups, against a SQL catalog peer.

For each catalog size N (default 10^3, 10^4, 10^5, 10^6 table objects spread
over 100 namespaces) this measures, on a local-directory olympia catalog with
the default definition (node order 128, zstd):

1. bulk load: all N objects in one commit (``tree.apply`` + ``CatalogStore.commit``):
   wall time, files and bytes written, peak RSS;
2. single-object commits: update one random existing table per commit: files
   and bytes written per commit (expected: the root plus one node per level
   below it) and latency;
3. lookup of a random table key: cold (a fresh ``load_catalog`` per lookup)
   and warm (one ``Catalog`` reused, caches filled);
4. the same operations on the peer, PyIceberg's ``SqlCatalog`` on SQLite,
   holding the same N table entries, and the olympia/peer latency ratios.

Every size runs in its own child process, so that its peak RSS is its own.
Nothing here asserts on timings; this is a measurement, not a test.

Run from the project root::

    python -m benchmarks.bench_core            # all sizes, writes benchmarks/results/
    python -m benchmarks.bench_core --quick    # 10^3 and 10^4 only, a smoke run
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import olympia
from olympia import tree
from olympia.keys import KeyCodec
from olympia.proto.actions_pb2 import TABLE_UPDATE, Action
from olympia.proto.objects_pb2 import Table
from olympia.store import CatalogStore, Root

try:
    from benchmarks import harness
except ImportError:  # run as a script: benchmarks/ is on sys.path
    import harness  # type: ignore[no-redef]

DEFAULT_SIZES = (1_000, 10_000, 100_000, 1_000_000)
QUICK_SIZES = (1_000, 10_000)
N_NAMESPACES = 100
PEER_CATALOG_NAME = harness.PEER_NAME


# --- the data set --------------------------------------------------------------


def namespace_of(j: int) -> str:
    return f"ns_{j % N_NAMESPACES:03d}"


def table_name(j: int) -> str:
    return f"tbl_{j:08d}"


def metadata_location(j: int, generation: int) -> str:
    """An Iceberg-like metadata.json location of about 60 bytes."""
    return f"s3://wh/{namespace_of(j)}/{table_name(j)}/metadata/{generation:05d}-{j:08x}.json"


def table_value(j: int, generation: int) -> bytes:
    """The serialized ``olympia.v1.Table`` of table ``j``."""
    return Table(
        namespace=namespace_of(j),
        name=table_name(j),
        format="iceberg",
        metadata_location=metadata_location(j, generation),
    ).SerializeToString()


def table_ids_in_key_order(n: int) -> Iterator[int]:
    """Table ids 0..n-1 in the order of their keys (namespace first, then name)."""
    for ns in range(min(n, N_NAMESPACES)):
        yield from range(ns, n, N_NAMESPACES)


# --- small helpers -------------------------------------------------------------


def dir_bytes(path: str) -> int:
    total = 0
    for folder, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(folder, name)).st_size
    return total


# --- results of one size -------------------------------------------------------


@dataclass
class SizeResult:
    n: int
    height: int = 0
    gen_s: float = 0.0
    bulk_apply_s: float = 0.0
    bulk_write_s: float = 0.0
    bulk_files: int = 0
    bulk_bytes: int = 0
    catalog_dir_bytes: int = 0
    rss_before_bulk_kb: int | None = None
    peak_rss_after_bulk_kb: int = 0
    commit_files: list[int] = field(default_factory=list)
    commit_bytes: list[int] = field(default_factory=list)
    commit_s: list[float] = field(default_factory=list)
    cold_open_s: list[float] = field(default_factory=list)
    cold_lookup_s: list[float] = field(default_factory=list)
    warm_latest_s: list[float] = field(default_factory=list)
    warm_pinned_s: list[float] = field(default_factory=list)
    peer: bool = False
    peer_bulk_s: float = 0.0
    peer_db_bytes: int = 0
    peer_commit_s: list[float] = field(default_factory=list)
    peer_nsprops_commit_s: list[float] = field(default_factory=list)
    peer_cold_open_s: list[float] = field(default_factory=list)
    peer_cold_lookup_s: list[float] = field(default_factory=list)
    peer_warm_lookup_s: list[float] = field(default_factory=list)
    peer_cold_exists_s: list[float] = field(default_factory=list)
    peer_warm_exists_s: list[float] = field(default_factory=list)
    peer_skip_reason: str = ""


@dataclass(frozen=True)
class Params:
    commits: int
    cold: int
    warm: int
    seed: int
    tmp: str | None
    peer: bool


# --- olympia -------------------------------------------------------------------


def olympia_update(store: CatalogStore, key: str, value: bytes) -> Root:
    """One single-object commit: read the latest root, replace one value, publish.

    The root carries one TABLE_UPDATE action row, as a table update made
    through the catalog API would.
    """
    version = store.latest_version()
    base = store.load_root(version)
    txn = store.new_transaction_id()
    action = Action(
        type=TABLE_UPDATE,
        object_key=key,
        table=Table.FromString(value),
        update_fields=["metadata_location"],
    ).SerializeToString()
    new_root = tree.apply(base.node, [(key, value)], base.order, store.load_node)
    return store.commit(
        version + 1,
        new_root,
        base.definition,
        txn,
        actions=[(key, action)],
        previous_root=base.path,
        begin_version=version,
        isolation="snapshot",
    )


class OlympiaSide:
    """An olympia catalog of N tables in a local directory."""

    def __init__(self, n: int, tmp: str, params: Params, res: SizeResult) -> None:
        self.n, self.params, self.res = n, params, res
        self.rng = random.Random(params.seed)
        self.location = os.path.join(tmp, "olympia")
        self.catalog = olympia.create_catalog(self.location)  # default: order 128, zstd
        self.keys: KeyCodec = self.catalog.latest().keys

    def key(self, j: int) -> str:
        return self.keys.table(namespace_of(j), table_name(j))

    def bulk_load(self) -> None:
        n, res, store = self.n, self.res, self.catalog.store
        t0 = time.perf_counter()
        changes = [(self.key(j), table_value(j, 1)) for j in table_ids_in_key_order(n)]
        res.gen_s = time.perf_counter() - t0
        res.rss_before_bulk_kb = harness.rss_now_kb()
        harness.log(f"[N={n}] built {len(changes)} objects in {res.gen_s:.1f} s; bulk loading")
        base = store.load_root(0)
        gc.collect()
        t0 = time.perf_counter()
        new_root = tree.apply(base.node, changes, base.order, store.load_node)
        t1 = time.perf_counter()
        done = store.commit(
            1, new_root, base.definition, store.new_transaction_id(), previous_root=base.path
        )
        t2 = time.perf_counter()
        res.bulk_apply_s, res.bulk_write_s = t1 - t0, t2 - t1
        res.bulk_files, res.bulk_bytes = store.last_write.files, store.last_write.bytes
        res.peak_rss_after_bulk_kb = harness.peak_rss_kb()
        res.height = done.node.height
        res.catalog_dir_bytes = dir_bytes(self.location)
        harness.log(
            f"[N={n}] bulk load {t2 - t0:.2f} s ({res.bulk_files} files, "
            f"{res.bulk_bytes / 1e6:.1f} MB, peak RSS {res.peak_rss_after_bulk_kb / 1024:.0f} MB)"
        )

    def commit(self, generation: int, record: bool = True) -> None:
        store = self.catalog.store
        j = self.rng.randrange(self.n)
        key, value = self.key(j), table_value(j, generation)
        elapsed = harness.timed(lambda: olympia_update(store, key, value))
        if record:
            self.res.commit_s.append(elapsed)
            self.res.commit_files.append(store.last_write.files)
            self.res.commit_bytes.append(store.last_write.bytes)

    def cold_lookup(self) -> None:
        """Open the catalog afresh (empty caches) and look up one random table."""
        j = self.rng.randrange(self.n)
        key = self.key(j)
        t0 = time.perf_counter()
        fresh = olympia.load_catalog(self.location)
        t1 = time.perf_counter()
        raw = fresh.latest().get(key)
        t2 = time.perf_counter()
        fresh.close()
        if raw is None or Table.FromString(raw).name != table_name(j):
            raise RuntimeError(f"olympia lookup of {key.rstrip()!r} returned {raw!r}")
        self.res.cold_open_s.append(t1 - t0)
        self.res.cold_lookup_s.append(t2 - t0)

    def warm_setup(self) -> None:
        """Open one catalog for the warm lookups and fill its caches."""
        self.catalog.close()
        self.reader = olympia.load_catalog(self.location)
        self.pinned = self.reader.latest()
        self.sample = [self.key(self.rng.randrange(self.n)) for _ in range(self.params.warm)]
        for key in self.sample:
            if self.reader.latest().get(key) is None:
                raise RuntimeError(f"olympia lookup of {key.rstrip()!r} found nothing")

    def warm_lookup(self, i: int) -> None:
        reader, key = self.reader, self.sample[i]
        self.res.warm_latest_s.append(harness.timed(lambda: reader.latest().get(key)))

    def warm_pinned_lookups(self) -> None:
        pinned = self.pinned
        for key in self.sample:
            self.res.warm_pinned_s.append(harness.timed(lambda key=key: pinned.get(key)))
        self.reader.close()


# --- the peer: PyIceberg SqlCatalog on SQLite ----------------------------------


class PeerSide:
    """PyIceberg's SqlCatalog on SQLite holding the same N table entries."""

    def __init__(self, n: int, tmp: str, params: Params, res: SizeResult) -> None:
        self.n, self.params, self.res = n, params, res
        self.rng = random.Random(params.seed + 1)
        self.db_path, self.warehouse = harness.peer_paths(tmp)
        self.catalog = self.open()  # creates the catalog tables

    def open(self) -> Any:
        return harness.sql_catalog(self.db_path, self.warehouse)

    def bulk_load(self) -> None:
        """Insert the N entries through SQL, into the tables SqlCatalog created."""
        n = self.n
        rows = [
            (PEER_CATALOG_NAME, namespace_of(j), table_name(j), metadata_location(j, 1), None)
            for j in table_ids_in_key_order(n)
        ]
        namespaces = [
            (PEER_CATALOG_NAME, namespace_of(i), "exists", "true")
            for i in range(min(n, N_NAMESPACES))
        ]
        t0 = time.perf_counter()
        harness.bulk_insert(str(self.db_path), namespaces, rows)
        self.res.peer_bulk_s = time.perf_counter() - t0
        self.res.peer = True
        harness.log(f"[N={n}] peer bulk INSERT {self.res.peer_bulk_s:.2f} s")

    @staticmethod
    def where_table(ns: str, name: str) -> Any:
        """The WHERE clause of SqlCatalog.load_table for one table."""
        from pyiceberg.catalog.sql import IcebergTables

        return (
            (IcebergTables.catalog_name == PEER_CATALOG_NAME)
            & (IcebergTables.table_namespace == ns)
            & (IcebergTables.table_name == name)
            & ((IcebergTables.iceberg_type == "TABLE") | IcebergTables.iceberg_type.is_(None))
        )

    def entry_lookup(self, cat: Any, ns: str, name: str) -> str | None:
        """The catalog read of SqlCatalog.load_table: the same SELECT, in a new
        Session on the catalog's engine, without reading metadata.json."""
        from pyiceberg.catalog.sql import IcebergTables
        from sqlalchemy import select
        from sqlalchemy.orm import Session

        with Session(cat.engine) as session:
            row = session.scalar(select(IcebergTables).where(self.where_table(ns, name)))
            return None if row is None else str(row.metadata_location)

    def cas_update(self, ns: str, name: str, new_location: str) -> None:
        """The catalog commit of SqlCatalog.commit_table: read the current entry,
        then the compare-and-swap UPDATE of its row, and COMMIT."""
        from pyiceberg.catalog.sql import IcebergTables
        from sqlalchemy import update
        from sqlalchemy.orm import Session

        current = self.entry_lookup(self.catalog, ns, name)
        with Session(self.catalog.engine) as session:
            result = session.execute(
                update(IcebergTables)
                .where(self.where_table(ns, name), IcebergTables.metadata_location == current)
                .values(metadata_location=new_location, previous_metadata_location=current)
            )
            matched = getattr(result, "rowcount", None)
            if matched != 1:
                raise RuntimeError(f"peer update of {ns}.{name} matched {matched} rows")
            session.commit()

    def commit(self, generation: int, record: bool = True) -> None:
        j = self.rng.randrange(self.n)
        ns, name, loc = namespace_of(j), table_name(j), metadata_location(j, generation)
        elapsed = harness.timed(lambda: self.cas_update(ns, name, loc))
        if record:
            self.res.peer_commit_s.append(elapsed)

    def namespace_commit(self, i: int) -> None:
        ns = namespace_of(self.rng.randrange(self.n))
        updates = {"bench.counter": str(i)}
        elapsed = harness.timed(
            lambda: self.catalog.update_namespace_properties(ns, updates=updates)
        )
        self.res.peer_nsprops_commit_s.append(elapsed)

    def cold_lookup(self) -> None:
        """A new SqlCatalog (new engine and connection), then one entry lookup."""
        j = self.rng.randrange(self.n)
        t0 = time.perf_counter()
        fresh = self.open()
        t1 = time.perf_counter()
        loc = self.entry_lookup(fresh, namespace_of(j), table_name(j))
        t2 = time.perf_counter()
        fresh.close()
        if loc is None:
            raise RuntimeError(f"peer lookup of table {j} found nothing")
        self.res.peer_cold_open_s.append(t1 - t0)
        self.res.peer_cold_lookup_s.append(t2 - t0)

    def warm_setup(self) -> None:
        self.sample = [
            (namespace_of(j), table_name(j))
            for j in self.rng.choices(range(self.n), k=self.params.warm)
        ]
        for ns, name in self.sample:  # fill the caches
            self.entry_lookup(self.catalog, ns, name)

    def warm_lookup(self, i: int) -> None:
        peer, (ns, name) = self.catalog, self.sample[i]
        self.res.peer_warm_lookup_s.append(harness.timed(lambda: self.entry_lookup(peer, ns, name)))

    def table_exists_lookups(self) -> None:
        """SqlCatalog.table_exists, the public API: it loads the table, which
        reads and parses its metadata.json, so a sample of entries is pointed
        at a real one first."""
        import sqlite3

        from pyiceberg.schema import Schema
        from pyiceberg.types import LongType, NestedField

        n, res, params, rng, peer = self.n, self.res, self.params, self.rng, self.catalog
        peer.create_namespace("bench_meta")
        schema = Schema(NestedField(field_id=1, name="id", field_type=LongType(), required=False))
        template = peer.create_table(("bench_meta", "template"), schema=schema)
        real_location = template.metadata_location
        peer.drop_table(("bench_meta", "template"))
        peer.drop_namespace("bench_meta")
        exists_sample = sorted({rng.randrange(n) for _ in range(64)})
        with contextlib.closing(sqlite3.connect(self.db_path)) as con, con:
            con.executemany(
                "UPDATE iceberg_tables SET metadata_location = ?"
                " WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?",
                [
                    (real_location, PEER_CATALOG_NAME, namespace_of(j), table_name(j))
                    for j in exists_sample
                ],
            )
        gc.collect()
        for _ in range(params.cold):
            ident = (namespace_of(j := rng.choice(exists_sample)), table_name(j))
            t0 = time.perf_counter()
            fresh = self.open()
            found = fresh.table_exists(ident)
            t1 = time.perf_counter()
            fresh.close()
            if not found:
                raise RuntimeError(f"peer table_exists{ident} returned False")
            res.peer_cold_exists_s.append(t1 - t0)
        for j in exists_sample:
            peer.table_exists((namespace_of(j), table_name(j)))
        gc.collect()
        for j in rng.choices(exists_sample, k=params.warm):
            ident = (namespace_of(j), table_name(j))
            res.peer_warm_exists_s.append(
                harness.timed(lambda ident=ident: peer.table_exists(ident))
            )

    def close(self) -> None:
        self.catalog.close()
        self.res.peer_db_bytes = os.path.getsize(self.db_path)


# --- one size, in a child process ----------------------------------------------


def run_size(n: int, params: Params) -> SizeResult:
    """Measure one catalog size. The two sides' commits and lookups are
    interleaved, so that both see the same machine and storage conditions
    (fsync latency and the load of other processes drift)."""
    res = SizeResult(n=n)
    tmp = tempfile.mkdtemp(prefix=f"olympia-bench-{n}-", dir=params.tmp)
    try:
        ours = OlympiaSide(n, tmp, params, res)
        ours.bulk_load()
        peer: PeerSide | None = None
        if params.peer:
            try:
                import pyiceberg.catalog.sql  # noqa: F401
            except ImportError as exc:
                res.peer_skip_reason = f"pyiceberg[sql-sqlite] is not installed ({exc})"
            else:
                peer = PeerSide(n, tmp, params, res)
                peer.bulk_load()
        sides: list[OlympiaSide | PeerSide] = [ours] if peer is None else [ours, peer]

        harness.log(f"[N={n}] single-object commits")
        gc.collect()
        for side in sides:
            side.commit(2, record=False)  # warm-up
        for i in range(params.commits):
            for side in sides:
                side.commit(3 + i)
        if peer is not None:
            for i in range(params.commits):
                peer.namespace_commit(i)

        harness.log(f"[N={n}] lookups")
        gc.collect()
        for _ in range(params.cold):
            for side in sides:
                side.cold_lookup()
        for side in sides:
            side.warm_setup()
        gc.collect()
        for i in range(params.warm):
            for side in sides:
                side.warm_lookup(i)
        ours.warm_pinned_lookups()
        if peer is not None:
            peer.table_exists_lookups()
            peer.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return res


def run_size_in_child(n: int, args: argparse.Namespace) -> SizeResult:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    try:
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--worker",
            str(n),
            "--worker-out",
            out,
            "--commits",
            str(args.commits),
            "--cold",
            str(args.cold),
            "--warm",
            str(args.warm),
            "--seed",
            str(args.seed),
        ]
        if args.tmp:
            cmd += ["--tmp", args.tmp]
        if args.no_peer:
            cmd.append("--no-peer")
        subprocess.run(cmd, check=True, cwd=harness.PROJECT_ROOT)
        with open(out) as f:
            return SizeResult(**json.load(f))
    finally:
        with contextlib.suppress(OSError):
            os.unlink(out)


# --- the report ----------------------------------------------------------------


def ms(x: float) -> str:
    return f"{x * 1e3:.2f}"


def us(x: float) -> str:
    return f"{x * 1e6:.0f}"


def ratio(a: Sequence[float], b: Sequence[float]) -> str:
    if not a or not b:
        return "n/a"
    return f"{harness.median(a) / harness.median(b):.2f}"


def mb(x: float) -> str:
    return f"{x / 1e6:.1f}"


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    return harness.md_table(header, rows, align="---:")


def fmt_n(n: int) -> str:
    exp = len(str(n)) - 1
    return f"10^{exp}" if n == 10**exp else f"{n:,}"


def span(values: Sequence[int]) -> str:
    if not values:
        return "n/a"
    lo, hi = min(values), max(values)
    return str(lo) if lo == hi else f"{lo}-{hi}"


def report_tables(results: Sequence[SizeResult]) -> str:
    parts: list[str] = []
    parts.append(
        "### Summary: olympia / peer latency ratios (medians; < 1 means olympia is faster)"
    )
    parts.append(
        md_table(
            ["N", "commit", "cold lookup", "warm lookup", "warm lookup vs table_exists"],
            [
                [
                    fmt_n(r.n),
                    ratio(r.commit_s, r.peer_commit_s),
                    ratio(r.cold_lookup_s, r.peer_cold_lookup_s),
                    ratio(r.warm_latest_s, r.peer_warm_lookup_s),
                    ratio(r.warm_latest_s, r.peer_warm_exists_s),
                ]
                for r in results
            ],
        )
    )
    parts.append("### 1. Bulk load: N objects in one commit")
    parts.append(
        md_table(
            [
                "N",
                "tree height",
                "apply s",
                "write s",
                "total s",
                "files",
                "MB written",
                "MB on disk",
                "peak RSS MB",
                "RSS before bulk MB",
                "(objects built s)",
                "peer bulk INSERT s",
                "peer db MB",
            ],
            [
                [
                    fmt_n(r.n),
                    str(r.height),
                    f"{r.bulk_apply_s:.2f}",
                    f"{r.bulk_write_s:.2f}",
                    f"{r.bulk_apply_s + r.bulk_write_s:.2f}",
                    str(r.bulk_files),
                    mb(r.bulk_bytes),
                    mb(r.catalog_dir_bytes),
                    f"{r.peak_rss_after_bulk_kb / 1024:.0f}",
                    "n/a" if r.rss_before_bulk_kb is None else f"{r.rss_before_bulk_kb / 1024:.0f}",
                    f"{r.gen_s:.2f}",
                    f"{r.peer_bulk_s:.2f}" if r.peer else "n/a",
                    mb(r.peer_db_bytes) if r.peer else "n/a",
                ]
                for r in results
            ],
        )
    )
    parts.append("### 2. Single-object commits (update one random existing table)")
    parts.append(
        md_table(
            [
                "N",
                "commits",
                "files/commit",
                "nodes written (height+1), inline ones in the root file",
                "KB/commit median",
                "KB/commit max",
                "olympia ms p50",
                "olympia ms p90",
                "peer CAS UPDATE ms p50",
                "peer ms p90",
                "ratio p50",
                "peer update_namespace_properties ms p50",
            ],
            [
                [
                    fmt_n(r.n),
                    str(len(r.commit_s)),
                    span(r.commit_files),
                    str(r.height + 1),
                    f"{harness.median(r.commit_bytes) / 1e3:.1f}",
                    f"{max(r.commit_bytes, default=0) / 1e3:.1f}",
                    ms(harness.median(r.commit_s)),
                    ms(harness.percentile(r.commit_s, 0.9)),
                    ms(harness.median(r.peer_commit_s)) if r.peer else "n/a",
                    ms(harness.percentile(r.peer_commit_s, 0.9)) if r.peer else "n/a",
                    ratio(r.commit_s, r.peer_commit_s),
                    ms(harness.median(r.peer_nsprops_commit_s)) if r.peer else "n/a",
                ]
                for r in results
            ],
        )
    )
    parts.append("### 3. Lookup of a random table key")
    parts.append(
        md_table(
            [
                "N",
                "olympia cold ms p50",
                "olympia cold ms p90",
                "(of which open ms p50)",
                "peer cold ms p50",
                "peer cold ms p90",
                "(of which open ms p50)",
                "cold ratio",
                "olympia warm us p50",
                "olympia warm us p90",
                "(pinned version us p50)",
                "peer warm us p50",
                "peer warm us p90",
                "warm ratio",
                "peer table_exists cold ms p50",
                "peer table_exists warm us p50",
            ],
            [
                [
                    fmt_n(r.n),
                    ms(harness.median(r.cold_lookup_s)),
                    ms(harness.percentile(r.cold_lookup_s, 0.9)),
                    ms(harness.median(r.cold_open_s)),
                    ms(harness.median(r.peer_cold_lookup_s)) if r.peer else "n/a",
                    ms(harness.percentile(r.peer_cold_lookup_s, 0.9)) if r.peer else "n/a",
                    ms(harness.median(r.peer_cold_open_s)) if r.peer else "n/a",
                    ratio(r.cold_lookup_s, r.peer_cold_lookup_s),
                    us(harness.median(r.warm_latest_s)),
                    us(harness.percentile(r.warm_latest_s, 0.9)),
                    us(harness.median(r.warm_pinned_s)),
                    us(harness.median(r.peer_warm_lookup_s)) if r.peer else "n/a",
                    us(harness.percentile(r.peer_warm_lookup_s, 0.9)) if r.peer else "n/a",
                    ratio(r.warm_latest_s, r.peer_warm_lookup_s),
                    ms(harness.median(r.peer_cold_exists_s)) if r.peer else "n/a",
                    us(harness.median(r.peer_warm_exists_s)) if r.peer else "n/a",
                ]
                for r in results
            ],
        )
    )
    skipped = {r.peer_skip_reason for r in results if r.peer_skip_reason}
    if skipped:
        parts.append("Peer skipped: " + "; ".join(sorted(skipped)))
    return "\n\n".join(parts)


METHOD = """\
### What was measured

- Data: N `olympia.v1.Table` objects (about 96 bytes serialized, with a
  `metadata_location` of about 60 bytes), keys from `KeyCodec.table(namespace,
  name)`, spread evenly over 100 namespaces. Catalog on a local directory,
  default definition (node order 128, zstd). Each size runs in a fresh child
  process.
- Bulk load: `tree.apply` of all N sorted changes onto the empty version 0,
  then `CatalogStore.commit` of version 1 (no action rows). "apply" is the
  in-memory tree build, "write" is encoding, hashing and writing the files
  (with fsync). "objects built" (building keys and serialized values) is not
  part of the total. Peak RSS is `VmHWM` of the child right after the bulk
  load; "RSS before bulk" is its RSS with the N changes built in memory.
- Single-object commit (olympia): `latest_version()` (probing storage), load
  that root, `tree.apply` of one changed value, `CatalogStore.commit` with one
  TABLE_UPDATE action row. Files and bytes are `CatalogStore.last_write`.
  The writer's `CatalogStore` is long-lived (its node cache is warm).
- Single-entry commit (peer): what `SqlCatalog.commit_table` does in the
  catalog: read the entry (the SELECT of `load_table`), then the
  compare-and-swap `UPDATE iceberg_tables ... WHERE metadata_location = <current>`
  and COMMIT, each in a SQLAlchemy `Session` on the `SqlCatalog`'s engine.
  It leaves out writing a new metadata.json, which olympia's number leaves
  out too. SQLite runs with its defaults (rollback journal, synchronous=FULL),
  so both sides make the commit durable with fsync. The public
  `update_namespace_properties` is shown for reference.
- Cold lookup: olympia: `load_catalog(uri)` then `.latest().get(key)` (new
  store, empty caches); peer: a new `SqlCatalog(...)` (new engine and
  connection) then the entry SELECT. Both include opening; the open share is
  shown. The OS page cache is warm on both sides.
- Warm lookup: one open catalog, the caches filled by one pass over 1000
  random keys, then a timed pass over the same keys. olympia:
  `catalog.latest().get(key)` (probes the latest version on storage each
  time, so reads are fresh); "pinned version" reuses one `CatalogVersion`.
  Peer: the entry SELECT through the same `SqlCatalog`'s engine.
- `table_exists`: PyIceberg's public lookup; it loads the table, that is, reads
  and parses the metadata.json (a small real one, for a sample of 64 entries).
  Shown for reference; the ratios use the entry SELECT.
- Ratios are olympia median / peer median.
"""


def load_average() -> str:
    load = harness.load_average()
    return "n/a" if load != load else f"{load:.2f}"


# --- entry point -----------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--sizes",
        type=harness.parse_sizes,
        default=list(DEFAULT_SIZES),
        help="comma-separated catalog sizes (default 1000,10000,100000,1000000)",
    )
    parser.add_argument("--quick", action="store_true", help="sizes 1000,10000 (a smoke run)")
    parser.add_argument("--commits", type=int, default=50, help="single-object commits per size")
    parser.add_argument("--cold", type=int, default=50, help="cold lookups (fresh opens) per size")
    parser.add_argument("--warm", type=int, default=1000, help="warm lookups per size")
    harness.add_common_options(parser, "core-<date>[-quick].md", seed=20240601)
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker is not None:
        params = Params(args.commits, args.cold, args.warm, args.seed, args.tmp, not args.no_peer)
        res = run_size(args.worker, params)
        with open(args.worker_out, "w") as f:
            json.dump(asdict(res), f)
        return 0

    sizes = list(QUICK_SIZES) if args.quick else args.sizes
    today = datetime.date.today().isoformat()
    load_before = load_average()
    started = time.perf_counter()
    results = [run_size_in_child(n, args) for n in sizes]
    elapsed = time.perf_counter() - started
    load_after = load_average()

    command = harness.command_line("bench_core", sys.argv[1:], as_run=True)
    machine = harness.machine_list()
    tables = report_tables(results)
    doc = "\n\n".join(
        [
            f"# Core benchmark, {today}",
            f"Command (from the project root): `{command}`",
            "\n".join(f"- {k}: {v}" for k, v in machine),
            f"Sizes: {', '.join(fmt_n(n) for n in sizes)}; {args.commits} commits, "
            f"{args.cold} cold and {args.warm} warm lookups per size; "
            f"whole run {elapsed:.0f} s. Load average (1 min) of the machine: "
            f"{load_before} before, {load_after} after (other processes share the cores; "
            "the two sides are interleaved so that both see the same load).",
            tables,
            METHOD,
        ]
    )
    print(doc)
    if not args.no_save:
        suffix = "-quick" if args.quick else ""
        out = harness.results_path(args.out, f"core-{today}{suffix}.md")
        harness.write_results(out, doc.rstrip() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
