"""``pyiceberg-crypto encrypt``: an existing plaintext table becomes an encrypted table under its own
name (issue 51; :func:`pyiceberg_crypto.adopt.encrypt_table`)::

    pyiceberg-crypto encrypt lake.db.orders --key-id orders-key [--warehouse /data/wh] \\
        [--kms keystore --kms-property keystore.path=keys.json] [--refs drop|keep-original] \\
        [--on-change redo|refuse] [--keep-original NAME | --purge-now | --purge-after SECONDS] [--json]

The rows are copied from a fixed snapshot, appends committed meanwhile carried over, then the copy is
compared with the original (row counts and an order-independent hash of every row, per partition)
and proven by the verifier (:func:`pyiceberg_crypto.verify.verify_table`) before the names are swapped.
Afterwards the original is kept as ``<name>__plaintext_<stamp>`` (the output prints the command that
purges it), purged (``--purge-now``, ``--purge-after``), or kept under ``--keep-original NAME``.
Running the command again after a failure or a crash finishes the job; after the swap it purges
the original when asked. Exit status: 0 done, 1 the copy differs from the original or the proof
failed (nothing swapped), 2 usage error or a step that stopped (the table keeps its name and rows).
"""

from __future__ import annotations

import argparse
import json
import sys

from pyiceberg_crypto.cli.arguments import add_kms_arguments, kms_from_arguments
from pyiceberg_crypto.cli.options import UsageError
from pyiceberg_crypto.exit_status import ExitStatus
from pyiceberg_crypto.safe_text import escape_text


def add_encrypt_parser(sub) -> None:
    parser = sub.add_parser("encrypt", help="encrypt an existing plaintext table under its own name: copy, "
                                            "verify row for row, swap, purge the plaintext")
    parser.add_argument("table", metavar="CATALOG.DB.TABLE")
    parser.add_argument("--key-id", required=True, metavar="KEY",
                        help="the master key of the new table (its encryption.key-id)")
    parser.add_argument("--format-version", type=int, default=3, metavar="N",
                        help="format version of the new table (default: %(default)s; Iceberg encrypts format 3 only)")
    parser.add_argument("--data-key-length", type=int, choices=(16, 24, 32), help="DEK length in bytes")
    parser.add_argument("--refs", choices=("drop", "keep-original"), default="drop",
                        help="the original's branches and tags: drop (default: listed, not carried over) or "
                             "keep-original (the original is kept, not purged, so they stay readable there)")
    parser.add_argument("--on-change", choices=("redo", "refuse"), default="redo",
                        help="a delete or overwrite on the original during the copy: redo the copy from its new "
                             "snapshot (default) or refuse (exit 2, nothing swapped)")
    after = parser.add_mutually_exclusive_group()
    after.add_argument("--keep-original", metavar="NAME",
                       help="rename the original to NAME (same namespace) and keep it")
    after.add_argument("--purge-now", action="store_true", help="DROP TABLE ... PURGE the original right after the swap")
    after.add_argument("--purge-after", type=float, metavar="SECONDS",
                       help="purge the original this many seconds after the swap (writers still holding the old "
                            "table fail their next commit meanwhile)")
    add_kms_arguments(parser, required=False)
    parser.add_argument("--warehouse", help="build a local Spark session for this warehouse")
    parser.add_argument("--metastore-dir", help="embedded metastore directory (default: next to the warehouse)")
    parser.add_argument("--metastore-uri", help="thrift://host:port of the Hive metastore (with --warehouse)")
    parser.add_argument("--json", action="store_true", help="print JSON")


def run_encrypt(args: argparse.Namespace) -> int:
    from pyiceberg_crypto.adopt import AdoptError, AdoptVerificationError, encrypt_table
    from pyiceberg_crypto.errors import PyicebergCryptoError

    try:
        kms = kms_from_arguments(args)
    except UsageError as exc:
        return _fail(str(exc))
    from contextlib import nullcontext

    from pyiceberg_crypto.config import table_properties

    if "." in (args.keep_original or "") or (args.purge_after is not None and args.purge_after < 0):
        return _fail("--keep-original wants a table name without dots, --purge-after a number of seconds >= 0")
    try:  # the new table's settings, checked before Spark starts
        table_properties(args.key_id, data_key_length=args.data_key_length, format_version=args.format_version)
    except PyicebergCryptoError as exc:
        return _fail(str(exc))

    from pyiceberg_crypto.bridge import register_kms
    from pyiceberg_crypto.config import session_for_catalog
    from pyiceberg_crypto.verify import verify_table

    catalog = args.table.split(".")[0]
    spark = session_for_catalog(catalog, warehouse=args.warehouse, metastore_dir=args.metastore_dir,
                                metastore_uri=args.metastore_uri, app_name="pyiceberg-crypto-encrypt")

    def prove(table: str) -> tuple[bool, str]:
        report = verify_table(spark, table, kms=kms)
        bad = report.not_ok()
        return report.ok, (f"verify_table {table}: {'OK' if report.ok else 'NOT OK'}, {len(report.files)} file(s)"
                           + (f", {len(bad)} not OK (first: {bad[0].path})" if bad else ""))

    try:
        with register_kms(spark, kms) if kms is not None else nullcontext():
            result = encrypt_table(spark, args.table, args.key_id, format_version=args.format_version,
                                   data_key_length=args.data_key_length, refs=args.refs, on_change=args.on_change,
                                   keep_original=args.keep_original, purge_now=args.purge_now,
                                   purge_after=args.purge_after, prove=prove,
                                   progress=lambda message: print(f"  {escape_text(message)}", file=sys.stderr))
    except AdoptVerificationError as exc:
        print(f"pyiceberg-crypto encrypt: {escape_text(str(exc))}", file=sys.stderr)
        return ExitStatus.INTEGRITY
    except (AdoptError, PyicebergCryptoError) as exc:
        return _fail(str(exc))
    finally:
        if args.warehouse:
            spark.stop()
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print_result(result)
    return ExitStatus.OK


def print_result(result) -> None:
    esc = escape_text
    compared = result.compared
    if result.swapped and not compared:
        print(f"{esc(result.table)}: encrypted by an earlier run")
    else:
        print(f"{esc(result.table)}: encrypted (master key {esc(result.key_id or '')}, format {result.format_version}); "
              f"copied from snapshot {result.source_snapshot}, up to {result.copied_snapshot} "
              f"({len(result.carried_snapshots)} append(s) carried over, copy redone {len(result.redone_from)} time(s))")
        print(f"  compared: {compared.get('rows')} row(s) in {compared.get('partitions')} partition(s) of "
              f"{esc(str(compared.get('original')))} at snapshot {compared.get('original_snapshot')} against the copy: "
              f"counts and {esc(str(compared.get('hash')))} per partition: equal")
        if result.proof:
            print(f"  proof: {esc(result.proof)}")
    for item in result.kept:
        print(f"  kept:     {esc(item)}")
    for item in result.not_kept:
        print(f"  not kept: {esc(item)}")
    if result.purged:
        print("  the plaintext original is purged (DROP TABLE ... PURGE)")
    elif result.purge_command:
        print(f"  the plaintext original is kept as {esc(result.plaintext_table or '')}; purge it with:")
        print(f"    {esc(result.purge_command)}")
        print(f"    (or: pyiceberg-crypto encrypt {esc(result.table)} --key-id {esc(result.key_id or '')} --purge-now)")


def _fail(message: str) -> int:
    print(f"pyiceberg-crypto encrypt: {escape_text(message)}", file=sys.stderr)
    return ExitStatus.USAGE
