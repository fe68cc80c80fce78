"""CRC32C (Castagnoli), the checksum Google Cloud KMS uses for end-to-end integrity.

    crc32c(b"123456789") == 0xE3069283

Pure Python (table-driven, reflected polynomial 0x82F63B78, RFC 3720 appendix B.4): KMS payloads
are a few dozen bytes, so no extension module is needed.
"""

from __future__ import annotations

_POLY = 0x82F63B78


def _table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ _POLY if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _table()


def crc32c(data: bytes) -> int:
    """The CRC32C of ``data`` as an unsigned 32-bit int."""
    crc = 0xFFFFFFFF
    for byte in bytes(data):
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF
