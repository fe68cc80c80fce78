"""Encrypted module framing and ciphers of Parquet Modular Encryption (spec 4.2, 5.1, 5.5).

GCM module:  ``length (4 bytes LE) | nonce (12) | ciphertext | tag (16)``; length counts the
             bytes after itself.
CTR module:  ``length (4 bytes LE) | nonce (12) | ciphertext``; IV = nonce || 0x00000001 (4.2.2).
Footer signature (plaintext footer mode): ``nonce (12) | tag (16)`` = the GCM tag of the
serialised FileMetaData under the footer key and footer AAD (5.5).

Usage::

    cipher = ModuleCipher(key)
    plaintext = cipher.decrypt_gcm(module_body, aad)   # raises InvalidTag on tampering
    ok = cipher.footer_signature_valid(footer_bytes, signature, footer_aad)
"""

from __future__ import annotations

import struct

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from pyiceberg_crypto.errors import FormatError, InvalidArgumentError
from pyiceberg_crypto.properties import AES_KEY_LENGTHS

__all__ = ["GCM_OVERHEAD", "NONCE_LENGTH", "TAG_LENGTH", "ModuleCipher", "module_length", "valid_key_length"]

NONCE_LENGTH = 12
TAG_LENGTH = 16
LENGTH_PREFIX = 4
SIGNATURE_LENGTH = NONCE_LENGTH + TAG_LENGTH
GCM_OVERHEAD = NONCE_LENGTH + TAG_LENGTH  # per module body, excluding the length prefix
CTR_INITIAL_COUNTER = b"\x00\x00\x00\x01"  # spec 4.2.2: 31 zero bits then a one bit
HAS_DECRYPT_INTO = hasattr(AESGCM, "decrypt_into")  # cryptography >= 45


def valid_key_length(key: bytes) -> bool:
    """AES-128/192/256 (spec section 4)."""
    return len(key) in AES_KEY_LENGTHS


def module_length(prefix: bytes) -> int:
    """The length field of a module (spec 5.1: 4-byte little endian);
    :class:`~pyiceberg_crypto.errors.InvalidArgumentError` for a prefix that is not 4 bytes."""
    if len(prefix) != LENGTH_PREFIX:
        raise InvalidArgumentError(f"a module length prefix is {LENGTH_PREFIX} bytes, got {len(prefix)}")
    return struct.unpack("<I", prefix)[0]


class ModuleCipher:
    """AES cipher for one key; holds one AESGCM object so many small modules stay cheap."""

    def __init__(self, key: bytes):
        if not valid_key_length(key):
            raise FormatError(f"AES key must be 16, 24 or 32 bytes, got {len(key)}")
        self._key = key
        self._gcm = AESGCM(key)

    def __repr__(self) -> str:  # never show key bytes
        return f"ModuleCipher(AES-{len(self._key) * 8})"

    @property
    def aead(self) -> AESGCM:
        """The key's ``AESGCM`` object, for hot loops that call ``decrypt`` / ``decrypt_into`` on
        nonce and ciphertext views themselves (they must check ``len(body) >= GCM_OVERHEAD``
        first, as :meth:`decrypt_gcm` does)."""
        return self._gcm

    def decrypt_gcm(self, body: bytes, aad: bytes) -> bytes:
        """Decrypt ``nonce | ciphertext | tag``; raises cryptography's InvalidTag on failure."""
        if len(body) < GCM_OVERHEAD:
            raise ValueError(f"GCM module of {len(body)} bytes is shorter than nonce + tag")
        view = memoryview(body)  # slicing a view copies nothing (pages are up to megabytes)
        return self._gcm.decrypt(view[:NONCE_LENGTH], view[NONCE_LENGTH:], aad)

    def decrypt_gcm_into(self, body, aad: bytes, out: memoryview) -> None:
        """Like :meth:`decrypt_gcm`, into ``out`` (exactly ``len(body) - GCM_OVERHEAD`` bytes),
        without allocating (cryptography >= 45; older versions decrypt and copy)."""
        if len(body) < GCM_OVERHEAD:
            raise ValueError(f"GCM module of {len(body)} bytes is shorter than nonce + tag")
        view = memoryview(body)
        if HAS_DECRYPT_INTO:
            self._gcm.decrypt_into(view[:NONCE_LENGTH], view[NONCE_LENGTH:], aad, out)
        else:
            out[:] = self._gcm.decrypt(view[:NONCE_LENGTH], view[NONCE_LENGTH:], aad)

    def decrypt_ctr(self, body: bytes) -> bytes:
        """Decrypt ``nonce | ciphertext`` with AES-CTR, IV = nonce || 0x00000001 (no integrity)."""
        if len(body) < NONCE_LENGTH:
            raise ValueError(f"CTR module of {len(body)} bytes is shorter than its nonce")
        iv = bytes(body[:NONCE_LENGTH]) + CTR_INITIAL_COUNTER
        decryptor = Cipher(algorithms.AES(self._key), modes.CTR(iv)).decryptor()
        return decryptor.update(body[NONCE_LENGTH:]) + decryptor.finalize()

    def footer_signature_valid(self, footer: bytes, signature: bytes, aad: bytes) -> bool:
        """Recompute the GCM tag of the plaintext footer with the stored nonce (spec 5.5)."""
        if len(signature) != SIGNATURE_LENGTH:
            return False
        tag = self._gcm.encrypt(signature[:NONCE_LENGTH], footer, aad)[-TAG_LENGTH:]
        return _constant_time_equal(tag, signature[NONCE_LENGTH:])

    # Encryption, used by tests to build modules and by nothing on the read path.
    def encrypt_gcm(self, plaintext: bytes, aad: bytes, nonce: bytes) -> bytes:
        """``length | nonce | ciphertext | tag`` for ``plaintext``."""
        body = nonce + self._gcm.encrypt(nonce, plaintext, aad)
        return struct.pack("<I", len(body)) + body


def _constant_time_equal(a: bytes, b: bytes) -> bool:
    from hmac import compare_digest

    return compare_digest(a, b)
