"""A dedicated, token-authenticated Py4J callback server for the KMS, bound to loopback.

Why not PySpark's own callback server: in PySpark's default pinned-thread mode it accepts
connections *without* an auth token, so any local process could call a registered object, and
``shutdown_callback_server()`` can hang (docs/explanation/facts.md#py4j-callback-server). This server:

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

The listener is built in rooms, one job each: :mod:`.py4j_server` (the Py4J server and connection
subclasses: caps, deadlines, bounded calls), :mod:`.handshake` (token authentication), and, shared
with ``kms serve``, :mod:`pyiceberg_crypto.listener` (the certificate JVMs pin, the operator's
files, loopback and the accept queue). This module is the public class, :class:`KmsCallbackServer`,
and keeps the names the others imported from here (``LOOPBACK``).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

from py4j.java_gateway import CallbackServerParameters, GatewayClient, PythonProxyPool

from pyiceberg_crypto.bridge.handshake import CLIENT_ROLE, DRIVER_ROLE
from pyiceberg_crypto.bridge.py4j_server import ConnectionLimits, KmsPy4jServer
from pyiceberg_crypto.bridge.redaction import redact_in_py4j_logs
from pyiceberg_crypto.listener.sockets import LISTEN_BACKLOG, LOOPBACK
from pyiceberg_crypto.listener.tls import TlsIdentity


class KmsCallbackServer:
    """Serve one Python object to JVMs over an authenticated Py4J callback server.

    ``gateway_client``: the PySpark gateway's client (only used to decode Java object references,
    which the KMS protocol never sends); None for a server without a JVM of its own (``kms serve``).
    ``tls``: the TLS identity for a non-loopback address (a fresh one when not given).
    ``auth_token``: the token every client holds (shipped to executors); ``driver_token``: a second
    one, kept by the driver JVM only, whose connections alone may call ``initialize`` (None: none).
    ``limits``: connection caps and the authentication deadline.
    ``on_call(peer, method, failed)`` / ``on_refused(peer, reason)``: hooks for counting and
    logging (they never receive the token).
    """

    def __init__(self, target, gateway_client=None, *, address: str = LOOPBACK, port: int = 0,
                 auth_token: str | None = None, tls: TlsIdentity | None = None, object_id: str | None = None,
                 on_call: Callable[[str, str, bool], None] | None = None,
                 on_refused: Callable[[str, str], None] | None = None,
                 driver_token: str | None = None, limits: ConnectionLimits | None = None):
        self.auth_token = auth_token or secrets.token_hex(32)
        self.driver_token = driver_token
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
        self._server = KmsPy4jServer(self._pool, gateway_client, callback_server_parameters=params)
        self._server.setup(limits or ConnectionLimits())
        self._server.tokens = {CLIENT_ROLE: self.auth_token}
        if driver_token:
            self._server.tokens[DRIVER_ROLE] = driver_token
        self._server.on_call, self._server.on_refused = on_call, on_refused
        if address != LOOPBACK:
            identity = tls or TlsIdentity.fresh()
            self._server.tls_context, self.certificate = identity.context, identity.certificate
        self._server.start()
        # The accept thread calls listen() too: listen here already (a second listen() is
        # harmless), so a JVM connecting as soon as the port is known is never refused.
        self._server.server_socket.listen(LISTEN_BACKLOG)
        self.address = address
        self.port = self._server.get_listening_port()
        self._closed = False

    def replace_token(self, token: str) -> int:
        """Clients authenticate with ``token`` from now on; the old one is refused, and the
        connections that authenticated with it are closed (returned: how many)."""
        redact_in_py4j_logs(token)
        self.auth_token = token
        return self._server.revoke(CLIENT_ROLE, token)

    def set_named_tokens(self, named: dict[str, str]) -> None:
        """Accept these tokens too, each proving its own role (name -> token; ``kms serve``'s named
        Py4J principals), and no other named ones: replaced at once, so a token left out is refused
        from the next handshake on."""
        tokens = {**named, CLIENT_ROLE: self.auth_token}
        if self.driver_token:
            tokens[DRIVER_ROLE] = self.driver_token
        self._server.tokens = tokens

    def close(self) -> None:
        """Stop listening and drop live connections (idempotent, returns within ~0.2 s)."""
        if not self._closed:
            self._closed = True
            self._server.shutdown()

    @property
    def tls(self) -> bool:
        return self.certificate is not None

    @property
    def accepting(self) -> bool:
        """True while the accept thread runs (it survives peers; only close() ends it)."""
        thread = getattr(self._server, "thread", None)
        return bool(not self._closed and self._server.accepting and thread is not None and thread.is_alive())

    def connection_counts(self) -> dict[str, int]:
        return {"open": self._server.open_connections,
                "unauthenticated": self._server.unauthenticated_connections,
                "accept_failures": self._server.accept_failures, "idle_closed": self._server.idle_closed}

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:  # never show the token
        return f"KmsCallbackServer({self.address}:{self.port}, closed={self._closed})"


__all__ = ["LOOPBACK", "KmsCallbackServer"]
