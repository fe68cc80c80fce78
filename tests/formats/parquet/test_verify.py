"""The pure-Python verifier authenticates every module of files written by parquet-java and by
Iceberg through Spark, and counts them the way parquet-java's own view of the file says."""

from __future__ import annotations

import pytest

from pyiceberg_crypto.errors import FormatError
from pyiceberg_crypto.formats.parquet.reader import ParquetKeys
from pyiceberg_crypto.formats.parquet.verify import verify_parquet
from tests.formats.parquet.vectors import MODES, java_inspect, vector_java_keys

MODE_NAMES = [mode.name for mode in MODES]


def keys_of(vector) -> ParquetKeys:
    return ParquetKeys(vector.footer_key, dict(vector.column_keys), vector.aad_prefix)


def verify_path(path, keys):
    with open(path, "rb") as handle:
        return verify_parquet(handle, keys, name=str(path))


@pytest.fixture(params=MODE_NAMES)
def vector(request, parquet_vector_by_name):
    return parquet_vector_by_name[request.param]


def test_every_module_authenticates(vector):
    report = verify_path(vector.path, keys_of(vector))
    assert report.ok, (report.failures, report.not_verifiable)
    assert report.encrypted and report.encrypted_footer == (not vector.plaintext_footer)
    assert report.algorithm == vector.algorithm
    assert report.aad_prefix_stored == vector.aad_prefix_stored
    assert report.supply_aad_prefix == (vector.aad_prefix is not None and not vector.aad_prefix_stored)
    counts = report.authenticated
    assert counts["footer"] == 1
    encrypted_chunks = [c for c in report.columns if c.encryption != "plaintext"]
    assert encrypted_chunks
    pages = "unauthenticated" if vector.algorithm == "AES_GCM_CTR_V1" else "authenticated"
    assert getattr(report, pages).get("data page", 0) >= len(encrypted_chunks)
    # One header per data page; the headers are authenticated in both modes (GCM), the pages in GCM only.
    assert counts["data page header"] == getattr(report, pages)["data page"]
    if pages == "unauthenticated":
        assert "data page" not in counts
    assert counts["column index"] == counts["offset index"] == len(encrypted_chunks)
    if "dictionary" in vector.features:
        assert counts["dictionary page header"] > 0
    if vector.bloom_filter_columns - vector.unencrypted_columns:
        assert counts["bloom filter header"] == counts["bloom filter bitset"] > 0
    column_metadata = counts.get("column metadata", 0)
    own_key_chunks = [c for c in encrypted_chunks if c.encryption == "column key"]
    expected = len(encrypted_chunks) if vector.plaintext_footer else len(own_key_chunks)
    assert column_metadata == expected
    assert {c.path for c in report.columns if c.encryption == "column key"} == set(vector.column_keys)
    assert {c.path for c in report.columns if c.encryption == "plaintext"} == vector.unencrypted_columns


def test_counts_match_parquet_java_view(vector, jvm):
    """Pages per chunk as parquet-java counts them equal the page modules we authenticated."""
    layout = java_inspect(jvm, vector.path, vector_java_keys(jvm, vector))
    report = verify_path(vector.path, keys_of(vector))
    assert report.row_groups == len(layout["row_groups"])
    pages = report.authenticated.get("data page", 0) + report.unauthenticated.get("data page", 0)
    java_pages = sum(
        len(column["data_pages"])
        for rg in layout["row_groups"]
        for path, column in rg["columns"].items()
        if column["encrypted"]
    )
    assert pages == java_pages
    java_dicts = sum(bool(c["dictionary_page"]) for rg in layout["row_groups"] for c in rg["columns"].values() if c["encrypted"])
    assert report.authenticated.get("dictionary page header", 0) == java_dicts


def test_missing_column_key_is_not_verifiable(parquet_vector_by_name):
    vector = parquet_vector_by_name["per_column_gcm"]
    dropped = "name"
    keys = ParquetKeys(vector.footer_key, {k: v for k, v in vector.column_keys.items() if k != dropped}, vector.aad_prefix)
    report = verify_path(vector.path, keys)
    assert not report.ok and not report.failures
    assert report.not_verifiable == [f"column '{dropped}' (no column key)"]
    assert all(c.verified == (c.path != dropped) for c in report.columns)


def test_plaintext_footer_without_keys_is_described_not_passed(parquet_vector_by_name):
    vector = parquet_vector_by_name["plaintext_footer_gcm"]
    report = verify_path(vector.path, ParquetKeys(aad_prefix=vector.aad_prefix))
    assert report.footer_verified is None and not report.ok
    assert "footer signature (no footer key)" in report.not_verifiable
    assert sum(report.authenticated.values()) == 0
    assert report.plaintext_pages > 0  # the unencrypted columns are still walked


def test_encrypted_footer_needs_the_footer_key(parquet_vector_by_name):
    with pytest.raises(FormatError):
        verify_path(parquet_vector_by_name["uniform_gcm"].path, ParquetKeys())


def test_unstored_aad_prefix_must_be_supplied(parquet_vector_by_name):
    vector = parquet_vector_by_name["aad_prefix_not_stored_gcm"]
    with pytest.raises(FormatError, match="AAD prefix"):
        verify_path(vector.path, ParquetKeys(vector.footer_key))


def test_iceberg_data_files_verify(iceberg_data_files):
    assert iceberg_data_files
    for data_file in iceberg_data_files:
        report = verify_path(data_file.path, ParquetKeys(data_file.dek, aad_prefix=data_file.aad_prefix))
        assert report.ok, report.failures
        assert report.encrypted_footer and report.algorithm == "AES_GCM_V1"
        assert report.supply_aad_prefix and not report.aad_prefix_stored
        assert report.num_rows == len(data_file.rows)
        assert report.authenticated["data page"] == report.authenticated["data page header"] > 0


def test_verifies_from_any_file_object(parquet_vector_by_name):
    import io

    vector = parquet_vector_by_name["uniform_gcm"]
    report = verify_parquet(io.BytesIO(vector.path.read_bytes()), keys_of(vector), name="in-memory")
    assert report.ok and report.file == "in-memory"


def test_parquet_java_v2_pages_report_their_plaintext_levels(parquet_vector_by_name):
    """parquet-java leaves v2 repetition/definition levels outside the GCM module: the report must
    say so instead of counting those bytes as authenticated."""
    v2 = parquet_vector_by_name["uniform_gcm_aes192_page_v2"]
    report = verify_path(v2.path, keys_of(v2))
    assert report.ok
    assert report.v2_pages_with_plaintext_levels > 0 and report.v2_plaintext_level_bytes > 0
    v1 = parquet_vector_by_name["uniform_gcm"]
    v1_report = verify_path(v1.path, keys_of(v1))
    assert v1_report.v2_pages_with_plaintext_levels == 0 and v1_report.v2_plaintext_level_bytes == 0
