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
import os
import shutil
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from olympia.errors import OlympiaError

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
    """
    prefix = f"spark.sql.catalog.{catalog}"
    conf = {
        prefix: "org.apache.iceberg.spark.SparkCatalog",
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
    settings = {
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
