"""The KMS bridge on its own: authentication, error surfacing, registration lifecycle."""

from __future__ import annotations

import base64
import io
import socket
import threading

import pytest

from pyiceberg_crypto.errors import SetupError
from pyiceberg_crypto.bridge import register_kms, registered
from pyiceberg_crypto.listener.sockets import LOOPBACK
from pyiceberg_crypto.bridge.py4j_server import read_params
from pyiceberg_crypto.kms import InMemoryKms

pytestmark = pytest.mark.spine  # the core path: make test also runs it on Spark 3.5


def _java_client(jvm, name):
    client = jvm.io.pyicebergcrypto.bridge.PythonKmsClient()
    client.initialize({"pyiceberg-crypto.kms-name": name})
    return client


def _buffer(jvm, data: bytes):
    return jvm.java.nio.ByteBuffer.wrap(data)


def _array(jvm, buffer) -> bytes:
    return bytes(jvm.org.apache.iceberg.util.ByteBuffers.toByteArray(buffer))


@pytest.fixture
def kms():
    return InMemoryKms.with_random_keys("m1")


def test_java_client_round_trips_through_python(spark, jvm, kms):
    with register_kms(spark, kms, name="roundtrip") as registration:
        client = _java_client(jvm, "roundtrip")
        secret = bytes(range(256))  # every byte value crosses Py4J intact
        wrapped = client.wrapKey(_buffer(jvm, secret), "m1")
        assert _array(jvm, wrapped) != secret
        assert kms.unwrap_key(_array(jvm, wrapped), "m1") == secret
        assert _array(jvm, client.unwrapKey(wrapped, "m1")) == secret
        assert (registration.stats.wrap, registration.stats.unwrap) == (1, 1)


def test_python_exception_reaches_java_with_operation_and_key_id(spark, jvm, kms):
    with register_kms(spark, kms, name="errors"):
        client = _java_client(jvm, "errors")
        with pytest.raises(Exception) as excinfo:
            client.wrapKey(_buffer(jvm, b"0" * 16), "no-such-key")
        message = str(excinfo.value)
        assert "PythonKmsException" in message
        assert "Python KMS 'errors' failed to wrap a key with key id 'no-such-key'" in message
        assert "UnknownKeyError: master key 'no-such-key' is not in this KMS" in message
        assert "Traceback" not in message


def test_missing_registration_names_the_call_to_make(spark, jvm):
    client = _java_client(jvm, "never-registered")  # initialize() must not need Python yet
    with pytest.raises(Exception) as excinfo:
        client.unwrapKey(_buffer(jvm, b"x" * 40), "m1")
    assert "register_kms(spark, kms, name='never-registered')" in str(excinfo.value)


def test_java_client_is_serializable_and_resolves_again(spark, jvm, kms):
    with register_kms(spark, kms, name="serial"):
        client = _java_client(jvm, "serial")
        serialization = jvm.org.apache.iceberg.util.SerializationUtil  # what Iceberg ships to executors
        data = serialization.serializeToBytes(client)
        assert b"roundtrip" not in bytes(data) and len(data) < 2048  # the name and endpoint, no KMS state
        copy = serialization.deserializeFromBytes(data)
        assert copy.kmsName() == "serial"
        wrapped = copy.wrapKey(_buffer(jvm, b"k" * 16), "m1")
        assert kms.unwrap_key(_array(jvm, wrapped), "m1") == b"k" * 16


def test_register_twice_is_safe_and_replacing_works(spark, kms):
    first = register_kms(spark, kms, name="twice")
    assert register_kms(spark, kms, name="twice") is first  # same KMS: same registration
    other = InMemoryKms.with_random_keys("m1")
    second = register_kms(spark, other, name="twice")  # different KMS: replaces
    assert not first.active and second.active and registered("twice") is second
    second.close()
    second.close()  # idempotent
    assert registered("twice") is None


def test_listener_is_loopback_and_refuses_unauthenticated_calls(spark, jvm, kms):
    with register_kms(spark, kms, name="locked") as registration:
        assert registration._server.address == LOOPBACK
        wrapped = kms.wrap_key(b"s" * 16, "m1")
        call = f"c\n{registration._server.object_id}\nunwrapKey\nj{__import__('base64').b64encode(wrapped).decode()}\nsm1\ne\n"

        # 1. No auth command at all: the server drops the connection without running the call.
        with socket.create_connection((LOOPBACK, registration.port), timeout=5) as sock:
            sock.sendall(call.encode())
            assert _read_all(sock) in (b"", None)

        # 2. A wrong token: an error reply, then the connection is closed.
        with socket.create_connection((LOOPBACK, registration.port), timeout=5) as sock:
            sock.sendall(b"A\n" + b"0" * 64 + b"\ne\n" + call.encode())
            assert _read_all(sock) in (b"!xn\n", b"", None)  # py4j's auth error, then closed

        assert registration.stats.unwrap == 0  # the KMS was never reached

        # 3. The real JVM client (which holds the token) still works.
        client = _java_client(jvm, "locked")
        assert _array(jvm, client.unwrapKey(_buffer(jvm, wrapped), "m1")) == b"s" * 16
        assert registration.stats.unwrap == 1


def test_only_allow_listed_methods_are_callable(spark, jvm, kms):
    """Even an authenticated peer can reach only the four KMS methods, not arbitrary attributes."""
    with register_kms(spark, kms, name="allow") as registration:
        server = registration._server
        with socket.create_connection((LOOPBACK, registration.port), timeout=5) as sock:
            sock.sendall(f"A\n{server.auth_token}\ne\n".encode())
            assert sock.recv(64).startswith(b"!y")  # authenticated
            sock.sendall(f"c\n{server.object_id}\n__init__\ne\n".encode())
            reply = sock.recv(4096)
            assert reply.startswith(b"!x") and b"PermissionError" in reply


def test_close_returns_promptly_and_calls_then_fail_fast(spark, jvm, kms):
    registration = register_kms(spark, kms, name="closing")
    client = _java_client(jvm, "closing")
    client.wrapKey(_buffer(jvm, b"k" * 16), "m1")  # opens a live connection
    closer = threading.Thread(target=registration.close)
    closer.start()
    closer.join(timeout=20)
    assert not closer.is_alive(), "closing the registration hung"
    with pytest.raises(Exception, match="No Python KMS is registered under the name 'closing'"):
        client.wrapKey(_buffer(jvm, b"k" * 16), "m1")


def test_register_rejects_non_kms_and_bad_arguments(spark):
    with pytest.raises(TypeError, match="wrap_key"):
        register_kms(spark, object(), name="bad")
    with pytest.raises(ValueError, match="kms_timeout"):
        register_kms(spark, InMemoryKms.with_random_keys("a"), name="bad", kms_timeout=0)
    with pytest.raises(SetupError, match="SparkSession"):
        register_kms(object(), InMemoryKms.with_random_keys("a"), name="bad")


def _read_all(sock) -> bytes | None:
    chunks = []
    try:
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                break
            chunks.append(chunk)
    except (ConnectionResetError, socket.timeout):
        if not chunks:
            return None
    return b"".join(chunks)


class GeneratingKms(InMemoryKms):
    def supports_key_generation(self) -> bool:
        return True

    def generate_key(self, wrapping_key_id):
        from pyiceberg_crypto.kms import KeyGenerationResult

        key = bytes(range(32))
        return KeyGenerationResult(key, self.wrap_key(key, wrapping_key_id))


def test_key_generation_is_delegated(spark, jvm):
    kms = GeneratingKms.with_random_keys("m1")
    with register_kms(spark, kms, name="gen") as registration:
        client = _java_client(jvm, "gen")
        assert client.supportsKeyGeneration() is True
        result = client.generateKey("m1")
        assert _array(jvm, result.key()) == bytes(range(32))
        assert kms.unwrap_key(_array(jvm, result.wrappedKey()), "m1") == bytes(range(32))
        assert registration.stats.generate == 1
    with register_kms(spark, InMemoryKms.with_random_keys("m1"), name="nogen"):
        assert _java_client(jvm, "nogen").supportsKeyGeneration() is False


class SlowKms(InMemoryKms):
    def unwrap_key(self, wrapped, wrapping_key_id):
        import time

        time.sleep(3)  # the behaviour under test: a KMS slower than the bridge's timeout (1 s)
        return super().unwrap_key(wrapped, wrapping_key_id)


def test_a_kms_call_that_exceeds_the_timeout_fails_instead_of_hanging(spark, jvm):
    kms = SlowKms.with_random_keys("m1")
    with register_kms(spark, kms, name="slow", kms_timeout=1):
        client = _java_client(jvm, "slow")
        wrapped = client.wrapKey(_buffer(jvm, b"k" * 16), "m1")
        with pytest.raises(Exception) as excinfo:
            client.unwrapKey(wrapped, "m1")
        message = str(excinfo.value)
        assert "Python KMS 'slow' failed to unwrap a key with key id 'm1'" in message
        assert "no answer from the Python KMS within its timeout" in message


def test_call_parameters_are_decoded_as_py4j_encodes_them_and_references_are_refused():
    """The bridge's own decoder of Py4J call parameters (the KMS protocol: byte arrays, strings)."""
    key = bytes(range(256))
    stream = io.BytesIO(("j" + base64.b64encode(key).decode() + "\n" + "skey\\nid\n" + "e\n" + "snext call\n").encode())
    assert read_params(stream) == [key, "key\nid"]
    assert stream.readline() == b"snext call\n"  # stopped at the end marker
    # Only byte arrays and strings: an integer would become bytes(n) (i500000000: 500 MB).
    for other in ("i500000000", "L7", "n", "btrue", "d1.5"):
        stream = io.BytesIO(f"{other}\nsid\ne\nafter\n".encode())
        with pytest.raises(TypeError, match=f"type '{other[0]}' is not part of the KMS protocol"):
            read_params(stream)
        assert stream.readline() == b"after\n"
    stream = io.BytesIO(b"ro123\nsid\ne\nafter\n")
    with pytest.raises(TypeError, match="type 'r' is not part of the KMS protocol"):
        read_params(stream)
    assert stream.readline() == b"after\n"  # the refused call was read to its end: still in step
    with pytest.raises(EOFError):
        read_params(io.BytesIO(b"sid\n"))
