"""Run one service in the foreground until Ctrl-C / SIGTERM (used by ``docker/`` and by hand).

    python -m pyiceberg_crypto.testing metastore --directory /var/lib/metastore [--host 127.0.0.1] [--port 9083]
    python -m pyiceberg_crypto.testing s3 --directory /tmp/s3 [--bucket warehouse] [--port 9000]
    python -m pyiceberg_crypto.testing kafka --directory /tmp/kafka [--port 9092] [--partitions 1]
    python -m pyiceberg_crypto.testing openbao --directory /tmp/bao [--port 8200] [--persistent [--tls]]
    python -m pyiceberg_crypto.testing rest --directory /tmp/rest [--port 8181]
    python -m pyiceberg_crypto.testing jars DIR [--kafka-broker] [--rest-catalog]   # fetch their jars once (offline use)
    python -m pyiceberg_crypto.testing yarn --directory /tmp/yarn   # a YARN cluster in network namespaces (root; make yarn-jars)

Prints where the service listens (never credentials: moto accepts any, the clients bring their own
through ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``; OpenBao's root token is in a 0600 file whose
path is printed; the REST catalog, for tests, has no authentication and binds 127.0.0.1 only). ``--host 0.0.0.0`` is for containers,
whose port is published on the host's loopback only; the metastore has no authentication.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

from pyiceberg_crypto import jars
from pyiceberg_crypto.errors import SetupError
from pyiceberg_crypto.catalog.kinds import ENCRYPTING_REST_CATALOG_IMPL
from pyiceberg_crypto.testing import jars as testing_jars
from pyiceberg_crypto.testing._process import LOOPBACK, ServiceError
from pyiceberg_crypto.testing.kafka import KafkaBroker
from pyiceberg_crypto.testing.metastore import StandaloneMetastore
from pyiceberg_crypto.testing.openbao import OpenBaoServer
from pyiceberg_crypto.testing.rest import RestCatalogServer
from pyiceberg_crypto.testing.s3 import S3Server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyiceberg_crypto.testing", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="service", required=True)
    ports = {"metastore": 9083, "s3": 9000, "openbao": 8200}
    for name in ("metastore", "s3", "openbao"):
        command = sub.add_parser(name)
        command.add_argument("--directory", required=True, help="database / log directory")
        command.add_argument("--host", default=LOOPBACK, help="address to bind (default 127.0.0.1)")
        command.add_argument("--port", type=int, default=ports[name])
        if name == "s3":
            command.add_argument("--bucket", default="warehouse")
        if name == "openbao":
            command.add_argument("--persistent", action="store_true",
                                 help="raft storage in the directory, kept across restarts (default: a dev server)")
            command.add_argument("--tls", action="store_true", help="HTTPS with a fresh CA (with --persistent)")

    kafka = sub.add_parser("kafka", help="a single-node KRaft Kafka broker on 127.0.0.1 (no authentication)")
    kafka.add_argument("--directory", required=True, help="topics (data/), configuration and log directory")
    kafka.add_argument("--port", type=int, default=0, help="client port (default: a free one; kept across restarts)")
    kafka.add_argument("--partitions", type=int, default=1, help="partitions of a topic created on first use")
    rest = sub.add_parser("rest", help="an Iceberg REST catalog for tests on 127.0.0.1 (no authentication)")
    rest.add_argument("--directory", required=True, help="catalog database, default warehouse and log directory")
    rest.add_argument("--port", type=int, default=8181, help="HTTP port (0: a free one)")
    yarn = sub.add_parser("yarn", help="a ResourceManager and two NodeManagers in network namespaces, and an edge "
                          "node to submit from (needs root, iproute2, iptables, tcpdump; jars: make yarn-jars)")
    yarn.add_argument("--directory", required=True, help="configuration, daemon logs, NodeManager directories, staging")
    fetch = sub.add_parser("jars", help="download the servers' pinned jars into DIR, SHA-256 checked (offline use)")
    fetch.add_argument("directory", metavar="DIR")
    fetch.add_argument("--kafka-broker", action="store_true", help="the Kafka broker's jars, into DIR/kafka-VERSION")
    fetch.add_argument("--rest-catalog", action="store_true",
                       help="the REST catalog's jars (the Iceberg runtime and H2), into DIR")
    fetch.add_argument("--repository", default=jars.MAVEN_CENTRAL, help="Maven repository URL (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.service == "jars":
        return _download_jars(args)
    if args.service == "yarn":
        return _run_yarn(args.directory)

    if args.service == "metastore":
        service = StandaloneMetastore(args.directory, host=args.host, port=args.port)
    elif args.service == "rest":
        service = RestCatalogServer(args.directory, port=args.port)
    elif args.service == "kafka":
        service = KafkaBroker(args.directory, port=args.port,
                              partitions=args.partitions)
    elif args.service == "openbao":
        try:
            service = OpenBaoServer(args.directory, host=args.host, port=args.port, persistent=args.persistent,
                                    tls=args.tls)
        except ServiceError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    else:
        service = S3Server(args.directory, host=args.host, port=args.port, bucket=args.bucket)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        service.start()
        if args.service == "metastore":
            where = service.uri
        elif args.service == "rest":
            where = (f"{service.uri} (encrypting catalog properties catalog-impl={ENCRYPTING_REST_CATALOG_IMPL}, "
                     f"uri={service.uri}; or config.catalog_settings(NAME, catalog_type='rest', uri='{service.uri}', "
                     "warehouse=...). Iceberg's own type=rest writes encryption.key-id tables in plaintext)")
        elif args.service == "kafka":
            where = f"{service.bootstrap_servers} (kafka.bootstrap.servers)"
        elif args.service == "openbao":
            where = f"{service.address} (root token in {service.token_file}, Transit at transit/" + (
                f", CA {service.ca_file})" if service.ca_file else ")")
        else:
            where = f"{service.endpoint} bucket {args.bucket}"
        print(f"{service.name} ready at {where} (log: {service.log_path})", flush=True)
        while service.running:
            time.sleep(1)
        print(f"{service.name} exited; see {service.log_path}", file=sys.stderr)
        return 1
    except ServiceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        service.stop()


def _run_yarn(directory: str) -> int:
    """The test suite's YARN cluster (:class:`~pyiceberg_crypto.testing.yarn.YarnCluster`), until Ctrl-C / SIGTERM."""
    from pyiceberg_crypto.testing.yarn import YarnCluster

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        cluster = YarnCluster.start(directory)
    except ServiceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        edge = cluster.edge
        print(f"YARN cluster ready: ResourceManager at {cluster.resource_manager.address}, NodeManagers at "
              f"{', '.join(n.address for n in cluster.nodemanagers)}; submit from the edge node: "
              f"ip netns exec {edge.netns} env HADOOP_CONF_DIR={cluster.client_conf_dir} spark-submit --master yarn "
              f"--conf spark.yarn.jars=local:<pyspark>/jars/* --conf spark.driver.host={edge.address} ... "
              f"(settings: YarnCluster.spark_conf; logs under {cluster.workdir})", flush=True)
        while all(cluster.daemon_running(node) for node in [cluster.resource_manager, *cluster.nodemanagers]):
            time.sleep(1)
        print(f"a YARN daemon exited; see the daemon.log files under {cluster.workdir}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        cluster.close()


def _download_jars(args: argparse.Namespace) -> int:
    """Fill ``DIR`` like ``pyiceberg-crypto jars download`` does for the product's jars."""
    try:
        paths = []
        if args.rest_catalog:
            paths += testing_jars.rest_catalog_jars(args.directory, repository=args.repository, log=print)
        if args.kafka_broker:
            paths += testing_jars.kafka_broker_jars(testing_jars.kafka_broker_dir(args.directory),
                                                    repository=args.repository, log=print)
    except (SetupError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{len(paths)} jar(s) in {args.directory}, SHA-256 checked; use them with: "
          f"export {jars.JARS_DIR_ENV}={args.directory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
