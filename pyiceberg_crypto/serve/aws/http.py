"""The AWS JSON 1.1 protocol's HTTP/1.1 listener, bounded: what the AWS KMS face answers requests on.

A :class:`JsonHttpListener` accepts connections (TLS when it has an identity), reads one request at
a time with bounded headers and body, calls :meth:`JsonHttpListener.handle` (the API's part,
:mod:`.api`) and writes its JSON answer or its :class:`ApiError` as AWS does
(``{"__type": code, "message": ...}``, ``x-amzn-ErrorType``)::

    class Echo(JsonHttpListener):
        def handle(self, peer, method, path, query, headers, body, operation):
            return {"operation": operation}

    Echo("127.0.0.1", 0, tls=None, limits=FaceLimits(), name="echo").start()

Bounds: at most ``max_connections`` open connections (more are closed at once), a TLS handshake
within ``auth_deadline_seconds``, a request (headers and body) within ``request_deadline_seconds``
of its first byte, an idle keep-alive connection closed after ``idle_timeout_seconds``, headers of
at most 16 KiB, bodies of at most ``max_body_bytes``, no chunked bodies. A watchdog closes connections past their
deadline, so dribbling bytes does not keep one open.
"""

from __future__ import annotations

import bisect
import itertools
import json
import logging
import socket
import ssl
import threading
import time
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyiceberg_crypto._net import listen_address
from pyiceberg_crypto.bridge.adapter import LATENCY_BUCKETS
from pyiceberg_crypto.bridge.py4j_server import LISTEN_BACKLOG
from pyiceberg_crypto.errors import InvalidArgumentError, PyicebergCryptoError
from pyiceberg_crypto.serve.served_kms import RateLimitedLog

if TYPE_CHECKING:
    from pyiceberg_crypto.serve.aws.tls import FaceTls

log = logging.getLogger(__name__)

__all__ = ["CONTENT_TYPE", "REFUSAL_REASONS", "TARGET_PREFIX", "ApiError", "FaceLimits", "FaceStartError",
           "JsonHttpListener", "RequestStats"]

#: The AWS JSON 1.1 protocol's content type and ``X-Amz-Target`` prefix of the KMS API.
CONTENT_TYPE = "application/x-amz-json-1.1"
TARGET_PREFIX = "TrentService."
MAX_HEADER_BYTES = 16 * 1024
#: Every reason a request or connection is refused: the only values of the ``reason`` label.
REFUSAL_REASONS = ("unsigned", "malformed", "unknown-access-key", "wrong-service", "wrong-region", "expired",
                   "bad-signature", "replayed", "replay-cache-full", "connection-cap", "body-too-large",
                   "headers-too-large", "bad-request", "deadline", "tls-handshake")


class FaceStartError(PyicebergCryptoError, RuntimeError):
    """The face cannot start (address in use, unsafe TLS files, no TLS beyond loopback, ...)."""


@dataclass(frozen=True)
class FaceLimits:
    """Bounds of the face's listener (see module doc); the names the Py4J face's
    :class:`~pyiceberg_crypto.bridge.py4j_server.ConnectionLimits` uses for the same things."""

    #: Open connections at most; more are closed at once.
    max_connections: int = 256
    #: A request body of at most this many bytes (a KMS request is a few KiB).
    max_body_bytes: int = 64 * 1024
    #: The TLS handshake must finish within this (a request then proves who signed it, SigV4).
    auth_deadline_seconds: float = 5.0
    #: A request (headers and body) must arrive whole within this of its first byte.
    request_deadline_seconds: float = 10.0
    #: A keep-alive connection that sends nothing for this long is closed.
    idle_timeout_seconds: float = 30.0

    def __post_init__(self):
        if min(self.max_connections, self.max_body_bytes) < 1 or \
                min(self.auth_deadline_seconds, self.request_deadline_seconds, self.idle_timeout_seconds) <= 0:
            raise InvalidArgumentError("face limits must be positive")


class ApiError(PyicebergCryptoError):
    """An AWS JSON error answer: ``{"__type": code, "message": ...}`` with ``status``."""

    def __init__(self, code: str, message: str, status: int = 400, reason: str | None = None):
        super().__init__(message)
        self.code, self.message, self.status, self.reason = code, message, status, reason


class RequestStats:
    """Requests answered (per operation and result), refusals (per reason) and durations."""

    def __init__(self):
        self.lock = threading.Lock()
        self.requests: Counter = Counter()       # (operation, result)
        self.refused: Counter = Counter()        # reason
        self.duration: dict[str, list[float]] = {}
        self.duration_sum: Counter = Counter()

    def request(self, operation: str, result: str, seconds: float) -> None:
        with self.lock:
            self.requests[(operation, result)] += 1
            # one count per bucket and one past the last bound (a request slower than them all still counts)
            buckets = self.duration.setdefault(operation, [0] * (len(LATENCY_BUCKETS) + 1))
            buckets[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
            self.duration_sum[operation] += seconds

    def refuse(self, reason: str) -> None:
        with self.lock:
            self.refused[reason if reason in REFUSAL_REASONS else "bad-request"] += 1


class _Connection:
    def __init__(self, sock: socket.socket, peer: str):
        self.sock = sock
        self.peer = peer
        self.deadline: float | None = None
        self.reason = "deadline"
        self.buffer = b""


class JsonHttpListener:
    """The listener of one AWS JSON 1.1 API (see module doc); subclasses implement :meth:`handle`."""

    def __init__(self, host: str, port: int, *, tls: FaceTls | None, limits: FaceLimits, name: str):
        self.host, self.requested_port = host, port
        self.tls = tls
        self.limits = limits
        self.name = name
        self.stats = RequestStats()
        self._connections: set[_Connection] = set()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._listener: socket.socket | None = None
        self._threads: list[threading.Thread] = []
        self._log = RateLimitedLog(log)
        self._request_id_prefix = str(uuid.uuid4())[:24]
        self._request_ids = itertools.count()

    def handle(self, peer: str, method: str, path: str, query: str, headers: Mapping[str, str], body: bytes,
               operation: str) -> dict[str, Any]:
        """The answer (a JSON object) to one whole request, or :class:`ApiError`: the API's part."""
        raise NotImplementedError

    def operation_label(self, operation: str) -> str:
        """The metric label of an ``X-Amz-Target`` operation (the API's known ones, else ``other``)."""
        return operation or "other"

    # --- life cycle ---------------------------------------------------------------------------

    def start(self) -> JsonHttpListener:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind((self.host, self.requested_port))
            listener.listen(LISTEN_BACKLOG)
        except OSError as exc:
            listener.close()
            raise FaceStartError(f"cannot listen on {self.host}:{self.requested_port}: {exc.strerror or exc}") from None
        listener.settimeout(0.5)
        self._listener = listener
        for target, name in ((self._accept_loop, "accept"), (self._watchdog, "watchdog")):
            thread = threading.Thread(target=target, name=f"{self.name}-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        if self._listener is not None:
            self._listener.close()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            _shutdown(connection.sock)
        for thread in self._threads:
            thread.join(timeout=2)

    def __enter__(self) -> JsonHttpListener:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def port(self) -> int:
        return self._listener.getsockname()[1] if self._listener else self.requested_port

    @property
    def endpoint(self) -> str:
        """The URL clients set as ``AWS_ENDPOINT_URL_KMS`` / ``kms.endpoint``."""
        return f"{'https' if self.tls else 'http'}://{listen_address(self.host, self.port)}"

    @property
    def accepting(self) -> bool:
        return bool(self._threads) and self._threads[0].is_alive() and not self._closed.is_set()

    def open_connections(self) -> int:
        with self._lock:
            return len(self._connections)

    # --- connections --------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._closed.is_set():
            try:
                sock, address = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                if self._closed.is_set():
                    return
                time.sleep(0.05)  # EMFILE and friends: back off, keep serving
                continue
            peer = address[0]
            with self._lock:
                full = len(self._connections) >= self.limits.max_connections
                connection = None if full else _Connection(sock, peer)
                if connection is not None:
                    connection.deadline = time.monotonic() + self.limits.auth_deadline_seconds
                    connection.reason = "tls-handshake"
                    self._connections.add(connection)
            if connection is None:
                self._refused(peer, "connection-cap")
                _close(sock)
                continue
            threading.Thread(target=self._serve, args=(connection,), name=f"{self.name}-connection",
                             daemon=True).start()

    def _watchdog(self) -> None:
        """Close connections past their deadline (a dribbling client cannot hold one open)."""
        while not self._closed.wait(0.25):
            now = time.monotonic()
            with self._lock:
                overdue = [c for c in self._connections if c.deadline is not None and c.deadline < now]
                for connection in overdue:
                    connection.deadline = None
            for connection in overdue:
                if connection.reason != "idle":
                    self._refused(connection.peer, connection.reason)
                _shutdown(connection.sock)

    def _serve(self, connection: _Connection) -> None:
        try:
            connection.sock.settimeout(self.limits.auth_deadline_seconds + 1)
            if self.tls is not None:
                try:
                    connection.sock = self.tls.context.wrap_socket(connection.sock, server_side=True)
                except (OSError, ssl.SSLError):
                    self._refused(connection.peer, "tls-handshake")
                    return
            while not self._closed.is_set():
                if not self._serve_one(connection):
                    return
        except OSError:
            return
        finally:
            with self._lock:
                self._connections.discard(connection)
            _close(connection.sock)

    def _serve_one(self, connection: _Connection) -> bool:
        """Read one request, answer it; False when the connection is to be closed."""
        limits = self.limits
        connection.deadline, connection.reason = time.monotonic() + limits.idle_timeout_seconds, "idle"
        connection.sock.settimeout(limits.idle_timeout_seconds + 1)
        head = self._read_head(connection)
        if head is None:
            return False
        started = time.perf_counter()
        try:
            method, target, headers = _parse_head(head)
        except ApiError as exc:
            self._refused(connection.peer, exc.reason or "bad-request")
            self._send_error(connection, exc, close=True)
            return False
        if "transfer-encoding" in headers:
            error = ApiError("SerializationException", "chunked bodies are not accepted: send Content-Length",
                              reason="bad-request")
            self._refused(connection.peer, "bad-request")
            self._send_error(connection, error, close=True)
            return False
        length_text = headers.get("content-length", "0")
        if not length_text.isdigit():
            self._refused(connection.peer, "bad-request")
            self._send_error(connection, ApiError("SerializationException", "bad Content-Length"), close=True)
            return False
        length = int(length_text)
        if length > limits.max_body_bytes:
            self._refused(connection.peer, "body-too-large")
            self._send_error(connection, ApiError("SerializationException",
                                                   f"the body is larger than {limits.max_body_bytes} bytes",
                                                   status=413), close=True)
            return False
        if headers.get("expect", "").lower() == "100-continue":
            connection.sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        body = self._read_exactly(connection, length)
        if body is None:
            return False
        connection.deadline = None  # the KMS call is bounded by the service's call timeout
        operation = headers.get("x-amz-target", "").removeprefix(TARGET_PREFIX)
        label = self.operation_label(operation)
        path, _, query = target.partition("?")
        try:
            status, answer = 200, self.handle(connection.peer, method, path, query, headers, body, operation)
            result = "ok"
        except ApiError as exc:
            status, answer, result = exc.status, {"__type": exc.code, "message": exc.message}, exc.code
        self.stats.request(label, result, time.perf_counter() - started)
        keep = headers.get("connection", "").lower() != "close"
        connection.deadline, connection.reason = time.monotonic() + limits.request_deadline_seconds, "deadline"
        self._send(connection, status, answer, error=answer.get("__type") if status != 200 else None, close=not keep)
        return keep

    def _read_head(self, connection: _Connection) -> bytes | None:
        while b"\r\n\r\n" not in connection.buffer:
            if len(connection.buffer) > MAX_HEADER_BYTES:
                self._refused(connection.peer, "headers-too-large")
                self._send_error(connection, ApiError("SerializationException", "the request headers are too large",
                                                       status=431), close=True)
                return None
            chunk = connection.sock.recv(8192)
            if not chunk:
                return None
            if connection.reason == "idle":  # the request started: it must be complete in time
                connection.deadline = time.monotonic() + self.limits.request_deadline_seconds
                connection.reason = "deadline"
                connection.sock.settimeout(self.limits.request_deadline_seconds + 1)
            connection.buffer += chunk
        head, _, connection.buffer = connection.buffer.partition(b"\r\n\r\n")
        if len(head) > MAX_HEADER_BYTES:
            self._refused(connection.peer, "headers-too-large")
            self._send_error(connection, ApiError("SerializationException", "the request headers are too large",
                                                   status=431), close=True)
            return None
        return head

    def _read_exactly(self, connection: _Connection, length: int) -> bytes | None:
        while len(connection.buffer) < length:
            chunk = connection.sock.recv(min(65536, length - len(connection.buffer)))
            if not chunk:
                return None
            connection.buffer += chunk
        body, connection.buffer = connection.buffer[:length], connection.buffer[length:]
        return body

    # --- answers ------------------------------------------------------------------------------

    def _send_error(self, connection: _Connection, error: ApiError, *, close: bool) -> None:
        self.stats.request("other", error.code, 0.0)
        self._send(connection, error.status, {"__type": error.code, "message": error.message}, error=error.code,
                   close=close)

    def _send(self, connection: _Connection, status: int, answer: Mapping[str, Any], *, error: str | None,
              close: bool) -> None:
        body = json.dumps(answer).encode()
        reason = {200: "OK", 400: "Bad Request", 413: "Payload Too Large", 431: "Request Header Fields Too Large",
                  500: "Internal Server Error", 503: "Service Unavailable"}.get(status, "Error")
        lines = [f"HTTP/1.1 {status} {reason}", f"Content-Type: {CONTENT_TYPE}", f"Content-Length: {len(body)}",
                 f"x-amzn-RequestId: {self._request_id()}", f"Connection: {'close' if close else 'keep-alive'}"]
        if error:
            lines.append(f"x-amzn-ErrorType: {error}")
        try:
            connection.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        except OSError:
            pass

    def _request_id(self) -> str:
        """A UUID-shaped id, unique per answer: this face's random prefix and a counter (a fresh
        ``uuid4`` per answer cost a ``getrandom`` call each)."""
        return f"{self._request_id_prefix}{next(self._request_ids) & 0xFFFFFFFFFFFF:012x}"

    # --- refusals and metrics -----------------------------------------------------------------

    def _refused(self, peer: str, reason: str) -> None:
        self.stats.refuse(reason)
        self._warn(f"refused-{reason}", "AWS KMS face refused a request from %s: %s", peer, reason)

    def _warn(self, kind: str, message: str, *args) -> None:
        self._log.warning(kind, message, *args)


def _parse_head(head: bytes) -> tuple[str, str, dict[str, str]]:
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes every byte
        raise ApiError("SerializationException", "bad request head", reason="bad-request") from None
    request_line, *header_lines = text.split("\r\n")
    parts = request_line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise ApiError("SerializationException", "bad request line", reason="bad-request")
    headers: dict[str, str] = {}
    for line in header_lines:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise ApiError("SerializationException", "bad header line", reason="bad-request")
        key = name.lower()
        headers[key] = f"{headers[key]},{value.strip()}" if key in headers else value.strip()
    return parts[0], parts[1], headers


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _close(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass
