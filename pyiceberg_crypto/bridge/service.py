"""A KMS service: any Python KMS served to every JVM that has the service's catalog properties,
with no Python process in the application (``spark-sql``, the Thrift server, Spark Connect, JVM jobs).

    service = KmsService(lambda: load_kms("keystore", {"keystore.path": "/etc/lake/keys.json"}),
                         listen="127.0.0.1:9600", token_file="/run/lake/kms.token")
    service.start()        # writes a fresh token (0600, atomically), then accepts calls
    service.reload()       # a changed keystore: new calls use the new KMS, nobody is dropped
    service.status()       # calls per operation and per client, refused clients
    service.health("canary")   # (ok, reason): a canary wrap/unwrap through the KMS
    service.close()        # stops listening, removes the token file

The command line is ``pyiceberg-crypto kms serve`` (:mod:`pyiceberg_crypto.cli.kms_cmd`). The JVM
side is the bridge's ``PythonKmsClient`` configured by catalog properties that
:func:`pyiceberg_crypto.config.kms_service_properties` renders.

Security model: the token authenticates callers (a JVM that reads the token file, or an executor
that got the token inside its task from a driver that read it); the service listens on loopback
unless told otherwise and speaks TLS on any other address, with a certificate kept in two files
next to the token file so that a restart keeps the pin clients are configured with. Every call is
bounded by ``call_timeout``. Nothing logged carries key bytes or the token.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyiceberg_crypto.bridge.adapter import KmsCallbackAdapter, OperationStats
from pyiceberg_crypto.bridge.callback_server import (
    EVICTED,
    LOOPBACK,
    MAX_AUTH_BYTES,
    MAX_LINE_BYTES,
    MAX_PARAMS,
    ConnectionLimits,
    KmsCallbackServer,
    TlsIdentity,
    check_operator_directory,
    write_private_file,
)
from pyiceberg_crypto.kms.base import KeyGenerationResult, KeyManagementClient, KmsError, UnknownKeyError
from pyiceberg_crypto.kms.bounded import KmsCallPool, KmsTimeoutError, call_with_timeout
from pyiceberg_crypto.errors import PyicebergCryptoError
from pyiceberg_crypto.safe_text import exception_line

#: The Py4J object id the JVM client calls (``KmsServiceAddress.OBJECT_ID`` in the bridge jar).
OBJECT_ID = "pyiceberg-crypto-kms"
DEFAULT_CALL_TIMEOUT_SECONDS = 30.0
#: Java method names -> the operations counted.
_OPERATIONS = {"wrapKey": "wrap", "unwrapKey": "unwrap", "generateKey": "generate",
               "supportsKeyGeneration": "supports-generation", "initialize": "initialize"}

#: Peers whose counts the service keeps (calls, refusals), the least recently seen forgotten first:
#: a peer cycling through source addresses (127.0.0.0/8, an IPv6 prefix) cannot grow them forever.
MAX_TRACKED_PEERS = 1024
#: The label of a refusal whose reason is not one of the listener's known ones (never expected).
OTHER_REFUSAL = "other"

log = logging.getLogger(__name__)


def refusal_reasons(limits: ConnectionLimits) -> frozenset[str]:
    """Every reason the listener gives for a refusal: the only values of the ``reason`` label (the
    caps are the operator's numbers; nothing a peer sends becomes part of a label)."""
    return frozenset({
        "no token", "wrong or old token", "no authentication within the deadline", "closed during authentication",
        EVICTED, f"more than {MAX_AUTH_BYTES} bytes before authenticating", f"a line longer than {MAX_LINE_BYTES} bytes",
        f"more than {MAX_PARAMS} parameters in a call",
        f"too many connections (cap {limits.max_connections})",
        f"too many unauthenticated connections (cap {limits.max_unauthenticated})",
    })


class PeerCounts:
    """Counters per peer address, at most ``max_peers`` of them (least recently counted dropped).

        counts = PeerCounts(2)
        counts.add("10.0.0.1", "wrap")
        counts.to_dict()   # {"10.0.0.1": {"wrap": 1}}
    """

    def __init__(self, max_peers: int = MAX_TRACKED_PEERS):
        self.max_peers = max_peers
        self._peers: OrderedDict[str, Counter] = OrderedDict()
        #: Peers dropped to stay within ``max_peers``, over the service's life.
        self.forgotten = 0

    def add(self, peer: str, key: str, amount: int = 1) -> None:
        counts = self._peers.get(peer)
        if counts is None:
            counts = self._peers[peer] = Counter()
            while len(self._peers) > self.max_peers:
                self._peers.popitem(last=False)
                self.forgotten += 1
        else:
            self._peers.move_to_end(peer)
        counts[key] += amount

    def to_dict(self) -> dict[str, dict[str, int]]:
        return {peer: dict(counts) for peer, counts in sorted(self._peers.items())}

    def __len__(self) -> int:
        return len(self._peers)


class KmsServiceError(PyicebergCryptoError, RuntimeError):
    """The service cannot start (address in use, unwritable token file, unreadable TLS key...)."""


def parse_listen(listen: str) -> tuple[str, int]:
    """``"HOST:PORT"`` (``[::1]:9600`` for IPv6) -> (host, port); port 0 picks a free port."""
    host, sep, port = listen.strip().rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--listen must be HOST:PORT (e.g. 127.0.0.1:9600), got {listen!r}")
    return host, int(port)


def tls_files(token_file: str | os.PathLike) -> tuple[Path, Path]:
    """Where the service keeps its TLS key and certificate by default: beside the token file."""
    token = Path(token_file)
    return token.with_name(token.name + ".tls-key.pem"), token.with_name(token.name + ".tls-cert.pem")


class RateLimitedLog:
    """At most one line per ``interval`` seconds per kind; the next line says how many were left out
    (1,000 refused connections are a few lines, not 1,000)."""

    def __init__(self, logger: logging.Logger, interval: float = 10.0):
        self.logger, self.interval = logger, interval
        self._last: dict[str, float] = {}
        self._suppressed: Counter = Counter()
        self._lock = threading.Lock()

    def warning(self, kind: str, message: str, *args) -> None:
        now = time.monotonic()
        with self._lock:
            if now - self._last.get(kind, -1e18) < self.interval:
                self._suppressed[kind] += 1
                return
            self._last[kind] = now
            left_out = self._suppressed.pop(kind, 0)
        if left_out:
            message += f" ({left_out} more like it in the last {self.interval:g} s not logged)"
        self.logger.warning(message, *args)


class _TimeBoundKms(KeyManagementClient):
    """The served KMS with every call bounded by ``timeout`` (a hung KMS fails the call, clearly),
    and errors told to clients by key id only: the detail (a keystore's path, its versions, a cloud
    endpoint) goes to the service's log, not to every token holder."""

    def __init__(self, kms: KeyManagementClient, timeout: float, errors: RateLimitedLog | None = None,
                 runner: Callable[..., Any] = call_with_timeout):
        self.kms = kms
        self.timeout = timeout
        self.errors = errors or RateLimitedLog(log)
        self.runner = runner  # call_with_timeout (a thread per call) or a KmsCallPool

    def on(self, runner: Callable[..., Any]) -> _TimeBoundKms:
        """The same KMS, timeout and error log, its calls run by ``runner`` (a :class:`KmsCallPool`)."""
        return _TimeBoundKms(self.kms, self.timeout, self.errors, runner)

    def _call(self, operation: str, wrapping_key_id: str, fn, *args):
        try:
            return self.runner(fn, *args, timeout=self.timeout, what=f"the KMS call {operation}")
        except KmsTimeoutError:
            raise
        except Exception as exc:
            detail = f"{type(exc).__name__}: {exc}".replace("\n", " ")
            self.errors.warning(f"call-{operation}", "KMS call %s with key id %r failed: %s", operation,
                                wrapping_key_id, detail)
            if isinstance(exc, UnknownKeyError):
                raise UnknownKeyError(f"key id {wrapping_key_id!r} (or the version the wrapped key names) is not "
                                      "known to this KMS service") from None
            kind = type(exc).__name__ if isinstance(exc, KmsError) else "KmsError"
            raise KmsError(f"{operation} with key id {wrapping_key_id!r} failed ({kind}; the KMS service's log "
                           "has the detail)") from None

    def wrap_key(self, key: bytes, wrapping_key_id: str) -> bytes:
        return self._call("wrap_key", wrapping_key_id, self.kms.wrap_key, key, wrapping_key_id)

    def unwrap_key(self, wrapped_key: bytes, wrapping_key_id: str) -> bytes:
        return self._call("unwrap_key", wrapping_key_id, self.kms.unwrap_key, wrapped_key, wrapping_key_id)

    def supports_key_generation(self) -> bool:
        return bool(self.kms.supports_key_generation())

    def generate_key(self, wrapping_key_id: str) -> KeyGenerationResult:
        return self._call("generate_key", wrapping_key_id, self.kms.generate_key, wrapping_key_id)

    def initialize(self, properties: dict[str, str]) -> None:
        call_with_timeout(self.kms.initialize, properties, timeout=self.timeout, what="the KMS call initialize")


class KmsService:
    """One Python KMS behind an authenticated listener, for many JVMs at once (see module doc)."""

    def __init__(self, kms_factory: Callable[[], KeyManagementClient], *, token_file: str | os.PathLike,
                 listen: str = f"{LOOPBACK}:9600", call_timeout: float = DEFAULT_CALL_TIMEOUT_SECONDS,
                 tls_key_file: str | os.PathLike | None = None,
                 tls_certificate_file: str | os.PathLike | None = None, name: str = "kms",
                 limits: ConnectionLimits | None = None):
        if call_timeout <= 0:
            raise ValueError("call_timeout must be positive")
        self.host, self.requested_port = parse_listen(listen)
        self.token_file = Path(token_file).absolute()
        self.call_timeout = call_timeout
        self.name = name
        default_key, default_certificate = tls_files(self.token_file)
        self.tls_key_file = Path(tls_key_file or default_key)
        self.tls_certificate_file = Path(tls_certificate_file or default_certificate)
        self._factory = kms_factory
        self._adapter: KmsCallbackAdapter | None = None
        self._server: KmsCallbackServer | None = None
        self._tls: TlsIdentity | None = None
        self._lock = threading.Lock()
        self.limits = limits or ConnectionLimits()
        self._clients = PeerCounts()
        self._refused = PeerCounts()
        self._refused_reasons: Counter = Counter()
        self._known_refusals = refusal_reasons(self.limits)
        self._log = RateLimitedLog(log)
        self._token_stat: tuple[int, int] | None = None
        self._reloads = 0
        self._health_lock = threading.Lock()
        self._health: tuple[float, bool, str] | None = None
        self._health_counts: Counter = Counter()
        self._started_at = 0.0
        self._token = ""
        #: More Prometheus text for ``--metrics`` (the AWS KMS face adds its own families here).
        self.metric_sources: list[Callable[[], str]] = []

    # --- life cycle --------------------------------------------------------------------------

    def start(self) -> KmsService:
        """Build the KMS, write a fresh token, then listen. Raises :class:`KmsServiceError`."""
        kms = self._factory()
        # Configured by its operator only: no client may pass properties to initialize().
        self._adapter = KmsCallbackAdapter(_TimeBoundKms(kms, self.call_timeout, self._log),
                                           initialize_policy="operator")
        if self.host != LOOPBACK:
            try:
                self._tls = TlsIdentity.load_or_create(self.tls_key_file, self.tls_certificate_file)
            except (OSError, ValueError) as exc:
                raise KmsServiceError(f"cannot load the TLS key/certificate {self.tls_key_file}, "
                                      f"{self.tls_certificate_file}: {exc}") from None
        token = self._token = secrets.token_hex(32)
        try:
            check_operator_directory(self.token_file.parent, "token")
            write_private_file(self.token_file, (token + "\n").encode())
            written = os.stat(self.token_file, follow_symlinks=False)
            self._token_stat = (written.st_dev, written.st_ino)
        except OSError as exc:
            raise KmsServiceError(f"cannot write the token file {self.token_file}: {exc}") from None
        try:
            self._server = KmsCallbackServer(
                self._adapter, address=self.host, port=self.requested_port, auth_token=token, tls=self._tls,
                object_id=OBJECT_ID, on_call=self._count_call, on_refused=self._refuse, limits=self.limits)
        except Exception as exc:  # py4j wraps bind errors (address in use, not an address of this host)
            self._remove_token_file()
            cause = exc.__cause__ or getattr(exc, "cause", None) or exc
            raise KmsServiceError(f"cannot listen on {self.host}:{self.requested_port}: {cause}") from None
        self._started_at = time.time()
        log.info("KMS service %r listening on %s:%d%s; token in %s", self.name, self.host, self.port,
                 f" (TLS, certificate sha256 {self._tls.sha256})" if self._tls else "", self.token_file)
        return self

    def served_kms(self, pool: KmsCallPool | None = None) -> KeyManagementClient:
        """The KMS as served now (time-bounded, errors by key id only; follows :meth:`reload`):
        what another face of this service, such as the AWS KMS API, calls. ``pool``: its calls run
        on that pool's persistent threads, with the same timeout, instead of a thread each."""
        assert self._adapter is not None, "start() first"
        kms = self._adapter.kms
        return kms if pool is None else kms.on(pool)

    def reload(self) -> None:
        """Rebuild the KMS from its factory (a changed keystore); calls in flight finish on the old one.

        On failure the old KMS keeps serving and the error is raised."""
        kms = self._factory()
        assert self._adapter is not None, "start() first"
        old, self._adapter.kms = self._adapter.kms, _TimeBoundKms(kms, self.call_timeout, self._log)
        with self._lock:
            self._reloads += 1
        log.info("KMS service %r reloaded its KMS (%s)", self.name, type(kms).__name__)
        del old  # calls in flight hold their own reference; the old KMS is not closed under them

    def close(self) -> None:
        """Stop listening, drop connections, remove the token file (idempotent)."""
        if self._server is not None and not self._server.closed:
            self._server.close()
            self._remove_token_file()
            log.info("KMS service %r stopped", self.name)

    def __enter__(self) -> KmsService:
        return self.start() if self._server is None else self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- what clients need ---------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._server.port if self._server else self.requested_port

    @property
    def address(self) -> str:
        """``HOST:PORT`` as clients write it (``pyiceberg-crypto.kms-service``)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def certificate_sha256(self) -> str | None:
        """The pin clients need on a non-loopback address (None on loopback: no TLS)."""
        return self._tls.sha256 if self._tls else None

    @property
    def accepting(self) -> bool:
        """True while the listener's accept thread is alive (what a health check asks)."""
        return bool(self._server and self._server.accepting)

    def status(self) -> dict[str, Any]:
        """Calls per operation and per client (peer address), refused connections (per peer and
        per reason), whether the accept thread is alive, open connections; no secrets. At most
        :data:`MAX_TRACKED_PEERS` peers each (``peers_forgotten`` counts the ones dropped)."""
        stats = self._adapter.stats.to_dict() if self._adapter else {}
        with self._lock:
            clients = self._clients.to_dict()
            refused = {peer: counts["refused"] for peer, counts in self._refused.to_dict().items()}
            forgotten = {"clients": self._clients.forgotten, "refused": self._refused.forgotten}
            reasons = dict(self._refused_reasons)
            reloads = self._reloads
        open_ = bool(self._server and not self._server.closed)
        accepting = self.accepting
        return {
            "name": self.name, "pid": os.getpid(), "listen": self.address, "tls": self._tls is not None,
            "certificate_sha256": self.certificate_sha256, "token_file": str(self.token_file),
            "started_at": self._started_at, "running": open_ and accepting, "accepting": accepting,
            "connections": self._server.connection_counts() if self._server else {},
            "limits": {"max_connections": self.limits.max_connections,
                       "max_unauthenticated": self.limits.max_unauthenticated,
                       "auth_deadline_seconds": self.limits.auth_deadline_seconds,
                       "idle_timeout_seconds": self.limits.idle_timeout_seconds},
            "operations": stats, "clients": clients, "refused": refused, "refused_reasons": reasons,
            "peers_forgotten": forgotten,
            "reloads": reloads,
        }

    def operation_stats(self) -> dict[str, OperationStats]:
        """A consistent copy of the calls, failures and latency histogram per operation."""
        return self._adapter.stats.snapshot().operations if self._adapter else {}

    def health(self, key_id: str | None, max_age: float = 5.0) -> tuple[bool, str]:
        """(healthy, reason): the listener accepts connections and, with ``key_id``, a canary
        wrap + unwrap of a random key through the served KMS (bounded by the call timeout) gives
        the key back. The answer is reused for ``max_age`` seconds. No key bytes in the reason."""
        with self._health_lock:
            now = time.monotonic()
            if self._health is not None and now - self._health[0] < max_age:
                return self._health[1], self._health[2]
            healthy, reason = self._canary(key_id)
            self._health = (time.monotonic(), healthy, reason)
            with self._lock:
                self._health_counts["ok" if healthy else "failed"] += 1
            if not healthy:
                self._log.warning("health", "KMS service %r is unhealthy: %s", self.name, reason)
            return healthy, reason

    def health_counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._health_counts)

    def _canary(self, key_id: str | None) -> tuple[bool, str]:
        if not self.accepting or self._adapter is None:
            return False, f"the listener on {self.address} is not accepting connections"
        if not key_id:
            return True, f"listening on {self.address} (no canary: kms serve --health-key KEY_ID)"
        kms = self._adapter.kms
        key = secrets.token_bytes(16)
        started = time.perf_counter()
        try:
            same = kms.unwrap_key(kms.wrap_key(key, key_id), key_id) == key
        except Exception as exc:  # the KMS's failure, in the words clients get
            return False, f"canary wrap/unwrap with key id {key_id!r} failed: {exception_line(exc)}"
        if not same:
            return False, f"canary wrap/unwrap with key id {key_id!r}: the unwrapped key differs from the wrapped one"
        return True, f"canary wrap/unwrap with key id {key_id!r} in {(time.perf_counter() - started) * 1000:.1f} ms"

    def check_token_file(self) -> bool:
        """True if the token file is still the one this service wrote; else warn and write it again
        (replaced or removed by someone else: clients reading it would fail to authenticate)."""
        try:
            info = os.stat(self.token_file, follow_symlinks=False)
            same = self._token_stat == (info.st_dev, info.st_ino)
        except OSError:
            same = False
        if same or self._server is None or self._server.closed:
            return True
        self._log.warning("token-file", "the token file %s was replaced or removed by someone else since the "
                          "service wrote it: writing this service's token again", self.token_file)
        try:
            check_operator_directory(self.token_file.parent, "token")
            write_private_file(self.token_file, (self._token + "\n").encode())
            written = os.stat(self.token_file, follow_symlinks=False)
            self._token_stat = (written.st_dev, written.st_ino)
        except OSError as exc:
            self._log.warning("token-file-write", "cannot write the token file %s again: %s", self.token_file, exc)
        return False

    def write_status(self, path: str | os.PathLike) -> None:
        """:meth:`status` as JSON, replaced atomically (what monitoring and the tests read)."""
        write_private_file(path, (json.dumps(self.status(), indent=2, sort_keys=True) + "\n").encode())

    # --- hooks of the callback server ------------------------------------------------------------

    def _count_call(self, peer: str, method: str, failed: bool) -> None:
        operation = _OPERATIONS.get(method, "other")
        with self._lock:
            self._clients.add(peer, operation)
            if failed:
                self._clients.add(peer, "failures")

    def _refuse(self, peer: str, reason: str) -> None:
        label = reason if reason in self._known_refusals else OTHER_REFUSAL
        with self._lock:
            self._refused.add(peer, "refused")
            self._refused_reasons[label] += 1
        self._log.warning("refused", "KMS service %r refused a connection from %s: %s", self.name, peer, reason)

    def _remove_token_file(self) -> None:
        """Remove the token file if it still holds this service's token (not a successor's)."""
        try:
            if self.token_file.read_text().strip() == self._token:
                self.token_file.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("could not remove the token file %s: %s", self.token_file, exc)
