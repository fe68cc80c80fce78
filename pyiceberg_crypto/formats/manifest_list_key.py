"""The manifest-list key seal: a manifest list's key metadata encrypted with a KEK.

Iceberg 1.11.0 ``EncryptionUtil.encryptManifestListKeyMetadata`` /
``decryptManifestListKeyMetadata`` seal the serialized :class:`~pyiceberg_crypto.formats.key_metadata.StandardKeyMetadata` of a
manifest list with the table's current key-encryption key (KEK), using ``Ciphers.AesGcmEncryptor``::

    envelope = nonce(12) + ciphertext + tag(16)      AAD = the KEK's KEY_TIMESTAMP property, UTF-8

The timestamp is authenticated so that it cannot be changed (KEK rotation relies on it). The KEK
itself is stored wrapped by the KMS; unwrapping it is the KMS layer's job, not this module's.

Usage::

    key_metadata = decrypt_manifest_list_key_metadata(kek, encrypted, kek_timestamp)
    StandardKeyMetadata.parse(key_metadata)
"""

from __future__ import annotations

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from pyiceberg_crypto.formats.ags1 import NONCE_LENGTH, TAG_LENGTH, check_key
from pyiceberg_crypto.formats.errors import TagMismatchError, TruncatedError

__all__ = ["decrypt_manifest_list_key_metadata"]

LOCATION = "manifest list key metadata"


def decrypt_manifest_list_key_metadata(
    kek: bytes, encrypted: bytes, kek_timestamp: str, *, file: str | None = None
) -> bytes:
    """Open an envelope; TagMismatchError if the KEK, the timestamp or the bytes are wrong."""
    aesgcm = AESGCM(check_key(kek))
    encrypted = bytes(encrypted)
    if len(encrypted) < NONCE_LENGTH + TAG_LENGTH:
        raise TruncatedError(
            f"envelope has {len(encrypted)} bytes, fewer than nonce + tag ({NONCE_LENGTH + TAG_LENGTH})",
            file=file,
            location=LOCATION,
        )
    try:
        aad = kek_timestamp.encode("utf-8")
        return aesgcm.decrypt(encrypted[:NONCE_LENGTH], encrypted[NONCE_LENGTH:], aad)
    except InvalidTag:
        raise TagMismatchError(
            "GCM tag mismatch (wrong KEK, wrong KEY_TIMESTAMP, or tampered envelope)",
            file=file,
            location=LOCATION,
        ) from None
