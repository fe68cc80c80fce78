"""The wrapped-key envelope of the cloud KMS providers: which master key version made a ciphertext.

Cloud KMS ciphertexts and Key Vault wrap results are opaque bytes that do not say (in a documented
way) which key version made them, but re-wrapping needs to know. The providers keep the version the
service reported next to the ciphertext::

    blob = pack(b"PGC1", "projects/p/.../cryptoKeyVersions/3", ciphertext)
    label, ciphertext = unpack(b"PGC1", blob, "Google Cloud KMS", key_id)

Layout: ``magic (4) || label length (2, big-endian) || UTF-8 label || ciphertext``. The label is
not secret and not authenticated: the service decides the version from its own ciphertext (Cloud
KMS) or the provider checks it against the key id (Key Vault), so a forged label can only make an
unwrap fail, never return another key.
"""

from __future__ import annotations

import struct

from pyiceberg_crypto.errors import InvalidArgumentError
from pyiceberg_crypto.kms.base import KmsError

MAX_LABEL_LENGTH = 1024


def pack(magic: bytes, label: str, ciphertext: bytes) -> bytes:
    """``magic || len(label) || label || ciphertext``."""
    encoded = label.encode("utf-8")
    if len(encoded) > MAX_LABEL_LENGTH:
        raise InvalidArgumentError(f"envelope label longer than {MAX_LABEL_LENGTH} bytes")
    return magic + struct.pack(">H", len(encoded)) + encoded + bytes(ciphertext)


def unpack(magic: bytes, blob: bytes, provider: str, key_id: str) -> tuple[str, bytes]:
    """``(label, ciphertext)`` of an envelope; :class:`KmsError` naming ``provider`` and ``key_id``
    (never the bytes) when ``blob`` is not one."""
    blob = bytes(blob)
    head = len(magic) + 2
    if len(blob) > head and blob.startswith(magic):
        (length,) = struct.unpack(">H", blob[len(magic):head])
        if 0 < length <= MAX_LABEL_LENGTH and len(blob) > head + length:
            try:
                return blob[head:head + length].decode("utf-8"), blob[head + length:]
            except UnicodeDecodeError:
                pass
    raise KmsError(f"{provider}: the wrapped key for key id {key_id!r} is not a {magic.decode()} envelope "
                   "(wrapped by another KMS, or damaged)")


def peek_label(magic: bytes, blob: bytes) -> str | None:
    """The label of an envelope, or None when ``blob`` is not one (no exception)."""
    try:
        return unpack(magic, blob, "", "")[0]
    except KmsError:
        return None
