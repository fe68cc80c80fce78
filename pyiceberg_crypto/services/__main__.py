"""Run one service in the foreground until Ctrl-C / SIGTERM (used by ``docker/`` and by hand).

    python -m pyiceberg_crypto.services metastore --directory /var/lib/metastore [--host 127.0.0.1] [--port 9083]
    python -m pyiceberg_crypto.services s3 --directory /tmp/s3 [--bucket warehouse] [--port 9000]
    python -m pyiceberg_crypto.services kafka --directory /tmp/kafka [--port 9092] [--partitions 1]
    python -m pyiceberg_crypto.services openbao --directory /tmp/bao [--port 8200] [--persistent [--tls]]
    python -m pyiceberg_crypto.services rest --directory /tmp/rest [--port 8181]

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

from pyiceberg_crypto.services._process import LOOPBACK, ServiceError
from pyiceberg_crypto.services.kafka import KafkaBroker
from pyiceberg_crypto.services.metastore import StandaloneMetastore
from pyiceberg_crypto.services.openbao import OpenBaoServer
from pyiceberg_crypto.services.rest import RestCatalogServer
from pyiceberg_crypto.services.s3 import S3Server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyiceberg_crypto.services", description=__doc__.split("\n")[0])
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
    args = parser.parse_args(argv)

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
            where = f"{service.uri} (catalog properties type=rest, uri={service.uri})"
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


if __name__ == "__main__":
    sys.exit(main())
