"""Attacks on the AWS KMS face of a real ``kms serve`` process (loopback, bounded loops): the same
bounds as the Py4J face (connection cap, deadlines, bounded bodies and headers), and the face keeps
serving honest clients afterwards."""

from __future__ import annotations

import os
import socket
import ssl
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.serve.aws_face import FaceProcess
from tests.serve.service_process import make_keystore
from tests.testkit import eventually, load_factor

pytestmark = [pytest.mark.loopback]
CAP = 8


@pytest.fixture(scope="module")
def face(tmp_path_factory):
    keystore = make_keystore(tmp_path_factory.mktemp("attack-keys") / "keys.json", "k1")
    process = FaceProcess.start(tmp_path_factory.mktemp("attack-face"), keystore, metrics=True,
                                extra=["--aws-kms-api-max-connections", str(CAP)])
    try:
        yield process
    finally:
        process.stop()


def tls_socket(face) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=str(face.ca_file))
    return context.wrap_socket(socket.create_connection(("127.0.0.1", face.port), timeout=30),
                               server_hostname="127.0.0.1")


def closed_within(sock, seconds: float) -> float:
    """Seconds until the peer closed ``sock`` (reads and discards), or fail after ``seconds``
    (callers scale it with the load: it must outlast the bound they assert)."""
    started = time.monotonic()
    sock.settimeout(0.5)
    while time.monotonic() - started < seconds:
        try:
            if not sock.recv(65536):
                return time.monotonic() - started
        except socket.timeout:
            continue
        except (ConnectionError, ssl.SSLError, OSError):
            return time.monotonic() - started
    raise AssertionError(f"the face kept the connection open for {seconds} s")


def metric(face, sample: str) -> int:
    """The value of the face's metric line that starts with ``sample`` (a name and its labels)."""
    import urllib.request

    text = urllib.request.urlopen(face.metrics_url(), timeout=10).read().decode()
    line = next(line for line in text.splitlines() if line.startswith(f"pyiceberg_crypto_aws_kms_api_{sample} "))
    return int(float(line.split()[-1]))


def refused(face, reason: str) -> int:
    return metric(face, f'refused_total{{reason="{reason}"}}')


def honest_call_succeeds(face) -> bool:
    honest_call_works(face)
    return True


def honest_call_works(face) -> None:
    kms = face.client()
    secret = os.urandom(32)
    blob = kms.encrypt(KeyId="k1", Plaintext=secret)["CiphertextBlob"]
    assert kms.decrypt(CiphertextBlob=blob)["Plaintext"] == secret


def test_aws_face_connection_cap_evicts_the_oldest_silent_connection(face):
    """At the cap, a newcomer evicts the oldest connection that has sent nothing (silent ones cannot
    lock signed clients out); only when every held connection is mid-request is it refused."""
    held = [socket.create_connection(("127.0.0.1", face.port), timeout=10) for _ in range(CAP)]
    try:
        eventually(lambda: metric(face, "open_connections") == metric(face, "unsigned_connections")
                   == metric(face, "silent_connections") == CAP, 15, message=f"the face holding {CAP} silent connections")
        before = refused(face, "evicted")
        extra = socket.create_connection(("127.0.0.1", face.port), timeout=10)
        assert closed_within(held[0], 30) < 5 * load_factor()  # the oldest silent one made room
        eventually(lambda: refused(face, "evicted") == before + 1, 15, message="the eviction counted")
        extra.close()
    finally:
        for sock in held:
            sock.close()
    eventually(lambda: metric(face, "open_connections") == 0, 15, message="the held ones gone")
    # Every held connection mid-request (a byte of its head sent): none is silent, the newcomer is refused.
    speaking = [tls_socket(face) for _ in range(CAP)]
    try:
        for sock in speaking:
            sock.sendall(b"POST / HTTP/1.1\r\n")
        # The face has read a byte of each (a busy machine may take a moment): none is silent.
        eventually(lambda: metric(face, "silent_connections") == 0 and metric(face, "open_connections") == CAP, 15,
                   message=f"the face seeing {CAP} connections mid-request")
        before = refused(face, "connection-cap") + refused(face, "unsigned-cap") + refused(face, "peer-cap")
        extra = socket.create_connection(("127.0.0.1", face.port), timeout=10)
        assert closed_within(extra, 30) < 5 * load_factor()
        extra.close()
        assert refused(face, "connection-cap") + refused(face, "unsigned-cap") + refused(face, "peer-cap") \
            == before + 1
    finally:
        for sock in speaking:
            sock.close()
    eventually(lambda: honest_call_succeeds(face), 15, interval=0.2, message="an honest call after the cap")


def test_aws_face_handshake_and_request_deadlines(face):
    # The two deadlines run at once (one wait of ~10 s, not 5 + 10): the silent connection is
    # watched from a thread while the dribbler dribbles.
    silent = socket.create_connection(("127.0.0.1", face.port), timeout=10)  # never says hello
    watcher = ThreadPoolExecutor(1)
    try:
        silent_closed = watcher.submit(closed_within, silent, 60)
        dribbler = tls_socket(face)
        bound = 15 * load_factor()  # the 10 s request deadline, 60 s at most on a loaded machine
        start = time.monotonic()
        dribbler.settimeout(0.5)
        closed = False
        head = b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Dribble: " + b"a" * 200
        for byte in head:  # one byte every 0.2 s: never finishes (the head has no end) within the deadline
            try:
                dribbler.sendall(bytes([byte]))
                if dribbler.recv(1) == b"":
                    closed = True
                    break
            except socket.timeout:
                pass
            except (ConnectionError, ssl.SSLError, OSError):
                closed = True
                break
            if time.monotonic() - start > bound:
                break
            time.sleep(0.2)
        assert closed and time.monotonic() - start < bound
        dribbler.close()
        assert silent_closed.result(timeout=60) < 8 * load_factor()  # 5 s first-byte deadline (32 s at most when loaded)
    finally:
        silent.close()  # ends the watcher's reads if an assertion above failed
        watcher.shutdown()
    assert refused(face, "deadline") >= 1
    honest_call_works(face)


def test_aws_face_bounded_bodies_and_headers(face):
    sock = tls_socket(face)
    sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n")
    answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 413") and b"SerializationException" in answer  # before any body byte
    closed_within(sock, 5)
    sock.close()
    sock = tls_socket(face)
    sock.sendall(b"POST / HTTP/1.1\r\n" + b"X-Flood: " + b"f" * 20000 + b"\r\n\r\n")
    answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 431")
    sock.close()
    sock = tls_socket(face)
    sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    assert b"chunked" in sock.recv(65536)
    sock.close()
    sock = tls_socket(face)
    sock.sendall(b"GARBAGE\r\n\r\n")
    assert sock.recv(65536).startswith(b"HTTP/1.1 400")
    sock.close()
    assert refused(face, "body-too-large") >= 1 and refused(face, "headers-too-large") >= 1
    honest_call_works(face)


def test_aws_face_survives_a_burst_of_connections(face):
    for _ in range(5):  # bounded: 5 bursts of twice the cap, opened and dropped at once
        burst = [socket.create_connection(("127.0.0.1", face.port), timeout=10) for _ in range(2 * CAP)]
        for sock in burst:
            sock.close()
    eventually(lambda: honest_call_succeeds(face), 15, interval=0.2, message="an honest call after the bursts")
