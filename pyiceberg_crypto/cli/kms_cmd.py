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
import threading

from pyiceberg_crypto.cli.options import UsageError
from pyiceberg_crypto.exit_status import ExitStatus
from pyiceberg_crypto.cli.arguments import add_kms_arguments, parse_properties, positive_seconds
from pyiceberg_crypto.properties import KMS_IMPL
from pyiceberg_crypto.serve.served_kms import SERVED_KMS_TIMEOUT_SECONDS

STATUS_INTERVAL_SECONDS = 2.0

log = logging.getLogger("pyiceberg_crypto.kms.serve")


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
                       help="where to write the fresh token at each start (mode 0600); JVMs read it")
    serve.add_argument("--status-file", metavar="PATH",
                       help="JSON status (address, pin, calls per operation and client), kept up to date")
    serve.add_argument("--kms-timeout", "--call-timeout", dest="kms_timeout", type=positive_seconds,
                       default=SERVED_KMS_TIMEOUT_SECONDS, metavar="SECONDS",
                       help="longest a KMS call may take before it fails, on every face (default: %(default)s, half "
                            "of what a JVM client waits; --call-timeout is its former name)")
    serve.add_argument("--tls-key-file", metavar="PATH",
                       help="TLS private key (default: beside the token file; created once, kept across restarts)")
    serve.add_argument("--tls-certificate-file", metavar="PATH", help="TLS certificate (default: beside the token file)")
    serve.add_argument("--max-connections", type=_positive_int, default=256, metavar="N",
                       help="open connections at most; more are refused (default: %(default)s)")
    serve.add_argument("--max-unauthenticated", type=_positive_int, default=64, metavar="N",
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
        "verify", help="report the first removed, altered, reordered or truncated line (exit 0 when intact)")
    verify.add_argument("path", metavar="PATH", help="the trail (kms serve --audit-log); PATH.1, PATH.2... are read "
                                                     "first")
    verify.add_argument("--key-file", metavar="PATH",
                        help="the digest-signing key (kms serve --audit-key-file): checks every signed digest too")


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
    group.add_argument("--audit-log-max-bytes", type=_positive_int, default=64 << 20, metavar="N",
                       help="rotate the trail to PATH.1, PATH.2... at this size (default: %(default)s)")
    group.add_argument("--audit-digest-every", type=_positive_int, default=1000, metavar="N",
                       help="a signed digest line every N lines (and every 60 s with lines; default: %(default)s)")


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
    face.add_argument("--aws-kms-api-max-connections", type=_positive_int, default=256, metavar="N",
                      help="open connections at most (default: %(default)s)")
    face.add_argument("--aws-kms-api-max-unsigned", type=_positive_int, default=128, metavar="N",
                      help="connections that have not yet sent a validly signed request, at most; a newcomer "
                           "evicts the oldest silent one (default: %(default)s)")
    face.add_argument("--aws-kms-api-max-unsigned-per-peer", type=_positive_int, default=32, metavar="N",
                      help="unsigned connections from one address, at most (default: %(default)s)")


def _start_aws_face(args: argparse.Namespace, served, token_file):
    """The AWS KMS face of the served KMS, started (None without --aws-kms-api)."""
    from pathlib import Path

    from pyiceberg_crypto.kms.bounded import KmsCallPool
    from pyiceberg_crypto.serve.aws.api import AwsKmsApi
    from pyiceberg_crypto.serve.aws.http import FaceLimits
    from pyiceberg_crypto.serve.aws.sigv4 import load_credentials
    from pyiceberg_crypto.serve.aws.tls import FaceTls

    if not args.aws_kms_api:
        return None
    if not args.aws_kms_api_credentials:
        raise UsageError("--aws-kms-api needs --aws-kms-api-credentials FILE")
    listen = _loopback_by_default(args.aws_kms_api)
    credentials = load_credentials(args.aws_kms_api_credentials)
    tls = None
    if not args.aws_kms_api_plaintext:
        if bool(args.aws_kms_api_tls_key_file) != bool(args.aws_kms_api_tls_certificate_file):
            raise UsageError("give both --aws-kms-api-tls-key-file and --aws-kms-api-tls-certificate-file, or neither")
        if args.aws_kms_api_tls_key_file:
            tls = FaceTls.from_files(args.aws_kms_api_tls_key_file, args.aws_kms_api_tls_certificate_file)
        else:
            host = listen.rpartition(":")[0].strip("[]")
            names = tuple(args.aws_kms_api_tls_name) + ((host,) if host not in ("0.0.0.0", "::") else ())
            directory = args.aws_kms_api_tls_dir or Path(token_file).parent / "aws-kms-api-tls"
            tls = FaceTls.load_or_create(directory, names)
    # The face's KMS calls keep the served KMS's timeout, on persistent threads (one per call
    # in flight, at most one per connection): starting a thread per request was its largest cost.
    pool = KmsCallPool(max_workers=args.aws_kms_api_max_connections, name="aws-kms-api-kms-call")
    face = AwsKmsApi(served, pool=pool, credentials=credentials, listen=listen, region=args.aws_kms_api_region,
                     account=args.aws_kms_api_account, tls=tls, allow_plaintext=args.aws_kms_api_plaintext,
                     accept_raw_blobs=not args.aws_kms_api_refuse_raw_blobs,
                     limits=FaceLimits(max_connections=args.aws_kms_api_max_connections,
                                       max_unsigned=args.aws_kms_api_max_unsigned,
                                       max_unsigned_per_peer=args.aws_kms_api_max_unsigned_per_peer))
    face.verifier.watch(args.aws_kms_api_credentials)  # a removed section is refused within a second
    return face.start()


def _loopback_by_default(value: str) -> str:
    """``[HOST:]PORT`` (``--aws-kms-api``, ``--metrics``) as ``HOST:PORT``, HOST 127.0.0.1 when left out."""
    return value if ":" in value else f"127.0.0.1:{value}"


def _reload_face_credentials(face, path: str) -> None:
    from pyiceberg_crypto.serve.aws.sigv4 import load_credentials

    try:
        face.verifier.credentials = load_credentials(path)
        log.info("AWS KMS API: re-read the credentials file %s", path)
    except Exception as exc:  # keep the previous credentials
        log.error("AWS KMS API: cannot re-read the credentials file, keeping the previous ones: %s", exc)


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value!r}")
    return number


def _verify_audit_log(args: argparse.Namespace) -> int:
    from pyiceberg_crypto.serve.audit_trail import load_or_create_audit_key, verify_trail
    from pathlib import Path

    if getattr(args, "audit_log_command", None) != "verify":
        print("usage: pyiceberg-crypto kms audit-log verify PATH [--key-file KEY]", file=sys.stderr)
        return ExitStatus.USAGE
    key = None
    if args.key_file:
        if not Path(args.key_file).exists():
            raise UsageError(f"--key-file {args.key_file}: no such file")
        key = load_or_create_audit_key(args.key_file)
    report = verify_trail(args.path, key)
    print(f"{args.path}: {report.summary()}")
    return ExitStatus.OK if report.ok else ExitStatus.INTEGRITY


def run_kms(args: argparse.Namespace) -> int:
    if args.kms_command == "audit-log":
        return _verify_audit_log(args)
    if args.kms_command != "serve":
        print("usage: pyiceberg-crypto kms serve --kms SPEC --token-file PATH [--listen HOST:PORT]", file=sys.stderr)
        return ExitStatus.USAGE
    return _serve(args)


def _serve(args: argparse.Namespace) -> int:
    from pyiceberg_crypto._net import is_loopback_host, parse_listen
    from pyiceberg_crypto.bridge.py4j_server import ConnectionLimits
    from pyiceberg_crypto.serve.metrics import MetricsAddressError, MetricsServer
    from pyiceberg_crypto.serve.py4j import KmsServiceError, Py4jFace
    from pyiceberg_crypto.serve.audit_trail import AuditWriteError
    from pyiceberg_crypto.serve.served_kms import ServedKms
    from pyiceberg_crypto.config import PYTHON_KMS_IMPL, ConfigError, kms_service_properties
    from pyiceberg_crypto.kms.loader import KmsLoadError, load_kms
    from pyiceberg_crypto.errors import PyicebergCryptoError
    from pyiceberg_crypto.safe_text import exception_line

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    logging.getLogger("py4j").setLevel(logging.WARNING)  # its INFO lines say nothing a user needs
    metrics_at = None
    try:
        if args.metrics:
            try:
                metrics_at = parse_listen(_loopback_by_default(args.metrics))
            except ValueError:
                raise UsageError(f"--metrics must be [HOST:]PORT (e.g. 127.0.0.1:9601), got {args.metrics!r}") \
                    from None
            if not is_loopback_host(metrics_at[0]) and not args.metrics_allow_remote:
                raise UsageError(f"--metrics {args.metrics}: {metrics_at[0]} is not a loopback address; the metrics "
                                 "port has no authentication and no TLS: add --metrics-allow-remote to serve it there")
        properties = parse_properties(args.kms_property)
        served = ServedKms(lambda: load_kms(args.kms, properties), kms_timeout=args.kms_timeout, name=args.kms)
        _govern(args, served)
        service = Py4jFace(served, listen=args.listen, token_file=args.token_file, tls_key_file=args.tls_key_file,
                           tls_certificate_file=args.tls_certificate_file,
                           limits=ConnectionLimits(max_connections=args.max_connections,
                                                   max_unauthenticated=args.max_unauthenticated,
                                                   auth_deadline_seconds=args.auth_deadline,
                                                   idle_timeout_seconds=args.idle_timeout))
        service.start()  # builds the served KMS first: a failing factory is the except below
    except (ValueError, KmsServiceError, KmsLoadError, AuditWriteError) as exc:
        print(f"pyiceberg-crypto kms serve: {exc}", file=sys.stderr)
        return ExitStatus.USAGE
    except Exception as exc:  # the KMS factory failed: one line, no traceback (it may hold paths, never keys)
        print(f"pyiceberg-crypto kms serve: the KMS factory {args.kms!r} failed: {exception_line(exc)}",
              file=sys.stderr)
        return ExitStatus.USAGE

    try:
        face = _start_aws_face(args, served, service.token_file)
    except (ValueError, PyicebergCryptoError, OSError) as exc:
        service.close()
        print(f"pyiceberg-crypto kms serve: --aws-kms-api: {exc}", file=sys.stderr)
        return ExitStatus.USAGE

    metrics = None
    if metrics_at is not None:
        try:
            faces = [service] if face is None else [service, face]
            metrics = MetricsServer(faces, *metrics_at, health_key_id=args.health_key,
                                    health_interval=args.health_interval, allow_remote=args.metrics_allow_remote)
        except MetricsAddressError as exc:
            if face is not None:
                face.close()
            service.close()
            print(f"pyiceberg-crypto kms serve: {exc}", file=sys.stderr)
            return ExitStatus.USAGE
        except OSError as exc:
            if face is not None:
                face.close()
            service.close()
            print(f"pyiceberg-crypto kms serve: cannot serve metrics on {args.metrics}: {exc.strerror or exc}",
                  file=sys.stderr)
            return ExitStatus.USAGE

    stop, wake = threading.Event(), threading.Event()
    pending: list[str] = []

    def on_signal(signum, _frame):
        pending.append(signal.Signals(signum).name)
        wake.set()

    for name in ("SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1", "SIGUSR2"):
        signal.signal(getattr(signal, name), on_signal)

    try:
        client_properties = kms_service_properties(service.address, service.token_file, service.certificate_sha256)
    except ConfigError:  # a wildcard listen address: clients name a reachable address of this host
        client_properties = {}
    print(f"KMS service {args.kms!r} on {service.address}" + (" (TLS)" if service.certificate_sha256 else ""),
          flush=True)
    if service.certificate_sha256:
        print(f"  certificate sha256: {service.certificate_sha256}", flush=True)
    print(f"  token file: {service.token_file} (rewritten at each start)", flush=True)
    print("  catalog properties (spark.sql.catalog.<catalog>.<property>, or config.spark_settings("
          "kms_service=..., kms_token_file=..., kms_certificate_sha256=...)):", flush=True)
    for key, value in {KMS_IMPL: PYTHON_KMS_IMPL, **client_properties}.items():
        print(f"    {key}={value}", flush=True)
    if metrics is not None:
        print(f"  metrics: http://{metrics.address}/metrics, health: http://{metrics.address}/healthz"
              + (f" (canary key id {args.health_key!r})" if args.health_key else " (listener only)"), flush=True)
    if face is not None:
        print(f"  AWS KMS API: {face.endpoint} (region {face.region}; AWS_ENDPOINT_URL_KMS={face.endpoint})",
              flush=True)
        if face.tls is not None and face.tls.ca_file is not None:
            print(f"    CA clients trust: {face.tls.ca_file} (Java truststore, PKCS#12: {face.tls.truststore_file})",
                  flush=True)
    print("  SIGHUP reloads the KMS, SIGUSR1 logs the call counts, SIGUSR2 revokes the token (a new one in the "
          "token file), SIGTERM stops.", flush=True)

    def write_status() -> None:
        if args.status_file:
            try:
                service.write_status(args.status_file)
            except OSError as exc:
                log.warning("cannot write the status file %s: %s", args.status_file, exc)

    write_status()
    status = ExitStatus.OK
    try:
        while not stop.is_set():
            wake.wait(STATUS_INTERVAL_SECONDS)
            wake.clear()
            service.check_token_file()
            if served.trail is not None:
                served.trail.tick()
            if not service.accepting:  # never expected (the loop survives peers): let a supervisor restart us
                log.error("the listener's accept thread is dead: stopping, so that a supervisor restarts the service")
                status = ExitStatus.INTEGRITY
                stop.set()
            while pending:
                name = pending.pop(0)
                if name in ("SIGTERM", "SIGINT"):
                    stop.set()
                elif name == "SIGHUP":
                    try:
                        served.reload()
                    except Exception as exc:  # keep serving with the old KMS
                        log.error("reload failed, still serving the previous KMS: %s", exception_line(exc))
                    if face is not None:
                        _reload_face_credentials(face, args.aws_kms_api_credentials)
                    if args.policy:
                        _reload_policy(args.policy, served, service)
                elif name == "SIGUSR2":  # revoke the token: a fresh one, connections holding the old one closed
                    try:
                        service.revoke_token()
                    except KmsServiceError as exc:
                        log.error("%s", exc)
                elif name == "SIGUSR1":
                    current = service.status()
                    log.info("calls: %s; clients: %s; refused: %s",
                             {op: v["calls"] for op, v in current["operations"].items()},
                             current["clients"], current["refused"])
            write_status()
    finally:
        if metrics is not None:
            metrics.close()
        if face is not None:
            face.close()
        service.close()
        if served.trail is not None:
            served.trail.close()
        write_status()
    return status


def _govern(args: argparse.Namespace, served) -> None:
    """The policy and the audit trail of ``served`` (ValueError subclasses for what is wrong)."""
    from pathlib import Path

    from pyiceberg_crypto.serve.audit_trail import AuditTrail, load_or_create_audit_key
    from pyiceberg_crypto.serve.policy import load_policy

    if args.audit_log:
        key_file = Path(args.audit_key_file or f"{args.token_file}.audit-key")
        if key_file.absolute().parent == Path(args.audit_log).absolute().parent:
            log.warning("the audit key file %s is in the audit log's directory: keep it apart (whoever can rewrite "
                        "the log should not read the key)", key_file)
        served.trail = AuditTrail(args.audit_log, load_or_create_audit_key(key_file),
                                  max_bytes=args.audit_log_max_bytes, digest_every=args.audit_digest_every).open()
        log.info("audit trail: %s (digests signed with the key in %s)", served.trail.path, key_file)
    else:
        log.warning("no audit trail (kms serve --audit-log): KMS operations are counted, not recorded")
    served.set_policy(load_policy(args.policy) if args.policy else None)


def _reload_policy(path: str, served, service) -> None:
    from pyiceberg_crypto.serve.policy import PolicyError, load_policy

    try:
        policy = load_policy(path)
    except PolicyError as exc:
        log.error("policy reload failed, keeping the policy in force (sha256 %s): %s",
                  served.policy.sha256[:16] if served.policy else "none", exc)
        return
    served.set_policy(policy)
    service.apply_policy(policy)
