"""A Spark session's settings as plain dicts, read the same way wherever the package needs them::

    from pyiceberg_crypto.spark.session import runtime_settings, session_settings

    session_settings(spark)   # the SparkContext's settings, then those set with spark.conf.set
    runtime_settings(spark)   # only those set at run time (spark.conf.set)

``spark`` is a classic SparkSession (or, for :func:`session_settings`, a SparkContext); the caller
checks that it is one. Reading the JVM's settings entry by entry (pyspark 3.5) is bounded.
"""

from __future__ import annotations

__all__ = ["runtime_settings", "session_settings"]

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
