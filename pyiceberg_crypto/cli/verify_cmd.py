"""``pyiceberg-crypto verify METADATA_JSON --kms SPEC``: verify a whole table without a JVM.

    pyiceberg-crypto verify /wh/db.db/orders/metadata/00042-....metadata.json --kms keystore ...
    pyiceberg-crypto verify lake.db.orders --metastore-uri thrift://hms:9083 --kms keystore ...
    pyiceberg-crypto verify lake.db.orders --rest-uri http://catalog:8181 --kms keystore ...

With a table name, its current metadata.json is asked of the Hive metastore (over Thrift: its
``metadata_hash`` is checked too) or the REST catalog (``loadTable``: the file must be the
metadata it serves) directly, as ``pyiceberg-crypto audit`` does
(:func:`~pyiceberg_crypto.verify.pipeline.verify_catalog_table`, also the verification job's JVM-free
form).

Human output: the table checks, counts by kind and status, then every file that is not OK with
its reason; a progress bar on a terminal (none when piped). ``--json`` prints the report document
(also on errors). Exit status: 0 every file and check OK, 1 any finding not OK, 2 usage error or
unreadable table metadata.

``--since ID`` verifies only what the table gained after snapshot ID; ``--state FILE`` keeps a
ledger (full once, then incremental, with a ``history`` check; ``--accept-history`` resets it).

Hostile input is bounded: the metadata.json must be a regular file of at most
``--max-metadata-bytes`` (checked before reading), every KMS call (the factory included) is given
``--kms-timeout`` seconds, and the human report escapes control characters and terminal escapes in
paths and reasons (``--json`` escapes them as JSON does).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from pyiceberg_crypto.cli.options import UsageError
from pyiceberg_crypto.exit_status import ExitStatus
from pyiceberg_crypto.cli.arguments import (
    add_kms_arguments,
    kms_from_arguments,
    add_limit_arguments,
    add_scope_arguments,
    parse_properties,
    verification_options,
)
from pyiceberg_crypto.cli.catalog_arguments import add_direct_catalog_arguments, direct_catalog_properties
from pyiceberg_crypto.verify.pipeline import verify_catalog_table
from pyiceberg_crypto.verify.render import error_document, write_report


def add_parser(sub) -> None:
    verify = sub.add_parser("verify", help="verify every file of an encrypted table (no JVM)")
    verify.add_argument("metadata", metavar="METADATA_JSON|TABLE",
                        help="the table's current metadata.json (path or URI), or CATALOG.DB.TABLE with "
                             "--metastore-uri or --rest-uri")
    add_kms_arguments(verify)
    add_direct_catalog_arguments(verify)
    verify.add_argument("--io-property", action="append", default=[], metavar="KEY=VALUE",
                        help="a storage property, as in the catalog (s3.endpoint=http://127.0.0.1:9000, "
                             "s3.path-style-access=true, client.region=...); credentials come from the "
                             "environment (repeatable)")
    add_scope_arguments(verify)
    verify.add_argument("--metadata-hash", metavar="BASE64",
                        help="the metastore's metadata_hash for this metadata.json, to check it too")
    add_limit_arguments(verify)
    verify.add_argument("--json", action="store_true", help="print the report as JSON")
    verify.set_defaults(run=run_verify, error_document=_error_document)


def run_verify(args: argparse.Namespace) -> int:
    from pyiceberg_crypto.verify.pipeline import verify_metadata

    options = verification_options(args, parse_properties(args.io_property, "--io-property"))
    catalog_properties = _direct_properties(args)
    kms = kms_from_arguments(args, required=True, timeout=args.kms_timeout)
    with _progress(enabled=not args.json and sys.stderr.isatty()) as progress:
        if catalog_properties is not None:
            report = verify_catalog_table(catalog_properties, args.metadata, kms, timeout=args.metastore_timeout,
                                          progress=progress, **options)
        else:
            report = verify_metadata(args.metadata, kms, expected_metadata_hash=args.metadata_hash,
                                     progress=progress, **options)
    write_report(report, sys.stdout, as_json=args.json)
    return ExitStatus.of(report)


def _error_document(args: argparse.Namespace, kind: str, message: str, exc: BaseException) -> dict:
    return error_document(kind, message)


def _direct_properties(args: argparse.Namespace) -> dict[str, str] | None:
    """The catalog to ask for a table name (None: METADATA_JSON is read as given); ValueError when
    the positional and the options do not go together."""
    catalog_properties = direct_catalog_properties(args)
    is_file = args.metadata.endswith(".json") or "/" in args.metadata
    if catalog_properties is None and not is_file:
        raise UsageError(f"{args.metadata!r} is a table name: say where its catalog is with --metastore-uri "
                         "thrift://host:port (a Hive metastore) or --rest-uri http://host:port (a REST catalog), "
                         "or give its metadata.json")
    if catalog_properties is not None and is_file:
        raise UsageError(f"{args.metadata} is a metadata.json: give a table name (CATALOG.DB.TABLE) with "
                         "--metastore-uri / --rest-uri, or the file without them")
    if catalog_properties is not None and args.metadata_hash:
        raise UsageError("--metadata-hash is for a metadata.json: with a table name the metastore's hash is used")
    return catalog_properties


class _progress:
    """A rich progress bar on stderr when it is a terminal; a no-op callback otherwise."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self._bar = None

    def __enter__(self) -> Callable[[str, int, int], None] | None:
        if not self.enabled:
            return None
        from rich.console import Console
        from rich.progress import Progress

        self._bar = Progress(console=Console(stderr=True), transient=True)
        self._bar.start()
        task = self._bar.add_task("verifying", total=None)

        def update(stage: str, done: int, total: int) -> None:
            self._bar.update(task, description=f"verifying {stage}", completed=done, total=total or None)

        return update

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()
