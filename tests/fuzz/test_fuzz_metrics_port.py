"""Fuzz target for ``kms serve``'s metrics/health port (issue 39 item 6): whatever a peer sends
(request lines, headers, binary, a reset before the answer), the port answers with an HTTP status
line or closes, within the harness's bounds, never writes a traceback, and still answers a scrape
afterwards. No Spark: the service and its metrics port run in this process."""

from __future__ import annotations

import logging
import socket
import struct
import urllib.request

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyiceberg_crypto.serve.metrics import MetricsServer
from pyiceberg_crypto.serve.py4j import Py4jFace
from pyiceberg_crypto.serve.served_kms import ServedKms
from pyiceberg_crypto.kms import InMemoryKms
from tests.fuzz.conftest import fuzz_settings
from tests.fuzz.harness import bounded


class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture(scope="module")
def metrics(tmp_path_factory):
    directory = tmp_path_factory.mktemp("metrics-fuzz")
    service = Py4jFace(ServedKms(lambda: InMemoryKms.with_random_keys("m1")), token_file=directory / "kms.token",
                       listen="127.0.0.1:0")
    records = _Records()
    logger = logging.getLogger("pyiceberg_crypto.serve.metrics")
    logger.addHandler(records)
    with service:
        server = MetricsServer([service], "127.0.0.1", 0, health_key_id="m1", health_interval=0.0)
        server.records = records
        try:
            yield server
        finally:
            server.close()
            logger.removeHandler(records)


_METHODS = st.sampled_from(["GET", "POST", "HEAD", "PUT", "get", "", "G\x00T", "CONNECT"])
_PATHS = st.one_of(st.sampled_from(["/metrics", "/healthz", "/health", "/", "*", "/metrics?x=1", "//x"]),
                   st.text(max_size=80).map(lambda t: "/" + t.replace("\r", "").replace("\n", "")))
_VERSIONS = st.sampled_from(["HTTP/1.0", "HTTP/1.1", "HTTP/2.0", "HTTP/9", "", "HTTP/1.1 extra"])
_HEADER = st.tuples(st.text("abcXyz-\x00:", max_size=20), st.text(max_size=60)).map(
    lambda kv: f"{kv[0]}: {kv[1]}".replace("\r", "").replace("\n", ""))
_REQUEST = st.builds(
    lambda method, path, version, headers, end: (
        f"{method} {path} {version}\r\n" + "".join(h + "\r\n" for h in headers) + ("\r\n" if end else "")
    ).encode("utf-8", "surrogatepass"),
    _METHODS, _PATHS, _VERSIONS, st.lists(_HEADER, max_size=8), st.booleans())
_BODY = st.one_of(_REQUEST, st.binary(max_size=4096),
                  st.integers(60_000, 70_000).map(lambda n: b"GET /" + b"a" * n + b" HTTP/1.0\r\n\r\n"))


def _session(port: int, body: bytes, reset: bool) -> bytes:
    sock = socket.create_connection(("127.0.0.1", port), timeout=8)
    received = bytearray()
    try:
        try:
            sock.sendall(body)
            if reset:  # gone before the answer: the port must not log a traceback for it
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                return b""
            sock.shutdown(socket.SHUT_WR)
            while chunk := sock.recv(65536):
                received += chunk
        except OSError:
            pass
        return bytes(received)
    finally:
        sock.close()


@fuzz_settings(1.0)
@given(body=_BODY, reset=st.booleans())
def test_any_request_gets_an_http_answer_or_a_close_and_no_traceback(metrics, body, reset):
    received = bounded(lambda: _session(metrics.port, body, reset))
    assert received == b"" or received.startswith(b"HTTP/"), received[:200]
    assert not [r for r in metrics.records.records if r.exc_info], "a traceback was logged"
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with direct.open(f"http://{metrics.address}/metrics", timeout=8) as response:
        assert response.status == 200 and b"pyiceberg_crypto_kms_up 1" in response.read()
