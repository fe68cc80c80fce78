"""Iceberg's ``StandardKeyMetadata``: the per-file key, AAD prefix and stored length.

Wire format (Iceberg 1.11.0 ``StandardKeyMetadata`` + ``KeyMetadataEncoder``): one version byte
``0x01`` followed by an Avro binary datum (no container, no fingerprint) of the record::

    encryption_key: bytes                  (field id 0, required)
    aad_prefix:     union {null, bytes}    (field id 1, optional: null is branch 0)
    file_length:    union {null, long}     (field id 2, optional: the *encrypted* file length)

The Avro binary encoding used is tiny (Avro spec "Binary Encoding": zig-zag varint longs,
length-prefixed bytes, union branch index as a long), so it is written out here rather than
going through fastavro: the codec stays a few pure functions with precise errors, and the tests
compare it with Iceberg's own encoder in the JVM (and with fastavro as a second reader).

Usage::

    km = StandardKeyMetadata.parse(buffer)
    km.encryption_key, km.aad_prefix, km.file_length
    assert StandardKeyMetadata(key, aad, 1234).serialize() == java_bytes
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyiceberg_crypto._deprecated import renamed_classes
from pyiceberg_crypto.errors import ArgumentTypeError, FormatError, InvalidArgumentError

__all__ = [ "StandardKeyMetadata", "decode_bytes", "decode_long", "encode_bytes", "encode_long"]

#: Old names, kept for one release (CHANGELOG.md).
__getattr__ = renamed_classes(__name__, {"KeyMetadataError": FormatError})

VERSION_1 = 0x01


# Avro binary encoding (Avro 1.11 spec, "Binary Encoding") ----------------------------------


def encode_long(value: int) -> bytes:
    """Avro long: zig-zag, then little-endian base-128 varint."""
    if not -(2**63) <= value < 2**63:
        raise InvalidArgumentError(f"{value} does not fit an Avro long")
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while zigzag > 0x7F:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


def decode_long(data: bytes, pos: int, what: str) -> tuple[int, int]:
    """(value, next position) of the Avro long at ``pos``; at most 10 bytes."""
    result = shift = 0
    for i in range(10):
        if pos + i >= len(data):
            raise FormatError(f"key metadata ends inside {what} (varint)")
        byte = data[pos + i]
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if result >= 2**64:
                break
            return (result >> 1) ^ -(result & 1), pos + i + 1
        shift += 7
    raise FormatError(f"malformed Avro long in {what}")


def encode_bytes(value: bytes) -> bytes:
    """Avro bytes: length as long, then the bytes."""
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise ArgumentTypeError(f"Avro bytes are bytes, got {type(value).__name__}")
    return encode_long(len(value)) + bytes(value)


def decode_bytes(data: bytes, pos: int, what: str) -> tuple[bytes, int]:
    length, pos = decode_long(data, pos, what)
    if length < 0:
        raise FormatError(f"negative length {length} for {what}")
    if pos + length > len(data):
        raise FormatError(f"key metadata ends inside {what} ({len(data) - pos} of {length} bytes)")
    return bytes(data[pos : pos + length]), pos + length


def _decode_optional(data: bytes, pos: int, what: str, decode) -> tuple[object, int]:
    branch, pos = decode_long(data, pos, f"{what} union index")
    if branch == 0:
        return None, pos
    if branch == 1:
        return decode(data, pos, what)
    raise FormatError(f"invalid union branch {branch} for {what} (expected 0=null or 1)")


# The record ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class StandardKeyMetadata:
    """Decoded key metadata. ``repr`` never shows the key (nor the AAD prefix bytes)."""

    encryption_key: bytes = field(repr=False)
    aad_prefix: bytes | None = field(default=None, repr=False)
    file_length: int | None = None  # length of the encrypted (stored) file, when recorded

    def __repr__(self) -> str:
        aad = "None" if self.aad_prefix is None else f"<{len(self.aad_prefix)} bytes>"
        return (
            f"StandardKeyMetadata(encryption_key=<{len(self.encryption_key)} bytes>, "
            f"aad_prefix={aad}, file_length={self.file_length})"
        )

    @classmethod
    def parse(cls, data: bytes) -> "StandardKeyMetadata":
        """Decode version byte + Avro datum; FormatError when malformed.

        Stricter than Java in one way: bytes after the datum are rejected (Java ignores them).
        """
        data = bytes(data)
        if not data:
            raise FormatError("empty key metadata (no version byte)")
        if data[0] != VERSION_1:
            raise FormatError(f"unsupported key metadata version {data[0]} (supported: 1)")
        key, pos = decode_bytes(data, 1, "encryption_key")
        aad, pos = _decode_optional(data, pos, "aad_prefix", decode_bytes)
        length, pos = _decode_optional(data, pos, "file_length", decode_long)
        if pos != len(data):
            raise FormatError(f"{len(data) - pos} unexpected bytes after the key metadata record")
        if length is not None and length < 0:
            raise FormatError(f"negative file_length {length}")
        return cls(key, aad, length)

    def serialize(self) -> bytes:
        """Version byte 0x01 + Avro datum, byte-identical to Iceberg's ``buffer()``."""
        out = bytearray([VERSION_1])
        out += encode_bytes(self.encryption_key)
        out += b"\x00" if self.aad_prefix is None else b"\x02" + encode_bytes(self.aad_prefix)
        out += b"\x00" if self.file_length is None else b"\x02" + encode_long(self.file_length)
        return bytes(out)

    def with_file_length(self, file_length: int) -> "StandardKeyMetadata":
        """Copy with the stored length set (Iceberg's ``copyWithLength``)."""
        return StandardKeyMetadata(self.encryption_key, self.aad_prefix, file_length)
