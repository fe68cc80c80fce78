"""Decrypt-to-plaintext, cross-checked three ways: what parquet-java wrote / reads from the
encrypted file (and Spark for Iceberg's files), PyArrow reading our plaintext output, and
PyArrow's own decryption of the encrypted file where it supports the mode (uniform keys)."""

from __future__ import annotations

import io

import pyarrow.parquet as pq
import pytest

from pyiceberg_crypto.errors import FormatError
from pyiceberg_crypto.formats.parquet.decrypt import decrypt_parquet
from pyiceberg_crypto.formats.parquet.reader import ParquetKeys
from pyiceberg_crypto.formats.parquet.verify import verify_parquet
from tests.formats.parquet.vectors import MODES, java_read_rows, read_with_pyarrow, rows_from_arrow

MODE_NAMES = [mode.name for mode in MODES]


def keys_of(vector) -> ParquetKeys:
    return ParquetKeys(vector.footer_key, dict(vector.column_keys), vector.aad_prefix)


def decrypt_to(src, dst, keys):
    with open(src, "rb") as f, open(dst, "wb") as out:
        return decrypt_parquet(f, out, keys, name=str(src))


@pytest.fixture(params=MODE_NAMES)
def vector(request, parquet_vector_by_name):
    return parquet_vector_by_name[request.param]


def test_decrypted_file_has_the_same_rows_three_ways(vector, tmp_path):
    """Ways 1 and 3 here (no JVM); way 2, parquet-java reading our output, in the next test."""
    out = tmp_path / "plain.parquet"
    result = decrypt_to(vector.path, out, keys_of(vector))
    data = out.read_bytes()
    assert data[:4] == data[-4:] == b"PAR1" and result.output_size == len(data)
    # 1. PyArrow reads our plaintext output: the rows parquet-java wrote
    assert rows_from_arrow(pq.read_table(out)) == vector.rows
    # 3. PyArrow's own decryption of the encrypted file, where it applies. Not for parquet-java's
    #    v2 pages: parquet-java encrypts only their values section, Arrow C++ expects the whole
    #    page encrypted ("Written ciphertext length ... overflows int32"); we read both layouts.
    table = None if "page_v2" in vector.features else read_with_pyarrow(vector)
    if table is not None:
        assert rows_from_arrow(table) == vector.rows
    # the output is an ordinary unencrypted Parquet file, page index and bloom filters included
    with open(out, "rb") as handle:
        report = verify_parquet(handle)
    assert not report.encrypted and report.ok
    metadata = pq.ParquetFile(out).metadata
    assert metadata.num_rows == len(vector.rows) and metadata.num_row_groups >= 1


def test_parquet_java_reads_the_decrypted_file(vector, jvm, tmp_path):
    # 2. parquet-java reads our plaintext output (no decryption properties): the rows it wrote
    out = tmp_path / "plain.parquet"
    decrypt_to(vector.path, out, keys_of(vector))
    assert java_read_rows(jvm, out, tmp_path / "java.jsonl") == vector.rows


def test_page_index_and_bloom_filters_survive(parquet_vector_by_name, tmp_path):
    """PyArrow uses the rewritten page index (offsets) for filtered reads."""
    vector = parquet_vector_by_name["uniform_gcm"]
    out = tmp_path / "plain.parquet"
    decrypt_to(vector.path, out, keys_of(vector))
    wanted = [row for row in vector.rows if row["id"] is not None and 100 <= row["id"] < 120]
    table = pq.read_table(out, filters=[("id", ">=", 100), ("id", "<", 120)])
    assert rows_from_arrow(table) == wanted
    column = pq.ParquetFile(out).metadata.row_group(0).column(0)
    assert column.has_offset_index and column.has_column_index


def test_iceberg_data_files_decrypt_to_what_spark_reads(iceberg_data_files, tmp_path):
    for n, data_file in enumerate(iceberg_data_files):
        out = tmp_path / f"iceberg-{n}.parquet"
        decrypt_to(data_file.path, out, ParquetKeys(data_file.dek, aad_prefix=data_file.aad_prefix))
        rows = rows_from_arrow(pq.read_table(out))
        assert sorted(rows, key=lambda row: row["id"]) == data_file.rows


def test_decrypt_refuses_without_every_key(parquet_vector_by_name):
    vector = parquet_vector_by_name["per_column_gcm"]
    keys = ParquetKeys(vector.footer_key, {}, vector.aad_prefix)
    with open(vector.path, "rb") as f, pytest.raises(FormatError, match="no key for column"):
        decrypt_parquet(f, io.BytesIO(), keys)
