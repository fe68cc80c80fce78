"""A dedicated, token-authenticated Py4J callback server for the KMS, bound to loopback.

Why not PySpark's own callback server: in PySpark's default pinned-thread mode it accepts
connections *without* an auth token, so any local process could call a registered object (see
FINDINGS.md), and ``shutdown_callback_server()`` can hang. This server:

- listens on 127.0.0.1 on an ephemeral port, and requires a fresh 256-bit token (Py4J's ``A``
  auth command) before any call; a connection that does not authenticate first is dropped;
- on any other address (the opt-in for executors on other machines) speaks TLS with a fresh
  self-signed certificate that JVMs pin (it travels with the endpoint), so neither the token nor
  key bytes cross the network in clear;
- exposes exactly one object with an allow-list of methods (no ``getattr`` on arbitrary names);
- reports Python exceptions to Java as one ``ExceptionType: message`` line (no traceback, nothing
  logged by Py4J), which the Java bridge turns into a Spark error naming the operation and key id;
- shuts down promptly (short accept timeout, daemon threads).
"""

from __future__ import annotations

import datetime
import os
import secrets
import ssl
import tempfile

from py4j import protocol as proto
from py4j.java_gateway import CallbackConnection, CallbackServer, CallbackServerParameters, PythonProxyPool
from py4j.protocol import get_command_part, smart_decode

LOOPBACK = "127.0.0.1"
TLS_HANDSHAKE_TIMEOUT_SECONDS = 10


class _KmsCallbackConnection(CallbackConnection):
    """One JVM connection; calls only allow-listed methods of the pooled object."""

    tls_context: ssl.SSLContext | None = None

    def run(self):
        # TLS handshake here, in the connection's thread: in py4j's accept loop a silent or
        # plaintext peer would stall or stop the server.
        if self.tls_context is not None:
            raw = self.socket
            try:
                raw.settimeout(TLS_HANDSHAKE_TIMEOUT_SECONDS)
                self.input.close()
                self.socket = self.tls_context.wrap_socket(raw, server_side=True)
                self.socket.settimeout(None)
                self.input = self.socket.makefile("rb")
            except (OSError, ValueError):
                raw.close()
                return
        super().run()

    def _call_proxy(self, obj_id, input):  # noqa: A002 - py4j's signature
        if obj_id not in self.pool:
            return proto.RETURN_MESSAGE + proto.ERROR + get_command_part("Object ID unknown", self.pool)
        try:
            method = smart_decode(input.readline())[:-1]
            params = self._get_params(input)
            target = self.pool[obj_id]
            if method not in getattr(target, "ALLOWED_METHODS", ()):
                raise PermissionError(f"method {method!r} is not callable over the KMS bridge")
            value = getattr(target, method)(*params)
            return proto.RETURN_MESSAGE + proto.SUCCESS + get_command_part(value, self.pool)
        except Exception as exc:  # reported to Java as one line, without traceback or secrets
            message = f"{type(exc).__name__}: {exc}".replace("\n", " ")
            return proto.RETURN_MESSAGE + proto.ERROR + get_command_part(message, self.pool)


class _KmsCallbackServer(CallbackServer):
    tls_context: ssl.SSLContext | None = None

    def _create_connection(self, socket_instance, stream):
        connection = _KmsCallbackConnection(
            self.pool, stream, socket_instance, self.gateway_client, self.callback_server_parameters, self
        )
        connection.tls_context = self.tls_context
        return connection


class KmsCallbackServer:
    """Serve one Python object to JVMs over an authenticated loopback Py4J callback server.

    ``gateway_client`` is the PySpark gateway's client (only used to decode Java object
    references, which the KMS protocol never sends).
    """

    def __init__(self, target, gateway_client, *, address: str = LOOPBACK):
        self.auth_token = secrets.token_hex(32)
        #: DER certificate JVMs must pin (None on 127.0.0.1, where the channel never leaves the host).
        self.certificate: bytes | None = None
        self._pool = PythonProxyPool()
        self.object_id = self._pool.put(target)
        params = CallbackServerParameters(
            address=address,
            port=0,
            daemonize=True,
            daemonize_connections=True,
            eager_load=False,
            accept_timeout=0.2,
            auth_token=self.auth_token,
        )
        self._server = _KmsCallbackServer(self._pool, gateway_client, callback_server_parameters=params)
        if address != LOOPBACK:
            self._server.tls_context, self.certificate = _self_signed_tls_context()
        self._server.start()
        self.address = address
        self.port = self._server.get_listening_port()
        self._closed = False

    def close(self) -> None:
        """Stop listening and drop live connections (idempotent, returns within ~0.2 s)."""
        if not self._closed:
            self._closed = True
            self._server.shutdown()

    @property
    def tls(self) -> bool:
        return self.certificate is not None

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:  # never show the token
        return f"KmsCallbackServer({self.address}:{self.port}, closed={self._closed})"


def _self_signed_tls_context() -> tuple[ssl.SSLContext, bytes]:
    """A server TLS context with a fresh EC P-256 key and self-signed certificate (DER returned).

    Nothing to distribute: the JVMs receive the certificate with the endpoint and pin it exactly.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pyiceberg-crypto Python KMS")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .sign(key, hashes.SHA256())
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    # ssl loads keys only from files: a private directory, removed at once.
    with tempfile.TemporaryDirectory(prefix="pyiceberg-crypto-tls-") as directory:
        key_path, cert_path = os.path.join(directory, "key.pem"), os.path.join(directory, "cert.pem")
        with open(os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as handle:
            handle.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
        with open(cert_path, "wb") as handle:
            handle.write(certificate.public_bytes(serialization.Encoding.PEM))
        context.load_cert_chain(cert_path, key_path)
    return context, certificate.public_bytes(serialization.Encoding.DER)
