"""The key inventory of a table, by metadata.json or by catalog name (the inventory itself is
:mod:`pyiceberg_crypto.table.key_inventory`, re-exported here)::

    inventory = inventory_from_metadata("file:/wh/db.db/t/metadata/00007-....metadata.json", kms)
    inventory = key_inventory(spark, "lake.db.orders")     # the current metadata.json, from its catalog
    entry = catalog_entry({"uri": "thrift://hms:9083"}, "lake.db.orders")          # no JVM: the metastore
    entry = catalog_entry({"type": "rest", "uri": "http://127.0.0.1:8181"}, "db.orders")   # no JVM: REST
    inventory = inventory_from_metadata(entry.parameters["metadata_location"], kms)
    inventory.master_key_versions()        # {("orders-key", "1"), ("orders-key", "2")}
    inventory.to_dict()                    # what ``pyiceberg-crypto keys list --json`` prints
"""

from __future__ import annotations

from pyiceberg_crypto.errors import InvalidArgumentError, TableInputError
from pyiceberg_crypto.io.hive_metastore import table_parameters
from pyiceberg_crypto.io.rest_catalog import RestCatalogError
from pyiceberg_crypto.kms.base import KeyManagementClient
from pyiceberg_crypto.table.catalog import REST, ListedTable, MetastoreError, catalog_kind, catalog_table, rest_catalog
from pyiceberg_crypto.table.key_inventory import (
    DAY_MS,
    KEK_ROTATION_DAYS,
    KekInfo,
    KeyInventory,
    build_inventory,
    kek_entries,
)
from pyiceberg_crypto.table.limits import Limits
from pyiceberg_crypto.table.metadata import TableMetadata, read_metadata

__all__ = ["DAY_MS", "KEK_ROTATION_DAYS", "KekInfo", "KeyInventory", "build_inventory", "catalog_entry",
           "inventory_from_metadata", "kek_entries", "key_inventory", "split_catalog_name"]


def inventory_from_metadata(metadata_location: str, kms: KeyManagementClient | None = None, *,
                            limits: Limits | None = None) -> KeyInventory:
    """The key inventory of the table whose metadata.json is at ``metadata_location`` (no JVM).

    ``limits`` (:class:`~pyiceberg_crypto.table.Limits`, default ``Limits()``): how files are read
    (``file_io``, ``properties``) and the largest metadata.json (``max_metadata_bytes``). Raises
    :class:`pyiceberg_crypto.errors.TableInputError` for a metadata.json that cannot be read or used.
    """
    limits = limits or Limits()
    raw = read_metadata(limits.file_io_for(metadata_location), metadata_location, limits.max_metadata_bytes)
    return build_inventory(TableMetadata.parse(raw, metadata_location), kms)


def key_inventory(spark, table: str, kms: KeyManagementClient | None = None) -> KeyInventory:
    """The key inventory of ``catalog.db.table`` (its current metadata.json from the metastore;
    ``kms`` defaults to the Python KMS registered for the catalog)."""
    entry = catalog_table(spark, table, kms)
    return inventory_from_metadata(entry.metadata_location, entry.kms, limits=Limits(file_io=entry.file_io))


def split_catalog_name(table: str, catalog: str | None = None) -> tuple[str, tuple[str, ...], str]:
    """(catalog, namespace levels, table) of ``catalog.db.table`` or ``db.table`` (catalog
    ``catalog``, default ``lake``); a REST catalog's nested namespace as ``catalog.a.b.table``.
    InvalidArgumentError for anything else."""
    parts = table.split(".")
    if not all(parts) or len(parts) < 2:
        raise InvalidArgumentError(f"table must be CATALOG.DB.TABLE or DB.TABLE, got {table!r}")
    if len(parts) == 2:
        return catalog or "lake", (parts[0],), parts[1]
    if catalog is not None and parts[0] != catalog:
        raise InvalidArgumentError(f"table {table!r} is not in catalog {catalog!r}: write {catalog}.DB.TABLE "
                                   "or DB.TABLE")
    return parts[0], tuple(parts[1:-1]), parts[-1]


def catalog_entry(properties: dict[str, str], table: str, *, catalog: str | None = None,
                  timeout: float = 30.0) -> ListedTable:
    """One table's entry, asked of its catalog directly (no Spark, no JVM): a Hive metastore's
    ``uri`` (``thrift://host:port``) over Thrift, or a REST catalog (``type=rest`` and its
    ``uri``) with ``loadTable``; as :func:`~pyiceberg_crypto.table.catalog.list_tables` lists it
    (``parameters["metadata_location"]``, Hive's ``metadata_hash``, REST's ``served_metadata``),
    named ``namespace.table``. Raises TableInputError: unknown or non-Iceberg table, a catalog
    that cannot be asked."""
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
