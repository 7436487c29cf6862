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
import hashlib
import importlib.util
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import threading
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


#: Iceberg's SparkCatalog with DROP TABLE ... PURGE left to the server
#: (olympia/java/OlympiaSparkCatalog.java, compiled by :func:`catalog_jar`).
CATALOG_CLASS = "olympia.spark.OlympiaSparkCatalog"
ICEBERG_CATALOG_CLASS = "org.apache.iceberg.spark.SparkCatalog"
_CATALOG_SOURCE = Path(__file__).parent / "java" / "OlympiaSparkCatalog.java"


def _javac() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "javac"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("javac")


@functools.lru_cache(maxsize=1)
def catalog_jar() -> str | None:
    """The jar of :data:`CATALOG_CLASS`, compiled from its source against the
    Iceberg runtime jar and pyspark's jars on first use and kept in the user's
    cache folder (``$XDG_CACHE_HOME/olympia``, by the source's digest); None,
    with a warning, when there is no ``javac`` (a JRE without a JDK): Spark
    then uses Iceberg's SparkCatalog, whose ``DROP TABLE ... PURGE`` deletes
    the files at once from the driver and whose ``remove_orphan_files``
    deletes what older catalog versions read (spec/rest.md §7).

    Raises:
        SparkSetupError: the compiler failed (the message quotes it).
    """
    source = _CATALOG_SOURCE.read_bytes()
    digest = hashlib.sha256(source + RUNTIME_JAR.encode()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "olympia"
    jar = cache / f"olympia-spark-catalog-{digest}.jar"
    if jar.is_file():
        return str(jar)
    javac = _javac()
    if javac is None:
        log.warning(
            "no javac (a JDK) on this machine: Spark uses Iceberg's SparkCatalog, whose "
            "DROP TABLE ... PURGE deletes the table's files at once instead of leaving them "
            "to olympia's expiration, and whose remove_orphan_files deletes files that older "
            "catalog versions read"
        )
        return None
    import pyspark

    classpath = os.pathsep.join([runtime_jar(), str(Path(pyspark.__file__).parent / "jars" / "*")])
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as work:
        done = subprocess.run(
            [
                javac,
                "--release",
                "11",
                "-nowarn",
                "-cp",
                classpath,
                "-d",
                work,
                str(_CATALOG_SOURCE),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise SparkSetupError(
                f"compiling {_CATALOG_SOURCE.name} failed: {done.stderr.strip() or done.stdout}"
            )
        partial = Path(work) / "catalog.jar"
        with zipfile.ZipFile(partial, "w") as out:
            out.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
            for path in sorted(Path(work).rglob("*.class")):
                out.write(path, path.relative_to(work).as_posix())
        os.replace(partial, jar)  # whole or not at all, whoever compiled it first
    return str(jar)


def spark_jars() -> list[str]:
    """The jars Spark needs for an olympia catalog: Iceberg's runtime and,
    when it can be built, :func:`catalog_jar`."""
    extra = catalog_jar()
    return [runtime_jar(), *([extra] if extra else [])]


def catalog_conf(uri: str, *, catalog: str = "lake", token: str | None = None) -> dict[str, str]:
    """The Spark settings of an Iceberg REST catalog ``catalog`` at ``uri``.

    The catalog class is :data:`CATALOG_CLASS` (it needs :func:`catalog_jar`
    on ``spark.jars``, as :func:`spark_jars` lists it), or Iceberg's
    SparkCatalog where it cannot be compiled. Iceberg's table cache is off,
    so that every statement reads the catalog.
    Metrics reports stay on (Iceberg's default): inside a SERIALIZABLE
    transaction a scan report is how the server learns that a statement
    read a table it then writes (spec/rest.md §8).
    """
    prefix = f"spark.sql.catalog.{catalog}"
    conf = {
        prefix: CATALOG_CLASS if catalog_jar() else ICEBERG_CATALOG_CLASS,
        f"{prefix}.type": "rest",
        f"{prefix}.uri": uri,
        f"{prefix}.cache-enabled": "false",
    }
    if token is not None:
        conf[f"{prefix}.token"] = token
    return conf


def session_conf(uri: str, *, catalog: str = "lake", token: str | None = None) -> dict[str, str]:
    """Every setting :func:`session` gives the builder (jar, extensions, catalog)."""
    return {
        "spark.jars": ",".join(spark_jars()),
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
    if uri is not None:
        _check_server(uri)
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


def _check_server(uri: str) -> None:
    """Whether an HTTP server answers at ``uri`` (any answer, 401 included),
    before Spark starts: otherwise its first statement fails with a Java
    stack trace whose cause is far down.

    Raises:
        SparkSetupError: nothing answers (refused, unknown host, timeout).
    """
    url = f"{uri.rstrip('/')}/v1/config"
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            response.read()
    except urllib.error.HTTPError:
        return  # a server answered (a token may be needed: Spark sends it)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise SparkSetupError(
            f"no Iceberg REST server answers at {uri} ({reason}): start one with "
            f"`olympia serve --warehouse <folder or s3://...> --port <port>`, or call "
            f"olympia.spark.session(warehouse=...) to start one in this process"
        ) from None


# --- transactions from PySpark ---------------------------------------------------


@dataclass
class SparkTransaction:
    """The transaction of a :func:`transaction` block: its id, isolation, and,
    once committed, the catalog version it published."""

    id: str
    isolation: str
    begin_version: int
    version: int | None = None


class _KeepAlive:
    """Uses the transaction at ``url`` (``GET /txn/{id}``) every third of the
    server's idle limit while a block runs: Spark sends the catalog nothing
    while a stage computes, and a statement longer than the limit would find
    its transaction rolled back (spec/rest.md §8)."""

    def __init__(self, url: str, token: str | None, idle_seconds: Any) -> None:
        self._stop = threading.Event()
        if not isinstance(idle_seconds, int | float) or idle_seconds <= 0:
            return  # a server that does not say: nothing to keep ahead of
        self._thread = threading.Thread(
            target=self._run,
            args=(url, token, max(0.05, idle_seconds / 3)),
            name="olympia-txn-keepalive",
            daemon=True,
        )
        self._thread.start()

    def _run(self, url: str, token: str | None, every: float) -> None:
        while not self._stop.wait(every):
            request = urllib.request.Request(url, method="GET")
            if token:
                request.add_header("Authorization", f"Bearer {token}")
            try:
                with urllib.request.urlopen(request, timeout=60) as response:
                    response.read()
            except (urllib.error.URLError, OSError) as exc:
                log.debug("keep-alive of %s: %s", url, exc)

    def stop(self) -> None:
        self._stop.set()


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
            # The server words a conflict "... conflicts with version <v> (rule <rule>)".
            rule = re.search(r"\(rule ([a-z][a-z-]*)\)", message)
            version = re.search(r"\bversion (\d+)\b", message)
            raise CommitConflictError(
                message,
                rule=rule.group(1) if rule else None,
                version=int(version.group(1)) if version else None,
            ) from None
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
    the transaction. While the block runs, a thread uses the transaction
    (``GET /txn/{id}``) every third of the server's idle limit, so that a
    statement computing longer than ``serve --transaction-idle-seconds``
    (default 900) keeps it; a block that makes no progress still holds it
    open, until it ends. ``message``, ``author`` and ``properties`` are the
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
    alive = _KeepAlive(f"{base}/txn/{txn.id}", token, begun.get("idle-seconds"))
    try:
        yield txn
    except BaseException as exc:
        alive.stop()
        _point_catalog(spark, catalog, uri)
        try:
            _call(f"{base}/txn/{txn.id}/rollback", None, token)
        except OlympiaError as failed:  # the block's own error is the one to see
            log.warning("rolling back transaction %s: %s", txn.id, failed)
            note = getattr(exc, "add_note", None)  # Python 3.11 and later
            if note is not None:
                note(f"olympia: rolling back transaction {txn.id} failed: {failed}")
        raise
    alive.stop()
    _point_catalog(spark, catalog, uri)
    txn.version = _call(f"{base}/txn/{txn.id}/commit", None, token)["version"]
