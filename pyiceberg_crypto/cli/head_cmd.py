"""``pyiceberg-crypto head``: the first rows of an encrypted table, without Spark or a JVM.

    pyiceberg-crypto head /wh/db.db/orders/metadata/00007-....metadata.json --kms keystore \\
        --kms-property keystore.path=keys.json [-n 10] [--columns id,amount] [--snapshot ID] [--json] \\
        [--io-property s3.endpoint=https://...]
    pyiceberg-crypto head db.orders --metastore thrift://127.0.0.1:9083 --kms ...
    pyiceberg-crypto head db.orders --metastore http://127.0.0.1:8181 --kms ...      # a REST catalog

Stops reading once ``-n`` rows are out (files are read in order; each one is authenticated before
any of its rows is printed). Exit status: 0 rows printed, 1 a file is not authentic (the message
names it, and the module or block), 2 usage error or unreadable input. Needs the ``[read]`` extra.
"""

from __future__ import annotations

import argparse
import json
import sys

from pyiceberg_crypto.exit_status import ExitStatus
from pyiceberg_crypto.cli.arguments import add_kms_arguments, kms_from_arguments, parse_properties, positive_int
from pyiceberg_crypto.safe_text import escape_text

MAX_CELL = 40  # characters of one value in the text table


def add_parser(sub) -> None:
    head = sub.add_parser("head", help="print the first rows of an encrypted table (no JVM; needs the [read] extra)")
    head.add_argument("source", metavar="METADATA_JSON|DB.TABLE",
                      help="the table's metadata.json (path or URI), or DB.TABLE with --metastore")
    add_kms_arguments(head)
    head.add_argument("-n", "--rows", type=positive_int, default=10, metavar="N", help="rows to print (default: 10)")
    head.add_argument("--columns", metavar="A,B", help="only these top-level columns (comma-separated)")
    head.add_argument("--snapshot", type=int, metavar="ID", help="read this snapshot, with its schema")
    head.add_argument("--where", action="append", default=[], metavar="'COLUMN OP VALUE'",
                      help="only rows where this holds (repeatable: all must hold); op: == != < <= > >= in, "
                           "not in; files whose column bounds rule it out are not read")
    head.add_argument("--metastore", metavar="URI",
                      help="the catalog naming DB.TABLE: thrift://host:port of a Hive metastore, or "
                           "http(s)://host:port of a REST catalog (no credentials: read_table takes a RestCatalog)")
    head.add_argument("--io-property", action="append", default=[], metavar="KEY=VALUE",
                      help="a storage property (s3.endpoint, s3.region, ...: as the catalog's) (repeatable)")
    head.add_argument("--allow-location", action="append", default=[], metavar="URI",
                      help="also read files under this location (a table that spans several)")
    head.add_argument("--json", action="store_true", help="print one JSON object per row")
    head.set_defaults(run=run_head)


def run_head(args: argparse.Namespace) -> int:
    try:
        from pyiceberg_crypto.read import ReadIntegrityError, scan
        from pyiceberg_crypto.read.filter import parse_predicate
        from pyiceberg_crypto.table.limits import Limits
    except ImportError as exc:  # the [read] extra is not installed: its message says how to add it
        print(f"pyiceberg-crypto head: {escape_text(str(exc))}", file=sys.stderr)
        return ExitStatus.USAGE
    kms = kms_from_arguments(args, required=True)
    columns = [c.strip() for c in args.columns.split(",") if c.strip()] if args.columns else None
    io_properties = parse_properties(args.io_property, "--io-property")
    row_filter = [parse_predicate(text) for text in args.where] or None
    try:
        reader = scan(args.source, kms, snapshot_id=args.snapshot, columns=columns, row_filter=row_filter,
                      catalog=args.metastore, batch_rows=args.rows, max_workers=2,
                      limits=Limits(properties=io_properties, allowed_locations=tuple(args.allow_location)))
        rows = _first_rows(reader, args.rows)
    except ReadIntegrityError as exc:  # a verdict, not an error: which of the two the table's files got
        verdict = "KEY_ERROR (no key to open the table; its files were not judged)" if exc.status == "KEY_ERROR" \
            else "not authentic"
        print(f"pyiceberg-crypto head: {verdict}: {escape_text(str(exc))}", file=sys.stderr)
        return ExitStatus.INTEGRITY
    names = reader.schema.names
    if args.json:
        for row in rows:
            print(json.dumps(row, default=_json_value, ensure_ascii=False))
    else:
        _print_table(names, rows)
    return ExitStatus.OK


def _first_rows(reader, limit: int) -> list[dict]:
    rows: list[dict] = []
    for batch in reader:
        rows.extend(batch.slice(0, limit - len(rows)).to_pylist())
        if len(rows) >= limit:
            break
    reader.close()
    return rows


def _json_value(value):
    if isinstance(value, bytes):
        return value.hex()
    return str(value)  # decimals, dates, timestamps: their text form


def _cell(value) -> str:
    text = "NULL" if value is None else (value.hex() if isinstance(value, bytes) else str(value))
    text = escape_text(text)
    return text if len(text) <= MAX_CELL else text[:MAX_CELL - 1] + "…"


def _print_table(names: list[str], rows: list[dict]) -> None:
    cells = [[_cell(row[name]) for name in names] for row in rows]
    widths = [max([len(escape_text(n))] + [len(r[i]) for r in cells]) for i, n in enumerate(names)]
    print("  ".join(escape_text(n).ljust(w) for n, w in zip(names, widths)))
    print("  ".join("-" * w for w in widths))
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)))
    print(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")

