"""A dedicated, token-authenticated Py4J callback server for the KMS, bound to loopback.

Why not PySpark's own callback server: in PySpark's default pinned-thread mode it accepts
connections *without* an auth token, so any local process could call a registered object (see
FINDINGS.md), and ``shutdown_callback_server()`` can hang. This server:

- listens on 127.0.0.1 on an ephemeral port, and requires a fresh 256-bit token (Py4J's ``A``
  auth command, compared in constant time) before any call; a connection that does not
  authenticate first is dropped (and reported to ``on_refused``, without the token);
- on any other address (the opt-in for executors on other machines) speaks TLS with a
  self-signed certificate that JVMs pin (fresh per registration, where it travels with the
  endpoint; kept in files by ``kms serve``, whose clients pin its SHA-256), so neither the token
  nor key bytes cross the network in clear;
- exposes exactly one object with an allow-list of methods (no ``getattr`` on arbitrary names);
- reports Python exceptions to Java as one ``ExceptionType: message`` line (no traceback, nothing
  logged by Py4J), which the Java bridge turns into a Spark error naming the operation and key id;
- shuts down promptly (short accept timeout, daemon threads).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import datetime
import hashlib
import hmac
import os
import secrets
import ssl
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from py4j import protocol as proto
from py4j.java_gateway import (
    CallbackConnection,
    CallbackServer,
    CallbackServerParameters,
    GatewayClient,
    PythonProxyPool,
)
from py4j.protocol import get_command_part, smart_decode

LOOPBACK = "127.0.0.1"
TLS_HANDSHAKE_TIMEOUT_SECONDS = 10


class _KmsCallbackConnection(CallbackConnection):
    """One JVM connection: TLS (when configured), the token, then allow-listed calls only."""

    def run(self):
        server: _KmsCallbackServer = self.callback_server
        peer = _peer_host(self.socket)
        # TLS handshake here, in the connection's thread: in py4j's accept loop a silent or
        # plaintext peer would stall or stop the server.
        if server.tls_context is not None:
            raw = self.socket
            try:
                raw.settimeout(TLS_HANDSHAKE_TIMEOUT_SECONDS)
                self.input.close()
                self.socket = server.tls_context.wrap_socket(raw, server_side=True)
                self.input = self.socket.makefile("rb")
            except (OSError, ValueError):
                raw.close()
                return
        try:
            self.socket.settimeout(TLS_HANDSHAKE_TIMEOUT_SECONDS)  # a silent peer must not hold a thread
            if not self._authenticate(server, peer):
                self.close(reset=True)
                return
            self.socket.settimeout(None)
            while True:
                command = smart_decode(self.input.readline())[:-1]
                obj_id = smart_decode(self.input.readline())[:-1]
                if not obj_id.strip():
                    break
                if command == proto.CALL_PROXY_COMMAND_NAME:
                    self.socket.sendall(self._call_proxy(obj_id, self.input, peer).encode("utf-8"))
                elif command == proto.GARBAGE_COLLECT_PROXY_COMMAND_NAME:
                    self.input.readline()  # the KMS object is never released by a JVM's GC
                    self.socket.sendall(proto.SUCCESS_RETURN_MESSAGE.encode("utf-8"))
                else:
                    self.socket.sendall(proto.ERROR_RETURN_MESSAGE.encode("utf-8"))
                    break
        except (OSError, ValueError, AttributeError):  # the JVM closed the connection, or the server
            pass  # stopped (its shutdown closes the stream under this thread: input becomes None)
        self.close()

    def _authenticate(self, server: _KmsCallbackServer, peer: str) -> bool:
        """Py4J's ``A`` command with the token, compared in constant time (py4j compares with ==)."""
        command = smart_decode(self.input.readline())[:-1]
        token = smart_decode(self.input.readline())[:-1] if command == proto.AUTH_COMMAND_NAME else ""
        if command == proto.AUTH_COMMAND_NAME:
            self.input.readline()  # END marker
        if command == proto.AUTH_COMMAND_NAME and hmac.compare_digest(token.encode(), server.auth_token.encode()):
            self.socket.sendall(proto.OUTPUT_VOID_COMMAND.encode("utf-8"))
            return True
        if command == proto.AUTH_COMMAND_NAME:  # without an auth command: dropped without a word
            self.socket.sendall(proto.ERROR_RETURN_MESSAGE.encode("utf-8"))
        if server.on_refused is not None:
            server.on_refused(peer, "no token" if command != proto.AUTH_COMMAND_NAME else "wrong or old token")
        return False

    def _call_proxy(self, obj_id, input, peer=""):  # noqa: A002 - py4j's signature
        if obj_id not in self.pool:
            return proto.RETURN_MESSAGE + proto.ERROR + get_command_part("Object ID unknown", self.pool)
        method = "?"
        failed = True
        try:
            method = smart_decode(input.readline())[:-1]
            params = read_params(input)
            target = self.pool[obj_id]
            if method not in getattr(target, "ALLOWED_METHODS", ()):
                raise PermissionError(f"method {method!r} is not callable over the KMS bridge")
            value = getattr(target, method)(*params)
            failed = False
            if isinstance(value, bytes):  # the answer of wrapKey / unwrapKey / generateKey
                return f"{proto.RETURN_MESSAGE}{proto.SUCCESS}{proto.BYTES_TYPE}{base64.standard_b64encode(value).decode('ascii')}\n"
            return proto.RETURN_MESSAGE + proto.SUCCESS + get_command_part(value, self.pool)
        except Exception as exc:  # reported to Java as one line, without traceback or secrets
            message = f"{type(exc).__name__}: {exc}".replace("\n", " ")
            return proto.RETURN_MESSAGE + proto.ERROR + get_command_part(message, self.pool)
        finally:
            if self.callback_server.on_call is not None:
                self.callback_server.on_call(peer, method, failed)


def read_params(input) -> list:  # noqa: A002 - py4j's name
    """A call's parameters: one typed line each (Py4J protocol), up to the ``e`` line.

    The KMS protocol passes byte arrays and strings only (:class:`PythonKms` in Java), so this
    decodes those (and the other scalars) directly, instead of py4j's generic path: that turns byte
    arrays into bytearrays byte by byte in Python and, in a PySpark driver, goes through PySpark's
    exception-capturing wrapper once per parameter, together most of a call's Python time. A Java
    object reference, which a KMS call never sends, is refused (the rest of the call is still read,
    so the connection stays in step)."""
    params: list = []
    refused = None
    while True:
        line = input.readline()
        if not line:
            raise EOFError("the JVM closed the connection during a call")
        line = line.decode("utf-8")[:-1]
        if line == proto.END:
            break
        kind, value = line[:1], line[1:]
        if kind == proto.BYTES_TYPE:
            params.append(binascii.a2b_base64(value))
        elif kind == proto.STRING_TYPE:
            params.append(proto.unescape_new_line(value) if "\\" in value else value)
        elif kind == proto.NULL_TYPE:
            params.append(None)
        elif kind == proto.BOOLEAN_TYPE:
            params.append(value.lower() == "true")
        elif kind in (proto.INTEGER_TYPE, proto.LONG_TYPE):
            params.append(int(value))
        else:
            refused = refused or kind
    if refused is not None:
        raise TypeError(f"a parameter of Py4J type {refused!r} is not part of the KMS protocol")
    return params


class _KmsCallbackServer(CallbackServer):
    tls_context: ssl.SSLContext | None = None
    auth_token: str = ""
    on_call: Callable[[str, str, bool], None] | None = None
    on_refused: Callable[[str, str], None] | None = None

    def _create_connection(self, socket_instance, stream):
        return _KmsCallbackConnection(
            self.pool, stream, socket_instance, self.gateway_client, self.callback_server_parameters, self
        )


def _peer_host(sock) -> str:
    try:
        return str(sock.getpeername()[0])
    except (OSError, IndexError, TypeError):
        return "?"


@dataclass(frozen=True)
class TlsIdentity:
    """The listener's TLS key and self-signed certificate (DER), which JVMs pin.

    :meth:`fresh` makes a throw-away one (``register_kms``: the certificate travels with the
    endpoint); :meth:`load_or_create` keeps one in two files, so that a restarted KMS service keeps
    the pin its clients were configured with.
    """

    context: ssl.SSLContext
    certificate: bytes

    @property
    def sha256(self) -> str:
        """The pin clients are configured with: SHA-256 of the DER certificate, hex."""
        return hashlib.sha256(self.certificate).hexdigest()

    @classmethod
    def fresh(cls) -> TlsIdentity:
        key_pem, cert_pem = _self_signed_pem()
        return cls(_server_context(key_pem, cert_pem), _der(cert_pem))

    @classmethod
    def load_or_create(cls, key_file: str | os.PathLike, certificate_file: str | os.PathLike) -> TlsIdentity:
        """Read the key (PEM, must be mode 0600) and certificate, or create both when neither exists."""
        key_path, cert_path = Path(key_file), Path(certificate_file)
        if not key_path.exists() and not cert_path.exists():
            key_pem, cert_pem = _self_signed_pem()
            key_path.parent.mkdir(parents=True, exist_ok=True)
            write_private_file(key_path, key_pem)
            cert_path.write_bytes(cert_pem)
        key_pem, cert_pem = key_path.read_bytes(), cert_path.read_bytes()
        if key_path.stat().st_mode & 0o077:
            raise PermissionError(f"the TLS key {key_path} is readable by other users: chmod 600 it")
        return cls(_server_context(key_pem, cert_pem), _der(cert_pem))


class KmsCallbackServer:
    """Serve one Python object to JVMs over an authenticated Py4J callback server.

    ``gateway_client``: the PySpark gateway's client (only used to decode Java object references,
    which the KMS protocol never sends); None for a server without a JVM of its own (``kms serve``).
    ``tls``: the TLS identity for a non-loopback address (a fresh one when not given).
    ``on_call(peer, method, failed)`` / ``on_refused(peer, reason)``: hooks for counting and
    logging (they never receive the token).
    """

    def __init__(self, target, gateway_client=None, *, address: str = LOOPBACK, port: int = 0,
                 auth_token: str | None = None, tls: TlsIdentity | None = None, object_id: str | None = None,
                 on_call: Callable[[str, str, bool], None] | None = None,
                 on_refused: Callable[[str, str], None] | None = None):
        self.auth_token = auth_token or secrets.token_hex(32)
        #: DER certificate JVMs must pin (None on 127.0.0.1, where the channel never leaves the host).
        self.certificate: bytes | None = None
        self._pool = PythonProxyPool()
        self.object_id = self._pool.put(target, object_id)
        params = CallbackServerParameters(
            address=address,
            port=port,
            daemonize=True,
            daemonize_connections=True,
            eager_load=False,
            accept_timeout=0.2,
            auth_token=self.auth_token,
        )
        if gateway_client is None:  # never connected: the KMS protocol has no Java references
            gateway_client = GatewayClient(address=LOOPBACK, port=1)
        self._server = _KmsCallbackServer(self._pool, gateway_client, callback_server_parameters=params)
        self._server.auth_token = self.auth_token
        self._server.on_call, self._server.on_refused = on_call, on_refused
        if address != LOOPBACK:
            identity = tls or TlsIdentity.fresh()
            self._server.tls_context, self.certificate = identity.context, identity.certificate
        self._server.start()
        # py4j calls listen() in its accept thread: listen here too (a second listen() is harmless),
        # so a JVM connecting as soon as the port is known is never refused on a busy machine.
        self._server.server_socket.listen(5)
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


def write_private_file(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` with mode 0600, atomically (a reader sees the old or the new file)."""
    path = Path(path)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _self_signed_pem() -> tuple[bytes, bytes]:
    """A fresh EC P-256 key and a self-signed certificate, PEM (no CA, no host name: the pin is the identity)."""
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
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return key_pem, certificate.public_bytes(serialization.Encoding.PEM)


def _der(certificate_pem: bytes) -> bytes:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    return x509.load_pem_x509_certificate(certificate_pem).public_bytes(serialization.Encoding.DER)


def _server_context(key_pem: bytes, certificate_pem: bytes) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    # ssl loads keys only from files: a private directory, removed at once.
    with tempfile.TemporaryDirectory(prefix="pyiceberg-crypto-tls-") as directory:
        key_path, cert_path = os.path.join(directory, "key.pem"), os.path.join(directory, "cert.pem")
        with open(os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as handle:
            handle.write(key_pem)
        with open(cert_path, "wb") as handle:
            handle.write(certificate_pem)
        context.load_cert_chain(cert_path, key_path)
    return context
