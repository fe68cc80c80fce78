"""Manifest-list key envelope, against Iceberg's EncryptionUtil / Ciphers.

Iceberg's envelopes are committed (tests/formats/fixtures/java); Iceberg decrypting Python's
envelopes runs in the test JVM (``V``, marked jvm).
"""

from __future__ import annotations

import pytest
from py4j.protocol import Py4JJavaError

from pyiceberg_crypto.formats.manifest_list_key import (
    decrypt_manifest_list_key_metadata,
)
from pyiceberg_crypto.formats.errors import FormatError, TagMismatchError, TruncatedError
from pyiceberg_crypto.formats.key_metadata import StandardKeyMetadata
from pyiceberg_crypto.testing import encrypt_manifest_list_key_metadata
from tests.formats import java_fixtures
from tests.formats.ags1_helpers import java_vectors, random_bytes

TIMESTAMP = "1731489600123"


@pytest.fixture(scope="module")
def V(jvm):
    return java_vectors(jvm)


@pytest.fixture
def key_metadata():
    return StandardKeyMetadata(random_bytes(16), random_bytes(16), 4242).serialize()


def iceberg_envelope(kek_length: int) -> tuple[bytes, bytes, bytes]:
    """(kek, key metadata, envelope) of the committed envelope Iceberg wrote with a KEK of this length."""
    [vector] = [v for v in java_fixtures.manifest_list_keys() if len(v["kek"]) == 2 * kek_length]
    assert vector["timestamp"] == TIMESTAMP
    return bytes.fromhex(vector["kek"]), bytes.fromhex(vector["key_metadata"]), bytes.fromhex(vector["envelope"])


@pytest.mark.parametrize("kek_length", [16, 24, 32])
def test_java_encrypts_python_decrypts(kek_length):
    kek, key_metadata, envelope = iceberg_envelope(kek_length)
    assert len(envelope) == 12 + len(key_metadata) + 16
    assert decrypt_manifest_list_key_metadata(kek, envelope, TIMESTAMP) == key_metadata


@pytest.mark.parametrize("kek_length", [16, 32])
def test_python_encrypts_java_decrypts(V, key_metadata, kek_length):
    kek = random_bytes(kek_length)
    envelope = encrypt_manifest_list_key_metadata(kek, key_metadata, TIMESTAMP)
    assert bytes(V.decryptManifestListKeyMetadata(kek, TIMESTAMP, envelope)) == key_metadata
    with pytest.raises(Py4JJavaError, match="GCM tag check failed"):
        V.decryptManifestListKeyMetadata(kek, TIMESTAMP + "1", envelope)


def test_timestamp_is_authenticated():
    kek, _, envelope = iceberg_envelope(32)
    with pytest.raises(TagMismatchError) as err:
        decrypt_manifest_list_key_metadata(kek, envelope, "1731489600124", file="metadata.json")
    assert err.value.location == "manifest list key metadata" and err.value.file == "metadata.json"


def test_wrong_kek_and_tampering(key_metadata):
    kek = random_bytes(16)
    envelope = encrypt_manifest_list_key_metadata(kek, key_metadata, TIMESTAMP)
    with pytest.raises(TagMismatchError):
        decrypt_manifest_list_key_metadata(random_bytes(16), envelope, TIMESTAMP)
    for pos in (0, 12, len(envelope) - 1):
        tampered = envelope[:pos] + bytes([envelope[pos] ^ 0x80]) + envelope[pos + 1 :]
        with pytest.raises(TagMismatchError):
            decrypt_manifest_list_key_metadata(kek, tampered, TIMESTAMP)
    with pytest.raises(TruncatedError):
        decrypt_manifest_list_key_metadata(kek, envelope[:27], TIMESTAMP)


def test_kek_length_checked(key_metadata):
    with pytest.raises(FormatError, match="key length 8"):
        encrypt_manifest_list_key_metadata(b"k" * 8, key_metadata, TIMESTAMP)
    with pytest.raises(FormatError, match="key length 31"):
        decrypt_manifest_list_key_metadata(b"k" * 31, b"x" * 40, TIMESTAMP)


def test_reencrypt_seal_opens_with_its_kek_and_timestamp_only(key_metadata):
    """keys.reencrypt's sealer (re-sealing manifest-list keys under a fresh KEK) writes what Python's
    opener (and, through the Hive and REST reencrypt tests, Iceberg) reads."""
    from pyiceberg_crypto.keys.reencrypt import seal_manifest_list_key

    kek = random_bytes(16)
    sealed = seal_manifest_list_key(kek, key_metadata, TIMESTAMP)
    assert decrypt_manifest_list_key_metadata(kek, sealed, TIMESTAMP) == key_metadata
    with pytest.raises(TagMismatchError):
        decrypt_manifest_list_key_metadata(kek, sealed, TIMESTAMP + "1")
    with pytest.raises(TagMismatchError):
        decrypt_manifest_list_key_metadata(random_bytes(16), sealed, TIMESTAMP)
