"""The Python KMS API: what a user implements so Iceberg (in the JVM) can wrap and unwrap keys.

Mirrors Iceberg Java's ``org.apache.iceberg.encryption.KeyManagementClient``::

    from pyiceberg_crypto.kms import KeyManagementClient

    class MyKms(KeyManagementClient):
        def wrap_key(self, key: bytes, wrapping_key_id: str) -> bytes:
            return my_service.encrypt(wrapping_key_id, key)

        def unwrap_key(self, wrapped: bytes, wrapping_key_id: str) -> bytes:
            return my_service.decrypt(wrapping_key_id, wrapped)

Iceberg calls ``wrap_key`` when it creates a key-encryption key (KEK) for a table and
``unwrap_key`` when it loads one; both are rare (KEKs are cached and live up to two years), so a
network KMS is fine. Raise any exception to refuse: the JVM sees ``Python KMS 'name' failed to
unwrap a key with key id 'k': ValueError: ...`` and the write or read fails cleanly.
Never include key bytes in exception messages.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass, field

from pyiceberg_crypto.errors import KmsError, UnknownKeyError

__all__ = ["ACCESS_DENIED", "INCORRECT_KEY", "INVALID_CIPHERTEXT", "KMS_INTERNAL", "KeyGenerationResult",
           "KeyManagementClient", "KmsError", "UnknownKeyError"]

# The kinds of KmsError a caller (the AWS face) tells apart: ``KmsError.code``, AWS KMS's error types.
#: Refused: a token the KMS does not accept, or (with a policy) a key this client may not use.
ACCESS_DENIED = "AccessDeniedException"
#: A ciphertext that names another key than the one asked for.
INCORRECT_KEY = "IncorrectKeyException"
#: A ciphertext that is malformed, or was not made with this key id / encryption context (the
#: message says why, never with key bytes).
INVALID_CIPHERTEXT = "InvalidCiphertextException"
#: The service failed on its side (e.g. its audit trail cannot record the call: refused, fail closed).
KMS_INTERNAL = "KMSInternalException"


@dataclass(frozen=True)
class KeyGenerationResult:
    """A key generated inside the KMS: the raw key and its wrapped form."""

    key: bytes = field(repr=False)
    wrapped_key: bytes = field(repr=False)


class KeyManagementClient(abc.ABC):
    """Abstract KMS client. Implement :meth:`wrap_key` and :meth:`unwrap_key`.

    Implementations must be thread-safe: the JVM may call from several threads at once.
    """

    def initialize(self, properties: Mapping[str, str]) -> None:  # noqa: B027 - optional hook
        """Optional: receive configuration properties before first use."""

    @abc.abstractmethod
    def wrap_key(self, key: bytes, wrapping_key_id: str) -> bytes:
        """Encrypt ``key`` with the master key ``wrapping_key_id``; return opaque wrapped bytes."""

    @abc.abstractmethod
    def unwrap_key(self, wrapped: bytes, wrapping_key_id: str) -> bytes:
        """Inverse of :meth:`wrap_key`; raise if ``wrapped`` does not authenticate."""

    def canonical_key_id(self, key_id: str) -> str:
        """This KMS's own id of the key that ``key_id`` names: what the key commands compare when
        they match a table's ``encryption.key-id`` with a key (``keys where-used``, ``keystore
        retire``, the inventory, the audit) and pass to :meth:`key_version`,
        :meth:`current_key_version` and :meth:`compromised_versions`.

        Default: ``key_id`` as is (a KMS whose ids may be anything, e.g. AWS KMS, where an alias and
        a key ARN are different real names). The shipped KMSs that the AWS face may serve map
        ``alias/NAME`` and the key and alias ARNs to ``NAME``
        (:class:`~pyiceberg_crypto.kms.key_ids.PlainKeyIds`, :mod:`pyiceberg_crypto.kms.key_ids`)::

            KeystoreKms(path).canonical_key_id("alias/orders-key")    # "orders-key"
        """
        return key_id

    def key_version(self, wrapped: bytes, wrapping_key_id: str) -> str | None:
        """Which version of master key ``wrapping_key_id`` wrapped ``wrapped``, if this KMS can
        tell (None: it cannot). The key inventory and the verifier's rotation check use it; it
        never returns key material. Override it in a KMS with key versions."""
        return None

    def compromised_versions(self, wrapping_key_id: str) -> frozenset[str]:
        """The versions of master key ``wrapping_key_id`` (as :meth:`key_version` names them) that
        are known to have leaked. A compromised version still unwraps; the audit fails and
        ``keys where-used --compromised`` lists the tables while any KEK wrapped by one remains
        (re-encrypt them: ``keys reencrypt``). Default: none. The keystore KMS keeps the flag in
        its file (``pyiceberg-crypto keystore compromised``); for another KMS, override this (e.g.
        from the KMS's own key metadata or an operator's list)."""
        return frozenset()

    def current_key_version(self, wrapping_key_id: str) -> str | None:
        """The version :meth:`wrap_key` uses for ``wrapping_key_id`` now (None: cannot tell)."""
        return None

    def key_versions(self, wrapping_key_id: str) -> frozenset[str] | None:
        """The versions of master key ``wrapping_key_id`` this KMS holds (as :meth:`key_version`
        names them): empty for a key it does not know, None when it cannot tell. ``keys reencrypt``
        refuses a compromised version that is not among them. Override it in a KMS with versions."""
        return None

    def unwrap_key_version(self, wrapped: bytes, wrapping_key_id: str, version: str | None) -> bytes:
        """Unwrap a key that ``version`` (from :meth:`key_version`) of the master key wrapped: how a
        re-wrap reads a KEK after the key id moved on. Default: :meth:`unwrap_key`."""
        return self.unwrap_key(wrapped, wrapping_key_id)

    def supports_key_generation(self) -> bool:
        """True if :meth:`generate_key` is implemented (the KMS creates keys itself)."""
        return False

    def generate_key(self, wrapping_key_id: str) -> KeyGenerationResult:
        """Create a new key inside the KMS and return it raw and wrapped."""
        raise NotImplementedError(f"{type(self).__name__} does not generate keys")

    def close(self) -> None:  # noqa: B027 - optional hook
        """Optional: release resources."""
