"""``kms serve``'s monitoring endpoint: Prometheus metrics and a health check over HTTP.

    server = MetricsServer(service, "127.0.0.1", 9601, health_key_id="canary")
    # GET /metrics  -> Prometheus text (version 0.0.4)
    # GET /healthz  -> 200 "ok ..." or 503 "unhealthy: <reason>", a canary wrap/unwrap through the KMS
    server.close()

Metrics (no secrets, no per-client labels: a fleet of executors would make the series unbounded):

=================================================  ==========================================================
``pyiceberg_crypto_kms_calls_total{operation}``    finished KMS calls (``wrap``, ``unwrap``, ``generate``, ...)
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
from typing import TYPE_CHECKING

from pyiceberg_crypto.bridge.adapter import LATENCY_BUCKETS
from pyiceberg_crypto.bridge.service import RateLimitedLog
from pyiceberg_crypto.errors import PyicebergCryptoError
from pyiceberg_crypto.kms._loopback import is_loopback_host as is_loopback  # kms serve --metrics checks it too

if TYPE_CHECKING:
    from pyiceberg_crypto.bridge.service import KmsService

PREFIX = "pyiceberg_crypto_kms"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: The reason a connection carrying a wrong or old token is refused (callback_server).
WRONG_TOKEN = "wrong or old token"
#: Open connections to the metrics port at most (scrapers and probes need a few); more are closed.
MAX_CONNECTIONS = 16
#: A request (line and headers) must arrive whole within this; each read and write is bounded too.
REQUEST_DEADLINE_SECONDS = 5.0

log = logging.getLogger(__name__)


class MetricsAddressError(PyicebergCryptoError, ValueError):
    """The metrics port was asked to listen beyond loopback without ``allow_remote``."""


def _label(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render_metrics(service: KmsService) -> str:
    """The service's counters in Prometheus text format."""
    status = service.status()
    lines: list[str] = []

    def family(name: str, kind: str, help_text: str) -> None:
        lines.append(f"# HELP {PREFIX}_{name} {help_text}")
        lines.append(f"# TYPE {PREFIX}_{name} {kind}")

    operations = service.operation_stats()
    family("calls_total", "counter", "KMS calls finished, per operation.")
    for name, op in operations.items():
        lines.append(f'{PREFIX}_calls_total{{operation="{name}"}} {op.calls}')
    family("failures_total", "counter", "KMS calls that failed, per operation.")
    for name, op in operations.items():
        lines.append(f'{PREFIX}_failures_total{{operation="{name}"}} {op.failures}')
    family("calls_in_flight", "gauge", "KMS calls running now, per operation.")
    for name, op in operations.items():
        lines.append(f'{PREFIX}_calls_in_flight{{operation="{name}"}} {op.in_flight}')
    family("call_duration_seconds", "histogram", "Time spent in the Python KMS per call, per operation.")
    for name, op in operations.items():
        cumulative = 0
        for bound, count in zip(LATENCY_BUCKETS, op.buckets):
            cumulative += count
            lines.append(f'{PREFIX}_call_duration_seconds_bucket{{operation="{name}",le="{bound:g}"}} {cumulative}')
        lines.append(f'{PREFIX}_call_duration_seconds_bucket{{operation="{name}",le="+Inf"}} {sum(op.buckets)}')
        lines.append(f'{PREFIX}_call_duration_seconds_sum{{operation="{name}"}} {op.total_seconds:.6f}')
        lines.append(f'{PREFIX}_call_duration_seconds_count{{operation="{name}"}} {sum(op.buckets)}')
    connections = status.get("connections", {})
    family("connected_clients", "gauge", "Open connections (authenticated or still authenticating).")
    lines.append(f"{PREFIX}_connected_clients {connections.get('open', 0)}")
    family("unauthenticated_connections", "gauge", "Connections still authenticating.")
    lines.append(f"{PREFIX}_unauthenticated_connections {connections.get('unauthenticated', 0)}")
    family("max_connections", "gauge", "The cap on open connections (kms serve --max-connections).")
    lines.append(f"{PREFIX}_max_connections {status['limits']['max_connections']}")
    reasons = status.get("refused_reasons", {})
    family("refused_connections_total", "counter", "Connections refused, per reason.")
    for reason, count in sorted(reasons.items()):
        lines.append(f'{PREFIX}_refused_connections_total{{reason="{_label(reason)}"}} {count}')
    family("refused_tokens_total", "counter", "Connections refused for a wrong or old token.")
    lines.append(f"{PREFIX}_refused_tokens_total {reasons.get(WRONG_TOKEN, 0)}")
    family("idle_closed_total", "counter", "Authenticated connections closed after --idle-timeout without a call.")
    lines.append(f"{PREFIX}_idle_closed_total {connections.get('idle_closed', 0)}")
    family("reloads_total", "counter", "KMS rebuilds (SIGHUP).")
    lines.append(f"{PREFIX}_reloads_total {status.get('reloads', 0)}")
    health = service.health_counts()
    family("health_checks_total", "counter", "Canary wrap/unwrap runs of /healthz, per result.")
    for result in ("ok", "failed"):
        lines.append(f'{PREFIX}_health_checks_total{{result="{result}"}} {health.get(result, 0)}')
    family("up", "gauge", "1 while the listener accepts connections.")
    lines.append(f"{PREFIX}_up {int(bool(status.get('accepting')))}")
    extra = "".join(source() for source in getattr(service, "metric_sources", ()))  # e.g. the AWS KMS face
    return "\n".join(lines) + "\n" + extra


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _MetricsHttpServer

    timeout = REQUEST_DEADLINE_SECONDS  # each read and write (socketserver's StreamRequestHandler)
    #: A malformed request line is answered with a status line and headers, not HTTP/0.9's bare body.
    default_request_version = "HTTP/1.0"

    def do_GET(self):  # noqa: N802 - http.server's name
        self.server.request_read(self.connection)  # the canary may take longer than the deadline
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._answer(200, render_metrics(self.server.service), CONTENT_TYPE)
        elif path in ("/healthz", "/health"):
            ok, reason = self.server.service.health(self.server.health_key_id, self.server.health_interval)
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
    service: KmsService
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
    """``/metrics`` and ``/healthz`` of a :class:`~pyiceberg_crypto.bridge.service.KmsService` over HTTP.

    Args:
        service: the running service. host, port: where to listen (port 0: a free one).
        health_key_id: the key id of the canary wrap/unwrap (None: ``/healthz`` checks the listener only).
        health_interval: the canary runs at most once per this many seconds.
        allow_remote: listen on an address other than loopback (anyone who reaches it reads the
            counters and can run the canary); without it such an address raises
            :class:`MetricsAddressError`. With it, the address is logged as a warning.
    """

    def __init__(self, service: KmsService, host: str, port: int, *, health_key_id: str | None = None,
                 health_interval: float = 5.0, allow_remote: bool = False):
        if not is_loopback(host):
            if not allow_remote:
                raise MetricsAddressError(
                    f"the metrics port would listen on {host}, beyond loopback: anyone who reaches it reads the "
                    "service's counters and can run the health canary; use 127.0.0.1 (and a local scraper or a "
                    "proxy), or allow it explicitly (kms serve --metrics-allow-remote)")
            log.warning("metrics port listening on %s, beyond loopback (--metrics-allow-remote): no "
                        "authentication, no TLS; restrict who can reach it", host)
        self._http = _MetricsHttpServer((host, port), _Handler)
        self._http.service = service
        self._http.health_key_id = health_key_id
        self._http.health_interval = health_interval
        self.host = host
        self.port = self._http.server_address[1]
        self._thread = threading.Thread(target=self._http.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="kms-metrics", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def close(self) -> None:
        self._http.shutdown()
        self._http.server_close()
