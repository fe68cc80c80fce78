"""Authenticated or nothing: the reader on tampered bytes of a real table, and through a real
Hive metastore (standalone, on loopback) whose ``metadata_hash`` pins the metadata.json."""

from __future__ import annotations

import contextlib
import json
import uuid
from pathlib import Path

import pytest

from pyiceberg_crypto import config
from pyiceberg_crypto.formats.key_metadata import StandardKeyMetadata
from pyiceberg_crypto.formats.parquet import ParquetFileReader, ParquetKeys
from pyiceberg_crypto.formats.parquet.structs import ColumnMetaDataF
from pyiceberg_crypto.kms import InMemoryKms
from pyiceberg_crypto.read import ReadIntegrityError, TableInputError, read_table, scan
from pyiceberg_crypto.table import Limits
from tests.conftest import CATALOG, add_catalog
from tests.read.test_read_vs_spark import MOR, metadata_location


def _local(uri: str) -> Path:
    return Path(uri.removeprefix("file:"))


@contextlib.contextmanager
def tampered(path: Path, edit):
    """``path``'s bytes changed by ``edit(bytes) -> bytes`` for the duration, then restored."""
    original = path.read_bytes()
    path.write_bytes(edit(original))
    try:
        yield
    finally:
        path.write_bytes(original)


def flip(offset: int):
    return lambda data: data[:offset] + bytes([data[offset] ^ 0x01]) + data[offset + 1:]


@pytest.fixture(scope="module")
def table(spark, kms_registration):
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.db")
    name = f"{CATALOG}.db.tamper_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TABLE {name} (id bigint, name string) USING iceberg "
              + config.tblproperties_sql(config.table_properties("k1", extra=MOR)))
    spark.sql(f"INSERT INTO {name} SELECT id, concat('name-', id) FROM range(0, 100)")
    spark.sql(f"INSERT INTO {name} SELECT id, concat('name-', id) FROM range(100, 200)")
    spark.sql(f"DELETE FROM {name} WHERE id % 10 = 0")
    files = {r.file_path: r for r in spark.sql(
        f"SELECT file_path, content, key_metadata FROM {name}.files").collect()}
    manifests = [r[0] for r in spark.sql(f"SELECT path FROM {name}.manifests").collect()]
    return {"name": name, "metadata": metadata_location(spark, name),
            "data": sorted(p for p, r in files.items() if r.content == 0),
            "dv": sorted(p for p, r in files.items() if r.content == 1),
            "keys": {p: bytes(r.key_metadata) for p, r in files.items()}, "manifests": manifests}


@pytest.fixture(scope="module")
def kms(master_keys):
    return InMemoryKms(master_keys)


def test_untampered_table_reads(table, kms):
    assert read_table(table["metadata"], kms).num_rows == 180


def _name_chunk_offset(path: str, key_metadata: bytes) -> int:
    """The file offset of the first page module of column ``name`` (row group 0)."""
    key = StandardKeyMetadata.parse(key_metadata)
    with open(_local(path), "rb") as handle:
        reader = ParquetFileReader(handle, ParquetKeys(footer_key=key.encryption_key, aad_prefix=key.aad_prefix))
        for info in reader.column_chunks():
            if info.path == "name":
                meta = info.meta
                return meta.get(ColumnMetaDataF.DICTIONARY_PAGE_OFFSET) or meta.get(ColumnMetaDataF.DATA_PAGE_OFFSET)
    raise AssertionError("no column 'name'")


def test_a_flipped_page_byte_fails_the_read_naming_file_and_module(table, kms):
    path = table["data"][0]
    offset = _name_chunk_offset(path, table["keys"][path]) + 40
    with tampered(_local(path), flip(offset)):
        with pytest.raises(ReadIntegrityError) as caught:
            read_table(table["metadata"], kms)
        # Projection: the tampered chunk is never read when its column is not asked for.
        assert read_table(table["metadata"], kms, columns=["id"]).num_rows == 180
    err = caught.value
    assert err.file == path and err.status == "TAMPERED"
    assert "column 'name'" in err.location and "page" in err.location


def test_scan_raises_and_nothing_is_returned_silently(table, kms):
    path = table["data"][-1]
    with tampered(_local(path), lambda data: data[:-100]):
        with pytest.raises(ReadIntegrityError) as caught:
            for _ in scan(table["metadata"], kms, max_workers=1):
                pass
    assert caught.value.file == path and caught.value.status == "TRUNCATED"


def test_a_swapped_data_file_is_refused(table, kms):
    first, second = table["data"][:2]
    with tampered(_local(first), lambda _: _local(second).read_bytes()):
        with pytest.raises(ReadIntegrityError) as caught:
            read_table(table["metadata"], kms)
    assert caught.value.file == first and caught.value.status in ("TAMPERED", "LENGTH_MISMATCH", "TRUNCATED")


def test_a_tampered_deletion_vector_fails_the_read(table, kms):
    (puffin,) = table["dv"]
    with tampered(_local(puffin), flip(40)):
        with pytest.raises(ReadIntegrityError) as caught:
            read_table(table["metadata"], kms)
    assert caught.value.file == puffin and "block 0" in str(caught.value)


def test_a_tampered_manifest_fails_the_read(table, kms):
    manifest = table["manifests"][0]
    with tampered(_local(manifest), flip(100)):
        with pytest.raises(ReadIntegrityError) as caught:
            read_table(table["metadata"], kms, columns=["id"])
    assert caught.value.file == manifest and caught.value.status == "TAMPERED"


def test_wrong_master_key_is_a_key_error(table):
    with pytest.raises(ReadIntegrityError) as caught:
        read_table(table["metadata"], InMemoryKms({"k1": bytes(16)}))
    assert caught.value.status == "KEY_ERROR" and "k1" in str(caught.value)


def test_input_errors_are_clear(table, kms, tmp_path):
    with pytest.raises(TableInputError, match="table metadata not found"):
        read_table(str(tmp_path / "nope.metadata.json"), kms)
    with pytest.raises(TableInputError, match="snapshot 42 is not in the table metadata"):
        read_table(table["metadata"], kms, snapshot_id=42)
    with pytest.raises(TableInputError, match="--kms must be MODULE:FACTORY"):
        read_table(table["metadata"], "nonsense")


@pytest.mark.loopback
def test_through_a_standalone_metastore_pinning_the_metadata_hash(spark, kms_registration, kms, hive_metastore,
                                                                  tmp_path_factory):
    catalog = "remote_read"
    add_catalog(spark, catalog, warehouse=tmp_path_factory.mktemp("remote-wh"), kms_name="test",
                metastore_uri=hive_metastore.uri)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.rdb")
    name = f"t_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TABLE {catalog}.rdb.{name} (id bigint, v string) USING iceberg "
              + config.tblproperties_sql(config.table_properties("k1")))
    spark.sql(f"INSERT INTO {catalog}.rdb.{name} VALUES (1, 'a'), (2, 'b')")
    result = read_table(f"rdb.{name}", kms, catalog=hive_metastore.uri)
    assert sorted(result.column("id").to_pylist()) == [1, 2]

    location = _local(metadata_location(spark, f"{catalog}.rdb.{name}"))
    doc = json.loads(location.read_text())
    with tampered(location, lambda data: json.dumps({**doc, "current-snapshot-id": doc["current-snapshot-id"]},
                                                    indent=1).encode()):
        with pytest.raises(ReadIntegrityError, match="metadata_hash") as caught:
            read_table(f"rdb.{name}", kms, catalog=hive_metastore.uri)
    assert caught.value.file == str(metadata_location(spark, f"{catalog}.rdb.{name}"))
    with pytest.raises(TableInputError, match="does not exist"):
        read_table("rdb.missing_table", kms, catalog=hive_metastore.uri)


def test_files_outside_the_table_are_not_read(table, kms, tmp_path):
    doc = json.loads(_local(table["metadata"]).read_text())
    original = doc["location"]
    moved = tmp_path / "00009-moved.metadata.json"
    moved.write_text(json.dumps({**doc, "location": (tmp_path / "elsewhere").as_uri()}))
    with pytest.raises(ReadIntegrityError) as caught:
        read_table(str(moved), kms)
    current = next(s for s in doc["snapshots"] if s["snapshot-id"] == doc["current-snapshot-id"])
    assert caught.value.status == "OUTSIDE_TABLE" and caught.value.file == current["manifest-list"]
    assert read_table(str(moved), kms, limits=Limits(allowed_locations=[original])).num_rows == 180


def test_metadata_json_is_bounded(table, kms):
    with pytest.raises(TableInputError, match="too large"):
        read_table(table["metadata"], kms, limits=Limits(max_metadata_bytes=100))


def test_a_plaintext_file_in_place_of_a_data_file_is_plaintext(table, kms, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    plain = tmp_path / "plain.parquet"
    pq.write_table(pa.table({"id": [1], "name": ["leak"]}), plain)
    path = table["data"][0]
    with tampered(_local(path), lambda _: plain.read_bytes()):
        with pytest.raises(ReadIntegrityError) as caught:
            read_table(table["metadata"], kms)
    assert caught.value.file == path and caught.value.status == "PLAINTEXT"
