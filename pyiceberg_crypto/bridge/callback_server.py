"""A dedicated, token-authenticated Py4J callback server for the KMS, bound to loopback.

Why not PySpark's own callback server: in PySpark's default pinned-thread mode it accepts
connections *without* an auth token, so any local process could call a registered object (see
FINDINGS.md), and ``shutdown_callback_server()`` can hang. This server:

- listens on 127.0.0.1 on an ephemeral port, and requires a fresh 256-bit token (Py4J's ``A``
  auth command, compared in constant time) before any call; a connection that does not
  authenticate first is dropped (and reported to ``on_refused``, without the token);
- on any other address (the opt-in for executors on other machines) speaks TLS with a
  self-signed certificate that JVMs pin (fresh per registration, where it travels with the
  endpoint; kept in files by ``kms serve``, whose clients pin its SHA-256), so neither the token
  nor key bytes cross the network in clear;
- exposes exactly one object with an allow-list of methods (no ``getattr`` on arbitrary names);
- reports Python exceptions to Java as one ``ExceptionType: message`` line (no traceback, nothing
  logged by Py4J), which the Java bridge turns into a Spark error naming the operation and key id;
- shuts down promptly (short accept timeout, daemon threads).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import datetime
import errno
import hashlib
import hmac
import logging
import os
import select
import secrets
import socket
import ssl
import stat
import struct
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from py4j import protocol as proto
from py4j.java_gateway import (
    CallbackConnection,
    CallbackServer,
    CallbackServerParameters,
    GatewayClient,
    PythonProxyPool,
)
from py4j.protocol import get_command_part

from pyiceberg_crypto.errors import PyicebergCryptoError

LOOPBACK = "127.0.0.1"
TLS_HANDSHAKE_TIMEOUT_SECONDS = 10
#: Accept queue length (py4j's default of 5 made every 7th of 1,000 connect/close cycles wait 1 s).
LISTEN_BACKLOG = 128
#: What a connection may send before it is authenticated: the challenge-response of the bridge's
#: JVM client (two short lines) or Py4J's ``A`` command (three short lines), with margin.
MAX_AUTH_BYTES = 512
#: The longest line after authentication: the largest legitimate parameter (a wrapped key, which
#: cloud KMSs keep under a few KiB, base64-encoded) plus a wide margin.
MAX_LINE_BYTES = 64 * 1024
#: A KMS call has at most two parameters; a few more are read (and refused) to stay in step.
MAX_PARAMS = 4
#: The bridge's own authentication (the JVM client): a challenge-response in which the server
#: proves it knows the token before the client sends anything else, and the token never crosses
#: the wire (a listener squatting on the port after the KMS stopped learns nothing).
HANDSHAKE_PROTOCOL = "pyiceberg-crypto-kms/1"
#: A connection refused for a cap hears why before it is closed: ``!busy <reason>``, which the JVM
#: client shows in the failing statement (``PythonKmsEndpoint.Handshake``), instead of a reset.
BUSY_PREFIX = "!busy "
#: How long a refused connection may take to read that line (it is closed when it has, or then).
BUSY_LINGER_SECONDS = 1.0
#: Refused connections waiting to read their line at most; beyond, they are reset at once (a flood).
MAX_TURNED_AWAY = 256
#: Why an unauthenticated connection was closed to make room for a newcomer (see ``_make_room``).
EVICTED = "closed to make room: the unauthenticated slots were full"
#: Who may reconfigure the KMS through ``initialize``: the holder of the driver token only.
DRIVER_ROLE, CLIENT_ROLE = "driver", "client"
_BACKOFF_MIN_SECONDS, _BACKOFF_MAX_SECONDS = 0.05, 1.0
_TRANSIENT_ACCEPT_ERRORS = {errno.ECONNABORTED, errno.EINTR, errno.EAGAIN, errno.EPROTO, errno.EPERM}
_RESOURCE_ERRORS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}

log = logging.getLogger(__name__)


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
            raise ValueError("connection limits must be positive")


class _Refused(PyicebergCryptoError):
    """A peer broke the protocol or its bounds: the connection is closed (reason for the log)."""


class _KmsCallbackConnection(CallbackConnection):
    """One JVM connection: TLS (when configured), authentication, then allow-listed calls only."""

    role: str | None = None
    _expired = False
    #: Closed by the accept loop to make room for a newcomer (``_KmsCallbackServer._make_room``).
    _evicted = False
    #: The peer sent its first protocol line: a handshake under way, not a silent connection.
    spoke = False

    def run(self):
        server: _KmsCallbackServer = self.callback_server
        peer = _peer_host(self.socket)
        try:
            self._serve(server, peer)
        finally:
            server._forget(self)
            if self.socket is not None:
                self.close()

    def _serve(self, server: _KmsCallbackServer, peer: str) -> None:
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
                self.role = self._authenticate(server, peer)
            except (_Refused, OSError, ValueError, EOFError) as exc:
                reason = str(exc) if isinstance(exc, _Refused) else EVICTED if self._evicted else (
                    "no authentication within the deadline" if self._expired or isinstance(exc, TimeoutError)
                    else "closed during authentication")
                server.refused(peer, reason)
                self.role = None
            if self.role is None:
                self.close(reset=True)
                return
            server._authenticated(self)
            # Idle beyond this (no command): closed (TimeoutError, below). JVMs reconnect.
            self.socket.settimeout(server.limits.idle_timeout_seconds)
            readline = self.input.readline
            while True:  # the hot path: kept lean (issue 35: throughput within 5 %)
                command = readline(MAX_LINE_BYTES + 1)
                obj_id = readline(MAX_LINE_BYTES + 1)
                if obj_id[-1:] != b"\n" or command[-1:] != b"\n":
                    if len(obj_id) > MAX_LINE_BYTES or len(command) > MAX_LINE_BYTES:
                        raise _Refused(f"a line longer than {MAX_LINE_BYTES} bytes")
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
        except _Refused as exc:  # an authenticated peer broke the bounds: it learns only that
            server.refused(peer, str(exc))
            with contextlib.suppress(OSError, AttributeError):
                self.socket.sendall(proto.ERROR_RETURN_MESSAGE.encode("utf-8"))
        except TimeoutError:  # idle beyond limits.idle_timeout_seconds (or a stalled call)
            with server._book:
                server.idle_closed += 1
        except (OSError, ValueError, AttributeError, EOFError):  # the JVM closed the connection, or
            pass  # the server stopped (its shutdown closes the stream under this thread: input is None)

    def _line(self, limit: int, *, eof_ok: bool = False) -> bytes:
        """One protocol line, at most ``limit`` bytes with its newline; the newline removed."""
        line = self.input.readline(limit + 1)
        if not line:
            if eof_ok:
                return b""
            raise EOFError("the peer closed the connection")
        if len(line) > limit or not line.endswith(b"\n"):
            if len(line) > limit:
                raise _Refused(f"a line longer than {limit} bytes")
            raise EOFError("the peer closed the connection within a line")
        return line[:-1]

    def _authenticate(self, server: _KmsCallbackServer, peer: str) -> str | None:
        """The bridge's challenge-response, or Py4J's ``A`` command (token compared in constant
        time); the role whose token the peer proved, or None after telling it no."""
        budget = [MAX_AUTH_BYTES]

        def line() -> str:
            try:
                raw = self._line(budget[0])
            except _Refused:  # the same reason whatever is left of the budget (the peer chose that number)
                raise _Refused(f"more than {MAX_AUTH_BYTES} bytes before authenticating") from None
            budget[0] -= len(raw) + 1
            if budget[0] <= 0:
                raise _Refused(f"more than {MAX_AUTH_BYTES} bytes before authenticating")
            return raw.decode("ascii")

        first = line()
        self.spoke = True
        if first.startswith(HANDSHAKE_PROTOCOL + " "):
            return self._challenge(server, first, line)
        if first != proto.AUTH_COMMAND_NAME:
            raise _Refused("no token")  # dropped without a word
        token = line()
        line()  # END marker
        for role, known in server.tokens.items():
            if hmac.compare_digest(token.encode(), known.encode()):
                self.socket.sendall(proto.OUTPUT_VOID_COMMAND.encode("utf-8"))
                return role
        self.socket.sendall(proto.ERROR_RETURN_MESSAGE.encode("utf-8"))
        raise _Refused("wrong or old token")

    def _challenge(self, server: _KmsCallbackServer, first: str, line) -> str | None:
        """``pyiceberg-crypto-kms/1 ROLE NONCE`` -> ``NONCE' PROOF`` (the server knows the token)
        -> the client's ``PROOF`` -> ``!yv`` (or ``!x`` and closed)."""
        parts = first.split(" ")
        if len(parts) != 3 or parts[1] not in server.tokens or not _is_nonce(parts[2]):
            self.socket.sendall(proto.ERROR_RETURN_MESSAGE.encode("utf-8"))
            raise _Refused("wrong or old token")
        role, client_nonce = parts[1], parts[2]
        server_nonce = secrets.token_hex(32)
        token = server.tokens[role].encode()
        self.socket.sendall(f"{server_nonce} {handshake_proof(token, 'server', role, client_nonce, server_nonce)}\n"
                            .encode("ascii"))
        answer = line()
        if not hmac.compare_digest(answer.encode(), handshake_proof(token, "client", role, client_nonce,
                                                                    server_nonce).encode()):
            self.socket.sendall(proto.ERROR_RETURN_MESSAGE.encode("utf-8"))
            raise _Refused("wrong or old token")
        self.socket.sendall(proto.OUTPUT_VOID_COMMAND.encode("utf-8"))
        return role

    def expire(self) -> None:
        """Called by the accept loop when the authentication deadline passed, or to make room for a
        newcomer (``_make_room``): unblock the reads."""
        self._expired = True
        with contextlib.suppress(OSError, AttributeError):
            self.socket.shutdown(socket.SHUT_RDWR)

    def _call_proxy(self, obj_id, input, peer=""):  # noqa: A002 - py4j's signature
        if obj_id not in self.pool:
            return proto.RETURN_MESSAGE + proto.ERROR + get_command_part("Object ID unknown", self.pool)
        method = "?"
        failed = True
        try:
            method = input.readline(MAX_LINE_BYTES + 1)
            if method[-1:] != b"\n":
                if len(method) > MAX_LINE_BYTES:
                    raise _Refused(f"a line longer than {MAX_LINE_BYTES} bytes")
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


def handshake_proof(token: bytes, side: str, role: str, client_nonce: str, server_nonce: str) -> str:
    """HMAC-SHA256 under the token of who proves (``server``/``client``), the role and both nonces."""
    message = f"{HANDSHAKE_PROTOCOL} {side} {role} {client_nonce} {server_nonce}".encode("ascii")
    return hmac.new(token, message, hashlib.sha256).hexdigest()


def _is_nonce(value: str) -> bool:
    return len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def read_params(input) -> list:  # noqa: A002 - py4j's name
    """A call's parameters: one typed line each (Py4J protocol), up to the ``e`` line.

    The KMS protocol passes byte arrays and strings only (:class:`PythonKms` in Java), and only
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
                raise _Refused(f"a line longer than {MAX_LINE_BYTES} bytes")
            raise EOFError("the JVM closed the connection during a call")
        if raw == b"e\n":
            break
        count += 1
        if count > MAX_PARAMS:
            raise _Refused(f"more than {MAX_PARAMS} parameters in a call")
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


class _KmsCallbackServer(CallbackServer):
    tls_context: ssl.SSLContext | None = None
    tokens: dict[str, str]
    limits: ConnectionLimits
    on_call: Callable[[str, str, bool], None] | None = None
    on_refused: Callable[[str, str], None] | None = None

    def setup(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.tokens = {}
        self._book = threading.Lock()
        self._pending: dict[_KmsCallbackConnection, float] = {}  # not yet authenticated -> deadline
        self._open = 0
        self.accepting = False
        self.accept_failures = 0  # failed accepts / thread starts, over the server's life
        self.idle_closed = 0  # authenticated connections closed for idling, over the server's life
        self._turned_away: list[tuple[socket.socket, float]] = []  # refused, reading their busy line

    def _create_connection(self, socket_instance, stream):
        return _KmsCallbackConnection(
            self.pool, stream, socket_instance, self.gateway_client, self.callback_server_parameters, self
        )

    def refused(self, peer: str, reason: str) -> None:
        if self.on_refused is not None:
            self.on_refused(peer, reason)

    def _authenticated(self, connection: _KmsCallbackConnection) -> None:
        with self._book:
            self._pending.pop(connection, None)

    def _forget(self, connection: _KmsCallbackConnection) -> None:
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
        Refusing newcomers instead let 64 idle sockets refuse everyone (issue 39). Under ``_book``."""
        victim = next((c for c in self._pending if not c.spoke), None) or next(iter(self._pending))
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


@dataclass(frozen=True)
class TlsIdentity:
    """The listener's TLS key and self-signed certificate (DER), which JVMs pin.

    :meth:`fresh` makes a throw-away one (``register_kms``: the certificate travels with the
    endpoint); :meth:`load_or_create` keeps one in two files, so that a restarted KMS service keeps
    the pin its clients were configured with.
    """

    context: ssl.SSLContext
    certificate: bytes

    @property
    def sha256(self) -> str:
        """The pin clients are configured with: SHA-256 of the DER certificate, hex."""
        return hashlib.sha256(self.certificate).hexdigest()

    @classmethod
    def fresh(cls) -> TlsIdentity:
        key_pem, cert_pem = _self_signed_pem()
        return cls(_server_context(key_pem, cert_pem), _der(cert_pem))

    @classmethod
    def load_or_create(cls, key_file: str | os.PathLike, certificate_file: str | os.PathLike) -> TlsIdentity:
        """Read the key (PEM, must be mode 0600) and certificate, or create both when neither exists.

        Both files and their directories must belong to the running user and not be writable by
        others (:func:`read_operator_file`): a key planted by another user is never adopted."""
        key_path, cert_path = Path(key_file), Path(certificate_file)
        for path in (key_path, cert_path):
            check_operator_directory(path.parent, "TLS")
        if not os.path.lexists(key_path) and not os.path.lexists(cert_path):
            key_pem, cert_pem = _self_signed_pem()
            write_private_file(key_path, key_pem)
            write_private_file(cert_path, cert_pem, mode=0o644)
        key_pem = read_operator_file(key_path, "TLS key", private=True)
        cert_pem = read_operator_file(cert_path, "TLS certificate")
        return cls(_server_context(key_pem, cert_pem), _der(cert_pem))


class UnsafeFileError(PyicebergCryptoError, PermissionError):
    """A token or TLS file, or its directory, that another user could have written or swapped."""


def check_operator_directory(directory: str | os.PathLike, what: str) -> None:
    """``directory`` (created 0700 if missing) must belong to the running user (or root) and not be
    group- or world-writable: anyone who can write it can replace the files in it."""
    directory = Path(directory)
    if not directory.exists():
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = directory.stat()
    if info.st_uid not in (os.geteuid(), 0):
        raise UnsafeFileError(f"the {what} directory {directory} belongs to uid {info.st_uid}, not to this user "
                              f"(uid {os.geteuid()}): its owner could replace the files in it")
    if info.st_mode & 0o022:
        raise UnsafeFileError(f"the {what} directory {directory} is writable by "
                              f"{'everyone' if info.st_mode & 0o002 else 'its group'} (mode "
                              f"{stat.S_IMODE(info.st_mode):o}): other users could replace the files in it; "
                              "use a directory only this user can write (chmod go-w, or another directory)")


def read_operator_file(path: str | os.PathLike, what: str, *, private: bool = False, limit: int = 1 << 20) -> bytes:
    """Read a file that must belong to the running user, without following a symlink (O_NOFOLLOW),
    a regular file of at most ``limit`` bytes; ``private``: not readable by others either."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeFileError(f"the {what} {path} is a symlink: refused (point the option at the file itself)") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeFileError(f"the {what} {path} is not a regular file")
        if info.st_uid != os.geteuid():
            raise UnsafeFileError(f"the {what} {path} belongs to uid {info.st_uid}, not to this user "
                                  f"(uid {os.geteuid()}): refused, another user may have planted it")
        if private and info.st_mode & 0o077:
            raise UnsafeFileError(f"the {what} {path} is readable by other users: chmod 600 it")
        if info.st_mode & 0o022:
            raise UnsafeFileError(f"the {what} {path} is writable by other users: chmod go-w it")
        if info.st_size > limit:
            raise UnsafeFileError(f"the {what} {path} is larger than {limit} bytes")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read(limit + 1)
    finally:
        os.close(fd)


class KmsCallbackServer:
    """Serve one Python object to JVMs over an authenticated Py4J callback server.

    ``gateway_client``: the PySpark gateway's client (only used to decode Java object references,
    which the KMS protocol never sends); None for a server without a JVM of its own (``kms serve``).
    ``tls``: the TLS identity for a non-loopback address (a fresh one when not given).
    ``auth_token``: the token every client holds (shipped to executors); ``driver_token``: a second
    one, kept by the driver JVM only, whose connections alone may call ``initialize`` (None: none).
    ``limits``: connection caps and the authentication deadline.
    ``on_call(peer, method, failed)`` / ``on_refused(peer, reason)``: hooks for counting and
    logging (they never receive the token).
    """

    def __init__(self, target, gateway_client=None, *, address: str = LOOPBACK, port: int = 0,
                 auth_token: str | None = None, tls: TlsIdentity | None = None, object_id: str | None = None,
                 on_call: Callable[[str, str, bool], None] | None = None,
                 on_refused: Callable[[str, str], None] | None = None,
                 driver_token: str | None = None, limits: ConnectionLimits | None = None):
        self.auth_token = auth_token or secrets.token_hex(32)
        self.driver_token = driver_token
        #: DER certificate JVMs must pin (None on 127.0.0.1, where the channel never leaves the host).
        self.certificate: bytes | None = None
        self._pool = PythonProxyPool()
        self.object_id = self._pool.put(target, object_id)
        params = CallbackServerParameters(
            address=address,
            port=port,
            daemonize=True,
            daemonize_connections=True,
            eager_load=False,
            accept_timeout=0.2,
            auth_token=self.auth_token,
        )
        if gateway_client is None:  # never connected: the KMS protocol has no Java references
            gateway_client = GatewayClient(address=LOOPBACK, port=1)
        self._server = _KmsCallbackServer(self._pool, gateway_client, callback_server_parameters=params)
        self._server.setup(limits or ConnectionLimits())
        self._server.tokens = {CLIENT_ROLE: self.auth_token}
        if driver_token:
            self._server.tokens[DRIVER_ROLE] = driver_token
        self._server.on_call, self._server.on_refused = on_call, on_refused
        if address != LOOPBACK:
            identity = tls or TlsIdentity.fresh()
            self._server.tls_context, self.certificate = identity.context, identity.certificate
        self._server.start()
        # The accept thread calls listen() too: listen here already (a second listen() is
        # harmless), so a JVM connecting as soon as the port is known is never refused.
        self._server.server_socket.listen(LISTEN_BACKLOG)
        self.address = address
        self.port = self._server.get_listening_port()
        self._closed = False

    def close(self) -> None:
        """Stop listening and drop live connections (idempotent, returns within ~0.2 s)."""
        if not self._closed:
            self._closed = True
            self._server.shutdown()

    @property
    def tls(self) -> bool:
        return self.certificate is not None

    @property
    def accepting(self) -> bool:
        """True while the accept thread runs (it survives peers; only close() ends it)."""
        thread = getattr(self._server, "thread", None)
        return bool(not self._closed and self._server.accepting and thread is not None and thread.is_alive())

    def connection_counts(self) -> dict[str, int]:
        return {"open": self._server.open_connections,
                "unauthenticated": self._server.unauthenticated_connections,
                "accept_failures": self._server.accept_failures, "idle_closed": self._server.idle_closed}

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:  # never show the token
        return f"KmsCallbackServer({self.address}:{self.port}, closed={self._closed})"


def write_private_file(path: str | os.PathLike, data: bytes, *, mode: int = 0o600) -> None:
    """Write ``data`` to ``path`` with ``mode`` (0600), atomically (a reader sees the old or the new
    file; a symlink at ``path`` is replaced, never followed)."""
    path = Path(path)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _self_signed_pem() -> tuple[bytes, bytes]:
    """A fresh EC P-256 key and a self-signed certificate, PEM (no CA, no host name: the pin is the identity)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pyiceberg-crypto Python KMS")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return key_pem, certificate.public_bytes(serialization.Encoding.PEM)


def _der(certificate_pem: bytes) -> bytes:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    return x509.load_pem_x509_certificate(certificate_pem).public_bytes(serialization.Encoding.DER)


def _server_context(key_pem: bytes, certificate_pem: bytes) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    # ssl loads keys only from files: a private directory, removed at once.
    with tempfile.TemporaryDirectory(prefix="pyiceberg-crypto-tls-") as directory:
        key_path, cert_path = os.path.join(directory, "key.pem"), os.path.join(directory, "cert.pem")
        with open(os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as handle:
            handle.write(key_pem)
        with open(cert_path, "wb") as handle:
            handle.write(certificate_pem)
        context.load_cert_chain(cert_path, key_path)
    return context
