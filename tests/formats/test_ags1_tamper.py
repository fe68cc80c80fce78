"""Tamper matrix on real AGS1 files written by Iceberg's AesGcmOutputFile (1 MiB blocks, committed).

Every case must raise the precise IntegrityError subclass at the precise block, both through the
fast path (verify_ags1) and through the seekable reader; the untouched files must verify.
"""

from __future__ import annotations

import io
import os
import struct

import pytest

from pyiceberg_crypto.errors import ExtraDataError, IntegrityError, MalformedError, TruncatedError
from pyiceberg_crypto.formats import ags1
from pyiceberg_crypto.testing import decrypt_bytes
from pyiceberg_crypto.formats.errors import BadMagicError, TagMismatchError
from tests.formats import java_fixtures
from tests.formats.ags1_helpers import MIB, random_bytes

C = MIB + 28  # cipher block size
# The committed Iceberg-written files share one key; "other" has another AAD prefix.
_INPUTS = {name: java_fixtures.ags1_index()[f"tamper-{name}"] for name in ("main", "other", "even")}
KEY = bytes.fromhex(_INPUTS["main"]["key"])
AAD = bytes.fromhex(_INPUTS["main"]["aad_prefix"])
OLD_AAD = bytes.fromhex(_INPUTS["other"]["aad_prefix"])


@pytest.fixture(scope="module")
def files():
    """Files Iceberg's AesGcmOutputFile wrote (committed, tests/formats/fixtures/java): 'main'
    (3 blocks, last partial), 'other' (same key, other AAD prefix, same plaintext length: another
    file or an older version), 'even' (exactly 2 full blocks)."""
    out = {}
    for name in _INPUTS:
        vector = java_fixtures.ags1(f"tamper-{name}")
        assert vector.key == KEY and vector.writer == "iceberg-stream"
        out[name] = vector.data
        out[name + ".plain"] = vector.plaintext
    assert (len(out["main.plain"]), len(out["other.plain"]), len(out["even.plain"])) == (2 * MIB + MIB // 2,) * 2 + (2 * MIB,)
    return out


def flip(data: bytes, pos: int) -> bytes:
    return data[:pos] + bytes([data[pos] ^ 0x01]) + data[pos + 1 :]


def block(data: bytes, i: int) -> bytes:
    return data[8 + i * C : 8 + (i + 1) * C]


def splice(data: bytes, i: int, new_block: bytes) -> bytes:
    return data[: 8 + i * C] + new_block + data[8 + (i + 1) * C :]


def genuine_block(plain: bytes, index: int) -> bytes:
    """A correctly encrypted block (key + AAD + index): what only a key holder could append."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    nonce = os.urandom(12)
    return nonce + AESGCM(KEY).encrypt(nonce, plain, ags1.block_aad(AAD, index))


def check_all_ways(data: bytes, expected: type[IntegrityError], location: str, **trusted):
    """Same error class and block via verify_ags1, Ags1Reader (full read) and decrypt_bytes."""
    with pytest.raises(expected) as err:
        ags1.verify_ags1(io.BytesIO(data), KEY, AAD, name="f.ags1", **trusted)
    assert (err.value.location, err.value.file) == (location, "f.ags1")
    assert "f.ags1" in str(err.value) and location in str(err.value)
    with pytest.raises(expected) as err:
        with ags1.Ags1Reader(io.BytesIO(data), KEY, AAD, name="f.ags1", **trusted) as reader:
            reader.read()
    assert err.value.location == location
    return err.value


def test_untouched_files_verify(files):
    for name in ("main", "other", "even"):
        aad = OLD_AAD if name == "other" else AAD
        report = ags1.verify_ags1(io.BytesIO(files[name]), KEY, aad, file_length=len(files[name]))
        assert report.authenticated and report.plaintext_length == len(files[name + ".plain"])
        assert decrypt_bytes(files[name], KEY, aad) == files[name + ".plain"]


# Header ------------------------------------------------------------------------------------


def test_flip_magic(files):
    check_all_ways(flip(files["main"], 0), BadMagicError, "header")


@pytest.mark.parametrize("value", [0, -1, -(2**31)])
def test_invalid_block_length(files, value):
    data = files["main"][:4] + struct.pack("<i", value) + files["main"][8:]
    check_all_ways(data, MalformedError, "header")


def test_other_valid_block_length_misframes_blocks(files):
    data = files["main"][:4] + struct.pack("<i", 2 * MIB) + files["main"][8:]
    check_all_ways(data, TagMismatchError, "block 0")


def test_flip_block_length_byte(files):
    check_all_ways(flip(files["main"], 5), TagMismatchError, "block 0")  # 1 MiB + 256


# Blocks ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "where, offset, location",
    [
        ("nonce", 8 + C + 3, "block 1"),
        ("ciphertext", 8 + 2 * C + 12 + 1000, "block 2"),
        ("tag", 8 + C - 1, "block 0"),
        ("last byte of file", -1, "block 2"),
    ],
)
def test_flip_byte_in_block(files, where, offset, location):
    data = files["main"]
    check_all_ways(flip(data, offset % len(data)), TagMismatchError, location)


def test_swap_two_blocks(files):
    data = files["main"]
    swapped = data[:8] + block(data, 1) + block(data, 0) + data[8 + 2 * C :]
    check_all_ways(swapped, TagMismatchError, "block 0")


def test_block_from_another_file_with_same_key(files):
    check_all_ways(splice(files["main"], 1, block(files["other"], 1)), TagMismatchError, "block 1")


def test_older_version_with_another_aad_prefix(files):
    """Same key, same length (so trusted lengths pass), other AAD prefix: caught at block 0."""
    old = files["other"]
    check_all_ways(old, TagMismatchError, "block 0", file_length=len(files["main"]))


def test_wrong_key(files):
    with pytest.raises(TagMismatchError) as err:
        ags1.verify_ags1(io.BytesIO(files["main"]), random_bytes(32), AAD)
    assert err.value.location == "block 0"


# Truncation --------------------------------------------------------------------------------


def test_truncate_at_block_boundary_caught_by_trusted_length(files):
    data, stored = files["main"], len(files["main"])
    cut = data[: 8 + 2 * C]
    err = check_all_ways(cut, TruncatedError, "block 2", file_length=stored)
    assert isinstance(err, IntegrityError)
    check_all_ways(cut, TruncatedError, "block 2", length=len(files["main.plain"]))
    # Without a trusted length nothing can tell (the spec's reason for trusted lengths):
    assert ags1.verify_ags1(io.BytesIO(cut), KEY, AAD).plaintext_length == 2 * MIB


def test_truncate_to_header_caught_by_trusted_length(files):
    check_all_ways(files["main"][:8], TruncatedError, "block 0", file_length=len(files["main"]))


def test_truncate_inside_nonce_or_tag_of_last_block(files):
    """A last block shorter than nonce + tag is structurally impossible: no trust needed."""
    check_all_ways(files["main"][: 8 + 2 * C + 20], TruncatedError, "block 2")


def test_truncate_inside_block(files):
    cut = files["main"][: 8 + C + 5000]
    check_all_ways(cut, TruncatedError, "block 1", file_length=len(files["main"]))
    check_all_ways(cut, TagMismatchError, "block 1")  # no trusted length: the tag still fails


@pytest.mark.parametrize("keep", [0, 3, 7])
def test_truncate_inside_header(files, keep):
    check_all_ways(files["main"][:keep], TruncatedError, "header")


# Extra data --------------------------------------------------------------------------------


def test_append_genuine_block_caught_by_trusted_length(files):
    data = files["even"] + genuine_block(b"more", 2)
    err = check_all_ways(data, ExtraDataError, "block 2", file_length=len(files["even"]))
    assert isinstance(err, IntegrityError)
    check_all_ways(data, ExtraDataError, "block 2", length=2 * MIB)


def test_append_copied_block(files):
    data = files["even"] + block(files["even"], 1)
    check_all_ways(data, TagMismatchError, "block 2")  # wrong index in the AAD


def test_append_bytes_after_partial_last_block(files):
    data = files["main"] + b"\x00" * 100
    check_all_ways(data, ExtraDataError, "block 2", file_length=len(files["main"]))
    check_all_ways(data, TagMismatchError, "block 2")  # misframed last block


def test_empty_block_after_last_block(files):
    data = files["even"] + genuine_block(b"", 2)
    check_all_ways(data, ExtraDataError, "block 2")


# Random access and non-seekable streams ---------------------------------------------------


def test_reader_only_fails_on_touched_tampered_block(files):
    data = flip(files["main"], 8 + 2 * C + 100)
    with ags1.Ags1Reader(io.BytesIO(data), KEY, AAD, name="f") as reader:
        assert reader.read(MIB + 10) == files["main.plain"][: MIB + 10]
        reader.seek(2 * MIB)
        with pytest.raises(TagMismatchError, match="f: block 2"):
            reader.read(1)
        assert reader.blocks_decrypted == 2


class NonSeekable(io.RawIOBase):
    def __init__(self, data: bytes):
        self._inner = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        return self._inner.readinto(buffer)


@pytest.mark.parametrize(
    "make, expected, location, trusted",
    [
        (lambda f: f["main"], None, None, {}),
        (lambda f: flip(f["main"], 8 + C + 40), TagMismatchError, "block 1", {}),
        (lambda f: f["main"][: 8 + 2 * C], TruncatedError, "block 2", {"file_length": "main"}),
        (lambda f: f["main"][: 8 + 2 * C + 3], TruncatedError, "block 2", {}),
        (lambda f: f["even"] + genuine_block(b"x", 2), ExtraDataError, "block 2", {"file_length": "even"}),
        (lambda f: f["main"][:5], TruncatedError, "header", {}),
    ],
)
def test_non_seekable_stream(files, make, expected, location, trusted):
    trusted = {k: len(files[v]) for k, v in trusted.items()}
    source = NonSeekable(make(files))
    if expected is None:
        assert ags1.verify_ags1(source, KEY, AAD, **trusted).plaintext_length == len(files["main.plain"])
        return
    with pytest.raises(expected) as err:
        ags1.verify_ags1(source, KEY, AAD, **trusted)
    assert err.value.location == location
