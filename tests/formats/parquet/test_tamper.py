"""Tamper matrix: every kind of change to an encrypted Parquet file is caught, with a precise
error type and location (row group, column, page ordinal, module type)."""

from __future__ import annotations

import pytest

from pyiceberg_crypto.errors import IntegrityError, MalformedError
from pyiceberg_crypto.formats.errors import TagMismatchError
from pyiceberg_crypto.formats.parquet.aad import ModuleType
from pyiceberg_crypto.formats.parquet.errors import AadPrefixMismatchError
from pyiceberg_crypto.formats.parquet.modules import LENGTH_PREFIX, NONCE_LENGTH, module_length
from pyiceberg_crypto.formats.parquet.reader import ParquetFileReader, ParquetKeys
from pyiceberg_crypto.formats.parquet.structs import ColumnChunkF, ColumnMetaDataF, FileCryptoMetaDataF
from pyiceberg_crypto.formats.parquet.thrift import TList, TType, decode_struct, encode_struct
from pyiceberg_crypto.formats.parquet.verify import verify_parquet


def keys_of(vector) -> ParquetKeys:
    return ParquetKeys(vector.footer_key, dict(vector.column_keys), vector.aad_prefix)


def module_map(path, keys):
    """(module type, row group, column path, page) -> file offset of the module's length prefix."""
    data = path.read_bytes()
    found = {}
    with open(path, "rb") as f:
        reader = ParquetFileReader(f, keys)
        for info in reader.column_chunks():
            if not info.encrypted:
                continue
            for page in reader.pages(info):
                dictionary = page.ordinal is None
                header_type = ModuleType.DICTIONARY_PAGE_HEADER if dictionary else ModuleType.DATA_PAGE_HEADER
                page_type = ModuleType.DICTIONARY_PAGE if dictionary else ModuleType.DATA_PAGE
                header_len = LENGTH_PREFIX + module_length(data[page.offset : page.offset + 4])
                found[(header_type, info.row_group, info.path, page.ordinal)] = page.offset
                found[(page_type, info.row_group, info.path, page.ordinal)] = (
                    page.offset + header_len + page.plaintext_levels
                )
            for module_type, field in ((ModuleType.COLUMN_INDEX, ColumnChunkF.COLUMN_INDEX_OFFSET), (ModuleType.OFFSET_INDEX, ColumnChunkF.OFFSET_INDEX_OFFSET)):
                found[(module_type, info.row_group, info.path, None)] = info.chunk.get(field)
            bloom = info.meta.get(ColumnMetaDataF.BLOOM_FILTER_OFFSET)
            if bloom is not None:
                found[(ModuleType.BLOOM_FILTER_HEADER, info.row_group, info.path, None)] = bloom
                bitset = bloom + LENGTH_PREFIX + module_length(data[bloom : bloom + 4])
                found[(ModuleType.BLOOM_FILTER_BITSET, info.row_group, info.path, None)] = bitset
    return found


def verify_bytes(data: bytes, keys: ParquetKeys, tmp_path, name="tampered.parquet"):
    path = tmp_path / name
    path.write_bytes(data)
    with open(path, "rb") as f:
        return verify_parquet(f, keys, name=str(path))


def assert_failure_at(report, cls, module_type, row_group, column, page=None):
    assert report.failures, "tampering went unnoticed"
    err = report.failures[0]
    assert type(err) is cls, err
    assert (err.module.module_type, err.module.row_group, err.module.column_path, err.module.page) == (
        module_type,
        row_group,
        column,
        page,
    ), err
    assert err.file and err.file.endswith(".parquet") and column in str(err)


@pytest.mark.parametrize("mode", ["uniform_gcm", "per_column_gcm", "plaintext_footer_gcm", "uniform_ctr_aes256", "uniform_gcm_aes192_page_v2"])
def test_flip_a_byte_in_each_module_type(mode, parquet_vector_by_name, tmp_path):
    vector = parquet_vector_by_name[mode]
    keys = keys_of(vector)
    original = vector.path.read_bytes()
    modules = module_map(vector.path, keys)
    seen = set()
    for (module_type, rg, column, page), offset in sorted(modules.items(), key=lambda kv: kv[1]):
        if module_type in seen:
            continue
        seen.add(module_type)
        tampered = bytearray(original)
        tampered[offset + LENGTH_PREFIX + NONCE_LENGTH] ^= 0x01  # first ciphertext byte
        report = verify_bytes(bytes(tampered), keys, tmp_path)
        if vector.algorithm == "AES_GCM_CTR_V1" and module_type in (ModuleType.DATA_PAGE, ModuleType.DICTIONARY_PAGE):
            # spec 4.2.2: CTR pages carry no tag; a flipped bit changes the data undetected
            assert not report.failures and report.unauthenticated[module_type.label] > 0
            continue
        assert_failure_at(report, TagMismatchError, module_type, rg, column, page)
    expected = {ModuleType.DATA_PAGE, ModuleType.DATA_PAGE_HEADER, ModuleType.COLUMN_INDEX, ModuleType.OFFSET_INDEX, ModuleType.BLOOM_FILTER_HEADER, ModuleType.BLOOM_FILTER_BITSET}
    assert expected <= seen


@pytest.mark.parametrize("mode", ["uniform_gcm", "plaintext_footer_gcm"])
def test_flip_a_footer_byte(mode, parquet_vector_by_name, tmp_path):
    vector = parquet_vector_by_name[mode]
    data = bytearray(vector.path.read_bytes())
    footer_len = int.from_bytes(data[-8:-4], "little")
    data[len(data) - 8 - footer_len // 2] ^= 0x04
    with pytest.raises(IntegrityError) as info:
        verify_bytes(bytes(data), keys_of(vector), tmp_path)
    assert info.value.module.module_type is ModuleType.FOOTER




def _pages(path, keys):
    """[(row group, column, ordinal, start, end)] of header+page byte spans of data pages."""
    spans = []
    with open(path, "rb") as f:
        reader = ParquetFileReader(f, keys)
        for info in reader.column_chunks():
            if not info.encrypted:
                continue
            starts = [(p.offset, p.ordinal) for p in reader.pages(info)]
            chunk_end = reader.chunk_range(info)[1]
            for i, (start, ordinal) in enumerate(starts):
                end = starts[i + 1][0] if i + 1 < len(starts) else chunk_end
                if ordinal is not None:
                    spans.append((info.row_group, info.path, ordinal, start, end))
    return spans


def _swap(data: bytes, a: tuple[int, int], b: tuple[int, int]) -> bytes:
    (a0, a1), (b0, b1) = sorted([a, b])
    return data[:a0] + data[b0:b1] + data[a1:b0] + data[a0:a1] + data[b1:]


def _find_pair(spans, same):
    for i, x in enumerate(spans):
        for y in spans[i + 1 :]:
            if same(x, y) and x[4] - x[3] == y[4] - y[3]:
                return x, y
    return None


@pytest.mark.parametrize(
    "kind,same",
    [
        ("within a chunk", lambda x, y: x[:2] == y[:2]),
        ("across row groups", lambda x, y: x[1] == y[1] and x[0] != y[0] and x[2] == y[2]),
        ("across columns", lambda x, y: x[1] != y[1] and x[0] == y[0] and x[2] == y[2]),
    ],
)
def test_swapped_pages_are_caught(kind, same, parquet_vector_by_name, tmp_path):
    vector = parquet_vector_by_name["aad_prefix_stored_gcm"]
    keys = keys_of(vector)
    data = vector.path.read_bytes()
    spans = _pages(vector.path, keys)
    pair = _find_pair(spans, same)
    if pair is None:  # different-size pages: swap any two, the first moved page still fails
        pair = next((x, y) for i, x in enumerate(spans) for y in spans[i + 1 :] if same(x, y))
    x, y = pair
    report = verify_bytes(_swap(data, x[3:], y[3:]), keys, tmp_path)
    first = min(x, y, key=lambda s: s[3])
    assert_failure_at(report, TagMismatchError, ModuleType.DATA_PAGE_HEADER, first[0], first[1], first[2])
    if x[4] - x[3] == y[4] - y[3]:  # same size: both moved pages are reported
        assert len(report.failures) == 2


def test_chunk_swapped_between_files_with_the_same_key(jvm, tmp_path):
    """Two files, one key, same rows: aad_file_unique still tells them apart."""
    import os

    key = os.urandom(16)
    paths = []
    for n in range(2):
        path = tmp_path / f"same-key-{n}.parquet"
        spec = jvm.io.pyicebergcrypto.testkit.ParquetVectors.spec(str(path), str(tmp_path / f"rows-{n}.jsonl"))
        spec.footerKey(key).algorithm("AES_GCM_V1").rows(100).rowGroupRows(100).pageRows(50).dictionary(False).write()
        paths.append(path)
    keys = ParquetKeys(key)
    spans = [_pages(p, keys) for p in paths]
    a = next(s for s in spans[0] if s[1] == "id" and s[2] == 0)
    b = next(s for s in spans[1] if s[1] == "id" and s[2] == 0)
    assert a[4] - a[3] == b[4] - b[3] and a[3] == b[3]
    data = bytearray(paths[0].read_bytes())
    data[a[3] : a[4]] = paths[1].read_bytes()[b[3] : b[4]]
    report = verify_bytes(bytes(data), keys, tmp_path)
    assert_failure_at(report, TagMismatchError, ModuleType.DATA_PAGE_HEADER, 0, "id", 0)


def test_wrong_aad_prefix(parquet_vector_by_name, tmp_path):
    hidden = parquet_vector_by_name["aad_prefix_not_stored_gcm"]
    with pytest.raises(TagMismatchError) as info:
        verify_bytes(hidden.path.read_bytes(), ParquetKeys(hidden.footer_key, aad_prefix=b"another file"), tmp_path)
    assert info.value.module.module_type is ModuleType.FOOTER and "AAD prefix" in info.value.reason
    stored = parquet_vector_by_name["aad_prefix_stored_gcm"]
    with pytest.raises(AadPrefixMismatchError):
        verify_bytes(stored.path.read_bytes(), ParquetKeys(stored.footer_key, aad_prefix=b"another file"), tmp_path)


def test_wrong_keys(parquet_vector_by_name, tmp_path):
    vector = parquet_vector_by_name["uniform_gcm"]
    with pytest.raises(TagMismatchError) as info:
        verify_bytes(vector.path.read_bytes(), ParquetKeys(bytes(16)), tmp_path)
    assert info.value.module.module_type is ModuleType.FOOTER
    signed = parquet_vector_by_name["plaintext_footer_gcm"]
    with pytest.raises(TagMismatchError, match="footer signature"):
        verify_bytes(signed.path.read_bytes(), ParquetKeys(bytes(16), dict(signed.column_keys), signed.aad_prefix), tmp_path)
    per_column = parquet_vector_by_name["per_column_gcm"]
    wrong = dict(per_column.column_keys, name=bytes(len(per_column.column_keys["name"])))
    report = verify_bytes(per_column.path.read_bytes(), ParquetKeys(per_column.footer_key, wrong, per_column.aad_prefix), tmp_path)
    assert_failure_at(report, TagMismatchError, ModuleType.COLUMN_META_DATA, 0, "name")
    assert {e.module.column_path for e in report.failures} == {"name"}


def _with_crypto_metadata(data: bytes, edit) -> bytes:
    """``data`` (a PARE file) with its plaintext FileCryptoMetaData decoded, edited and re-encoded,
    and the footer length fixed, so only the edit can make it fail."""
    footer_len = int.from_bytes(data[-8:-4], "little")
    start = len(data) - 8 - footer_len
    crypto, end = decode_struct(data, start)
    edit(crypto)
    block = encode_struct(crypto) + data[end:-8]
    return data[:start] + block + len(block).to_bytes(4, "little") + data[-4:]


@pytest.mark.parametrize("field, value, said", [
    (2, (TType.LIST, TList(TType.BINARY, [b"unique"])), "AesGcmV1.aad_file_unique (field 2) has wire type list, the IDL says binary"),
    (1, (TType.I64, 7), "AesGcmV1.aad_prefix (field 1) has wire type i64, the IDL says binary"),
    (3, (TType.I32, 1), "AesGcmV1.supply_aad_prefix (field 3) has wire type i32, the IDL says bool"),
])
def test_a_field_of_the_wrong_wire_type_is_a_malformed_footer(field, value, said, parquet_vector_by_name, tmp_path):
    """One flipped bit in a field header can turn AesGcmV1's binary aad_file_unique into a list that
    still parses (CI met it in the every-byte test): a precise failure at the footer, not a TypeError."""
    vector = parquet_vector_by_name["uniform_gcm"]

    def edit(crypto):
        crypto.get(FileCryptoMetaDataF.ENCRYPTION_ALGORITHM).get(1).fields[field] = value

    with pytest.raises(MalformedError) as info:
        verify_bytes(_with_crypto_metadata(vector.path.read_bytes(), edit), keys_of(vector), tmp_path)
    assert info.value.module.module_type is ModuleType.FOOTER
    assert said in str(info.value)
    # the same file, re-encoded without an edit, still verifies: the edit alone is what fails
    assert verify_bytes(_with_crypto_metadata(vector.path.read_bytes(), lambda c: None), keys_of(vector), tmp_path).ok
