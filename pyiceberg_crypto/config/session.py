"""Session building: settings applied to a ``SparkSession.Builder``, and the local sessions the
package's own applications start. pyspark is imported only inside the functions that need it::

    from pyiceberg_crypto import config

    settings = config.spark_settings("lake", warehouse="/data/warehouse")
    spark = config.configure_spark_with_encryption(config.local_spark_builder(), settings).getOrCreate()
    spark = config.session_for_catalog("lake", warehouse="/data/warehouse")   # the same in one call

:func:`configure_spark_with_encryption` refuses catalogs Iceberg would write in plaintext before it
changes the builder, merges the list settings (``spark.jars``, ...) and the driver's Java options
with what the builder already has, and prints one line on stderr when a JVM is about to start
(``PYICEBERG_CRYPTO_QUIET=1`` turns it off).
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path

from pyiceberg_crypto.config.settings import DRIVER_JAVA_OPTIONS, LOG4J_OPTION, refuse_plaintext_catalogs, spark_settings
from pyiceberg_crypto.errors import InvalidArgumentError

__all__ = ["configure_spark_with_encryption", "local_spark_builder", "session_for_catalog"]

#: The package's logger, ``pyiceberg_crypto.config`` (its name from before the split into modules).
log = logging.getLogger(__package__)

#: Settings that hold comma-separated lists: merged with a value already on the builder.
LIST_SETTINGS = ("spark.jars", "spark.jars.packages", "spark.jars.repositories", "spark.plugins", "spark.sql.extensions")
#: Class path settings (Comet's jar, :func:`~pyiceberg_crypto.config.comet_settings`): merged too.
CLASS_PATH_SETTINGS = ("spark.driver.extraClassPath", "spark.executor.extraClassPath")


def configure_spark_with_encryption(builder, settings: Mapping[str, str]):
    """Apply ``settings`` to a ``SparkSession.Builder`` and return the builder (composable).

    ``spark.jars``, ``spark.jars.packages``, ``spark.jars.repositories``, ``spark.plugins``,
    ``spark.sql.extensions`` (e.g. Delta's beside Iceberg's and the readers guard), the driver's and executors' ``extraClassPath`` and ``spark.driver.extraJavaOptions`` already set on the builder (e.g. by delta-spark's helper) are
    merged, not overwritten. A builder that ends up with both ``spark.jars`` and
    ``spark.jars.packages`` gets a warning: PySpark then ships only ``spark.jars`` to executors
    (see :mod:`pyiceberg_crypto.jars`), so the packages would be missing on a cluster.

    Raises:
        InvalidArgumentError: a catalog of the builder has a KMS but is one Iceberg 1.12.0 writes in
            plaintext (e.g. ``type=rest`` instead of the bridge's REST catalog): see
            :func:`refuse_plaintext_catalogs`. Nothing is applied to the builder's session then.
    """
    existing = getattr(builder, "_options", {})
    refuse_plaintext_catalogs({**existing, **settings})  # before the builder changes
    for key, value in settings.items():
        if key in LIST_SETTINGS and existing.get(key):
            value = ",".join(dict.fromkeys(existing[key].split(",") + value.split(",")))
        elif key in CLASS_PATH_SETTINGS and existing.get(key):
            value = os.pathsep.join(dict.fromkeys(existing[key].split(os.pathsep) + value.split(os.pathsep)))
        elif key == DRIVER_JAVA_OPTIONS and existing.get(key):
            if LOG4J_OPTION + "=" in existing[key]:  # the builder's own log4j configuration wins
                value = " ".join(o for o in shlex.split(value) if not o.startswith(LOG4J_OPTION + "="))
            value = f"{existing[key]} {value}".strip()
        builder = builder.config(key, value)
    _starting(builder, settings)
    options = getattr(builder, "_options", {})
    if options.get("spark.jars") and options.get("spark.jars.packages"):
        log.warning(
            "this SparkSession.Builder sets both spark.jars and spark.jars.packages: PySpark ships only "
            "spark.jars to executors, so the packages (%s) will be missing on a cluster "
            "(ClassNotFoundException in tasks). Use one channel: jar files only (jars='local', "
            "PYICEBERG_CRYPTO_JARS) or Maven coordinates only (jars='packages', your jars as packages).",
            options["spark.jars.packages"])
    return builder


def _starting(builder, settings: Mapping[str, str]) -> None:
    """One line on stderr when this builder is about to start a JVM (no SparkContext yet): the
    first start resolves the jars and takes a while, and Spark itself shows nothing meanwhile.
    ``PYICEBERG_CRYPTO_QUIET=1`` turns it off."""
    if os.environ.get("PYICEBERG_CRYPTO_QUIET") == "1":
        return
    try:
        from pyspark import SparkContext
    except ImportError:
        return
    if SparkContext._active_spark_context is not None:
        return
    packages = (getattr(builder, "_options", {}) or {}).get("spark.jars.packages") or settings.get("spark.jars.packages")
    if packages and not _resolved_before(packages):
        what = (" (first start: Spark downloads the Iceberg runtime, about 45 MB, from Maven Central or "
                "spark.jars.repositories into its Ivy cache; later starts skip that)")
    else:
        what = ""
    print(f"pyiceberg-crypto: starting Spark{what}...", file=sys.stderr, flush=True)


def _resolved_before(packages: str) -> bool:
    """Whether Ivy's cache already holds every ``group:artifact:version`` of ``packages``."""
    home = Path.home()
    caches = [home / ".ivy2.5.2" / "jars", home / ".ivy2" / "jars"]
    for coordinate in packages.split(","):
        parts = coordinate.strip().split(":")
        if len(parts) != 3:
            continue
        name = f"{parts[0]}_{parts[1]}-{parts[2]}.jar"
        if not any((cache / name).exists() for cache in caches):
            return False
    return True


def local_spark_builder(app_name: str = "pyiceberg-crypto", master: str = "local[2]"):
    """A ``SparkSession.Builder`` for a single-machine session that listens on loopback only.

    The driver's RPC and block manager bind to 127.0.0.1 (Spark would otherwise pick the host's
    network address), the web UI is off and the console progress bar is quiet. Spark's Python
    workers run this interpreter (``PYSPARK_PYTHON``, unless already set): the package's own
    modules are then importable in tasks, outside an activated virtual environment too::

        spark = configure_spark_with_encryption(local_spark_builder(), spark_settings(...)).getOrCreate()
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    return (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
    )


def session_for_catalog(catalog: str | None, *, warehouse: str | Path | None = None,
                        metastore_dir: str | Path | None = None, metastore_uri: str | None = None,
                        master: str = "local[2]", app_name: str = "pyiceberg-crypto"):
    """The SparkSession the package's own applications use (the verification job, ``keys rewrap``).

    Without ``warehouse``: the session spark-submit configured (``--conf`` / spark-defaults.conf),
    whose catalogs are its own (``catalog`` is not used and may be None).
    With it: a local session whose catalog ``catalog`` uses this package's settings::

        spark = session_for_catalog("lake", warehouse="/data/wh")                      # embedded metastore
        spark = session_for_catalog("lake", warehouse="/data/wh", metastore_uri="thrift://127.0.0.1:9083")
        spark = session_for_catalog(None)                                              # under spark-submit

    InvalidArgumentError for a ``warehouse`` without a catalog name.
    """
    if warehouse is not None and not catalog:
        raise InvalidArgumentError("a local session with a warehouse needs the name of its catalog")
    from pyspark.sql import SparkSession

    if warehouse is None:
        return SparkSession.builder.appName(app_name).getOrCreate()
    settings = spark_settings(catalog, warehouse=str(warehouse), metastore_dir=metastore_dir, metastore_uri=metastore_uri)
    spark = configure_spark_with_encryption(local_spark_builder(app_name, master=master), settings).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
