"""Property-based round trips: random plaintexts, block sizes, write chunkings and seek patterns."""

from __future__ import annotations

import io

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyiceberg_crypto.formats import ags1
from pyiceberg_crypto.testing import Ags1Writer, decrypt_bytes, encrypt_bytes

KEY = bytes(range(32))
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

block_sizes = st.integers(min_value=1, max_value=700)
plaintexts = st.binary(min_size=0, max_size=4000)


@FAST
@given(
    plaintext=plaintexts,
    block_size=block_sizes,
    aad=st.binary(max_size=40),
    chunk=st.integers(1, 900),
)
def test_round_trip(plaintext, block_size, aad, chunk):
    out = io.BytesIO()
    with Ags1Writer(out, KEY[:16], aad, block_size=block_size) as writer:
        for start in range(0, len(plaintext), chunk):
            writer.write(plaintext[start : start + chunk])
    data = out.getvalue()
    assert len(data) == writer.encrypted_length == ags1.encrypted_length(len(plaintext), block_size)
    assert writer.plaintext_length == len(plaintext)
    trusted = {"length": len(plaintext), "file_length": len(data)}
    assert decrypt_bytes(data, KEY[:16], aad, **trusted) == plaintext
    report = ags1.verify_ags1(io.BytesIO(data), KEY[:16], aad, len(plaintext), file_length=len(data))
    assert report.block_count == max(1, -(-len(plaintext) // block_size))
    geometry = ags1.layout(block_size, len(data))
    assert geometry.plaintext_length == len(plaintext) and geometry.block_count == report.block_count


WHENCE = st.sampled_from([io.SEEK_SET, io.SEEK_CUR, io.SEEK_END])
seek_ops = st.lists(st.tuples(WHENCE, st.integers(-5000, 5000), st.integers(0, 1500)), max_size=25)


@FAST
@given(plaintext=plaintexts, block_size=block_sizes, ops=seek_ops)
def test_seek_and_read_like_bytesio(plaintext, block_size, ops):
    data = encrypt_bytes(plaintext, KEY, b"prefix", block_size=block_size)
    expected = io.BytesIO(plaintext)
    cached, decrypts = -1, 0  # model of the reader's one-block cache
    with ags1.Ags1Reader(io.BytesIO(data), KEY, b"prefix") as reader:
        for whence, offset, size in ops:
            base = {io.SEEK_SET: 0, io.SEEK_CUR: expected.tell(), io.SEEK_END: len(plaintext)}
            if base[whence] + offset < 0:
                continue  # both refuse negative positions
            assert reader.seek(offset, whence) == expected.seek(offset, whence)
            start = expected.tell()
            chunk = reader.read(size)
            assert chunk == expected.read(size)
            assert reader.tell() == expected.tell()
            if chunk:  # the blocks this read touched, minus the one still cached
                first, last = start // block_size, (start + len(chunk) - 1) // block_size
                decrypts += last - first + 1 - (first == cached)
                cached = last
        assert reader.blocks_decrypted == decrypts  # random access decrypts only touched blocks


@FAST
@given(plaintext=st.binary(min_size=1, max_size=3000), block_size=block_sizes, data=st.data())
def test_single_read_decrypts_only_its_blocks(plaintext, block_size, data):
    pos = data.draw(st.integers(0, len(plaintext) - 1))
    size = data.draw(st.integers(1, len(plaintext) - pos))
    stream = encrypt_bytes(plaintext, KEY, b"", block_size=block_size)
    with ags1.Ags1Reader(io.BytesIO(stream), KEY, b"") as reader:
        reader.seek(pos)
        assert reader.read(size) == plaintext[pos : pos + size]
        assert reader.blocks_decrypted == (pos + size - 1) // block_size - pos // block_size + 1


@FAST
@given(plaintext=plaintexts, block_size=block_sizes)
def test_buffered_reader_and_writer(plaintext, block_size):
    raw = io.BytesIO()
    writer = Ags1Writer(raw, KEY[:24], b"a", block_size=block_size)
    with io.BufferedWriter(writer, buffer_size=97) as buffered:
        buffered.write(plaintext)
    stream = raw.getvalue()
    raw_reader = ags1.Ags1Reader(io.BytesIO(stream), KEY[:24], b"a")
    with io.BufferedReader(raw_reader, buffer_size=64) as buffered:
        assert buffered.read() == plaintext
