"""``pyiceberg-crypto jars``: which JVM artifacts a session uses, and fetching them for offline use.

    pyiceberg-crypto jars show [--spark VERSION] [--aws] [--kafka] [--comet] [--json]
    pyiceberg-crypto jars download DIR [--spark 3.5|4.1 ...] [--aws] [--kafka] [--comet] [--repository URL]

``show`` says what :func:`pyiceberg_crypto.config.spark_settings` puts on the classpath for the
installed pyspark (or ``--spark``): the Maven coordinates of the Iceberg runtime and of the bridge
jar (from the repository inside this package), or the local files when ``$PYICEBERG_CRYPTO_JARS``
is set. ``download`` fills a
directory for offline / air-gapped clusters (each jar checked against its pinned SHA-256); then
``export PYICEBERG_CRYPTO_JARS=DIR``. ``--kafka`` adds Spark's Kafka connector
(``spark_settings(kafka=True)``), ``--comet`` Apache DataFusion Comet's jar
(``spark_settings(accelerator="comet")``; Spark 4.1 only: a 3.5 line gets none, and asking for
Comet with only 3.5 is refused). The test kit's servers fetch their own jars
(``python -m pyiceberg_crypto.testing jars DIR``). Exit status: 0 done, 2 unsupported Spark,
missing jar, download or checksum failure.
"""

from __future__ import annotations

import argparse
import json

from pyiceberg_crypto import jars
from pyiceberg_crypto.errors import SetupError
from pyiceberg_crypto.exit_status import ExitStatus


def add_parser(sub) -> None:
    """Add the ``jars`` subcommand and its actions to ``sub`` (argparse subparsers)."""
    parser = sub.add_parser("jars", help="show or download the JVM artifacts (Iceberg runtime, bridge)")
    parser.set_defaults(run=run_jars)
    actions = parser.add_subparsers(dest="jars_action", metavar="ACTION", required=True)
    show = actions.add_parser("show", help="the jars and Maven coordinates a session gets")
    show.add_argument("--spark", metavar="VERSION", help="pyspark version (default: the installed one)")
    show.add_argument("--aws", action="store_true", help="include the AWS bundle (S3 / AWS KMS)")
    show.add_argument("--kafka", action="store_true", help="include Spark's Kafka connector (spark-sql-kafka-0-10)")
    show.add_argument("--comet", action="store_true", help="include Apache DataFusion Comet (Spark 4.1 only)")
    show.add_argument("--json", action="store_true", help="print JSON")
    download = actions.add_parser("download", help="download the pinned jars into DIR (offline clusters)")
    download.add_argument("directory", metavar="DIR")
    download.add_argument("--spark", action="append", metavar="LINE",
                          help="Spark line or pyspark version, repeatable (default: the installed pyspark)")
    download.add_argument("--aws", action="store_true", help="also the AWS bundle (S3 / AWS KMS)")
    download.add_argument("--kafka", action="store_true",
                          help="also Spark's Kafka connector and the jars it needs (spark_settings(kafka=True))")
    download.add_argument("--comet", action="store_true",
                          help="also Apache DataFusion Comet, the native reader (spark_settings(accelerator='comet'); "
                               "Spark 4.1 only)")
    download.add_argument("--repository", default=jars.MAVEN_CENTRAL,
                          help="Maven repository URL, e.g. a company mirror (default: %(default)s)")


def run_jars(args: argparse.Namespace) -> int:
    if args.jars_action == "show":
        return _show(args)
    return _download(args)


def _show(args: argparse.Namespace) -> int:
    version = args.spark or jars.installed_pyspark_version()
    line = jars.spark_line(version)
    directory = jars.local_jars_dir()
    artifacts = jars.artifacts(line, aws=args.aws, kafka=args.kafka, local=directory is not None, comet=args.comet)
    try:
        bridge = str(jars.bridge_jar())
        bridge_packages = [jars.bridge_artifact().coordinate]
        repositories = [jars.bridge_repository().as_uri()]
    except SetupError as exc:  # no bridge jar built or shipped
        bridge = f"MISSING ({exc})"
        bridge_packages, repositories = [], []
    document = {
        "pyspark": version,
        "spark_line": line.spark,
        "scala": line.scala,
        "java": list(line.java),
        "iceberg": jars.ICEBERG_VERSION,
        "bridge_jar": bridge,
        "packages": [a.coordinate for a in artifacts] + ([] if directory else bridge_packages),
        "repositories": [] if directory else repositories,
        "mode": "local" if directory else "packages",
        "local_jars": [str(directory / a.file_name) for a in artifacts] if directory else [],
    }
    if args.json:
        print(json.dumps(document, indent=2))
        return ExitStatus.OK
    print(f"pyspark {version}: Spark {line.spark} (Scala {line.scala}, Java {' or '.join(map(str, line.java))}), "
          f"Iceberg {jars.ICEBERG_VERSION}")
    print(f"bridge jar  {bridge}")
    if directory:
        print(f"local jars  (${jars.JARS_DIR_ENV}={directory})")
        for path in document["local_jars"]:
            print(f"            {path}")
    else:
        print("packages    (spark.jars.packages, resolved by Spark and shipped to executors)")
        for coordinate in document["packages"]:
            print(f"            {coordinate}")
        for repository in document["repositories"]:
            print(f"repository  {repository}  (spark.jars.repositories: the bridge jar's)")
    return ExitStatus.OK


def _download(args: argparse.Namespace) -> int:
    lines = [jars.spark_line(value) for value in (args.spark or [jars.installed_pyspark_version()])]
    comet_lines = [line for line in lines if line.spark in jars.COMET_SPARK_LINES]
    if args.comet and not comet_lines:
        jars.comet_artifact(lines[0])  # refused: the message names the line and what is supported
    for line in lines:
        if args.comet and line not in comet_lines:
            print(f"no Comet for Spark {line.spark}: Comet {jars.COMET_VERSION} is served for Spark "
                  f"{' and '.join(jars.COMET_SPARK_LINES)} only")
    wanted = dict.fromkeys(artifact for line in lines
                           for artifact in jars.artifacts(line, aws=args.aws, kafka=args.kafka, local=True,
                                                          comet=args.comet and line in comet_lines))
    paths = jars.download(args.directory, wanted, repository=args.repository, log=print)
    print(f"{len(paths)} jar(s) in {args.directory}, SHA-256 checked; use them with: "
          f"export {jars.JARS_DIR_ENV}={args.directory}")
    return ExitStatus.OK
