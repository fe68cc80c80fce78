"""``pyiceberg-crypto audit``: every table of a Hive metastore or a REST catalog, verified, without Spark::

    pyiceberg-crypto audit --metastore-uri thrift://hms:9083 --warehouse s3://lake/wh \\
        --kms keystore --kms-property keystore.path=/etc/lake/keys.json \\
        [--namespace sales ...] [--state-dir /var/lib/pyiceberg-crypto/ledgers] [--full] \\
        [--json] [--html audit.html] [--prometheus /var/lib/node_exporter/textfile/lake.prom]
    PYICEBERG_CRYPTO_REST_TOKEN=... pyiceberg-crypto audit --rest-uri https://catalog:8181 \\
        [--rest-property warehouse=lake] --kms ...

The tables are listed over the metastore's Thrift API (:mod:`pyiceberg_crypto.catalog.hive`),
or a REST catalog's HTTP API (:mod:`pyiceberg_crypto.catalog.rest`: every table loaded);
each Iceberg table is verified as ``pyiceberg-crypto verify`` would, with the files of all tables
checked in one batch on this machine's cores (:mod:`pyiceberg_crypto.audit.lake`). Output: a
summary and every table that is not OK (or the JSON report with ``--json``), plus the HTML page
and the Prometheus textfile when asked, always written once the arguments are valid (a page that
says no audit could be made, when none could). One table or namespace that cannot be listed,
loaded, decoded or named is an UNCHECKED entry with its reason; the others are audited. Exit
status: 0 every Iceberg table encrypted and OK, 1 any entry not, 2 bad usage or input, or nothing
could be audited (an unreachable metastore, no namespace listed, a missing ``--state-dir``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from pyiceberg_crypto.cli.arguments import (add_kms_arguments, add_limit_arguments, kms_from_arguments, parse_properties,
                                           positive_seconds)
from pyiceberg_crypto.errors import PyicebergCryptoError
from pyiceberg_crypto.cli.catalog_arguments import REST_CREDENTIAL_VARIABLE, REST_TOKEN_VARIABLE, rest_properties
from pyiceberg_crypto.errors import InvalidArgumentError
from pyiceberg_crypto.exit_status import ExitStatus
from pyiceberg_crypto.properties import CATALOG_TIMEOUT_SECONDS
from pyiceberg_crypto.safe_text import escape_text, exception_line


def add_parser(sub) -> None:
    audit = sub.add_parser("audit", help="audit every table of a Hive metastore or a REST catalog: encrypted, "
                                         "verified, under which keys (no Spark)")
    catalog = audit.add_mutually_exclusive_group(required=True)
    catalog.add_argument("--metastore-uri", metavar="URI",
                         help="thrift://host:port of the Hive metastore (several, comma-separated, tried in order)")
    catalog.add_argument("--rest-uri", metavar="URI",
                         help="http(s)://... of a REST catalog; its token (or client_id:secret credential) comes from "
                              f"${REST_TOKEN_VARIABLE} (or ${REST_CREDENTIAL_VARIABLE}), never the command line")
    audit.add_argument("--rest-property", action="append", default=[], metavar="KEY=VALUE",
                       help="a REST catalog property, as in the Spark catalog (warehouse, prefix, scope, "
                            "oauth2-server-uri, header.NAME) (repeatable)")
    audit.add_argument("--warehouse", metavar="URI", help="the lake's warehouse location (recorded in the report)")
    audit.add_argument("--catalog", metavar="NAME",
                       help="the catalog's name in the report and its metrics (default: the --metastore-uri or "
                            "--rest-uri as given)")
    add_kms_arguments(audit)
    audit.add_argument("--io-property", action="append", default=[], metavar="KEY=VALUE",
                       help="a storage property, as in the catalog (s3.endpoint=..., s3.path-style-access=true); "
                            "credentials come from the environment (repeatable)")
    audit.add_argument("--namespace", action="append", metavar="NS",
                       help="audit only this namespace (database) (repeatable; default: every namespace)")
    audit.add_argument("--state-dir", metavar="DIR",
                       help="a directory of ledgers, one per table: the first audit verifies each table's current "
                            "snapshot, later ones only what is newer (keep it where the tables' writers cannot write)")
    audit.add_argument("--full", action="store_true",
                       help="verify every snapshot of every table, ignoring the ledgers' cut-off")
    add_limit_arguments(audit)
    audit.add_argument("--metastore-timeout", type=positive_seconds, default=CATALOG_TIMEOUT_SECONDS, metavar="SECONDS",
                       help="give up on a Hive metastore call after this long (default: %(default)g; a REST call: 30)")
    audit.add_argument("--json", action="store_true", help="print the report as JSON")
    audit.set_defaults(run=run_audit, error_document=_error_document)
    audit.add_argument("--html", metavar="FILE", help="write the report as one self-contained HTML page")
    audit.add_argument("--prometheus", metavar="FILE",
                       help="write per-table gauges as a node-exporter textfile (e.g. <textfile dir>/lake_audit.prom)")


def run_audit(args: argparse.Namespace) -> int:
    import time

    from pyiceberg_crypto.audit.lake import CatalogReport, audit_tables, local_batch_runner
    from pyiceberg_crypto.catalog.entry import list_tables
    from pyiceberg_crypto.catalog.kinds import HIVE, REST
    from pyiceberg_crypto.table.limits import Limits

    io_properties = parse_properties(args.io_property, "--io-property")
    if args.rest_property and not args.rest_uri:
        raise InvalidArgumentError("--rest-property needs --rest-uri")
    rest = rest_properties(args) if args.rest_uri else None
    for option, path in (("--html", args.html), ("--prometheus", args.prometheus)):
        if path and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise InvalidArgumentError(f"{option} {path}: its directory does not exist")
    if args.state_dir and not os.path.isdir(args.state_dir):
        raise InvalidArgumentError(f"--state-dir {args.state_dir} does not exist: create it (mkdir -p -m 700 "
                         f"{args.state_dir}) where the tables' writers cannot write, then run again")
    kms = kms_from_arguments(args, required=True, timeout=args.kms_timeout)
    started = time.perf_counter()
    report = CatalogReport(args.catalog or args.metastore_uri or args.rest_uri, metastore=args.metastore_uri or args.rest_uri, warehouse=args.warehouse,
                           namespaces=sorted(args.namespace) if args.namespace else None, full=args.full,
                           state_dir=args.state_dir)
    limits = Limits(allowed_locations=tuple(args.allow_location), max_metadata_bytes=args.max_metadata_bytes,
                    kms_timeout=args.kms_timeout)
    try:
        catalog = {**rest, "type": REST} if rest is not None else {"type": HIVE, "uri": args.metastore_uri}
        listing = list_tables(catalog, args.namespace, timeout=args.metastore_timeout)
        audit_tables(listing, kms, report, run_batch=local_batch_runner(), properties=io_properties, limits=limits,
                     listed_in=time.perf_counter() - started)
    except Exception as exc:  # no audit could be made: the page and the textfile say so; the boundary reports it
        _write_files(args, report.no_audit(str(exc) if isinstance(exc, PyicebergCryptoError)
                                           else f"internal error in the audit: {exception_line(exc)}"))
        raise
    failed = _write_files(args, report)
    if args.json:
        json.dump(report.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(format_audit(report))
    if failed:  # the report is printed: only the file that could not be written is left to say
        print(f"pyiceberg-crypto audit: {escape_text(failed)}", file=sys.stderr)
        return ExitStatus.USAGE
    if report.nothing_audited:
        print("pyiceberg-crypto audit: no namespace of the catalog could be listed: nothing was audited", file=sys.stderr)
        return ExitStatus.USAGE
    return ExitStatus.OK if report.ok else ExitStatus.INTEGRITY


def _error_document(args: argparse.Namespace, kind: str, message: str, exc: BaseException) -> dict:
    """``--json`` when no audit could be made: ``metastore`` for a catalog that cannot be listed;
    the input problems the audit finds are ``usage``."""
    from pyiceberg_crypto.errors import CatalogError

    if isinstance(exc, CatalogError):
        kind = "metastore"
    elif kind == "unreadable":
        kind = "usage"
    return {"ok": False, "version": 1, "error": {"type": kind, "message": message}, "tables": []}


def _write_files(args: argparse.Namespace, report) -> str | None:
    """The HTML page and the Prometheus textfile, each attempted; the first failure's message, or None."""
    from pyiceberg_crypto.errors import FileAccessError

    failures = []
    for path, write in ((args.html, report.write_html), (args.prometheus, report.write_prometheus)):
        if path:
            try:
                write(path)
            except FileAccessError as exc:
                failures.append(str(exc))
    return failures[0] if failures else None


def format_audit(report) -> str:
    """The human summary: counts, then each Iceberg table that is not OK with its reason."""
    esc = escape_text
    summary = report.summary()
    states = ", ".join(f"{n} {s}" for s, n in summary["by_state"].items()) or "no tables"
    lines = [f"catalog   {esc(report.catalog)}   metastore {esc(report.metastore or '?')}",
             f"tables    {summary['tables']} ({states})",
             f"files     {summary['files']} checked: " + (", ".join(f"{n} {s}" for s, n in summary["files_by_status"].items())
                                                        or "none"),
             f"keys      {summary['keks']} KEK(s), {summary['keks_rotation_due']} due for rotation, "
             f"{summary['prunable_keks']} that keys prune would remove; master keys: "
             f"{esc(', '.join(summary['key_ids'])) or 'none'}"]
    bad = report.not_ok()
    if bad:
        lines += ["", f"not OK ({len(bad)})"]
        for entry in bad:
            lines.append(f"  {esc(entry.state):<12} {esc(entry.table)}  {esc(entry.reason or '')}: {esc(entry.detail or '')}")
            step = entry.next_step(report.catalog)
            if step:
                lines.append(f"  {'':<12} next: {esc(step)}")
    hints = [(entry, entry.readers_hint(report.catalog)) for entry in report.tables]
    hints = [(entry, hint) for entry, hint in hints if hint]
    if hints:
        lines += ["", f"readers   {len(hints)} encrypted table(s) declare no readers (pyiceberg-crypto.readers)"]
        lines += [f"  {esc(entry.table)}: {esc(hint)}" for entry, hint in hints]
    unlisted = summary.get("unlisted", 0)
    verdict = ("OK: every Iceberg table is encrypted and verified" if report.ok
               else f"FAILED: {len(bad) - unlisted} of {summary['iceberg_tables']} Iceberg table(s) not encrypted and OK"
               + (f", {unlisted} table(s) or namespace(s) that could not be listed or loaded" if unlisted else ""))
    return "\n".join(lines + ["", verdict, ""])

