"""The key inventory of a table, by metadata.json or by catalog name (the inventory itself is
:mod:`pyiceberg_crypto.table.key_inventory`, re-exported here)::

    inventory = inventory_from_metadata("file:/wh/db.db/t/metadata/00007-....metadata.json", kms)
    inventory = key_inventory(spark, "lake.db.orders")     # the current metadata.json, from its catalog
    entry = catalog_entry({"uri": "thrift://hms:9083"}, "lake.db.orders")   # no JVM (pyiceberg_crypto.catalog.entry)
    inventory = inventory_from_metadata(entry.parameters["metadata_location"], kms)
    inventory.master_key_versions()        # {("orders-key", "1"), ("orders-key", "2")}
    inventory.to_dict()                    # what ``pyiceberg-crypto keys list --json`` prints
"""

from __future__ import annotations

from pyiceberg_crypto.kms.base import KeyManagementClient
from pyiceberg_crypto.catalog.spark import catalog_table
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

__all__ = ["DAY_MS", "KEK_ROTATION_DAYS", "KekInfo", "KeyInventory", "build_inventory", "inventory_from_metadata",
           "kek_entries", "key_inventory"]


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
