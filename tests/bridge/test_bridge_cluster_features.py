"""The bridge features a cluster needs, checked in the driver JVM: forwarded catalog properties,
per-operation counters, the endpoint a serialized client carries, the opt-in listen address, and
thread safety in both directions (10,000 calls, no connection leak).

Executor JVMs themselves are exercised by tests/integration/test_kms_executors.py."""

from __future__ import annotations

import base64
import os
import socket
import threading

import pytest

from pyiceberg_crypto.bridge import register_kms
from pyiceberg_crypto.listener.tls import TlsIdentity
from pyiceberg_crypto.bridge.registration import _advertised_host
from pyiceberg_crypto.kms import InMemoryKms, KmsError


def _java_client(jvm, name, **properties):
    client = jvm.io.pyicebergcrypto.bridge.PythonKmsClient()
    client.initialize({"pyiceberg-crypto.kms-name": name, **properties})
    return client


def _buffer(jvm, data: bytes):
    return jvm.java.nio.ByteBuffer.wrap(data)


def _array(jvm, buffer) -> bytes:
    return bytes(jvm.org.apache.iceberg.util.ByteBuffers.toByteArray(buffer))


class ConfiguredKms(InMemoryKms):
    def __init__(self, master_keys, fail_initialize=False):
        super().__init__(master_keys)
        self.initialized: list[dict] = []
        self.fail_initialize = fail_initialize

    def initialize(self, properties):
        if self.fail_initialize:
            raise KmsError("region 'nowhere' does not exist")
        self.initialized.append(dict(properties))


def test_catalog_properties_under_the_prefix_reach_initialize_once(spark, jvm):
    kms = ConfiguredKms({"m1": os.urandom(16)})
    with register_kms(spark, kms, name="configured") as registration:
        properties = {
            "pyiceberg-crypto.kms.region": "eu-west-1",
            "pyiceberg-crypto.kms.endpoint": "https://kms.example/a b?x=1&y=2",
            "pyiceberg-crypto.kms.empty": "",
            "warehouse": "file:/not/forwarded",
            "pyiceberg-crypto.kmsx": "not forwarded either",
        }
        first = _java_client(jvm, "configured", **properties)
        second = _java_client(jvm, "configured", **properties)  # another catalog, same properties
        for client in (first, second, first):
            client.wrapKey(_buffer(jvm, b"k" * 16), "m1")
        assert kms.initialized == [
            {"region": "eu-west-1", "endpoint": "https://kms.example/a b?x=1&y=2", "empty": ""}
        ]
        assert registration.stats.operations["initialize"].calls == 1
        assert registration.stats.total == 3  # initialize is not a key operation

        _java_client(jvm, "configured").wrapKey(_buffer(jvm, b"k" * 16), "m1")  # nothing to forward
        assert len(kms.initialized) == 1


def test_a_failing_initialize_fails_the_key_operation_with_names(spark, jvm):
    kms = ConfiguredKms({"m1": os.urandom(16)}, fail_initialize=True)
    with register_kms(spark, kms, name="badconfig") as registration:
        client = _java_client(jvm, "badconfig", **{"pyiceberg-crypto.kms.region": "nowhere"})
        with pytest.raises(Exception) as excinfo:
            client.wrapKey(_buffer(jvm, b"k" * 16), "m1")
        message = str(excinfo.value)
        assert "Python KMS 'badconfig' failed to initialize (before it could wrap a key) with key id 'm1'" in message
        assert "KmsError: region 'nowhere' does not exist" in message
        assert registration.stats.operations["initialize"].failures == 1
        assert registration.stats.wrap == 0  # the key operation never ran


def test_counters_per_operation_with_failures_and_latency(spark, jvm):
    kms = InMemoryKms.with_random_keys("m1")
    with register_kms(spark, kms, name="counted") as registration:
        client = _java_client(jvm, "counted")
        before = registration.stats.snapshot()
        wrapped = client.wrapKey(_buffer(jvm, b"k" * 16), "m1")
        for _ in range(3):
            client.unwrapKey(wrapped, "m1")
        with pytest.raises(Exception):
            client.unwrapKey(wrapped, "no-such-key")
        stats = registration.stats.since(before)
        unwrap = stats.operations["unwrap"]
        assert (stats.wrap, stats.unwrap, stats.errors) == (1, 4, 1)
        assert (unwrap.calls, unwrap.failures) == (4, 1)
        assert 0 < unwrap.max_seconds <= unwrap.total_seconds
        assert unwrap.mean_seconds == pytest.approx(unwrap.total_seconds / 4)
        assert registration.stats.to_dict()["wrap"]["calls"] == 1
        assert repr(registration.stats) == "KmsCallStats(wrap=1, unwrap=4, generate=0, errors=1)"


def test_serialized_client_carries_the_endpoint_but_never_shows_the_token(spark, jvm):
    kms = InMemoryKms.with_random_keys("m1")
    serialization = jvm.org.apache.iceberg.util.SerializationUtil  # what Iceberg ships to executors
    unregistered = serialization.serializeToBytes(_java_client(jvm, "shipped"))
    with register_kms(spark, kms, name="shipped") as registration:
        token = registration._server.auth_token
        client = _java_client(jvm, "shipped")
        data = bytes(serialization.serializeToBytes(client))
        assert token.encode() in data  # the endpoint travels inside task data, for executors
        assert token not in str(client) and token not in repr(registration)
        copy = serialization.deserializeFromBytes(data)
        # In the JVM that registered the name, a copy never replaces the local registration.
        assert not jvm.io.pyicebergcrypto.bridge.PythonKmsRegistry.isInstalledFromDriver("shipped")
        assert kms.unwrap_key(_array(jvm, copy.wrapKey(_buffer(jvm, b"k" * 16), "m1")), "m1") == b"k" * 16
    assert token.encode() not in bytes(unregistered)  # serialized before registration: nothing to carry
    with pytest.raises(Exception, match="No Python KMS is registered under the name 'shipped'"):
        serialization.deserializeFromBytes(unregistered).wrapKey(_buffer(jvm, b"k" * 16), "m1")


def test_listen_address_is_loopback_unless_opted_in(spark, jvm):
    kms = InMemoryKms.with_random_keys("m1")
    with register_kms(spark, kms, name="loop") as registration:
        assert registration.address == "127.0.0.1"
        assert not registration.tls  # the channel never leaves the host


def test_any_other_listen_address_speaks_tls_with_a_pinned_certificate(spark, jvm):
    """The opt-in (here another loopback address, so the test opens no network port): TLS, and
    neither a silent nor a plaintext peer can stall the listener or reach the KMS."""
    kms = InMemoryKms.with_random_keys("m1")
    with register_kms(spark, kms, name="elsewhere", bind_address="127.0.0.2") as registration:
        assert registration.address == "127.0.0.2" and registration.tls
        silent = socket.create_connection(("127.0.0.2", registration.port), timeout=5)  # never speaks
        with socket.create_connection(("127.0.0.2", registration.port), timeout=5) as plain:
            server = registration._server
            plain.sendall(f"A\n{server.auth_token}\ne\nc\n{server.object_id}\nwrapKey\n"
                          "jQUFBQUFBQUFBQUFBQUFBQQ==\nsm1\ne\n".encode())
            assert b"!y" not in _read_some(plain)  # a plaintext Py4J client gets no answer
        client = _java_client(jvm, "elsewhere")
        assert kms.unwrap_key(_array(jvm, client.wrapKey(_buffer(jvm, b"k" * 16), "m1")), "m1") == b"k" * 16
        assert registration.stats.wrap == 1  # only the TLS client reached the KMS
        silent.close()

        # A JVM pinning another certificate (a listener impersonating the KMS) refuses to talk.
        other_certificate = TlsIdentity.fresh().certificate
        jvm.io.pyicebergcrypto.bridge.PythonKmsRegistry.register(
            "impostor", "127.0.0.2", registration.port, server.auth_token, server.object_id, 5000,
            base64.b64encode(other_certificate).decode())
        try:
            with pytest.raises(Exception) as excinfo:
                _java_client(jvm, "impostor").wrapKey(_buffer(jvm, b"k" * 16), "m1")
            assert "Python KMS 'impostor' failed to wrap a key with key id 'm1': the TLS handshake" in str(excinfo.value)
        finally:
            jvm.io.pyicebergcrypto.bridge.PythonKmsRegistry.unregister("impostor")
        assert registration.stats.wrap == 1
    # A wildcard listener tells executors the driver's host, which Spark already knows.
    assert _advertised_host(spark.sparkContext, "0.0.0.0") == spark.sparkContext.getConf().get("spark.driver.host")
    with pytest.raises(ValueError, match="bind_address"):
        register_kms(spark, kms, name="bad", bind_address="")


THREADS = 8
CALLS = 10_000


def test_ten_thousand_concurrent_calls_in_both_directions_leak_no_connection(spark, jvm):
    """Python threads call the Java client through the gateway (one JVM thread each), which calls
    back into Python through the KMS callback server: both directions of the bridge run at once."""
    kms = InMemoryKms.with_random_keys("m1")
    with register_kms(spark, kms, name="busy") as registration:
        client = _java_client(jvm, "busy")
        keys = [bytes([n]) * 16 for n in range(THREADS)]
        wrapped = [client.wrapKey(_buffer(jvm, key), "m1") for key in keys]
        before = registration.stats.snapshot()
        fds_before = len(os.listdir("/proc/self/fd"))
        wrong: list[str] = []
        start = threading.Barrier(THREADS)

        def work(index: int) -> None:
            start.wait()
            for _ in range(CALLS // THREADS):
                if _array(jvm, client.unwrapKey(wrapped[index], "m1")) != keys[index]:
                    wrong.append(f"thread {index} got another thread's key")

        threads = [threading.Thread(target=work, args=(i,)) for i in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
        assert not any(thread.is_alive() for thread in threads), "calls hung"
        assert wrong == []
        stats = registration.stats.since(before)
        assert (stats.unwrap, stats.errors) == (CALLS, 0)
        # At most one callback connection per concurrently calling JVM thread, all still reusable.
        assert len([c for c in registration._server._server.connections if c.is_alive()]) <= THREADS
        assert len(os.listdir("/proc/self/fd")) - fds_before <= 2 * THREADS + 4


def _read_some(sock) -> bytes:
    try:
        return sock.recv(4096)
    except (ConnectionResetError, socket.timeout, OSError):
        return b""
