"""Make a Python KMS callable from the Spark driver JVM, under a name the catalog refers to.

    from pyiceberg_crypto.bridge import register_kms
    from pyiceberg_crypto.kms import InMemoryKms

    registration = register_kms(spark, InMemoryKms.with_random_keys("k1"), name="default")
    ...  # Iceberg now wraps/unwraps keys through Python
    print(registration.stats)   # KmsCallStats(wrap=1, unwrap=0, ...)
    registration.close()        # or let spark.stop() do it

The catalog finds the KMS by the catalog property ``pyiceberg-crypto.kms-name`` (set by
:func:`pyiceberg_crypto.config.spark_settings`). Registering the same name again replaces the
previous KMS (or returns the existing registration if it is the same object), so notebooks can
re-run cells safely. Stopping the SparkContext unregisters and shuts the callback server down.
"""

from __future__ import annotations

import atexit
import threading
import weakref

from py4j.java_gateway import JavaClass

from pyiceberg_crypto.bridge.adapter import KmsCallbackAdapter, KmsCallStats
from pyiceberg_crypto.bridge.callback_server import KmsCallbackServer
from pyiceberg_crypto.kms.base import KeyManagementClient

REGISTRY_CLASS = "io.pyicebergcrypto.bridge.PythonKmsRegistry"
DEFAULT_TIMEOUT_SECONDS = 60.0

_lock = threading.RLock()
_registrations: dict[str, KmsRegistration] = {}


class BridgeError(RuntimeError):
    """The bridge cannot be set up (no JVM, jar missing from the classpath, ...)."""


class KmsRegistration:
    """A live registration: the KMS, its callback server, and call statistics."""

    def __init__(self, name: str, kms: KeyManagementClient, server: KmsCallbackServer,
                 adapter: KmsCallbackAdapter, jvm):
        self.name = name
        self.kms = kms
        self._server = server
        self._adapter = adapter
        self._jvm_ref = jvm
        self._closed = False

    @property
    def stats(self) -> KmsCallStats:
        return self._adapter.stats

    @property
    def port(self) -> int:
        """Loopback port of the authenticated callback server (for diagnostics and tests)."""
        return self._server.port

    @property
    def active(self) -> bool:
        return not self._closed

    def close(self) -> None:
        """Unregister from the JVM and stop the callback server. Safe to call twice."""
        with _lock:
            if self._closed:
                return
            self._closed = True
            if _registrations.get(self.name) is self:
                del _registrations[self.name]
        try:
            _registry(self._jvm_ref).unregister(self.name)
        except Exception:  # the JVM may already be gone (spark.stop, interpreter exit)
            pass
        self._server.close()

    def __enter__(self) -> KmsRegistration:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "active" if self.active else "closed"
        return f"KmsRegistration(name={self.name!r}, kms={self.kms!r}, {state}, stats={self.stats})"


def register_kms(
    spark,
    kms: KeyManagementClient,
    name: str = "default",
    *,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
) -> KmsRegistration:
    """Register ``kms`` in the driver JVM of ``spark`` under ``name``; return the registration.

    Args:
        spark: a classic (non-Connect) ``SparkSession`` whose classpath has the bridge jar.
        kms: the Python KMS (a :class:`~pyiceberg_crypto.kms.KeyManagementClient`).
        name: the name catalogs use (catalog property ``pyiceberg-crypto.kms-name``).
        timeout_seconds: how long the JVM waits for one KMS call before failing it.
    """
    if not hasattr(kms, "wrap_key") or not hasattr(kms, "unwrap_key"):
        raise TypeError(f"kms must implement wrap_key/unwrap_key (a KeyManagementClient), got {type(kms).__name__}")
    if not name or not isinstance(name, str):
        raise ValueError("name must be a non-empty string")
    if timeout_seconds <= 0:
        raise ValueError("timeout_seconds must be positive")
    sc = _spark_context(spark)
    jvm = sc._jvm
    registry = _registry(jvm)
    with _lock:
        existing = _registrations.get(name)
        if existing is not None and existing.active and existing.kms is kms:
            return existing
        if existing is not None:
            existing.close()
        adapter = KmsCallbackAdapter(kms)
        server = KmsCallbackServer(adapter, sc._gateway._gateway_client)
        try:
            registry.register(name, server.address, server.port, server.auth_token, server.object_id,
                              int(timeout_seconds * 1000))
        except Exception:
            server.close()
            raise
        registration = KmsRegistration(name, kms, server, adapter, jvm)
        _registrations[name] = registration
        _install_stop_hook(sc)
        return registration


def registered(name: str) -> KmsRegistration | None:
    """The active registration under ``name`` in this Python process, if any."""
    return _registrations.get(name)


def unregister_all() -> None:
    """Close every registration of this process (runs at SparkContext stop and interpreter exit)."""
    for registration in list(_registrations.values()):
        registration.close()


def _spark_context(spark):
    """Accept a classic SparkSession or a SparkContext; refuse Spark Connect and stopped contexts."""
    from pyspark import SparkContext

    if isinstance(spark, SparkContext):
        sc = spark
    else:
        try:
            sc = spark.sparkContext
        except Exception as exc:
            raise BridgeError(
                "register_kms needs a classic SparkSession with a local driver JVM "
                "(Spark Connect sessions have none)"
            ) from exc
    if getattr(sc, "_jvm", None) is None or getattr(sc, "_jsc", None) is None:
        raise BridgeError("the SparkContext has no JVM (was it stopped?)")
    return sc


def _registry(jvm):
    registry = jvm
    for part in REGISTRY_CLASS.split("."):
        registry = getattr(registry, part)
    if not isinstance(registry, JavaClass):
        raise BridgeError(
            f"{REGISTRY_CLASS} is not on the Spark classpath: build settings with "
            "pyiceberg_crypto.config.spark_settings() (it adds the bridge jar to spark.jars) "
            "or pass the jar from pyiceberg_crypto.jars.bridge_jar() yourself"
        )
    return registry


_hooked: weakref.WeakSet = weakref.WeakSet()


def _install_stop_hook(sc) -> None:
    """Close registrations before the SparkContext stops (the JVM must still be up to unregister)."""
    if sc in _hooked:
        return
    original_stop = sc.stop

    def stop_with_kms_cleanup(*args, **kwargs):
        unregister_all()
        return original_stop(*args, **kwargs)

    sc.stop = stop_with_kms_cleanup
    _hooked.add(sc)


atexit.register(unregister_all)
