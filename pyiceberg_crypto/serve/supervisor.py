"""The key service as one object: the served KMS, its faces (Py4J, and AWS KMS when asked), the
metrics port, the policy and the audit trail, started, reloaded, revoked and stopped together::

    service = KmsService(ServiceOptions(kms="keystore", kms_properties={"keystore.path": "keys.json"},
                                        token_file="/run/lake/kms.token")).start()
    print("\\n".join(service.describe()))     # the address, the pin, the catalog properties
    requests = queue.SimpleQueue()           # "reload", "counts", "revoke", "stop"
    status = service.serve(requests)         # until "stop"; then everything is closed

``pyiceberg-crypto kms serve`` (:mod:`pyiceberg_crypto.cli.kms_cmd`) builds the options from its
arguments and wires the signals to requests (SIGHUP reload, SIGUSR1 counts, SIGUSR2 revoke,
SIGTERM/SIGINT stop). Every failure to start is a package error naming what could not start; what
was already started is closed.
"""

from __future__ import annotations

import logging
import queue
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pyiceberg_crypto.bridge.py4j_server import ConnectionLimits
from pyiceberg_crypto.errors import InvalidArgumentError, PyicebergCryptoError, SetupError
from pyiceberg_crypto.exit_status import ExitStatus
from pyiceberg_crypto.listener.sockets import LOOPBACK
from pyiceberg_crypto.properties import KMS_IMPL
from pyiceberg_crypto.safe_text import exception_line
from pyiceberg_crypto.serve.served_kms import SERVED_KMS_TIMEOUT_SECONDS

__all__ = ["AwsFaceOptions", "KmsService", "ServiceOptions", "STATUS_INTERVAL_SECONDS"]

#: How often the service checks its token file, ticks the trail and rewrites the status file.
STATUS_INTERVAL_SECONDS = 2.0

log = logging.getLogger("pyiceberg_crypto.kms.serve")


@dataclass(frozen=True)
class AwsFaceOptions:
    """The AWS KMS API face (``kms serve --aws-kms-api-*``); ``listen`` is ``[HOST:]PORT``."""

    listen: str
    credentials_file: str
    region: str = "us-east-1"
    account: str = "000000000000"
    tls_dir: str | None = None
    tls_names: tuple[str, ...] = ()
    tls_key_file: str | None = None
    tls_certificate_file: str | None = None
    plaintext: bool = False
    refuse_raw_blobs: bool = False
    max_connections: int = 256
    max_unsigned: int = 128
    max_unsigned_per_peer: int = 32


@dataclass(frozen=True)
class ServiceOptions:
    """What ``kms serve`` is asked to serve (each field is the option of the same name)."""

    kms: str
    token_file: str
    kms_properties: Mapping[str, str] = field(default_factory=dict)
    listen: str = f"{LOOPBACK}:9600"
    status_file: str | None = None
    kms_timeout: float = SERVED_KMS_TIMEOUT_SECONDS
    tls_key_file: str | None = None
    tls_certificate_file: str | None = None
    limits: ConnectionLimits = field(default_factory=ConnectionLimits)
    metrics: str | None = None
    metrics_allow_remote: bool = False
    health_key: str | None = None
    health_interval: float = 5.0
    policy: str | None = None
    audit_log: str | None = None
    audit_key_file: str | None = None
    audit_log_max_bytes: int = 64 << 20
    audit_digest_every: int = 1000
    audit_digest_seconds: float = 60.0
    audit_witness: str | None = None
    aws_face: AwsFaceOptions | None = None
    replica: bool = False
    replica_id: str | None = None  # on every operation line of the trail (default with --replica: the host name)


def loopback_by_default(value: str) -> str:
    """``[HOST:]PORT`` (``--aws-kms-api``, ``--metrics``) as ``HOST:PORT``, HOST 127.0.0.1 when left out."""
    return value if ":" in value else f"{LOOPBACK}:{value}"


class KmsService:
    """One ``kms serve`` process's service; see the module's docstring for its life cycle."""

    def __init__(self, options: ServiceOptions):
        self.options = options
        self.served = None  # ServedKms
        self.py4j = None  # Py4jFace
        self.aws = None  # AwsKmsApi, when asked
        self.metrics = None  # MetricsServer, when asked

    # -- start and stop ---------------------------------------------------------------------
    def start(self) -> KmsService:
        """Build the served KMS and start every face; on a failure, close what started and raise a
        package error (InvalidArgumentError for options that cannot work, SetupError else)."""
        metrics_at = self._metrics_address()
        try:
            self._start_py4j()
            self.aws = self._start_aws_face()
            if metrics_at is not None:
                self.metrics = self._start_metrics(metrics_at)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Close the metrics port, the faces and the trail, then write the last status (idempotent)."""
        for part in (self.metrics, self.aws, self.py4j):
            if part is not None:
                part.close()
        self.metrics = self.aws = None
        if self.served is not None and self.served.trail is not None:
            self.served.trail.close()
        if self.py4j is not None:
            self.write_status()
            self.py4j = None

    def _metrics_address(self) -> tuple[str, int] | None:
        from pyiceberg_crypto._net import is_loopback_host, parse_listen

        given = self.options.metrics
        if not given:
            return None
        try:
            host, port = parse_listen(loopback_by_default(given))
        except ValueError:
            raise InvalidArgumentError(f"--metrics must be [HOST:]PORT (e.g. 127.0.0.1:9601), got {given!r}") from None
        if not is_loopback_host(host) and not self.options.metrics_allow_remote:
            raise InvalidArgumentError(
                f"--metrics {given}: {host} is not a loopback address; the metrics port has no authentication and "
                "no TLS: add --metrics-allow-remote to serve it there")
        return host, port

    def _start_py4j(self) -> None:
        from pyiceberg_crypto.kms.loader import load_kms
        from pyiceberg_crypto.serve.py4j import Py4jFace
        from pyiceberg_crypto.serve.served_kms import ServedKms

        options = self.options
        properties = dict(options.kms_properties)
        self.served = ServedKms(lambda: load_kms(options.kms, properties), kms_timeout=options.kms_timeout,
                                name=options.kms)
        self._govern()
        face = Py4jFace(self.served, listen=options.listen, token_file=options.token_file,
                        tls_key_file=options.tls_key_file, tls_certificate_file=options.tls_certificate_file,
                        limits=options.limits, replica=options.replica)
        try:
            face.start()  # builds the served KMS first: a failing factory is the last except
        except PyicebergCryptoError:
            raise
        except ValueError as exc:  # a listen address or file that cannot be used
            raise InvalidArgumentError(str(exc)) from None
        except Exception as exc:  # the KMS factory failed: one line (it may hold paths, never keys)
            raise SetupError(f"the KMS factory {options.kms!r} failed: {exception_line(exc)}") from None
        self.py4j = face

    def _govern(self) -> None:
        """The policy and the audit trail of the served KMS."""
        from pyiceberg_crypto.serve.audit_trail import AuditTrail, load_or_create_audit_key
        from pyiceberg_crypto.serve.policy import load_policy

        options = self.options
        if options.audit_log:
            key_file = Path(options.audit_key_file or f"{options.token_file}.audit-key")
            if key_file.absolute().parent == Path(options.audit_log).absolute().parent:
                log.warning("the audit key file %s is in the audit log's directory: keep it apart (whoever can "
                            "rewrite the log should not read the key)", key_file)
            self.served.trail = AuditTrail(options.audit_log, load_or_create_audit_key(key_file),
                                           max_bytes=options.audit_log_max_bytes,
                                           digest_every=options.audit_digest_every,
                                           digest_seconds=options.audit_digest_seconds,
                                           witness=options.audit_witness, replica=options.replica_id).open()
            log.info("audit trail: %s (digests signed with the key in %s%s)", self.served.trail.path, key_file,
                     f", each one also appended to the witness {options.audit_witness}" if options.audit_witness
                     else "")
        else:
            log.warning("no audit trail (kms serve --audit-log): KMS operations are counted, not recorded")
        self.served.set_policy(load_policy(options.policy) if options.policy else None)

    def _start_aws_face(self):
        """The AWS KMS face of the served KMS, started (None when not asked)."""
        face_options = self.options.aws_face
        if face_options is None:
            return None
        try:
            return self._build_aws_face(face_options).start()
        except (PyicebergCryptoError, ValueError, OSError) as exc:
            raise SetupError(f"--aws-kms-api: {exc}") from None

    def _build_aws_face(self, options: AwsFaceOptions):
        from pyiceberg_crypto.kms.bounded import KmsCallPool
        from pyiceberg_crypto.serve.aws.api import AwsKmsApi
        from pyiceberg_crypto.serve.aws.http import FaceLimits
        from pyiceberg_crypto.serve.aws.sigv4 import load_credentials
        from pyiceberg_crypto.serve.aws.tls import FaceTls

        if not options.credentials_file:
            raise InvalidArgumentError("--aws-kms-api needs --aws-kms-api-credentials FILE")
        listen = loopback_by_default(options.listen)
        credentials = load_credentials(options.credentials_file)
        tls = None
        if not options.plaintext:
            if bool(options.tls_key_file) != bool(options.tls_certificate_file):
                raise InvalidArgumentError("give both --aws-kms-api-tls-key-file and "
                                           "--aws-kms-api-tls-certificate-file, or neither")
            if options.tls_key_file:
                tls = FaceTls.from_files(options.tls_key_file, options.tls_certificate_file)
            else:
                host = listen.rpartition(":")[0].strip("[]")
                names = tuple(options.tls_names) + ((host,) if host not in ("0.0.0.0", "::") else ())
                directory = options.tls_dir or Path(self.py4j.token_file).parent / "aws-kms-api-tls"
                tls = FaceTls.load_or_create(directory, names)
        # The face's KMS calls keep the served KMS's timeout, on persistent threads (one per call
        # in flight, at most one per connection): starting a thread per request was its largest cost.
        pool = KmsCallPool(max_workers=options.max_connections, name="aws-kms-api-kms-call")
        face = AwsKmsApi(self.served, pool=pool, credentials=credentials, listen=listen, region=options.region,
                         account=options.account, tls=tls, allow_plaintext=options.plaintext,
                         accept_raw_blobs=not options.refuse_raw_blobs,
                         limits=FaceLimits(max_connections=options.max_connections,
                                           max_unsigned=options.max_unsigned,
                                           max_unsigned_per_peer=options.max_unsigned_per_peer))
        face.verifier.watch(options.credentials_file)  # a removed section is refused within a second
        return face

    def _start_metrics(self, address: tuple[str, int]):
        from pyiceberg_crypto.serve.metrics import MetricsServer

        faces = [self.py4j] if self.aws is None else [self.py4j, self.aws]
        try:
            return MetricsServer(faces, *address, health_key_id=self.options.health_key,
                                 health_interval=self.options.health_interval,
                                 allow_remote=self.options.metrics_allow_remote)
        except PyicebergCryptoError:
            raise
        except OSError as exc:
            raise SetupError(f"cannot serve metrics on {self.options.metrics}: {exc.strerror or exc}") from None

    # -- what it says at start -------------------------------------------------------------------
    def describe(self) -> list[str]:
        """The lines ``kms serve`` prints once started: the address, the pin, the token file, the
        catalog properties clients need, the metrics and AWS endpoints, the signals."""
        from pyiceberg_crypto.config import PYTHON_KMS_IMPL, kms_service_properties

        py4j = self.py4j
        try:
            client_properties = kms_service_properties(py4j.address, py4j.token_file, py4j.certificate_sha256)
        except InvalidArgumentError:  # a wildcard listen address: clients name a reachable address of this host
            client_properties = {}
        lines = [f"KMS service {self.options.kms!r} on {py4j.address}" + (" (TLS)" if py4j.certificate_sha256 else "")]
        if py4j.certificate_sha256:
            lines.append(f"  certificate sha256: {py4j.certificate_sha256}")
        lines += [f"  token file: {py4j.token_file} " + ("(read: a replica, the operator's file)" if py4j.replica
                                                           else "(rewritten at each start)"),
                  "  catalog properties (spark.sql.catalog.<catalog>.<property>, or config.spark_settings("
                  "kms_service=..., kms_token_file=..., kms_certificate_sha256=...)):"]
        lines += [f"    {key}={value}" for key, value in {KMS_IMPL: PYTHON_KMS_IMPL, **client_properties}.items()]
        if self.metrics is not None:
            address = self.metrics.address
            lines.append(f"  metrics: http://{address}/metrics, health: http://{address}/healthz"
                         + (f" (canary key id {self.options.health_key!r})" if self.options.health_key
                            else " (listener only)"))
        if self.aws is not None:
            face = self.aws
            lines.append(f"  AWS KMS API: {face.endpoint} (region {face.region}; AWS_ENDPOINT_URL_KMS={face.endpoint})")
            if face.tls is not None and face.tls.ca_file is not None:
                lines.append(f"    CA clients trust: {face.tls.ca_file} (Java truststore, PKCS#12: "
                             f"{face.tls.truststore_file})")
        lines.append("  SIGHUP reloads the KMS, SIGUSR1 logs the call counts, SIGUSR2 revokes the token (a new one "
                     "in the token file), SIGTERM stops.")
        return lines

    # -- while serving ---------------------------------------------------------------------------
    def reload(self) -> None:
        """Rebuild the KMS (a changed keystore), re-read the AWS credentials and the policy; what
        cannot be reloaded keeps its previous form, logged."""
        try:
            self.served.reload()
        except Exception as exc:  # keep serving with the old KMS
            log.error("reload failed, still serving the previous KMS: %s", exception_line(exc))
        if self.aws is not None:
            self._reload_face_credentials()
        if self.options.policy:
            self._reload_policy()

    def _reload_face_credentials(self) -> None:
        from pyiceberg_crypto.serve.aws.sigv4 import load_credentials

        path = self.options.aws_face.credentials_file
        try:
            self.aws.verifier.credentials = load_credentials(path)
            log.info("AWS KMS API: re-read the credentials file %s", path)
        except Exception as exc:  # keep the previous credentials
            log.error("AWS KMS API: cannot re-read the credentials file, keeping the previous ones: %s", exc)

    def _reload_policy(self) -> None:
        from pyiceberg_crypto.serve.policy import load_policy

        try:
            policy = load_policy(self.options.policy)
        except InvalidArgumentError as exc:
            log.error("policy reload failed, keeping the policy in force (sha256 %s): %s",
                      self.served.policy.sha256[:16] if self.served.policy else "none", exc)
            return
        self.served.set_policy(policy)
        self.py4j.apply_policy(policy)

    def revoke_token(self) -> None:
        """A fresh Py4J token in the token file; connections holding the old one are closed."""
        try:
            self.py4j.revoke_token()
        except SetupError as exc:
            log.error("%s", exc)

    def log_counts(self) -> None:
        current = self.py4j.status()
        log.info("calls: %s; clients: %s; refused: %s",
                 {op: v["calls"] for op, v in current["operations"].items()}, current["clients"], current["refused"])

    def tick(self) -> bool:
        """The periodic checks: the token file, the trail's timed digest. False when the listener's
        accept thread is dead (never expected: the service should stop so that a supervisor restarts it)."""
        self.py4j.check_token_file()
        if self.served.trail is not None:
            self.served.trail.tick()
        if not self.py4j.accepting:
            log.error("the listener's accept thread is dead: stopping, so that a supervisor restarts the service")
            return False
        return True

    def write_status(self) -> None:
        if self.options.status_file and self.py4j is not None:
            try:
                self.py4j.write_status(self.options.status_file)
            except OSError as exc:
                log.warning("cannot write the status file %s: %s", self.options.status_file, exc)

    def serve(self, requests: queue.SimpleQueue, *, interval: float = STATUS_INTERVAL_SECONDS) -> int:
        """Serve until ``"stop"`` arrives in ``requests`` (or the listener dies), handling
        ``"reload"``, ``"counts"`` and ``"revoke"`` as they come; then stop everything. Returns the
        exit status: OK after a stop, INTEGRITY when the listener died."""
        actions = {"reload": self.reload, "counts": self.log_counts, "revoke": self.revoke_token}
        self.write_status()
        status = ExitStatus.OK
        try:
            running = True
            while running:
                try:
                    request = requests.get(timeout=interval)
                except queue.Empty:
                    request = None
                if not self.tick():
                    status, running = ExitStatus.INTEGRITY, False
                while request is not None:
                    if request == "stop":
                        running = False
                    elif request in actions:
                        actions[request]()
                    try:
                        request = requests.get_nowait()
                    except queue.Empty:
                        request = None
                self.write_status()
        finally:
            self.stop()
        return status
