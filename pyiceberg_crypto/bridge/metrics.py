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
``pyiceberg_crypto_kms_reloads_total``             KMS rebuilds (SIGHUP)
``pyiceberg_crypto_kms_health_checks_total{result}`` canary wrap/unwrap runs (``ok`` / ``failed``)
``pyiceberg_crypto_kms_up``                        1 while the listener accepts connections
=================================================  ==========================================================

The health check runs at most once per ``health_interval`` seconds (probes in between get the
last answer, so a probe storm never becomes a KMS storm); its answer names the key id and the
reason of a failure in the words clients get (no key bytes, no KMS endpoint detail).
"""

from __future__ import annotations

import http.server
import threading
from typing import TYPE_CHECKING

from pyiceberg_crypto.bridge.adapter import LATENCY_BUCKETS

if TYPE_CHECKING:
    from pyiceberg_crypto.bridge.service import KmsService

PREFIX = "pyiceberg_crypto_kms"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: The reason a connection carrying a wrong or old token is refused (callback_server).
WRONG_TOKEN = "wrong or old token"


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

    def do_GET(self):  # noqa: N802 - http.server's name
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
    daemon_threads = True
    service: KmsService
    health_key_id: str | None
    health_interval: float


class MetricsServer:
    """``/metrics`` and ``/healthz`` of a :class:`~pyiceberg_crypto.bridge.service.KmsService` over HTTP.

    Args:
        service: the running service. host, port: where to listen (port 0: a free one).
        health_key_id: the key id of the canary wrap/unwrap (None: ``/healthz`` checks the listener only).
        health_interval: the canary runs at most once per this many seconds.
    """

    def __init__(self, service: KmsService, host: str, port: int, *, health_key_id: str | None = None,
                 health_interval: float = 5.0):
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
