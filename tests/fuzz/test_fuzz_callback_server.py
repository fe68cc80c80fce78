"""Fuzz target for the KMS callback server's parser (issue 35 item 6): whatever a peer sends,
before or after authenticating, the listener answers only well-formed Py4J lines or closes, within
the bounds of the harness (10 s, 256 MiB peak traced allocation, the server's threads included);
nothing unauthenticated reaches the KMS; and the accept loop still serves a legitimate call after
every case. Same profiles as the rest of tests/fuzz (``make test``: short and fixed; ``make fuzz``:
long and random). No Spark: the server runs in this process (``kms serve``'s and ``register_kms``'s
listener code), so it needs no table either."""

from __future__ import annotations

import base64
import socket

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyiceberg_crypto.bridge.adapter import KmsCallbackAdapter
from pyiceberg_crypto.bridge.callback_server import KmsCallbackServer
from pyiceberg_crypto.bridge.py4j_server import ConnectionLimits
from pyiceberg_crypto.kms import InMemoryKms
from tests.fuzz.conftest import fuzz_settings
from tests.fuzz.harness import bounded
from tests.serve.raw_client import RawClient

KEY = b"k" * 16


class CountingKms(InMemoryKms):
    calls = 0

    def wrap_key(self, key, wrapping_key_id):
        CountingKms.calls += 1
        return super().wrap_key(key, wrapping_key_id)

    def unwrap_key(self, wrapped, wrapping_key_id):
        CountingKms.calls += 1
        return super().unwrap_key(wrapped, wrapping_key_id)


@pytest.fixture(scope="module")
def server():
    kms = CountingKms.with_random_keys("m1")
    listener = KmsCallbackServer(KmsCallbackAdapter(kms, initialize_policy="operator"), object_id="kms",
                                 limits=ConnectionLimits(auth_deadline_seconds=1.0))
    listener.kms = kms
    try:
        yield listener
    finally:
        listener.close()


_TYPES = st.sampled_from(["j", "s", "i", "L", "n", "b", "d", "r", "l", "", "x", "\x00", "é"])
_VALUES = st.one_of(
    st.just(base64.b64encode(KEY).decode()), st.just("m1"), st.just("500000000"), st.just("-1"),
    st.text(max_size=40), st.integers(60_000, 70_000).map(lambda n: "A" * n),
    st.binary(max_size=30).map(lambda b: base64.b64encode(b).decode()),
)
_PARAM = st.tuples(_TYPES, _VALUES).map(lambda tv: tv[0] + tv[1].replace("\n", ""))
_METHOD = st.sampled_from(["wrapKey", "unwrapKey", "generateKey", "supportsKeyGeneration", "initialize",
                           "__init__", "kms", "", "wrapKey\x00"])
_CALL = st.builds(
    lambda command, obj, method, params, end: "\n".join([command, obj, method, *params] + (["e"] if end else [])) + "\n",
    st.sampled_from(["c", "c", "g", "A", "", "q"]), st.sampled_from(["kms", "kms", "", "other", "kms\x00"]),
    _METHOD, st.lists(_PARAM, max_size=6), st.booleans())
_BODY = st.one_of(
    st.lists(_CALL, min_size=1, max_size=4).map(lambda calls: "".join(calls).encode("utf-8", "surrogatepass")),
    st.binary(max_size=2048),
    st.builds(lambda head, tail: head + tail, st.lists(_CALL, max_size=2).map(lambda c: "".join(c).encode()),
              st.binary(max_size=512)),
)


def _session(server, auth: str, body: bytes) -> tuple[bool, bytes]:
    """One connection: authenticate as ``auth`` says, send ``body``, half-close, read to the end."""
    client = RawClient("127.0.0.1", server.port, timeout=8)
    authenticated = False
    try:
        if auth == "handshake":
            authenticated = client.handshake(server.auth_token) == b"!yv"
        elif auth == "A":
            authenticated = client.auth(server.auth_token) == b"!yv"
        elif auth == "A-wrong":
            client.sock.sendall(b"A\n" + b"0" * 64 + b"\ne\n")
        try:
            client.sock.sendall(body)
            client.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        received = bytearray()
        try:
            while chunk := client.sock.recv(65536):
                received += chunk
        except (ConnectionResetError, OSError):
            pass
        return authenticated, bytes(received)
    finally:
        client.close()


@fuzz_settings(2.0)
@given(auth=st.sampled_from(["handshake", "A", "A-wrong", "none"]), body=_BODY)
def test_any_input_gets_well_formed_answers_within_bounds(server, auth, body):
    before = CountingKms.calls
    authenticated, received = bounded(lambda: _session(server, auth, body))
    if not authenticated:
        assert CountingKms.calls == before, "an unauthenticated peer reached the KMS"
        assert received in (b"", b"!xn\n"), received[:200]
    for line in received.split(b"\n")[:-1]:
        assert line[:2] in (b"!y", b"!x"), line[:200]
    # The listener is still there for a legitimate client.
    assert server.accepting
    with RawClient("127.0.0.1", server.port, timeout=8) as legit:
        assert legit.handshake(server.auth_token) == b"!yv"
        assert server.kms.unwrap_key(RawClient.bytes_of(legit.call("wrapKey", KEY, "m1", object_id="kms")), "m1") == KEY
