"""Issue 35 for ``register_kms``'s callback server: executors' token cannot reconfigure the KMS,
the driver token never travels, and the listener's bounds hold (raw clients on a real server)."""

from __future__ import annotations

import os
import socket

import pytest

from pyiceberg_crypto.bridge import register_kms
from pyiceberg_crypto.bridge.adapter import KmsCallbackAdapter
from pyiceberg_crypto.bridge.callback_server import KmsCallbackServer
from pyiceberg_crypto.bridge.py4j_server import ConnectionLimits
from pyiceberg_crypto.kms import InMemoryKms
from tests.serve.raw_client import RawClient
from tests.testkit import eventually


class ConfiguredKms(InMemoryKms):
    def __init__(self, master_keys):
        super().__init__(master_keys)
        self.initialized: list[dict] = []

    def initialize(self, properties):
        self.initialized.append(dict(properties))


def test_the_shipped_token_cannot_initialize_only_the_driver_token_can(spark, jvm):
    kms = ConfiguredKms({"m1": os.urandom(16)})
    with register_kms(spark, kms, name="two-tokens") as registration:
        server = registration._server
        assert server.driver_token and server.driver_token != server.auth_token
        with RawClient("127.0.0.1", registration.port) as executor:  # what a compromised executor holds
            assert executor.handshake(server.auth_token) == b"!yv"
            reply = executor.call("initialize", "endpoint=http://127.0.0.1:9/", object_id=server.object_id)
            assert reply.startswith(b"!x") and b"KmsError" in reply
            assert executor.call("initialize", "", object_id=server.object_id).startswith(b"!y")
            # Nor can it claim the driver's role with its token.
            with RawClient("127.0.0.1", registration.port) as claim:
                assert claim.handshake(server.auth_token, role="driver") == b"server not proven"
        assert kms.initialized == []
        # The driver JVM's catalog properties still arrive (over the driver token).
        client = jvm.io.pyicebergcrypto.bridge.PythonKmsClient()
        client.initialize({"pyiceberg-crypto.kms-name": "two-tokens", "pyiceberg-crypto.kms.region": "r1"})
        client.wrapKey(jvm.java.nio.ByteBuffer.wrap(b"k" * 16), "m1")
        assert kms.initialized == [{"region": "r1"}]
        # A serialized client (task data) carries the executors' token, never the driver's.
        out = jvm.java.io.ByteArrayOutputStream()
        stream = jvm.java.io.ObjectOutputStream(out)
        stream.writeObject(client)
        stream.close()
        shipped = bytes(out.toByteArray())
        assert server.auth_token.encode() in shipped and server.driver_token.encode() not in shipped


def test_initialize_policy_operator_refuses_even_the_driver(spark, jvm):
    kms = ConfiguredKms({"m1": os.urandom(16)})
    with register_kms(spark, kms, name="operator-only", initialize_policy="operator"):
        client = jvm.io.pyicebergcrypto.bridge.PythonKmsClient()
        client.initialize({"pyiceberg-crypto.kms-name": "operator-only", "pyiceberg-crypto.kms.region": "r1"})
        with pytest.raises(Exception, match="configured by its operator only"):
            client.wrapKey(jvm.java.nio.ByteBuffer.wrap(b"k" * 16), "m1")
    assert kms.initialized == []
    with pytest.raises(ValueError, match="initialize_policy"):
        KmsCallbackAdapter(kms, initialize_policy="anyone")


def test_a_newcomer_evicts_the_oldest_silent_connection_not_one_whose_line_waits_unread():
    """On a loaded machine 64 accepts can come before a connection's thread reads the first line its
    peer sent: what waits in the kernel's buffer counts as speaking (seen by poll, nothing read)."""
    from types import SimpleNamespace

    from pyiceberg_crypto.bridge.py4j_server import eviction_victim

    pairs = [socket.socketpair() for _ in range(3)]
    try:
        (waiting, peer_of_waiting), (silent, _), (spoken, _) = pairs
        oldest_with_a_line = SimpleNamespace(name="line waiting", spoke=False, socket=waiting)
        idle = SimpleNamespace(name="silent", spoke=False, socket=silent)
        handshaking = SimpleNamespace(name="spoke", spoke=True, socket=spoken)
        peer_of_waiting.sendall(b"pyiceberg-crypto-kms/1 client nonce\n")
        assert eviction_victim([oldest_with_a_line, idle, handshaking]).name == "silent"
        assert eviction_victim([handshaking, oldest_with_a_line]).name == "line waiting"  # else the oldest unread
        assert eviction_victim([handshaking]).name == "spoke"  # else the oldest
        waiting.recv(4096)  # read: silent again
        assert eviction_victim([oldest_with_a_line, idle]).name == "line waiting"
        gone = SimpleNamespace(name="closed", spoke=False, socket=None)  # shut down meanwhile
        assert eviction_victim([gone, idle]).name == "closed"
    finally:
        for a, b in pairs:
            a.close()
            b.close()


def test_the_callback_server_bounds_hold_without_a_jvm():
    """The same listener code as kms serve: caps, deadline, bytes before the token, types."""
    kms = InMemoryKms.with_random_keys("m1")
    refused: list[str] = []
    # A 3 s authentication deadline: the silent three are still there when the fourth comes, however
    # slow the machine.
    server = KmsCallbackServer(KmsCallbackAdapter(kms), limits=ConnectionLimits(
        max_connections=6, max_unauthenticated=3, auth_deadline_seconds=3.0),
        on_refused=lambda peer, reason: refused.append(reason))
    try:
        silent = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(3)]
        eventually(lambda: server.connection_counts()["unauthenticated"] == 3, 3,
                   message=lambda: f"3 unauthenticated connections: {server.connection_counts()}")
        # A 4th: let in, the oldest silent one closed to make room (issue 39: no lock-out by idlers).
        over = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        silent[0].settimeout(2)
        try:
            assert silent[0].recv(10) == b""
        except ConnectionResetError:  # closed with a reset after the end of stream: closed too
            pass
        silent.append(over)
        eventually(lambda: server.connection_counts()["unauthenticated"] == 3, 3,  # the newcomer took the freed slot
                   message=lambda: f"3 unauthenticated connections again: {server.connection_counts()}")
        eventually(lambda: server.connection_counts()["unauthenticated"] == 0, 10,  # reaped at the deadline
                   message=lambda: f"the silent connections reaped: {server.connection_counts()}")
        for sock in silent:
            sock.close()
        with RawClient("127.0.0.1", server.port) as client:
            assert client.handshake(server.auth_token) == b"!yv"
            wrapped = RawClient.bytes_of(client.call("wrapKey", b"k" * 16, "m1", object_id=server.object_id))
            assert kms.unwrap_key(wrapped, "m1") == b"k" * 16
            assert client.call("wrapKey", "@i500000000", "m1", object_id=server.object_id).startswith(b"!x")
        assert server.accepting
        assert "closed to make room: the unauthenticated slots were full" in refused
        assert "no authentication within the deadline" in refused
    finally:
        server.close()
    assert not server.accepting
