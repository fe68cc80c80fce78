"""A Spark session's settings as plain dicts, read the same way wherever the package needs them::

    from pyiceberg_crypto.spark.session import runtime_settings, session_settings

    session_settings(spark)   # the SparkContext's settings, then those set with spark.conf.set
    runtime_settings(spark)   # only those set at run time (spark.conf.set)
    require_classic_session(spark, "verify_table")   # NotASparkSessionError for Connect / stopped
    activate_session(spark)   # first thing in a worker thread that runs Spark SQL

``spark`` is a classic SparkSession (or, for :func:`session_settings`, a SparkContext); the caller
checks that it is one. Reading the JVM's settings entry by entry (pyspark 3.5) is bounded.
"""

from __future__ import annotations

from pyiceberg_crypto.errors import CONNECT_NEXT_STEP, NotASparkSessionError

__all__ = ["activate_session", "require_classic_session", "runtime_settings", "session_settings"]

#: More entries than any session has (a few hundred): a bound on reading them one by one.
MAX_SETTINGS = 100_000


def runtime_settings(spark) -> dict[str, str]:
    """The settings set at run time with ``spark.conf.set`` (not in the SparkContext's conf); none
    for a SparkContext."""
    getall = getattr(getattr(spark, "conf", None), "getAll", None)  # pyspark 4.0+
    if getall is not None:
        return {str(k): str(v) for k, v in (getall() if callable(getall) else getall).items()}
    session = getattr(spark, "_jsparkSession", None)
    if session is None:
        return {}
    entries = session.conf().getAll().iterator()  # pyspark 3.5: the JVM RuntimeConfig's Scala map
    settings = {}
    for _ in range(MAX_SETTINGS):
        if not entries.hasNext():
            break
        entry = entries.next()
        settings[str(entry._1())] = str(entry._2())
    return settings


def session_settings(spark) -> dict[str, str]:
    """The SparkContext's settings, overridden by the session's run-time ones."""
    context = spark if hasattr(spark, "getConf") else spark.sparkContext
    settings = {str(key): str(value) for key, value in context.getConf().getAll()}
    settings.update(runtime_settings(spark))
    return settings


def require_classic_session(spark, what: str) -> None:
    """NotASparkSessionError unless ``spark`` is a classic SparkSession with a live driver JVM
    (``what`` names the caller in the message)."""
    try:
        alive = spark.sparkContext._jsc is not None
    except Exception:  # another object, or Spark Connect (its sparkContext raises)
        alive = None
    if not alive:
        reason = "it is stopped" if alive is False else f"got {type(spark).__module__}.{type(spark).__name__}"
        connect = alive is None and ".connect." in type(spark).__module__
        raise NotASparkSessionError(f"{what} needs a classic SparkSession with a driver JVM ({reason}; Spark "
                                    "Connect sessions have none)" + (CONNECT_NEXT_STEP if connect else ""))


def activate_session(spark) -> None:
    """Make ``spark`` the active session of the calling thread's JVM thread (PySpark pins each
    Python thread to a JVM thread of its own). A worker thread has no active session, and Spark
    resolves a catalog it has not loaded yet from the active session's settings: without this, a
    catalog first used in a worker thread is not found (``CATALOG_NOT_FOUND``). Call it first in
    every thread that runs Spark SQL for the package::

        with ThreadPoolExecutor(2) as pool:
            pool.map(lambda table: (activate_session(spark), reencrypt_table(spark, table)), tables)

    Raises NotASparkSessionError: not a classic SparkSession."""
    require_classic_session(spark, "activate_session")
    spark.sparkContext._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
