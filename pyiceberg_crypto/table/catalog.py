"""A table by its catalog name: where its current metadata.json is, what anchors that file, the
catalog's settings, and the Python KMS registered for that catalog::

    entry = catalog_table(spark, "lake.db.orders")        # CatalogTable
    entry.metadata_location, entry.kind, entry.kms, entry.file_io
    entry.parameters.get("metadata_hash")                 # Hive: the hash Iceberg stored with the entry
    entry.served_metadata                                 # REST: the table metadata the catalog serves
    entry = catalog_entry({"uri": "thrift://hms:9083"}, "lake.db.orders")          # no Spark: the metastore
    entry = catalog_entry({"type": "rest", "uri": "http://127.0.0.1:8181"}, "db.orders")   # no Spark: REST

Two kinds of catalog (:func:`catalog_kind`):

- **Hive**: the verifier asks the metastore directly (a Hive ``HiveMetaStoreClient`` in the driver
  JVM, built from the same settings as the Iceberg catalog), not Iceberg: Iceberg refuses to load a
  modified metadata.json, and the point is to report *that* as a finding. The metastore keeps the
  ``metadata_location`` and its ``metadata_hash`` (Base64 SHA-256 of the metadata.json)::

      params = spark_table_parameters(spark, catalog_properties(spark, "lake"), "db", "orders")
      params["metadata_location"], params.get("metadata_hash")

- **REST** (the bridge's ``EncryptingRestCatalog``, or Iceberg's own ``type=rest``): the catalog is
  asked over its HTTP API from Python (:class:`pyiceberg_crypto.io.rest_catalog.RestCatalog`, with
  the catalog's ``uri``, ``token``/``credential`` and ``header.*`` settings). It keeps no hash: its
  anchor is the metadata it serves, which every client reads instead of the file.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from pyiceberg_crypto.config import ENCRYPTING_REST_CATALOG_IMPL, HIVE, KMS_NAME_PROPERTY, KMS_SERVICE_PROPERTY, REST
from pyiceberg_crypto.errors import CONNECT_NEXT_STEP, InvalidArgumentError, NotASparkSessionError, TableInputError
from pyiceberg_crypto.io import FileIO, file_io_for
from pyiceberg_crypto.io.hive_metastore import (  # MetastoreError: one error for every way of asking
    MetastoreConnection,
    MetastoreError,
    table_parameters,
)
from pyiceberg_crypto.io.rest_catalog import RestCatalog, RestCatalogError, namespace_name
from pyiceberg_crypto.kms.base import KeyManagementClient
from pyiceberg_crypto.kms.registrations import registered

__all__ = ["CatalogTable", "HIVE", "MetastoreError", "REST", "catalog_entry", "catalog_kind", "catalog_properties",
           "catalog_table", "ListedTable", "list_tables", "registered_kms", "rest_catalog",
           "spark_table_parameters", "split_catalog_name", "split_table_name"]

#: The kinds of catalog a table can be looked up in (:func:`catalog_kind`).
#: ``catalog-impl`` values that are REST catalogs (the bridge's encrypting one, and Iceberg's).
REST_CATALOG_IMPLS = (ENCRYPTING_REST_CATALOG_IMPL, "org.apache.iceberg.rest.RESTCatalog")


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


def catalog_properties(spark, catalog: str) -> dict[str, str]:
    """The ``spark.sql.catalog.<catalog>.*`` settings, without the prefix (``uri``, ``warehouse``...)."""
    require_classic_session(spark, "reading a catalog's settings")
    prefix = f"spark.sql.catalog.{catalog}"
    # The SparkContext's settings under the prefix only (its getAll() costs a JVM call per entry).
    conf = {prefix + suffix: value for suffix, value in _with_prefix(spark, prefix)}
    conf.update(_session_conf(spark))
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
    keys = [prefix + suffix for suffix, _ in _with_prefix(spark, prefix)] + list(_session_conf(spark))
    return sorted({key[len(prefix):] for key in keys if key.startswith(prefix) and "." not in key[len(prefix):]})


def catalog_kind(properties: dict[str, str], catalog: str = "?") -> str:
    """:data:`HIVE` or :data:`REST`: how a table of a catalog with these settings is looked up.
    MetastoreError for any other catalog (e.g. ``type=hadoop``: no catalog service to ask)."""
    if properties.get("type") == REST or properties.get("catalog-impl") in REST_CATALOG_IMPLS:
        return REST
    if properties.get("type", HIVE) == HIVE or "catalog-impl" in properties:
        return HIVE  # a catalog-impl of our own is a Hive catalog (a subclass of Iceberg's HiveCatalog)
    raise MetastoreError(f"catalog {catalog!r} is of type {properties.get('type')!r}: the verifier reads Hive "
                         "and REST catalogs")


def rest_catalog(properties: dict[str, str]) -> RestCatalog:
    """A REST client for a REST catalog's settings (``uri``, ``token``, ``credential``, ``header.*``)."""
    try:
        return RestCatalog.from_properties(properties)
    except RestCatalogError as exc:
        raise MetastoreError(str(exc)) from None


def _with_prefix(spark, prefix: str) -> list[tuple[str, str]]:
    """``SparkConf.getAllWithPrefix``: (key without the prefix, value) of the SparkContext's settings."""
    return [(entry._1(), entry._2()) for entry in spark.sparkContext._jsc.getConf().getAllWithPrefix(prefix)]


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


#: The table parameters Iceberg's Hive catalog keeps that the verifier reads.
ICEBERG_PARAMETERS = ("table_type", "metadata_location", "metadata_hash", "previous_metadata_location")


def spark_table_parameters(spark, properties: dict[str, str], database: str, table: str) -> dict[str, str]:
    """The metastore's Iceberg parameters of ``database.table`` (:data:`ICEBERG_PARAMETERS` that it
    has; raises MetastoreError), through the kept client (:func:`_on_kept_client`)."""
    require_classic_session(spark, "asking the metastore through Spark")

    def parameters(client) -> dict:
        found = client.getTable(database, table).getParameters()
        params = {name: found.get(name) for name in ICEBERG_PARAMETERS}  # one JVM call each
        return {name: value for name, value in params.items() if value is not None}

    params = _on_kept_client(spark, properties, parameters, f"the metastore cannot give table {database}.{table}")
    if params.get("table_type", "").upper() != "ICEBERG" or "metadata_location" not in params:
        raise MetastoreError(f"{database}.{table} is not an Iceberg table in the metastore")
    return {str(k): str(v) for k, v in params.items()}


@dataclass(frozen=True)
class ListedTable:
    """One table as its catalog lists it (:func:`list_tables`); ``parameters`` None: dropped since
    it was listed. Hive: the metastore's :data:`ICEBERG_PARAMETERS` it has (any table type); REST:
    Hive-like ``table_type`` ICEBERG and ``metadata_location``, and the metadata the catalog serves.
    A table that cannot be read has ``{"load_error": why}``; a namespace whose tables cannot be
    listed is one row named ``*`` with ``{"list_error": why}`` (the listing goes on)."""

    namespace: str
    name: str
    parameters: dict[str, str] | None
    served_metadata: dict | None = field(default=None, repr=False)  # a REST catalog's loadTable metadata

    @property
    def table(self) -> str:
        return f"{self.namespace}.{self.name}"

    @property
    def is_iceberg(self) -> bool:
        return self.parameters is not None and self.parameters.get("table_type", "").upper() == "ICEBERG"

    @property
    def kind(self) -> str:
        """:data:`REST` when the catalog served the table's metadata (a table a REST catalog
        loaded), else :data:`HIVE`."""
        return REST if self.served_metadata is not None else HIVE


def catalog_entry(properties: dict[str, str], table: str, *, catalog: str | None = None,
                  timeout: float = 30.0) -> ListedTable:
    """One table's entry, asked of its catalog directly (no Spark, no JVM): a Hive metastore's
    ``uri`` (``thrift://host:port``) over Thrift, or a REST catalog (``type=rest`` and its
    ``uri``) with ``loadTable``; as :func:`list_tables` lists it (``parameters["metadata_location"]``,
    Hive's ``metadata_hash``, REST's ``served_metadata``), named ``namespace.table``
    (:func:`split_catalog_name` reads ``table``). Raises TableInputError: unknown or non-Iceberg
    table, a catalog that cannot be asked."""
    catalog, levels, name = split_catalog_name(table, catalog)
    shown = f"{catalog}.{'.'.join(levels)}.{name}"
    try:
        if catalog_kind(properties, catalog) == REST:
            loaded = rest_catalog({**properties}).load_table(levels, name)
            return ListedTable(".".join(levels), name, {"table_type": "ICEBERG",
                                                         "metadata_location": loaded.metadata_location},
                               loaded.metadata)
        if len(levels) != 1:
            raise MetastoreError(f"a Hive metastore has one level of databases: {shown} is not DB.TABLE")
        if not properties.get("uri"):
            raise MetastoreError("asking a Hive metastore without Spark needs its uri (thrift://host:port)")
        return ListedTable(levels[0], name, table_parameters(properties["uri"], levels[0], name, timeout=timeout))
    except (MetastoreError, RestCatalogError) as exc:
        raise TableInputError(f"cannot look up {shown}: {exc}") from None


def split_catalog_name(table: str, catalog: str | None = None) -> tuple[str, tuple[str, ...], str]:
    """(catalog, namespace levels, table) of ``catalog.db.table`` or ``db.table`` (catalog
    ``catalog``, default ``lake``); a REST catalog's nested namespace as ``catalog.a.b.table``.
    InvalidArgumentError for anything else. (With Spark, :func:`split_table_name` takes the
    session's current catalog instead.)"""
    parts = table.split(".")
    if not all(parts) or len(parts) < 2:
        raise InvalidArgumentError(f"table must be CATALOG.DB.TABLE or DB.TABLE, got {table!r}")
    if len(parts) == 2:
        return catalog or "lake", (parts[0],), parts[1]
    if catalog is not None and parts[0] != catalog:
        raise InvalidArgumentError(f"table {table!r} is not in catalog {catalog!r}: write {catalog}.DB.TABLE "
                                   "or DB.TABLE")
    return parts[0], tuple(parts[1:-1]), parts[-1]


def list_tables(properties: dict[str, str], namespaces: Sequence[str] | None = None, *, spark=None,
                timeout: float = 30.0) -> list[ListedTable]:
    """Every table of ``namespaces`` (default: all; a REST catalog's nested ones as ``a.b``, a level
    that holds a dot in backticks: :func:`~pyiceberg_crypto.io.rest_catalog.namespace_name`) of the
    catalog with these settings (:func:`catalog_properties`), Iceberg or not, sorted: the package's
    one table listing. One namespace or table that fails is its own row (:class:`ListedTable`);
    the others are listed.

    How the catalog is asked (:func:`catalog_kind`): a REST catalog over its HTTP API (each table
    loaded; namespaces keep their levels from the listing to each call, never split on a dot); a
    Hive catalog through ``spark``'s kept metastore client (as :func:`spark_table_parameters`), or,
    without ``spark``, over Thrift from Python at the catalog's ``uri`` (each call bounded by
    ``timeout`` seconds)::

        names = [t.table for t in list_tables(catalog_properties(spark, "lake"), spark=spark) if t.is_iceberg]
        listing = list_tables({"uri": "thrift://127.0.0.1:9083"}, ["db"])          # no Spark

    Raises MetastoreError: the catalog cannot list its namespaces, or a namespace does not exist.
    """
    if catalog_kind(properties) == REST:
        return _rest_listing(properties, namespaces)
    if spark is not None:
        return _spark_listing(spark, properties, namespaces)
    if not properties.get("uri"):
        raise MetastoreError("listing a Hive catalog without Spark needs its uri (thrift://host:port)")
    return _thrift_listing(properties["uri"], namespaces, timeout)


def _thrift_listing(uri: str, namespaces: Sequence[str] | None, timeout: float) -> list[ListedTable]:
    """Over one Thrift connection (:class:`~pyiceberg_crypto.io.hive_metastore.MetastoreConnection`),
    a new one after a call that failed (it may have left the old one mid-reply). A name that is not
    UTF-8 comes back with lone surrogates (``surrogateescape``), asked for byte for byte."""
    connection = MetastoreConnection(uri, timeout=timeout, purpose="list its tables")
    try:
        known = connection.databases()
        wanted = sorted(namespaces) if namespaces is not None else sorted(known)
        _check_known(wanted, known, f"the Hive metastore at {connection.where}", "database")
        rows: list[ListedTable] = []
        for database in wanted:
            try:
                tables = sorted(connection.tables(database))
            except MetastoreError as exc:  # this database only: an error row, the others are listed
                rows.append(ListedTable(database, "*", {"list_error": str(exc)}))
                connection = _reconnected(connection, uri, timeout)
                continue
            for table in tables:
                try:
                    rows.append(ListedTable(database, table, connection.parameters(database, table, missing_ok=True)))
                except MetastoreError as exc:
                    rows.append(ListedTable(database, table, {"load_error": str(exc)}))
                    connection = _reconnected(connection, uri, timeout)
        return rows
    finally:
        connection.close()


def _reconnected(connection: MetastoreConnection, uri: str, timeout: float) -> MetastoreConnection:
    """A new connection in place of one whose last call failed (MetastoreError if none can be made)."""
    connection.close()
    return MetastoreConnection(uri, timeout=timeout, purpose="list its tables")


def _spark_listing(spark, properties: dict[str, str], namespaces: Sequence[str] | None) -> list[ListedTable]:
    def listing(client) -> list[ListedTable]:
        known = [str(name) for name in client.getAllDatabases()]
        wanted = sorted(namespaces) if namespaces is not None else sorted(known)
        _check_known(wanted, known, "the metastore", "database")
        rows: list[ListedTable] = []
        for database in wanted:  # one database or table that fails is its row; the others are listed
            try:
                tables = sorted(str(name) for name in client.getAllTables(database))
            except Exception as exc:  # noqa: BLE001 - a JVM error: this database only
                rows.append(ListedTable(database, "*", {"list_error": f"the metastore cannot list the tables of "
                                                                      f"database {database}: {_java_message(exc)}"}))
                continue
            for table in tables:
                try:
                    rows.append(ListedTable(database, table, _parameters_or_none(client, database, table)))
                except Exception as exc:  # noqa: BLE001 - this table only
                    rows.append(ListedTable(database, table, {"load_error": f"the metastore cannot give table "
                                                                            f"{database}.{table}: {_java_message(exc)}"}))
        return rows

    return _on_kept_client(spark, properties, listing, "the metastore cannot list its tables")


def _rest_listing(properties: dict[str, str], namespaces: Sequence[str] | None) -> list[ListedTable]:
    client = rest_catalog(properties)
    try:
        known = {namespace_name(levels): levels for levels in client.list_namespaces()}
    except RestCatalogError as exc:
        raise MetastoreError(str(exc)) from None
    wanted = sorted(namespaces) if namespaces is not None else sorted(known)
    _check_known(wanted, list(known), f"the REST catalog at {client.uri}", "namespace")
    rows: list[ListedTable] = []
    for namespace in wanted:
        levels = known[namespace]
        try:
            tables = sorted(client.list_tables(levels))
        except RestCatalogError as exc:  # this namespace only: an error row, the others are listed
            rows.append(ListedTable(namespace, "*", {"list_error": str(exc)}))
            continue
        for table in tables:
            try:
                loaded = client.load_table(levels, table)
            except RestCatalogError as exc:
                if exc.status == 404:
                    rows.append(ListedTable(namespace, table, None))  # dropped since it was listed
                else:
                    rows.append(ListedTable(namespace, table, {"table_type": "ICEBERG", "load_error": str(exc)}))
                continue
            rows.append(ListedTable(namespace, table, {"table_type": "ICEBERG",
                                                       "metadata_location": loaded.metadata_location},
                                    loaded.metadata))
    return rows


def _check_known(wanted: Sequence[str], known: Sequence[str], where: str, what: str) -> None:
    missing = [name for name in wanted if name not in set(known)]
    if missing:
        raise MetastoreError(f"{what} {missing[0]!r} does not exist in {where}")


def _on_kept_client(spark, properties: dict[str, str], call, failure: str):
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
                raise MetastoreError(f"{failure}: {_java_message(exc)}") from None
    raise AssertionError("unreachable")


def _parameters_or_none(client, database: str, table: str) -> dict[str, str] | None:
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


def _java_message(exc: Exception) -> str:
    text = str(getattr(exc, "java_exception", None) or exc)
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


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
