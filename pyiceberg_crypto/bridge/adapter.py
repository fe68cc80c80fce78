"""The object the JVM calls: adapts a Python :class:`KeyManagementClient` to the Java bridge's
``io.pyicebergcrypto.bridge.PythonKms`` interface, and counts calls."""

from __future__ import annotations

import struct
import threading
from dataclasses import dataclass

from pyiceberg_crypto.kms.base import KeyManagementClient


@dataclass
class KmsCallStats:
    """How many KMS calls the JVM made through the bridge (successful and failed)."""

    wrap: int = 0
    unwrap: int = 0
    generate: int = 0
    errors: int = 0

    @property
    def total(self) -> int:
        return self.wrap + self.unwrap + self.generate


class KmsCallbackAdapter:
    """Py4J-facing adapter. Method names follow the Java interface (camelCase)."""

    ALLOWED_METHODS = frozenset({"wrapKey", "unwrapKey", "supportsKeyGeneration", "generateKey"})

    class Java:
        implements = ["io.pyicebergcrypto.bridge.PythonKms"]

    def __init__(self, kms: KeyManagementClient):
        self.kms = kms
        self.stats = KmsCallStats()
        self._lock = threading.Lock()

    def _count(self, field: str) -> None:
        with self._lock:
            setattr(self.stats, field, getattr(self.stats, field) + 1)

    def _run(self, field: str, fn, *args):
        self._count(field)
        try:
            return fn(*args)
        except Exception:
            self._count("errors")
            raise

    def wrapKey(self, key: bytes, wrapping_key_id: str) -> bytes:  # noqa: N802 - Java name
        return _as_bytes(self._run("wrap", self.kms.wrap_key, bytes(key), wrapping_key_id), "wrap_key")

    def unwrapKey(self, wrapped: bytes, wrapping_key_id: str) -> bytes:  # noqa: N802
        return _as_bytes(self._run("unwrap", self.kms.unwrap_key, bytes(wrapped), wrapping_key_id), "unwrap_key")

    def supportsKeyGeneration(self) -> bool:  # noqa: N802
        return bool(self.kms.supports_key_generation())

    def generateKey(self, wrapping_key_id: str) -> bytes:  # noqa: N802
        result = self._run("generate", self.kms.generate_key, wrapping_key_id)
        key = _as_bytes(result.key, "generate_key")
        wrapped = _as_bytes(result.wrapped_key, "generate_key")
        return struct.pack(">H", len(key)) + key + wrapped


def _as_bytes(value, method: str) -> bytes:
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError(f"{method} must return bytes, got {type(value).__name__}")
    return bytes(value)
