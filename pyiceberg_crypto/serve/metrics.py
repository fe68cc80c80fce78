"""``kms serve``'s monitoring endpoint: Prometheus metrics and a health check over HTTP.

    server = MetricsServer([py4j_face, aws_face], "127.0.0.1", 9601, health_key_id="canary")
    # GET /metrics  -> Prometheus text (version 0.0.4)
    # GET /healthz  -> 200 "ok ..." or 503 "unhealthy: <reason>", a canary wrap/unwrap through the KMS
    server.close()

Metrics (no secrets, no per-client-address labels: a fleet of executors would make the series
unbounded; the ``principal`` label takes only the principals the policy names, else ``unknown``):

=================================================  ==========================================================
``pyiceberg_crypto_kms_calls_total{face,principal,operation}`` KMS operations of every face (``py4j``,
                                                   ``aws``) per principal (``aws:SECTION``, ``py4j:NAME``,
                                                   ``unknown``): ``wrap``, ``unwrap``, ``generate``, ``describe``
``pyiceberg_crypto_kms_refused_operations_total{face,operation,reason}`` refused by the policy, for an
                                                   unknown key, or because the audit trail could not record
``pyiceberg_crypto_kms_audit_write_failures_total`` audit lines that could not be written (fail closed)
``pyiceberg_crypto_kms_audit_witness_failures_total`` signed digests the audit witness could not take (retried)
``pyiceberg_crypto_kms_py4j_calls_total{operation}`` Py4J calls finished (``initialize`` too)
``pyiceberg_crypto_kms_failures_total{operation}`` calls that failed
``pyiceberg_crypto_kms_call_duration_seconds``     histogram per operation (time in the Python KMS)
``pyiceberg_crypto_kms_calls_in_flight{operation}`` calls running now (a hung KMS shows here)
``pyiceberg_crypto_kms_connected_clients``         open connections (authenticated and not yet)
``pyiceberg_crypto_kms_unauthenticated_connections`` connections still authenticating
``pyiceberg_crypto_kms_max_connections``           the configured cap
``pyiceberg_crypto_kms_refused_connections_total{reason}`` refusals, by reason (wrong token, caps, ...)
``pyiceberg_crypto_kms_refused_tokens_total``      refusals for a wrong or old token
``pyiceberg_crypto_kms_idle_closed_total``         authenticated connections closed for idling
``pyiceberg_crypto_kms_reloads_total``             KMS rebuilds (SIGHUP)
``pyiceberg_crypto_kms_health_checks_total{result}`` canary wrap/unwrap runs (``ok`` / ``failed``)
``pyiceberg_crypto_kms_up``                        1 while the listener accepts connections
=================================================  ==========================================================

The health check runs at most once per ``health_interval`` seconds (probes in between get the
last answer, so a probe storm never becomes a KMS storm); its answer names the key id and the
reason of a failure in the words clients get (no key bytes, no KMS endpoint detail).

The port is bounded like the KMS listener: at most :data:`MAX_CONNECTIONS` connections (more are
closed at once), a request must arrive whole within :data:`REQUEST_DEADLINE_SECONDS`, and a peer
that breaks off (a reset before the answer) costs one rate-limited log line, never a traceback. It
listens on loopback unless ``allow_remote`` (``kms serve --metrics-allow-remote``) says otherwise.
"""

from __future__ import annotations

import contextlib
import http.server
import logging
import socket
import sys
import threading
import time
from collections.abc import Sequence
from typing import Protocol

from pyiceberg_crypto._net import is_loopback_host, listen_address
from pyiceberg_crypto._prometheus import CONTENT_TYPE
from pyiceberg_crypto.errors import PyicebergCryptoError
from pyiceberg_crypto.serve.served_kms import RateLimitedLog

__all__ = ["CONTENT_TYPE", "Face", "MetricsAddressError", "MetricsServer", "faces_health", "render_metrics"]


class Face(Protocol):
    """What the metrics port asks of a face (:class:`~pyiceberg_crypto.serve.py4j.Py4jFace`,
    :class:`~pyiceberg_crypto.serve.aws.api.AwsKmsApi`); the first one also answers :meth:`health`."""

    name: str

    @property
    def accepting(self) -> bool: ...

    @property
    def endpoint(self) -> str: ...

    def render_metrics(self) -> str: ...

    def health(self, key_id: str | None, max_age: float) -> tuple[bool, str]: ...


#: Open connections to the metrics port at most (scrapers and probes need a few); more are closed.
MAX_CONNECTIONS = 16
#: A request (line and headers) must arrive whole within this; each read and write is bounded too.
REQUEST_DEADLINE_SECONDS = 5.0

log = logging.getLogger(__name__)


class MetricsAddressError(PyicebergCryptoError, ValueError):
    """The metrics port was asked to listen beyond loopback without ``allow_remote``."""


def render_metrics(faces: Sequence[Face]) -> str:
    """Every face's counters in Prometheus text format, one after the other, then the served KMS's
    (calls of every face, refusals, the audit trail), once."""
    text = "".join(face.render_metrics() for face in faces)
    served = getattr(faces[0], "served", None) if faces else None
    if served is not None and hasattr(served, "render_metrics"):
        text += served.render_metrics()
    return text


def faces_health(faces: Sequence[Face], key_id: str | None, max_age: float) -> tuple[bool, str]:
    """(healthy, reason): the first face's health (its listener and the canary through the served
    KMS), then every other face accepting connections."""
    healthy, reason = faces[0].health(key_id, max_age)
    if healthy:
        for face in faces[1:]:
            if not face.accepting:
                return False, f"the {face.name} face on {face.endpoint} is not accepting connections"
    return healthy, reason


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _MetricsHttpServer

    timeout = REQUEST_DEADLINE_SECONDS  # each read and write (socketserver's StreamRequestHandler)
    #: A malformed request line is answered with a status line and headers, not HTTP/0.9's bare body.
    default_request_version = "HTTP/1.0"

    def do_GET(self):  # noqa: N802 - http.server's name
        self.server.request_read(self.connection)  # the canary may take longer than the deadline
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._answer(200, render_metrics(self.server.faces), CONTENT_TYPE)
        elif path in ("/healthz", "/health"):
            ok, reason = faces_health(self.server.faces, self.server.health_key_id, self.server.health_interval)
            self._answer(200 if ok else 503, ("ok: " if ok else "unhealthy: ") + reason + "\n")
        else:
            self._answer(404, "not found: GET /metrics or /healthz\n")

    def _answer(self, status: int, body: str, content_type: str = "text/plain; charset=utf-8") -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:  # scrapes every few seconds: not worth a log line each
        pass


class _MetricsHttpServer(http.server.ThreadingHTTPServer):
    """The HTTP server with a connection cap, a whole-request deadline (reaped in
    ``service_actions``, which ``serve_forever`` calls each poll) and one-line, rate-limited errors."""

    daemon_threads = True
    request_queue_size = 64
    faces: tuple[Face, ...]
    health_key_id: str | None
    health_interval: float

    def server_activate(self) -> None:
        super().server_activate()
        self.errors = RateLimitedLog(log)
        self._book = threading.Lock()
        self._open = 0
        self._reading: dict[socket.socket, float] = {}  # connections still sending their request -> deadline

    def process_request(self, request, client_address) -> None:
        """Admit ``request``; at the cap, close the oldest connection still sending its request to
        make room (idle sockets cannot keep a scraper out), and refuse only when every slot is
        answering, or the closed ones have not ended yet (at most twice the cap in threads)."""
        evicted = None
        with self._book:
            full = self._open >= MAX_CONNECTIONS
            if full and self._reading and self._open < 2 * MAX_CONNECTIONS:
                evicted = next(iter(self._reading))
                del self._reading[evicted]
                full = False
            if not full:
                self._open += 1
                self._reading[request] = time.monotonic() + REQUEST_DEADLINE_SECONDS
        if evicted is not None:
            with contextlib.suppress(OSError):
                evicted.shutdown(socket.SHUT_RDWR)
        if full:
            self.errors.warning("metrics-cap", "metrics port: refused a connection from %s: %d connections open "
                                "(cap %d)", _peer(client_address), MAX_CONNECTIONS, MAX_CONNECTIONS)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:  # no thread for it: give the slot back
            self._release(request)
            self.shutdown_request(request)
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release(request)

    def request_read(self, request) -> None:
        with self._book:
            self._reading.pop(request, None)

    def _release(self, request) -> None:
        with self._book:
            self._reading.pop(request, None)
            self._open -= 1

    def service_actions(self) -> None:
        now = time.monotonic()
        with self._book:
            overdue = [sock for sock, deadline in self._reading.items() if deadline <= now]
            for sock in overdue:
                del self._reading[sock]
        for sock in overdue:  # its thread's read fails at once, the thread ends
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request, client_address) -> None:
        problem = sys.exc_info()[1]
        self.errors.warning("metrics-error", "metrics port: a request from %s ended early: %s",
                            _peer(client_address), f"{type(problem).__name__}: {problem}".replace("\n", " "))


def _peer(client_address) -> str:
    return str(client_address[0]) if isinstance(client_address, tuple) and client_address else "?"


class MetricsServer:
    """``/metrics`` and ``/healthz`` of the running faces of ``kms serve`` over HTTP.

    Args:
        faces: the running faces, the Py4J face first (its health is the service's).
        host, port: where to listen (port 0: a free one).
        health_key_id: the key id of the canary wrap/unwrap (None: ``/healthz`` checks the listener only).
        health_interval: the canary runs at most once per this many seconds.
        allow_remote: listen on an address other than loopback (anyone who reaches it reads the
            counters and can run the canary); without it such an address raises
            :class:`MetricsAddressError`. With it, the address is logged as a warning.
    """

    def __init__(self, faces: Sequence[Face], host: str, port: int, *, health_key_id: str | None = None,
                 health_interval: float = 5.0, allow_remote: bool = False):
        if not is_loopback_host(host):
            if not allow_remote:
                raise MetricsAddressError(
                    f"the metrics port would listen on {host}, beyond loopback: anyone who reaches it reads the "
                    "service's counters and can run the health canary; use 127.0.0.1 (and a local scraper or a "
                    "proxy), or allow it explicitly (kms serve --metrics-allow-remote)")
            log.warning("metrics port listening on %s, beyond loopback (--metrics-allow-remote): no "
                        "authentication, no TLS; restrict who can reach it", host)
        self._http = _MetricsHttpServer((host, port), _Handler)
        self._http.faces = tuple(faces)
        self._http.health_key_id = health_key_id
        self._http.health_interval = health_interval
        self.host = host
        self.port = self._http.server_address[1]
        self._thread = threading.Thread(target=self._http.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="kms-metrics", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return listen_address(self.host, self.port)

    def close(self) -> None:
        self._http.shutdown()
        self._http.server_close()
