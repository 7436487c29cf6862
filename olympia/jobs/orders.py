"""The main job: a PySpark pipeline that keeps four Iceberg tables consistent
with each other, on an olympia catalog with nothing else running.

``python -m olympia.jobs.orders [--warehouse URI] [--batches N]
[--orders-per-batch M] [--seed S]`` (``bash scripts/main.sh`` runs it).

- The catalog lives in a local folder (a new temporary one unless
  ``--warehouse`` is given; ``s3://`` with ``-o s3.endpoint=...`` and the
  other ``s3.*`` options, and ``--data`` for a local folder for the tables'
  files unless ``--spark-jars`` gives Spark Iceberg's AWS bundle); the Iceberg
  REST server runs on a thread of this process and Spark (one local JVM)
  reaches it over HTTP.
- Each batch of raw orders becomes, in ONE catalog transaction
  (``olympia.spark.transaction``, SERIALIZABLE): rows appended to
  ``shop.orders_raw``, cleaned rows appended to ``shop.orders``, per-customer
  totals merged into ``shop.customer_totals`` and stock merged into
  ``shop.inventory``: one catalog version per batch.
- A second writer (PyIceberg on the same catalog, on a thread) runs two
  SERIALIZABLE transactions while batch 2 runs: a partner feed appending to
  ``shop.orders_raw`` (rebased onto the batch and lands) and a VIP report that
  reads ``shop.customer_totals`` (refused: the batch changed what it read).
- At the end: the version history as ``olympia log`` prints it (each
  commit carries a message saying what it was), the invariants checked at
  every version (time travel), the tables as of batch 1, and the elapsed time.

While Spark starts and while each batch runs it shows what it is doing: a
spinner on a terminal, a line per step otherwise (so that logs show it).
Spark's own warehouse folder is a temporary one (``olympia.spark.session``):
nothing is left in the folder the job runs from.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog import load_catalog
from pyiceberg.table import StaticTable
from rich import box
from rich.console import Console
from rich.table import Table as RichTable

from olympia.errors import CommitConflictError, OlympiaError
from olympia.iceberg import OlympiaCatalog
from olympia.maintenance import VersionInfo
from olympia.proto import actions_pb2 as apb
from olympia.storage.options import storage_properties

NS = "shop"
RAW, ORDERS, TOTALS, INVENTORY, VIP = (
    "orders_raw",
    "orders",
    "customer_totals",
    "inventory",
    "vip_customers",
)
BATCH_TABLES = (RAW, ORDERS, TOTALS, INVENTORY)
ITEMS = tuple(f"item-{i:02d}" for i in range(1, 25))
STOCK_START = 1_000_000
CATALOG_IMPL = "olympia.iceberg.OlympiaCatalog"
AWS_SDK_CLASS = "software/amazon/awssdk/services/s3/S3Client.class"
MAX_BATCH_ATTEMPTS = 3
AUTHOR = "olympia main job"


class JobError(OlympiaError):
    """The job cannot run as asked (bad option, warehouse in use, missing jar)."""


# --- options -------------------------------------------------------------------------


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m olympia.jobs.orders",
        description="A PySpark pipeline on an embedded olympia catalog: every batch of "
        "orders updates four Iceberg tables as one catalog version, beside a second "
        "writer whose commits are rebased or refused.",
        epilog="examples:\n"
        "  python -m olympia.jobs.orders\n"
        "  python -m olympia.jobs.orders --batches 3 --orders-per-batch 200\n"
        "  python -m olympia.jobs.orders --warehouse s3://bucket/lake "
        "-o s3.endpoint=http://localhost:9000 \\\n"
        "      -o s3.access-key-id=KEY -o s3.secret-access-key=SECRET "
        "--spark-jars iceberg-aws-bundle-1.10.2.jar",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--warehouse",
        metavar="URI",
        help="the catalog: a folder, file://... or s3://bucket/prefix "
        "(default: a new temporary folder)",
    )
    parser.add_argument(
        "--batches", type=_positive, default=8, help="batches to run, at least 2 (default 8)"
    )
    parser.add_argument(
        "--orders-per-batch",
        type=_positive,
        default=2000,
        metavar="N",
        help="raw orders in each batch (default 2000)",
    )
    parser.add_argument("--seed", type=int, default=7, help="random seed of the data (default 7)")
    parser.add_argument(
        "-o",
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a catalog property, e.g. s3.endpoint, s3.region, s3.access-key-id, "
        "s3.secret-access-key, s3.path-style-access (repeatable); given to PyIceberg, "
        "the REST server and Spark",
    )
    parser.add_argument(
        "--data",
        metavar="URI",
        help="where the tables' files go (default: under the warehouse); e.g. a local "
        "folder while the catalog lives on S3",
    )
    parser.add_argument(
        "--spark-jars",
        metavar="JARS",
        help="more jars for Spark, comma-separated (for S3: Iceberg's AWS bundle)",
    )
    return parser


@dataclass(frozen=True)
class Options:
    warehouse: str
    batches: int
    orders_per_batch: int
    seed: int
    properties: dict[str, str]
    spark_jars: tuple[str, ...]
    temporary: bool
    data: str | None = None

    @property
    def tables_location(self) -> str:
        """Where the tables' files go."""
        return self.data or self.warehouse


def parse_options(argv: Sequence[str] | None) -> Options:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.batches < 2:
        parser.error("--batches must be at least 2 (the second writer races batch 2)")
    properties: dict[str, str] = {}
    for item in args.option:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"-o/--option must be KEY=VALUE, got {item!r}")
        properties[key] = value
    temporary = args.warehouse is None
    if temporary:
        folder = Path(tempfile.mkdtemp(prefix="olympia-orders-")) / "warehouse"
        warehouse = folder.as_uri()
    else:
        warehouse = _uri(str(args.warehouse))
    jars = tuple(j for j in (args.spark_jars or "").split(",") if j)
    return Options(
        warehouse,
        args.batches,
        args.orders_per_batch,
        args.seed,
        properties,
        jars,
        temporary,
        _uri(args.data) if args.data else None,
    )


def _uri(text: str) -> str:
    """A URI for a location given as a URI or a local path."""
    return text if "://" in text else Path(text).resolve().as_uri()


# --- data --------------------------------------------------------------------------------

RAW_SCHEMA = pa.schema(
    [
        pa.field("order_id", pa.int64()),
        pa.field("batch", pa.int32()),
        pa.field("source", pa.string()),
        pa.field("customer", pa.string()),
        pa.field("item", pa.string()),
        pa.field("qty", pa.int32()),
        pa.field("price_cents", pa.int64()),
    ]
)
RAW_DDL = (
    "order_id BIGINT, batch INT, source STRING, customer STRING, item STRING, "
    "qty INT, price_cents BIGINT"
)


def raw_batch(rng: random.Random, batch: int, count: int, source: str) -> list[tuple[Any, ...]]:
    """``count`` raw orders, dirty as raw data is: customer names in mixed
    case with spaces, missing customers, zero or negative quantities, and
    orders delivered twice."""
    customers = max(20, count // 8)
    rows: list[tuple[Any, ...]] = []
    first_id = batch * 10_000_000 + (5_000_000 if source != "web" else 0)
    for i in range(count):
        order_id = first_id + i
        if rows and rng.random() < 0.03:  # delivered twice
            rows.append(rows[rng.randrange(len(rows))])
            continue
        name = f"c{rng.randrange(customers):05d}"
        roll = rng.random()
        customer = None if roll < 0.02 else f"  {name.upper()} " if roll < 0.10 else name
        qty = rng.randint(1, 5) if rng.random() > 0.03 else rng.choice((0, -1))
        item = ITEMS[rng.randrange(len(ITEMS))]
        price = 100 * (1 + ITEMS.index(item)) + rng.randrange(100)
        rows.append((order_id, batch, source, customer, item, qty, price))
    return rows


# --- the pipeline ------------------------------------------------------------------------


def _t(name: str) -> str:
    return f"lake.{NS}.{name}"


def setup_sql(data: str | None) -> tuple[str, ...]:
    """The namespace (at ``data`` if given) and the tables."""
    location = f" LOCATION '{data.rstrip('/')}/{NS}.db'" if data else ""
    return (f"CREATE NAMESPACE lake.{NS}{location}", *TABLES_SQL)


TABLES_SQL = (
    f"CREATE TABLE {_t(RAW)} ({RAW_DDL}) USING iceberg",
    f"CREATE TABLE {_t(ORDERS)} (order_id BIGINT, batch INT, customer STRING, item STRING, "
    "qty INT, price_cents BIGINT, amount_cents BIGINT) USING iceberg",
    f"CREATE TABLE {_t(TOTALS)} (customer STRING, orders BIGINT, total_cents BIGINT) USING iceberg",
    f"CREATE TABLE {_t(INVENTORY)} (item STRING, stock_start BIGINT, sold BIGINT, "
    "on_hand BIGINT) USING iceberg",
    f"CREATE TABLE {_t(VIP)} (customer STRING, total_cents BIGINT) USING iceberg",
)


def batch_sql(batch: int) -> tuple[str, ...]:
    """The statements of one batch, after its raw rows are in view ``raw_batch``."""
    return (
        f"INSERT INTO {_t(RAW)} SELECT * FROM raw_batch",
        # cleaned: one row per order id, a customer, a positive quantity
        f"""INSERT INTO {_t(ORDERS)}
            SELECT order_id, batch, customer, item, qty, price_cents, qty * price_cents
            FROM (SELECT order_id, batch, lower(trim(customer)) AS customer, item, qty,
                         price_cents,
                         row_number() OVER (PARTITION BY order_id ORDER BY order_id) AS copy
                  FROM {_t(RAW)} WHERE batch = {batch} AND source = 'web')
            WHERE copy = 1 AND customer IS NOT NULL AND customer <> '' AND qty > 0""",
        f"""MERGE INTO {_t(TOTALS)} t
            USING (SELECT customer, count(*) AS orders, sum(amount_cents) AS total_cents
                   FROM {_t(ORDERS)} WHERE batch = {batch} GROUP BY customer) b
            ON t.customer = b.customer
            WHEN MATCHED THEN UPDATE SET t.orders = t.orders + b.orders,
                                         t.total_cents = t.total_cents + b.total_cents
            WHEN NOT MATCHED THEN INSERT (customer, orders, total_cents)
                                  VALUES (b.customer, b.orders, b.total_cents)""",
        f"""MERGE INTO {_t(INVENTORY)} i
            USING (SELECT item, sum(qty) AS sold FROM {_t(ORDERS)}
                   WHERE batch = {batch} GROUP BY item) s
            ON i.item = s.item
            WHEN MATCHED THEN UPDATE SET i.sold = i.sold + s.sold,
                                         i.on_hand = i.on_hand - s.sold""",
    )


@dataclass
class Coordination:
    """What the pipeline and the second writer tell each other."""

    lock: threading.Condition = field(default_factory=threading.Condition)
    batches_done: int = 0
    writer_began: threading.Event = field(default_factory=threading.Event)
    failed: bool = False

    def batch_committed(self, batch: int) -> None:
        with self.lock:
            self.batches_done = batch
            self.lock.notify_all()

    def wait_for_batch(self, batch: int, timeout: float = 900.0) -> None:
        with self.lock:
            if not self.lock.wait_for(
                lambda: self.batches_done >= batch or self.failed, timeout=timeout
            ):
                raise JobError(f"batch {batch} did not commit within {timeout:.0f} s")
            if self.failed:
                raise JobError("the pipeline stopped")


@dataclass
class Commit:
    """One commit the job made or tried, for the report."""

    label: str
    begin_version: int
    version: int | None = None
    refused: CommitConflictError | None = None


class Job:
    def __init__(self, options: Options, console: Console) -> None:
        self.options = options
        self.console = console
        self.commits: list[Commit] = []
        self.coordination = Coordination()
        self.writer_error: BaseException | None = None
        self.properties = {
            "py-catalog-impl": CATALOG_IMPL,
            "warehouse": options.warehouse,
            **options.properties,
        }

    def say(self, message: str) -> None:
        self.console.print(message, markup=False, highlight=False, soft_wrap=True)

    @contextlib.contextmanager
    def working(self, message: str) -> Iterator[Callable[[str], None]]:
        """Show ``message`` while the block runs: a spinner on a terminal
        (the block may change its text through the function it gets), a
        line otherwise."""
        if self.console.is_terminal:
            with self.console.status(message) as status:
                yield lambda text: status.update(text)
        else:
            self.say(message)
            yield lambda text: None

    # --- Spark -----------------------------------------------------------------------

    def spark_conf(self) -> dict[str, str]:
        from olympia.spark import spark_jars

        conf: dict[str, str] = {"spark.default.parallelism": "2"}
        jars = [*spark_jars(), *self.options.spark_jars]
        for jar in self.options.spark_jars:
            if not Path(jar).is_file():
                raise JobError(f"--spark-jars: no such file {jar}")
        if self.options.tables_location.startswith(("s3://", "s3a://")):
            if not any(_has_class(jar, AWS_SDK_CLASS) for jar in self.options.spark_jars):
                raise JobError(
                    "Spark writes the tables' files itself, and to reach S3 it needs the AWS "
                    "SDK, which the Iceberg runtime jar does not contain (and no PyPI package "
                    "ships): pass --spark-jars with Iceberg's AWS bundle "
                    "(iceberg-aws-bundle-1.10.2.jar), or --data with a local folder for the "
                    "tables' files (the catalog stays on S3)"
                )
            conf["spark.sql.catalog.lake.io-impl"] = "org.apache.iceberg.aws.s3.S3FileIO"
            for key, value in self.options.properties.items():
                if key.startswith(("s3.", "client.")):
                    conf[f"spark.sql.catalog.lake.{key}"] = value
            if "s3.region" in self.options.properties:
                conf["spark.sql.catalog.lake.client.region"] = self.options.properties["s3.region"]
        conf["spark.jars"] = ",".join(jars)
        return conf

    # --- the steps -------------------------------------------------------------------------

    def run(self) -> int:
        from olympia import spark as olympia_spark
        from olympia.rest import create_app
        from olympia.rest.server import BackgroundServer, open_catalog

        started = time.monotonic()
        opts = self.options
        self.say(
            f"olympia main job: {opts.batches} batches of {opts.orders_per_batch} raw orders "
            f"(seed {opts.seed})"
        )
        self.say(f"warehouse: {opts.warehouse}" + (" (a new temporary folder)" * opts.temporary))
        if opts.data:
            self.say(f"tables' files: {opts.data}")
        conf = self.spark_conf()
        catalog = cast(OlympiaCatalog, load_catalog("job", **self.properties))
        if catalog.namespace_exists(NS):
            raise JobError(
                f"the warehouse {opts.warehouse} already has a namespace {NS!r}: "
                f"give an empty or new --warehouse"
            )
        server = BackgroundServer(
            create_app(
                open_catalog(
                    opts.warehouse,
                    opts.properties,
                    allowed_locations=[opts.data] if opts.data else [],
                )
            )
        ).start()
        self.say(f"Iceberg REST server (in this process): {server.uri}")
        spark: Any = None
        try:
            with self.working("starting Spark (one local JVM; this takes 20-30 s)..."):
                spark = olympia_spark.session(uri=server.uri, conf=conf, app_name="olympia-orders")
            self.say(f"Spark {spark.version} started (local[2], one JVM)")
            with self.working("setup: creating the namespace and the tables..."):
                self.setup(spark)
            writer = threading.Thread(
                target=self._second_writer, args=(catalog,), name="second-writer"
            )
            writer.start()
            try:
                self.pipeline(spark)
            except BaseException:
                with self.coordination.lock:
                    self.coordination.failed = True
                    self.coordination.lock.notify_all()
                raise
            finally:
                writer.join()
            if self.writer_error is not None:
                raise self.writer_error
            self.say(f"pipeline done in {time.monotonic() - started:.1f} s")
        finally:
            if spark is not None:
                spark.stop()
            server.stop()
        ok = self.report(catalog)
        self.say(f"elapsed: {time.monotonic() - started:.1f} s")
        if opts.temporary:
            self.say(f"inspect it: olympia log --graph -w {opts.warehouse}")
        return 0 if ok else 1

    def setup(self, spark: Any) -> None:
        from olympia import spark as olympia_spark

        stock = ", ".join(f"('{item}', {STOCK_START}, 0, {STOCK_START})" for item in ITEMS)
        with olympia_spark.transaction(
            spark,
            isolation="serializable",
            message="setup: namespace, 5 tables, stock",
            author=AUTHOR,
        ) as tx:
            for statement in setup_sql(self.options.data):
                spark.sql(statement)
            spark.sql(f"INSERT INTO {_t(INVENTORY)} VALUES {stock}")
        assert tx.version is not None
        self.commits.append(
            Commit("setup: namespace, 5 tables, stock", tx.begin_version, tx.version)
        )
        self.say(
            f"setup: namespace {NS}, tables {', '.join((*BATCH_TABLES, VIP))} and the stock "
            f"of {len(ITEMS)} items committed as version {tx.version}"
        )

    def pipeline(self, spark: Any) -> None:

        opts = self.options
        rng = random.Random(opts.seed)
        for batch in range(1, opts.batches + 1):
            # let the second writer begin before batch 2 commits
            if batch == 2 and not self.coordination.writer_began.wait(timeout=300):
                raise JobError("the second writer did not start")
            rows = raw_batch(rng, batch, opts.orders_per_batch, "web")
            t0 = time.monotonic()
            with self.working(
                f"batch {batch}/{opts.batches}: writing {len(rows)} raw orders to "
                f"{len(BATCH_TABLES)} tables in one transaction..."
            ) as update:
                version, begin_version, cleaned, customers = self.run_batch(
                    spark, batch, rows, update
                )
            self.commits.append(Commit(f"batch {batch}", begin_version, version))
            rebased = version - 1 - begin_version
            self.say(
                f"batch {batch}/{opts.batches}: {len(rows)} raw orders -> {cleaned} cleaned, "
                f"{customers} customers; 4 tables committed as version {version}"
                + (f" (rebased over {rebased} version(s))" if rebased else "")
                + f" in {time.monotonic() - t0:.1f} s"
            )
            self.coordination.batch_committed(batch)

    def run_batch(
        self,
        spark: Any,
        batch: int,
        rows: list[tuple[Any, ...]],
        update: Callable[[str], None] = lambda text: None,
    ) -> tuple[int, int, int, int]:
        """One batch as one transaction, tried again if a concurrent commit
        refuses it; returns (version, begin version, cleaned orders, customers).
        ``update`` is told each step."""
        from olympia import spark as olympia_spark

        prefix = f"batch {batch}/{self.options.batches}"
        for attempt in range(1, MAX_BATCH_ATTEMPTS + 1):
            try:
                with olympia_spark.transaction(
                    spark, isolation="serializable", message=f"batch {batch}", author=AUTHOR
                ) as tx:
                    spark.createDataFrame(rows, RAW_DDL).createOrReplaceTempView("raw_batch")
                    for statement in batch_sql(batch):
                        update(f"{prefix}: {_step(statement)}")
                        spark.sql(statement)
                    update(f"{prefix}: committing")
                    cleaned, customers = spark.sql(
                        f"SELECT count(*), count(DISTINCT customer) FROM {_t(ORDERS)} "
                        f"WHERE batch = {batch}"
                    ).collect()[0]
            except CommitConflictError as exc:
                self.say(
                    f"batch {batch}/{self.options.batches}: commit refused (rule {exc.rule}), "
                    f"attempt {attempt} of {MAX_BATCH_ATTEMPTS}"
                )
                if attempt == MAX_BATCH_ATTEMPTS:
                    raise
                continue
            assert tx.version is not None
            return tx.version, tx.begin_version, int(cleaned), int(customers)
        raise AssertionError("unreachable")

    # --- the second writer ----------------------------------------------------------------------

    def _second_writer(self, catalog: OlympiaCatalog) -> None:
        try:
            self.second_writer(catalog)
        except BaseException as exc:
            self.writer_error = exc
            self.coordination.writer_began.set()

    def second_writer(self, catalog: OlympiaCatalog) -> None:
        """Two SERIALIZABLE transactions begun after batch 1 and committed after
        batch 2: a blind append (rebased, lands) and a report that read what
        batch 2 changed (refused)."""
        coordination = self.coordination
        rng = random.Random(self.options.seed + 1)
        coordination.wait_for_batch(1)
        partner_count = max(10, self.options.orders_per_batch // 20)
        feed = catalog.begin(
            "serializable",
            message=f"second writer: partner feed ({partner_count} raw orders)",
            author="partner feed",
        )
        report = catalog.begin(
            "serializable", message="second writer: VIP report", author="VIP report"
        )
        coordination.writer_began.set()
        partner = raw_batch(rng, 2, partner_count, "partner")
        rows = pa.Table.from_pylist(
            [dict(zip(RAW_SCHEMA.names, r)) for r in partner], schema=RAW_SCHEMA
        )
        feed.load_table(f"{NS}.{RAW}").append(rows)
        threshold = 1
        totals = (
            report.load_table(f"{NS}.{TOTALS}")
            .scan(row_filter=f"total_cents >= {threshold}")
            .to_arrow()
        )
        top = totals.sort_by([("total_cents", "descending")]).slice(0, 10)
        report.load_table(f"{NS}.{VIP}").append(top.select(["customer", "total_cents"]))
        feed_commit = Commit(
            f"second writer: partner feed ({len(partner)} raw orders)", feed.begin_version
        )
        report_commit = Commit("second writer: VIP report", report.begin_version)
        self.say(
            f"second writer: began two SERIALIZABLE transactions at version {feed.begin_version}: "
            f"a partner feed appending {len(partner)} orders to {NS}.{RAW}, and a VIP report "
            f"reading {NS}.{TOTALS} ({totals.num_rows} rows) into {NS}.{VIP}"
        )
        coordination.wait_for_batch(2)
        batch2 = next(c.version for c in self.commits if c.label == "batch 2")
        try:
            report.commit()
        except CommitConflictError as exc:
            report_commit.refused = exc
            self.commits.append(report_commit)
            self.say(
                f"second writer: VIP report REFUSED under SERIALIZABLE (rule {exc.rule}, "
                f"version {exc.version}): it read {NS}.{TOTALS} as of version "
                f"{report.begin_version}, and batch 2 (version {batch2}) changed what it read; "
                f"nothing of it was published"
            )
            self.say(f"  the error: {exc}")
        else:
            raise JobError("the VIP report committed although batch 2 changed what it read")
        feed_commit.version = version = feed.commit()
        self.commits.append(feed_commit)
        over = version - 1 - feed.begin_version
        self.say(
            f"second writer: partner feed (began at version {feed.begin_version}) committed "
            f"after batch 2 (version {batch2}) had appended to {NS}.{RAW} too: appends do not "
            f"conflict, so its commit was REBASED over {over} version(s) and landed as "
            f"version {version}"
        )

    # --- the report --------------------------------------------------------------------------------

    def report(self, catalog: OlympiaCatalog) -> bool:
        olympia_catalog = catalog.olympia
        history: list[VersionInfo] = olympia_catalog.history()
        self.print_history()
        one_version = self.check_batches_are_one_version(history)
        with self.working("checking the invariants at every version (time travel)..."):
            invariants = self.check_invariants(catalog, history)
        self.read_as_of(catalog)
        return one_version and invariants

    def print_history(self) -> None:
        """The history as ``olympia log`` prints it: the same code runs."""
        from olympia import cli

        options = storage_properties(self.options.properties)
        self.say(
            f"the catalog's version history (olympia log -w {self.options.warehouse}"
            + " -o ..." * bool(options)
            + "):"
        )
        sys.stdout.flush()
        storage = [arg for k, v in options.items() for arg in ("-o", f"{k}={v}")]
        code: int | str | None
        try:
            code = cli.main(["log", "-w", self.options.warehouse, *storage])
        except SystemExit as exc:  # how the command line reports a failure
            code = exc.code
        sys.stdout.flush()
        if code != 0:
            self.say(f"(olympia log exited with {code})")
        for c in self.commits:
            if c.refused is not None:
                self.say(
                    f"not in the history: {c.label}, begun at version {c.begin_version}, "
                    f"refused (rule {c.refused.rule}, conflicting version {c.refused.version})"
                )

    def check_batches_are_one_version(self, history: Sequence[VersionInfo]) -> bool:
        by_version = {info.version: info for info in history}
        ok = True
        for c in self.commits:
            if not c.label.startswith("batch ") or c.version is None:
                continue
            written = set(_written_tables(by_version[c.version]))
            want = {f"{NS}.{t}" for t in BATCH_TABLES}
            if written != want:
                ok = False
                self.say(f"FAIL: {c.label} version {c.version} wrote {sorted(written)}")
        batches = sum(1 for c in self.commits if c.label.startswith("batch "))
        if ok:
            self.say(f"check: each of the {batches} batches is one version writing all 4 tables")
        return ok

    def check_invariants(self, catalog: OlympiaCatalog, history: Sequence[VersionInfo]) -> bool:
        """At every version since setup: per-customer totals equal the sums of
        the cleaned orders, and each item's sold and on-hand counts equal the
        cleaned orders' quantities."""
        setup = next(c.version for c in self.commits if c.label.startswith("setup"))
        assert setup is not None
        reader = TimeTravel(catalog, self.properties)
        failures = 0
        checked = 0
        for info in history:
            if info.version < setup:
                continue
            problems = invariant_problems(reader, info.version)
            checked += 1
            if problems:
                failures += 1
                self.say(f"FAIL: invariant broken at version {info.version}: {problems[0]}")
        if failures == 0:
            self.say(
                f"check: invariant holds at every version ({checked} versions, "
                f"{setup}..{history[-1].version}): customer_totals = sum(orders) per customer, "
                f"inventory sold = sum(orders.qty) per item, on_hand = stock_start - sold"
            )
        return failures == 0

    def read_as_of(self, catalog: OlympiaCatalog) -> None:
        first = next(c.version for c in self.commits if c.label == "batch 1")
        last = max(c.version for c in self.commits if c.version is not None)
        assert first is not None
        reader = TimeTravel(catalog, self.properties)
        self.say(f"time travel: the tables as of version {first} (after batch 1) and now:")
        table = RichTable(box=box.SIMPLE_HEAD)
        for column in ("table", f"rows at {first}", f"rows at {last}"):
            table.add_column(column)
        for name in (*BATCH_TABLES, VIP):
            then = reader.read(first, name)
            now = reader.read(last, name)
            table.add_row(f"{NS}.{name}", str(then.num_rows), str(now.num_rows))
        self.console.print(table)
        then_totals = reader.read(first, TOTALS)
        now_totals = {
            r["customer"]: r["total_cents"] for r in reader.read(last, TOTALS).to_pylist()
        }
        top = then_totals.sort_by([("total_cents", "descending")]).slice(0, 3).to_pylist()
        lines = ", ".join(
            f"{r['customer']} {r['total_cents'] / 100:.2f} (now {now_totals[r['customer']] / 100:.2f})"
            for r in top
        )
        self.say(f"top customers as of version {first}: {lines}")


def _step(statement: str) -> str:
    """What a statement does, for the progress line: ``MERGE INTO shop.inventory``."""
    return " ".join(statement.split()[:3]).replace("lake.", "")


def _has_class(jar: str, name: str) -> bool:
    try:
        with zipfile.ZipFile(jar) as zf:
            return name in zf.namelist()
    except (OSError, zipfile.BadZipFile):
        return False


def _written_tables(info: VersionInfo) -> list[str]:
    kinds = (apb.TABLE_CREATE, apb.TABLE_UPDATE)
    return sorted(
        {
            f"{a.table.namespace}.{a.table.name}"
            for a in info.actions
            if a.type in kinds and not a.read_only and a.table.name
        }
    )


class TimeTravel:
    """Reads a table as of a catalog version: its metadata location in that
    version, then the Iceberg table at that metadata (PyIceberg)."""

    def __init__(self, catalog: OlympiaCatalog, properties: dict[str, str]) -> None:
        self.catalog = catalog
        self.properties = properties
        self._cache: dict[str, pa.Table] = {}

    def read(self, version: int, name: str) -> pa.Table:
        location: str | None = self.catalog.committed_location(version, NS, name)
        if location is None:
            raise JobError(f"table {NS}.{name} does not exist at version {version}")
        if location not in self._cache:
            table = StaticTable.from_metadata(location, properties=self.properties)
            self._cache[location] = table.scan().to_arrow()
        return self._cache[location]


def invariant_problems(reader: TimeTravel, version: int) -> list[str]:
    orders = reader.read(version, ORDERS)
    totals = reader.read(version, TOTALS)
    inventory = reader.read(version, INVENTORY)
    problems: list[str] = []
    by_customer = orders.group_by("customer").aggregate(
        [("amount_cents", "sum"), ("order_id", "count")]
    )
    expected = {
        r["customer"]: (r["order_id_count"], r["amount_cents_sum"]) for r in by_customer.to_pylist()
    }
    actual = {r["customer"]: (r["orders"], r["total_cents"]) for r in totals.to_pylist()}
    if len(actual) != totals.num_rows:
        problems.append(f"{NS}.{TOTALS} has a customer twice")
    if expected != actual:
        wrong = sorted(set(expected.items()) ^ set(actual.items()))[:3]
        problems.append(f"{NS}.{TOTALS} differs from {NS}.{ORDERS}: {wrong}")
    by_item = orders.group_by("item").aggregate([("qty", "sum")])
    sold = {r["item"]: r["qty_sum"] for r in by_item.to_pylist()}
    for r in inventory.to_pylist():
        if r["sold"] != sold.get(r["item"], 0):
            problems.append(
                f"item {r['item']}: sold {r['sold']}, orders say {sold.get(r['item'], 0)}"
            )
        if r["on_hand"] != r["stock_start"] - r["sold"]:
            problems.append(f"item {r['item']}: on_hand {r['on_hand']} != stock_start - sold")
    if pc.count_distinct(orders["order_id"]).as_py() != orders.num_rows:
        problems.append(f"{NS}.{ORDERS} has an order twice")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_options(argv)
    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=200)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    try:
        return Job(options, console).run()
    except OlympiaError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
