"""Which tables need a master key (version), for the options of ``keys where-used`` and
``keystore retire``: the catalog's or the files' answer, and its text::

    print_key_uses(find_key_uses(args, "orders-key", "1", kms))
"""

from __future__ import annotations

import argparse

from pyiceberg_crypto.cli.catalog_arguments import direct_catalog_properties, is_metadata_location
from pyiceberg_crypto.errors import InvalidArgumentError
from pyiceberg_crypto.kms.base import KeyManagementClient
from pyiceberg_crypto.safe_text import escape_text

def find_key_uses(args: argparse.Namespace, key_id: str, version: str | None, kms: KeyManagementClient | None, *,
                  compromised_only: bool = False):
    """WhereUsed for these options: metadata.json files read directly; the Hive metastore or REST
    catalog asked directly (no JVM); else a Spark session for the catalog. ``compromised_only``:
    only the KEKs wrapped by a version the KMS marks compromised count."""
    from pyiceberg_crypto.keys.where_used import where_used_in_catalog, where_used_in_listing, where_used_in_metadata

    locations = [t for t in args.table if is_metadata_location(t)]
    catalog_properties = direct_catalog_properties(args)
    if args.namespace and catalog_properties is None:
        raise InvalidArgumentError("--namespace needs --metastore-uri or --rest-uri (the catalog asked directly)")
    if args.table and len(locations) == len(args.table) and not args.warehouse and catalog_properties is None:
        return where_used_in_metadata(locations, key_id, version, kms, compromised_only=compromised_only)
    if locations:
        raise InvalidArgumentError("give --table as CATALOG.DB.TABLE names or as metadata.json files, not both")
    catalog = args.catalog or _catalog_of_tables(args.table)
    if catalog is None and (catalog_properties is not None or args.warehouse):
        raise InvalidArgumentError(_NAME_THE_CATALOG)  # before any catalog is asked or any JVM starts
    if catalog_properties is not None:
        return where_used_in_listing(catalog_properties, key_id, version, kms, catalog=catalog, tables=args.table or None,
                                     timeout=args.metastore_timeout, compromised_only=compromised_only,
                                     namespaces=args.namespace or None)
    from pyiceberg_crypto.config import session_for_catalog

    spark = session_for_catalog(catalog, warehouse=args.warehouse, metastore_dir=args.metastore_dir,
                                metastore_uri=args.metastore_uri, app_name="pyiceberg-crypto-keys")
    try:  # only the metastore and the metadata.json files are read: no Iceberg load, no KMS in the JVM
        catalog = catalog or _session_catalog(spark)
        tables = [name if name.count(".") >= 2 else f"{catalog}.{name}" for name in args.table] or None
        return where_used_in_catalog(spark, catalog, key_id, version, kms, tables=tables,
                                     compromised_only=compromised_only)
    finally:
        if args.warehouse:
            spark.stop()


#: The usage error when no catalog name is given nor can be read from the session spark-submit configured.
_NAME_THE_CATALOG = ("name the catalog with --catalog NAME or give --table as CATALOG.DB.TABLE (tables are "
                    "shown as CATALOG.DB.TABLE; no catalog name is assumed)")


def _catalog_of_tables(tables: list[str]) -> str | None:
    """The catalog of the first ``--table CATALOG.DB.TABLE`` name (None: only ``db.table`` names, or none)."""
    for name in tables:
        parts = name.split(".")
        if len(parts) >= 3 and parts[0]:
            return parts[0]
    return None


def _session_catalog(spark) -> str:
    """The current catalog of a session spark-submit configured, when it is an Iceberg catalog the
    session configures (``spark.sql.catalog.NAME`` an Iceberg ``SparkCatalog`` or
    ``SparkSessionCatalog``); InvalidArgumentError otherwise (:data:`_NAME_THE_CATALOG`)."""
    from pyiceberg_crypto.catalog.kinds import ICEBERG_SPARK_CATALOGS

    current = spark.catalog.currentCatalog()
    implementation = spark.conf.get(f"spark.sql.catalog.{current}", None)
    if implementation not in ICEBERG_SPARK_CATALOGS:
        raise InvalidArgumentError(f"the session's current catalog {current!r} is not an Iceberg catalog it configures "
                         f"(spark.sql.catalog.{current} is {implementation or 'not set'}): {_NAME_THE_CATALOG}")
    return current


def print_key_uses(result) -> None:
    if not result.uses and not result.unchecked:
        print(f"{result.what()}: no table of the {len(result.checked)} checked needs it")
    for use in result.uses:
        snapshots = ", ".join(map(str, use.snapshot_ids)) or "none live (Iceberg may use the KEK for the next commit)"
        versions = ", ".join(v or "?" for v in use.versions)
        leaked = (f"; COMPROMISED: depends on version {escape_text(', '.join(v or '?' for v in use.compromised_versions))}"
                  " marked compromised (re-encrypt: pyiceberg-crypto keys reencrypt TABLE --compromised-version "
                  "KEY_ID:VERSION ...)" if use.compromised_versions else "")
        print(f"{escape_text(use.table)}: KEK(s) {escape_text(', '.join(use.kek_ids))} (version {escape_text(versions)}); "
              f"snapshots {snapshots}{leaked}")
        print(f"  metadata: {escape_text(use.metadata_location)}")
    for table, why in result.unchecked.items():
        print(f"{escape_text(table)}: NOT CHECKED: {escape_text(why)}")
