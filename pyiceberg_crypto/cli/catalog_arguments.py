"""Command-line options that name a catalog, shared by the commands (``verify``, ``keys``,
``keystore retire``, ``audit``, the verification job)::

    add_direct_catalog_arguments(parser)          # --metastore-uri, --rest-uri, --rest-property, --metastore-timeout
    properties = direct_catalog_properties(args)  # the catalog asked directly (no JVM), or None
"""

from __future__ import annotations

import argparse
import os

from pyiceberg_crypto.catalog.kinds import HIVE, REST
from pyiceberg_crypto.cli.arguments import parse_properties, positive_seconds
from pyiceberg_crypto.cli.options import UsageError
from pyiceberg_crypto.properties import CATALOG_TIMEOUT_SECONDS

REST_TOKEN_VARIABLE = "PYICEBERG_CRYPTO_REST_TOKEN"
REST_CREDENTIAL_VARIABLE = "PYICEBERG_CRYPTO_REST_CREDENTIAL"


def rest_properties(args: argparse.Namespace) -> dict[str, str]:
    """The REST catalog's properties: ``--rest-uri``, ``--rest-property`` and the secrets' variables."""
    properties = parse_properties(args.rest_property, "--rest-property")
    for key in ("token", "credential", "uri"):
        if key in properties:
            raise UsageError(f"--rest-property {key}=...: " + ("use --rest-uri" if key == "uri" else
                             f"secrets go in ${REST_TOKEN_VARIABLE} or ${REST_CREDENTIAL_VARIABLE}, not the "
                             "command line (other users can read it)"))
    properties["uri"] = args.rest_uri
    for key, variable in (("token", REST_TOKEN_VARIABLE), ("credential", REST_CREDENTIAL_VARIABLE)):
        if os.environ.get(variable):
            properties[key] = os.environ[variable]
    return properties


def add_direct_catalog_arguments(parser, *, metastore_uri: bool = True) -> None:
    """A Hive metastore or a REST catalog asked directly (no Spark, no JVM): ``--metastore-uri``,
    ``--rest-uri``, ``--rest-property``, ``--metastore-timeout`` (read by :func:`direct_catalog_properties`)."""
    if metastore_uri:
        parser.add_argument("--metastore-uri", metavar="URI",
                            help="thrift://host:port of the Hive metastore, asked directly (no Spark, no JVM)")
    parser.add_argument("--rest-uri", metavar="URI",
                        help="http(s)://... of a REST catalog, asked directly (no Spark, no JVM); its token (or "
                             f"client_id:secret credential) comes from ${REST_TOKEN_VARIABLE} "
                             f"(or ${REST_CREDENTIAL_VARIABLE})")
    parser.add_argument("--rest-property", action="append", default=[], metavar="KEY=VALUE",
                        help="a REST catalog property, as in the Spark catalog (warehouse, prefix, header.NAME) "
                             "(repeatable)")
    parser.add_argument("--metastore-timeout", type=positive_seconds, default=CATALOG_TIMEOUT_SECONDS, metavar="SECONDS",
                        help="give up on a catalog call after this long (default: %(default)g)")


def add_catalog_arguments(parser) -> None:
    """Where the tables are for ``keys where-used`` and ``keystore retire``: a Hive metastore or a
    REST catalog asked directly (no JVM), a Spark catalog, or the tables themselves."""
    add_direct_catalog_arguments(parser)
    parser.add_argument("--catalog", metavar="NAME",
                        help="the catalog's name: tables are shown as NAME.db.table (default: the catalog of the "
                             "--table CATALOG.DB.TABLE names; without --metastore-uri, --rest-uri or --warehouse, "
                             "the current catalog of the session spark-submit configured; otherwise required)")
    parser.add_argument("--warehouse", help="build a local Spark session for this warehouse (embedded metastore)")
    parser.add_argument("--metastore-dir", help="embedded metastore directory (default: next to the warehouse)")
    parser.add_argument("--namespace", action="append", default=[], metavar="NS",
                        help="with --metastore-uri or --rest-uri: check only the tables of this namespace "
                             "(repeatable; default: every namespace)")
    parser.add_argument("--table", action="append", default=[], metavar="TABLE",
                        help="check only this table: CATALOG.DB.TABLE, or its current metadata.json (path or URI; "
                             "no Spark needed when every --table is one) (repeatable)")


def catalog_given(args: argparse.Namespace) -> bool:
    return bool(args.catalog or args.warehouse or args.metastore_dir or args.metastore_uri or args.rest_uri
                or args.table)


def direct_catalog_properties(args: argparse.Namespace, *, spark_with_warehouse: bool = False) -> dict[str, str] | None:
    """The settings of the catalog asked directly (``--rest-uri`` or ``--metastore-uri``), else
    None (a Spark session answers). ``--metastore-uri`` with ``--warehouse`` (or ``--metastore-dir``)
    is asked directly too, no JVM, unless ``spark_with_warehouse`` (the verification job, whose
    local session runs on that metastore). ValueError for options that do not go together."""
    if args.rest_property and not args.rest_uri:
        raise UsageError("--rest-property needs --rest-uri")
    if args.rest_uri and args.metastore_uri:
        raise UsageError("give --metastore-uri thrift://... (a Hive metastore) or --rest-uri http://... "
                         "(a REST catalog), not both")
    if args.rest_uri:
        return {**rest_properties(args), "type": REST}
    local_session = getattr(args, "warehouse", None) or getattr(args, "metastore_dir", None)
    if args.metastore_uri and not (spark_with_warehouse and local_session):
        return {"type": HIVE, "uri": args.metastore_uri}
    return None


def is_metadata_location(table: str) -> bool:
    """A ``--table`` / positional that names a metadata.json (a path or URI), not CATALOG.DB.TABLE."""
    return table.endswith(".json") or "/" in table


def add_table_arguments(parser) -> None:
    """A table committed to through its catalog: the KMS, the Spark session, --json."""
    from pyiceberg_crypto.cli.arguments import add_kms_arguments

    parser.add_argument("table", metavar="CATALOG.DB.TABLE")
    add_kms_arguments(parser)
    parser.add_argument("--warehouse", help="build a local Spark session for this warehouse")
    parser.add_argument("--metastore-dir", help="embedded metastore directory (default: next to the warehouse)")
    parser.add_argument("--metastore-uri", help="thrift://host:port of a metastore (rewrap, prune: committed to "
                                                "directly, no JVM, with or without --warehouse)")
    parser.add_argument("--json", action="store_true", help="print JSON")
