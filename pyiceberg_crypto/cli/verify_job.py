"""Scheduled verification as a Spark application::

    spark-submit --conf spark.sql.catalog.lake=org.apache.iceberg.spark.SparkCatalog ... \\
        "$(python -c 'import pyiceberg_crypto.cli.verify_job as j; print(j.__file__)')" \\
        --table lake.db.orders --kms mycompany.kms:make_client --json --output report.json

    python -m pyiceberg_crypto.cli.verify_job --table lake.db.orders --kms keystore \\
        --warehouse /data/warehouse            # builds a local session with the package's settings

    python -m pyiceberg_crypto.cli.verify_job --table lake.db.orders --kms keystore \
        --metastore-uri thrift://hms:9083      # no Spark: the metastore is asked directly
    python -m pyiceberg_crypto.cli.verify_job --table lake.db.orders --kms keystore \
        --rest-uri http://catalog:8181          # no Spark: the REST catalog is asked directly

With ``--metastore-uri`` (and no ``--warehouse``) or ``--rest-uri`` the job starts no Spark and no
JVM: the table is looked up in the catalog and verified on this machine's cores, as
``pyiceberg-crypto verify TABLE --metastore-uri ...`` does
(:func:`pyiceberg_crypto.verify.verify_catalog_table`). Otherwise the Spark settings come from ``spark-submit`` (``--conf`` / ``spark-defaults.conf``); with
``--warehouse`` the job builds a local session itself (:func:`pyiceberg_crypto.config.spark_settings`).
Exit status (:class:`pyiceberg_crypto.exit_status.ExitStatus`): 0 every file OK, 1 a finding is not OK,
2 usage error, the table cannot be read, or the ledger cannot be used.
``--since ID``, ``--state FILE`` and ``--accept-history`` work as in ``pyiceberg-crypto verify``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from pyiceberg_crypto.exit_status import ExitStatus
from pyiceberg_crypto.cli.catalog_arguments import add_direct_catalog_arguments, direct_catalog_properties
from pyiceberg_crypto.cli.options import UsageError, local_session_catalog
from pyiceberg_crypto.cli.arguments import (
    add_kms_arguments,
    add_limit_arguments,
    add_scope_arguments,
    kms_from_arguments,
    verification_options,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pyiceberg_crypto.cli.verify_job",
                                     description="Verify an encrypted Iceberg table with Spark tasks.")
    parser.add_argument("--table", required=True, help="catalog.db.table")
    add_kms_arguments(parser)
    add_scope_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--output", metavar="FILE", help="also write the JSON report to FILE")
    parser.add_argument("--parallelism", type=int, help="Spark tasks for data and delete files")
    parser.add_argument("--driver-max-files", type=int, default=None, metavar="N",
                        help="check at most N files on the driver instead of in Spark tasks "
                             "(default: 32; 0: always Spark tasks)")
    add_limit_arguments(parser)
    local = parser.add_argument_group("a local session (instead of spark-submit settings)")
    local.add_argument("--warehouse", help="build a local Spark session for this warehouse")
    local.add_argument("--metastore-dir", help="embedded metastore directory (default: next to the warehouse)")
    local.add_argument("--metastore-uri", help="thrift://host:port of a metastore: asked directly (no Spark, no "
                                               "JVM), or with --warehouse the local session's metastore")
    local.add_argument("--master", default="local[2]")
    add_direct_catalog_arguments(parser, metastore_uri=False)
    parser.add_argument("--debug", action="store_true", help="print the traceback of an internal error (a bug)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from pyiceberg_crypto.cli.main import run_command

    args = build_parser().parse_args(argv)
    args.run = _run
    args.error_document = _error_document
    return run_command(args, "verify job")


def _error_document(args: argparse.Namespace, kind: str, message: str, exc: BaseException) -> dict:
    from pyiceberg_crypto.verify.render import error_document

    return error_document(kind, message)


def _run(args: argparse.Namespace) -> int:
    options = verification_options(args)
    catalog_properties = direct_catalog_properties(args, spark_with_warehouse=True)
    # a db.table with --warehouse: refused before Spark starts
    catalog = local_session_catalog(args.table, args.warehouse) if catalog_properties is None else None
    kms = kms_from_arguments(args, required=True, timeout=args.kms_timeout)
    if catalog_properties is not None:
        return _without_spark(args, catalog_properties, kms, options)
    from pyiceberg_crypto.verify.spark import verify_table

    spark = _session(args, catalog)
    try:
        if args.driver_max_files is not None:
            options["driver_max_files"] = args.driver_max_files
        report = verify_table(spark, args.table, kms=kms, parallelism=args.parallelism, **options)
    finally:
        if args.warehouse:
            spark.stop()
    return _output(args, report)


def _without_spark(args: argparse.Namespace, properties: dict[str, str], kms, options: dict) -> int:
    """The job's JVM-free form: the catalog asked directly, the files checked in this process."""
    from pyiceberg_crypto.verify import verify_catalog_table

    if args.parallelism is not None or args.driver_max_files is not None:
        raise UsageError("--parallelism and --driver-max-files are for Spark tasks: without Spark "
                         "(--metastore-uri / --rest-uri) the files are checked on this machine's cores")
    report = verify_catalog_table(properties, args.table, kms, timeout=args.metastore_timeout, **options)
    return _output(args, report)


def _output(args: argparse.Namespace, report) -> int:
    from pyiceberg_crypto.verify.render import write_report

    write_report(report, sys.stdout, as_json=args.json)
    if args.output:
        with open(args.output, "w") as out:
            json.dump(report.to_dict(), out, indent=2)
    return ExitStatus.of(report)


def _session(args: argparse.Namespace, catalog: str | None):
    from pyiceberg_crypto.config import session_for_catalog

    return session_for_catalog(catalog, warehouse=args.warehouse, metastore_dir=args.metastore_dir,
                               metastore_uri=args.metastore_uri, master=args.master,
                               app_name="pyiceberg-crypto-verify")


if __name__ == "__main__":
    sys.exit(main())
