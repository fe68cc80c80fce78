"""The Py4J face of ``kms serve``: the served KMS (:mod:`.served_kms`) for every JVM that has the
service's catalog properties, with no Python process in the application (``spark-sql``, the Thrift
server, Spark Connect, JVM jobs).

    served = ServedKms(lambda: load_kms("keystore", {"keystore.path": "/etc/lake/keys.json"})).start()
    face = Py4jFace(served, listen="127.0.0.1:9600", token_file="/run/lake/kms.token")
    face.start()           # writes a fresh token (0600, atomically), then accepts calls
    served.reload()        # a changed keystore: new calls use the new KMS, nobody is dropped
    face.status()          # calls per operation and per client, refused clients
    face.health("canary")  # (ok, reason): the listener accepts, and a canary wrap/unwrap works
    face.close()           # stops listening, removes the token file

The command line is ``pyiceberg-crypto kms serve`` (:mod:`pyiceberg_crypto.cli.kms_cmd`). The JVM
side is the bridge's ``PythonKmsClient`` configured by catalog properties that
:func:`pyiceberg_crypto.config.kms_service_properties` renders. The listener itself (token
handshake, connection caps) is the bridge's :class:`~pyiceberg_crypto.bridge.callback_server.KmsCallbackServer`;
its TLS and token files are :mod:`pyiceberg_crypto.listener`'s, as the AWS face's are.

Security model: the token authenticates callers (a JVM that reads the token file, or an executor
that got the token inside its task from a driver that read it); the face listens on loopback
unless told otherwise and speaks TLS on any other address, with a certificate kept in two files
next to the token file so that a restart keeps the pin clients are configured with. Every call is
bounded by the served KMS's ``kms_timeout``. Nothing logged carries key bytes or the token.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import threading
import time
from collections import Counter, OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyiceberg_crypto._deprecated import renamed_classes
from pyiceberg_crypto.errors import SetupError
from pyiceberg_crypto._net import listen_address, parse_listen
from pyiceberg_crypto._prometheus import counter, gauge, histogram, render
from pyiceberg_crypto._prometheus import LATENCY_BUCKETS
from pyiceberg_crypto.bridge.adapter import KmsCallbackAdapter, OperationStats
from pyiceberg_crypto.bridge.callback_server import KmsCallbackServer
from pyiceberg_crypto.bridge.handshake import MAX_AUTH_BYTES
from pyiceberg_crypto.bridge.py4j_server import CALLER, EVICTED, MAX_LINE_BYTES, MAX_PARAMS, ConnectionLimits
from pyiceberg_crypto.kms.base import KeyGenerationResult, KeyManagementClient
from pyiceberg_crypto.listener.files import check_operator_directory, read_operator_file, write_private_file
from pyiceberg_crypto.listener.sockets import LOOPBACK
from pyiceberg_crypto.listener.tls import TlsIdentity
from pyiceberg_crypto.serve.served_kms import RateLimitedLog, ServedKms

if TYPE_CHECKING:
    from pyiceberg_crypto.serve.policy import Policy

__all__ = ["MAX_TRACKED_PEERS", "OBJECT_ID", "PeerCounts", "Py4jFace", "refusal_reasons",
           "tls_files"]

#: Old names, kept for one release (CHANGELOG.md).
__getattr__ = renamed_classes(__name__, {"KmsServiceError": SetupError})

#: The metric names' prefix (``pyiceberg_crypto_kms_calls_total``, ...).
PREFIX = "pyiceberg_crypto_kms"
#: The reason a connection carrying a wrong or old token is refused (the callback server's word).
WRONG_TOKEN = "wrong or old token"
#: The Py4J object id the JVM client calls (``KmsServiceAddress.OBJECT_ID`` in the bridge jar).
OBJECT_ID = "pyiceberg-crypto-kms"
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


#: The principal of the ``--token-file`` token in a policy (``py4j:NAME`` for a named token).
DEFAULT_PRINCIPAL = "py4j:default"


def _principal() -> tuple[str, str]:
    """(principal, peer) of the Py4J call running in this thread (the connection's proven token)."""
    role = getattr(CALLER, "role", None)
    peer = getattr(CALLER, "peer", "?")
    if role is None or role == "client":
        return DEFAULT_PRINCIPAL, peer
    return f"py4j:{role}", peer


#: Per connection thread: whether the call running reached ServedKms.perform (which records it).
_REACHED = threading.local()


class _GovernedKms(KeyManagementClient):
    """The served KMS as one Py4J caller may use it: every call checked against its grants,
    counted and audited by :meth:`ServedKms.perform` (the caller is the connection's token)."""

    def __init__(self, served: ServedKms):
        self.served = served

    def wrap_key(self, key: bytes, wrapping_key_id: str) -> bytes:
        _REACHED.recorded = True
        principal, peer = _principal()
        served = self.served
        return served.perform("py4j", principal, peer, "wrap", wrapping_key_id,
                              lambda: served.client().wrap_key(key, wrapping_key_id),
                              version=lambda wrapped: served.key_version(wrapped, wrapping_key_id))

    def unwrap_key(self, wrapped_key: bytes, wrapping_key_id: str) -> bytes:
        _REACHED.recorded = True
        principal, peer = _principal()
        served = self.served
        return served.perform("py4j", principal, peer, "unwrap", wrapping_key_id,
                              lambda: served.client().unwrap_key(wrapped_key, wrapping_key_id),
                              version=lambda _: served.key_version(wrapped_key, wrapping_key_id))

    def supports_key_generation(self) -> bool:
        return self.served.client().supports_key_generation()

    def generate_key(self, wrapping_key_id: str) -> KeyGenerationResult:
        _REACHED.recorded = True
        principal, peer = _principal()
        served = self.served
        return served.perform("py4j", principal, peer, "generate", wrapping_key_id,
                              lambda: served.client().generate_key(wrapping_key_id),
                              version=lambda result: served.key_version(result.wrapped_key, wrapping_key_id))

    def initialize(self, properties: dict[str, str]) -> None:
        self.served.client().initialize(properties)


def tls_files(token_file: str | os.PathLike) -> tuple[Path, Path]:
    """Where the service keeps its TLS key and certificate by default: beside the token file."""
    token = Path(token_file)
    return token.with_name(token.name + ".tls-key.pem"), token.with_name(token.name + ".tls-cert.pem")


class Py4jFace:
    """The served KMS behind an authenticated Py4J listener, for many JVMs at once (see module doc).

    Args:
        served: the KMS this face serves (started by :meth:`start` if it is not yet).
        token_file: where the fresh token is written at each start (0600); JVMs read it.
        listen: ``HOST:PORT``; any host but loopback gets TLS. limits: the listener's caps and deadlines.
        tls_key_file, tls_certificate_file: the TLS identity (default: beside the token file).
        replica: one of several replicas serving the same clients (``kms serve --replica``): the
            token is READ from ``token_file`` (and a named token from the file the policy names),
            which the operator wrote and gave every replica, instead of written fresh; the files are
            left in place at stop; :meth:`revoke_token` re-reads them; the TLS key and certificate
            must exist (the same files on every replica: one pin), never made here.
    """

    def __init__(self, served: ServedKms, *, token_file: str | os.PathLike,
                 listen: str = f"{LOOPBACK}:9600", tls_key_file: str | os.PathLike | None = None,
                 tls_certificate_file: str | os.PathLike | None = None, limits: ConnectionLimits | None = None,
                 replica: bool = False):
        self.served = served
        self.host, self.requested_port = parse_listen(listen)
        self.token_file = Path(token_file).absolute()
        self.replica = replica
        self.name = served.name
        default_key, default_certificate = tls_files(self.token_file)
        self.tls_key_file = Path(tls_key_file or default_key)
        self.tls_certificate_file = Path(tls_certificate_file or default_certificate)
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
        self._health_lock = threading.Lock()
        self._health: tuple[float, bool, str] | None = None
        self._health_counts: Counter = Counter()
        self._started_at = 0.0
        self._token = ""
        self._named: dict[str, tuple[str, Path]] = {}  # policy's named principals -> (token, file)

    # --- life cycle --------------------------------------------------------------------------

    def start(self) -> Py4jFace:
        """Start the served KMS if need be, write a fresh token, then listen. Raises :class:`SetupError`."""
        self.served.start()
        # Configured by its operator only: no client may pass properties to initialize().
        self._adapter = KmsCallbackAdapter(_GovernedKms(self.served), initialize_policy="operator")
        if self.host != LOOPBACK:
            if self.replica:
                missing = [str(path) for path in (self.tls_key_file, self.tls_certificate_file)
                           if not os.path.lexists(path)]
                if missing:
                    raise SetupError(f"--replica: no TLS {' and '.join(missing)}: a replica never makes its own "
                                     "(each would have another pin); give every replica the same "
                                     "--tls-key-file and --tls-certificate-file")
            try:
                self._tls = TlsIdentity.load_or_create(self.tls_key_file, self.tls_certificate_file)
            except (OSError, ValueError) as exc:
                raise SetupError(f"cannot load the TLS key/certificate {self.tls_key_file}, "
                                 f"{self.tls_certificate_file}: {exc}") from None
        if self.replica:
            token = self._token = read_token_file(self.token_file)
            self._token_stat = _file_identity(self.token_file)
        else:
            token = self._token = secrets.token_hex(32)
            try:
                check_operator_directory(self.token_file.parent, "token")
                write_private_file(self.token_file, (token + "\n").encode())
                written = os.stat(self.token_file, follow_symlinks=False)
                self._token_stat = (written.st_dev, written.st_ino)
            except OSError as exc:
                raise SetupError(f"cannot write the token file {self.token_file}: {exc}") from None
        try:
            self._server = KmsCallbackServer(
                self._adapter, address=self.host, port=self.requested_port, auth_token=token, tls=self._tls,
                object_id=OBJECT_ID, on_call=self._count_call, on_refused=self._refuse, limits=self.limits)
        except Exception as exc:  # py4j wraps bind errors (address in use, not an address of this host)
            self._remove_token_file()
            cause = exc.__cause__ or getattr(exc, "cause", None) or exc
            raise SetupError(f"cannot listen on {self.host}:{self.requested_port}: {cause}") from None
        self._started_at = time.time()
        if self.served.policy is not None:
            self.apply_policy(self.served.policy)
        log.info("KMS service %r listening on %s:%d%s; token %s %s", self.name, self.host, self.port,
                 f" (TLS, certificate sha256 {self._tls.sha256})" if self._tls else "",
                 "read from (replica)" if self.replica else "in", self.token_file)
        return self

    def apply_policy(self, policy: Policy | None) -> None:
        """The named tokens of ``policy`` (``py4j:NAME`` principals with a ``token_file``): a fresh token
        written (0600) for each new name, kept for names that stay, and refused at once for names
        the policy no longer has (their files removed). Called at start and on each policy reload."""
        wanted = dict(policy.token_files) if policy is not None else {}
        named = dict(self._named)
        for name in list(named):
            token, path = named[name]
            if wanted.get(name) != path:
                del named[name]
                if not self.replica:  # a replica's files are the operator's: refused here, kept there
                    _remove_if_holds(path, token)
                log.info("KMS service %r: the token of py4j:%s is revoked (not in the policy any more)",
                         self.name, name)
        for name, path in wanted.items():
            if name in named:
                continue
            if self.replica:
                try:
                    token = read_token_file(path, name)
                except SetupError as exc:
                    log.error("KMS service %r: %s; py4j:%s cannot connect", self.name, exc, name)
                    continue
                named[name] = (token, path)
                log.info("KMS service %r: token of py4j:%s read from %s (replica)", self.name, name, path)
                continue
            token = f"{name}:{secrets.token_hex(32)}"
            try:
                check_operator_directory(path.parent, "token")
                write_private_file(path, (token + "\n").encode())
            except OSError as exc:
                log.error("KMS service %r: cannot write the token file of py4j:%s (%s): %s; that principal cannot "
                          "connect", self.name, name, path, exc)
                continue
            named[name] = (token, path)
            log.info("KMS service %r: token of py4j:%s written to %s", self.name, name, path)
        self._named = named
        if self._server is not None:
            self._server.set_named_tokens({name: token for name, (token, _) in named.items()})

    def close(self) -> None:
        """Stop listening, drop connections, remove the token files (idempotent)."""
        if self._server is not None and not self._server.closed:
            self._server.close()
            if not self.replica:  # a replica's token files are the operator's, shared with the others
                self._remove_token_file()
                for token, path in self._named.values():
                    _remove_if_holds(path, token)
            log.info("KMS service %r stopped", self.name)

    def __enter__(self) -> Py4jFace:
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
        return listen_address(self.host, self.port)

    @property
    def endpoint(self) -> str:
        """Where clients reach this face: :attr:`address` (what every face of ``kms serve`` names)."""
        return self.address

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
        open_ = bool(self._server and not self._server.closed)
        accepting = self.accepting
        return {
            "name": self.name, "pid": os.getpid(), "listen": self.address, "tls": self._tls is not None,
            "certificate_sha256": self.certificate_sha256, "token_file": str(self.token_file),
            "replica": self.replica,
            "started_at": self._started_at, "running": open_ and accepting, "accepting": accepting,
            "connections": self._server.connection_counts() if self._server else {},
            "limits": {"max_connections": self.limits.max_connections,
                       "max_unauthenticated": self.limits.max_unauthenticated,
                       "auth_deadline_seconds": self.limits.auth_deadline_seconds,
                       "idle_timeout_seconds": self.limits.idle_timeout_seconds},
            "operations": stats, "clients": clients, "refused": refused, "refused_reasons": reasons,
            "peers_forgotten": forgotten,
            "reloads": self.served.reloads, "kms_timeout_seconds": self.served.kms_timeout,
            "policy": ({"source": self.served.policy.source, "sha256": self.served.policy.sha256,
                        "principals": list(self.served.policy.principals)} if self.served.policy else None),
            "audit_log": str(self.served.trail.path) if self.served.trail else None,
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
        return self.served.canary(key_id)

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
        if self.replica:  # the operator's file: never rewritten here; SIGUSR2 makes it the token
            self._log.warning("token-file", "the token file %s changed or is gone since this replica read it: "
                              "it keeps serving the token it read until SIGUSR2 (which re-reads the file)",
                              self.token_file)
            return False
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

    def revoke_token(self) -> int:
        """Revoke the token (``kms serve``: SIGUSR2): a fresh one is written to the token file, the
        old one is refused from now on, and the connections that authenticated with it are closed
        (returned: how many). JVM clients re-read the token file when they reconnect. Raises
        :class:`SetupError` when the token file cannot be written (the old token then stays)."""
        if self._server is None or self._server.closed:
            raise SetupError("the service is not running")
        if self.replica:
            return self._reread_tokens()
        token = secrets.token_hex(32)
        try:
            check_operator_directory(self.token_file.parent, "token")
            write_private_file(self.token_file, (token + "\n").encode())
            written = os.stat(self.token_file, follow_symlinks=False)
        except OSError as exc:
            raise SetupError(f"cannot write a new token to {self.token_file}, the token is not revoked: "
                             f"{exc}") from None
        self._token, self._token_stat = token, (written.st_dev, written.st_ino)
        closed = self._server.replace_token(token)
        log.warning("KMS service %r revoked its token: a new one is in %s, %d connection(s) holding the old "
                    "one closed", self.name, self.token_file, closed)
        return closed

    def _reread_tokens(self) -> int:
        """A replica's revoke: the token the operator wrote to the token file (the same on every
        replica) replaces the one in force, and the named tokens are read again from their files.
        Returns how many connections holding the old token were closed."""
        token = read_token_file(self.token_file)
        if token == self._token:
            log.warning("KMS service %r (replica): the token file %s holds the token already in force: write a new "
                        "one there first, then SIGUSR2 every replica", self.name, self.token_file)
        self._token, self._token_stat = token, _file_identity(self.token_file)
        closed = self._server.replace_token(token)
        named = {}
        for name, (old, path) in self._named.items():
            try:
                named[name] = (read_token_file(path, name), path)
            except SetupError as exc:
                log.error("KMS service %r: %s; py4j:%s cannot connect", self.name, exc, name)
        self._named = named
        self._server.set_named_tokens({name: token for name, (token, _) in named.items()})
        log.warning("KMS service %r (replica) re-read its token from %s, %d connection(s) holding the old one "
                    "closed", self.name, self.token_file, closed)
        return closed

    def write_status(self, path: str | os.PathLike) -> None:
        """:meth:`status` as JSON, replaced atomically (what monitoring and the tests read)."""
        write_private_file(path, (json.dumps(self.status(), indent=2, sort_keys=True) + "\n").encode())

    # --- hooks of the callback server ------------------------------------------------------------

    def _count_call(self, peer: str, method: str, failed: bool) -> None:
        operation = _OPERATIONS.get(method, "other")
        reached = getattr(_REACHED, "recorded", False)
        _REACHED.recorded = False
        if failed and not reached and self.served.trail is not None:
            # refused before the served KMS saw it (a parameter type or count, a method the bridge does
            # not serve, properties a client may not pass to initialize): recorded all the same
            principal, _ = _principal()
            self.served.record_refused("py4j", principal, peer, operation, None,
                                       "refused by the bridge")
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

    def render_metrics(self) -> str:
        """This face's counters (the served KMS's calls per face: :meth:`ServedKms.render_metrics`), in Prometheus text format (``kms serve --metrics``)."""
        status = self.status()
        operations = self.operation_stats()
        connections = status.get("connections", {})
        reasons = status.get("refused_reasons", {})
        health = self.health_counts()
        by_operation = ("operation",)
        return render([
            counter(f"{PREFIX}_py4j_calls_total", "Py4J calls finished, per operation (every face's KMS "
                    "operations: pyiceberg_crypto_kms_calls_total{face,principal,operation}).",
                    {(name,): op.calls for name, op in operations.items()}, by_operation),
            counter(f"{PREFIX}_failures_total", "KMS calls that failed, per operation.",
                    {(name,): op.failures for name, op in operations.items()}, by_operation),
            gauge(f"{PREFIX}_calls_in_flight", "KMS calls running now, per operation.",
                  {(name,): op.in_flight for name, op in operations.items()}, by_operation),
            histogram(f"{PREFIX}_call_duration_seconds", "Time spent in the Python KMS per call, per operation.",
                      "operation", {name: (LATENCY_BUCKETS, op.buckets, op.total_seconds)
                                    for name, op in operations.items()}),
            gauge(f"{PREFIX}_connected_clients", "Open connections (authenticated or still authenticating).",
                  {(): connections.get("open", 0)}),
            gauge(f"{PREFIX}_unauthenticated_connections", "Connections still authenticating.",
                  {(): connections.get("unauthenticated", 0)}),
            gauge(f"{PREFIX}_max_connections", "The cap on open connections (kms serve --max-connections).",
                  {(): status["limits"]["max_connections"]}),
            counter(f"{PREFIX}_refused_connections_total", "Connections refused, per reason.",
                    {(reason,): count for reason, count in sorted(reasons.items())}, ("reason",)),
            counter(f"{PREFIX}_refused_tokens_total", "Connections refused for a wrong or old token.",
                    {(): reasons.get(WRONG_TOKEN, 0)}),
            counter(f"{PREFIX}_idle_closed_total",
                    "Authenticated connections closed after --idle-timeout without a call.",
                    {(): connections.get("idle_closed", 0)}),
            counter(f"{PREFIX}_reloads_total", "KMS rebuilds (SIGHUP).", {(): status.get("reloads", 0)}),
            counter(f"{PREFIX}_health_checks_total", "Canary wrap/unwrap runs of /healthz, per result.",
                    {(result,): health.get(result, 0) for result in ("ok", "failed")}, ("result",)),
            gauge(f"{PREFIX}_up", "1 while the listener accepts connections.", {(): bool(status.get("accepting"))}),
        ])


def read_token_file(path: str | os.PathLike, name: str | None = None) -> str:
    """The token an operator wrote to ``path`` for replicas (``kms serve --replica``): the file must
    pass the operator-file checks (this user's, mode 0600, no symlink, in a directory others cannot
    write) and hold one token: at least 32 characters, ``NAME:...`` for the named token of
    ``py4j:NAME``. Raises :class:`SetupError` naming the file (never the token)."""
    path = Path(path)
    what = "token file" if name is None else f"token file of py4j:{name}"
    try:
        check_operator_directory(path.parent, "token")
        token = read_operator_file(path, what, private=True, limit=4096).decode("ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise SetupError(f"--replica: cannot use the {what} {path}: {exc}") from None
    secret = token.split(":", 1)[1] if name is not None and token.startswith(f"{name}:") else token
    if name is not None and not token.startswith(f"{name}:"):
        raise SetupError(f"--replica: the {what} {path} must hold '{name}:' then the secret (the JVM "
                         "client proves the principal's name with it)")
    if len(secret) < 32 or any(c.isspace() for c in token) or (name is None and ":" in token):
        raise SetupError(f"--replica: the {what} {path} must hold one token of at least 32 characters, no "
                         "spaces" + ("" if name else " and no ':'") + " (e.g. openssl rand -hex 32)")
    return token


def _file_identity(path: Path) -> tuple[int, int] | None:
    try:
        info = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def _remove_if_holds(path: Path, token: str) -> None:
    """Remove a token file if it still holds ``token`` (not a successor's)."""
    try:
        if path.read_text().strip() == token:
            path.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("could not remove the token file %s: %s", path, exc)
