"""The handshake of a KMS connection: who holds a token, proven before anything else is read.

Two ways in, both bounded (:data:`MAX_AUTH_BYTES`) and compared in constant time:

- the bridge's JVM client: a challenge-response in which the server proves it knows the token
  before the client sends anything else, and the token never crosses the wire (a listener
  squatting on the port after the KMS stopped learns nothing)::

      client: pyiceberg-crypto-kms/1 ROLE NONCE
      server: NONCE' PROOF(server)
      client: PROOF(client)
      server: !yv                  (or !x, and the connection is closed)

- Py4J's own ``A`` command (``A``, the token, ``e``), which Py4J clients send.

The result is the role whose token the peer proved: :data:`DRIVER_ROLE` (may call ``initialize``)
or :data:`CLIENT_ROLE`::

    role = authenticate(read_line, socket.sendall, {CLIENT_ROLE: token, DRIVER_ROLE: driver_token})
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable, Mapping

from py4j import protocol as proto


#: What a connection may send before it is authenticated: the challenge-response of the bridge's
#: JVM client (two short lines) or Py4J's ``A`` command (three short lines), with margin.
__all__ = ["CLIENT_ROLE", "DRIVER_ROLE", "HANDSHAKE_PROTOCOL", "MAX_AUTH_BYTES", "HandshakeRefusedError", "authenticate",
           "handshake_proof"]

MAX_AUTH_BYTES = 512
#: The bridge's own authentication (the JVM client): a challenge-response in which the server
#: proves it knows the token before the client sends anything else, and the token never crosses
#: the wire (a listener squatting on the port after the KMS stopped learns nothing).
HANDSHAKE_PROTOCOL = "pyiceberg-crypto-kms/1"
#: Who may reconfigure the KMS through ``initialize``: the holder of the driver token only.
DRIVER_ROLE, CLIENT_ROLE = "driver", "client"


class HandshakeRefusedError(Exception):
    """A peer broke the protocol or its bounds: the connection is closed (reason for the log).

    The bridge's server signal to itself (:mod:`~pyiceberg_crypto.bridge.py4j_server` closes the
    connection): it never reaches a caller of the package, so it is not a package error."""


def authenticate(read_line: Callable[[int], bytes], send: Callable[[bytes], None], tokens: Mapping[str, str]) -> str:
    """The bridge's challenge-response, or Py4J's ``A`` command (token compared in constant time);
    the role whose token the peer proved. Raises :class:`HandshakeRefusedError` (after telling the peer no).

    ``read_line(limit)``: the next line, newline removed, at most ``limit`` bytes (raises
    :class:`HandshakeRefusedError` beyond, ``EOFError`` when the peer closed); ``send``: bytes to the peer;
    ``tokens``: role -> token."""
    budget = [MAX_AUTH_BYTES]

    def line() -> str:
        try:
            raw = read_line(budget[0])
        except HandshakeRefusedError:  # the same reason whatever is left of the budget (the peer chose that number)
            raise HandshakeRefusedError(f"more than {MAX_AUTH_BYTES} bytes before authenticating") from None
        budget[0] -= len(raw) + 1
        if budget[0] <= 0:
            raise HandshakeRefusedError(f"more than {MAX_AUTH_BYTES} bytes before authenticating")
        return raw.decode("ascii")

    first = line()
    if first.startswith(HANDSHAKE_PROTOCOL + " "):
        return _challenge(first, line, send, tokens)
    if first != proto.AUTH_COMMAND_NAME:
        raise HandshakeRefusedError("no token")  # dropped without a word
    token = line()
    line()  # END marker
    for role, known in tokens.items():
        if hmac.compare_digest(token.encode(), known.encode()):
            send(proto.OUTPUT_VOID_COMMAND.encode("utf-8"))
            return role
    send(proto.ERROR_RETURN_MESSAGE.encode("utf-8"))
    raise HandshakeRefusedError("wrong or old token")


def _challenge(first: str, line: Callable[[], str], send: Callable[[bytes], None], tokens: Mapping[str, str]) -> str:
    """``pyiceberg-crypto-kms/1 ROLE NONCE`` -> ``NONCE' PROOF`` (the server knows the token)
    -> the client's ``PROOF`` -> ``!yv`` (or ``!x`` and closed)."""
    parts = first.split(" ")
    if len(parts) != 3 or parts[1] not in tokens or not _is_nonce(parts[2]):
        send(proto.ERROR_RETURN_MESSAGE.encode("utf-8"))
        raise HandshakeRefusedError("wrong or old token")
    role, client_nonce = parts[1], parts[2]
    server_nonce = secrets.token_hex(32)
    token = tokens[role].encode()
    send(f"{server_nonce} {handshake_proof(token, 'server', role, client_nonce, server_nonce)}\n".encode("ascii"))
    answer = line()
    if not hmac.compare_digest(answer.encode(), handshake_proof(token, "client", role, client_nonce,
                                                                server_nonce).encode()):
        send(proto.ERROR_RETURN_MESSAGE.encode("utf-8"))
        raise HandshakeRefusedError("wrong or old token")
    send(proto.OUTPUT_VOID_COMMAND.encode("utf-8"))
    return role


def handshake_proof(token: bytes, side: str, role: str, client_nonce: str, server_nonce: str) -> str:
    """HMAC-SHA256 under the token of who proves (``server``/``client``), the role and both nonces."""
    message = f"{HANDSHAKE_PROTOCOL} {side} {role} {client_nonce} {server_nonce}".encode("ascii")
    return hmac.new(token, message, hashlib.sha256).hexdigest()


def _is_nonce(value: str) -> bool:
    return len(value) == 64 and all(c in "0123456789abcdef" for c in value)
