"""A table's catalog entry, one or all: asked of the catalog directly (a Hive metastore over
Thrift, a REST catalog over HTTP, no JVM) or through a Spark session's kept metastore client::

    entry = catalog_entry({"uri": "thrift://hms:9083"}, "lake.db.orders")          # no Spark: the metastore
    entry = catalog_entry({"type": "rest", "uri": "http://127.0.0.1:8181"}, "db.orders", catalog="lake")  # REST
    entry.parameters["metadata_location"], entry.parameters.get("metadata_hash"), entry.served_metadata
    rows = list_tables({"uri": "thrift://127.0.0.1:9083"}, ["db"])                  # every table, sorted

How a catalog is asked follows its kind (:func:`pyiceberg_crypto.catalog.kinds.catalog_kind`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pyiceberg_crypto.catalog.hive import MetastoreConnection, table_parameters
from pyiceberg_crypto.catalog.kinds import HIVE, REST, catalog_kind
from pyiceberg_crypto.catalog.rest import namespace_name, rest_catalog
from pyiceberg_crypto.catalog.spark import on_kept_client, parameters_or_none
from pyiceberg_crypto.errors import CatalogError, InvalidArgumentError, TableInputError
from pyiceberg_crypto.properties import CATALOG_TIMEOUT_SECONDS
from pyiceberg_crypto.spark.java import java_line

__all__ = ["ListedTable", "catalog_entry", "list_tables", "split_catalog_name"]


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
                  timeout: float = CATALOG_TIMEOUT_SECONDS) -> ListedTable:
    """One table's entry, asked of its catalog directly (no Spark, no JVM): a Hive metastore's
    ``uri`` (``thrift://host:port``) over Thrift, or a REST catalog (``type=rest`` and its
    ``uri``) with ``loadTable``; as :func:`list_tables` lists it (``parameters["metadata_location"]``,
    Hive's ``metadata_hash``, REST's ``served_metadata``), named ``namespace.table``.
    ``table``: ``catalog.db.table``, or ``db.table`` with ``catalog`` (:func:`split_catalog_name`).
    Raises TableInputError: unknown or non-Iceberg table, a catalog that cannot be asked;
    InvalidArgumentError: a name that is not one of those."""
    catalog, levels, name = split_catalog_name(table, catalog)
    shown = f"{catalog}.{'.'.join(levels)}.{name}"
    try:
        if catalog_kind(properties, catalog) == REST:
            loaded = rest_catalog({**properties}, timeout=timeout).load_table(levels, name)
            return ListedTable(".".join(levels), name, {"table_type": "ICEBERG",
                                                         "metadata_location": loaded.metadata_location},
                               loaded.metadata)
        if len(levels) != 1:
            raise CatalogError(f"a Hive metastore has one level of databases: {shown} is not DB.TABLE")
        if not properties.get("uri"):
            raise CatalogError("asking a Hive metastore without Spark needs its uri (thrift://host:port)")
        return ListedTable(levels[0], name, table_parameters(properties["uri"], levels[0], name, timeout=timeout))
    except CatalogError as exc:
        raise TableInputError(f"cannot look up {shown}: {exc}") from None


def split_catalog_name(table: str, catalog: str | None = None) -> tuple[str, tuple[str, ...], str]:
    """(catalog, namespace levels, table) of ``catalog.db.table``, or of ``db.table`` in catalog
    ``catalog`` (no name is made up: ``db.table`` without ``catalog`` is an InvalidArgumentError);
    a REST catalog's nested namespace as ``catalog.a.b.table``::

        split_catalog_name("lake.db.orders")           # ("lake", ("db",), "orders")
        split_catalog_name("db.orders", "lake")        # the same

    InvalidArgumentError for anything else, and for a ``catalog.db.table`` of another catalog than
    ``catalog``. (With Spark, :func:`~pyiceberg_crypto.catalog.spark.split_table_name` takes the session's current catalog instead.)"""
    parts = table.split(".")
    if not all(parts) or len(parts) < 2:
        raise InvalidArgumentError(f"table must be CATALOG.DB.TABLE or DB.TABLE, got {table!r}")
    if len(parts) == 2:
        if not catalog:
            raise InvalidArgumentError(f"name the catalog: CATALOG.DB.TABLE, not {table!r} (db.table names need "
                                       "the catalog's name)")
        return catalog, (parts[0],), parts[1]
    if catalog is not None and parts[0] != catalog:
        raise InvalidArgumentError(f"table {table!r} is not in catalog {catalog!r}: write {catalog}.DB.TABLE "
                                   "or DB.TABLE")
    return parts[0], tuple(parts[1:-1]), parts[-1]


def list_tables(properties: dict[str, str], namespaces: Sequence[str] | None = None, *, spark=None,
                timeout: float = CATALOG_TIMEOUT_SECONDS) -> list[ListedTable]:
    """Every table of ``namespaces`` (default: all; a REST catalog's nested ones as ``a.b``, a level
    that holds a dot in backticks: :func:`~pyiceberg_crypto.catalog.rest.namespace_name`) of the
    catalog with these settings (:func:`~pyiceberg_crypto.catalog.spark.catalog_properties`), Iceberg or not, sorted: the package's
    one table listing. One namespace or table that fails is its own row (:class:`ListedTable`);
    the others are listed.

    How the catalog is asked (:func:`catalog_kind`): a REST catalog over its HTTP API (each table
    loaded; namespaces keep their levels from the listing to each call, never split on a dot); a
    Hive catalog through ``spark``'s kept metastore client (as :func:`~pyiceberg_crypto.catalog.spark.spark_table_parameters`), or,
    without ``spark``, over Thrift from Python at the catalog's ``uri``; each call to a REST catalog
    or over Thrift is bounded by ``timeout`` seconds::

        names = [t.table for t in list_tables(catalog_properties(spark, "lake"), spark=spark) if t.is_iceberg]
        listing = list_tables({"uri": "thrift://127.0.0.1:9083"}, ["db"])          # no Spark

    Raises CatalogError: the catalog cannot list its namespaces, or a namespace does not exist.
    """
    if catalog_kind(properties) == REST:
        return _rest_listing(properties, namespaces, timeout)
    if spark is not None:
        return _spark_listing(spark, properties, namespaces)
    if not properties.get("uri"):
        raise CatalogError("listing a Hive catalog without Spark needs its uri (thrift://host:port)")
    return _thrift_listing(properties["uri"], namespaces, timeout)


def _thrift_listing(uri: str, namespaces: Sequence[str] | None, timeout: float) -> list[ListedTable]:
    """Over one Thrift connection (:class:`~pyiceberg_crypto.catalog.hive.MetastoreConnection`),
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
            except CatalogError as exc:  # this database only: an error row, the others are listed
                rows.append(ListedTable(database, "*", {"list_error": str(exc)}))
                connection = _reconnected(connection, uri, timeout)
                continue
            for table in tables:
                try:
                    rows.append(ListedTable(database, table, connection.parameters(database, table, missing_ok=True)))
                except CatalogError as exc:
                    rows.append(ListedTable(database, table, {"load_error": str(exc)}))
                    connection = _reconnected(connection, uri, timeout)
        return rows
    finally:
        connection.close()


def _reconnected(connection: MetastoreConnection, uri: str, timeout: float) -> MetastoreConnection:
    """A new connection in place of one whose last call failed (CatalogError if none can be made)."""
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
                                                                      f"database {database}: {java_line(exc)}"}))
                continue
            for table in tables:
                try:
                    rows.append(ListedTable(database, table, parameters_or_none(client, database, table)))
                except Exception as exc:  # noqa: BLE001 - this table only
                    rows.append(ListedTable(database, table, {"load_error": f"the metastore cannot give table "
                                                                            f"{database}.{table}: {java_line(exc)}"}))
        return rows

    return on_kept_client(spark, properties, listing, "the metastore cannot list its tables")


def _rest_listing(properties: dict[str, str], namespaces: Sequence[str] | None, timeout: float) -> list[ListedTable]:
    client = rest_catalog(properties, timeout=timeout)  # each HTTP call within ``timeout`` seconds
    known = {namespace_name(levels): levels for levels in client.list_namespaces()}
    wanted = sorted(namespaces) if namespaces is not None else sorted(known)
    _check_known(wanted, list(known), f"the REST catalog at {client.uri}", "namespace")
    rows: list[ListedTable] = []
    for namespace in wanted:
        levels = known[namespace]
        try:
            tables = sorted(client.list_tables(levels))
        except CatalogError as exc:  # this namespace only: an error row, the others are listed
            rows.append(ListedTable(namespace, "*", {"list_error": str(exc)}))
            continue
        for table in tables:
            try:
                loaded = client.load_table(levels, table)
            except CatalogError as exc:
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
        raise CatalogError(f"{what} {missing[0]!r} does not exist in {where}")
