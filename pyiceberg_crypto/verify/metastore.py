"""What the Hive metastore says about an Iceberg table: its current ``metadata_location`` and the
``metadata_hash`` Iceberg stored with it (Base64 SHA-256 of the metadata.json).

The verifier asks the metastore directly (a Hive ``HiveMetaStoreClient`` in the driver JVM, built
from the same settings as the Iceberg catalog), not Iceberg: Iceberg refuses to load a modified
metadata.json, and the point is to report *that* as a finding::

    params = table_parameters(spark, catalog_properties(spark, "lake"), "db", "orders")
    params["metadata_location"], params.get("metadata_hash")
"""

from __future__ import annotations

from pyiceberg_crypto.io.hive_metastore import MetastoreError  # one error for both ways of asking

__all__ = ["MetastoreError", "catalog_properties", "table_parameters"]


def catalog_properties(spark, catalog: str) -> dict[str, str]:
    """The ``spark.sql.catalog.<catalog>.*`` settings, without the prefix (``uri``, ``warehouse``...)."""
    prefix = f"spark.sql.catalog.{catalog}"
    conf = dict(spark.sparkContext.getConf().getAll())
    conf.update(_session_conf(spark))
    if prefix not in conf:
        raise MetastoreError(f"no Spark catalog named {catalog!r} (spark.sql.catalog.{catalog} is not set)")
    props = {key[len(prefix) + 1:]: value for key, value in conf.items() if key.startswith(prefix + ".")}
    if props.get("type", "hive") != "hive" and "catalog-impl" not in props:
        raise MetastoreError(f"catalog {catalog!r} is of type {props.get('type')!r}: the verifier reads Hive catalogs")
    return props


def _session_conf(spark) -> dict[str, str]:
    """Settings set at run time with ``spark.conf.set`` (not in the SparkContext's conf)."""
    getall = getattr(spark.conf, "getAll", None)  # pyspark 4.0+
    if getall is not None:
        return dict(getall() if callable(getall) else getall)
    # pyspark 3.5: the JVM RuntimeConfig's Scala map, read entry by entry.
    entries = spark._jsparkSession.conf().getAll().iterator()
    conf = {}
    while entries.hasNext():
        entry = entries.next()
        conf[entry._1()] = entry._2()
    return conf


def table_parameters(spark, properties: dict[str, str], database: str, table: str) -> dict[str, str]:
    """The metastore's table parameters of ``database.table`` (raises MetastoreError)."""
    jvm = spark.sparkContext._jvm
    hive_conf_class = jvm.org.apache.hadoop.hive.conf.HiveConf
    conf = hive_conf_class(spark.sparkContext._jsc.hadoopConfiguration(), hive_conf_class._java_lang_class)
    for key, value in properties.items():
        if key.startswith("hadoop."):
            conf.set(key[len("hadoop."):], value)
    if properties.get("uri"):
        conf.set("hive.metastore.uris", properties["uri"])
    client = None
    try:
        client = jvm.org.apache.hadoop.hive.metastore.HiveMetaStoreClient(conf)
        params = dict(client.getTable(database, table).getParameters())
    except Exception as exc:
        raise MetastoreError(f"the metastore cannot give table {database}.{table}: {_java_message(exc)}") from None
    finally:
        if client is not None:
            try:
                client.close()
            except Exception:
                pass
    if params.get("table_type", "").upper() != "ICEBERG" or "metadata_location" not in params:
        raise MetastoreError(f"{database}.{table} is not an Iceberg table in the metastore")
    return {str(k): str(v) for k, v in params.items()}


def _java_message(exc: Exception) -> str:
    text = str(getattr(exc, "java_exception", None) or exc)
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__
