"""``pyiceberg-crypto kms serve``: a KMS service for JVMs without a Python driver.

    pyiceberg-crypto kms serve --kms keystore --kms-property keystore.path=/etc/lake/keys.json \\
        --listen 127.0.0.1:9600 --token-file /run/lake/kms.token [--status-file /run/lake/kms.json] \
        [--metrics 127.0.0.1:9601 --health-key canary]

It prints the catalog properties clients need, writes a fresh token (0600) and serves until
SIGTERM / SIGINT (clean stop: the token file is removed). SIGHUP rebuilds the KMS (a changed
keystore) without dropping clients; SIGUSR1 logs the call counts and rewrites the status file,
which is also rewritten every few seconds while calls arrive; SIGUSR2 revokes the token (a fresh
one in the token file, connections holding the old one closed; JVMs re-read the file). ``--metrics`` serves Prometheus text
at ``/metrics`` and a health check at ``/healthz`` (a canary wrap/unwrap with ``--health-key``).
``--replica`` makes it one of several replicas: it reads the operator's token file instead of
writing one (docs/how-to/kms-service.md#replicas).
``--aws-kms-api [HOST:]PORT`` also serves the same KMS as the AWS KMS JSON API (HTTPS, SigV4 with
the keys of ``--aws-kms-api-credentials``), for Trino and Iceberg's ``AwsKeyManagementClient``
(:mod:`pyiceberg_crypto.serve.aws.api`); it follows its credentials file (a removed section is
refused within a second; SIGHUP re-reads it too).

One KMS is built (:class:`~pyiceberg_crypto.serve.served_kms.ServedKms`) and served by each face as an
equal: the Py4J face (:mod:`pyiceberg_crypto.serve.py4j`) and, when asked, the AWS KMS face.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import queue
import socket

from pyiceberg_crypto.errors import InvalidArgumentError
from pyiceberg_crypto.exit_status import ExitStatus
from pyiceberg_crypto.cli.arguments import add_kms_arguments, parse_properties, positive_int, positive_seconds
from pyiceberg_crypto.safe_text import escape_text as esc
from pyiceberg_crypto.serve.served_kms import SERVED_KMS_TIMEOUT_SECONDS


def add_parser(sub) -> None:
    kms = sub.add_parser("kms", help="serve a Python KMS to Spark JVMs (spark-sql, Connect, JDBC, JVM jobs)")
    kms.set_defaults(run=run_kms)
    commands = kms.add_subparsers(dest="kms_command", metavar="COMMAND")
    serve = commands.add_parser("serve", help="run an authenticated KMS service until SIGTERM")
    serve.set_defaults(command_name="kms serve")
    add_kms_arguments(serve)
    serve.add_argument("--listen", default="127.0.0.1:9600", metavar="HOST:PORT",
                       help="where to listen (default: %(default)s). Any address but 127.0.0.1 gets TLS "
                            "with a certificate clients pin; port 0 picks a free port")
    serve.add_argument("--token-file", required=True, metavar="PATH",
                       help="where to write the fresh token at each start (mode 0600; with --replica: where to "
                            "read the operator's token); JVMs read it")
    serve.add_argument("--replica", action="store_true",
                       help="one of several replicas serving the same clients: READ the token from --token-file "
                            "(and the policy's named tokens from their files), which the operator wrote (0600) "
                            "and gave every replica, instead of writing a fresh one; the files stay at stop, "
                            "SIGUSR2 re-reads them. Give every replica the same --tls-key-file and "
                            "--tls-certificate-file (one pin); clients list the replicas in "
                            "pyiceberg-crypto.kms-service=HOST:PORT,HOST:PORT")
    serve.add_argument("--replica-id", metavar="ID",
                       help="this replica's id on every operation line of its audit trail (default with --replica: "
                            "the host name); kms audit-log verify TRAIL... then gives one account across replicas")
    serve.add_argument("--status-file", metavar="PATH",
                       help="JSON status (address, pin, calls per operation and client), kept up to date")
    serve.add_argument("--kms-timeout", "--call-timeout", dest="kms_timeout", type=positive_seconds,
                       default=SERVED_KMS_TIMEOUT_SECONDS, metavar="SECONDS",
                       help="longest a KMS call may take before it fails, on every face (default: %(default)s, half "
                            "of what a JVM client waits; --call-timeout is its former name)")
    serve.add_argument("--tls-key-file", metavar="PATH",
                       help="TLS private key (default: beside the token file; created once, kept across restarts)")
    serve.add_argument("--tls-certificate-file", metavar="PATH", help="TLS certificate (default: beside the token file)")
    serve.add_argument("--max-connections", type=positive_int, default=256, metavar="N",
                       help="open connections at most; more are refused (default: %(default)s)")
    serve.add_argument("--max-unauthenticated", type=positive_int, default=64, metavar="N",
                       help="connections still authenticating at most; beyond, the oldest silent one is closed to "
                            "make room (default: %(default)s)")
    serve.add_argument("--metrics", metavar="[HOST:]PORT",
                       help="serve Prometheus metrics at http://HOST:PORT/metrics and a health check at /healthz "
                            "(HOST defaults to 127.0.0.1; no secrets in either; another host than loopback needs "
                            "--metrics-allow-remote)")
    serve.add_argument("--metrics-allow-remote", action="store_true",
                       help="let --metrics listen beyond loopback (no authentication, no TLS on that port: anyone "
                            "who reaches it reads the counters); logged at start")
    serve.add_argument("--health-key", metavar="KEY_ID",
                       help="key id of the /healthz canary: a random key wrapped and unwrapped through the KMS "
                            "(without it /healthz checks the listener only)")
    serve.add_argument("--health-interval", type=positive_seconds, default=5.0, metavar="SECONDS",
                       help="run the canary at most once per this (default: %(default)s); probes in between "
                            "get the last answer")
    serve.add_argument("--auth-deadline", type=positive_seconds, default=5.0, metavar="SECONDS",
                       help="a connection must authenticate (TLS included) within this (default: %(default)s)")
    serve.add_argument("--idle-timeout", type=positive_seconds, default=120.0, metavar="SECONDS",
                       help="an authenticated connection idle this long is closed (default: %(default)s; JVM clients "
                            "keep idle connections under 60 s and reconnect)")
    _add_aws_face_arguments(serve)
    _add_governance_arguments(serve)
    audit = commands.add_parser("audit-log", help="check the audit trail kms serve --audit-log writes")
    audit.set_defaults(command_name="kms audit-log verify")
    audit_commands = audit.add_subparsers(dest="audit_log_command", metavar="COMMAND")
    verify = audit_commands.add_parser(
        "verify", help="report the first removed, altered, reordered or truncated line, missing digest or file, "
                       "or cut tail (exit 0 only when verified with the key, 3 without it)")
    verify.add_argument("path", metavar="PATH", nargs="+",
                        help="the trail (kms serve --audit-log); PATH.1, PATH.2... are read first. Several trails "
                             "(one per replica): each is verified, then one account of them all is printed (per "
                             "principal, key, operation and result, the count of each replica)")
    verify.add_argument("--key-file", metavar="PATH",
                        help="the digest-signing key (kms serve --audit-key-file): checks every signed digest; "
                             "without it the trail is never reported as verified (exit 3)")
    verify.add_argument("--witness", metavar="PATH",
                        help="the witness kms serve --audit-witness wrote: proves the trail reaches its last digest "
                             "(a tail cut after it is found)")


def _add_governance_arguments(serve) -> None:
    group = serve.add_argument_group("grants and audit (both faces)")
    group.add_argument("--policy", metavar="PATH",
                       help="JSON policy: principals (aws:SECTION of the credentials file, py4j:NAME named tokens, "
                            "py4j:default for --token-file), the keys and operations each may use; anything not "
                            "granted is denied. SIGHUP re-reads it (a policy that does not parse keeps the old one). "
                            "Without it every principal may use every key")
    group.add_argument("--audit-log", metavar="PATH",
                       help="append one JSON line per KMS operation of every face (chained by SHA-256, signed "
                            "digests), mode 0600; an operation whose line cannot be written is refused")
    group.add_argument("--audit-key-file", metavar="PATH",
                       help="the key that signs the trail's digests, kept apart from the log (made 0600 when absent; "
                            "default: beside the token file, <token-file>.audit-key)")
    group.add_argument("--audit-log-max-bytes", type=positive_int, default=64 << 20, metavar="N",
                       help="rotate the trail to PATH.1, PATH.2... at this size (default: %(default)s)")
    group.add_argument("--audit-digest-every", type=positive_int, default=1000, metavar="N",
                       help="a signed digest line every N lines (default: %(default)s), and at start, at each "
                            "rotation and at stop")
    group.add_argument("--audit-digest-seconds", type=positive_seconds, default=60.0, metavar="SECONDS",
                       help="a signed digest line at most this long after a line (default: %(default)s)")
    group.add_argument("--audit-witness", metavar="PATH",
                       help="also append each signed digest to this file (ideally on another disk or host, mode "
                            "0600): kms audit-log verify --witness then finds a trail cut after a digest")


def _add_aws_face_arguments(serve) -> None:
    face = serve.add_argument_group("AWS KMS API face (Trino, Iceberg's AwsKeyManagementClient, boto3)")
    face.add_argument("--aws-kms-api", metavar="[HOST:]PORT",
                      help="also serve the KMS as the AWS KMS JSON API (Encrypt, Decrypt, GenerateDataKey, "
                           "DescribeKey) over HTTPS with SigV4; HOST defaults to 127.0.0.1")
    face.add_argument("--aws-kms-api-credentials", metavar="PATH",
                      help="access keys clients sign with: an AWS-style INI file ([name] aws_access_key_id, "
                           "aws_secret_access_key), owned by this user, mode 0600")
    face.add_argument("--aws-kms-api-region", default="us-east-1", metavar="REGION",
                      help="the region clients sign for and ARNs name (default: %(default)s)")
    face.add_argument("--aws-kms-api-account", default="000000000000", metavar="ID",
                      help="the 12-digit account ARNs name (default: %(default)s)")
    face.add_argument("--aws-kms-api-tls-dir", metavar="DIR",
                      help="where the face keeps its CA (aws-kms-api-ca.pem, aws-kms-api-truststore.p12 for Java) "
                           "and server key, made once (default: aws-kms-api-tls beside the token file)")
    face.add_argument("--aws-kms-api-tls-name", action="append", default=[], metavar="NAME",
                      help="another host name or address for the face's certificate (repeatable)")
    face.add_argument("--aws-kms-api-tls-key-file", metavar="PATH", help="your own TLS key (PEM, 0600) instead")
    face.add_argument("--aws-kms-api-tls-certificate-file", metavar="PATH",
                      help="your own TLS certificate chain (PEM) instead")
    face.add_argument("--aws-kms-api-plaintext", action="store_true",
                      help="plain HTTP, on a loopback address only (default: TLS)")
    face.add_argument("--aws-kms-api-refuse-raw-blobs", action="store_true",
                      help="Decrypt only the face's own blobs, not raw Python-KMS wrapped keys (tables written "
                           "through the Py4J bridge then no longer read through this face)")
    face.add_argument("--aws-kms-api-max-connections", type=positive_int, default=256, metavar="N",
                      help="open connections at most (default: %(default)s)")
    face.add_argument("--aws-kms-api-max-unsigned", type=positive_int, default=128, metavar="N",
                      help="connections that have not yet sent a validly signed request, at most; a newcomer "
                           "evicts the oldest silent one (default: %(default)s)")
    face.add_argument("--aws-kms-api-max-unsigned-per-peer", type=positive_int, default=32, metavar="N",
                      help="unsigned connections from one address, at most (default: %(default)s)")


def _verify_audit_log(args: argparse.Namespace) -> int:
    from pyiceberg_crypto.serve.audit_trail import load_or_create_audit_key, verify_trail
    from pathlib import Path

    if getattr(args, "audit_log_command", None) != "verify":
        print("usage: pyiceberg-crypto kms audit-log verify PATH [PATH ...] [--key-file KEY] [--witness PATH]",
              file=sys.stderr)
        return ExitStatus.USAGE
    key = None
    if args.key_file:
        if not Path(args.key_file).exists():
            raise InvalidArgumentError(f"--key-file {args.key_file}: no such file")
        key = load_or_create_audit_key(args.key_file, create=False)
    if args.witness and not Path(args.witness).is_file():
        raise InvalidArgumentError(f"--witness {args.witness}: no such file")
    if args.witness and len(args.path) > 1:
        raise InvalidArgumentError("--witness checks one trail: give one PATH with it")
    statuses = []
    for path in args.path:
        report = verify_trail(path, key, witness=args.witness)
        print(f"{path}: {report.summary()}")
        statuses.append(ExitStatus.INTEGRITY if not report.ok else
                        ExitStatus.OK if report.verified else ExitStatus.UNVERIFIED)
    if len(args.path) > 1:
        _print_account(args.path, all_verified=all(status == ExitStatus.OK for status in statuses))
    for status in (ExitStatus.INTEGRITY, ExitStatus.UNVERIFIED):
        if status in statuses:
            return status
    return ExitStatus.OK


def _print_account(paths: list[str], *, all_verified: bool) -> None:
    """One account of several trails: per principal, key, operation and result, each replica's count."""
    from pyiceberg_crypto.serve.audit_trail import trail_account

    account = trail_account(paths)
    replicas = sorted({replica for counts in account.values() for replica in counts})
    print(f"account of {len(paths)} trail(s), replicas {', '.join(esc(r) for r in replicas) or 'none'}"
          + ("" if all_verified else " (NOT every trail is verified: the counts are what the lines say)") + ":")
    for (principal, key_id, operation, result), counts in sorted(account.items()):
        each = ", ".join(f"{esc(replica)} {n}" for replica, n in sorted(counts.items()))
        print(f"  {esc(principal)}  {esc(key_id)}  {esc(operation)}  {esc(result)}: {sum(counts.values())} ({each})")


def run_kms(args: argparse.Namespace) -> int:
    if args.kms_command == "audit-log":
        return _verify_audit_log(args)
    if args.kms_command != "serve":
        print("usage: pyiceberg-crypto kms serve --kms SPEC --token-file PATH [--listen HOST:PORT]", file=sys.stderr)
        return ExitStatus.USAGE
    return _serve(args)


def _serve(args: argparse.Namespace) -> int:
    """Start the service, print what clients need, wire the signals to its requests, serve until stopped."""
    from pyiceberg_crypto.bridge.py4j_server import ConnectionLimits
    from pyiceberg_crypto.serve.supervisor import AwsFaceOptions, KmsService, ServiceOptions

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    logging.getLogger("py4j").setLevel(logging.WARNING)  # its INFO lines say nothing a user needs
    face = None
    if args.aws_kms_api:
        face = AwsFaceOptions(
            listen=args.aws_kms_api, credentials_file=args.aws_kms_api_credentials, region=args.aws_kms_api_region,
            account=args.aws_kms_api_account, tls_dir=args.aws_kms_api_tls_dir,
            tls_names=tuple(args.aws_kms_api_tls_name), tls_key_file=args.aws_kms_api_tls_key_file,
            tls_certificate_file=args.aws_kms_api_tls_certificate_file, plaintext=args.aws_kms_api_plaintext,
            refuse_raw_blobs=args.aws_kms_api_refuse_raw_blobs, max_connections=args.aws_kms_api_max_connections,
            max_unsigned=args.aws_kms_api_max_unsigned,
            max_unsigned_per_peer=args.aws_kms_api_max_unsigned_per_peer)
    options = ServiceOptions(
        kms=args.kms, kms_properties=parse_properties(args.kms_property), token_file=args.token_file,
        listen=args.listen, status_file=args.status_file, kms_timeout=args.kms_timeout,
        tls_key_file=args.tls_key_file, tls_certificate_file=args.tls_certificate_file,
        limits=ConnectionLimits(max_connections=args.max_connections, max_unauthenticated=args.max_unauthenticated,
                                auth_deadline_seconds=args.auth_deadline, idle_timeout_seconds=args.idle_timeout),
        metrics=args.metrics, metrics_allow_remote=args.metrics_allow_remote, health_key=args.health_key,
        health_interval=args.health_interval, policy=args.policy, audit_log=args.audit_log,
        audit_key_file=args.audit_key_file, audit_log_max_bytes=args.audit_log_max_bytes,
        audit_digest_every=args.audit_digest_every, audit_digest_seconds=args.audit_digest_seconds,
        audit_witness=args.audit_witness, aws_face=face, replica=args.replica,
        replica_id=args.replica_id or (socket.gethostname() if args.replica else None))
    service = KmsService(options).start()
    requests: queue.SimpleQueue[str] = queue.SimpleQueue()
    for name, request in SIGNAL_REQUESTS.items():
        signal.signal(getattr(signal, name), lambda _signum, _frame, request=request: requests.put(request))
    for line in service.describe():
        print(line, flush=True)
    return service.serve(requests)


#: The signals ``kms serve`` answers, as requests to its service (:meth:`KmsService.serve`).
SIGNAL_REQUESTS = {"SIGTERM": "stop", "SIGINT": "stop", "SIGHUP": "reload", "SIGUSR1": "counts", "SIGUSR2": "revoke"}
