"""Spark through the Iceberg REST catalog (spec/rest.md §7).

:func:`session` builds a SparkSession whose catalog ``lake`` is an Iceberg
REST catalog served by olympia: at ``uri``, or by a server this process
starts for ``warehouse``. The Iceberg runtime jar comes from the PyPI package
``snowpark-connect-deps-iceberg`` (the ``spark`` extra); Java must be on the
PATH or under ``$JAVA_HOME``.
"""

from __future__ import annotations

import atexit
import functools
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from olympia.codec import CommitInfo
from olympia.errors import CommitConflictError, CommitFailedError, OlympiaError

log = logging.getLogger("olympia.spark")

RUNTIME_PACKAGE = "snowpark_connect_deps_iceberg"
RUNTIME_JAR = "iceberg-spark-runtime-3.5_2.12-1.10.2.jar"
EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
# Classes the REST client needs that some builds of the runtime jar lack.
_REQUIRED_CLASSES = (
    "org/apache/iceberg/shaded/com/fasterxml/jackson/databind/ObjectMapper.class",
    "org/apache/iceberg/shaded/org/apache/hc/client5/http/impl/classic/HttpClientBuilder.class",
    "org/apache/iceberg/rest/RESTCatalog.class",
)


class SparkSetupError(OlympiaError):
    """Spark cannot be started: Java, pyspark or the Iceberg runtime jar is missing."""


def java_executable() -> str:
    """The ``java`` binary: ``$JAVA_HOME/bin/java``, else ``java`` on the PATH.

    Raises:
        SparkSetupError: neither exists.
    """
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("java")
    if found is None:
        raise SparkSetupError(
            "Spark needs Java 17 (or 11): no 'java' on the PATH and no $JAVA_HOME/bin/java; "
            "install a JDK (e.g. apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
        )
    return found


@functools.cache
def runtime_jar() -> str:
    """Path of the Iceberg Spark 3.5 runtime jar inside the installed wheel.

    Raises:
        SparkSetupError: the package is not installed, or its jar is missing or
            lacks the shaded classes the REST client needs.
    """
    spec = importlib.util.find_spec(RUNTIME_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SparkSetupError(
            f"the Iceberg runtime for Spark is not installed: "
            f"pip install 'olympia[spark]' (it pins snowpark-connect-deps-iceberg==1.0.2, "
            f"whose {RUNTIME_JAR} is complete)"
        )
    jar = Path(next(iter(spec.submodule_search_locations))) / "jars" / RUNTIME_JAR
    if not jar.is_file():
        raise SparkSetupError(f"{jar} is missing; reinstall snowpark-connect-deps-iceberg==1.0.2")
    try:
        with zipfile.ZipFile(jar) as zf:
            names = set(zf.namelist())
    except (OSError, zipfile.BadZipFile) as exc:
        raise SparkSetupError(f"{jar} is not a readable jar: {exc}") from exc
    missing = [c for c in _REQUIRED_CLASSES if c not in names]
    if missing:
        raise SparkSetupError(
            f"{jar} lacks {missing[0]} (an incomplete build); "
            f"install snowpark-connect-deps-iceberg==1.0.2"
        )
    return str(jar)


def catalog_conf(uri: str, *, catalog: str = "lake", token: str | None = None) -> dict[str, str]:
    """The Spark settings of an Iceberg REST catalog ``catalog`` at ``uri``.

    Iceberg's table cache is off, so that every statement reads the catalog.
    Scan and commit metrics reports are off: the olympia server accepts them
    (``POST .../metrics``) but keeps nothing, so each would cost a request
    for nothing.
    """
    prefix = f"spark.sql.catalog.{catalog}"
    conf = {
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": "rest",
        f"{prefix}.uri": uri,
        f"{prefix}.cache-enabled": "false",
        f"{prefix}.rest-metrics-reporting-enabled": "false",
    }
    if token is not None:
        conf[f"{prefix}.token"] = token
    return conf


def session_conf(uri: str, *, catalog: str = "lake", token: str | None = None) -> dict[str, str]:
    """Every setting :func:`session` gives the builder (jar, extensions, catalog)."""
    return {
        "spark.jars": runtime_jar(),
        "spark.sql.extensions": EXTENSIONS,
        **catalog_conf(uri, catalog=catalog, token=token),
    }


def session(
    warehouse: str | None = None,
    uri: str | None = None,
    *,
    catalog: str = "lake",
    token: str | None = None,
    master: str = "local[2]",
    app_name: str = "olympia",
    conf: Mapping[str, str] | None = None,
    log_level: str = "ERROR",
) -> Any:
    """A SparkSession with the Iceberg SQL extensions and the REST catalog ``catalog``.

    Give ``uri`` (a running ``olympia serve``) or ``warehouse`` (a server is
    started in this process, on a free port of 127.0.0.1, and stopped at
    exit). ``conf`` adds or overrides Spark settings.

    Raises:
        SparkSetupError: Java, pyspark or the runtime jar is missing.
        ValueError: neither or both of ``warehouse`` and ``uri``.
    """
    if (warehouse is None) == (uri is None):
        raise ValueError(
            "give exactly one of warehouse (start a server here) or uri (a running server)"
        )
    java_executable()
    runtime_jar()
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise SparkSetupError(
            f"pyspark is not installed: pip install 'olympia[spark]' ({exc})"
        ) from exc
    if uri is None:
        assert warehouse is not None
        from olympia.rest.server import start_background

        server = start_background(warehouse, token=token)
        atexit.register(server.stop)
        uri = server.uri
    # Spark binds the driver to the host name, which need not resolve.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.master(master).appName(app_name)
    # Spark's own warehouse (by default spark-warehouse/ in the current
    # folder) holds nothing of ours: a temporary folder, removed at exit.
    scratch = tempfile.mkdtemp(prefix="olympia-spark-")
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    settings = {
        "spark.sql.warehouse.dir": str(Path(scratch, "spark-warehouse")),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.shuffle.partitions": "4",
        **session_conf(uri, catalog=catalog, token=token),
        **(conf or {}),
    }
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return spark


# --- transactions from PySpark ---------------------------------------------------


@dataclass
class SparkTransaction:
    """The transaction of a :func:`transaction` block: its id, isolation, and,
    once committed, the catalog version it published."""

    id: str
    isolation: str
    begin_version: int
    version: int | None = None


def _call(url: str, body: dict[str, Any] | None, token: str | None) -> dict[str, Any]:
    """POST to the server's transaction API; errors become olympia errors."""
    data = json.dumps(body or {}).encode()
    request = urllib.request.Request(url, data=data, method="POST")
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            text = response.read()
    except urllib.error.HTTPError as exc:
        try:
            error = json.loads(exc.read())["error"]
            message = f"{error['type']}: {error['message']}"
        except (ValueError, KeyError, TypeError):
            message = f"HTTP {exc.code} from {url}"
        if exc.code == 409:
            raise CommitConflictError(message) from None
        if exc.code >= 500:
            raise CommitFailedError(message) from None
        raise OlympiaError(message) from None
    except urllib.error.URLError as exc:
        raise OlympiaError(f"cannot reach the olympia REST server at {url}: {exc.reason}") from None
    result: dict[str, Any] = json.loads(text) if text else {}
    return result


def _point_catalog(spark: Any, catalog: str, uri: str) -> None:
    """Point Spark's catalog ``catalog`` at ``uri``: Spark instantiates
    catalogs once, so its catalog manager is reset (the current catalog and
    namespace are kept)."""
    current_catalog = spark.catalog.currentCatalog()
    current_namespace = spark.catalog.currentDatabase()
    spark.conf.set(f"spark.sql.catalog.{catalog}.uri", uri)
    spark._jsparkSession.sessionState().catalogManager().reset()
    try:
        spark.catalog.setCurrentCatalog(current_catalog)
        spark.catalog.setCurrentDatabase(current_namespace)
    except Exception:  # the namespace may not exist on the other side
        log.debug("could not restore %s.%s", current_catalog, current_namespace, exc_info=True)


@contextmanager
def transaction(
    spark: Any,
    *,
    isolation: str | None = None,
    catalog: str = "lake",
    distributed: bool = False,
    message: str | None = None,
    author: str | None = None,
    properties: Mapping[str, str] | None = None,
) -> Iterator[SparkTransaction]:
    """BEGIN ... COMMIT for the Spark SQL statements in a ``with`` block.

    Every statement run with ``spark.sql(...)`` in the block that names a
    table of ``catalog`` (``lake.ns.t``, names unchanged) reads the catalog
    as of BEGIN plus the block's own writes, and writes into one olympia
    transaction; a clean exit commits it as one catalog version, an
    exception rolls it back (nothing is published) and propagates.
    Collect results inside the block: DataFrames resolved in it are bound to
    the transaction. ``message``, ``author`` and ``properties`` are the
    commit metadata stored with the transaction's version
    (``olympia.Catalog.begin``; ``POST /txn``, spec/rest.md §8).

    Raises:
        olympia.InvalidArgumentError: bad commit metadata (before anything
            is sent).
        olympia.CommitConflictError: the commit conflicts with one that
            landed first (nothing was published).
        olympia.CommitFailedError: the outcome of the commit is unknown.
    """
    info = CommitInfo.checked(message, author, properties)
    key = f"spark.sql.catalog.{catalog}.uri"
    uri = spark.conf.get(key, None)
    if uri is None:
        raise ValueError(f"Spark has no catalog {catalog!r} ({key} is not set)")
    base = uri.rstrip("/")
    if "/txn/" in base:
        raise ValueError(f"catalog {catalog!r} is already inside a transaction ({uri})")
    token = spark.conf.get(f"spark.sql.catalog.{catalog}.token", None)
    body: dict[str, Any] = {"isolation": isolation, "distributed": distributed}
    if not info.empty:
        body.update(message=info.message, author=info.author, properties=dict(info.properties))
    begun = _call(f"{base}/txn", body, token)
    txn = SparkTransaction(begun["id"], begun["isolation"], begun["begin-version"])
    _point_catalog(spark, catalog, f"{base}/txn/{txn.id}")
    try:
        yield txn
    except BaseException:
        _point_catalog(spark, catalog, uri)
        _call(f"{base}/txn/{txn.id}/rollback", None, token)
        raise
    _point_catalog(spark, catalog, uri)
    txn.version = _call(f"{base}/txn/{txn.id}/commit", None, token)["version"]
