"""``pyiceberg-crypto encrypt``: an existing plaintext table becomes an encrypted table under its own
name (issue 51; :func:`pyiceberg_crypto.adopt.encrypt_table`)::

    pyiceberg-crypto encrypt lake.db.orders --key-id orders-key [--warehouse /data/wh] \\
        [--kms keystore --kms-property keystore.path=keys.json] [--refs drop|keep-original] \\
        [--on-change redo|refuse] [--keep-original NAME | --purge-now | --purge-after SECONDS] [--json]

The copy is compared with the original and proven by the verifier before the names are swapped;
the original is then kept as ``<name>__plaintext_<stamp>``, purged (``--purge-now``,
``--purge-after``) or kept under ``--keep-original NAME``; running again finishes the job. Exit
status: 0 done, 1 the copy differs or the proof failed (nothing swapped), 2 an error (the table
keeps its name and rows).

``--all-tables``: the positional argument is a catalog, and every plaintext table of it is
encrypted (:func:`pyiceberg_crypto.adopt.encrypt_tables`), one line per table as it ends, a failing
table named while the others go on, the report resumed from by ``--resume`` or the same
``--report``::

    pyiceberg-crypto encrypt lake --all-tables --key-id lake-key [--namespace shop ...] [--parallel 2] \\
        [--report encrypt-lake.json | --resume encrypt-lake.json] [--dry-run] [--purge-now] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import nullcontext

from pyiceberg_crypto.cli.arguments import add_kms_arguments, kms_from_arguments
from pyiceberg_crypto.errors import IntegrityError, InvalidArgumentError
from pyiceberg_crypto.cli.options import local_session_catalog
from pyiceberg_crypto.exit_status import ExitStatus
from pyiceberg_crypto.safe_text import escape_text


def add_parser(sub) -> None:
    parser = sub.add_parser("encrypt", help="encrypt an existing plaintext table under its own name: copy, "
                                            "verify row for row, swap, purge the plaintext")
    parser.add_argument("table", metavar="CATALOG.DB.TABLE|CATALOG",
                        help="the table; with --all-tables, the catalog")
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
    parser.add_argument("--json", action="store_true",
                        help="print JSON (with --all-tables: one JSON line per table, then the summary)")
    lake = parser.add_argument_group("the whole lake")
    lake.add_argument("--all-tables", action="store_true",
                      help="the positional argument is a catalog: encrypt every plaintext table of it (the audit's "
                           "UNENCRYPTED tables)")
    lake.add_argument("--namespace", action="append", default=[], metavar="NS",
                      help="with --all-tables: only this namespace (repeatable; default: every namespace)")
    lake.add_argument("--parallel", type=int, default=1, metavar="N",
                      help="with --all-tables: N tables at a time in the one Spark session (default: %(default)s)")
    lake.add_argument("--report", metavar="PATH",
                      help="with --all-tables: write the JSON report here, after each table; an existing report "
                           "of the catalog is resumed from")
    lake.add_argument("--resume", metavar="PATH",
                      help="with --all-tables: resume from this report (the tables it records as done are "
                           "skipped) and keep writing it")
    lake.add_argument("--dry-run", action="store_true",
                      help="with --all-tables: list what would be done; change nothing")
    parser.set_defaults(run=run_encrypt)


def run_encrypt(args: argparse.Namespace) -> int:
    """``encrypt``: its exit status. A package error it raises is the error boundary's
    (:func:`pyiceberg_crypto.cli.main.run_command`: one line, exit 2); a copy that differs from its
    original or a proof that failed is the command's verdict, exit 1 (nothing was swapped)."""
    try:
        return _encrypt(args)
    except IntegrityError as exc:  # the verdict (exit 1), not an error of the command
        print(f"pyiceberg-crypto encrypt: {escape_text(str(exc))}", file=sys.stderr)
        return ExitStatus.INTEGRITY


def _encrypt(args: argparse.Namespace) -> int:
    from pyiceberg_crypto.adopt import encrypt_table
    from pyiceberg_crypto.config import table_properties

    kms = kms_from_arguments(args)
    if "." in (args.keep_original or "") or (args.purge_after is not None and args.purge_after < 0):
        raise InvalidArgumentError("--keep-original wants a table name without dots, --purge-after a number of seconds >= 0")
    _check_lake_options(args)
    catalog = args.table if args.all_tables else local_session_catalog(args.table, args.warehouse)
    # the new table's settings, checked before Spark starts
    table_properties(args.key_id, data_key_length=args.data_key_length, format_version=args.format_version)

    from pyiceberg_crypto.bridge import register_kms
    from pyiceberg_crypto.config import session_for_catalog
    from pyiceberg_crypto.verify import verify_table

    spark = session_for_catalog(catalog, warehouse=args.warehouse, metastore_dir=args.metastore_dir,
                                metastore_uri=args.metastore_uri, app_name="pyiceberg-crypto-encrypt")

    def prove(table: str) -> tuple[bool, str]:
        report = verify_table(spark, table, kms=kms)
        bad = report.not_ok()
        return report.ok, (f"verify_table {table}: {'OK' if report.ok else 'NOT OK'}, {len(report.files)} file(s)"
                           + (f", {len(bad)} not OK (first: {bad[0].path})" if bad else ""))

    try:
        with register_kms(spark, kms) if kms is not None else nullcontext():
            if args.all_tables:
                return run_all_tables(spark, args, prove)
            result = encrypt_table(spark, args.table, args.key_id, format_version=args.format_version,
                                   data_key_length=args.data_key_length, refs=args.refs, on_change=args.on_change,
                                   keep_original=args.keep_original, purge_now=args.purge_now,
                                   purge_after=args.purge_after, prove=prove,
                                   progress=lambda message: print(f"  {escape_text(message)}", file=sys.stderr))
    finally:
        if args.warehouse:
            spark.stop()
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print_result(result)
    return ExitStatus.OK


def _check_lake_options(args: argparse.Namespace) -> None:
    lake_only = [name for name, given in (("--namespace", args.namespace), ("--parallel", args.parallel != 1),
                                          ("--report", args.report), ("--resume", args.resume),
                                          ("--dry-run", args.dry_run)) if given]
    if not args.all_tables:
        if lake_only:
            raise InvalidArgumentError(f"{', '.join(lake_only)} go(es) with --all-tables")
        return
    if "." in args.table:
        raise InvalidArgumentError(f"with --all-tables, give the catalog's name (e.g. lake), not {args.table!r}")
    if args.keep_original:
        raise InvalidArgumentError("--keep-original names one table: encrypt that table alone")
    if args.parallel < 1:
        raise InvalidArgumentError(f"--parallel wants a number of tables >= 1, got {args.parallel}")
    if args.report and args.resume and args.report != args.resume:
        raise InvalidArgumentError("--resume PATH keeps writing PATH: give --report PATH or --resume PATH, not two files")


def run_all_tables(spark, args: argparse.Namespace, prove) -> int:
    """``--all-tables``: list, encrypt each, one line per table, the summary; the exit status. The
    report: :func:`pyiceberg_crypto.adopt.encrypt_tables` resumes from it (``--resume``, or an
    existing ``--report``), failing before anything changes when it cannot."""
    from pyiceberg_crypto.adopt import encrypt_tables

    path = args.resume or args.report

    def progress(event: dict) -> None:
        if event.get("resumed_from"):
            print(f"resuming from the report {escape_text(path)}: {event['done_earlier']} table(s) done by an "
                  "earlier run are skipped", file=sys.stderr)
        if args.json:
            print(json.dumps(event), flush=True)
        elif event.get("event") == "listed":
            print(f"{escape_text(args.table)}: {event['tables']} table(s) to encrypt, {event['done_earlier']} done "
                  f"earlier, {event['skipped']} skipped", file=sys.stderr, flush=True)
        else:
            where = f"[{event['n']}/{event['of']}] " if event.get("n") else ""
            print(f"{where}{escape_text(event['table'])}: {event['status'].upper()}: {escape_text(event['detail'])}"
                  + (f" ({event['seconds']:.1f} s)" if event.get("seconds") else ""), file=sys.stderr, flush=True)

    outcome = encrypt_tables(spark, args.table, args.key_id, namespaces=args.namespace or None,
                             parallel=args.parallel, report=path, resume=args.resume,
                             dry_run=args.dry_run, progress=progress, prove=prove,
                             format_version=args.format_version, data_key_length=args.data_key_length,
                             refs=args.refs, on_change=args.on_change, purge_now=args.purge_now,
                             purge_after=args.purge_after)
    document = outcome.to_dict()
    if args.json:
        print(json.dumps({"event": "summary", "ok": outcome.ok, "counts": document["counts"], "report": path,
                          "failed": outcome.failed, "skipped": outcome.skipped, "planned": outcome.planned,
                          "report_error": outcome.report_error}))
    else:
        _print_lake(outcome, path)
    if outcome.report_error:
        print(f"pyiceberg-crypto encrypt: {escape_text(outcome.report_error)}", file=sys.stderr)
    if outcome.unverified:
        return ExitStatus.INTEGRITY
    return ExitStatus.OK if outcome.ok else ExitStatus.USAGE


def _print_lake(outcome, path: str | None) -> None:
    esc = escape_text
    if outcome.dry_run:
        print(f"{esc(outcome.catalog or '')}: dry run: {len(outcome.planned)} table(s) would be encrypted; "
              "nothing was changed")
        for table, what in outcome.planned.items():
            print(f"  WOULD ENCRYPT {esc(table)}: {esc(what)}")
    else:
        print(f"{esc(outcome.catalog or '')}: {len(outcome.done)} table(s) encrypted, {len(outcome.failed)} failed")
        for table, result in outcome.done.items():
            print(f"  DONE     {esc(table)}" + (f": original kept as {esc(result['plaintext_table'])} (purge: "
                                                 f"{esc(result['purge_command'])})" if result.get("purge_command") else ""))
        for table, why in outcome.failed.items():
            print(f"  FAILED   {esc(table)}: {esc(why)} (it keeps its name and rows; run again with --resume)")
    for table, why in outcome.skipped.items():
        print(f"  SKIPPED  {esc(table)}: {esc(why)}")
    if path and not outcome.dry_run:
        print(f"report: {esc(path)}")


def print_result(result) -> None:
    esc = escape_text
    compared = result.compared
    if result.already_encrypted and not result.swapped:  # encrypted at its creation
        print(f"{esc(result.table)}: already encrypted (master key {esc(result.key_id or '')}): nothing to do")
        return
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
        if result.swap_gap_seconds is not None:
            print(f"  swap gap: {esc(result.table)} was missing for {result.swap_gap_seconds:.3f} s (two renames and a load"
                  f"{'' if result.swap_attempts < 2 else f'; {result.swap_attempts} swaps started, writers committed'})")
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
