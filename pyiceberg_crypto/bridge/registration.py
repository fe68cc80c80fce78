"""Make a Python KMS callable from Spark's JVMs (driver and executors), under a name the catalog
refers to.

    from pyiceberg_crypto.bridge import register_kms
    from pyiceberg_crypto.kms import InMemoryKms

    registration = register_kms(spark, InMemoryKms.with_random_keys("k1"), name="default")
    ...  # Iceberg now wraps/unwraps keys through Python
    print(registration.stats)   # KmsCallStats(wrap=1, unwrap=0, ...)
    registration.close()        # or let spark.stop() do it

The catalog finds the KMS by the catalog property ``pyiceberg-crypto.kms-name`` (set by
:func:`pyiceberg_crypto.config.spark_settings`). Registering the same name again replaces the
previous KMS (or returns the existing registration if it is the same object with the same
options), so notebooks can re-run cells safely. Stopping the SparkContext unregisters and shuts the callback server down.

Executors: Iceberg ships the Java KMS client inside task data; it carries this registration's
endpoint (address, port, token), so executor JVMs call this process's KMS directly. The endpoint is
loopback unless ``bind_address`` says otherwise (needed when executors run on other machines).
"""

from __future__ import annotations

import atexit
import base64
import logging
import secrets
import warnings
import weakref

from py4j.java_gateway import JavaClass

from pyiceberg_crypto._deprecated import renamed_classes
from pyiceberg_crypto.bridge.adapter import KmsCallbackAdapter, KmsCallStats
from pyiceberg_crypto.bridge.callback_server import KmsCallbackServer
from pyiceberg_crypto.listener.sockets import LOOPBACK
from pyiceberg_crypto.bridge.redaction import redact_in_py4j_logs
from pyiceberg_crypto.errors import (
    CONNECT_NEXT_STEP,
    ArgumentTypeError,
    InvalidArgumentError,
    PyicebergCryptoWarning,
    SetupError,
)
from pyiceberg_crypto.catalog.kinds import asks_for_encryption, plaintext_reason, session_catalogs
from pyiceberg_crypto.jars import check_java_version
from pyiceberg_crypto.kms import registrations
from pyiceberg_crypto.kms.base import KeyManagementClient
from pyiceberg_crypto.kms.bounded import DEFAULT_KMS_TIMEOUT_SECONDS, kms_timeout_millis
from pyiceberg_crypto.spark.session import session_settings

__all__ = [ "KmsRegistration", "PlaintextCatalogWarning", "register_kms", "registered",
           "unregister_all", "warn_about_plaintext_catalogs"]

#: Old names, kept for one release (CHANGELOG.md).
__getattr__ = renamed_classes(__name__, {"BridgeError": SetupError})

REGISTRY_CLASS = "io.pyicebergcrypto.bridge.PythonKmsRegistry"
WILDCARD_ADDRESSES = ("0.0.0.0", "::")

log = logging.getLogger(__name__)

# The registrations live one layer down (kms.registrations), where the table layer finds them
# without importing the bridge (and Py4J).
_lock = registrations.lock
_registrations: dict[str, KmsRegistration] = registrations.by_name


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
        self._options: tuple = ()  # (bind_address, kms_timeout, initialize_policy) it was registered with

    @property
    def stats(self) -> KmsCallStats:
        return self._adapter.stats

    @property
    def port(self) -> int:
        """Port of the authenticated callback server (for diagnostics and tests)."""
        return self._server.port

    @property
    def tls(self) -> bool:
        """True when the listener speaks TLS (every address but 127.0.0.1)."""
        return self._server.tls

    @property
    def address(self) -> str:
        """Address the callback server listens on (127.0.0.1 unless ``bind_address`` was given)."""
        return self._server.address

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
    kms_timeout: float = DEFAULT_KMS_TIMEOUT_SECONDS,
    bind_address: str = LOOPBACK,
    initialize_policy: str = "driver",
) -> KmsRegistration:
    """Register ``kms`` in the driver JVM of ``spark`` under ``name``; return the registration.

    The JVM calls the KMS through an authenticated callback server in this process. Executor
    JVMs (``local-cluster`` or a real cluster) receive its endpoint inside the serialized Iceberg
    tasks and call it directly.

    Args:
        spark: a classic (non-Connect) ``SparkSession`` whose classpath has the bridge jar.
        kms: the Python KMS (a :class:`~pyiceberg_crypto.kms.KeyManagementClient`).
        name: the name catalogs use (catalog property ``pyiceberg-crypto.kms-name``).
        kms_timeout: seconds a JVM waits to connect and for one KMS call before failing it.
        bind_address: where the callback server listens. Loopback (default) serves the driver and
            executors on this machine only. On a real cluster pass the driver's address reachable
            by executors (or ``"0.0.0.0"``: executors are then told ``spark.driver.host``). Any
            address but 127.0.0.1 gets TLS with a per-registration certificate that the JVMs
            pin (docs: "Run on a cluster").
        initialize_policy: who may pass the catalog's ``pyiceberg-crypto.kms.*`` properties to
            ``kms.initialize()``. ``"driver"`` (default): the driver JVM's catalogs only, over a
            token that never leaves the driver JVM; executors (whose token travels in task data)
            cannot reconfigure the KMS. ``"operator"``: nobody (configure the KMS in Python).
            ``"any"``: every token holder (before issue 35; not recommended).
    """
    if not hasattr(kms, "wrap_key") or not hasattr(kms, "unwrap_key"):
        raise ArgumentTypeError(f"kms must implement wrap_key/unwrap_key (a KeyManagementClient), got "
                                f"{type(kms).__name__}")
    if not name or not isinstance(name, str):
        raise InvalidArgumentError(f"name must be a non-empty string, got {name!r}")
    if kms_timeout <= 0:
        raise InvalidArgumentError(f"kms_timeout must be positive (seconds), got {kms_timeout!r}")
    if not bind_address or not isinstance(bind_address, str):
        raise InvalidArgumentError("bind_address must be a non-empty address string such as '127.0.0.1'")
    sc = _spark_context(spark)
    advertised = _advertised_host(sc, bind_address)
    jvm = sc._jvm
    # Before the first bridge class loads: Java 8 would fail with UnsupportedClassVersionError.
    check_java_version(jvm.java.lang.System.getProperty("java.specification.version"))
    registry = _registry(jvm)
    with _lock:
        existing = _registrations.get(name)
        options = (bind_address, kms_timeout, initialize_policy)
        if (existing is not None and existing.active and existing.kms is kms and not existing._server.closed
                and existing._options == options):
            return existing
        if existing is not None:
            existing.close()
        adapter = KmsCallbackAdapter(kms, initialize_policy=initialize_policy)
        # Two tokens: the driver JVM's (never shipped; may initialize) and the one executors get.
        driver_token = secrets.token_hex(32)
        server = KmsCallbackServer(adapter, sc._gateway._gateway_client, address=bind_address,
                                   driver_token=driver_token)
        redact_in_py4j_logs(server.auth_token)  # Py4J logs the command that carries it at DEBUG
        redact_in_py4j_logs(driver_token)
        _redact_gateway_token(sc)
        try:
            certificate = base64.b64encode(server.certificate).decode() if server.certificate else ""
            registry.register(name, advertised, server.port, driver_token, server.object_id,
                              kms_timeout_millis(kms_timeout), certificate, server.auth_token)
        except Exception:
            server.close()
            raise
        registration = KmsRegistration(name, kms, server, adapter, jvm)
        registration._options = options
        _registrations[name] = registration
        _install_stop_hook(sc)
    warn_about_plaintext_catalogs(spark)
    return registration


class PlaintextCatalogWarning(PyicebergCryptoWarning):
    """A catalog of the session has a KMS but writes its tables in plaintext (Iceberg ignores
    ``encryption.key-id`` for it): :func:`warn_about_plaintext_catalogs`."""


def warn_about_plaintext_catalogs(spark) -> list[str]:
    """Warn (a :class:`PlaintextCatalogWarning` and a log line), naming each catalog of the session
    that asks for encryption (a KMS, or a default ``encryption.key-id``) but is one Iceberg 1.12.0
    writes in plaintext, such as ``type=rest`` (:mod:`pyiceberg_crypto.catalog.kinds`); returns
    their names. ``register_kms`` calls it; call it again after adding catalogs with ``spark.conf.set``.

    It cannot stop such a write: Iceberg never calls the KMS for those catalogs, so nothing of this
    package runs when their tables are created or written."""
    try:
        _spark_context(spark)  # a classic session or context with a JVM
        conf = session_settings(spark)
    except Exception as exc:  # noqa: BLE001 - a warning helper must not break the registration
        log.debug("cannot read the session's settings to check its catalogs: %s", type(exc).__name__)
        return []
    named = []
    for name, properties in sorted(session_catalogs(conf).items()):
        reason = plaintext_reason(properties) if asks_for_encryption(properties) else None
        if reason:
            message = (f"Spark catalog {name!r} has a KMS but Iceberg will write its tables in plaintext "
                       f"(no error, no warning from Iceberg): {reason}")
            log.warning("%s", message)
            warnings.warn(message, PlaintextCatalogWarning, stacklevel=3)
            named.append(name)
    return named


def registered(name: str) -> KmsRegistration | None:
    """The active registration under ``name`` in this Python process, if any."""
    return registrations.registered(name)


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
            raise SetupError(
                "register_kms needs a classic SparkSession with a local driver JVM "
                "(Spark Connect sessions have none)" + CONNECT_NEXT_STEP
            ) from exc
    if getattr(sc, "_jvm", None) is None or getattr(sc, "_jsc", None) is None:
        raise SetupError("the SparkContext has no JVM (was it stopped?)")
    return sc


def _redact_gateway_token(sc) -> None:
    """PySpark's own gateway secret is sent (and logged by Py4J at DEBUG) by every new Python
    thread's connection: keep it out of the logs too, from the first registration on."""
    try:
        token = sc._gateway.gateway_parameters.auth_token
    except AttributeError:
        return
    if token:
        redact_in_py4j_logs(token)


def _advertised_host(sc, bind_address: str) -> str:
    """The host executors are told to connect to; warn when loopback cannot serve the cluster."""
    if bind_address in WILDCARD_ADDRESSES:
        return sc.getConf().get("spark.driver.host", LOOPBACK)
    master = sc.master or ""
    if bind_address == LOOPBACK and not master.startswith("local"):
        log.warning(
            "Python KMS listens on %s only, but master is %s: executors on other machines cannot reach "
            "it (register_kms(..., bind_address=<driver address>) opts in to a network listener)",
            LOOPBACK, master)
    return bind_address


def _registry(jvm):
    registry = jvm
    for part in REGISTRY_CLASS.split("."):
        registry = getattr(registry, part)
    if not isinstance(registry, JavaClass):
        raise SetupError(
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
