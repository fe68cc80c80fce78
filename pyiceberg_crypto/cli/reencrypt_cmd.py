"""``pyiceberg-crypto keys reencrypt``: after a key was compromised, re-encrypt a table under a
fresh KEK, drop what the old material opens, and print the proof (issue 42)::

    pyiceberg-crypto keystore rotate keys.json orders-key          # first: a new master key version
    pyiceberg-crypto keys reencrypt lake.db.orders --compromised-version orders-key:1 \\
        --kms keystore --kms-property keystore.path=keys.json --warehouse /data/wh \\
        [--compromised-kek KEK_ID ...] [--drop-refs] [--dry-run] [--orphans-older-than 2026-11-24T00:00:00] \\
        [--report proof.json] [--json]

It records which files depend on the compromised material, runs
:func:`pyiceberg_crypto.keys.reencrypt_table`, then proves the outcome with the verifier
(:func:`pyiceberg_crypto.verify.compromise.compromise_report`): every file reachable from every
remaining snapshot, its key chain, none leading to the compromised material, and every file that
did gone from storage. Exit status: 0 proven, 1 the proof is not OK (the report says which files),
2 usage error or a step that stopped (the message says which; the table stays readable and running
again finishes the job).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone

from pyiceberg_crypto.errors import TableInputError
from pyiceberg_crypto.exit_status import ExitStatus
from pyiceberg_crypto.kms.base import KeyManagementClient
from pyiceberg_crypto.safe_text import escape_text


def add_reencrypt_parser(actions, add_table_arguments) -> None:
    parser = actions.add_parser("reencrypt", help="after a key was compromised: a fresh KEK, every file rewritten, "
                                                  "old snapshots expired, and the proof")
    add_table_arguments(parser)
    parser.add_argument("--compromised-version", action="append", default=[], metavar="KEY_ID:VERSION",
                        help="a master key version that leaked (repeatable)")
    parser.add_argument("--compromised-kek", action="append", default=[], metavar="KEK_ID",
                        help="a KEK (encryption-keys entry id) that leaked (repeatable)")
    parser.add_argument("--drop-refs", action="store_true", help="drop the branches and tags that pin old snapshots")
    parser.add_argument("--dry-run", action="store_true", help="say what would happen; no commit, nothing removed")
    parser.add_argument("--orphans-older-than", metavar="ISO_TIME",
                        help="remove orphan files older than this (default: 3 days ago)")
    parser.add_argument("--report", metavar="PATH", help="also write the proof as JSON here")


def parse_versions(values: list[str]) -> list[tuple[str, str]]:
    """``["orders-key:1"]`` -> ``[("orders-key", "1")]`` (the version after the last colon)."""
    pairs = []
    for value in values:
        key_id, sep, version = value.rpartition(":")
        if not sep or not key_id or not version:
            raise ValueError(f"--compromised-version wants KEY_ID:VERSION, got {value!r}")
        pairs.append((key_id, version))
    return pairs


def run_reencrypt(args: argparse.Namespace, kms: KeyManagementClient | None) -> int:
    from pyiceberg_crypto.bridge import register_kms
    from pyiceberg_crypto.config import session_for_catalog
    from pyiceberg_crypto.keys.commit import load_operations
    from pyiceberg_crypto.keys.reencrypt import ReencryptError, reencrypt_table
    from pyiceberg_crypto.verify.compromise import compromise_report

    try:
        versions = parse_versions(args.compromised_version)
        older = datetime.fromisoformat(args.orphans_older_than) if args.orphans_older_than else None
    except ValueError as exc:
        return _fail(str(exc))
    if older is not None and older.tzinfo is None:
        older = older.replace(tzinfo=timezone.utc)
    if kms is None:
        return _fail("keys reencrypt needs the table's KMS (--kms)")
    material = {"compromised_master_keys": versions, "compromised_keks": args.compromised_kek}
    catalog = args.table.split(".")[0]
    spark = session_for_catalog(catalog, warehouse=args.warehouse, metastore_dir=args.metastore_dir,
                                metastore_uri=args.metastore_uri, app_name="pyiceberg-crypto-keys")
    try:
        with register_kms(spark, kms):
            _name, ops = load_operations(spark, args.table, ReencryptError)
            before = compromise_report(ops.refresh().metadataFileLocation(), kms, **material)
            result = reencrypt_table(spark, args.table, **material, kms=kms, drop_refs=args.drop_refs,
                                     dry_run=args.dry_run, orphans_older_than=older,
                                     progress=lambda message: print(f"  {message}", file=sys.stderr))
            proof = None
            if not args.dry_run:
                proof = compromise_report(result.metadata_location, kms, **material,
                                          previously_dependent=before.dependent_paths())
    except (ReencryptError, TableInputError) as exc:
        return _fail(str(exc))
    finally:
        if args.warehouse:
            spark.stop()
    document = {"reencrypt": result.to_dict(), "before": before.to_dict(), "proof": proof.to_dict() if proof else None}
    if args.report:
        with open(args.report, "w", encoding="utf-8") as handle:
            json.dump(document, handle, indent=2)
    if args.json:
        print(json.dumps(document, indent=2))
    else:
        _print(result, before, proof)
    return ExitStatus.OK if proof is None or proof.ok else ExitStatus.INTEGRITY


def _print(result, before, proof) -> None:
    name = escape_text(result.table)
    print(f"{name}: {len(before.dependent)} file(s) depend on the compromised material "
          f"(KEKs: {', '.join(escape_text(k) for k in result.compromised_keks) or 'none'})")
    if result.dry_run:
        print(f"  would drop refs: {', '.join(escape_text(r) for r in result.refs_dropped) or 'none'}; would expire "
              f"{len(result.expired_snapshots)} snapshot(s); orphan files that would go: {len(result.orphans)}")
        for path in result.orphans:
            print(f"    {escape_text(path)}")
        return
    print(f"  fresh KEK {escape_text(result.fresh_kek or '')} (master key version {result.fresh_kek_master_version}); "
          f"{result.rounds} rewrite round(s); refs dropped: {len(result.refs_dropped)}; "
          f"expired {len(result.expired_snapshots)} snapshot(s); removed {len(result.removed_key_entries)} key "
          f"entr(ies) and {len(result.orphans)} orphan file(s)")
    print(proof.render_text())


def _fail(message: str) -> int:
    print(f"pyiceberg-crypto keys: {escape_text(message)}", file=sys.stderr)
    return ExitStatus.USAGE
