"""The KMS a ``kms serve`` process serves, once, to every face (Py4J, AWS KMS API) as equals.

    served = ServedKms(lambda: load_kms("keystore", {"keystore.path": "/etc/lake/keys.json"}))
    served.start()                 # builds the KMS (the factory's errors pass through)
    kms = served.client()          # the KMS as served now: every call bounded by kms_timeout
    served.reload()                # a changed keystore: new calls use the new KMS, calls in flight finish
    served.canary("canary")        # (ok, reason): a random key wrapped and unwrapped
    served.set_policy(load_policy("/etc/lake/kms-policy.json"))   # grants (None: everyone, every key)
    served.perform("aws", "aws:trino", "10.0.0.5", "unwrap", "analytics-1", lambda: ...)  # checked, counted, audited

A face never builds or holds the KMS itself: it asks :meth:`ServedKms.client` per call (or holds
:meth:`ServedKms.following`, which does), so a reload reaches every face at once. Errors reach
clients by key id only; the detail (a keystore's path, a cloud endpoint) goes to the service's log.

Grants and audit live here, once, for every face: :meth:`ServedKms.perform` checks the principal's
grant (:mod:`.policy`), runs the operation, counts it per face and writes its line to the audit trail
(:mod:`.audit_trail`). With a policy, a key the principal may not use and a key that does not exist
get one answer (an :class:`~pyiceberg_crypto.errors.UnknownKeyError` with ``code`` ACCESS_DENIED), so
key ids cannot be enumerated. A line that cannot be written refuses the operation (a
:class:`~pyiceberg_crypto.errors.KmsError` with ``code`` KMS_INTERNAL).
"""

from __future__ import annotations

import itertools
import logging
import secrets
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pyiceberg_crypto._deprecated import renamed_classes
from pyiceberg_crypto.errors import FileAccessError, InvalidArgumentError, KmsError, SetupError, UnknownKeyError
from pyiceberg_crypto.kms.base import ACCESS_DENIED, KMS_INTERNAL, KeyGenerationResult, KeyManagementClient
from pyiceberg_crypto.kms.bounded import DEFAULT_KMS_TIMEOUT_SECONDS, KmsCallPool, KmsTimeoutError, call_with_timeout
from pyiceberg_crypto.kms.key_ids import canonical_key_id
from pyiceberg_crypto._prometheus import counter, gauge, render
from pyiceberg_crypto.safe_text import exception_line

if TYPE_CHECKING:
    from pyiceberg_crypto.serve.audit_trail import AuditTrail
    from pyiceberg_crypto.serve.policy import Policy

__all__ = ["MAX_PRINCIPAL_LABELS", "SERVED_KMS_TIMEOUT_SECONDS", "UNKNOWN_PRINCIPAL", "RateLimitedLog", "ServedKms"]

#: Old names, kept for one release (CHANGELOG.md).
__getattr__ = renamed_classes(__name__, {"KmsServiceError": SetupError, "KeyNotAvailableError": UnknownKeyError,
                                         "AuditUnavailableError": KmsError})


#: The operations every face's calls are counted and audited as (the policy's names).
FACE_OPERATIONS = ("wrap", "unwrap", "generate", "describe")
_VERBS = {"wrap": "wrap with", "unwrap": "unwrap with", "generate": "generate a key with", "describe": "describe"}

#: The ``principal`` label of calls by a principal the policy does not name (and, without a policy,
#: beyond the first :data:`MAX_PRINCIPAL_LABELS` principals): the metric's series stay bounded.
UNKNOWN_PRINCIPAL = "unknown"
#: Without a policy, at most this many principals get a label of their own (each is a section of
#: the AWS face's credentials file or ``py4j:default``: configured, so few; this bounds a mistake).
MAX_PRINCIPAL_LABELS = 256

#: Seconds one served KMS call may take (``kms serve --kms-timeout``): half of what a JVM client
#: waits (:data:`~pyiceberg_crypto.kms.bounded.DEFAULT_KMS_TIMEOUT_SECONDS`), so that a hung KMS
#: reaches the client as a clear error before the client gives up on its own.
SERVED_KMS_TIMEOUT_SECONDS = DEFAULT_KMS_TIMEOUT_SECONDS / 2

log = logging.getLogger(__name__)


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
    and errors told to clients by key id only: the detail goes to the service's log."""

    def __init__(self, kms: KeyManagementClient, timeout: float, errors: RateLimitedLog,
                 runner: Callable[..., Any] = call_with_timeout):
        self.kms = kms
        self.timeout = timeout
        self.errors = errors
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


class _Following(KeyManagementClient):
    """The served KMS as it is at each call (follows :meth:`ServedKms.reload`)."""

    def __init__(self, served: ServedKms):
        self.served = served

    def wrap_key(self, key: bytes, wrapping_key_id: str) -> bytes:
        return self.served.client().wrap_key(key, wrapping_key_id)

    def unwrap_key(self, wrapped_key: bytes, wrapping_key_id: str) -> bytes:
        return self.served.client().unwrap_key(wrapped_key, wrapping_key_id)

    def supports_key_generation(self) -> bool:
        return self.served.client().supports_key_generation()

    def generate_key(self, wrapping_key_id: str) -> KeyGenerationResult:
        return self.served.client().generate_key(wrapping_key_id)

    def initialize(self, properties: dict[str, str]) -> None:
        self.served.client().initialize(properties)


class ServedKms:
    """One Python KMS, built by its factory, served to every face (see module doc).

    Args:
        kms_factory: builds the KMS (at :meth:`start`, and again at each :meth:`reload`).
        kms_timeout: seconds one KMS call may take (default :data:`SERVED_KMS_TIMEOUT_SECONDS`).
        name: how the logs and the status name this KMS (``kms serve --kms``).
    """

    def __init__(self, kms_factory: Callable[[], KeyManagementClient], *,
                 kms_timeout: float = SERVED_KMS_TIMEOUT_SECONDS, name: str = "kms"):
        if not (isinstance(kms_timeout, (int, float)) and kms_timeout > 0):
            raise InvalidArgumentError(f"kms_timeout must be positive (seconds), got {kms_timeout!r}")
        self._factory = kms_factory
        self.kms_timeout = float(kms_timeout)
        self.name = name
        self.errors = RateLimitedLog(log)
        self._current: _TimeBoundKms | None = None
        self._lock = threading.Lock()
        self._reloads = 0
        #: The grants in force (None: every principal may use every key) and the audit trail (None: none).
        self.policy: Policy | None = None
        self.trail: AuditTrail | None = None
        self._counts_lock = threading.Lock()
        self._calls: Counter = Counter()       # (face, principal label, operation)
        self._labels: set[str] = set()         # without a policy: the principals labelled so far
        self._refused: Counter = Counter()     # (face, operation, reason)
        self._audit_failures = 0
        self._canonical: dict[str, str] = {}  # key id as sent -> canonical id
        self._request_prefix = uuid.uuid4().hex[:16]
        self._request_ids = itertools.count(1)

    def start(self) -> ServedKms:
        """Build the KMS (once; the factory's exceptions pass through)."""
        with self._lock:
            if self._current is None:
                self._current = _TimeBoundKms(self._factory(), self.kms_timeout, self.errors)
        return self

    @property
    def started(self) -> bool:
        return self._current is not None

    def client(self, pool: KmsCallPool | None = None) -> KeyManagementClient:
        """The KMS as served now: time-bounded, errors by key id only. ``pool``: its calls run on
        that pool's persistent threads (same timeout) instead of a thread each."""
        current = self._current
        if current is None:
            raise InvalidArgumentError(f"the served KMS {self.name!r} is not started: call start() first")
        return current if pool is None else current.on(pool)

    def following(self) -> KeyManagementClient:
        """A KMS that is, at each call, :meth:`client` (what a face that holds one KMS object keeps)."""
        return _Following(self)

    def reload(self) -> None:
        """Rebuild the KMS from its factory (a changed keystore); calls in flight finish on the old one.
        On failure the old KMS keeps serving and the error is raised."""
        kms = self._factory()
        with self._lock:
            self._current = _TimeBoundKms(kms, self.kms_timeout, self.errors)
            self._reloads += 1
        log.info("KMS service %r reloaded its KMS (%s)", self.name, type(kms).__name__)

    @property
    def reloads(self) -> int:
        """KMS rebuilds so far (SIGHUP)."""
        with self._lock:
            return self._reloads

    def canary(self, key_id: str) -> tuple[bool, str]:
        """(ok, reason) of a random 16-byte key wrapped and unwrapped with ``key_id`` through the
        served KMS (bounded by the timeout). No key bytes in the reason."""
        kms = self.client()
        key = secrets.token_bytes(16)
        started = time.perf_counter()
        try:
            same = kms.unwrap_key(kms.wrap_key(key, key_id), key_id) == key
        except Exception as exc:  # the KMS's failure, in the words clients get
            return False, f"canary wrap/unwrap with key id {key_id!r} failed: {exception_line(exc)}"
        if not same:
            return False, f"canary wrap/unwrap with key id {key_id!r}: the unwrapped key differs from the wrapped one"
        return True, f"canary wrap/unwrap with key id {key_id!r} in {(time.perf_counter() - started) * 1000:.1f} ms"


    # --- grants, audit, counts: one place for every face ---------------------------------------

    def set_policy(self, policy: Policy | None) -> None:
        """Put ``policy`` in force for every face at once (None: every principal, every key), and
        say so in the log (and the audit trail)."""
        self.policy = policy
        if policy is None:
            log.warning("KMS service %r: no policy (kms serve --policy): every principal may use every key", self.name)
        else:
            log.info("KMS service %r: policy %s (sha256 %s) in force; anything it does not grant is denied:\n%s",
                     self.name, policy.source, policy.sha256[:16], policy.describe())
        if self.trail is not None:
            try:
                self.trail.write({"kind": "policy", "policy_sha256": policy.sha256 if policy else None,
                                  "principals": list(policy.principals) if policy else None})
            except FileAccessError as exc:
                self._audit_failed(exc)

    def perform(self, face: str, principal: str, peer: str, operation: str, key_id: str | None,
                fn: Callable[[], Any], *, table: str | None = None, version: Callable[[Any], str | None] | None = None,
                context: dict[str, str] | None = None) -> Any:
        """Run one KMS operation of a face for ``principal``: check its grant, run ``fn``, count it,
        write its audit line; ``fn``'s result. ``version(result)``: the key version, where known.

        Raises :class:`~pyiceberg_crypto.errors.UnknownKeyError` with ``code`` ACCESS_DENIED (with a
        policy: refused or unknown key, one answer), :class:`~pyiceberg_crypto.errors.KmsError` with
        ``code`` KMS_INTERNAL (the audit line could not be written: the result is withheld), or what
        ``fn`` raised."""
        policy = self.policy
        request_id = f"{self._request_prefix}-{next(self._request_ids):x}"
        label = self.principal_label(principal, policy)
        with self._counts_lock:
            self._calls[(face, label, operation)] += 1
        key = None
        if key_id is not None:
            key = self._canonical.get(key_id)
            if key is None:
                try:
                    key = canonical_key_id(key_id)
                except InvalidArgumentError:
                    key = key_id
                if len(self._canonical) < 65536:  # bounded: key ids come from clients
                    self._canonical[key_id] = key
        if policy is not None and (key is None or not policy.allows_canonical(principal, operation, key)):
            self._refuse(face, operation, "not granted")
            self._audit(face, principal, peer, operation, key, None, table, context, "refused", "not granted",
                        request_id)
            raise self._not_available(operation, key_id)
        try:
            result = fn()
        except UnknownKeyError:
            self._refuse(face, operation, "unknown key")
            self._audit(face, principal, peer, operation, key, None, table, context, "refused", "unknown key",
                        request_id)
            if policy is not None:
                raise self._not_available(operation, key_id) from None
            raise
        except Exception as exc:
            reason = getattr(exc, "code", None)
            self._audit(face, principal, peer, operation, key, None, table, context, "error",
                        reason if isinstance(reason, str) else type(exc).__name__, request_id)
            raise
        key_version = None
        if version is not None and self.trail is not None:
            try:
                key_version = version(result)
            except Exception:  # noqa: BLE001 - a version is a nicety of the record, never a failure
                key_version = None
        self._audit(face, principal, peer, operation, key, key_version, table, context, "ok", None, request_id)
        return result

    def record_refused(self, face: str, principal: str, peer: str, operation: str, key_id: object,
                       reason: str, *, context: dict[str, str] | None = None) -> None:
        """Count and record a request of an authenticated ``principal`` that its face refused before
        :meth:`perform` (a malformed request, a KeyId too long or naming another region or account):
        every request of an authenticated principal leaves a line, whatever stage refuses it. The
        key id as sent is bounded (a client chooses it); the caller refuses the request either way
        (a line that cannot be written is counted and logged)."""
        key = None
        if isinstance(key_id, str):
            key = key_id if len(key_id) <= 256 else f"{key_id[:256]}... ({len(key_id)} characters)"
        elif key_id is not None:
            key = f"({type(key_id).__name__})"
        self._refuse(face, operation, reason)
        with self._counts_lock:
            self._calls[(face, self.principal_label(principal), operation)] += 1
        try:
            self._audit(face, principal, peer, operation, key, None, None,
                        context if context and len(context) <= 64 else None, "refused", reason,
                        f"{self._request_prefix}-{next(self._request_ids):x}")
        except KmsError:  # the audit trail could not record it (code KMS_INTERNAL)
            pass  # counted and logged by _audit; the request is refused anyway

    def principal_label(self, principal: str, policy: Policy | None = None) -> str:
        """The ``principal`` label of a call by ``principal`` on ``pyiceberg_crypto_kms_calls_total``:
        with a policy, a principal it names, else :data:`UNKNOWN_PRINCIPAL`; without one, the
        principal (the faces authenticate only configured ones) up to :data:`MAX_PRINCIPAL_LABELS`."""
        if policy is None:
            policy = self.policy
        if policy is not None:
            return principal if principal in policy.grants else UNKNOWN_PRINCIPAL
        labels = self._labels
        if principal in labels:
            return principal
        with self._counts_lock:
            if len(labels) < MAX_PRINCIPAL_LABELS:
                labels.add(principal)
                return principal
        return UNKNOWN_PRINCIPAL

    def key_version(self, wrapped: bytes, key_id: str) -> str | None:
        """The version of ``key_id`` that wrapped ``wrapped``, if the served KMS can tell (no key bytes)."""
        current = self._current
        if current is None:
            return None
        value = current.kms.key_version(bytes(wrapped), key_id)
        return None if value is None else str(value)

    @staticmethod
    def _not_available(operation: str, key_id: str | None) -> UnknownKeyError:
        """With a policy in force: the key is not known to this KMS, or the principal may not use it for
        this operation. One answer for both, on every face (no key-id enumeration): an UnknownKeyError
        with ``code`` ACCESS_DENIED; the audit trail and the service's counters say which."""
        return UnknownKeyError(f"key id {key_id!r} is not known to this KMS service, or this client may not "
                               f"{_VERBS.get(operation, operation)} it", code=ACCESS_DENIED)

    def _refuse(self, face: str, operation: str, reason: str) -> None:
        with self._counts_lock:
            self._refused[(face, operation, reason)] += 1

    def _audit(self, face, principal, peer, operation, key, key_version, table, context, result, reason,
               request_id) -> None:
        trail = self.trail
        if trail is None:
            return
        try:
            trail.write_operation(face, principal, peer, operation, key, key_version, table, result, reason,
                                  request_id, context)
        except FileAccessError as exc:
            self._audit_failed(exc)
            self._refuse(face, operation, "audit unavailable")
            raise KmsError("the KMS service cannot record this operation in its audit trail, so it refuses it "
                           "(the service's log says why)", code=KMS_INTERNAL) from None

    def _audit_failed(self, exc: Exception) -> None:
        with self._counts_lock:
            self._audit_failures += 1
        self.errors.warning("audit", "KMS service %r refuses operations: %s", self.name, exc)

    def render_metrics(self) -> str:
        """The served KMS's counters over every face (Prometheus text): calls per face, principal and operation,
        refusals per face, operation and reason, audit lines that could not be written."""
        with self._counts_lock:
            calls, refused, failures = dict(self._calls), dict(self._refused), self._audit_failures
        trail = self.trail
        return render([
            counter("pyiceberg_crypto_kms_calls_total", "KMS operations asked of the served KMS, per face, "
                    "principal (one the policy names, else unknown) and operation (refused and failed ones "
                    "included).", dict(sorted(calls.items())), ("face", "principal", "operation")),
            counter("pyiceberg_crypto_kms_refused_operations_total", "KMS operations refused, per face, "
                    "operation and reason (not granted, unknown key, audit unavailable).",
                    dict(sorted(refused.items())), ("face", "operation", "reason")),
            counter("pyiceberg_crypto_kms_audit_write_failures_total", "Audit lines that could not be written "
                    "(each refused its operation).", {(): failures}),
            counter("pyiceberg_crypto_kms_audit_witness_failures_total", "Writes of signed digests to the audit "
                    "witness that failed (retried with the next digest).",
                    {(): trail.witness_failures if trail is not None else 0}),
            gauge("pyiceberg_crypto_kms_policy_in_force", "1 while a policy decides who may use which key.",
                  {(): self.policy is not None}),
            gauge("pyiceberg_crypto_kms_audit_trail_enabled", "1 while operations are recorded in an audit trail.",
                  {(): trail is not None}),
        ])
