"""Cross-implementation tests: the pure-Python verifier/decryptor on files written by Arrow C++.

Every vector of ``arrow_vectors.ARROW_MODES`` (PyArrow 26, both its KMS ``CryptoFactory`` and its
direct-key API) must authenticate module by module, decrypt to a plaintext Parquet file that
PyArrow and parquet-java read back as the original table, pass the CLI contract, and fail
precisely when tampered with. Expected module counts come from PyArrow's own view of the file
(its metadata, read with its own decryption), not from our reader.

Facts these tests pin down (pyarrow 26.0.1, parquet-java 1.16.0):

* Arrow encrypts a DATA_PAGE_V2 whole (levels inside the page module, so they are authenticated);
  parquet-java keeps v2 levels in plaintext before the module. parquet-java cannot read Arrow's
  encrypted v2 pages (GCM: "GCM tag check failed"; CTR: garbage levels/values) and Arrow cannot
  read parquet-java's (see vectors.py). Our reader accepts both.
* parquet-java reads Arrow's encrypted v1-page files with raw keys (key metadata ignored).
* A 0-row table is written by Arrow as one row group whose chunks hold only a dictionary page,
  or no page at all (``data_page_offset`` 0, ``total_compressed_size`` 0).
"""

from __future__ import annotations

import base64
import io
import json
import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from py4j.protocol import Py4JJavaError
from pyspark.errors.exceptions.captured import CapturedException
from pyarrow.parquet import encryption as pe

from pyiceberg_crypto.errors import FormatError, IntegrityError
from pyiceberg_crypto.cli.main import main
from pyiceberg_crypto.formats.errors import TagMismatchError
from pyiceberg_crypto.formats.key_metadata import StandardKeyMetadata
from pyiceberg_crypto.formats.parquet import ParquetFileReader, ParquetKeys, decrypt_parquet, verify_parquet
from pyiceberg_crypto.formats.parquet.aad import ModuleType
from pyiceberg_crypto.formats.parquet.errors import AadPrefixMismatchError
from pyiceberg_crypto.formats.parquet.modules import LENGTH_PREFIX, NONCE_LENGTH, SIGNATURE_LENGTH, module_length
from pyiceberg_crypto.formats.parquet.structs import ColumnChunkF, PageHeaderF
from tests.formats.parquet.arrow_vectors import (
    ARROW_MODES,
    ArrowVector,
    arrow_table,
    generate_arrow_vectors,
    pyarrow_decryption_properties,
    read_with_pyarrow,
    recording_kms_factory,
)
from tests.formats.parquet.vectors import java_keys, java_read_rows, rows_from_arrow

MODE_NAMES = [mode.name for mode in ARROW_MODES]


@pytest.fixture(scope="session")
def arrow_vectors(tmp_path_factory) -> list[ArrowVector]:
    return generate_arrow_vectors(tmp_path_factory.mktemp("arrow-vectors"))


@pytest.fixture(scope="session")
def arrow_vector_by_name(arrow_vectors) -> dict[str, ArrowVector]:
    return {vector.name: vector for vector in arrow_vectors}


@pytest.fixture(params=MODE_NAMES)
def vector(request, arrow_vector_by_name) -> ArrowVector:
    return arrow_vector_by_name[request.param]


def keys_of(vector: ArrowVector) -> ParquetKeys:
    return ParquetKeys(vector.footer_key, dict(vector.column_keys), vector.aad_prefix)


def key_args(vector: ArrowVector, drop: str | None = None) -> list[str]:
    """CLI key options for ``vector``; ``drop``: "footer", "aad" or a column path to leave out."""
    args = [] if drop == "footer" else ["--key", vector.footer_key.hex()]
    for path, key in vector.column_keys.items():
        if path != drop:
            args += ["--column-key", f"{path}={key.hex()}"]
    if vector.aad_prefix is not None and drop != "aad":
        args += ["--aad-prefix", vector.aad_prefix.hex()]
    return args


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def verify_file(path: Path, keys: ParquetKeys):
    with open(path, "rb") as f:
        return verify_parquet(f, keys, name=str(path))


# ---- expectations from PyArrow's own view of the file ----


def arrow_metadata(vector: ArrowVector) -> pq.FileMetaData:
    return pq.ParquetFile(vector.path, decryption_properties=pyarrow_decryption_properties(vector)).metadata


def expected_counts(vector: ArrowVector) -> dict[str, int]:
    """Module counts implied by PyArrow's metadata and the writer settings (not by our reader)."""
    metadata = arrow_metadata(vector)
    encrypted = set(vector.encrypted_columns)
    own_key = set(vector.column_keys)
    counts = dict.fromkeys(("chunks", "own key chunks", "dictionary", "column index", "offset index", "data pages"), 0)
    for rg in range(metadata.num_row_groups):
        group = metadata.row_group(rg)
        pages = math.ceil(group.num_rows / vector.mode.max_rows_per_page)
        for col in range(group.num_columns):
            chunk = group.column(col)
            if chunk.path_in_schema not in encrypted:
                continue
            counts["chunks"] += 1
            counts["own key chunks"] += chunk.path_in_schema in own_key
            counts["dictionary"] += chunk.has_dictionary_page
            counts["column index"] += chunk.has_column_index
            counts["offset index"] += chunk.has_offset_index
            counts["data pages"] += pages
    return counts


# ---- the vectors are what they claim ----


def test_pyarrow_reads_its_own_vector(vector):
    assert read_with_pyarrow(vector).equals(vector.table)
    data = vector.path.read_bytes()
    magic = b"PAR1" if vector.plaintext_footer else b"PARE"
    assert data[:4] == data[-4:] == magic
    if vector.column_keys:  # the recorded DEKs are distinct per column (one wrap call each)
        assert len({vector.footer_key, *vector.column_keys.values()}) == 1 + len(vector.column_keys)
    assert {len(k) * 8 for k in (vector.footer_key, *vector.column_keys.values())} == {vector.mode.key_bits}


def test_the_modes_cover_what_arrow_can_write(arrow_vectors):
    assert {v.algorithm for v in arrow_vectors} == {"AES_GCM_V1", "AES_GCM_CTR_V1"}
    assert {v.mode.key_bits for v in arrow_vectors} == {128, 192, 256}
    assert {(v.plaintext_footer, v.mode.api) for v in arrow_vectors} == {(a, b) for a in (True, False) for b in ("kms", "direct")}
    assert {v.aad_prefix_stored for v in arrow_vectors if v.aad_prefix} == {True, False}
    features = set().union(*(v.features for v in arrow_vectors))
    assert {"dictionary", "dictionary_fallback", "page_v2", "column_index", "offset_index", "multi_row_group",
            "multi_page", "nested", "optional", "page_checksum", "plaintext_columns", "column_key_metadata"} <= features
    assert any("page_v2" in v.features and v.algorithm == "AES_GCM_V1" for v in arrow_vectors)
    assert any("dictionary" not in v.features for v in arrow_vectors)


def test_dictionary_fallback_vectors_really_fall_back(arrow_vector_by_name):
    """Dictionary page, then RLE_DICTIONARY data pages, then PLAIN data pages in one chunk."""
    for name in ("kms_per_column_gcm_aes192_page_v2", "direct_aad_stored_gcm_aes256"):
        vector = arrow_vector_by_name[name]
        with open(vector.path, "rb") as f:
            reader = ParquetFileReader(f, keys_of(vector))
            info = next(c for c in reader.column_chunks() if c.path == "payload")
            # DataPageHeader.encoding is field 2, DataPageHeaderV2.encoding field 4 (parquet.thrift)
            encodings = []
            for page in reader.pages(info):
                v1, v2 = page.header.get(PageHeaderF.DATA_PAGE_HEADER), page.header.get(PageHeaderF.DATA_PAGE_HEADER_V2)
                if v1 is not None or v2 is not None:
                    encodings.append(v1.get(2) if v1 is not None else v2.get(4))
        assert encodings[0] == 8 and 0 in encodings, encodings  # RLE_DICTIONARY first, PLAIN later


# ---- PyArrow API facts the vectors rely on ----


def test_arrow_cannot_write_bloom_filters_in_encrypted_files(tmp_path):
    """pyarrow 26: no bloom filters with encryption. If this starts passing, add a bloom vector."""
    properties = pe.create_encryption_properties(bytes(16))
    with pytest.raises(OSError, match="not currently supported with bloom filter"):
        pq.write_table(arrow_table(10), tmp_path / "b.parquet", encryption_properties=properties, bloom_filter_options={"id": True})


def test_cryptofactory_ignores_plaintext_footer_with_uniform_encryption(tmp_path):
    ledger: dict = {}
    config = pe.EncryptionConfiguration("mk", uniform_encryption=True, plaintext_footer=True, double_wrapping=False)
    properties = pe.CryptoFactory(recording_kms_factory(ledger)).file_encryption_properties(pe.KmsConnectionConfig(), config)
    path = tmp_path / "u.parquet"
    pq.write_table(arrow_table(5), path, encryption_properties=properties)
    assert path.read_bytes()[:4] == b"PARE"  # encrypted footer after all


# ---- verification ----


def test_verify_authenticates_every_module(vector):
    report = verify_file(vector.path, keys_of(vector))
    assert report.ok and not report.failures and not report.not_verifiable, report
    assert report.encrypted and report.encrypted_footer is not vector.plaintext_footer
    assert report.footer_verified is True and report.algorithm == vector.algorithm
    assert report.aad_prefix_stored is vector.aad_prefix_stored
    assert report.supply_aad_prefix is (vector.aad_prefix is not None and not vector.aad_prefix_stored)
    assert report.num_rows == vector.table.num_rows
    # Arrow encrypts the whole v2 page (levels included): nothing is left unauthenticated
    assert report.v2_pages_with_plaintext_levels == 0
    kinds = {c.path: c.encryption for c in report.columns}
    for path in kinds:
        if path in vector.unencrypted_columns:
            assert kinds[path] == "plaintext"
        else:
            assert kinds[path] == ("column key" if path in vector.column_keys else "footer key"), path
    assert (report.plaintext_pages > 0) is ("plaintext_columns" in vector.features)
    # the CryptoFactory stores key material (its JSON) with every own-key column
    assert {c.path for c in report.columns if c.key_metadata} == set(vector.column_keys)

    want = expected_counts(vector)
    got = report.authenticated
    assert got["footer"] == 1
    # every own-key chunk has its ColumnMetaData module; with a plaintext footer every encrypted one
    assert got.get("column metadata", 0) == (want["chunks"] if vector.plaintext_footer else want["own key chunks"])
    assert got.get("column index", 0) == want["column index"] and got.get("offset index", 0) == want["offset index"]
    assert (want["column index"] > 0) is ("column_index" in vector.features)
    assert got.get("dictionary page header", 0) == want["dictionary"]
    assert (want["dictionary"] > 0) is ("dictionary" in vector.features)
    assert got["data page header"] == want["data pages"]
    pages = got if vector.algorithm == "AES_GCM_V1" else report.unauthenticated  # CTR pages: no tag
    assert pages["data page"] == want["data pages"]
    assert pages.get("dictionary page", 0) == want["dictionary"]
    assert "bloom filter header" not in got  # pyarrow 26 cannot write them encrypted


def test_verify_from_an_in_memory_file_object(arrow_vector_by_name):
    vector = arrow_vector_by_name["kms_per_column_gcm_aes192_page_v2"]
    report = verify_parquet(io.BytesIO(vector.path.read_bytes()), keys_of(vector), name="in-memory")
    assert report.ok and report.file == "in-memory"
    assert report.authenticated == verify_file(vector.path, keys_of(vector)).authenticated


def test_missing_keys_are_never_a_pass(vector):
    if vector.column_keys:
        dropped = sorted(vector.column_keys)[0]
        keys = ParquetKeys(vector.footer_key, {k: v for k, v in vector.column_keys.items() if k != dropped}, vector.aad_prefix)
        report = verify_file(vector.path, keys)
        assert not report.ok and report.not_verifiable == [f"column '{dropped}' (no column key)"]
    if vector.aad_prefix is not None and not vector.aad_prefix_stored:
        with pytest.raises(FormatError, match="AAD prefix"):
            verify_file(vector.path, ParquetKeys(vector.footer_key, dict(vector.column_keys)))


# ---- decryption ----


def test_decrypt_roundtrip_read_by_pyarrow_and_parquet_java(vector, jvm, tmp_path):
    out = tmp_path / "plain.parquet"
    with open(vector.path, "rb") as f, open(out, "wb") as sink:
        result = decrypt_parquet(f, sink, keys_of(vector), name=str(vector.path))
    assert result.was_encrypted and result.algorithm == vector.algorithm
    assert result.authenticated == verify_file(vector.path, keys_of(vector)).authenticated
    # PyArrow reads our plaintext output as the table it was given (Arrow schema metadata kept);
    # page CRCs, when written, are recomputed over the plaintext and PyArrow checks them
    checksums = "page_checksum" in vector.features
    table = pq.read_table(out, page_checksum_verification=checksums)
    assert table.equals(vector.table)
    # parquet-java reads our output too (no decryption properties): the same rows
    assert java_read_rows(jvm, out, tmp_path / "java.jsonl") == rows_from_arrow(vector.table)
    # an ordinary PAR1 file, page index kept
    report = verify_file(out, ParquetKeys())
    assert not report.encrypted and report.ok and out.read_bytes()[:4] == b"PAR1"
    metadata = pq.ParquetFile(out).metadata
    assert metadata.row_group(0).column(0).has_offset_index is ("offset_index" in vector.features)


def test_parquet_java_decrypts_arrow_v1_files_but_not_arrow_v2_pages(vector, jvm, tmp_path):
    """A third implementation agrees with the vectors, except on Arrow's v2 page layout: Arrow
    encrypts the whole v2 page, parquet-java 1.16 expects plaintext levels before the module."""
    keys = java_keys(jvm, vector.footer_key, vector.column_keys, vector.aad_prefix)
    if "page_v2" in vector.features:
        with pytest.raises((Py4JJavaError, CapturedException)):  # PySpark converts some
            java_read_rows(jvm, vector.path, tmp_path / "java.jsonl", keys)
    else:
        assert java_read_rows(jvm, vector.path, tmp_path / "java.jsonl", keys) == rows_from_arrow(vector.table)


# ---- CLI ----


def test_cli_inspect_and_decrypt(vector, capsys, tmp_path):
    code, out, err = run_cli(capsys, "inspect", vector.path, *key_args(vector), "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["ok"] and report["algorithm"] == vector.algorithm
    assert report["authenticated"] == verify_file(vector.path, keys_of(vector)).authenticated
    assert vector.footer_key.hex() not in out + err
    plain = tmp_path / "cli-plain.parquet"
    code, _, err = run_cli(capsys, "decrypt", vector.path, plain, *key_args(vector))
    assert code == 0, err
    assert pq.read_table(plain).equals(vector.table)


def test_cli_exits_2_when_a_key_is_missing(vector, capsys, tmp_path):
    drop = sorted(vector.column_keys)[-1] if vector.column_keys else "footer"
    code, out, err = run_cli(capsys, "inspect", vector.path, *key_args(vector, drop), "--json")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    if vector.column_keys:
        assert f"column '{drop}'" in err and json.loads(out)["not_verifiable"] == [f"column '{drop}' (no column key)"]
    code, _, err = run_cli(capsys, "decrypt", vector.path, tmp_path / "never.parquet", *key_args(vector, drop))
    assert code == 2 and not (tmp_path / "never.parquet").exists(), err
    if vector.aad_prefix is not None and not vector.aad_prefix_stored:
        code, _, err = run_cli(capsys, "inspect", vector.path, *key_args(vector, "aad"))
        assert code == 2 and "AAD prefix" in err


def test_cli_with_iceberg_key_metadata(arrow_vector_by_name, capsys, tmp_path):
    """An Iceberg-shaped file (uniform, AAD prefix not stored) written by Arrow, keys given as
    Iceberg's StandardKeyMetadata (DEK, AAD prefix, trusted file length)."""
    vector = arrow_vector_by_name["direct_aad_not_stored_gcm_aes128"]
    size = vector.path.stat().st_size
    encoded = base64.b64encode(StandardKeyMetadata(vector.footer_key, vector.aad_prefix, size).serialize()).decode()
    assert run_cli(capsys, "inspect", vector.path, "--key-metadata", encoded)[0] == 0
    plain = tmp_path / "plain.parquet"
    assert run_cli(capsys, "decrypt", vector.path, plain, "--key-metadata", encoded)[0] == 0
    assert pq.read_table(plain).equals(vector.table)
    longer = tmp_path / "longer.parquet"
    longer.write_bytes(vector.path.read_bytes() + b"\0")
    code, _, err = run_cli(capsys, "inspect", longer, "--key-metadata", encoded)
    assert code == 1 and "trusted length" in err


def test_console_script_exit_codes(arrow_vector_by_name, tmp_path):
    vector = arrow_vector_by_name["direct_aad_not_stored_gcm_aes128"]
    script = Path(sys.executable).with_name("pyiceberg-crypto")
    ok = subprocess.run([script, "inspect", vector.path, *key_args(vector)], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    tampered = tmp_path / "tampered.parquet"
    tampered.write_bytes(flip(vector.path.read_bytes(), first_module(vector, ModuleType.DATA_PAGE).offset + LENGTH_PREFIX + NONCE_LENGTH))
    bad = subprocess.run([script, "inspect", tampered, *key_args(vector)], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert str(tampered) in bad.stderr and "data page" in bad.stderr


# ---- tampering ----


@dataclass(frozen=True)
class Module:
    """One module: its type and location, and its byte span (start of its length prefix to end;
    for a data page header the span covers header and page, i.e. what a page swap moves)."""

    module_type: ModuleType
    row_group: int
    column: str
    page: int | None
    offset: int
    end: int

    @property
    def where(self) -> tuple:
        return (self.module_type, self.row_group, self.column, self.page)


def locate_modules(vector: ArrowVector) -> list[Module]:
    """Data page headers (span: header + page), data pages and column indexes of encrypted chunks."""
    data = vector.path.read_bytes()
    found = []
    with open(vector.path, "rb") as f:
        reader = ParquetFileReader(f, keys_of(vector))
        for info in reader.column_chunks():
            if not info.encrypted:
                continue
            chunk_end = reader.chunk_range(info)[1]
            pages = list(reader.pages(info))
            for i, page in enumerate(pages):
                if page.ordinal is None:
                    continue
                end = pages[i + 1].offset if i + 1 < len(pages) else chunk_end
                header_len = LENGTH_PREFIX + module_length(data[page.offset : page.offset + LENGTH_PREFIX])
                found.append(Module(ModuleType.DATA_PAGE_HEADER, info.row_group, info.path, page.ordinal, page.offset, end))
                found.append(Module(ModuleType.DATA_PAGE, info.row_group, info.path, page.ordinal, page.offset + header_len, end))
            index = info.chunk.get(ColumnChunkF.COLUMN_INDEX_OFFSET)
            if index is not None:
                length = info.chunk.get(ColumnChunkF.COLUMN_INDEX_LENGTH)
                found.append(Module(ModuleType.COLUMN_INDEX, info.row_group, info.path, None, index, index + length))
    return found


def first_module(vector: ArrowVector, module_type: ModuleType) -> Module:
    return next(m for m in locate_modules(vector) if m.module_type is module_type)


def flip(data: bytes, offset: int) -> bytes:
    tampered = bytearray(data)
    tampered[offset] ^= 0x01
    return bytes(tampered)


def verify_bytes(data: bytes, vector: ArrowVector, tmp_path: Path):
    path = tmp_path / f"tampered-{vector.name}.parquet"
    path.write_bytes(data)
    return path, verify_file(path, keys_of(vector))


def assert_failure_at(report, cls, where: tuple) -> None:
    assert report.failures, "tampering went unnoticed"
    err = report.failures[0]
    assert type(err) is cls, err
    assert (err.module.module_type, err.module.row_group, err.module.column_path, err.module.page) == where, err
    assert err.file and err.file.endswith(".parquet")


TAMPER_MODES = [
    "kms_per_column_gcm_aes192_page_v2",
    "kms_plaintext_footer_per_column_gcm",
    "kms_uniform_ctr_aes256_page_v2",
    "direct_aad_not_stored_gcm_aes128",
    "direct_plaintext_footer_aad_stored_gcm_page_v2",
]


@pytest.mark.parametrize("mode", TAMPER_MODES)
def test_flipped_byte_in_a_page_and_a_column_index(mode, arrow_vector_by_name, tmp_path, capsys):
    vector = arrow_vector_by_name[mode]
    original = vector.path.read_bytes()
    modules = locate_modules(vector)
    targets = [ModuleType.DATA_PAGE_HEADER, ModuleType.DATA_PAGE, ModuleType.COLUMN_INDEX]
    for module_type in targets:
        # the last such module: a later row group, and (v2) a page whose levels are encrypted
        module = [m for m in modules if m.module_type is module_type][-1]
        path, report = verify_bytes(flip(original, module.offset + LENGTH_PREFIX + NONCE_LENGTH), vector, tmp_path)
        if module_type is ModuleType.DATA_PAGE and vector.algorithm == "AES_GCM_CTR_V1":
            # spec 4.2.2: CTR pages carry no tag; the change goes unnoticed by design
            assert not report.failures and report.unauthenticated["data page"] > 0
            continue
        assert_failure_at(report, TagMismatchError, module.where)
        code, _, err = run_cli(capsys, "inspect", path, *key_args(vector))
        assert code == 1 and str(path) in err and module.column in err and module_type.label in err


@pytest.mark.parametrize("mode", TAMPER_MODES)
def test_flipped_footer_byte(mode, arrow_vector_by_name, tmp_path, capsys):
    vector = arrow_vector_by_name[mode]
    data = vector.path.read_bytes()
    # encrypted footer: a byte of the footer module's tag; plaintext footer: of its signature tag
    target = len(data) - 8 - (1 if not vector.plaintext_footer else SIGNATURE_LENGTH - NONCE_LENGTH)
    path = tmp_path / "footer.parquet"
    path.write_bytes(flip(data, target))
    with pytest.raises(TagMismatchError) as info:
        verify_file(path, keys_of(vector))
    assert info.value.module.module_type is ModuleType.FOOTER and info.value.file == str(path)
    code, _, err = run_cli(capsys, "inspect", path, *key_args(vector))
    assert code == 1 and "footer" in err
    # a flipped byte inside the serialized FileMetaData is caught as well (whatever it breaks)
    footer_len = int.from_bytes(data[-8:-4], "little")
    path.write_bytes(flip(data, len(data) - 8 - footer_len // 2))
    with pytest.raises(IntegrityError) as info:
        verify_file(path, keys_of(vector))
    assert info.value.module.module_type is ModuleType.FOOTER


def _swap(data: bytes, a: Module, b: Module) -> bytes:
    (a0, a1), (b0, b1) = sorted([(a.offset, a.end), (b.offset, b.end)])
    return data[:a0] + data[b0:b1] + data[a1:b0] + data[a0:a1] + data[b1:]


@pytest.mark.parametrize(
    "kind,same",
    [
        ("within a chunk", lambda x, y: (x.row_group, x.column) == (y.row_group, y.column)),
        ("across row groups", lambda x, y: x.column == y.column and x.row_group != y.row_group and x.page == y.page),
        ("across columns", lambda x, y: x.column != y.column and x.row_group == y.row_group and x.page == y.page),
    ],
)
@pytest.mark.parametrize("mode", ["direct_aad_stored_gcm_aes256", "kms_per_column_gcm_aes192_page_v2"])
def test_swapped_pages(mode, kind, same, arrow_vector_by_name, tmp_path):
    vector = arrow_vector_by_name[mode]
    pages = [m for m in locate_modules(vector) if m.module_type is ModuleType.DATA_PAGE_HEADER]
    pairs = [(x, y) for i, x in enumerate(pages) for y in pages[i + 1 :] if same(x, y)]
    x, y = next(((x, y) for x, y in pairs if x.end - x.offset == y.end - y.offset), pairs[0])
    _, report = verify_bytes(_swap(vector.path.read_bytes(), x, y), vector, tmp_path)
    assert_failure_at(report, TagMismatchError, min(x, y, key=lambda m: m.offset).where)
    if x.end - x.offset == y.end - y.offset and (x.row_group, x.column) != (y.row_group, y.column):
        # same size, two chunks: both moved pages are reported (a chunk's walk stops at its first failure)
        assert len(report.failures) == 2


def test_wrong_aad_prefix_and_wrong_key(arrow_vector_by_name, tmp_path):
    hidden = arrow_vector_by_name["direct_aad_not_stored_gcm_aes128"]
    with pytest.raises(TagMismatchError) as info:
        verify_file(hidden.path, ParquetKeys(hidden.footer_key, aad_prefix=b"another file"))
    assert info.value.module.module_type is ModuleType.FOOTER
    stored = arrow_vector_by_name["direct_aad_stored_gcm_aes256"]
    with pytest.raises(AadPrefixMismatchError):
        verify_file(stored.path, ParquetKeys(stored.footer_key, aad_prefix=b"another file"))
    per_column = arrow_vector_by_name["kms_plaintext_footer_per_column_gcm"]
    wrong = dict(per_column.column_keys, name=bytes(16))
    report = verify_file(per_column.path, ParquetKeys(per_column.footer_key, wrong))
    assert_failure_at(report, TagMismatchError, (ModuleType.COLUMN_META_DATA, 0, "name", None))
    with pytest.raises(TagMismatchError, match="footer signature"):
        verify_file(per_column.path, ParquetKeys(bytes(16), dict(per_column.column_keys)))


# ---- edge cases ----


@pytest.mark.parametrize("dictionary", [True, False], ids=["dictionary", "no-dictionary"])
@pytest.mark.parametrize("plaintext_footer", [False, True], ids=["encrypted-footer", "plaintext-footer"])
def test_empty_table(dictionary, plaintext_footer, jvm, tmp_path):
    """Arrow writes a 0-row table as one row group whose chunks hold only a dictionary page
    (use_dictionary=True) or no page at all (data_page_offset 0, total_compressed_size 0)."""
    key = bytes(range(16))
    table = arrow_table(0)
    path = tmp_path / "empty.parquet"
    properties = pe.create_encryption_properties(key, plaintext_footer=plaintext_footer)
    pq.write_table(table, path, encryption_properties=properties, use_dictionary=dictionary, write_page_index=True)
    report = verify_file(path, ParquetKeys(key))
    assert report.ok and report.num_rows == 0 and report.row_groups == 1, report.failures
    assert report.authenticated.get("dictionary page", 0) == (9 if dictionary else 0)  # all but 'flag'
    out = tmp_path / "plain.parquet"
    with open(path, "rb") as f, open(out, "wb") as sink:
        decrypt_parquet(f, sink, ParquetKeys(key), name=str(path))
    assert pq.read_table(out).equals(table)
    assert java_read_rows(jvm, out, tmp_path / "java.jsonl") == []
    plain = verify_file(out, ParquetKeys())
    assert plain.ok and not plain.encrypted and plain.row_groups == 1


def test_page_and_row_group_ordinals_beyond_one_byte(tmp_path):
    """AAD ordinals are little-endian int16 (spec 4.4.2): 700 pages in a chunk, 300 row groups."""
    key = bytes(range(32))
    properties = pe.create_encryption_properties(key)
    table = arrow_table(600).select(["id", "name"])
    pages, groups = tmp_path / "pages.parquet", tmp_path / "groups.parquet"
    pq.write_table(table, pages, encryption_properties=properties, max_rows_per_page=1, use_dictionary=False, write_page_index=True)
    pq.write_table(table, groups, encryption_properties=properties, row_group_size=2)
    assert verify_file(pages, ParquetKeys(key)).authenticated["data page"] == 2 * 600
    report = verify_file(groups, ParquetKeys(key))
    assert report.ok and report.row_groups == 300 and report.authenticated["data page"] == 2 * 300
    for path in (pages, groups):
        out = tmp_path / f"plain-{path.name}"
        with open(path, "rb") as f, open(out, "wb") as sink:
            decrypt_parquet(f, sink, ParquetKeys(key))
        assert pq.read_table(out).equals(table)
