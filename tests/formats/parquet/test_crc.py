"""The CRC-32 decrypt_parquet writes into page headers: zlib's (IEEE) polynomial, from zlib-ng
when installed (extra [speed]; ~20x zlib 1.2's speed, bench section 2), on the buffer types the
page walk hands it (memoryview slices of a reused buffer)."""

from __future__ import annotations

import importlib.util
import os
import zlib

import pytest

from pyiceberg_crypto.formats.parquet import decrypt


@pytest.mark.parametrize("size", [0, 1, 15, 16, 63, 64, 4095, 65_537, 1 << 20])
def test_crc32_matches_zlib_on_bytes_bytearray_and_views(size):
    data = os.urandom(size + 7)
    view = memoryview(bytearray(data))[3 : 3 + size]
    assert decrypt.crc32(data[3 : 3 + size]) == decrypt.crc32(view) == zlib.crc32(view)
    assert decrypt.crc32(bytearray(data)) == zlib.crc32(data)


def test_zlib_ng_is_used_when_installed():
    if importlib.util.find_spec("zlib_ng") is None:
        pytest.skip("zlib-ng is not installed (extra [speed]): the standard zlib is used")
    from zlib_ng import zlib_ng

    assert decrypt.crc32 is zlib_ng.crc32
