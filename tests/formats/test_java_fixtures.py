"""The committed Java vectors (tests/formats/fixtures/java) are still what Java makes.

The first tests need no JVM: the fixtures hold what ``make_java_vectors.py`` asks Java for (so an
edited list of cases, or of Parquet modes, without a regeneration fails here, in the unit lane).
The ``jvm`` tests regenerate every vector through Iceberg and parquet-java in the test JVM and
compare: byte for byte where Java is deterministic (StandardKeyMetadata, the rows parquet-java
wrote, the geometry of every file); where Java draws nonces, both ways: Java reads what the
fixtures hold, and Python reads what Java writes now.
"""

from __future__ import annotations

import gzip
import io
import json

from pyiceberg_crypto.formats import ags1
from pyiceberg_crypto.formats.manifest_list_key import decrypt_manifest_list_key_metadata
from pyiceberg_crypto.formats.parquet.reader import ParquetKeys
from pyiceberg_crypto.formats.parquet.verify import verify_parquet
from pyiceberg_crypto.testing import decrypt_bytes
from tests.formats import java_fixtures
from tests.formats.fixtures import make_java_vectors as make
from tests.formats.parquet.vectors import MODES, _features, java_read_rows, vector_java_keys

INPUT_FIELDS = ("name", "writer", "key", "aad_prefix", "block_size", "plaintext_label", "plaintext_length")


# --- no JVM: the fixtures hold the cases the script makes -------------------------------------


def test_committed_ags1_streams_are_the_scripts_cases():
    committed = [{field: entry[field] for field in INPUT_FIELDS} for entry in java_fixtures.ags1_index().values()]
    assert committed == make.ags1_descriptions()
    nonce_bytes = sum(e["block_count"] for e in java_fixtures.ags1_index().values()) * java_fixtures.NONCE_LENGTH
    assert (java_fixtures.FIXTURES / "ags1_nonces.bin").stat().st_size == nonce_bytes


def test_every_committed_ags1_stream_rebuilds_to_javas_bytes():
    for name in java_fixtures.ags1_names():
        vector = java_fixtures.ags1(name)  # checks the SHA-256 Java's file had
        assert ags1.parse_header(vector.data[:8]) == vector.block_size


def test_committed_key_metadata_and_envelopes_are_the_scripts_cases():
    vectors = java_fixtures.key_metadata()["vectors"]
    assert [v["file_length"] for v in vectors] == make.KEY_METADATA_LENGTHS * 3
    assert [len(v["kek"]) // 2 for v in java_fixtures.manifest_list_keys()] == [16, 24, 32]


def test_committed_parquet_vectors_are_the_modes(tmp_path):
    vectors = {vector.name: vector for vector in java_fixtures.parquet_vectors(tmp_path)}
    assert sorted(vectors) == sorted(mode.name for mode in MODES)
    for mode in MODES:
        vector = vectors[mode.name]
        assert (vector.algorithm, vector.plaintext_footer, vector.codec) == (mode.algorithm, mode.plaintext_footer, mode.codec)
        assert vector.features == _features(mode) and vector.bloom_filter_columns == frozenset(mode.bloom)
        assert len(vector.rows) == mode.rows and vector.unencrypted_columns == mode.unencrypted()
        assert {c: len(k) * 8 for c, k in vector.column_keys.items()} == dict(mode.column_key_bits)
        assert len(vector.footer_key) * 8 == mode.footer_key_bits


# --- jvm: Java again ---------------------------------------------------------------------------


def test_java_reads_the_committed_ags1_streams_and_python_reads_new_ones(jvm, tmp_path):
    java = jvm.io.pyicebergcrypto.testkit.Ags1Vectors
    for name in java_fixtures.ags1_names():
        vector = java_fixtures.ags1(name)
        aad = vector.aad_prefix
        if vector.writer == "iceberg-stream":
            path, out = tmp_path / f"{name}.ags1", tmp_path / f"{name}.plain"
            path.write_bytes(vector.data)
            assert java.readToFile(str(path), vector.key, aad, str(out)) == len(vector.plaintext), name
            assert out.read_bytes() == vector.plaintext, name
        else:
            assert bytes(java.readWithBlockSize(vector.data, vector.key, aad)) == vector.plaintext, name

    written = make.write_ags1_streams(jvm, tmp_path)
    for name, data in written.items():
        vector = java_fixtures.ags1(name)
        assert len(data) == len(vector.data) and data[:8] == vector.data[:8], name
        assert data != vector.data, f"{name}: Java drew the same nonces twice"
        plaintext = decrypt_bytes(data, vector.key, vector.aad_prefix or b"", length=len(vector.plaintext))
        assert plaintext == vector.plaintext, name

    # the full matrix of framed streams (the committed ones stop at 1000 bytes for blocks <= 16 bytes)
    for block_size in make.FRAMED_BLOCK_SIZES:
        for size in make.FRAMED_SIZES:
            size = min(size, 1000) if block_size == 1 else size  # 28 bytes of overhead per byte
            plaintext, key, aad = java_fixtures.derive(f"full-{block_size}-{size}", size), b"k" * 24, b"a" * 16
            stream = bytes(java.writeWithBlockSize(plaintext, block_size, key, aad))
            assert decrypt_bytes(stream, key, aad, length=size, file_length=len(stream)) == plaintext
            assert ags1.verify_ags1(io.BytesIO(stream), key, aad, size).block_size == block_size


def test_iceberg_key_metadata_is_byte_identical_to_the_committed(jvm):
    assert make.key_metadata_vectors(jvm) == java_fixtures.key_metadata()


def test_java_decrypts_the_committed_envelopes_and_python_its_new_ones(jvm):
    java = jvm.io.pyicebergcrypto.testkit.Ags1Vectors
    committed = java_fixtures.manifest_list_keys()
    for vector in committed:
        kek, envelope = bytes.fromhex(vector["kek"]), bytes.fromhex(vector["envelope"])
        decrypted = bytes(java.decryptManifestListKeyMetadata(kek, vector["timestamp"], envelope))
        assert decrypted.hex() == vector["key_metadata"]
    for new, old in zip(make.manifest_list_key_vectors(jvm)["envelopes"], committed, strict=True):
        assert (new["kek"], new["key_metadata"]) == (old["kek"], old["key_metadata"])
        assert len(new["envelope"]) == len(old["envelope"]) and new["envelope"] != old["envelope"]
        key_metadata = decrypt_manifest_list_key_metadata(bytes.fromhex(new["kek"]), bytes.fromhex(new["envelope"]), new["timestamp"])
        assert key_metadata.hex() == new["key_metadata"]


def test_parquet_java_reads_the_committed_files_and_writes_the_same_again(jvm, tmp_path):
    committed = java_fixtures.parquet_vectors(tmp_path / "committed")
    for vector in committed:
        rows = java_read_rows(jvm, vector.path, tmp_path / f"{vector.name}.java.jsonl", vector_java_keys(jvm, vector))
        assert rows == vector.rows, vector.name

    regenerated = {vector.name: vector for vector in make.make_parquet(jvm, tmp_path / "new")}
    source = java_fixtures.FIXTURES / "parquet"
    for vector in committed:
        new = regenerated[vector.name]
        description = json.loads((tmp_path / "new" / f"{vector.name}.json").read_text())
        assert description == json.loads((source / f"{vector.name}.json").read_text()), vector.name
        # the rows Java wrote now, byte for byte the committed ones
        assert gzip.decompress((tmp_path / "new" / description["rows_file"]).read_bytes()) == vector.rows_path.read_bytes()
        assert new.path.stat().st_size == vector.path.stat().st_size, vector.name  # same layout, new nonces
        with open(new.path, "rb") as handle:
            report = verify_parquet(handle, ParquetKeys(new.footer_key, dict(new.column_keys), new.aad_prefix),
                                    name=str(new.path))
        assert report.ok, (vector.name, report)
