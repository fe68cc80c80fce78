"""AGS1 compatibility with Iceberg Java, both ways, using Iceberg's own classes.

Java writes (AesGcmOutputFile) -> Python reads (Ags1Reader, verify_ags1, decrypt_bytes): the
streams Java wrote are committed (tests/formats/fixtures/java, no JVM needed here; checked against
Java again by test_java_fixtures.py). Python writes (Ags1Writer) -> Java reads (AesGcmInputFile):
in the test JVM (``V``, marked jvm). AES-128/192/256 and the sizes around block boundaries. Block
sizes other than 1 MiB use the spec framing around Iceberg's Ciphers.AesGcmEncryptor/Decryptor,
since Iceberg's streams only support 1 MiB.
"""

from __future__ import annotations

import io

import pytest
from py4j.protocol import Py4JJavaError

from pyiceberg_crypto.formats import ags1
from pyiceberg_crypto.testing import Ags1Writer, decrypt_bytes, encrypt_bytes
from pyiceberg_crypto.formats.errors import FormatError, TagMismatchError
from tests.formats import java_fixtures
from tests.formats.ags1_helpers import MIB, java_vectors, random_bytes, write

KEY_LENGTHS = [16, 24, 32]
SIZES = [0, 1, MIB - 1, MIB, MIB + 1, 3 * MIB + 12345]


@pytest.fixture(scope="module")
def V(jvm):
    return java_vectors(jvm)


def _java_written(tmp_path, name: str) -> tuple[str, java_fixtures.Ags1Vector]:
    """A stream Iceberg's AesGcmOutputFile wrote (committed), as a file in ``tmp_path``."""
    vector = java_fixtures.ags1(name)
    assert vector.writer == "iceberg-stream"
    return write(tmp_path / "java.ags1", vector.data), vector


@pytest.mark.parametrize("key_length", KEY_LENGTHS)
@pytest.mark.parametrize("size", SIZES)
def test_java_writes_python_reads(tmp_path, key_length, size):
    path, vector = _java_written(tmp_path, f"iceberg-k{key_length}-{size}")
    key, aad, plaintext = vector.key, vector.aad_prefix, vector.plaintext
    assert (len(key), len(aad), len(plaintext)) == (key_length, 16, size)
    stored = (tmp_path / "java.ags1").stat().st_size
    assert stored == ags1.encrypted_length(size)  # Iceberg's geometry, incl. the empty block

    with ags1.Ags1Reader(path, key, aad, length=size, file_length=stored) as reader:
        assert reader.layout.block_size == ags1.DEFAULT_BLOCK_SIZE
        assert reader.read() == plaintext
    report = ags1.verify_ags1(path, key, aad, size, file_length=stored)
    assert (report.plaintext_length, report.encrypted_length, report.authenticated) == (size, stored, True)
    assert report.block_count == max(1, -(-size // MIB))


@pytest.mark.parametrize("key_length", KEY_LENGTHS)
@pytest.mark.parametrize("size", SIZES)
def test_python_writes_java_reads(V, tmp_path, key_length, size):
    key, aad, plaintext = random_bytes(key_length), random_bytes(16), random_bytes(size)
    encrypted = tmp_path / "py.ags1"
    with Ags1Writer(str(encrypted), key, aad) as writer:
        for start in range(0, size, 300_001):  # odd-sized writes straddle block boundaries
            writer.write(plaintext[start : start + 300_001])
    assert writer.plaintext_length == size
    assert writer.encrypted_length == encrypted.stat().st_size == ags1.encrypted_length(size)

    out = tmp_path / "java-plain.bin"
    assert V.readToFile(str(encrypted), key, aad, str(out)) == size
    assert out.read_bytes() == plaintext
    assert V.plaintextLength(str(encrypted), key, aad) == size


def test_empty_plaintext_is_header_plus_one_empty_block_in_java(tmp_path):
    """What Iceberg writes for an empty stream: 8-byte header + one 28-byte empty block."""
    path, vector = _java_written(tmp_path, "iceberg-k16-0")
    key, aad = vector.key, vector.aad_prefix
    data = (tmp_path / "java.ags1").read_bytes()
    assert len(data) == 36 and data[:8] == ags1.build_header()
    assert encrypt_bytes(b"", key, aad)[:8] == data[:8] and len(encrypt_bytes(b"", key, aad)) == 36
    assert ags1.verify_ags1(path, key, aad, 0).block_count == 1


def test_header_only_file_reads_as_empty_but_java_rejects_it(V, tmp_path):
    """Spec-literal empty stream (no block): we read it as empty; Iceberg refuses < 36 bytes."""
    key = random_bytes(16)
    path = write(tmp_path / "h.ags1", ags1.build_header())
    assert ags1.verify_ags1(path, key, b"", 0).block_count == 0
    assert decrypt_bytes(ags1.build_header(), key) == b""
    with pytest.raises(Py4JJavaError, match="shorter than the minimum"):
        V.readBytes(path, key, b"")


def test_null_aad_prefix_in_java_is_empty_prefix_in_python(tmp_path):
    path, vector = _java_written(tmp_path, "iceberg-null-aad")  # Java wrote with a null prefix
    key, plaintext = vector.key, vector.plaintext
    assert vector.aad_prefix is None and len(key) == 32 and len(plaintext) == 5000
    assert decrypt_bytes(open(path, "rb").read(), key, b"") == plaintext


def test_empty_prefix_in_python_is_null_prefix_in_java(V, tmp_path):
    key, plaintext = random_bytes(32), random_bytes(5000)
    out = encrypt_bytes(plaintext, key, b"")
    assert V.readBytes(write(tmp_path / "p.ags1", out), key, None) == plaintext


#: (position, length) reads: across block boundaries, in the last block, at and past the end.
_SIZE = 3 * MIB + 12345
RANGES = [(0, 10), (MIB - 5, 10), (2 * MIB + 1, 100), (3 * MIB, 7), (_SIZE - 3, 10), (_SIZE, 5)]


def test_random_access_matches_java_seek(tmp_path):
    path, vector = _java_written(tmp_path, f"iceberg-k16-{_SIZE}")
    key, aad, plaintext = vector.key, vector.aad_prefix, vector.plaintext
    with ags1.Ags1Reader(path, key, aad) as reader:
        for pos, n in RANGES:
            reader.seek(pos)
            assert reader.read(n) == plaintext[pos : pos + n]
    with ags1.Ags1Reader(path, key, aad) as reader:
        reader.seek(2 * MIB + 100)
        reader.read(10)
        assert reader.blocks_decrypted == 1  # only the touched block


def test_java_seek_reads_the_same_ranges(V, tmp_path):
    path, vector = _java_written(tmp_path, f"iceberg-k16-{_SIZE}")
    for pos, n in RANGES:
        assert bytes(V.readRange(path, vector.key, vector.aad_prefix, pos, n)) == vector.plaintext[pos : pos + n]


@pytest.mark.parametrize("name", java_fixtures.ags1_names("ciphers-framing"))
def test_other_block_sizes_java_framing_to_python(name):
    """Block sizes 1 B - 2 MiB, plaintexts 0 - 70000 B (at most 1000 B for blocks <= 16 B)."""
    vector = java_fixtures.ags1(name)
    key, aad, plaintext, block_size, stream = vector.key, vector.aad_prefix, vector.plaintext, vector.block_size, vector.data
    assert ags1.parse_header(stream[:8]) == block_size
    assert len(stream) == ags1.encrypted_length(len(plaintext), block_size)
    assert decrypt_bytes(stream, key, aad, length=len(plaintext), file_length=len(stream)) == plaintext
    assert ags1.verify_ags1(io.BytesIO(stream), key, aad, len(plaintext)).block_size == block_size


@pytest.mark.parametrize("block_size", [1, 1000, 4096, 3 * MIB])
def test_other_block_sizes_python_to_java_framing(V, block_size):
    key, aad, plaintext = random_bytes(16), random_bytes(16), random_bytes(5000)
    stream = encrypt_bytes(plaintext, key, aad, block_size=block_size)
    assert bytes(V.readWithBlockSize(stream, key, aad)) == plaintext


def test_iceberg_stream_rejects_non_default_block_size(V, tmp_path):
    """A fact worth knowing: Iceberg's AesGcmInputStream only reads 1 MiB blocks (spec allows any)."""
    key = random_bytes(16)
    path = write(tmp_path / "small.ags1", encrypt_bytes(b"x" * 100, key, b"", block_size=64))
    with pytest.raises(Py4JJavaError, match=r"Invalid GCM stream: block size (.*\[64, 1048576\]|64 != 1048576)"):
        V.readBytes(path, key, b"")


def test_key_length_is_checked():
    for bad in (b"", b"k" * 15, b"k" * 20, b"k" * 33):
        with pytest.raises(FormatError, match="key length"):
            Ags1Writer(io.BytesIO(), bad)
        with pytest.raises(FormatError, match="key length"):
            ags1.verify_ags1(io.BytesIO(ags1.build_header()), bad)


def test_block_size_is_checked():
    for bad in (0, -1, 2**31):
        with pytest.raises(ValueError, match="block size"):
            Ags1Writer(io.BytesIO(), b"k" * 16, block_size=bad)


def test_reprs_do_not_leak_keys(tmp_path):
    key = bytes.fromhex("00112233445566778899aabbccddeeff")
    data = encrypt_bytes(b"abc", key, b"p")
    writer = Ags1Writer(io.BytesIO(), key)
    reader = ags1.Ags1Reader(io.BytesIO(data), key, b"p")
    for text in (repr(writer), repr(reader), str(vars(reader)), str(vars(writer))):
        assert "00112233" not in text and "\\x00\\x11" not in text


def test_pure_helpers():
    assert ags1.build_header(MIB) == b"AGS1\x00\x00\x10\x00"
    assert ags1.block_aad(b"ab", 1) == b"ab\x01\x00\x00\x00"
    assert ags1.block_aad(b"", 0x01020304) == b"\x04\x03\x02\x01"
    assert ags1.encrypted_length(0) == 36 and ags1.encrypted_length(MIB) == 8 + MIB + 28
    geometry = ags1.layout(MIB, 8 + 2 * (MIB + 28) + 29)
    assert (geometry.block_count, geometry.last_block_plain_length, geometry.plaintext_length) == (3, 1, 2 * MIB + 1)
    assert geometry.block_offset(2) == 8 + 2 * (MIB + 28)


def test_fast_path_without_decrypt_into(monkeypatch):
    """Older cryptography (< 45) has no decrypt_into: the fallback gives the same results."""
    monkeypatch.setattr(ags1, "_HAS_DECRYPT_INTO", False)
    key, plaintext = random_bytes(16), random_bytes(5000)
    data = encrypt_bytes(plaintext, key, b"p", block_size=1000)
    assert ags1.verify_ags1(io.BytesIO(data), key, b"p", 5000).block_count == 5
    tampered = data[:2000] + bytes([data[2000] ^ 1]) + data[2001:]
    with pytest.raises(TagMismatchError) as err:
        ags1.verify_ags1(io.BytesIO(tampered), key, b"p")
    assert err.value.location == "block 1"
