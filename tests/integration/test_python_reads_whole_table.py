"""The pure-Python formats compose into a JVM-free walk of a real encrypted table:
master key (Python KMS) -> KEK -> manifest list key metadata -> manifest list (AGS1 + Avro)
-> manifests (AGS1 + Avro) -> data files (PARE) -> decrypted rows equal to Spark's.

This is the path the whole-table verifier will take; here it proves the pieces fit on the bytes
Iceberg 1.11.0 really writes."""

from __future__ import annotations

import base64
import io
import json
import uuid
from pathlib import Path

import fastavro
import pyarrow.parquet as pq
import pytest

from pyiceberg_crypto import config
from pyiceberg_crypto.formats.ags1 import Ags1Reader
from pyiceberg_crypto.formats.manifest_list_key import decrypt_manifest_list_key_metadata
from pyiceberg_crypto.formats.errors import TagMismatchError
from pyiceberg_crypto.formats.key_metadata import StandardKeyMetadata
from pyiceberg_crypto.formats.parquet.decrypt import decrypt_parquet
from pyiceberg_crypto.formats.parquet.reader import ParquetKeys
from pyiceberg_crypto.formats.parquet.verify import verify_parquet
from pyiceberg_crypto.kms import InMemoryKms
from tests.conftest import CATALOG


def _local(uri: str) -> Path:
    return Path(uri.removeprefix("file:"))


def _avro_records(path: Path, key_metadata: StandardKeyMetadata) -> list[dict]:
    reader = Ags1Reader(path, key_metadata.encryption_key, key_metadata.aad_prefix,
                        file_length=key_metadata.file_length, name=path.name)
    with io.BufferedReader(reader) as plain:
        return list(fastavro.reader(plain))


@pytest.fixture(scope="module")
def written_table(spark, kms_registration):
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.db")
    table = f"{CATALOG}.db.walk_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TABLE {table} (id bigint, name string, score double) USING iceberg "
              + config.tblproperties_sql(config.table_properties("k1", data_key_length=32)))
    spark.sql(f"INSERT INTO {table} VALUES (1, 'ada', 1.5), (2, 'grace', 2.5)")
    spark.sql(f"INSERT INTO {table} SELECT id, concat('n', id), id / 2 FROM range(3, 203)")
    metadata_json = spark.sql(
        f"SELECT file FROM {table}.metadata_log_entries ORDER BY timestamp DESC LIMIT 1").first()[0]
    rows = sorted(tuple(r) for r in spark.sql(f"SELECT * FROM {table}").collect())
    return json.loads(_local(metadata_json).read_text()), rows


def test_walk_from_master_key_to_rows_without_a_jvm(written_table, master_keys):
    metadata, spark_rows = written_table
    keys = {entry["key-id"]: entry for entry in metadata["encryption-keys"]}
    snapshot = next(s for s in metadata["snapshots"] if s["snapshot-id"] == metadata["current-snapshot-id"])

    # 1. Manifest list key metadata is sealed by a KEK; the KEK is wrapped by the master key k1.
    sealed = keys[snapshot["key-id"]]
    kek_entry = keys[sealed["encrypted-by-id"]]
    assert kek_entry["encrypted-by-id"] == "k1"
    kek = InMemoryKms(master_keys).unwrap_key(base64.b64decode(kek_entry["encrypted-key-metadata"]), "k1")
    timestamp = kek_entry["properties"]["KEY_TIMESTAMP"]
    list_key = StandardKeyMetadata.parse(
        decrypt_manifest_list_key_metadata(kek, base64.b64decode(sealed["encrypted-key-metadata"]), timestamp))
    with pytest.raises(TagMismatchError):  # the KEK timestamp is authenticated
        decrypt_manifest_list_key_metadata(kek, base64.b64decode(sealed["encrypted-key-metadata"]), timestamp + "1")

    # 2. Manifest list -> manifests -> data files, each opened with the key metadata of its parent.
    manifests = _avro_records(_local(snapshot["manifest-list"]), list_key)
    assert manifests and all(m["key_metadata"] for m in manifests)
    decrypted_rows, verified = [], 0
    for manifest in manifests:
        entries = _avro_records(_local(manifest["manifest_path"]), StandardKeyMetadata.parse(manifest["key_metadata"]))
        for entry in entries:
            data_file = entry["data_file"]
            file_key = StandardKeyMetadata.parse(data_file["key_metadata"])
            assert len(file_key.encryption_key) == 32  # encryption.data-key-length = 32
            path = _local(data_file["file_path"])
            parquet_keys = ParquetKeys(footer_key=file_key.encryption_key, aad_prefix=file_key.aad_prefix)
            with open(path, "rb") as handle:
                report = verify_parquet(handle, parquet_keys, name=path.name)
            assert report.ok and report.encrypted_footer and not report.aad_prefix_stored
            assert report.authenticated["data page"] >= 1
            verified += 1
            out = io.BytesIO()
            with open(path, "rb") as handle:
                decrypt_parquet(handle, out, parquet_keys, name=path.name)
            out.seek(0)
            decrypted_rows += [tuple(r.values()) for r in pq.read_table(out).to_pylist()]
    assert verified >= 2
    assert sorted(decrypted_rows) == spark_rows


def test_the_wrong_master_key_stops_the_walk_at_the_kek(written_table):
    metadata, _ = written_table
    kek_entry = next(e for e in metadata["encryption-keys"] if e.get("encrypted-by-id") == "k1")
    from pyiceberg_crypto.kms import KmsError

    with pytest.raises(KmsError, match="does not authenticate under master key 'k1'"):
        InMemoryKms.with_random_keys("k1").unwrap_key(base64.b64decode(kek_entry["encrypted-key-metadata"]), "k1")
