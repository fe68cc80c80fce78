"""The AWS JSON 1.1 protocol's HTTP/1.1 listener, bounded: what the AWS KMS face answers requests on.

A :class:`JsonHttpListener` accepts connections (TLS when it has an identity), reads one request at
a time, calls :meth:`JsonHttpListener.handle` (the API's part, :mod:`.api`) and writes its JSON
answer or its :class:`ApiError` as AWS does (``{"__type": code, "message": ...}``,
``x-amzn-ErrorType``)::

    class Echo(JsonHttpListener):
        def handle(self, peer, method, path, query, headers, body, operation):
            return {"operation": operation}

    Echo("127.0.0.1", 0, tls=None, limits=FaceLimits(), name="echo").start()

HTTP/1.1 framing is h11's, a well-kept parser, not hand-written. Bounds (:class:`FaceLimits`): at
most ``max_connections`` open connections; of them, at most ``max_unsigned`` that have not yet sent
a validly signed request ("unsigned"), ``max_unsigned_per_peer`` per peer address. A newcomer
beyond a cap evicts the oldest *silent* unsigned connection, and is refused only when none is
silent. Deadlines: ``auth_deadline_seconds`` for the TLS handshake and first byte,
``request_deadline_seconds`` for the whole request, ``idle_timeout_seconds`` for idle signed
connections; headers of at most 16 KiB, bodies of at most ``max_body_bytes``, no chunked bodies. So
silent connections, however many, cannot keep signed clients out.

Every bound and its default, and the framing rules: docs/how-to/trino.md#1-serve-the-kms-with-the-aws-face.
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
import traceback
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import h11

from pyiceberg_crypto._net import listen_address
from pyiceberg_crypto._prometheus import LATENCY_BUCKETS
from pyiceberg_crypto._deprecated import renamed_classes
from pyiceberg_crypto.errors import ApiError, InvalidArgumentError, SetupError
from pyiceberg_crypto.listener.sockets import LISTEN_BACKLOG
from pyiceberg_crypto.serve.served_kms import RateLimitedLog

if TYPE_CHECKING:
    from pyiceberg_crypto.serve.aws.tls import FaceTls

log = logging.getLogger(__name__)

__all__ = ["CONTENT_TYPE", "REFUSAL_REASONS", "TARGET_PREFIX", "ApiError", "FaceLimits",
           "JsonHttpListener", "RequestStats"]

#: The AWS JSON 1.1 protocol's content type and ``X-Amz-Target`` prefix of the KMS API.
CONTENT_TYPE = "application/x-amz-json-1.1"
TARGET_PREFIX = "TrentService."
MAX_HEADER_BYTES = 16 * 1024
#: Every reason a request or connection is refused: the only values of the ``reason`` label.
REFUSAL_REASONS = ("unsigned", "malformed", "unknown-access-key", "wrong-service", "wrong-region", "expired",
                   "bad-signature", "connection-cap", "unsigned-cap", "peer-cap", "evicted", "silent",
                   "body-too-large", "headers-too-large", "bad-request", "deadline", "tls-handshake")


#: Old names, kept for one release (CHANGELOG.md).
__getattr__ = renamed_classes(__name__, {"FaceStartError": SetupError})


@dataclass(frozen=True)
class FaceLimits:
    """Bounds of the face's listener (see module doc); the names the Py4J face's
    :class:`~pyiceberg_crypto.bridge.py4j_server.ConnectionLimits` uses for the same things."""

    #: Open connections at most, signed or not.
    max_connections: int = 256
    #: Connections that have not yet sent a validly signed request, at most (silent ones are evicted
    #: oldest first to make room; never more than ``max_connections``).
    max_unsigned: int = 128
    #: Unsigned connections from one peer address, at most (its own oldest silent one makes room).
    max_unsigned_per_peer: int = 32
    #: A request body of at most this many bytes (a KMS request is a few KiB).
    max_body_bytes: int = 64 * 1024
    #: An unsigned connection must finish its TLS handshake and send its request's first byte within this.
    auth_deadline_seconds: float = 5.0
    #: A request (headers and body) must arrive whole within this of its first byte.
    request_deadline_seconds: float = 10.0
    #: A signed keep-alive connection that sends nothing for this long is closed.
    idle_timeout_seconds: float = 30.0

    def __post_init__(self):
        if min(self.max_connections, self.max_unsigned, self.max_unsigned_per_peer, self.max_body_bytes) < 1 or \
                min(self.auth_deadline_seconds, self.request_deadline_seconds, self.idle_timeout_seconds) <= 0:
            raise InvalidArgumentError("face limits must be positive")


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
    def __init__(self, sock: socket.socket, peer: str, opened: float):
        self.sock = sock
        self.peer = peer
        self.opened = opened
        self.deadline: float | None = None
        self.reason = "tls-handshake"
        self.signed = False     # a request of it carried a valid signature
        self.speaking = False   # a byte of its current request arrived (not silent)
        self.evicted = False
        self.parser = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER_BYTES)


class _ConnectionEndedError(Exception):  # an internal signal: never leaves the listener
    """The connection ends (peer gone, deadline, eviction): nothing more to send."""


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
            raise SetupError(f"cannot listen on {self.host}:{self.requested_port}: {exc.strerror or exc}") from None
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
            _shutdown(self._listener)  # wakes the accept loop at once (a close alone waits for its 0.5 s timeout)
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
            return sum(1 for c in self._connections if not c.evicted)

    def unsigned_connections(self) -> int:
        with self._lock:
            return sum(1 for c in self._connections if not c.evicted and not c.signed)

    def silent_connections(self) -> int:
        """Unsigned connections that have not sent a byte of their request: the ones a newcomer at a
        cap may evict."""
        with self._lock:
            return sum(1 for c in self._connections if not c.evicted and not c.signed and not c.speaking)

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
            try:
                self._admit(sock, address[0])
            except Exception as exc:  # never let the accept loop die (a thread that cannot start, ...)
                self._connection_error(address[0], exc)
                _close(sock)

    def _admit(self, sock: socket.socket, peer: str) -> None:
        """Let ``sock`` in (evicting the oldest silent unsigned connection a cap needs), or refuse it."""
        now = time.monotonic()
        refusal, evicted = None, []
        with self._lock:
            live = [c for c in self._connections if not c.evicted]
            for reason, cap, pool in (
                    ("peer-cap", self.limits.max_unsigned_per_peer,
                     lambda: [c for c in live if not c.signed and c.peer == peer]),
                    ("unsigned-cap", min(self.limits.max_unsigned, self.limits.max_connections),
                     lambda: [c for c in live if not c.signed]),
                    ("connection-cap", self.limits.max_connections, lambda: live)):
                if len(pool()) < cap:
                    continue
                victim = _oldest_silent(c for c in pool() if not c.signed)
                if victim is None:
                    refusal = reason
                    break
                victim.evicted, victim.deadline = True, None
                live.remove(victim)
                evicted.append(victim)
            connection = None
            if refusal is None:
                connection = _Connection(sock, peer, now)
                connection.deadline = now + self.limits.auth_deadline_seconds
                self._connections.add(connection)
        for victim in evicted:
            self.stats.refuse("evicted")
            _shutdown(victim.sock)
        if evicted:
            self._warn("evicted", "AWS KMS face evicted a silent unsigned connection from %s to let %s in",
                       evicted[0].peer, peer)
        if connection is None:
            self._refused(peer, refusal or "connection-cap")
            _close(sock)
            return
        try:
            threading.Thread(target=self._serve, args=(connection,), name=f"{self.name}-connection",
                             daemon=True).start()
        except RuntimeError:
            with self._lock:
                self._connections.discard(connection)
            raise

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
                    wrapped = self.tls.context.wrap_socket(connection.sock, server_side=True,
                                                           do_handshake_on_connect=False)
                    with self._lock:  # from now on, an eviction or the watchdog shuts the TLS socket down
                        connection.sock = wrapped
                        if connection.evicted:
                            return
                    wrapped.do_handshake()
                except (OSError, ssl.SSLError, ValueError):
                    if not connection.evicted and connection.deadline is not None:
                        self._refused(connection.peer, "tls-handshake")
                    return
            with self._lock:
                if connection.deadline is not None:
                    connection.reason = "silent"
            while not self._closed.is_set() and not connection.evicted:
                if not self._serve_one(connection):
                    return
        except (_ConnectionEndedError, OSError):
            return
        except Exception as exc:  # one rate-limited line, never a traceback per request
            self._connection_error(connection.peer, exc)
        finally:
            with self._lock:
                self._connections.discard(connection)
            _close(connection.sock)

    def _serve_one(self, connection: _Connection) -> bool:
        """Read one request, answer it; False when the connection is to be closed."""
        limits = self.limits
        parser = connection.parser
        with self._lock:
            if connection.signed:
                connection.deadline, connection.reason = time.monotonic() + limits.idle_timeout_seconds, "idle"
                connection.sock.settimeout(limits.idle_timeout_seconds + 1)
            elif connection.speaking:  # an unsigned connection's next request: the short deadline again
                connection.deadline = time.monotonic() + limits.auth_deadline_seconds
                connection.reason = "silent"
            connection.speaking = False
        try:
            event = self._next_event(connection)
            if isinstance(event, h11.ConnectionClosed):
                return False
            if not isinstance(event, h11.Request):  # pragma: no cover - h11 gives a Request first
                raise h11.RemoteProtocolError("expected a request")
            if len(event.method) + len(event.target) + sum(len(n) + len(v) + 4 for n, v in event.headers) \
                    > MAX_HEADER_BYTES:  # h11 bounds an incomplete head; a whole one that is too large, here
                raise h11.RemoteProtocolError("the request head is too large", error_status_hint=431)
            method, target = event.method.decode("ascii", "replace"), event.target.decode("ascii", "replace")
            headers: dict[str, str] = {}
            for name, value in event.headers:
                key, text = name.decode("ascii"), value.decode("latin-1")
                headers[key] = f"{headers[key]},{text}" if key in headers else text
        except h11.RemoteProtocolError as exc:
            too_large = exc.error_status_hint == 431
            error = ApiError("SerializationException", "the request headers are too large" if too_large
                             else "bad request: not HTTP/1.1 this face can read (request line, headers or "
                                  "Content-Length)", status=431 if too_large else 400,
                             reason="headers-too-large" if too_large else "bad-request")
            self._refused(connection.peer, error.reason)
            self._send_error(connection, error)
            return False
        started = time.perf_counter()
        if "transfer-encoding" in headers:
            return self._refuse_request(connection, ApiError(
                "SerializationException", "chunked bodies are not accepted: send Content-Length",
                reason="bad-request"))
        length = int(headers.get("content-length", "0"))  # h11 let through ASCII digits only
        if length > limits.max_body_bytes:
            return self._refuse_request(connection, ApiError(
                "SerializationException", f"the body is larger than {limits.max_body_bytes} bytes", status=413,
                reason="body-too-large"))
        if parser.they_are_waiting_for_100_continue:
            connection.sock.sendall(parser.send(h11.InformationalResponse(status_code=100, headers=[])))
        chunks = []
        try:
            while True:
                event = self._next_event(connection)
                if isinstance(event, h11.Data):
                    chunks.append(bytes(event.data))
                elif isinstance(event, h11.EndOfMessage):
                    break
                else:
                    return False  # the peer went away mid-body
        except h11.RemoteProtocolError:
            return False  # the body ended early: the peer is gone
        body = b"".join(chunks)
        connection.deadline = None  # the KMS call is bounded by the service's call timeout
        operation = headers.get("x-amz-target", "").removeprefix(TARGET_PREFIX)
        label = self.operation_label(operation)
        path, _, query = target.partition("?")
        try:
            status, answer = 200, self.handle(connection.peer, method, path, query, headers, body, operation)
            result, signed = "ok", True
        except ApiError as exc:
            status, answer, result = exc.status, {"__type": exc.code, "message": exc.message}, exc.code
            signed = exc.reason is None
        self.stats.request(label, result, time.perf_counter() - started)
        with self._lock:
            if signed:
                connection.signed = True
            connection.deadline = time.monotonic() + limits.request_deadline_seconds
            connection.reason = "deadline"
        self._respond(connection, status, answer, error=answer.get("__type") if status != 200 else None)
        if parser.our_state is h11.MUST_CLOSE or parser.their_state is h11.MUST_CLOSE:
            return False
        try:
            parser.start_next_cycle()
        except h11.LocalProtocolError:
            return False
        return True

    def _next_event(self, connection: _Connection):
        """The parser's next event, reading from the socket as it needs."""
        parser = connection.parser
        while True:
            event = parser.next_event()
            if event is not h11.NEED_DATA:
                return event
            if connection.evicted:
                raise _ConnectionEndedError("evicted")
            chunk = connection.sock.recv(65536)
            if chunk and not connection.speaking:  # the request started: it must be complete in time
                with self._lock:
                    connection.speaking = True
                    if connection.deadline is not None:
                        connection.deadline = time.monotonic() + self.limits.request_deadline_seconds
                        connection.reason = "deadline"
                connection.sock.settimeout(self.limits.request_deadline_seconds + 1)
            parser.receive_data(chunk)
            if parser.their_state is h11.IDLE:  # still in the head: bounded before h11 parses it whole
                buffered = parser.trailing_data[0]
                if len(buffered) > MAX_HEADER_BYTES and buffered.find(b"\r\n\r\n", 0, MAX_HEADER_BYTES + 4) < 0:
                    raise h11.RemoteProtocolError("the request head is too large", error_status_hint=431)

    def _refuse_request(self, connection: _Connection, error: ApiError) -> bool:
        self._refused(connection.peer, error.reason or "bad-request")
        self._send_error(connection, error)
        return False

    # --- answers ------------------------------------------------------------------------------

    def _send_error(self, connection: _Connection, error: ApiError) -> None:
        """Answer ``error`` and close (after a refusal the connection is not read again)."""
        self.stats.request("other", error.code, 0.0)
        self._respond(connection, error.status, {"__type": error.code, "message": error.message}, error=error.code,
                      close=True)

    def _respond(self, connection: _Connection, status: int, answer: Mapping[str, Any], *, error: str | None,
                 close: bool = False) -> None:
        body = json.dumps(answer).encode()
        headers = [("Content-Type", CONTENT_TYPE), ("Content-Length", str(len(body))),
                   ("x-amzn-RequestId", self._request_id())]
        if error:
            headers.append(("x-amzn-ErrorType", error))
        parser = connection.parser
        if parser.our_state is h11.SEND_RESPONSE:
            if close:
                headers.append(("Connection", "close"))
            try:
                data = parser.send(h11.Response(status_code=status, headers=headers,
                                                reason=_REASONS.get(status, "Error").encode()))
                data += parser.send(h11.Data(data=body)) + parser.send(h11.EndOfMessage())
            except h11.LocalProtocolError:
                data = None
        else:
            data = None
        if data is None:  # no request the parser could read (a malformed head): a plain answer, then close
            lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}",
                     *(f"{name}: {value}" for name, value in headers), "Connection: close"]
            data = ("\r\n".join(lines) + "\r\n\r\n").encode() + body
        try:
            connection.sock.sendall(data)
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

    def _connection_error(self, peer: str, exc: BaseException) -> None:
        """One rate-limited line: the error's type and where it happened (no message: it may quote
        what the peer sent)."""
        frames = traceback.extract_tb(exc.__traceback__)
        where = f" at {frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno}" if frames else ""
        self._warn("connection-error", "AWS KMS face: a connection from %s ended on an error: %s%s", peer,
                   type(exc).__name__, where)

    def _warn(self, kind: str, message: str, *args) -> None:
        self._log.warning(kind, message, *args)


_REASONS = {100: "Continue", 200: "OK", 400: "Bad Request", 413: "Payload Too Large",
            431: "Request Header Fields Too Large", 500: "Internal Server Error", 503: "Service Unavailable"}


def _oldest_silent(candidates) -> _Connection | None:
    """The oldest connection that has not sent a byte of its request, of the peer holding the most
    such connections (a peer with one or two connections is the last to lose one)."""
    silent = [c for c in candidates if not c.speaking and not c.evicted]
    if not silent:
        return None
    per_peer = Counter(c.peer for c in silent)
    return min(silent, key=lambda c: (-per_peer[c.peer], c.opened))


def _shutdown(sock: socket.socket) -> None:
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)  # the fd's, also under a TLS socket in its handshake
    except (OSError, ValueError):
        pass


def _close(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass
