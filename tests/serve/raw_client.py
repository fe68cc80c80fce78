"""A raw client of the KMS listener (``kms serve`` or ``register_kms``): the bridge's
challenge-response or Py4J's ``A`` command, then Py4J calls, byte by byte as an attacker sends them."""

from __future__ import annotations

import base64
import secrets
import socket

from pyiceberg_crypto.bridge.handshake import handshake_proof, HANDSHAKE_PROTOCOL

OBJECT_ID = "pyiceberg-crypto-kms"


class RawClient:
    def __init__(self, host: str, port: int, *, timeout: float = 10.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.stream = self.sock.makefile("rb")

    def handshake(self, token: str, role: str = "client") -> bytes:
        """The JVM client's challenge-response; returns the server's last line (b"!yv" when accepted)."""
        nonce = secrets.token_hex(32)
        self.sock.sendall(f"{HANDSHAKE_PROTOCOL} {role} {nonce}\n".encode())
        reply = self.stream.readline().strip()
        if reply.startswith(b"!"):
            return reply
        server_nonce, proof = reply.decode().split(" ")
        if proof != handshake_proof(token.encode(), "server", role, nonce, server_nonce):
            return b"server not proven"  # a real client stops here, having sent nothing else
        self.sock.sendall((handshake_proof(token.encode(), "client", role, nonce, server_nonce) + "\n").encode())
        return self.stream.readline().strip()

    def auth(self, token: str) -> bytes:
        """Py4J's ``A`` command."""
        self.sock.sendall(f"A\n{token}\ne\n".encode())
        return self.stream.readline().strip()

    def call(self, method: str, *params, object_id: str = OBJECT_ID) -> bytes:
        """One call; bytes -> ``j``, str -> ``s``; a str starting with ``@`` is sent as it is (``@i500000000``)."""
        lines = ["c", object_id, method]
        for param in params:
            if isinstance(param, bytes):
                lines.append("j" + base64.b64encode(param).decode())
            elif isinstance(param, str) and param.startswith("@"):
                lines.append(param[1:])
            elif isinstance(param, str):
                lines.append("s" + param.replace("\\", "\\\\").replace("\n", "\\n"))
        lines.append("e")
        self.sock.sendall(("\n".join(lines) + "\n").encode())
        return self.stream.readline().strip()

    @staticmethod
    def bytes_of(reply: bytes) -> bytes:
        assert reply.startswith(b"!yj"), reply[:200]
        return base64.b64decode(reply[3:])

    def close(self) -> None:
        for closer in (self.stream.close, self.sock.close):
            try:
                closer()
            except OSError:
                pass

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
