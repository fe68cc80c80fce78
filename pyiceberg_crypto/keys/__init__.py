"""Key lifecycle: see every key a table depends on, re-wrap its KEKs under a rotated master key
without rewriting data, and remove the entries no snapshot needs::

    from pyiceberg_crypto.keys import inventory_from_metadata, key_inventory, prune_keys, rewrap_keks

    inventory = key_inventory(spark, "lake.db.orders")          # through the metastore
    inventory = inventory_from_metadata(metadata_json, kms)      # no JVM
    [(k.key_id, k.master_key_version, k.outdated) for k in inventory.keks]
    result = rewrap_keks(spark, "lake.db.orders", dry_run=False) # one Iceberg commit (dry run: what would change)
    result = prune_keys(spark, "lake.db.orders")                 # drop entries no snapshot needs
    rewrap_keks_in_catalog({"uri": "thrift://hms:9083"}, "lake.db.orders", kms)   # no JVM (or a REST catalog)
    prune_keys_in_catalog({"type": "rest", "uri": "http://127.0.0.1:8181"}, "db.orders", catalog="lake")  # no JVM
    where_used_in_catalog(spark, "lake", "orders-key", "1", kms).needed   # before retiring a version
    where_used_in_listing({"uri": "thrift://hms:9083"}, "orders-key", "1", kms, catalog="lake").needed  # no JVM
    reencrypt_table(spark, "lake.db.orders", compromised_master_keys=[("orders-key", "1")])  # after a leak
    found = dependent_tables({"uri": "thrift://hms:9083"}, "lake", [("orders-key", "1")], kms)   # which to re-encrypt
    reencrypt_catalog(found, "lake", reencrypt_one, report="all.json", parallel=2)   # each, resumably

Modules: :mod:`.inventory` (KEKs, their age, master key versions, the snapshots they seal:
:mod:`pyiceberg_crypto.table.key_inventory`), :mod:`.rewrap` and :mod:`.prune` (commits: with Spark,
:mod:`.commit`; without, :mod:`pyiceberg_crypto.catalog.commit`), :mod:`.where_used` (which tables need
a master key version), :mod:`.reencrypt` (fresh KEK, every file rewritten: after a key was
compromised), :mod:`.reencrypt_all` (every dependent table of a catalog, resumably).
"""

from pyiceberg_crypto._deprecated import renamed_classes
from pyiceberg_crypto.errors import OperationError
from pyiceberg_crypto.keys.inventory import KekInfo, KeyInventory, inventory_from_metadata, key_inventory
from pyiceberg_crypto.keys.prune import PruneResult, prune_keys, prune_keys_in_catalog
from pyiceberg_crypto.keys.reencrypt import ReencryptResult, reencrypt_table
from pyiceberg_crypto.keys.reencrypt_all import (
    CatalogReencryption,
    DependentTables,
    EachOutcome,
    carried_dependent,
    dependent_tables,
    earlier_proofs,
    reencrypt_catalog,
    reencrypt_each,
)
from pyiceberg_crypto.keys.rewrap import RewrapResult, rewrap_keks, rewrap_keks_in_catalog
from pyiceberg_crypto.keys.where_used import KeyUse, WhereUsed, where_used_in_catalog, where_used_in_listing, where_used_in_metadata

__all__ = ["CatalogReencryption", "DependentTables", "EachOutcome", "KekInfo", "KeyInventory", "KeyUse", "PruneResult",
           "ReencryptResult", "RewrapResult", "WhereUsed", "carried_dependent", "dependent_tables", "earlier_proofs",
           "inventory_from_metadata", "key_inventory", "prune_keys", "prune_keys_in_catalog", "reencrypt_catalog", "reencrypt_each",
           "reencrypt_table", "rewrap_keks", "rewrap_keks_in_catalog", "where_used_in_catalog", "where_used_in_listing",
           "where_used_in_metadata"]

#: Old names, kept for one release (CHANGELOG.md).
__getattr__ = renamed_classes(__name__, {"PruneError": OperationError, "ReencryptError": OperationError,
                                         "RewrapError": OperationError})
