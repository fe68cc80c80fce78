"""An AWS-KMS-compatible face for any Python KMS: the AWS KMS JSON 1.1 API (``TrentService.*``)
over HTTPS with SigV4, so that clients that only speak AWS KMS (Trino's Iceberg connector, Iceberg's
``org.apache.iceberg.aws.AwsKeyManagementClient``, boto3) use keys from a keystore, Vault/OpenBao,
KMIP or your own ``wrap_key``/``unwrap_key``.

    face = AwsKmsApi(lambda: my_kms, credentials=load_credentials("/etc/lake/aws-kms-api.credentials"),
                     listen="127.0.0.1:9602", tls=FaceTls.load_or_create("/etc/lake/aws-kms-api-tls"))
    face.start()      # clients: AWS_ENDPOINT_URL_KMS=https://127.0.0.1:9602, trust face.tls.ca_file
    face.close()

The command line is ``pyiceberg-crypto kms serve ... --aws-kms-api [HOST:]PORT`` (beside the Py4J face).

Operations (what the clients were read to call, see docs/how-to/trino.md):

- ``Encrypt`` (``KeyId``, ``Plaintext``, ``EncryptionAlgorithm``, ``EncryptionContext``): Iceberg's
  ``wrapKey``. Returns a self-describing blob (:mod:`pyiceberg_crypto.kms.aws_face_blob`).
- ``Decrypt`` (``CiphertextBlob``, ``KeyId`` optional, ...): Iceberg's ``unwrapKey`` (it sends the
  table's key id). A raw Python-KMS blob (a table written through the Py4J bridge) unwraps with the
  ``KeyId`` sent.
- ``GenerateDataKey`` (``KeySpec`` or ``NumberOfBytes``): Iceberg's ``generateKey`` (core never calls
  it in 1.11/1.12) and boto3.
- ``DescribeKey``: pyiceberg-crypto's own ``AwsKms`` resolves aliases with it; the answer comes from
  a probe wrap with the key (``NotFoundException`` when the Python KMS does not know it).

Key ids: the Python KMS's key id as is; ``alias/NAME``, ``arn:aws:kms:REGION:ACCOUNT:alias/NAME``
and ``arn:aws:kms:REGION:ACCOUNT:key/NAME`` all mean the Python KMS's key ``NAME`` (an ARN must
name this face's region and account). Responses name keys by their ARN
``arn:aws:kms:REGION:ACCOUNT:key/NAME``.

Bounds (like the Py4J face): at most ``max_connections`` open connections (more are closed at
once), a TLS handshake within ``handshake_seconds``, a request (headers and body) within
``request_seconds`` of its first byte, an idle keep-alive connection closed after
``idle_seconds``, headers of at most 16 KiB, bodies of at most ``max_body_bytes`` (64 KiB; a
KMS request is a few KiB), no chunked bodies. A watchdog closes connections past their deadline,
so dribbling bytes does not keep one open. Nothing logged, counted or answered carries key bytes,
secrets or signatures.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import ipaddress
import itertools
import json
import logging
import os
import secrets
import socket
import ssl
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyiceberg_crypto.bridge.adapter import LATENCY_BUCKETS
from pyiceberg_crypto.bridge.callback_server import (
    LOOPBACK,
    check_operator_directory,
    read_operator_file,
    write_private_file,
)
from pyiceberg_crypto.bridge.sigv4 import Principal, SigV4Refused, SigV4Verifier
from pyiceberg_crypto.bridge.tls import server_context
from pyiceberg_crypto.errors import InvalidArgumentError, PyicebergCryptoError
from pyiceberg_crypto.kms import aws_face_blob
from pyiceberg_crypto.kms.base import KeyManagementClient, KmsError, UnknownKeyError
from pyiceberg_crypto.kms.bounded import KmsTimeoutError

log = logging.getLogger(__name__)

CONTENT_TYPE = "application/x-amz-json-1.1"
TARGET_PREFIX = "TrentService."
OPERATIONS = ("Encrypt", "Decrypt", "GenerateDataKey", "DescribeKey")
DEFAULT_ACCOUNT = "000000000000"
MAX_PLAINTEXT_BYTES = 4096  # AWS KMS's own limit for Encrypt
MAX_HEADER_BYTES = 16 * 1024
DATA_KEY_SPECS = {"AES_256": 32, "AES_128": 16}
METRICS_PREFIX = "pyiceberg_crypto_aws_kms_api"
#: Fixed refusal labels (metrics never carry client-chosen text).
REFUSAL_REASONS = ("unsigned", "malformed", "unknown-access-key", "wrong-service", "wrong-region", "expired",
                   "bad-signature", "replayed", "replay-cache-full", "connection-cap", "body-too-large",
                   "headers-too-large", "bad-request", "deadline", "tls-handshake")


class AwsKmsApiError(PyicebergCryptoError, RuntimeError):
    """The face cannot start (address in use, unsafe TLS files, ...)."""


@dataclass(frozen=True)
class FaceLimits:
    """Bounds of the face's listener (see module doc)."""

    max_connections: int = 256
    max_body_bytes: int = 64 * 1024
    handshake_seconds: float = 5.0
    request_seconds: float = 10.0
    idle_seconds: float = 30.0

    def __post_init__(self):
        if min(self.max_connections, self.max_body_bytes) < 1 or \
                min(self.handshake_seconds, self.request_seconds, self.idle_seconds) <= 0:
            raise InvalidArgumentError("face limits must be positive")


class _ApiError(PyicebergCryptoError):
    """An AWS JSON error answer: ``{"__type": code, "message": ...}`` with ``status``."""

    def __init__(self, code: str, message: str, status: int = 400, reason: str | None = None):
        super().__init__(message)
        self.code, self.message, self.status, self.reason = code, message, status, reason


# --- TLS --------------------------------------------------------------------------------------

@dataclass
class FaceTls:
    """The face's TLS identity: a small CA (its certificate is what clients trust: ``ca_file`` in
    PEM, ``truststore_file`` as a PKCS#12 truststore for Java) and the server certificate it signed
    for ``localhost``, ``127.0.0.1``, ``::1`` and the names given. The CA's private key is not kept
    (nothing else can be signed with it). Or bring your own: :meth:`from_files`."""

    context: ssl.SSLContext
    ca_file: Path | None
    truststore_file: Path | None

    KEY, CERT, CA, TRUSTSTORE = "aws-kms-api-key.pem", "aws-kms-api-cert.pem", "aws-kms-api-ca.pem", \
        "aws-kms-api-truststore.p12"

    @classmethod
    def load_or_create(cls, directory: str | os.PathLike, names: tuple[str, ...] = ()) -> FaceTls:
        """Keep the identity in ``directory`` (made once, reused across restarts: clients keep
        trusting the same CA). ``names``: more host names / addresses for the certificate."""
        directory = Path(directory)
        check_operator_directory(directory, "TLS")
        key, cert, ca, truststore = (directory / n for n in (cls.KEY, cls.CERT, cls.CA, cls.TRUSTSTORE))
        if not any(os.path.lexists(p) for p in (key, cert, ca)):
            key_pem, cert_pem, ca_pem, truststore_bytes = _make_identity(names)
            write_private_file(key, key_pem)
            write_private_file(cert, cert_pem, mode=0o644)
            write_private_file(ca, ca_pem, mode=0o644)
            write_private_file(truststore, truststore_bytes, mode=0o644)
        identity = cls.from_files(key, cert)
        identity.ca_file, identity.truststore_file = ca, truststore if truststore.exists() else None
        return identity

    @classmethod
    def from_files(cls, key_file: str | os.PathLike, certificate_file: str | os.PathLike) -> FaceTls:
        """Your own key (0600) and certificate chain (PEM), e.g. from the company CA."""
        key_pem = read_operator_file(key_file, "TLS key", private=True)
        cert_pem = read_operator_file(certificate_file, "TLS certificate")
        return cls(server_context(key_pem, cert_pem), None, None)


def _make_identity(names: tuple[str, ...]) -> tuple[bytes, bytes, bytes, bytes]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import pkcs12
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"pyiceberg-crypto AWS KMS face CA {uuid.uuid4().hex[:8]}")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=3650))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                       crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    alternative: list[x509.GeneralName] = [x509.DNSName("localhost")]
    for name in ("127.0.0.1", "::1", *names):
        try:
            entry: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(name))
        except ValueError:
            entry = x509.DNSName(name)
        if entry not in alternative:
            alternative.append(entry)
    key = ec.generate_private_key(ec.SECP256R1())
    server = (x509.CertificateBuilder()
              .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pyiceberg-crypto AWS KMS face")]))
              .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=3650))
              .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
              .add_extension(x509.SubjectAlternativeName(alternative), critical=False)
              .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
              .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
              .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    truststore = pkcs12.serialize_java_truststore([pkcs12.PKCS12Certificate(ca, b"pyiceberg-crypto-aws-kms-face")],
                                                  serialization.NoEncryption())
    return (key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
            server.public_bytes(pem) + ca.public_bytes(pem), ca.public_bytes(pem), truststore)


# --- key ids ---------------------------------------------------------------------------------

def python_key_id(key_id: str, region: str, account: str) -> str:
    """The Python KMS's key id that an AWS-style ``KeyId`` names (see module doc)."""
    if key_id.startswith("arn:"):
        parts = key_id.split(":", 5)
        if len(parts) != 6 or parts[2] != "kms" or "/" not in parts[5]:
            raise _ApiError("NotFoundException", "the KeyId ARN is not a KMS key or alias ARN")
        if parts[3] != region or parts[4] != account:
            raise _ApiError("NotFoundException", f"the KeyId ARN names another region or account than this "
                                                 f"endpoint's ({region}, {account})")
        kind, _, name = parts[5].partition("/")
        if kind not in ("key", "alias") or not name:
            raise _ApiError("NotFoundException", "the KeyId ARN is not a KMS key or alias ARN")
        return name
    if key_id.startswith("alias/"):
        return key_id[len("alias/"):]
    return key_id


def key_arn(name: str, region: str, account: str) -> str:
    return f"arn:aws:kms:{region}:{account}:key/{name}"


# --- the face ---------------------------------------------------------------------------------

class _Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.requests: Counter = Counter()       # (operation, result)
        self.refused: Counter = Counter()        # reason
        self.duration: dict[str, list[float]] = {}
        self.duration_sum: Counter = Counter()
        self.open = 0

    def request(self, operation: str, result: str, seconds: float) -> None:
        with self.lock:
            self.requests[(operation, result)] += 1
            buckets = self.duration.setdefault(operation, [0] * len(LATENCY_BUCKETS))
            for index, bound in enumerate(LATENCY_BUCKETS):
                if seconds <= bound:
                    buckets[index] += 1
                    break
            self.duration_sum[operation] += seconds

    def refuse(self, reason: str) -> None:
        with self.lock:
            self.refused[reason if reason in REFUSAL_REASONS else "bad-request"] += 1


class _Connection:
    def __init__(self, sock: socket.socket, peer: str):
        self.sock = sock
        self.peer = peer
        self.deadline: float | None = None
        self.reason = "deadline"
        self.buffer = b""


class AwsKmsApi:
    """The AWS KMS JSON 1.1 face of one Python KMS (see module doc)."""

    def __init__(self, kms_provider: Callable[[], KeyManagementClient], *, credentials: Mapping[str, Principal],
                 listen: str = f"{LOOPBACK}:0", region: str = "us-east-1", account: str = DEFAULT_ACCOUNT,
                 tls: FaceTls | None = None, allow_plaintext: bool = False, limits: FaceLimits | None = None,
                 accept_raw_blobs: bool = True, max_skew: float = 300.0, clock: Callable[[], float] = time.time):
        from pyiceberg_crypto.bridge.service import parse_listen

        self.host, self.requested_port = parse_listen(listen)
        if tls is None and not (allow_plaintext and _is_loopback(self.host)):
            raise AwsKmsApiError("the AWS KMS face needs TLS (plain HTTP only on a loopback address, when asked for)")
        if not account.isdigit() or len(account) != 12:
            raise InvalidArgumentError("account must be 12 digits")
        self.kms_provider = kms_provider
        self.verifier = SigV4Verifier(credentials, region=region, service="kms", max_skew=max_skew, clock=clock)
        self.region, self.account = region, account
        self.tls = tls
        self.limits = limits or FaceLimits()
        self.accept_raw_blobs = accept_raw_blobs
        self.stats = _Stats()
        self._connections: set[_Connection] = set()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._listener: socket.socket | None = None
        self._threads: list[threading.Thread] = []
        self._last_warning: dict[str, float] = {}
        self._request_id_prefix = str(uuid.uuid4())[:24]
        self._request_ids = itertools.count()

    # --- life cycle ---------------------------------------------------------------------------

    def start(self) -> AwsKmsApi:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind((self.host, self.requested_port))
            listener.listen(128)
        except OSError as exc:
            listener.close()
            raise AwsKmsApiError(f"cannot listen on {self.host}:{self.requested_port}: {exc.strerror or exc}") from None
        listener.settimeout(0.5)
        self._listener = listener
        for target, name in ((self._accept_loop, "accept"), (self._watchdog, "watchdog")):
            thread = threading.Thread(target=target, name=f"aws-kms-api-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        log.info("AWS KMS face listening on %s (%s, region %s)", self.endpoint, "TLS" if self.tls else "plain HTTP",
                 self.region)
        return self

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        if self._listener is not None:
            self._listener.close()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            _shutdown(connection.sock)
        for thread in self._threads:
            thread.join(timeout=2)

    def __enter__(self) -> AwsKmsApi:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def port(self) -> int:
        return self._listener.getsockname()[1] if self._listener else self.requested_port

    @property
    def endpoint(self) -> str:
        """The URL clients set as ``AWS_ENDPOINT_URL_KMS`` / ``kms.endpoint``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    @property
    def accepting(self) -> bool:
        return bool(self._threads) and self._threads[0].is_alive() and not self._closed.is_set()

    def open_connections(self) -> int:
        with self._lock:
            return len(self._connections)

    # --- connections --------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._closed.is_set():
            try:
                sock, address = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                if self._closed.is_set():
                    return
                time.sleep(0.05)  # EMFILE and friends: back off, keep serving
                continue
            peer = address[0]
            with self._lock:
                full = len(self._connections) >= self.limits.max_connections
                connection = None if full else _Connection(sock, peer)
                if connection is not None:
                    connection.deadline = time.monotonic() + self.limits.handshake_seconds
                    connection.reason = "tls-handshake"
                    self._connections.add(connection)
            if connection is None:
                self._refused(peer, "connection-cap")
                _close(sock)
                continue
            threading.Thread(target=self._serve, args=(connection,), name="aws-kms-api-connection",
                             daemon=True).start()

    def _watchdog(self) -> None:
        """Close connections past their deadline (a dribbling client cannot hold one open)."""
        while not self._closed.wait(0.25):
            now = time.monotonic()
            with self._lock:
                overdue = [c for c in self._connections if c.deadline is not None and c.deadline < now]
                for connection in overdue:
                    connection.deadline = None
            for connection in overdue:
                if connection.reason != "idle":
                    self._refused(connection.peer, connection.reason)
                _shutdown(connection.sock)

    def _serve(self, connection: _Connection) -> None:
        try:
            connection.sock.settimeout(self.limits.handshake_seconds + 1)
            if self.tls is not None:
                try:
                    connection.sock = self.tls.context.wrap_socket(connection.sock, server_side=True)
                except (OSError, ssl.SSLError):
                    self._refused(connection.peer, "tls-handshake")
                    return
            while not self._closed.is_set():
                if not self._serve_one(connection):
                    return
        except OSError:
            return
        finally:
            with self._lock:
                self._connections.discard(connection)
            _close(connection.sock)

    def _serve_one(self, connection: _Connection) -> bool:
        """Read one request, answer it; False when the connection is to be closed."""
        limits = self.limits
        connection.deadline, connection.reason = time.monotonic() + limits.idle_seconds, "idle"
        connection.sock.settimeout(limits.idle_seconds + 1)
        head = self._read_head(connection)
        if head is None:
            return False
        started = time.perf_counter()
        try:
            method, target, headers = _parse_head(head)
        except _ApiError as exc:
            self._refused(connection.peer, exc.reason or "bad-request")
            self._send_error(connection, exc, close=True)
            return False
        if "transfer-encoding" in headers:
            error = _ApiError("SerializationException", "chunked bodies are not accepted: send Content-Length",
                              reason="bad-request")
            self._refused(connection.peer, "bad-request")
            self._send_error(connection, error, close=True)
            return False
        length_text = headers.get("content-length", "0")
        if not length_text.isdigit():
            self._refused(connection.peer, "bad-request")
            self._send_error(connection, _ApiError("SerializationException", "bad Content-Length"), close=True)
            return False
        length = int(length_text)
        if length > limits.max_body_bytes:
            self._refused(connection.peer, "body-too-large")
            self._send_error(connection, _ApiError("SerializationException",
                                                   f"the body is larger than {limits.max_body_bytes} bytes",
                                                   status=413), close=True)
            return False
        if headers.get("expect", "").lower() == "100-continue":
            connection.sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        body = self._read_exactly(connection, length)
        if body is None:
            return False
        connection.deadline = None  # the KMS call is bounded by the service's call timeout
        operation = headers.get("x-amz-target", "").removeprefix(TARGET_PREFIX)
        label = operation if operation in OPERATIONS else "other"
        path, _, query = target.partition("?")
        try:
            status, answer = 200, self._handle(connection.peer, method, path, query, headers, body, operation)
            result = "ok"
        except _ApiError as exc:
            status, answer, result = exc.status, {"__type": exc.code, "message": exc.message}, exc.code
        self.stats.request(label, result, time.perf_counter() - started)
        keep = headers.get("connection", "").lower() != "close"
        connection.deadline, connection.reason = time.monotonic() + limits.request_seconds, "deadline"
        self._send(connection, status, answer, error=answer.get("__type") if status != 200 else None, close=not keep)
        return keep

    def _read_head(self, connection: _Connection) -> bytes | None:
        while b"\r\n\r\n" not in connection.buffer:
            if len(connection.buffer) > MAX_HEADER_BYTES:
                self._refused(connection.peer, "headers-too-large")
                self._send_error(connection, _ApiError("SerializationException", "the request headers are too large",
                                                       status=431), close=True)
                return None
            chunk = connection.sock.recv(8192)
            if not chunk:
                return None
            if connection.reason == "idle":  # the request started: it must be complete in time
                connection.deadline = time.monotonic() + self.limits.request_seconds
                connection.reason = "deadline"
                connection.sock.settimeout(self.limits.request_seconds + 1)
            connection.buffer += chunk
        head, _, connection.buffer = connection.buffer.partition(b"\r\n\r\n")
        if len(head) > MAX_HEADER_BYTES:
            self._refused(connection.peer, "headers-too-large")
            self._send_error(connection, _ApiError("SerializationException", "the request headers are too large",
                                                   status=431), close=True)
            return None
        return head

    def _read_exactly(self, connection: _Connection, length: int) -> bytes | None:
        while len(connection.buffer) < length:
            chunk = connection.sock.recv(min(65536, length - len(connection.buffer)))
            if not chunk:
                return None
            connection.buffer += chunk
        body, connection.buffer = connection.buffer[:length], connection.buffer[length:]
        return body

    # --- requests -----------------------------------------------------------------------------

    def _handle(self, peer: str, method: str, path: str, query: str, headers: Mapping[str, str], body: bytes,
                operation: str) -> dict[str, Any]:
        if method != "POST":
            raise _ApiError("UnknownOperationException", "only POST is served", reason="bad-request")
        try:
            principal = self.verifier.verify(method, path, query, headers, body)
        except SigV4Refused as exc:
            self._refused(peer, exc.reason)
            raise _ApiError(exc.code, str(exc), exc.status, exc.reason) from None
        if not headers.get("content-type", "").startswith(CONTENT_TYPE):
            raise _ApiError("SerializationException", f"Content-Type must be {CONTENT_TYPE}")
        if operation not in OPERATIONS:
            raise _ApiError("UnknownOperationException",
                            f"this KMS face serves {', '.join(OPERATIONS)} (X-Amz-Target TrentService.*)")
        try:
            request = json.loads(body or b"{}")
        except (ValueError, UnicodeDecodeError):
            raise _ApiError("SerializationException", "the body is not JSON") from None
        if not isinstance(request, dict):
            raise _ApiError("SerializationException", "the body is not a JSON object")
        kms = self.kms_provider()
        try:
            return getattr(self, f"_op_{operation}")(kms, request)
        except _ApiError as exc:
            if exc.status >= 500:
                self.verifier.forget(headers)
            raise
        except aws_face_blob.IncorrectKeyError as exc:
            raise _ApiError("IncorrectKeyException", str(exc)) from None
        except aws_face_blob.InvalidCiphertextError as exc:
            raise _ApiError("InvalidCiphertextException", str(exc)) from None
        except UnknownKeyError:
            raise _ApiError("NotFoundException", "the key id is not known to this KMS") from None
        except KmsTimeoutError:
            self._warn("timeout", "AWS KMS face: %s for %s timed out in the Python KMS", operation, principal.name)
            self.verifier.forget(headers)
            raise _ApiError("DependencyTimeoutException", "the KMS behind this endpoint timed out", 503) from None
        except KmsError as exc:
            self._warn("kms", "AWS KMS face: %s for %s failed: %s", operation, principal.name, exc)
            self.verifier.forget(headers)
            raise _ApiError("KMSInternalException", "the KMS behind this endpoint failed (its log has the detail)",
                            500) from None
        except Exception as exc:  # a third-party KMS's own error: its type only
            self._warn("kms", "AWS KMS face: %s for %s failed: %s", operation, principal.name, type(exc).__name__)
            self.verifier.forget(headers)
            raise _ApiError("KMSInternalException", "the KMS behind this endpoint failed (its log has the detail)",
                            500) from None

    def _key(self, request: Mapping[str, Any], required: bool = True) -> str | None:
        key_id = request.get("KeyId")
        if key_id is None and not required:
            return None
        if not isinstance(key_id, str) or not 1 <= len(key_id) <= 2048:
            raise _ApiError("ValidationException", "KeyId must be a string of 1 to 2048 characters")
        return python_key_id(key_id, self.region, self.account)

    def _context(self, request: Mapping[str, Any]) -> dict[str, str]:
        context = request.get("EncryptionContext") or {}
        if not isinstance(context, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                    for k, v in context.items()):
            raise _ApiError("ValidationException", "EncryptionContext must be a map of strings")
        return context

    @staticmethod
    def _algorithm(request: Mapping[str, Any]) -> None:
        if request.get("EncryptionAlgorithm", "SYMMETRIC_DEFAULT") != "SYMMETRIC_DEFAULT":
            raise _ApiError("InvalidKeyUsageException", "this KMS face serves symmetric keys: "
                                                        "EncryptionAlgorithm must be SYMMETRIC_DEFAULT")

    def _arn(self, name: str) -> str:
        return key_arn(name, self.region, self.account)

    def _op_Encrypt(self, kms: KeyManagementClient, request: Mapping[str, Any]) -> dict[str, Any]:
        name = self._key(request)
        self._algorithm(request)
        plaintext = _blob(request, "Plaintext", MAX_PLAINTEXT_BYTES)
        blob = aws_face_blob.seal(kms, plaintext, name, self._context(request))
        return {"CiphertextBlob": _b64(blob), "KeyId": self._arn(name), "EncryptionAlgorithm": "SYMMETRIC_DEFAULT"}

    def _op_Decrypt(self, kms: KeyManagementClient, request: Mapping[str, Any]) -> dict[str, Any]:
        name = self._key(request, required=False)
        self._algorithm(request)
        blob = _blob(request, "CiphertextBlob", aws_face_blob.MAX_INNER_BYTES)
        made_by, plaintext = aws_face_blob.open_blob(kms, blob, name, self._context(request),
                                                     accept_raw=self.accept_raw_blobs)
        return {"KeyId": self._arn(made_by), "Plaintext": _b64(plaintext), "EncryptionAlgorithm": "SYMMETRIC_DEFAULT"}

    def _op_GenerateDataKey(self, kms: KeyManagementClient, request: Mapping[str, Any]) -> dict[str, Any]:
        name = self._key(request)
        spec, count = request.get("KeySpec"), request.get("NumberOfBytes")
        if (spec is None) == (count is None):
            raise _ApiError("ValidationException", "give exactly one of KeySpec and NumberOfBytes")
        if spec is not None:
            if spec not in DATA_KEY_SPECS:
                raise _ApiError("ValidationException", f"KeySpec must be one of {', '.join(DATA_KEY_SPECS)}")
            count = DATA_KEY_SPECS[spec]
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= 1024:
            raise _ApiError("ValidationException", "NumberOfBytes must be 1 to 1024")
        plaintext = secrets.token_bytes(count)
        blob = aws_face_blob.seal(kms, plaintext, name, self._context(request))
        return {"CiphertextBlob": _b64(blob), "Plaintext": _b64(plaintext), "KeyId": self._arn(name)}

    def _op_DescribeKey(self, kms: KeyManagementClient, request: Mapping[str, Any]) -> dict[str, Any]:
        name = self._key(request)
        kms.wrap_key(secrets.token_bytes(32), name)  # the Python KMS's only way to say it knows the key
        return {"KeyMetadata": {
            "AWSAccountId": self.account, "KeyId": name, "Arn": self._arn(name), "Enabled": True,
            "KeyState": "Enabled", "KeyUsage": "ENCRYPT_DECRYPT", "KeySpec": "SYMMETRIC_DEFAULT",
            "CustomerMasterKeySpec": "SYMMETRIC_DEFAULT", "EncryptionAlgorithms": ["SYMMETRIC_DEFAULT"],
            "Origin": "EXTERNAL", "KeyManager": "CUSTOMER", "MultiRegion": False,
            "Description": "a key of the Python KMS behind pyiceberg-crypto's AWS KMS face"}}

    # --- answers ------------------------------------------------------------------------------

    def _send_error(self, connection: _Connection, error: _ApiError, *, close: bool) -> None:
        self.stats.request("other", error.code, 0.0)
        self._send(connection, error.status, {"__type": error.code, "message": error.message}, error=error.code,
                   close=close)

    def _send(self, connection: _Connection, status: int, answer: Mapping[str, Any], *, error: str | None,
              close: bool) -> None:
        body = json.dumps(answer).encode()
        reason = {200: "OK", 400: "Bad Request", 413: "Payload Too Large", 431: "Request Header Fields Too Large",
                  500: "Internal Server Error", 503: "Service Unavailable"}.get(status, "Error")
        lines = [f"HTTP/1.1 {status} {reason}", f"Content-Type: {CONTENT_TYPE}", f"Content-Length: {len(body)}",
                 f"x-amzn-RequestId: {self._request_id()}", f"Connection: {'close' if close else 'keep-alive'}"]
        if error:
            lines.append(f"x-amzn-ErrorType: {error}")
        try:
            connection.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        except OSError:
            pass

    def _request_id(self) -> str:
        """A UUID-shaped id, unique per answer: this face's random prefix and a counter (a fresh
        ``uuid4`` per answer cost a ``getrandom`` call each)."""
        return f"{self._request_id_prefix}{next(self._request_ids) & 0xFFFFFFFFFFFF:012x}"

    # --- refusals and metrics -----------------------------------------------------------------

    def _refused(self, peer: str, reason: str) -> None:
        self.stats.refuse(reason)
        self._warn(f"refused-{reason}", "AWS KMS face refused a request from %s: %s", peer, reason)

    def _warn(self, kind: str, message: str, *args) -> None:
        now = time.monotonic()
        with self._lock:
            if now - self._last_warning.get(kind, -1e18) < 10.0:
                return
            self._last_warning[kind] = now
        log.warning(message, *args)

    def render_metrics(self) -> str:
        """Prometheus text of the face (appended to ``kms serve --metrics``); fixed labels only."""
        p = METRICS_PREFIX
        with self.stats.lock:
            requests = dict(self.stats.requests)
            refused = dict(self.stats.refused)
            durations = {k: list(v) for k, v in self.stats.duration.items()}
            sums = dict(self.stats.duration_sum)
        lines = [f"# HELP {p}_requests_total Requests answered, per operation and result (ok or the AWS error type).",
                 f"# TYPE {p}_requests_total counter"]
        for (operation, result), count in sorted(requests.items()):
            lines.append(f'{p}_requests_total{{operation="{operation}",result="{result}"}} {count}')
        lines += [f"# HELP {p}_refused_total Requests and connections refused, per reason.",
                  f"# TYPE {p}_refused_total counter"]
        for reason in REFUSAL_REASONS:
            lines.append(f'{p}_refused_total{{reason="{reason}"}} {refused.get(reason, 0)}')
        lines += [f"# HELP {p}_request_duration_seconds Time to answer a request, per operation.",
                  f"# TYPE {p}_request_duration_seconds histogram"]
        for operation, buckets in sorted(durations.items()):
            cumulative = 0
            for bound, count in zip(LATENCY_BUCKETS, buckets):
                cumulative += count
                lines.append(f'{p}_request_duration_seconds_bucket{{operation="{operation}",le="{bound:g}"}} '
                             f"{cumulative}")
            lines.append(f'{p}_request_duration_seconds_bucket{{operation="{operation}",le="+Inf"}} {sum(buckets)}')
            lines.append(f'{p}_request_duration_seconds_sum{{operation="{operation}"}} {sums.get(operation, 0):.6f}')
            lines.append(f'{p}_request_duration_seconds_count{{operation="{operation}"}} {sum(buckets)}')
        lines += [f"# HELP {p}_open_connections Open connections.", f"# TYPE {p}_open_connections gauge",
                  f"{p}_open_connections {self.open_connections()}",
                  f"# HELP {p}_max_connections The configured cap.", f"# TYPE {p}_max_connections gauge",
                  f"{p}_max_connections {self.limits.max_connections}",
                  f"# HELP {p}_up 1 while the face accepts connections.", f"# TYPE {p}_up gauge",
                  f"{p}_up {1 if self.accepting else 0}"]
        return "\n".join(lines) + "\n"


def _parse_head(head: bytes) -> tuple[str, str, dict[str, str]]:
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes every byte
        raise _ApiError("SerializationException", "bad request head", reason="bad-request") from None
    request_line, *header_lines = text.split("\r\n")
    parts = request_line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise _ApiError("SerializationException", "bad request line", reason="bad-request")
    headers: dict[str, str] = {}
    for line in header_lines:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise _ApiError("SerializationException", "bad header line", reason="bad-request")
        key = name.lower()
        headers[key] = f"{headers[key]},{value.strip()}" if key in headers else value.strip()
    return parts[0], parts[1], headers


def _blob(request: Mapping[str, Any], field: str, limit: int) -> bytes:
    value = request.get(field)
    if not isinstance(value, str):
        raise _ApiError("ValidationException", f"{field} is required (base64)")
    try:
        data = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise _ApiError("ValidationException", f"{field} is not base64") from None
    if not 1 <= len(data) <= limit:
        raise _ApiError("ValidationException", f"{field} must be 1 to {limit} bytes")
    return data


def _b64(data: bytes) -> str:
    return base64.b64encode(bytes(data)).decode()


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _close(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass
