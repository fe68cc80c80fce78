"""Key lifecycle: see every key a table depends on, and re-wrap its KEKs under a rotated master key
without rewriting data::

    from pyiceberg_crypto.keys import inventory_from_metadata, key_inventory, rewrap_keks

    inventory = key_inventory(spark, "lake.db.orders")          # through the metastore
    inventory = inventory_from_metadata(metadata_json, kms)      # no JVM
    [(k.key_id, k.master_key_version, k.outdated) for k in inventory.keks]
    result = rewrap_keks(spark, "lake.db.orders")                # one Iceberg commit
    result = rewrap_keks(spark, "lake.db.orders", dry_run=True)  # what would change

Modules: :mod:`.inventory` (KEKs, their age, master key versions, the snapshots they seal, unused
entries; the verifier's ``kek-rotation`` check) and :mod:`.rewrap` (the commit through the catalog).
"""

from pyiceberg_crypto.keys.inventory import KekInfo, KeyInventory, inventory_from_metadata, key_inventory
from pyiceberg_crypto.keys.rewrap import RewrapError, RewrapResult, rewrap_keks

__all__ = ["KekInfo", "KeyInventory", "RewrapError", "RewrapResult", "inventory_from_metadata", "key_inventory",
           "rewrap_keks"]
