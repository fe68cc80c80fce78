"""An in-memory KMS for demos and tests, wire-compatible with Iceberg's ``MemoryMockKMS``.

Wrapped key = AES-GCM under the master key: ``nonce (12) || ciphertext || tag (16)``, no AAD,
exactly like Iceberg Java's test KMS, so a table written with one can be read with the other::

    kms = InMemoryKms({"orders-key": os.urandom(32)})
    wrapped = kms.wrap_key(os.urandom(16), "orders-key")

Not for production: master keys live in process memory and vanish with it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from pyiceberg_crypto.errors import InvalidArgumentError
from pyiceberg_crypto.kms.base import KeyManagementClient, KmsError, UnknownKeyError
from pyiceberg_crypto.kms.key_ids import PlainKeyIds
from pyiceberg_crypto.properties import AES_KEY_LENGTHS

__all__ = ["NONCE_LENGTH", "TAG_LENGTH", "InMemoryKms"]

NONCE_LENGTH = 12
TAG_LENGTH = 16


class InMemoryKms(PlainKeyIds, KeyManagementClient):
    """Master keys held in a dict ``{key_id: key_bytes}`` (16, 24 or 32 bytes each)."""

    def __init__(self, master_keys: Mapping[str, bytes]):
        keys: dict[str, AESGCM] = {}
        for key_id, key in master_keys.items():
            if not isinstance(key, (bytes, bytearray)) or len(key) not in AES_KEY_LENGTHS:
                raise InvalidArgumentError(
                    f"master key {key_id!r} must be 16, 24 or 32 bytes, got "
                    f"{len(key) if isinstance(key, (bytes, bytearray)) else type(key).__name__}"
                )
            keys[key_id] = AESGCM(bytes(key))
        self._ciphers = keys
        self._lock = threading.Lock()

    @classmethod
    def with_random_keys(cls, *key_ids: str, key_length: int = 16) -> InMemoryKms:
        """A KMS with fresh random master keys for the given ids."""
        return cls({key_id: os.urandom(key_length) for key_id in key_ids})

    @property
    def key_ids(self) -> list[str]:
        return sorted(self._ciphers)

    def _cipher(self, wrapping_key_id: str) -> AESGCM:
        try:
            return self._ciphers[wrapping_key_id]
        except KeyError:
            raise UnknownKeyError(f"master key {wrapping_key_id!r} is not in this KMS") from None

    def current_key_version(self, wrapping_key_id: str) -> str | None:
        """None (no versions here); UnknownKeyError for a key this KMS does not hold."""
        self._cipher(wrapping_key_id)
        return None

    def wrap_key(self, key: bytes, wrapping_key_id: str) -> bytes:
        nonce = os.urandom(NONCE_LENGTH)
        return nonce + self._cipher(wrapping_key_id).encrypt(nonce, bytes(key), None)

    def unwrap_key(self, wrapped: bytes, wrapping_key_id: str) -> bytes:
        cipher = self._cipher(wrapping_key_id)
        if len(wrapped) < NONCE_LENGTH + TAG_LENGTH:
            raise KmsError(f"wrapped key for {wrapping_key_id!r} is too short ({len(wrapped)} bytes)")
        try:
            return cipher.decrypt(bytes(wrapped[:NONCE_LENGTH]), bytes(wrapped[NONCE_LENGTH:]), None)
        except InvalidTag:
            raise KmsError(
                f"wrapped key does not authenticate under master key {wrapping_key_id!r} "
                "(wrong master key, or tampered wrapped key)"
            ) from None

    def __repr__(self) -> str:
        return f"InMemoryKms(key_ids={self.key_ids})"
