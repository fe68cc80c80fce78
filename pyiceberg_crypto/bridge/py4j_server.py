"""The Py4J callback server, specialised for the KMS: bounded, authenticated, allow-listed.

Two subclasses of py4j's classes (read from py4j 0.10.9.9, the version pyspark 3.5 and 4.1 pin;
``tests/bridge`` and ``tests/fuzz/test_fuzz_callback_server.py`` hold them to their contract):

- :class:`KmsPy4jConnection` (a ``py4j.java_gateway.CallbackConnection``): one JVM connection.
  Its ``run`` does the TLS handshake in the connection's thread, then the handshake
  (:mod:`.handshake`), then reads calls with bounded lines (:func:`read_params`) and calls only the
  target's allow-listed methods.
- :class:`KmsPy4jServer` (a ``py4j.java_gateway.CallbackServer``): the accept loop, with
  connection caps, the authentication deadline and a loop nothing a peer does can end.

The public face is :class:`pyiceberg_crypto.bridge.callback_server.KmsCallbackServer`, which owns one.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import errno
import logging
import select
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from py4j import protocol as proto
from py4j.java_gateway import CallbackConnection, CallbackServer
from py4j.protocol import get_command_part

from pyiceberg_crypto.bridge.handshake import DRIVER_ROLE, HandshakeRefusedError, authenticate
from pyiceberg_crypto.listener.sockets import LISTEN_BACKLOG
from pyiceberg_crypto.listener.tls import TLS_HANDSHAKE_TIMEOUT_SECONDS
from pyiceberg_crypto.errors import InvalidArgumentError

#: Accept queue length (py4j's default of 5 made every 7th of 1,000 connect/close cycles wait 1 s).
#: Longer than the connection caps: peers holding hundreds of idle sockets, each re-opened as soon as
#: it is closed, kept a queue of 128 full, so a newcomer's SYN was dropped and retried after 1, 3,
#: 7 s... (the kernel caps it at net.core.somaxconn, 4096 by default since Linux 5.4).
__all__ = ["BUSY_LINGER_SECONDS", "BUSY_PREFIX", "CALLER", "EVICTED", "MAX_LINE_BYTES", "MAX_PARAMS", "MAX_TURNED_AWAY", "ConnectionLimits", "KmsPy4jConnection", "KmsPy4jServer", "eviction_victim", "read_params"]

#: The longest line after authentication: the largest legitimate parameter (a wrapped key, which
#: cloud KMSs keep under a few KiB, base64-encoded) plus a wide margin.
MAX_LINE_BYTES = 64 * 1024
#: A KMS call has at most two parameters; a few more are read (and refused) to stay in step.
MAX_PARAMS = 4
#: A connection refused for a cap hears why before it is closed: ``!busy <reason>``, which the JVM
#: client shows in the failing statement (``PythonKmsEndpoint.Handshake``), instead of a reset.
BUSY_PREFIX = "!busy "
#: How long a refused connection may take to read that line (it is closed when it has, or then).
BUSY_LINGER_SECONDS = 1.0
#: Refused connections waiting to read their line at most; beyond, they are reset at once (a flood).
MAX_TURNED_AWAY = 256
#: Why an unauthenticated connection was closed to make room for a newcomer (see ``_make_room``).
EVICTED = "closed to make room: the unauthenticated slots were full"
#: Who the call running in this thread comes from: ``CALLER.role`` (the token the connection proved:
#: ``client``, ``driver`` or a ``kms serve`` policy's named token) and ``CALLER.peer`` (its address).
#: Each connection has its own thread, so the target reads it for grants and audit at no cost.
CALLER = threading.local()
_BACKOFF_MIN_SECONDS, _BACKOFF_MAX_SECONDS = 0.05, 1.0
_TRANSIENT_ACCEPT_ERRORS = {errno.ECONNABORTED, errno.EINTR, errno.EAGAIN, errno.EPROTO, errno.EPERM}
_RESOURCE_ERRORS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}

#: The logger keeps the name it had when all of this was one module (users may configure it).
log = logging.getLogger("pyiceberg_crypto.bridge.callback_server")


@dataclass(frozen=True)
class ConnectionLimits:
    """Bounds of one listener. A connection beyond a cap is accepted and closed at once (refused)."""

    #: Open connections, authenticated or not (each holds a thread).
    max_connections: int = 256
    #: Connections that have not authenticated yet.
    max_unauthenticated: int = 64
    #: The whole authentication, TLS handshake included, must finish within this.
    auth_deadline_seconds: float = 5.0
    #: An authenticated connection that sends nothing for this long is closed, so that token holders
    #: cannot keep every slot forever. Longer than the JVM clients keep an idle connection: Py4J's
    #: CallbackClient closes a pooled connection at the second cleanup pass without use, passes
    #: every 30 s (``DEFAULT_MIN_CONNECTION_TIME``, which the bridge uses), so under 60 s idle.
    idle_timeout_seconds: float = 120.0

    def __post_init__(self):
        if (self.max_connections < 1 or self.max_unauthenticated < 1 or self.auth_deadline_seconds <= 0
                or self.idle_timeout_seconds <= 0):
            raise InvalidArgumentError("connection limits must be positive")


class KmsPy4jConnection(CallbackConnection):
    """One JVM connection: TLS (when configured), authentication, then allow-listed calls only."""

    role: str | None = None
    _expired = False
    #: Closed by the accept loop to make room for a newcomer (``KmsPy4jServer._make_room``).
    _evicted = False
    #: The peer sent its first protocol line: a handshake under way, not a silent connection.
    spoke = False

    # Override of CallbackConnection.run (py4j 0.10.9.9): py4j's reads unbounded lines, knows only
    # its own ``A`` authentication (no challenge-response, no deadline, no roles), logs every
    # command at INFO and lets a JVM's GC command release pooled objects; this one does TLS, the
    # handshake, then bounded KMS calls only (see _serve). It still ends with py4j's close().
    def run(self):
        server: KmsPy4jServer = self.callback_server
        peer = _peer_host(self.socket)
        try:
            self._serve(server, peer)
        finally:
            server._forget(self)
            if self.socket is not None:
                self.close()

    def _serve(self, server: KmsPy4jServer, peer: str) -> None:
        deadline = server.limits.auth_deadline_seconds
        # TLS handshake here, in the connection's thread: in py4j's accept loop a silent or
        # plaintext peer would stall or stop the server. It counts against the auth deadline.
        if server.tls_context is not None:
            raw = self.socket
            try:
                raw.settimeout(min(deadline, TLS_HANDSHAKE_TIMEOUT_SECONDS))
                self.input.close()
                self.socket = server.tls_context.wrap_socket(raw, server_side=True, do_handshake_on_connect=False)
                if self._expired:
                    raise OSError("authentication deadline")
                self.socket.do_handshake()
                self.input = self.socket.makefile("rb")
            except (OSError, ValueError):
                with contextlib.suppress(OSError):
                    self.socket.close()
                return
        try:
            self.socket.settimeout(deadline)  # each read; the reaper bounds the whole authentication
            try:
                generation = server.token_generation
                # self.socket looked up at each send, as before the split (shutdown sets it to None).
                self.role = authenticate(self._spoken_line, lambda data: self.socket.sendall(data), server.tokens)
                if server.token_generation != generation:  # a token revoked while this one authenticated
                    raise HandshakeRefusedError("wrong or old token")
            except (HandshakeRefusedError, OSError, ValueError, EOFError) as exc:
                reason = str(exc) if isinstance(exc, HandshakeRefusedError) else EVICTED if self._evicted else (
                    "no authentication within the deadline" if self._expired or isinstance(exc, TimeoutError)
                    else "closed during authentication")
                server.refused(peer, reason)
                self.role = None
            if self.role is None:
                self.close(reset=True)
                return
            server._authenticated(self)
            CALLER.role, CALLER.peer = self.role, peer
            # Idle beyond this (no command): closed (TimeoutError, below). JVMs reconnect.
            self.socket.settimeout(server.limits.idle_timeout_seconds)
            readline = self.input.readline
            while True:  # the hot path: kept lean (issue 35: throughput within 5 %)
                command = readline(MAX_LINE_BYTES + 1)
                obj_id = readline(MAX_LINE_BYTES + 1)
                if obj_id[-1:] != b"\n" or command[-1:] != b"\n":
                    if len(obj_id) > MAX_LINE_BYTES or len(command) > MAX_LINE_BYTES:
                        raise HandshakeRefusedError(f"a line longer than {MAX_LINE_BYTES} bytes")
                    break  # closed
                command, obj_id = command[:-1].decode("utf-8"), obj_id[:-1].decode("utf-8")
                if not obj_id.strip():
                    break
                if command == proto.CALL_PROXY_COMMAND_NAME:
                    self.socket.sendall(self._call_proxy(obj_id, self.input, peer).encode("utf-8"))
                elif command == proto.GARBAGE_COLLECT_PROXY_COMMAND_NAME:
                    self._line(MAX_LINE_BYTES)  # the KMS object is never released by a JVM's GC
                    self.socket.sendall(proto.SUCCESS_RETURN_MESSAGE.encode("utf-8"))
                else:
                    self.socket.sendall(proto.ERROR_RETURN_MESSAGE.encode("utf-8"))
                    break
        except HandshakeRefusedError as exc:  # an authenticated peer broke the bounds: it learns only that
            server.refused(peer, str(exc))
            with contextlib.suppress(OSError, AttributeError):
                self.socket.sendall(proto.ERROR_RETURN_MESSAGE.encode("utf-8"))
        except TimeoutError:  # idle beyond limits.idle_timeout_seconds (or a stalled call)
            with server._book:
                server.idle_closed += 1
        except (OSError, ValueError, AttributeError, EOFError):  # the JVM closed the connection, or
            pass  # the server stopped (its shutdown closes the stream under this thread: input is None)

    def _spoken_line(self, limit: int) -> bytes:
        """:meth:`_line` during authentication: once a line came, the peer is not silent."""
        line = self._line(limit)
        self.spoke = True
        return line

    def _line(self, limit: int, *, eof_ok: bool = False) -> bytes:
        """One protocol line, at most ``limit`` bytes with its newline; the newline removed."""
        line = self.input.readline(limit + 1)
        if not line:
            if eof_ok:
                return b""
            raise EOFError("the peer closed the connection")
        if len(line) > limit or not line.endswith(b"\n"):
            if len(line) > limit:
                raise HandshakeRefusedError(f"a line longer than {limit} bytes")
            raise EOFError("the peer closed the connection within a line")
        return line[:-1]

    def expire(self) -> None:
        """Called by the accept loop when the authentication deadline passed, or to make room for a
        newcomer (``_make_room``): unblock the reads."""
        self._expired = True
        with contextlib.suppress(OSError, AttributeError):
            self.socket.shutdown(socket.SHUT_RDWR)

    # Override of the private CallbackConnection._call_proxy (py4j 0.10.9.9, same first two
    # parameters, ``peer`` added): py4j's calls any method by name with parameters decoded by its
    # generic path and reports the Python traceback to Java; this one reads bounded, typed
    # parameters (read_params), calls allow-listed methods only and reports one line. Only _serve
    # calls it, so a py4j upgrade that renames it cannot bypass it.
    def _call_proxy(self, obj_id, input, peer=""):  # noqa: A002 - py4j's signature
        if obj_id not in self.pool:
            return proto.RETURN_MESSAGE + proto.ERROR + get_command_part("Object ID unknown", self.pool)
        method = "?"
        failed = True
        try:
            method = input.readline(MAX_LINE_BYTES + 1)
            if method[-1:] != b"\n":
                if len(method) > MAX_LINE_BYTES:
                    raise HandshakeRefusedError(f"a line longer than {MAX_LINE_BYTES} bytes")
                raise EOFError("the JVM closed the connection during a call")
            method = method[:-1].decode("utf-8")
            try:
                params = read_params(input)
            except TypeError as exc:  # a refused type: the call was read to its end, still in step
                params = exc
        except BaseException:  # out of step, too long, or gone: the connection ends
            if self.callback_server.on_call is not None:
                self.callback_server.on_call(peer, method, True)
            raise
        try:
            if isinstance(params, TypeError):
                raise params
            target = self.pool[obj_id]
            if method not in getattr(target, "ALLOWED_METHODS", ()):
                raise PermissionError(f"method {method!r} is not callable over the KMS bridge")
            if method == "initialize":
                value = target.initialize(*params, privileged=self.role == DRIVER_ROLE)
            else:
                value = getattr(target, method)(*params)
            failed = False
            if isinstance(value, bytes):  # the answer of wrapKey / unwrapKey / generateKey
                return f"{proto.RETURN_MESSAGE}{proto.SUCCESS}{proto.BYTES_TYPE}{base64.standard_b64encode(value).decode('ascii')}\n"
            return proto.RETURN_MESSAGE + proto.SUCCESS + get_command_part(value, self.pool)
        except Exception as exc:  # reported to Java as one line, without traceback or secrets
            message = f"{type(exc).__name__}: {exc}".replace("\n", " ")
            return proto.RETURN_MESSAGE + proto.ERROR + get_command_part(message, self.pool)
        finally:
            if self.callback_server.on_call is not None:
                self.callback_server.on_call(peer, method, failed)


def read_params(input) -> list:  # noqa: A002 - py4j's name
    """A call's parameters: one typed line each (Py4J protocol), up to the ``e`` line.

    The KMS protocol passes byte arrays and strings only (Java's ``io.pyicebergcrypto.bridge.PythonKms``), and only
    those are accepted: any other type (an integer, which Python would turn into a zero-filled
    buffer of that size, a boolean, null, a Java object reference) is refused, after the rest of
    the call is read so the connection stays in step. Lines are bounded (``MAX_LINE_BYTES``) and so
    is their number (``MAX_PARAMS``). Decoded here rather than by py4j's generic path, which turns
    byte arrays into bytearrays byte by byte and, in a PySpark driver, goes through PySpark's
    exception-capturing wrapper once per parameter."""
    readline = input.readline
    params: list = []
    refused = None
    count = 0
    while True:
        raw = readline(MAX_LINE_BYTES + 1)
        if raw[-1:] != b"\n":
            if len(raw) > MAX_LINE_BYTES:
                raise HandshakeRefusedError(f"a line longer than {MAX_LINE_BYTES} bytes")
            raise EOFError("the JVM closed the connection during a call")
        if raw == b"e\n":
            break
        count += 1
        if count > MAX_PARAMS:
            raise HandshakeRefusedError(f"more than {MAX_PARAMS} parameters in a call")
        kind = raw[:1]
        if kind == b"j":
            params.append(binascii.a2b_base64(raw[1:-1]))
        elif kind == b"s":
            value = raw[1:-1].decode("utf-8")
            params.append(proto.unescape_new_line(value) if "\\" in value else value)
        else:
            refused = refused or kind.decode("utf-8", "replace")
    if refused is not None:
        raise TypeError(f"a parameter of Py4J type {refused!r} is not part of the KMS protocol "
                        "(byte arrays and strings only)")
    return params


class KmsPy4jServer(CallbackServer):
    """The accept loop of the KMS listener: caps, the authentication deadline, never-ending accepts.

    Set up by :meth:`setup` after py4j's constructor (its parameters: address, port, daemon
    threads, the accept timeout), then ``start()`` (py4j's: bind, then ``run`` in a thread) and
    ``shutdown()`` (py4j's: close the socket and every connection, join the thread)."""

    tls_context: ssl.SSLContext | None = None
    tokens: dict[str, str]
    limits: ConnectionLimits
    on_call: Callable[[str, str, bool], None] | None = None
    on_refused: Callable[[str, str], None] | None = None

    def setup(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.tokens = {}
        self.token_generation = 0  # bumped by revoke(): an authentication under way then fails
        self._book = threading.Lock()
        self._pending: dict[KmsPy4jConnection, float] = {}  # not yet authenticated -> deadline
        self._open = 0
        self.accepting = False
        self.accept_failures = 0  # failed accepts / thread starts, over the server's life
        self.idle_closed = 0  # authenticated connections closed for idling, over the server's life
        self._turned_away: list[tuple[socket.socket, float]] = []  # refused, reading their busy line

    # Override of the private CallbackServer._create_connection (py4j 0.10.9.9, same signature):
    # the factory of connection threads, so that each connection is a KmsPy4jConnection. Only this
    # class's run() calls it (py4j's own run, which also did, is replaced below).
    def _create_connection(self, socket_instance, stream):
        return KmsPy4jConnection(
            self.pool, stream, socket_instance, self.gateway_client, self.callback_server_parameters, self
        )

    def refused(self, peer: str, reason: str) -> None:
        if self.on_refused is not None:
            self.on_refused(peer, reason)

    def revoke(self, role: str, token: str) -> int:
        """From now on ``role`` authenticates with ``token`` only; close every connection that
        authenticated as ``role`` (with the old token) and fail any authentication under way.
        Returns how many connections were closed (their JVMs reconnect, re-reading the token file)."""
        with self._book:
            self.token_generation += 1
            self.tokens = {**self.tokens, role: token}
        victims = [c for c in list(self.connections) if getattr(c, "role", None) == role]
        for connection in victims:
            connection.expire()
        return len(victims)

    def _authenticated(self, connection: KmsPy4jConnection) -> None:
        with self._book:
            self._pending.pop(connection, None)

    def _forget(self, connection: KmsPy4jConnection) -> None:
        with self._book:
            if getattr(connection, "_counted", False):
                connection._counted = False
                self._open -= 1
            self._pending.pop(connection, None)

    @property
    def open_connections(self) -> int:
        return self._open

    @property
    def unauthenticated_connections(self) -> int:
        return len(self._pending)

    # Override of CallbackServer.run (py4j 0.10.9.9), rewritten: py4j's accept loop does the TLS
    # handshake inline (a silent peer stalls every other connection), ends on the first accept
    # error (EMFILE ends the listener for good), listens with a backlog of 5, and has no caps and
    # no authentication deadline. It also sends py4j's server_started/stopped signals, which
    # nothing in this package listens to.
    def run(self):
        """The accept loop, which nothing a peer does can end: out of file descriptors (EMFILE,
        ENFILE), no thread for a connection, or any other error make it wait and retry (logged once
        per burst); only shutdown() ends it. It also enforces the caps and the auth deadline."""
        self.accepting = True
        try:
            with self.lock:
                self.is_shutdown = False
            self.server_socket.listen(LISTEN_BACKLOG)
            trouble_since, trouble_count, backoff = 0.0, 0, _BACKOFF_MIN_SECONDS
            while not self.is_shutdown:
                try:
                    readable, _, _ = select.select([self.server_socket], [], [],
                                                   self.callback_server_parameters.accept_timeout)
                except (OSError, ValueError, TypeError):
                    if self.is_shutdown:
                        break
                    time.sleep(_BACKOFF_MIN_SECONDS)
                    continue
                self._expire_overdue()
                self._reap_turned_away()
                if self.is_shutdown:
                    break
                if not readable:
                    continue
                try:
                    socket_instance, address = self.server_socket.accept()
                except OSError as exc:
                    if self.is_shutdown:
                        break
                    if exc.errno in _TRANSIENT_ACCEPT_ERRORS:
                        continue
                    problem = exc
                else:
                    problem = self._admit(socket_instance, address)
                if problem is None:
                    if trouble_count:
                        log.warning("KMS listener accepting connections again after %d failed attempts in %.1f s",
                                    trouble_count, time.monotonic() - trouble_since)
                        trouble_since, trouble_count, backoff = 0.0, 0, _BACKOFF_MIN_SECONDS
                    continue
                self.accept_failures += 1
                if not trouble_count:
                    trouble_since = time.monotonic()
                    log.warning("KMS listener cannot take a connection (%s): retrying until it can%s",
                                _describe(problem), "; out of file descriptors: raise the open-file limit"
                                " (ulimit -n) or lower the connection caps" if getattr(problem, "errno", None)
                                in _RESOURCE_ERRORS else "")
                trouble_count += 1
                # The connection may still wait in the queue: sleep, so the retry is no busy loop;
                # connections finishing meanwhile (deadline reaped) give descriptors back.
                deadline = time.monotonic() + backoff
                while not self.is_shutdown and time.monotonic() < deadline:
                    time.sleep(min(0.05, backoff))
                    self._expire_overdue()
                backoff = min(backoff * 2, _BACKOFF_MAX_SECONDS)
        except BaseException:  # never expected: say so loudly, and the status shows it
            if not self.is_shutdown:
                log.exception("the KMS listener's accept loop stopped")
        finally:
            self.accepting = False
            for sock, _ in self._turned_away:
                _drop(sock)
            self._turned_away.clear()

    def _admit(self, socket_instance, address) -> BaseException | None:
        """Start a connection thread, or refuse (close) beyond a cap. Returns what went wrong."""
        peer = str(address[0]) if isinstance(address, tuple) and address else "?"
        with self._book:
            reason = None
            if self._open >= self.limits.max_connections:
                reason = f"too many connections (cap {self.limits.max_connections})"
            elif len(self._pending) >= self.limits.max_unauthenticated:
                self._make_room()
            if reason is not None:
                self._turn_away(socket_instance, reason)
                refused = True
            else:
                refused = False
        if refused:
            self.refused(peer, reason)
            return None
        try:
            stream = socket_instance.makefile("rb")
            connection = self._create_connection(socket_instance, stream)
            with self.lock, self._book:
                if self.is_shutdown:
                    _drop(socket_instance)
                    return None
                connection._counted = True
                self._open += 1
                self._pending[connection] = time.monotonic() + self.limits.auth_deadline_seconds
                self.connections.add(connection)
                try:
                    connection.start()
                except BaseException:
                    connection._counted = False
                    self._open -= 1
                    self._pending.pop(connection, None)
                    raise
        except (RuntimeError, OSError, MemoryError) as exc:  # "can't start new thread", EMFILE...
            _drop(socket_instance)
            return exc
        return None

    def _make_room(self) -> None:
        """The unauthenticated slots are full: close the oldest connection that has not sent a line
        (else the oldest), so that idle peers without a token cannot lock others out: to keep a
        newcomer out they must open connections faster than its handshake (one round trip) ends.
        Refusing newcomers instead let 64 idle sockets refuse everyone (issue 39). A connection whose
        first line already waits in its socket is not silent either, though its thread has not read
        it yet (on a loaded machine 64 accepts can come first). Under ``_book``."""
        victim = eviction_victim(self._pending)
        del self._pending[victim]  # counted as open until its thread ends, no longer as pending
        victim._evicted = True
        victim.expire()

    def _turn_away(self, sock: socket.socket, reason: str) -> None:
        """Tell a connection beyond a cap why (``!busy <reason>``, no blocking), then close it once it
        has read that (see :meth:`_reap_turned_away`); reset at once when too many wait already."""
        if len(self._turned_away) >= MAX_TURNED_AWAY:
            _drop(sock)
            return
        try:
            sock.setblocking(False)
            sock.send(f"{BUSY_PREFIX}{reason}\n".encode("ascii"))
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            _drop(sock)
            return
        self._turned_away.append((sock, time.monotonic() + BUSY_LINGER_SECONDS))

    def _reap_turned_away(self) -> None:
        """Drain what refused peers sent (so closing sends no reset over their unread line) and
        close those that closed their side, or whose time is up."""
        if not self._turned_away:
            return
        now = time.monotonic()
        waiting = []
        for sock, deadline in self._turned_away:
            done = False
            try:
                for _ in range(16):  # bounded: a peer that keeps sending is reset at the deadline
                    if not sock.recv(4096):
                        done = True  # the peer closed its side
                        break
            except (BlockingIOError, InterruptedError):
                done = False
            except OSError:
                done = True
            if done:
                with contextlib.suppress(OSError):
                    sock.close()
            elif now >= deadline:
                _drop(sock)
            else:
                waiting.append((sock, deadline))
        self._turned_away = waiting

    def _expire_overdue(self) -> None:
        now = time.monotonic()
        with self._book:
            overdue = [c for c, deadline in self._pending.items() if deadline <= now]
        for connection in overdue:
            connection.expire()


def eviction_victim(pending: Iterable[KmsPy4jConnection]) -> KmsPy4jConnection:
    """Which of the unauthenticated connections (oldest first) to close for a newcomer: the oldest
    silent one (no line read, nothing waiting in its socket), else the oldest whose first line its
    thread has not read yet, else the oldest."""
    pending = list(pending)
    unread = [c for c in pending if not c.spoke]
    for connection in unread:
        if not _has_input(connection.socket):
            return connection
    return (unread or pending)[0]


def _has_input(sock) -> bool:
    """Whether the peer sent bytes this side has not read yet (or closed its side): poll, no read."""
    try:
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError, TypeError, AttributeError):  # closed meanwhile (socket None, fd -1)
        return False


def _drop(sock) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


def _describe(problem: BaseException) -> str:
    if isinstance(problem, OSError) and problem.errno is not None:
        return f"{errno.errorcode.get(problem.errno, problem.errno)}: {problem.strerror}"
    return f"{type(problem).__name__}: {problem}"


def _peer_host(sock) -> str:
    try:
        return str(sock.getpeername()[0])
    except (OSError, IndexError, TypeError):
        return "?"

