"""``pyiceberg-crypto keys reencrypt``: after a key was compromised, re-encrypt a table under a
fresh KEK, drop what the old material opens, and print the proof (issue 42)::

    pyiceberg-crypto keystore rotate keys.json orders-key          # first: a new master key version
    pyiceberg-crypto keys reencrypt lake.db.orders [--compromised-version orders-key:1] \\
        --kms keystore --kms-property keystore.path=keys.json --warehouse /data/wh \\
        [--compromised-kek KEK_ID ...] [--tags rewrite|drop] [--dry-run] [--orphans-older-than 2026-11-24T00:00:00] \\
        [--report proof.json] [--json]
    pyiceberg-crypto keys reencrypt lake --all-tables --compromised-version orders-key:1 \\
        --metastore-uri thrift://hms:9083 [--namespace shop ...] --kms keystore ...     # every table that depends on it

The compromised set is every version the KMS marks compromised plus those named, each checked to
be a version the KMS holds of the table's master key. It records which files depend on the
material, runs :func:`pyiceberg_crypto.keys.reencrypt_table`, then proves the outcome with
:func:`pyiceberg_crypto.verify.compromise.compromise_report` (``storage=True``). Exit status: 0
proven, 1 the proof is not OK, 2 usage error or a step that stopped (the table stays readable;
running again finishes the job).

``--all-tables`` (the positional argument is then the catalog's name) re-encrypts every table
that still depends on the ``--compromised-version`` material
(:func:`pyiceberg_crypto.keys.reencrypt_all.reencrypt_catalog`: its report, the resume from it); a
table that fails or cannot be checked is named with its reason, the others still run; the exit
status is the worst of all tables.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone

from pyiceberg_crypto._atomic import PUBLIC, write_atomically
from pyiceberg_crypto.cli.arguments import kms_from_arguments
from pyiceberg_crypto.cli.options import local_session_catalog
from pyiceberg_crypto import errors
from pyiceberg_crypto._deprecated import renamed_classes
from pyiceberg_crypto.errors import InvalidArgumentError, OperationError
from pyiceberg_crypto.exit_status import ExitStatus
from pyiceberg_crypto.kms.base import KeyManagementClient
from pyiceberg_crypto.safe_text import escape_text


#: Old names, kept for one release (CHANGELOG.md).
__getattr__ = renamed_classes(__name__, {"ReportError": errors.ReportError})


def add_parser(actions) -> None:
    """Add ``reencrypt`` to ``keys``'s actions (argparse subparsers)."""
    from pyiceberg_crypto.cli.catalog_arguments import add_table_arguments

    parser = actions.add_parser("reencrypt", help="after a key was compromised: a fresh KEK, every file rewritten, "
                                                  "old snapshots expired, and the proof")
    parser.set_defaults(run=lambda args: run_reencrypt(args, kms_from_arguments(args)))
    add_table_arguments(parser)
    parser.add_argument("--compromised-version", action="append", default=[], metavar="KEY_ID:VERSION",
                        help="a master key version that leaked (repeatable; besides every version the KMS marks "
                             "compromised, which is always included; must be a version the KMS holds of the "
                             "table's key)")
    parser.add_argument("--compromised-kek", action="append", default=[], metavar="KEK_ID",
                        help="a KEK (encryption-keys entry id) that leaked (repeatable)")
    parser.add_argument("--tags", choices=("rewrite", "drop"), default=None,
                        help="rewrite (default): move each tag to a re-encrypted copy of its snapshot (same rows); "
                             "drop: drop the tags (the dry run counts each tag's rows no branch holds). Branches "
                             "are always kept: each branch's head is re-encrypted on its branch")
    parser.add_argument("--drop-refs", action="store_true", help="deprecated: --tags drop (branches are kept)")
    parser.add_argument("--dry-run", action="store_true", help="say what would happen; no commit, nothing removed")
    parser.add_argument("--orphans-older-than", metavar="ISO_TIME",
                        help="remove orphan files older than this (default: 3 days ago)")
    parser.add_argument("--report", metavar="PATH",
                        help="also write the proof as JSON here (--all-tables: rewritten as each table ends; a "
                             "re-run with the same file carries over the tables an unfinished run proved)")
    parser.add_argument("--all-tables", action="store_true",
                        help="TABLE is a catalog name: re-encrypt every table of it that depends on the "
                             "--compromised-version material, one after another")
    parser.add_argument("--parallel", type=int, default=1, metavar="N",
                        help="with --all-tables: re-encrypt N tables at a time in the one Spark session (default 1)")
    parser.add_argument("--namespace", action="append", default=[], metavar="NS",
                        help="with --all-tables: only the tables of this namespace (repeatable)")
    parser.add_argument("--rest-uri", metavar="URI",
                        help="with --all-tables: list the tables over this REST catalog's HTTP API (token from "
                             "$PYICEBERG_CRYPTO_REST_TOKEN)")
    parser.add_argument("--rest-property", action="append", default=[], metavar="KEY=VALUE",
                        help="a REST catalog property for the listing (repeatable)")


def parse_versions(values: list[str]) -> list[tuple[str, str]]:
    """``["orders-key:1"]`` -> ``[("orders-key", "1")]`` (the version after the last colon)."""
    pairs = []
    for value in values:
        key_id, sep, version = value.rpartition(":")
        if not sep or not key_id or not version:
            raise InvalidArgumentError(f"--compromised-version wants KEY_ID:VERSION, got {value!r}")
        pairs.append((key_id, version))
    return pairs


def run_reencrypt(args: argparse.Namespace, kms: KeyManagementClient | None) -> int:
    """``keys reencrypt``: its exit status; a package error it raises is the error boundary's
    (:func:`pyiceberg_crypto.cli.main.run_command`: one line, exit 2)."""
    versions = parse_versions(args.compromised_version)  # the options, checked before anything imports pyspark
    older = _orphans_older_than(args.orphans_older_than)
    _check_mode(args, versions)
    catalog = args.table if args.all_tables else local_session_catalog(args.table, args.warehouse)
    if kms is None:
        raise InvalidArgumentError("keys reencrypt needs the table's KMS (--kms)")
    if args.drop_refs and args.tags == "rewrite":
        raise InvalidArgumentError("--drop-refs (deprecated) means --tags drop: not with --tags rewrite")
    args.tags = "drop" if args.drop_refs else (args.tags or "rewrite")
    from pyiceberg_crypto.bridge import register_kms
    from pyiceberg_crypto.config import session_for_catalog

    material = {"compromised_master_keys": versions, "compromised_keks": args.compromised_kek}
    spark = session_for_catalog(catalog, warehouse=args.warehouse, metastore_dir=args.metastore_dir,
                                metastore_uri=args.metastore_uri, app_name="pyiceberg-crypto-keys")
    try:
        with register_kms(spark, kms):
            if args.all_tables:
                return _all_tables(spark, args, kms, material, older)
            document = _one_table(spark, args.table, args, kms, material, older)
    finally:
        if args.warehouse:
            spark.stop()
    if args.report:
        _save(args.report, _public(document))
    if args.json:
        print(json.dumps(_public(document), indent=2))
    else:
        _print(document["result"], document["before_report"], document["proof_report"])
    proof = document["proof_report"]
    return ExitStatus.OK if proof is None or proof.ok else ExitStatus.INTEGRITY


def _orphans_older_than(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        older = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidArgumentError(f"--orphans-older-than wants an ISO time (2026-11-24T00:00:00), got {value!r}") from None
    return older if older.tzinfo is not None else older.replace(tzinfo=timezone.utc)


def _check_mode(args: argparse.Namespace, versions: list[tuple[str, str]]) -> None:
    """InvalidArgumentError for options that do not go together."""
    if args.all_tables:
        if args.table.count("."):
            raise InvalidArgumentError(f"with --all-tables, give the catalog's name (e.g. lake), not {args.table!r}")
        if not versions:
            raise InvalidArgumentError("--all-tables finds the tables by --compromised-version KEY_ID:VERSION (a KEK id "
                             "belongs to one table: re-encrypt that table by name)")
        if args.rest_uri and args.metastore_uri:
            raise InvalidArgumentError("list the tables with --metastore-uri or --rest-uri, not both")
    elif args.namespace or args.rest_uri or args.rest_property or args.parallel != 1:
        raise InvalidArgumentError("--namespace, --rest-uri, --rest-property and --parallel go with --all-tables")
    if args.parallel < 1:
        raise InvalidArgumentError(f"--parallel wants a number of tables >= 1, got {args.parallel}")


def _one_table(spark, table: str, args: argparse.Namespace, kms: KeyManagementClient, material: dict,
               older: datetime | None) -> dict:
    """Check the compromised set, record what depends on it, re-encrypt, prove: the document of one table.

    The compromised set is checked before anything changes
    (:func:`~pyiceberg_crypto.keys.reencrypt.table_compromised_versions`). The 'before' report walks
    storage too: files the material opens that the table no longer reaches are handed to the run to
    remove. With ``--report`` (one table), what depends on the material is written there before the
    first commit; a re-run after a crash adds what the earlier run recorded
    (:func:`~pyiceberg_crypto.keys.reencrypt_all.carried_dependent`), removes it and proves it gone."""
    from pyiceberg_crypto.catalog.spark import activate_session
    from pyiceberg_crypto.keys.commit import load_operations
    from pyiceberg_crypto.keys.reencrypt import reencrypt_table, table_compromised_versions
    from pyiceberg_crypto.keys.reencrypt_all import carried_dependent
    from pyiceberg_crypto.verify.compromise import EXPOSED_FILE, compromise_report

    activate_session(spark)  # --all-tables --parallel N: this runs in a worker thread
    full_name, ops = load_operations(spark, table, OperationError)
    key_id, versions = table_compromised_versions(spark, full_name, kms, material["compromised_master_keys"])
    checked = {"compromised_master_keys": sorted((key_id, v) for v in versions),
               "compromised_keks": material["compromised_keks"]}
    before = compromise_report(ops.refresh().metadataFileLocation(), kms, **checked, storage=True)
    keep = args.report if args.report and not args.all_tables and not args.dry_run else None
    carried = carried_dependent(keep, full_name) if keep else []
    if keep:
        _save(keep, {"table": full_name, "reencrypt": None, "before": before.to_dict(), "proof": None,
                     "carried_dependent": carried, "finished": False})
    leftovers = [f.path for f in before.storage.findings if f.finding == EXPOSED_FILE]
    result = reencrypt_table(spark, full_name, **material, kms=kms, tags=args.tags, dry_run=args.dry_run,
                             orphans_older_than=older, also_remove=[*carried, *leftovers],
                             progress=lambda message: print(f"  {message}", file=sys.stderr))
    proof = None
    if not args.dry_run:
        proof = compromise_report(result.metadata_location, kms, **checked, storage=True,
                                  previously_dependent=sorted({*before.dependent_paths(), *carried, *leftovers}))
    return {"result": result, "before_report": before, "proof_report": proof, "carried": carried}


def _all_tables(spark, args: argparse.Namespace, kms: KeyManagementClient, material: dict,
                older: datetime | None) -> int:
    """Every dependent table of the catalog (:func:`~pyiceberg_crypto.keys.reencrypt_all.reencrypt_catalog`:
    the report, the resume from it); the summary names each failure."""
    from pyiceberg_crypto.keys.reencrypt_all import dependent_tables, reencrypt_catalog

    catalog = args.table
    found = dependent_tables(_listing_properties(args), catalog, material["compromised_master_keys"], kms,
                             namespaces=args.namespace or None, spark=spark)
    print(f"{escape_text(catalog)}: {len(found.tables)} of {found.checked} table(s) checked depend on the compromised "
          f"material; {len(found.unchecked)} could not be checked", file=sys.stderr)
    run = reencrypt_catalog(found, catalog, lambda table: _public(_one_table(spark, table, args, kms, material, older)),
                            report=None if args.dry_run else args.report, parallel=args.parallel,
                            progress=lambda line: print(line, file=sys.stderr))
    summary = run.to_dict()
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        _print_summary(summary)
    if run.failed or run.unchecked:
        return ExitStatus.USAGE
    return ExitStatus.INTEGRITY if run.not_proven else ExitStatus.OK


def _listing_properties(args: argparse.Namespace) -> dict[str, str] | None:
    """How ``--all-tables`` lists the catalog without a JVM, or None (the Spark session's catalog)."""
    from pyiceberg_crypto.cli.catalog_arguments import rest_properties
    from pyiceberg_crypto.config import HIVE, REST

    if args.rest_uri:
        return {**rest_properties(args), "type": REST}
    if args.metastore_uri:
        return {"type": HIVE, "uri": args.metastore_uri}
    return None


def _print_summary(summary: dict) -> None:
    esc = escape_text
    done, failed = summary["done"], summary["failed"]
    print(f"{esc(summary['catalog'])}: {len(summary['tables'])} table(s) depended on the compromised material; "
          f"re-encrypted and proven: {len(done)}")
    for table, document in done.items():
        result = document["reencrypt"]
        print(f"  OK          {esc(table)}: fresh KEK (master key version {result['fresh_kek_master_version']}), "
              f"{len(result['expired_snapshots'])} snapshot(s) expired, {len(result['orphans'])} orphan file(s)")
    for table in summary["not_proven"]:
        print(f"  NOT PROVEN  {esc(table)}: the proof lists files that still depend on it (--report for the list)")
    for table, why in failed.items():
        print(f"  FAILED      {esc(table)}: {esc(why)} (the table stays readable; run again to finish)")
    for table, why in summary["unchecked"].items():
        print(f"  UNCHECKED   {esc(table)}: {esc(why)}")
    print("OK: no table depends on the compromised material" if summary["ok"] else
          "FAILED: some tables still depend on the compromised material or could not be checked (listed above)")


def _public(document: dict) -> dict:
    """One table's JSON: the run, what depended before, the proof."""
    proof = document["proof_report"]
    return {"table": document["result"].table, "reencrypt": document["result"].to_dict(),
            "before": document["before_report"].to_dict(), "proof": proof.to_dict() if proof else None,
            "carried_dependent": document.get("carried", []), "finished": True}


def _save(path: str, document: dict) -> None:
    """The one table's ``--report`` (a JSON document), atomically."""
    write_atomically(path, json.dumps(document, indent=2) + "\n", mode=PUBLIC)


def _print(result, before, proof) -> None:
    esc = escape_text
    name = esc(result.table)
    leftovers = [f for f in (before.storage.findings if before.storage else []) if f.finding == "EXPOSED_FILE"]
    print(f"{name}: {len(before.dependent)} file(s) depend on the compromised material (versions: "
          f"{', '.join(esc(v) for v in result.compromised_versions) or 'none'}; KEKs: "
          f"{', '.join(esc(k) for k in result.compromised_keks) or 'none'}); {len(leftovers)} more on storage that "
          "no snapshot reaches")
    if result.dry_run:
        print(f"  would re-encrypt branches: {', '.join(map(esc, result.branches_rewritten)) or 'none'} (and main)")
        print(f"  would move tags to a re-encrypted copy: {', '.join(map(esc, result.tags_rewritten)) or 'none'}")
        for ref in result.refs_dropped:
            tag = ref.split(" ", 1)[1]
            count = result.tag_rows_nowhere_else.get(tag)
            print(f"  would drop {esc(ref)}: {'?' if count is None else count} of its row(s) are on no branch")
        print(f"  would expire {len(result.expired_snapshots)} snapshot(s) (and the run's own intermediate ones); "
              f"orphan files that would go: {len(result.orphans)}; files unfinished earlier runs left that would go: "
              f"{len(result.leftovers)}")
        for path in [*result.orphans, *result.leftovers]:
            print(f"    {esc(path)}")
        return
    print(f"  fresh KEK {esc(result.fresh_kek or '')} (master key version {result.fresh_kek_master_version}); "
          f"{result.rounds} rewrite round(s) on main; branches re-encrypted: "
          f"{', '.join(map(esc, result.branches_rewritten)) or 'none'}; tags moved: "
          f"{', '.join(map(esc, result.tags_rewritten)) or 'none'}; refs dropped: "
          f"{', '.join(map(esc, result.refs_dropped)) or 'none'}")
    print(f"  expired {len(result.expired_snapshots)} snapshot(s) (+{len(result.expired_own_snapshots)} of the run's "
          f"own); removed {len(result.removed_key_entries)} key entr(ies), {len(result.removed_metadata_files)} old "
          f"metadata.json, {len(result.removed_files)} unreachable file(s), {len(result.leftovers)} file(s) unfinished "
          f"earlier runs left and {len(result.orphans)} orphan file(s)")
    print(proof.render_text())
