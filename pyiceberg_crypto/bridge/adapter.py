"""The object the JVM calls: adapts a Python :class:`KeyManagementClient` to the Java bridge's
``io.pyicebergcrypto.bridge.PythonKms`` interface, and counts calls, failures and latency."""

from __future__ import annotations

import bisect
import struct
import threading
import time
from dataclasses import dataclass, field, replace
from urllib.parse import parse_qsl

from pyiceberg_crypto._deprecated import renamed_classes
from pyiceberg_crypto._prometheus import LATENCY_BUCKETS
from pyiceberg_crypto.errors import InvalidArgumentError, KmsError
from pyiceberg_crypto.kms.base import KeyManagementClient

__all__ = ["INITIALIZE_POLICIES", "OPERATIONS", "KmsCallStats", "KmsCallbackAdapter", "OperationStats"]

#: Old names, kept for one release (CHANGELOG.md).
__getattr__ = renamed_classes(__name__, {"KmsConfigurationRefusedError": KmsError})

#: The operations counted, in the order they are shown.
OPERATIONS = ("wrap", "unwrap", "generate", "initialize")
#: Who may pass properties to the KMS's ``initialize()`` over the bridge:
#: ``"operator"``: nobody (the KMS is configured where it is built: ``kms serve``'s default);
#: ``"driver"``: the driver JVM only (its catalog properties; ``register_kms``'s default), never a
#: connection made with the token executors receive in task data;
#: ``"any"``: every token holder (the behaviour before issue 35; lets one job redirect the KMS).
INITIALIZE_POLICIES = ("operator", "driver", "any")


@dataclass
class OperationStats:
    """Calls of one KMS operation through the bridge: how many, how many failed, how long.

    ``calls`` counts every finished call (failed ones included); ``total_seconds`` and
    ``max_seconds`` measure the time spent in the Python KMS, from the JVM's request arriving to the
    answer; ``in_flight`` counts calls still running (a hung KMS shows here, not in ``failures``:
    the JVM gave up on it after the registration's timeout).
    """

    calls: int = 0
    in_flight: int = 0
    failures: int = 0
    total_seconds: float = 0.0
    max_seconds: float = 0.0
    #: Calls per latency bucket (:data:`LATENCY_BUCKETS`, then one past the last bound); not cumulative.
    buckets: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))

    @property
    def mean_seconds(self) -> float:
        return self.total_seconds / self.calls if self.calls else 0.0

    def _record(self, seconds: float, failed: bool) -> None:
        self.in_flight -= 1
        self.calls += 1
        self.failures += int(failed)
        self.total_seconds += seconds
        self.max_seconds = max(self.max_seconds, seconds)
        self.buckets[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1


@dataclass
class KmsCallStats:
    """KMS calls the JVMs (driver and executors) made through the bridge, per operation.

        stats = registration.stats
        stats.unwrap, stats.errors                 # call and failure totals
        stats.operations["unwrap"].max_seconds      # slowest unwrap so far
        before = stats.snapshot(); ...; stats.since(before).total   # calls made by one statement
    """

    operations: dict[str, OperationStats] = field(
        default_factory=lambda: {name: OperationStats() for name in OPERATIONS}
    )

    @property
    def wrap(self) -> int:
        return self.operations["wrap"].calls

    @property
    def unwrap(self) -> int:
        return self.operations["unwrap"].calls

    @property
    def generate(self) -> int:
        return self.operations["generate"].calls

    @property
    def errors(self) -> int:
        """Failed calls of every operation."""
        return sum(op.failures for op in self.operations.values())

    @property
    def total(self) -> int:
        """Key operations (wrap + unwrap + generate); ``initialize`` is not a key operation."""
        return self.wrap + self.unwrap + self.generate

    def snapshot(self) -> KmsCallStats:
        """A frozen copy (the live object keeps counting)."""
        return KmsCallStats({name: replace(op, buckets=list(op.buckets)) for name, op in self.operations.items()})

    def since(self, earlier: KmsCallStats) -> KmsCallStats:
        """Calls and failures made after ``earlier`` (a :meth:`snapshot`); max and in-flight are
        the current values."""
        return KmsCallStats({
            name: OperationStats(
                calls=op.calls - earlier.operations[name].calls,
                in_flight=op.in_flight,
                failures=op.failures - earlier.operations[name].failures,
                total_seconds=op.total_seconds - earlier.operations[name].total_seconds,
                max_seconds=op.max_seconds,
            )
            for name, op in self.operations.items()
        })

    def to_dict(self) -> dict[str, dict[str, float]]:
        return {
            name: {"calls": op.calls, "failures": op.failures, "in_flight": op.in_flight,
                   "total_seconds": op.total_seconds, "max_seconds": op.max_seconds}
            for name, op in self.operations.items()
        }

    def __repr__(self) -> str:
        return (f"KmsCallStats(wrap={self.wrap}, unwrap={self.unwrap}, generate={self.generate}, "
                f"errors={self.errors})")


class KmsCallbackAdapter:
    """Py4J-facing adapter. Method names follow the Java interface (camelCase)."""

    ALLOWED_METHODS = frozenset({"wrapKey", "unwrapKey", "supportsKeyGeneration", "generateKey", "initialize"})

    class Java:
        implements = ["io.pyicebergcrypto.bridge.PythonKms"]

    def __init__(self, kms: KeyManagementClient, *, initialize_policy: str = "driver"):
        if initialize_policy not in INITIALIZE_POLICIES:
            raise InvalidArgumentError(f"initialize_policy must be one of {INITIALIZE_POLICIES}, got {initialize_policy!r}")
        self.kms = kms
        self.initialize_policy = initialize_policy
        self.stats = KmsCallStats()
        self._lock = threading.Lock()
        self._initialized_with: set[frozenset] = set()
        self._initialize_lock = threading.Lock()

    def _run(self, operation: str, fn, *args):
        with self._lock:
            self.stats.operations[operation].in_flight += 1
        start = time.perf_counter()
        failed = True
        try:
            result = fn(*args)
            failed = False
            return result
        finally:
            elapsed = time.perf_counter() - start
            with self._lock:
                self.stats.operations[operation]._record(elapsed, failed)

    def wrapKey(self, key: bytes, wrapping_key_id: str) -> bytes:  # noqa: N802 - Java name
        if type(key) is not bytes or type(wrapping_key_id) is not str:
            _check_params("wrapKey", key, wrapping_key_id)
        return self._run("wrap", lambda: _as_bytes(self.kms.wrap_key(bytes(key), wrapping_key_id), "wrap_key"))

    def unwrapKey(self, wrapped: bytes, wrapping_key_id: str) -> bytes:  # noqa: N802
        if type(wrapped) is not bytes or type(wrapping_key_id) is not str:
            _check_params("unwrapKey", wrapped, wrapping_key_id)
        return self._run("unwrap",
                         lambda: _as_bytes(self.kms.unwrap_key(bytes(wrapped), wrapping_key_id), "unwrap_key"))

    def supportsKeyGeneration(self) -> bool:  # noqa: N802
        return bool(self.kms.supports_key_generation())

    def generateKey(self, wrapping_key_id: str) -> bytes:  # noqa: N802
        if not isinstance(wrapping_key_id, str):
            raise TypeError(f"generateKey takes a key id string, got {type(wrapping_key_id).__name__}")

        def generate() -> bytes:
            result = self.kms.generate_key(wrapping_key_id)
            key = _as_bytes(result.key, "generate_key")
            wrapped = _as_bytes(result.wrapped_key, "generate_key")
            return struct.pack(">H", len(key)) + key + wrapped

        return self._run("generate", generate)

    def initialize(self, encoded_properties: str, *, privileged: bool = False) -> None:
        """Forwarded catalog properties (``pyiceberg-crypto.kms.*``, prefix removed): passed to the
        KMS's ``initialize()`` once per distinct set, however many catalogs send it, when the policy
        allows this caller (``privileged``: the connection proved the driver token). Empty
        properties are always a no-op."""
        if encoded_properties is not None and not isinstance(encoded_properties, str):
            raise TypeError(f"initialize takes a string, got {type(encoded_properties).__name__}")
        properties = dict(parse_qsl(encoded_properties or "", keep_blank_values=True))
        if not properties:
            return
        if self.initialize_policy == "operator" or (self.initialize_policy == "driver" and not privileged):
            names = ", ".join(sorted(properties)[:5]) + (", ..." if len(properties) > 5 else "")
            raise KmsError(
                "this KMS is configured by its operator only and refuses properties from clients "
                f"({names}): remove the catalog's pyiceberg-crypto.kms.* properties, or configure the KMS "
                "where it is built" + (" (register_kms(..., initialize_policy=...) says who may)"
                                       if self.initialize_policy == "driver" else " (kms serve --kms-property)"))
        signature = frozenset(properties.items())
        with self._initialize_lock:
            if signature not in self._initialized_with:
                self._run("initialize", self.kms.initialize, properties)
                self._initialized_with.add(signature)


def _check_params(method: str, data, wrapping_key_id) -> None:
    """Only the types of the Java interface: bytes and a key id string (never an integer, which
    ``bytes(n)`` would turn into n zero bytes)."""
    if not isinstance(data, (bytes, bytearray)) or not isinstance(wrapping_key_id, str):
        raise TypeError(f"{method} takes bytes and a key id string, got {type(data).__name__} and "
                        f"{type(wrapping_key_id).__name__}")


def _as_bytes(value, method: str) -> bytes:
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError(f"{method} must return bytes, got {type(value).__name__}")
    return bytes(value)
