"""The KMS a ``kms serve`` process serves, once, to every face (Py4J, AWS KMS API) as equals.

    served = ServedKms(lambda: load_kms("keystore", {"keystore.path": "/etc/lake/keys.json"}))
    served.start()                 # builds the KMS (the factory's errors pass through)
    kms = served.client()          # the KMS as served now: every call bounded by kms_timeout
    served.reload()                # a changed keystore: new calls use the new KMS, calls in flight finish
    served.canary("canary")        # (ok, reason): a random key wrapped and unwrapped

A face never builds or holds the KMS itself: it asks :meth:`ServedKms.client` per call (or holds
:meth:`ServedKms.following`, which does), so a reload reaches every face at once. Errors reach
clients by key id only; the detail (a keystore's path, a cloud endpoint) goes to the service's log.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from pyiceberg_crypto.errors import InvalidArgumentError
from pyiceberg_crypto.kms.base import KeyGenerationResult, KeyManagementClient, KmsError, UnknownKeyError
from pyiceberg_crypto.kms.bounded import DEFAULT_KMS_TIMEOUT_SECONDS, KmsCallPool, KmsTimeoutError, call_with_timeout
from pyiceberg_crypto.safe_text import exception_line

__all__ = ["SERVED_KMS_TIMEOUT_SECONDS", "RateLimitedLog", "ServedKms"]

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
