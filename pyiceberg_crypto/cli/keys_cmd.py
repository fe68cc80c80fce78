"""``pyiceberg-crypto keys list | rewrap | prune | reencrypt | where-used``: the keys a table depends on,
re-wrapping its KEKs, removing the entries no snapshot needs, which tables need a master key.

    pyiceberg-crypto keys list METADATA_JSON --kms keystore --kms-property keystore.path=keys.json [--json]
    pyiceberg-crypto keys list lake.db.orders --rest-uri http://catalog:8181 [--kms ...] [--json]
    pyiceberg-crypto keys rewrap lake.db.orders --kms keystore --kms-property keystore.path=keys.json \\
        --warehouse /data/wh [--metastore-uri thrift://...] [--dry-run] [--all] [--json]
    pyiceberg-crypto keys prune lake.db.orders --kms ... --rest-uri http://catalog:8181        # no JVM
    pyiceberg-crypto keys reencrypt lake.db.orders --compromised-version orders-key:1 --kms keystore ... (:mod:`.reencrypt_cmd`)
    pyiceberg-crypto keys where-used orders-key 1 --kms keystore --kms-property keystore.path=keys.json \\
        --metastore-uri thrift://hms:9083 --catalog lake [--json]
    pyiceberg-crypto keys where-used orders-key --compromised --kms keystore ... --metastore-uri thrift://hms:9083 \\
        --catalog lake

``list`` and ``where-used`` need no JVM with ``--metastore-uri`` or ``--rest-uri`` (or metadata.json
files); ``rewrap`` and ``prune`` commit to such a catalog directly, else start Spark. Which commands
need a JVM, how ``where-used`` names tables, and the exit statuses: docs/reference/cli.md#keys-notes.
"""

from __future__ import annotations

import argparse
import json

from pyiceberg_crypto.cli.options import UsageError, local_session_catalog
from pyiceberg_crypto.kms.base import KeyManagementClient
from pyiceberg_crypto.kms.bounded import DEFAULT_KMS_TIMEOUT_SECONDS
from pyiceberg_crypto.exit_status import ExitStatus
from pyiceberg_crypto.cli.arguments import add_kms_arguments, kms_from_arguments, positive_seconds
from pyiceberg_crypto.cli.catalog_arguments import (add_catalog_arguments, add_direct_catalog_arguments, add_table_arguments,
                                                     direct_catalog_properties, is_metadata_location)
from pyiceberg_crypto.cli.key_uses import find_key_uses, print_key_uses
from pyiceberg_crypto.safe_text import escape_text


def add_parser(sub):
    """Add ``keys`` and its actions; returns the actions' subparsers (``keys reencrypt`` adds itself there)."""
    keys = sub.add_parser("keys", help="list a table's keys; re-wrap its KEKs after a master key rotation; prune unused ones")
    keys.set_defaults(run=run_keys)
    actions = keys.add_subparsers(dest="keys_action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="every KEK: age, master key and version, the snapshots it seals")
    listing.add_argument("metadata", metavar="METADATA_JSON|TABLE",
                         help="the table's metadata.json (path or URI), or CATALOG.DB.TABLE with --metastore-uri "
                              "or --rest-uri")
    add_kms_arguments(listing, required=False)
    listing.add_argument("--kms-timeout", type=positive_seconds, default=DEFAULT_KMS_TIMEOUT_SECONDS, metavar="SECONDS")
    add_direct_catalog_arguments(listing)
    listing.add_argument("--json", action="store_true", help="print JSON")
    rewrap = actions.add_parser("rewrap", help="re-wrap KEKs under the master key's current version (one commit)")
    _add_commit_arguments(rewrap)
    rewrap.add_argument("--dry-run", action="store_true", help="say what would change; no wrap, no commit")
    rewrap.add_argument("--all", action="store_true", help="re-wrap every KEK, also those already current")
    prune = actions.add_parser("prune", help="remove encryption-keys entries no snapshot needs (one commit)")
    _add_commit_arguments(prune)
    prune.add_argument("--dry-run", action="store_true", help="say what would be removed; no commit")
    where = actions.add_parser("where-used", help="which tables and snapshots need a master key (version), "
                                                  "across a catalog")
    where.add_argument("key_id", metavar="KEY_ID", help="the master key id (a table's encryption.key-id)")
    where.add_argument("version", metavar="VERSION", nargs="?",
                       help="one version of it (as `keys list` shows it; default: any version)")
    where.add_argument("--compromised", action="store_true",
                       help="only the tables that still depend on a version the KMS marks compromised "
                            "(keystore compromised); exit 1 while any do")
    add_kms_arguments(where)
    add_catalog_arguments(where)
    where.add_argument("--json", action="store_true", help="print JSON")
    return actions


def _add_commit_arguments(parser) -> None:
    """``rewrap`` and ``prune``: a table committed to through Spark, or (``--metastore-uri``,
    ``--rest-uri``) through its catalog directly, without a JVM."""
    add_table_arguments(parser)
    add_direct_catalog_arguments(parser, metastore_uri=False)


def run_keys(args: argparse.Namespace) -> int:
    kms = kms_from_arguments(args)
    if args.keys_action == "list":
        return _list(args, kms)
    if args.keys_action == "where-used":
        return _where_used(args, kms)
    return _commit(args, kms)


def _where_used(args: argparse.Namespace, kms: KeyManagementClient | None) -> int:
    """Exit 0 with the answer (used or not); with ``--compromised``, 1 while a table depends on a
    compromised version (or one could not be checked); 2 when the catalog cannot be listed."""
    if args.compromised and kms is None:
        raise UsageError("--compromised needs the KMS (--kms) that marks the versions")
    result = find_key_uses(args, args.key_id, args.version, kms, compromised_only=args.compromised)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print_key_uses(result)
    return ExitStatus.INTEGRITY if args.compromised and result.needed else ExitStatus.OK


def _list(args: argparse.Namespace, kms: KeyManagementClient | None) -> int:
    from pyiceberg_crypto.keys.inventory import inventory_from_metadata
    from pyiceberg_crypto.kms.bounded import call_with_timeout

    location = _listed_metadata(args)
    inventory = call_with_timeout(inventory_from_metadata, location, kms, timeout=args.kms_timeout,
                                  what="the key inventory's KMS calls")
    if args.json:
        print(json.dumps(inventory.to_dict(), indent=2))
        return ExitStatus.OK
    print(f"table        {escape_text(inventory.table_location or '?')}")
    print(f"master key   {escape_text(repr(inventory.master_key_id))}")
    print(f"{'KEK':<26} {'created':<26} {'age (days)':>10}  {'master key version':<20} snapshots")
    for kek in inventory.keks:
        version = kek.master_key_version or "?"
        if kek.outdated:
            version += f" (current {kek.current_master_key_version})"
        flag = ("  rotation due" if kek.rotation_due else "") + ("  COMPROMISED (keys reencrypt)" if kek.compromised else "")
        print(f"{escape_text(kek.key_id):<26} {kek.created or '?':<26} {kek.age_days if kek.age_days is not None else '?':>10}"
              f"  {escape_text(version):<20} {len(kek.snapshot_ids)}{flag}")
        if kek.note:
            print(f"{'':<26} {escape_text(kek.note)}")
    print(f"entries no live snapshot uses: {len(inventory.unused_entries)}")
    return ExitStatus.OK


def _listed_metadata(args: argparse.Namespace) -> str:
    """The metadata.json ``keys list`` reads: METADATA_JSON as given, or the current one of
    CATALOG.DB.TABLE, asked of ``--metastore-uri`` / ``--rest-uri`` (no JVM)."""
    from pyiceberg_crypto.catalog.entry import catalog_entry

    catalog_properties = direct_catalog_properties(args)
    if is_metadata_location(args.metadata):
        if catalog_properties is not None:
            raise UsageError(f"{args.metadata} is a metadata.json: give a table name (CATALOG.DB.TABLE) with "
                             "--metastore-uri / --rest-uri, or the file without them")
        return args.metadata
    if catalog_properties is None:
        raise UsageError(f"{args.metadata!r} is a table name: say where its catalog is with --metastore-uri "
                         "thrift://host:port (a Hive metastore) or --rest-uri http://host:port (a REST catalog), "
                         "or give its metadata.json")
    entry = catalog_entry(catalog_properties, args.metadata, timeout=args.metastore_timeout)
    return entry.parameters["metadata_location"]


def _commit(args: argparse.Namespace, kms: KeyManagementClient | None) -> int:
    """``rewrap`` or ``prune``: a commit through the table's catalog, directly (no JVM) with
    ``--metastore-uri`` or ``--rest-uri`` (``--warehouse`` or not), else in a Spark session."""
    catalog_properties = direct_catalog_properties(args)
    result = _commit_without_jvm(args, catalog_properties, kms) if catalog_properties is not None else _commit_in_spark(args, kms)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    elif args.keys_action == "prune":
        _print_prune(result)
    else:
        _print_rewrap(result)
    return ExitStatus.OK


def _commit_without_jvm(args: argparse.Namespace, properties: dict[str, str], kms: KeyManagementClient | None):
    from pyiceberg_crypto.keys.prune import prune_keys_in_catalog
    from pyiceberg_crypto.keys.rewrap import rewrap_keks_in_catalog

    if args.keys_action == "prune":
        return prune_keys_in_catalog(properties, args.table, dry_run=args.dry_run, timeout=args.metastore_timeout)
    return rewrap_keks_in_catalog(properties, args.table, kms, dry_run=args.dry_run, all_keks=args.all,
                                  timeout=args.metastore_timeout)


def _commit_in_spark(args: argparse.Namespace, kms: KeyManagementClient | None):
    catalog = local_session_catalog(args.table, args.warehouse)  # before anything imports pyspark
    from pyiceberg_crypto.bridge import register_kms
    from pyiceberg_crypto.config import session_for_catalog
    from pyiceberg_crypto.keys.prune import prune_keys
    from pyiceberg_crypto.keys.rewrap import rewrap_keks

    spark = session_for_catalog(catalog, warehouse=args.warehouse, metastore_dir=args.metastore_dir,
                                metastore_uri=args.metastore_uri, app_name="pyiceberg-crypto-keys")
    try:
        with register_kms(spark, kms):
            if args.keys_action == "prune":
                return prune_keys(spark, args.table, dry_run=args.dry_run)
            return rewrap_keks(spark, args.table, kms=kms, dry_run=args.dry_run, all_keks=args.all)
    finally:
        if args.warehouse:
            spark.stop()


def _print_rewrap(result) -> None:
    verb = "would re-wrap" if result.dry_run else ("re-wrapped" if result.committed else "nothing to re-wrap:")
    print(f"{escape_text(result.table)}: {verb} {len(result.changes)} KEK(s); {len(result.unchanged)} already current")
    for change in result.changes:
        print(f"  KEK {escape_text(change.key_id)}: master key {escape_text(change.master_key_id)!r} version "
              f"{change.old_version} -> {change.new_version}")
    if result.committed:
        print(f"  committed: {escape_text(result.metadata_location or '')}")


def _print_prune(result) -> None:
    verb = "would remove" if result.dry_run else ("removed" if result.committed else "nothing to remove:")
    print(f"{escape_text(result.table)}: {verb} {len(result.removed_keks)} KEK(s) and "
          f"{len(result.removed_entries)} manifest-list key(s) no snapshot needs; {len(result.kept_keks)} KEK(s) kept")
    for key_id in result.removed_keks:
        print(f"  KEK {escape_text(key_id)}")
    if result.not_removed:
        print(f"  still in the committed metadata (the catalog wrote them back): {len(result.not_removed)}")
    if result.committed:
        print(f"  committed: {escape_text(result.metadata_location or '')}")

