"""Parsing of the key options shared by ``inspect`` and ``decrypt`` (hex keys, key metadata)."""

from __future__ import annotations

import base64
import binascii

from pyiceberg_crypto.formats.errors import FormatError
from pyiceberg_crypto.formats.key_metadata import StandardKeyMetadata

VALID_KEY_LENGTHS = (16, 24, 32)


class UsageError(Exception):
    """Bad or inconsistent command-line input (exit status 2)."""


def parse_hex(value: str, option: str) -> bytes:
    """Bytes from a hex option value; UsageError naming the option otherwise."""
    try:
        return bytes.fromhex(value)
    except ValueError:
        raise UsageError(f"{option} is not valid hex") from None


def parse_aes_key(value: str, option: str) -> bytes:
    """An AES key (16, 24 or 32 bytes) from a hex option value."""
    key = parse_hex(value, option)
    if len(key) not in VALID_KEY_LENGTHS:
        raise UsageError(f"{option}: AES key must be 16, 24 or 32 bytes, got {len(key)}")
    return key


def parse_key_metadata(value: str, option: str = "--key-metadata") -> StandardKeyMetadata:
    """Iceberg ``StandardKeyMetadata`` from a base64 option value."""
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise UsageError(f"{option} is not valid base64") from None
    try:
        return StandardKeyMetadata.parse(raw)
    except FormatError as exc:
        raise UsageError(f"{option}: {exc}") from None
