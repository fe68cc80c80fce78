"""The ciphertext blob of the AWS-KMS-compatible face (``kms serve --aws-kms-api``): self-describing,
so that ``Decrypt`` needs no ``KeyId``, as with AWS KMS.

    from pyiceberg_crypto.kms.aws_face_blob import seal, open_blob, FaceBlobKms
    blob = seal(keystore, b"\\x01" * 32, "lake-key")            # what Encrypt returns
    key_id, plaintext = open_blob(keystore, blob)               # what Decrypt does
    verify_metadata(path, FaceBlobKms(keystore))                # tables written through the face

Layout (all lengths big-endian)::

    b"PICAWSK1"                      magic (8 bytes; the final "1" is the format version)
    u16 len + key id (UTF-8)         the Python KMS's key id (never an ARN or alias: those are mapped first)
    u32 len + inner                  the Python KMS's own wrap_key(plaintext || binding, key id)

``binding`` = SHA-256 of the magic, the key id and the encryption context (canonical JSON), sealed
*inside* the Python KMS's wrapping: a blob from one key id never decrypts under another, nor with
another context, and nothing about the plaintext is visible outside the wrapping. Blobs without the
magic are **raw** Python-KMS wrapped keys (a table written through the Py4J bridge), unwrapped with
the key id Decrypt sends and no context; a raw blob must unwrap to a table key (at most 32 bytes),
so a face blob's inner part sent without its header (33 bytes or more) is refused.

Why, and how Trino reads bridge tables through the raw path: docs/how-to/trino.md ("Raw blobs keep
the encryption context binding" in section 1, "The blob" in section 3).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import struct
from collections.abc import Mapping

from pyiceberg_crypto.errors import InvalidArgumentError
from pyiceberg_crypto.kms.base import KeyGenerationResult, KeyManagementClient, KmsError, UnknownKeyError
from pyiceberg_crypto.kms.key_ids import canonical_key_id

__all__ = ["FaceBlobKms", "IncorrectKeyError", "InvalidCiphertextError", "is_face_blob", "open_blob", "parse", "seal"]

MAGIC = b"PICAWSK1"
BINDING_LENGTH = 32
MAX_KEY_ID_BYTES = 2048
MAX_INNER_BYTES = 1 << 20
#: The longest plaintext a raw blob may unwrap to: a table key (16, 24 or 32 bytes), never a
#: face-sealed payload (plaintext of 1 byte or more + the 32-byte binding: 33 bytes or more).
MAX_RAW_PLAINTEXT_BYTES = BINDING_LENGTH
_WHY = " (not made with this key, altered, or the KMS failed: the KMS's log has the detail)"


class InvalidCiphertextError(KmsError):
    """The blob is malformed, or was not made with this key id / encryption context (AWS's
    ``InvalidCiphertextException``). Says why, never with key bytes."""


class IncorrectKeyError(KmsError):
    """The blob names another key than the ``KeyId`` asked for (AWS's ``IncorrectKeyException``)."""


def canonical_context(context: Mapping[str, str] | None) -> bytes:
    """The encryption context as sorted, compact JSON (empty context and None are the same)."""
    return json.dumps(dict(context or {}), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _binding(key_id: str, context: Mapping[str, str] | None) -> bytes:
    encoded = key_id.encode()
    return hashlib.sha256(MAGIC + struct.pack(">H", len(encoded)) + encoded + canonical_context(context)).digest()


def is_face_blob(blob: bytes) -> bool:
    """True if ``blob`` starts with the face's magic (else it is a raw Python-KMS wrapped key)."""
    return bytes(blob[: len(MAGIC)]) == MAGIC


def seal(kms: KeyManagementClient, plaintext: bytes, key_id: str,
         context: Mapping[str, str] | None = None) -> bytes:
    """Wrap ``plaintext`` with the Python KMS's key ``key_id`` into a self-describing blob."""
    encoded = key_id.encode()
    if not encoded or len(encoded) > MAX_KEY_ID_BYTES:
        raise InvalidArgumentError(f"key id must be 1..{MAX_KEY_ID_BYTES} UTF-8 bytes")
    inner = kms.wrap_key(bytes(plaintext) + _binding(key_id, context), key_id)
    if len(inner) > MAX_INNER_BYTES:
        raise KmsError(f"the KMS wrapped a key with key id {key_id!r} into more than {MAX_INNER_BYTES} bytes")
    return MAGIC + struct.pack(">H", len(encoded)) + encoded + struct.pack(">I", len(inner)) + bytes(inner)


def parse(blob: bytes) -> tuple[str, bytes]:
    """(key id, inner wrapped bytes) of a face blob; :class:`InvalidCiphertextError` if malformed."""
    blob = bytes(blob)
    if not is_face_blob(blob):
        raise InvalidCiphertextError("not a blob of this KMS face (no magic)")
    at = len(MAGIC)
    try:
        (id_length,) = struct.unpack_from(">H", blob, at)
        at += 2
        raw_id = blob[at: at + id_length]
        at += id_length
        (inner_length,) = struct.unpack_from(">I", blob, at)
        at += 4
    except struct.error:
        raise InvalidCiphertextError("the ciphertext blob is truncated") from None
    if len(raw_id) != id_length or id_length == 0:
        raise InvalidCiphertextError("the ciphertext blob is truncated")
    if len(blob) - at != inner_length:
        raise InvalidCiphertextError("the ciphertext blob's length does not match its header")
    try:
        key_id = raw_id.decode()
    except UnicodeDecodeError:
        raise InvalidCiphertextError("the ciphertext blob's key id is not UTF-8") from None
    return key_id, blob[at:]


def open_blob(kms: KeyManagementClient, blob: bytes, key_id: str | None = None,
              context: Mapping[str, str] | None = None, *, accept_raw: bool = True) -> tuple[str, bytes]:
    """Unwrap ``blob``; return (the key id that made it, plaintext).

    A face blob names its key; ``key_id`` (optional) must then be that key
    (:class:`IncorrectKeyError`). A raw blob needs ``key_id`` and an empty context."""
    blob = bytes(blob)
    if not is_face_blob(blob):
        if not accept_raw:
            raise InvalidCiphertextError("not a blob of this KMS face, and raw blobs are refused here")
        if not key_id:
            raise InvalidCiphertextError("a raw Python-KMS blob (no face header) needs the KeyId it was wrapped with")
        if context:
            raise InvalidCiphertextError("a raw Python-KMS blob has no encryption context: send none")
        try:
            plaintext = bytes(kms.unwrap_key(blob, key_id))
        except (UnknownKeyError, TimeoutError):
            raise
        except Exception:
            raise InvalidCiphertextError(f"the raw blob does not unwrap with key id {key_id!r}{_WHY}") from None
        if len(plaintext) > MAX_RAW_PLAINTEXT_BYTES:
            # Every face-sealed payload is longer (1 byte or more + the 32-byte binding): this is the
            # inner part of a face blob sent without its header, to get around its key id and context.
            raise InvalidCiphertextError(f"the raw blob does not unwrap with key id {key_id!r} to a table key "
                                         f"(at most {MAX_RAW_PLAINTEXT_BYTES} bytes): the inner part of a face "
                                         "blob is opened only whole, with its encryption context")
        return key_id, plaintext
    named, inner = parse(blob)
    if key_id is not None and key_id != named:
        raise IncorrectKeyError(f"the ciphertext was made with another key than {key_id!r}")
    try:
        payload = kms.unwrap_key(inner, named)
    except (UnknownKeyError, TimeoutError):
        raise
    except Exception:
        raise InvalidCiphertextError(f"the blob does not unwrap with key id {named!r}{_WHY}") from None
    payload = bytes(payload)
    if len(payload) < BINDING_LENGTH or not hmac.compare_digest(payload[-BINDING_LENGTH:], _binding(named, context)):
        raise InvalidCiphertextError(
            f"the blob was not made with key id {named!r} and this encryption context (edited header, "
            "or another context)")
    return named, payload[:-BINDING_LENGTH]


class FaceBlobKms(KeyManagementClient):
    """A Python KMS that reads and writes the face's blobs: how the verifier, the JVM-free reader
    and the key commands open a table written through the AWS face with the same Python KMS (raw
    blobs, from the bridge, unwrap too). No encryption context. Key ids are mapped as the face maps
    them (``alias/NAME`` and the key and alias ARNs are the Python KMS's ``NAME``; no region or
    account check), so a table keyed ``alias/orders-key`` opens and re-wraps as the face would.

        verify_metadata(path, FaceBlobKms(load_kms("keystore", {...})))
    """

    def __init__(self, kms: KeyManagementClient, *, accept_raw: bool = True):
        self.kms = kms
        self.accept_raw = accept_raw

    def canonical_key_id(self, key_id: str) -> str:
        """The inner KMS's id of the key ``key_id`` names, as the face maps it: ``alias/NAME`` and the
        key and alias ARNs are ``NAME`` (:func:`pyiceberg_crypto.kms.key_ids.canonical_key_id`)."""
        return self.kms.canonical_key_id(canonical_key_id(key_id))

    def wrap_key(self, key: bytes, wrapping_key_id: str) -> bytes:
        return seal(self.kms, key, canonical_key_id(wrapping_key_id))

    def unwrap_key(self, wrapped: bytes, wrapping_key_id: str) -> bytes:
        return open_blob(self.kms, wrapped, canonical_key_id(wrapping_key_id), accept_raw=self.accept_raw)[1]

    def key_version(self, wrapped: bytes, wrapping_key_id: str) -> str | None:
        inner = parse(wrapped)[1] if is_face_blob(wrapped) else wrapped
        return self.kms.key_version(inner, self.canonical_key_id(wrapping_key_id))

    def current_key_version(self, wrapping_key_id: str) -> str | None:
        return self.kms.current_key_version(self.canonical_key_id(wrapping_key_id))

    def compromised_versions(self, wrapping_key_id: str) -> frozenset[str]:
        return self.kms.compromised_versions(self.canonical_key_id(wrapping_key_id))

    def key_versions(self, wrapping_key_id: str) -> frozenset[str] | None:
        return self.kms.key_versions(self.canonical_key_id(wrapping_key_id))

    def supports_key_generation(self) -> bool:
        return False

    def generate_key(self, wrapping_key_id: str) -> KeyGenerationResult:
        raise NotImplementedError("FaceBlobKms does not generate keys")

    def close(self) -> None:
        self.kms.close()

    def __repr__(self) -> str:
        return f"FaceBlobKms({self.kms!r})"
