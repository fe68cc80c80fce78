"""A table by its catalog name, through a Spark session: the catalog's settings, the metastore's
entry (asked through a metastore client kept in the driver JVM), and the Python KMS registered for
the catalog::

    entry = catalog_table(spark, "lake.db.orders")        # CatalogTable
    entry.metadata_location, entry.kind, entry.kms, entry.file_io
    entry.parameters.get("metadata_hash")                 # Hive: the hash Iceberg stored with the entry
    entry.served_metadata                                 # REST: the table metadata the catalog serves
    properties = catalog_properties(spark, "lake")        # the spark.sql.catalog.lake.* settings

Without Spark, :mod:`pyiceberg_crypto.catalog.entry` asks a catalog directly (Thrift or HTTP).

- **Hive**: the verifier asks the metastore directly (a Hive ``HiveMetaStoreClient`` in the driver
  JVM, built from the same settings as the Iceberg catalog), not Iceberg: Iceberg refuses to load a
  modified metadata.json, and the point is to report *that* as a finding. The metastore keeps the
  ``metadata_location`` and its ``metadata_hash`` (Base64 SHA-256 of the metadata.json)::

      params = spark_table_parameters(spark, catalog_properties(spark, "lake"), "db", "orders")
      params["metadata_location"], params.get("metadata_hash")

- **REST** (the bridge's ``EncryptingRestCatalog``, or Iceberg's own ``type=rest``): the catalog is
  asked over its HTTP API from Python (:class:`pyiceberg_crypto.catalog.rest.RestCatalog`, with
  the catalog's ``uri``, ``token``/``credential`` and ``header.*`` settings). It keeps no hash: its
  anchor is the metadata it serves, which every client reads instead of the file.

No module-level pyspark import: the session is an argument (``import pyiceberg_crypto.verify`` stays light).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from pyiceberg_crypto.catalog.hive import MetastoreError
from pyiceberg_crypto.catalog.kinds import HIVE, REST, catalog_kind
from pyiceberg_crypto.catalog.rest import RestCatalogError, rest_catalog
from pyiceberg_crypto.errors import TableInputError
from pyiceberg_crypto.io import FileIO, file_io_for
from pyiceberg_crypto.kms.base import KeyManagementClient
from pyiceberg_crypto.kms.registrations import registered
from pyiceberg_crypto.properties import KMS_NAME_PROPERTY, KMS_SERVICE_PROPERTY
from pyiceberg_crypto.spark.java import java_line
from pyiceberg_crypto.spark.session import activate_session, require_classic_session, runtime_settings

__all__ = ["CatalogTable", "activate_session", "catalog_properties", "catalog_table", "close_clients", "configured_catalogs",
           "registered_kms", "require_classic_session", "spark_table_parameters", "split_table_name"]


def catalog_properties(spark, catalog: str) -> dict[str, str]:
    """The ``spark.sql.catalog.<catalog>.*`` settings, without the prefix (``uri``, ``warehouse``...)."""
    require_classic_session(spark, "reading a catalog's settings")
    prefix = f"spark.sql.catalog.{catalog}"
    # The SparkContext's settings under the prefix only (its getAll() costs a JVM call per entry).
    conf = {prefix + suffix: value for suffix, value in _with_prefix(spark, prefix)}
    conf.update(runtime_settings(spark))
    if prefix not in conf:
        names = configured_catalogs(spark)
        known = f"; the session's catalogs: {', '.join(names)}" if names else "; the session configures none"
        raise MetastoreError(f"no Spark catalog named {catalog!r} (spark.sql.catalog.{catalog} is not set){known}")
    props = {key[len(prefix) + 1:]: value for key, value in conf.items() if key.startswith(prefix + ".")}
    catalog_kind(props, catalog)
    return props


def configured_catalogs(spark) -> list[str]:
    """The names of the catalogs the session configures (``spark.sql.catalog.<name>`` set), sorted."""
    prefix = "spark.sql.catalog."
    keys = [prefix + suffix for suffix, _ in _with_prefix(spark, prefix)] + list(runtime_settings(spark))
    return sorted({key[len(prefix):] for key in keys if key.startswith(prefix) and "." not in key[len(prefix):]})


def _with_prefix(spark, prefix: str) -> list[tuple[str, str]]:
    """``SparkConf.getAllWithPrefix``: (key without the prefix, value) of the SparkContext's settings."""
    return [(entry._1(), entry._2()) for entry in spark.sparkContext._jsc.getConf().getAllWithPrefix(prefix)]


#: The table parameters Iceberg's Hive catalog keeps that the verifier reads.
ICEBERG_PARAMETERS = ("table_type", "metadata_location", "metadata_hash", "previous_metadata_location")


def spark_table_parameters(spark, properties: dict[str, str], database: str, table: str) -> dict[str, str]:
    """The metastore's Iceberg parameters of ``database.table`` (:data:`ICEBERG_PARAMETERS` that it
    has; raises MetastoreError), through the kept client (:func:`on_kept_client`)."""
    require_classic_session(spark, "asking the metastore through Spark")

    def parameters(client) -> dict:
        found = client.getTable(database, table).getParameters()
        params = {name: found.get(name) for name in ICEBERG_PARAMETERS}  # one JVM call each
        return {name: value for name, value in params.items() if value is not None}

    params = on_kept_client(spark, properties, parameters, f"the metastore cannot give table {database}.{table}")
    if params.get("table_type", "").upper() != "ICEBERG" or "metadata_location" not in params:
        raise MetastoreError(f"{database}.{table} is not an Iceberg table in the metastore")
    return {str(k): str(v) for k, v in params.items()}


def on_kept_client(spark, properties: dict[str, str], call, failure: str):
    """``call(client)`` on the metastore client kept for this Spark application and these catalog
    settings (a new ``HiveConf`` and client cost most of a post-write ``since`` check). A call that
    fails on a kept client is tried once more on a new one (a remote metastore may have dropped the
    connection), unless the metastore said the object does not exist; a MetastoreError of ``call``
    passes through, any other failure becomes ``MetastoreError(f"{failure}: ...")``."""
    key = client_key(spark, properties)
    with _CLIENTS_LOCK:
        for stale in [k for k in _CLIENTS if k[0] != key[0]]:  # clients of stopped SparkContexts
            _forget(stale)
        for attempt in (1, 2):
            client = _CLIENTS.get(key)
            reused = client is not None
            try:
                if client is None:
                    client = _CLIENTS[key] = _new_client(spark, properties)
                return call(client)
            except MetastoreError:
                raise
            except Exception as exc:
                _forget(key)
                if reused and attempt == 1 and not _is_no_such_object(exc):
                    continue
                raise MetastoreError(f"{failure}: {java_line(exc)}") from None
    raise AssertionError("unreachable")


def parameters_or_none(client, database: str, table: str) -> dict[str, str] | None:
    try:
        found = client.getTable(database, table).getParameters()
    except Exception as exc:
        if _is_no_such_object(exc):
            return None
        raise
    params = {name: found.get(name) for name in ICEBERG_PARAMETERS}
    return {name: str(value) for name, value in params.items() if value is not None}


#: Kept metastore clients: (Spark application id, catalog settings) -> HiveMetaStoreClient (JVM).
#: A client is used by one thread at a time (the lock): Hive's client is not thread-safe.
_CLIENTS: dict = {}


_CLIENTS_LOCK = threading.Lock()


def client_key(spark, properties: dict[str, str]) -> tuple:
    """Which kept client serves a lookup: the Spark application's and the catalog settings'."""
    return str(spark.sparkContext.applicationId), tuple(sorted(properties.items()))


def _new_client(spark, properties: dict[str, str]):
    jvm = spark.sparkContext._jvm
    hive_conf_class = jvm.org.apache.hadoop.hive.conf.HiveConf
    conf = hive_conf_class(spark.sparkContext._jsc.hadoopConfiguration(), hive_conf_class._java_lang_class)
    for key, value in properties.items():
        if key.startswith("hadoop."):
            conf.set(key[len("hadoop."):], value)
    if properties.get("uri"):
        conf.set("hive.metastore.uris", properties["uri"])
    return jvm.org.apache.hadoop.hive.metastore.HiveMetaStoreClient(conf)


def _forget(key) -> None:
    client = _CLIENTS.pop(key, None)
    if client is not None:
        try:
            client.close()
        except Exception:  # a client of a stopped JVM, or one whose connection is gone
            pass


def close_clients() -> None:
    """Close the kept metastore clients (before a SparkContext stops; harmless at any time)."""
    with _CLIENTS_LOCK:
        for key in list(_CLIENTS):
            _forget(key)


def _is_no_such_object(exc: Exception) -> bool:
    return "NoSuchObjectException" in str(getattr(exc, "java_exception", None) or exc)


@dataclass(frozen=True)
class CatalogTable:
    """What the catalog and the Spark settings say about one table, and the KMS to use for it."""

    name: str  # catalog.db.table
    properties: dict[str, str]  # the catalog's settings
    parameters: dict[str, str]  # Hive: the metastore's table parameters; REST: metadata_location only
    kms: KeyManagementClient
    kind: str = HIVE  # HIVE or REST
    served_metadata: dict | None = field(default=None, repr=False)  # REST: the metadata the catalog serves

    @property
    def metadata_location(self) -> str:
        return self.parameters["metadata_location"]

    @property
    def file_io(self) -> FileIO:
        return file_io_for(self.metadata_location, self.properties)


def catalog_table(spark, table: str, kms: KeyManagementClient | None = None) -> CatalogTable:
    """Look ``table`` up in its catalog (the Hive metastore, or the REST catalog's ``loadTable``);
    ``kms`` defaults to the Python KMS registered for the catalog. Raises TableInputError (unknown
    catalog or table, a catalog that cannot be asked, no KMS)."""
    catalog, database, name = split_table_name(spark, table)
    served = None
    try:
        properties = catalog_properties(spark, catalog)
        kind = catalog_kind(properties, catalog)
        if kind == REST:
            loaded = rest_catalog(properties).load_table(database, name)
            parameters, served = {"metadata_location": loaded.metadata_location}, loaded.metadata
        else:
            parameters = spark_table_parameters(spark, properties, database, name)
    except (MetastoreError, RestCatalogError) as exc:
        raise TableInputError(str(exc)) from None
    kms = kms if kms is not None else registered_kms(properties, catalog)
    return CatalogTable(f"{catalog}.{database}.{name}", properties, parameters, kms, kind, served)


def split_table_name(spark, table: str) -> tuple[str, str, str]:
    """(catalog, database, table) of ``catalog.db.table``, or of ``db.table`` in the current catalog."""
    require_classic_session(spark, f"looking up table {table!r}")
    parts = table.split(".")
    if len(parts) == 2 and all(parts):
        current = spark.catalog.currentCatalog()
        names = configured_catalogs(spark)
        if current not in names:
            example = f"{names[0]}.{table}" if names else f"CATALOG.{table}"
            raise TableInputError(
                f"table {table!r} names no catalog, and the session's current catalog {current!r} is not one it "
                f"configures: write {example!r}" + (f" (the session's catalogs: {', '.join(names)})" if names else
                                                    " after configuring one (config.spark_settings)"))
        parts = [current, *parts]
    if len(parts) != 3 or not all(parts):
        raise TableInputError(f"table must be catalog.db.table, got {table!r}")
    return parts[0], parts[1], parts[2]


def registered_kms(properties: dict[str, str], catalog: str) -> KeyManagementClient:
    """The Python KMS registered (:func:`pyiceberg_crypto.bridge.register_kms`) under the catalog's
    ``pyiceberg-crypto.kms-name``; TableInputError when there is none, or the catalog uses a KMS service."""
    service = properties.get(KMS_SERVICE_PROPERTY)
    if service:
        raise TableInputError(
            f"catalog {catalog!r} uses the KMS service {service} (pyiceberg-crypto kms serve), which serves "
            "JVMs only: pass the same KMS to verify_table(..., kms=load_kms(...)) (the verifier unwraps keys "
            "in Python), or --kms to the verification job"
        )
    name = properties.get(KMS_NAME_PROPERTY, "default")
    registration = registered(name)
    if registration is None or not registration.active:
        raise TableInputError(
            f"no Python KMS is registered under {name!r} (catalog {catalog!r}): call "
            f"register_kms(spark, kms, name={name!r}) first, or pass kms= to verify_table"
        )
    return registration.kms
