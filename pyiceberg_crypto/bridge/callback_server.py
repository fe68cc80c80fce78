"""A dedicated, token-authenticated Py4J callback server for the KMS, bound to loopback.

Why not PySpark's own callback server: in PySpark's default pinned-thread mode it accepts
connections *without* an auth token, so any local process could call a registered object (see
FINDINGS.md), and ``shutdown_callback_server()`` can hang. This server:

- listens on 127.0.0.1 on an ephemeral port, and requires a fresh 256-bit token (Py4J's ``A``
  auth command) before any call; a connection that does not authenticate first is dropped;
- exposes exactly one object with an allow-list of methods (no ``getattr`` on arbitrary names);
- reports Python exceptions to Java as one ``ExceptionType: message`` line (no traceback, nothing
  logged by Py4J), which the Java bridge turns into a Spark error naming the operation and key id;
- shuts down promptly (short accept timeout, daemon threads).
"""

from __future__ import annotations

import secrets

from py4j import protocol as proto
from py4j.java_gateway import CallbackConnection, CallbackServer, CallbackServerParameters, PythonProxyPool
from py4j.protocol import get_command_part, smart_decode

LOOPBACK = "127.0.0.1"


class _KmsCallbackConnection(CallbackConnection):
    """One JVM connection; calls only allow-listed methods of the pooled object."""

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
    def _create_connection(self, socket_instance, stream):
        return _KmsCallbackConnection(
            self.pool, stream, socket_instance, self.gateway_client, self.callback_server_parameters, self
        )


class KmsCallbackServer:
    """Serve one Python object to JVMs over an authenticated loopback Py4J callback server.

    ``gateway_client`` is the PySpark gateway's client (only used to decode Java object
    references, which the KMS protocol never sends).
    """

    def __init__(self, target, gateway_client, *, address: str = LOOPBACK):
        self.auth_token = secrets.token_hex(32)
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
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:  # never show the token
        return f"KmsCallbackServer({self.address}:{self.port}, closed={self._closed})"
