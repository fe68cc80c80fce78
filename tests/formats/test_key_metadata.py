"""StandardKeyMetadata: byte-identical to Iceberg's encoder, parsed like Iceberg's decoder.

Iceberg's bytes are committed (tests/formats/fixtures/java: no JVM needed for them); Iceberg's
decoder reading Python's bytes runs in the test JVM (``V``, marked jvm).
"""

from __future__ import annotations

import io

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyiceberg_crypto.errors import FormatError
from pyiceberg_crypto.formats.key_metadata import StandardKeyMetadata, decode_long, encode_long
from tests.formats import java_fixtures
from tests.formats.ags1_helpers import java_vectors, random_bytes

LENGTHS = [None, 0, 1, 63, 64, 1234, 2**31, 2**40 + 5, 2**63 - 1]

# The Avro schema Iceberg derives for StandardKeyMetadata V1 (optional fields: null branch first).
AVRO_SCHEMA = fastavro.parse_schema(
    {
        "type": "record",
        "name": "StandardKeyMetadata",
        "fields": [
            {"name": "encryption_key", "type": "bytes"},
            {"name": "aad_prefix", "type": ["null", "bytes"], "default": None},
            {"name": "file_length", "type": ["null", "long"], "default": None},
        ],
    }
)


@pytest.fixture(scope="module")
def V(jvm):
    return java_vectors(jvm)


ICEBERG_VECTORS = java_fixtures.key_metadata()


@pytest.mark.parametrize(
    "vector", ICEBERG_VECTORS["vectors"], ids=lambda v: f"key{len(v['key']) // 2}-length{v['file_length']}"
)
def test_java_and_python_bytes_are_identical(vector):
    key, aad, file_length = bytes.fromhex(vector["key"]), bytes.fromhex(vector["aad_prefix"]), vector["file_length"]
    java = bytes.fromhex(vector["java"])
    python = StandardKeyMetadata(key, aad, file_length).serialize()
    assert python == java
    parsed = StandardKeyMetadata.parse(java)
    assert (parsed.encryption_key, parsed.aad_prefix, parsed.file_length) == (key, aad, file_length)


@pytest.mark.parametrize("aad", [b"", b"x", bytes(range(256))])
def test_python_serialized_parsed_by_java(V, aad):
    key = random_bytes(16)
    data = StandardKeyMetadata(key, aad, 99).serialize()
    assert bytes(V.keyMetadataKey(data)) == key
    assert bytes(V.keyMetadataAadPrefix(data)) == aad
    assert V.keyMetadataFileLength(data) == 99


def test_null_aad_prefix_parsed_by_java(V):
    data = StandardKeyMetadata(random_bytes(16), None, None).serialize()
    assert V.keyMetadataAadPrefix(data) is None and V.keyMetadataFileLength(data) is None


def test_iceberg_vectors_cover_every_key_length_and_file_length():
    covered = {(len(v["key"]) // 2, v["file_length"]) for v in ICEBERG_VECTORS["vectors"]}
    assert covered == {(key_length, length) for key_length in (16, 24, 32) for length in LENGTHS}


def test_set_file_length_like_iceberg():
    vector = ICEBERG_VECTORS["with_length"]
    km = StandardKeyMetadata.parse(bytes.fromhex(vector["key_metadata"]))
    assert km.file_length is None and vector["file_length"] == 123456789
    assert km.with_file_length(123456789).serialize() == bytes.fromhex(vector["java"])


def test_unknown_version_rejected_by_both(V):
    data = bytearray(StandardKeyMetadata(random_bytes(16), b"a", 1).serialize())
    data[0] = 2
    with pytest.raises(FormatError, match="unsupported key metadata version 2"):
        StandardKeyMetadata.parse(bytes(data))
    # (PySpark converts the Java IllegalArgumentException into its own exception class)
    with pytest.raises(Exception, match="Cannot resolve schema for version: 2"):
        V.keyMetadataKey(bytes(data))


def test_every_truncation_is_rejected():
    data = StandardKeyMetadata(random_bytes(16), b"abc", 2**40).serialize()
    for cut in range(len(data)):
        with pytest.raises(FormatError):
            StandardKeyMetadata.parse(data[:cut])


@pytest.mark.parametrize(
    "data, message",
    [
        (b"", "no version byte"),
        (b"\x01\x03", "negative length"),
        (b"\x01\x02k\x04", "invalid union branch 2"),
        (b"\x01\x02k\x00\x00\x00", "unexpected bytes"),
        (b"\x01\x02k\x00\x02\x01", "negative file_length"),
        (b"\x01" + b"\xff" * 11, "malformed Avro long"),
    ],
)
def test_malformed(data, message):
    with pytest.raises(FormatError, match=message):
        StandardKeyMetadata.parse(data)


def test_repr_hides_key_material():
    km = StandardKeyMetadata(bytes.fromhex("deadbeef" * 4), b"secret-prefix", 5)
    text = repr(km) + str(km)
    assert "dead" not in text and "\\xde" not in text and "secret" not in text
    assert "16 bytes" in text and "file_length=5" in text


@settings(max_examples=200, deadline=None)
@given(
    key=st.binary(min_size=0, max_size=64),
    aad=st.one_of(st.none(), st.binary(max_size=300)),
    length=st.one_of(st.none(), st.integers(0, 2**63 - 1)),
)
def test_round_trip_and_fastavro_agrees(key, aad, length):
    km = StandardKeyMetadata(key, aad, length)
    data = km.serialize()
    assert StandardKeyMetadata.parse(data) == km
    record = fastavro.schemaless_reader(io.BytesIO(data[1:]), AVRO_SCHEMA, None)
    assert record == {"encryption_key": key, "aad_prefix": aad, "file_length": length}


@settings(max_examples=300, deadline=None)
@given(st.integers(-(2**63), 2**63 - 1))
def test_avro_long(value):
    encoded = encode_long(value)
    assert decode_long(encoded, 0, "x") == (value, len(encoded))
    out = io.BytesIO()
    fastavro.schemaless_writer(out, "long", value)
    assert out.getvalue() == encoded
