"""More faults, for the whole-table verifier: edited metadata.json, multi-block AGS1 files, moved
Parquet pages and column chunks, a file of another table, an unencrypted table, broken KMS
factories. Each must give a precise, non-OK status (exit 1), or exit 2 with a JSON error document
when the metadata is unusable; never a traceback, never key bytes.

Two tables are written once (an Avro table with a 3-block AGS1 data file, a Parquet table with
small pages); each test changes real bytes on disk and restores them, or verifies an edited copy
of the metadata.json."""

from __future__ import annotations

import base64
import copy
import io
import json
import uuid
import struct
from pathlib import Path

import pytest

from pyiceberg_crypto.cli.main import main
from pyiceberg_crypto.formats.ags1 import BLOCK_OVERHEAD, HEADER_LENGTH
from pyiceberg_crypto.formats.key_metadata import StandardKeyMetadata
from pyiceberg_crypto.formats.parquet.reader import ParquetFileReader, ParquetKeys
from pyiceberg_crypto.io import LocalFileIO
from pyiceberg_crypto.kms import InMemoryKms
from pyiceberg_crypto.verify import verify_metadata
from pyiceberg_crypto.verify.checks import FileTask, check_file
from pyiceberg_crypto.table.keys import TableKeys
from pyiceberg_crypto.table.metadata import TableMetadata
from pyiceberg_crypto.verify.report import (
    DATA,
    KEY_ERROR,
    LENGTH_MISMATCH,
    MANIFEST,
    MANIFEST_LIST,
    MISSING,
    OK,
    PARTITION_STATISTICS,
    PLAINTEXT,
    STATISTICS,
    TAMPERED,
    TRUNCATED,
    UNVERIFIABLE,
    WRONG_FILE,
)
from pyiceberg_crypto.verify.plan import read_avro
from tests.conftest import CATALOG
from tests.verify.conftest import create_table, local, metadata_location
from tests.verify.test_tamper import finding, flipped, read, replaced

KMS = "tests.verify.kms_factory:session_kms"
BLOCK = 1024 * 1024 + BLOCK_OVERHEAD  # a full AGS1 cipher block as Iceberg writes it


# --- tables ----------------------------------------------------------------------------------


class Table:
    """A table written by Spark: its metadata.json, and every file's key metadata (tests only)."""

    def __init__(self, name: str, location: str, master_keys):
        self.name, self.location = name, location
        self.meta = TableMetadata.parse(read(location), location)
        self.keys = _file_keys(self.meta, master_keys)
        self.secrets = [k.encryption_key for k in self.keys.values()] + list(master_keys.values())
        table_keys = TableKeys(self.meta, InMemoryKms(master_keys))
        self.secrets += [table_keys.kek(e.key_id) for e in table_keys.kek_entries()]
        report = verify_metadata(location, InMemoryKms(master_keys), all_snapshots=True)
        assert report.ok, report.not_ok()
        self.paths: dict[str, list[str]] = {}
        for f in verify_metadata(location, InMemoryKms(master_keys)).files:
            self.paths.setdefault(f.kind, []).append(f.path)

    def doc(self) -> dict:
        return json.loads(read(self.location))


def _file_keys(meta: TableMetadata, master_keys) -> dict[str, StandardKeyMetadata]:
    """Key metadata of every manifest list, manifest and data file of every snapshot."""
    keys = TableKeys(meta, InMemoryKms(master_keys))
    out = {}
    for snapshot in meta.snapshots.values():
        list_key = keys.manifest_list_key(snapshot)
        out[snapshot.manifest_list] = list_key
        _, records = read_avro(FileTask(snapshot.manifest_list, MANIFEST_LIST, "AVRO",
                                        key_metadata=list_key.serialize()), LocalFileIO())
        for record in records:
            out[record["manifest_path"]] = StandardKeyMetadata.parse(record["key_metadata"])
            _, entries = read_avro(FileTask(record["manifest_path"], MANIFEST, "AVRO",
                                            key_metadata=record["key_metadata"]), LocalFileIO())
            for entry in entries:
                out[entry["data_file"]["file_path"]] = StandardKeyMetadata.parse(entry["data_file"]["key_metadata"])
    return out


def _insert(spark, table: str, start: int, stop: int) -> None:
    spark.sql(f"INSERT INTO {table} SELECT /*+ COALESCE(1) */ id, id + 1000000, sha2(cast(id AS string), 256) "
              f"FROM range({start}, {stop})")


COLUMNS = "a bigint, b bigint, s string"


@pytest.fixture(scope="module")
def avro_table(spark, kms_registration, master_keys) -> Table:
    """Avro data files (AGS1): one of ~2.4 MiB (3 blocks), then a small second snapshot."""
    name = create_table(spark, "avro", COLUMNS, properties={"write.format.default": "avro",
                                                             "write.avro.compression-codec": "uncompressed"})
    _insert(spark, name, 0, 30000)
    _insert(spark, name, 30000, 30010)
    return Table(name, metadata_location(spark, name), master_keys)


@pytest.fixture(scope="module")
def parquet_table(spark, kms_registration, master_keys) -> Table:
    """Parquet data files with many small pages, two snapshots; the same rows as ``twin_table``."""
    name = create_table(spark, "pages", COLUMNS, properties=PAGES)
    _insert(spark, name, 0, 2000)
    _insert(spark, name, 2000, 2010)
    return Table(name, metadata_location(spark, name), master_keys)


PAGES = {"write.parquet.page-row-limit": "200", "write.parquet.dict-size-bytes": "1",
         "write.parquet.compression-codec": "uncompressed"}


# --- helpers ---------------------------------------------------------------------------------


def run_cli(capsys, table: Table | None, *args: str) -> tuple[int, dict]:
    """``verify ... --json`` in-process; asserts the output is JSON, has no traceback, no key bytes."""
    code = main(["verify", *args, "--json"])
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    text = captured.out + captured.err
    assert "Traceback" not in text
    for secret in table.secrets if table else []:
        assert secret.hex() not in text and base64.b64encode(secret).decode() not in text
    return code, document


def the_data_file(table: Table) -> str:
    """The biggest data file of the current snapshot."""
    return max(table.paths[DATA], key=lambda p: Path(local(p)).stat().st_size)


def only_failures(document: dict) -> list[tuple[str, str]]:
    return [(f["kind"], f["status"]) for f in document["files"] if f["status"] != OK]


def failed_checks(document: dict) -> dict[str, str]:
    """The table checks that fail (WARN counts as OK: e.g. ``metadata-location`` for the edited copies
    these tests write outside the table's directory)."""
    return {c["name"]: c["status"] for c in document["table"]["checks"] if c["status"] not in (OK, "WARN")}


# --- multi-block AGS1 (Avro data file) ------------------------------------------------------


def _blocks(data: bytes) -> list[bytes]:
    body = data[HEADER_LENGTH:]
    return [body[i:i + BLOCK] for i in range(0, len(body), BLOCK)]


def test_avro_data_file_has_several_blocks(avro_table):
    data = read(the_data_file(avro_table))
    assert data[:4] == b"AGS1" and len(_blocks(data)) >= 3


def test_two_blocks_swapped(capsys, avro_table):
    path = the_data_file(avro_table)
    data = read(path)
    blocks = _blocks(data)
    swapped = data[:HEADER_LENGTH] + blocks[1] + blocks[0] + b"".join(blocks[2:])
    with replaced(path, swapped):
        code, document = run_cli(capsys, avro_table, avro_table.location, "--kms", KMS)
    assert code == 1
    reported = finding(document, path)
    assert (reported["status"], reported["location"]) == (TAMPERED, "block 0")
    assert only_failures(document) == [(DATA, TAMPERED)]


def test_last_block_dropped_at_a_block_boundary(capsys, avro_table):
    path = the_data_file(avro_table)
    data = read(path)
    blocks = _blocks(data)
    with replaced(path, data[:HEADER_LENGTH] + b"".join(blocks[:-1])):
        code, document = run_cli(capsys, avro_table, avro_table.location, "--kms", KMS)
    assert code == 1
    reported = finding(document, path)
    assert reported["status"] == TRUNCATED and reported["size"] == len(data) - len(blocks[-1])
    assert only_failures(document) == [(DATA, TRUNCATED)]


@pytest.mark.parametrize("how", ["in place", "appended"])
def test_a_block_duplicated(capsys, avro_table, how):
    path = the_data_file(avro_table)
    data = read(path)
    blocks = _blocks(data)
    if how == "in place":  # block 0 also at position 1: same length, block 1's AAD index
        changed = data[:HEADER_LENGTH] + blocks[0] + blocks[0] + b"".join(blocks[2:])
        expected = (TAMPERED, "block 1")
    else:  # a full block repeated before the last one: longer than the trusted length
        changed = data[:HEADER_LENGTH] + b"".join(blocks[:-1]) + blocks[-2] + blocks[-1]
        expected = (LENGTH_MISMATCH, None)
    with replaced(path, changed):
        code, document = run_cli(capsys, avro_table, avro_table.location, "--kms", KMS)
    assert code == 1
    reported = finding(document, path)
    assert reported["status"] == expected[0], reported
    if expected[1]:
        assert reported["location"] == expected[1]


@pytest.mark.parametrize("block_size", [2 * 1024 * 1024, 1024 * 1024 + 1, 4096])
def test_block_length_in_the_header_changed(capsys, avro_table, block_size):
    """The AGS1 header is not authenticated; Iceberg reads only 1 MiB blocks, so another block
    length makes the file unreadable for Iceberg: never OK, never a length status."""
    for path in (avro_table.paths[DATA][0], avro_table.paths[MANIFEST][0]):
        data = read(path)
        with replaced(path, data[:4] + struct.pack("<i", block_size) + data[8:]):
            code, document = run_cli(capsys, avro_table, avro_table.location, "--kms", KMS)
        assert code == 1
        reported = finding(document, path)
        assert reported["status"] == TAMPERED, reported
        assert reported["location"] in ("header", "block 0"), reported


# --- Parquet modules moved -------------------------------------------------------------------


def _chunks(table: Table, path: str):
    key = table.keys[path]
    handle = open(local(path), "rb")
    reader = ParquetFileReader(handle, ParquetKeys(footer_key=key.encryption_key, aad_prefix=key.aad_prefix))
    return handle, reader


def _page_spans(table: Table, path: str, column: str) -> list[tuple[int, int]]:
    """(start, end) of each page of ``column``'s first chunk, header included."""
    handle, reader = _chunks(table, path)
    with handle:
        info = next(c for c in reader.column_chunks() if c.path == column)
        starts = [page.offset for page in reader.pages(info)]
        end = reader.chunk_range(info)[1]
    return list(zip(starts, starts[1:] + [end]))


def _chunk_span(table: Table, path: str, column: str) -> tuple[int, int]:
    handle, reader = _chunks(table, path)
    with handle:
        return reader.chunk_range(next(c for c in reader.column_chunks() if c.path == column))


def _swap(data: bytes, first: tuple[int, int], second: tuple[int, int]) -> bytes:
    (a0, a1), (b0, b1) = first, second
    assert a1 <= b0
    return data[:a0] + data[b0:b1] + data[a1:b0] + data[a0:a1] + data[b1:]


def test_two_pages_of_a_column_chunk_swapped(capsys, parquet_table):
    path = the_data_file(parquet_table)
    spans = _page_spans(parquet_table, path, "a")
    assert len(spans) >= 3
    data = read(path)
    with replaced(path, _swap(data, spans[1], spans[2])):
        code, document = run_cli(capsys, parquet_table, parquet_table.location, "--kms", KMS)
    assert code == 1
    reported = finding(document, path)
    assert reported["status"] == TAMPERED
    assert reported["location"].startswith("row group 0, column 'a', page 1"), reported
    assert only_failures(document) == [(DATA, TAMPERED)]


def test_two_column_chunks_swapped(capsys, parquet_table):
    path = the_data_file(parquet_table)
    data = read(path)
    with replaced(path, _swap(data, _chunk_span(parquet_table, path, "a"), _chunk_span(parquet_table, path, "b"))):
        code, document = run_cli(capsys, parquet_table, parquet_table.location, "--kms", KMS)
    assert code == 1
    reported = finding(document, path)
    assert reported["status"] == TAMPERED
    assert reported["location"].startswith("row group 0, column 'a'"), reported


@pytest.mark.parametrize("from_end", [9, 20, 5])  # footer module, FileCryptoMetaData/footer, footer length
def test_footer_byte_flipped(capsys, parquet_table, from_end):
    path = the_data_file(parquet_table)
    data = read(path)
    with replaced(path, flipped(data, len(data) - from_end) if from_end != 5 else
                  data[:-8] + struct.pack("<I", struct.unpack("<I", data[-8:-4])[0] + 2 ** 30) + data[-4:]):
        code, document = run_cli(capsys, parquet_table, parquet_table.location, "--kms", KMS)
    assert code == 1
    reported = finding(document, path)
    assert reported["status"] == TAMPERED, reported
    assert reported["location"] == "footer"


def test_a_data_file_of_another_table_with_the_same_rows(capsys, spark, kms_registration, parquet_table, master_keys):
    """Same rows, same writer: the same size, but another DEK: TAMPERED at the footer (the
    verifier has no key of the other table, so it cannot say WRONG_FILE)."""
    twin = create_table(spark, "twin", COLUMNS, properties=PAGES)
    _insert(spark, twin, 0, 2000)
    twin_meta = TableMetadata.parse(read(metadata_location(spark, twin)), "twin")
    twin_file = next(p for p, k in _file_keys(twin_meta, master_keys).items() if p.endswith(".parquet"))
    path = the_data_file(parquet_table)
    assert len(read(twin_file)) == len(read(path))
    with replaced(path, read(twin_file)):
        code, document = run_cli(capsys, parquet_table, parquet_table.location, "--kms", KMS)
    assert code == 1
    reported = finding(document, path)
    assert (reported["status"], reported["location"]) == (TAMPERED, "footer")
    assert only_failures(document) == [(DATA, TAMPERED)]


# --- edited metadata.json given to the CLI --------------------------------------------------


def verify_edited(capsys, table: Table, tmp_path, edit, *args: str) -> tuple[int, dict]:
    doc = copy.deepcopy(table.doc())
    edit(doc)
    path = tmp_path / "edited.metadata.json"
    path.write_text(json.dumps(doc))
    return run_cli(capsys, table, str(path), "--kms", KMS, *args)


def _kek(doc: dict) -> dict:
    return next(k for k in doc["encryption-keys"] if k.get("encrypted-by-id") == doc["properties"]["encryption.key-id"])


def _current(doc: dict) -> dict:
    return next(s for s in doc["snapshots"] if s["snapshot-id"] == doc["current-snapshot-id"])


def _older(doc: dict) -> dict:
    return next(s for s in doc["snapshots"] if s["snapshot-id"] != doc["current-snapshot-id"])


def _sealed(doc: dict, key_id: str) -> dict:
    return next(k for k in doc["encryption-keys"] if k["key-id"] == key_id)


def test_metadata_edits_that_keep_the_files_ok_fail_a_table_check(capsys, parquet_table, tmp_path):
    cases = {
        "key-id changed": (lambda d: d["properties"].__setitem__("encryption.key-id", "k2"), {"kek": KEY_ERROR}),
        "key-id removed": (lambda d: d["properties"].pop("encryption.key-id"), {"encryption.key-id": PLAINTEXT}),
        "format-version 2": (lambda d: d.__setitem__("format-version", 2), {"format-version": PLAINTEXT}),
    }
    for name, (edit, expected) in cases.items():
        code, document = verify_edited(capsys, parquet_table, tmp_path, edit)
        assert code == 1, name
        assert failed_checks(document) == expected, (name, document["table"]["checks"])


def test_kek_wrapped_by_another_key_or_entry(capsys, parquet_table, tmp_path):
    for target in ("k2", "no-such-key", "sealed entry"):
        def edit(doc, target=target):
            kek = _kek(doc)
            kek["encrypted-by-id"] = _current(doc)["key-id"] if target == "sealed entry" else target
        code, document = verify_edited(capsys, parquet_table, tmp_path, edit)
        assert code == 1, target
        assert failed_checks(document).get("kek") == KEY_ERROR, (target, document["table"]["checks"])
        listed = finding(document, parquet_table.paths[MANIFEST_LIST][0])
        assert listed["status"] == KEY_ERROR, (target, listed)


def test_encryption_keys_entries_removed(capsys, parquet_table, tmp_path):
    def drop_kek(doc):
        kek_id = _kek(doc)["key-id"]
        doc["encryption-keys"] = [k for k in doc["encryption-keys"] if k["key-id"] != kek_id]

    def drop_sealed(doc):
        doc["encryption-keys"] = [k for k in doc["encryption-keys"] if k["key-id"] != _current(doc)["key-id"]]

    for edit, words in ((drop_kek, "not a KEK of the table"), (drop_sealed, "not in encryption-keys")):
        code, document = verify_edited(capsys, parquet_table, tmp_path, edit)
        assert code == 1
        listed = finding(document, parquet_table.paths[MANIFEST_LIST][0])
        assert listed["status"] == KEY_ERROR and words in listed["detail"], listed
        assert [f["kind"] for f in document["files"]] == [MANIFEST_LIST]


def test_snapshot_key_id_of_another_snapshot(capsys, parquet_table, tmp_path):
    """The current snapshot names the older snapshot's sealed key: it opens, but not this list."""
    code, document = verify_edited(capsys, parquet_table, tmp_path,
                                   lambda d: _current(d).__setitem__("key-id", _older(d)["key-id"]))
    assert code == 1
    listed = finding(document, parquet_table.paths[MANIFEST_LIST][0])
    assert listed["status"] in (TAMPERED, WRONG_FILE), listed
    assert "key" in listed["detail"] and _older(parquet_table.doc())["manifest-list"] in listed["detail"], listed
    assert failed_checks(document).get("snapshot-keys") == TAMPERED, document["table"]["checks"]


def test_manifest_list_paths_of_two_snapshots_swapped(capsys, parquet_table, tmp_path):
    def edit(doc):
        current, older = _current(doc), _older(doc)
        current["manifest-list"], older["manifest-list"] = older["manifest-list"], current["manifest-list"]

    code, document = verify_edited(capsys, parquet_table, tmp_path, edit)
    assert code == 1
    older_list = _older(parquet_table.doc())["manifest-list"]
    listed = finding(document, older_list)
    assert listed["status"] in (TAMPERED, WRONG_FILE, LENGTH_MISMATCH, TRUNCATED), listed
    code, document = verify_edited(capsys, parquet_table, tmp_path, edit, "--all-snapshots")
    assert code == 1 and all(f["status"] != OK for f in document["files"] if f["kind"] == MANIFEST_LIST)


def test_current_snapshot_pointing_at_another_snapshots_list_and_key(capsys, parquet_table, tmp_path):
    """Both the path and the key of the older snapshot: every file authenticates, but two
    snapshots share one manifest list, which Iceberg never writes."""
    def edit(doc):
        current, older = _current(doc), _older(doc)
        current["manifest-list"], current["key-id"] = older["manifest-list"], older["key-id"]

    code, document = verify_edited(capsys, parquet_table, tmp_path, edit)
    assert code == 1
    assert failed_checks(document).get("snapshot-keys") == TAMPERED, document["table"]["checks"]


def test_kek_timestamp_changed_or_removed(capsys, parquet_table, tmp_path):
    for value in ("1700000000000", None):
        def edit(doc, value=value):
            props = _kek(doc).setdefault("properties", {})
            if value is None:
                props.pop("KEY_TIMESTAMP", None)
            else:
                props["KEY_TIMESTAMP"] = value
        code, document = verify_edited(capsys, parquet_table, tmp_path, edit)
        assert code == 1
        listed = finding(document, parquet_table.paths[MANIFEST_LIST][0])
        assert listed["status"] == TAMPERED and "KEY_TIMESTAMP" in listed["detail"], listed


def test_encrypted_key_metadata_not_base64_or_truncated(capsys, parquet_table, tmp_path):
    for which in ("kek", "sealed"):
        for value in ("not base64 !!", "QUJD", None, 12345):
            def edit(doc, which=which, value=value):
                entry = _kek(doc) if which == "kek" else _sealed(doc, _current(doc)["key-id"])
                entry["encrypted-key-metadata"] = value if value != "QUJD" else entry["encrypted-key-metadata"][:16]
            code, document = verify_edited(capsys, parquet_table, tmp_path, edit)
            if "error" in document:  # a value of the wrong type: unusable metadata
                assert code == 2 and value in (None, 12345), (which, value, document)
                continue
            assert code == 1, (which, value)
            listed = finding(document, parquet_table.paths[MANIFEST_LIST][0])
            assert listed["status"] in (TAMPERED, KEY_ERROR), (which, value, listed)
            if which == "kek":
                assert failed_checks(document).get("kek") in (TAMPERED, KEY_ERROR)


def test_snapshot_without_key_id(capsys, parquet_table, tmp_path):
    code, document = verify_edited(capsys, parquet_table, tmp_path, lambda d: _current(d).pop("key-id"))
    assert code == 1
    listed = finding(document, parquet_table.paths[MANIFEST_LIST][0])
    assert listed["status"] == UNVERIFIABLE and "key-id" in listed["detail"], listed


def test_statistics_entries_pointing_at_missing_files(capsys, parquet_table, tmp_path):
    def edit(doc):
        snapshot_id = doc["current-snapshot-id"]
        inside = doc["location"] + "/metadata"  # inside the table: outside would be OUTSIDE_TABLE, never looked at
        doc["statistics"] = [{"snapshot-id": snapshot_id, "statistics-path": f"{inside}/gone.stats",
                              "file-size-in-bytes": 100, "file-footer-size-in-bytes": 20, "blob-metadata": []}]
        doc["partition-statistics"] = [{"snapshot-id": snapshot_id, "statistics-path": f"{inside}/gone.parquet",
                                        "file-size-in-bytes": 100}]

    code, document = verify_edited(capsys, parquet_table, tmp_path, edit)
    assert code == 1
    assert sorted(only_failures(document)) == sorted([(STATISTICS, MISSING), (PARTITION_STATISTICS, MISSING)])


@pytest.mark.parametrize("edit", [
    lambda d: _current(d).__setitem__("manifest-list", None),
    lambda d: _current(d).__setitem__("manifest-list", 7),
    lambda d: _kek(d).__setitem__("properties", {"KEY_TIMESTAMP": 5}),
    lambda d: _kek(d).__setitem__("properties", ["x"]),
    lambda d: d.__setitem__("snapshots", {"a": 1}),
    lambda d: d.__setitem__("encryption-keys", [None]),
    lambda d: d.__setitem__("statistics", [{"snapshot-id": 1}]),
    lambda d: d.__setitem__("properties", None),
    lambda d: d.__setitem__("current-snapshot-id", "x"),
], ids=["list-null", "list-int", "timestamp-int", "props-list", "snapshots-dict", "key-null", "stats-partial",
        "properties-null", "current-str"])
def test_malformed_metadata_is_a_usage_error_or_a_finding(capsys, parquet_table, tmp_path, edit):
    code, document = verify_edited(capsys, parquet_table, tmp_path, edit)
    assert code in (1, 2)
    if code == 2:
        assert document["error"]["type"] == "unreadable" and document["error"]["message"]
    else:
        assert document["ok"] is False


# --- an unencrypted table --------------------------------------------------------------------


def test_unencrypted_table_is_plaintext_everywhere(capsys, spark, kms_registration):
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.vdb")
    name = f"{CATALOG}.vdb.plain_{uuid.uuid4().hex[:6]}"
    spark.sql(f"CREATE TABLE {name} ({COLUMNS}) USING iceberg TBLPROPERTIES ('format-version'='3')")
    _insert(spark, name, 0, 10)
    code, document = run_cli(capsys, None, metadata_location(spark, name), "--kms", KMS)
    assert code == 1
    assert failed_checks(document) == {"encryption.key-id": PLAINTEXT}
    kinds = {f["kind"] for f in document["files"]}
    assert kinds == {DATA, MANIFEST, MANIFEST_LIST}
    assert {f["status"] for f in document["files"]} == {PLAINTEXT}


# --- the KMS and the snapshot option ---------------------------------------------------------


def test_kms_factory_failures_exit_2_with_json(capsys, parquet_table):
    for factory, kind in (("raising", "kms"), ("not_a_kms", "usage"), ("none", "usage")):
        code, document = run_cli(capsys, parquet_table, parquet_table.location, "--kms",
                                 f"tests.verify.kms_factory:{factory}")
        assert code == 2 and document["error"]["type"] == kind, (factory, document)
        assert document["files"] == [] and document["ok"] is False


def test_kms_that_refuses_or_returns_garbage(capsys, parquet_table):
    for factory in ("refusing", "garbage"):
        code, document = run_cli(capsys, parquet_table, parquet_table.location, "--kms",
                                 f"tests.verify.kms_factory:{factory}")
        assert code == 1
        assert failed_checks(document) == {"kek": KEY_ERROR}
        assert [(f["kind"], f["status"]) for f in document["files"]] == [(MANIFEST_LIST, KEY_ERROR)]


def test_snapshot_of_an_expired_snapshot(capsys, spark, avro_table, tmp_path):
    expired = _older(avro_table.doc())["snapshot-id"]
    doc = avro_table.doc()
    doc["snapshots"] = [s for s in doc["snapshots"] if s["snapshot-id"] != expired]
    path = tmp_path / "expired.metadata.json"
    path.write_text(json.dumps(doc))
    code, document = run_cli(capsys, avro_table, str(path), "--kms", KMS, "--snapshot", str(expired))
    assert code == 2 and f"snapshot {expired} is not in the table metadata" in document["error"]["message"]
    code, document = run_cli(capsys, avro_table, avro_table.location, "--kms", KMS, "--snapshot", str(expired))
    assert code == 0 and document["table"]["snapshot_ids"] == [expired]


# --- every byte of small files: never OK, never an exception -------------------------------


class _OneFileIO:
    """Serves ``data`` for ``path`` (in memory), to check thousands of variants of one file."""

    def __init__(self, path: str, data: bytes):
        self.path, self.data = path, data

    def open(self, uri: str):
        assert uri == self.path
        return io.BytesIO(self.data)

    def size(self, uri: str) -> int:
        return len(self.data)

    def exists(self, uri: str) -> bool:
        return True


def _tasks_of_the_small_files(table: Table) -> list[FileTask]:
    """The current snapshot's manifest list, its manifests and its smallest data file."""
    small = min(table.paths[DATA], key=lambda p: Path(local(p)).stat().st_size)
    out = []
    for kind, fmt, path in [(MANIFEST_LIST, "AVRO", table.paths[MANIFEST_LIST][0]),
                            *[(MANIFEST, "AVRO", p) for p in table.paths[MANIFEST]],
                            (DATA, "PARQUET" if small.endswith(".parquet") else "AVRO", small)]:
        key = table.keys[path]
        out.append(FileTask(path, kind, fmt, key_metadata=key.serialize(), expected_size=key.file_length or len(read(path))))
    return out


def test_every_single_byte_change_is_caught(parquet_table):
    """A one-byte change (two bit masks) is never OK and never raises. This includes the plaintext
    FileCryptoMetaData, whose STOP bytes Thrift readers take with any high nibble (0x80 passed)."""
    for task in _tasks_of_the_small_files(parquet_table):
        data = read(task.path)
        assert check_file(task, _OneFileIO(task.path, data)).status == OK
        missed, statuses = [], set()
        # Parquet: every byte (plaintext structures between modules); AGS1: the unauthenticated
        # header and the block edges (inside a block, GCM catches any change)
        offsets = range(len(data)) if task.file_format == "PARQUET" else [*range(48), *range(len(data) - 48, len(data))]
        for offset in offsets:
            for mask in (0x01, 0x80):
                changed = data[:offset] + bytes([data[offset] ^ mask]) + data[offset + 1:]
                result = check_file(task, _OneFileIO(task.path, changed))
                statuses.add(result.status)
                if result.status == OK:
                    missed.append((offset, mask))
        assert missed == [], (task.kind, task.path, missed[:20], len(data))
        assert statuses <= {TAMPERED, PLAINTEXT}, (task.kind, statuses)


def test_no_current_snapshot_is_not_ok(capsys, parquet_table, tmp_path):
    """A metadata.json edited to have no current snapshot must not verify as OK with 0 files."""
    for edit in (lambda d: d.__setitem__("current-snapshot-id", -1), lambda d: d.pop("current-snapshot-id")):
        code, document = verify_edited(capsys, parquet_table, tmp_path, edit)
        assert code == 1 and document["files"] == []
        assert failed_checks(document) == {"current-snapshot": UNVERIFIABLE}
    code, document = run_cli(capsys, parquet_table, parquet_table.location, "--kms", KMS, "--snapshot", "-1")
    assert code == 2 and "snapshot -1 is not in the table metadata" in document["error"]["message"]


def test_human_output_names_the_failure_and_no_key_bytes(capsys, parquet_table, tmp_path):
    doc = copy.deepcopy(parquet_table.doc())
    _current(doc)["key-id"] = _older(doc)["key-id"]
    path = tmp_path / "edited.metadata.json"
    path.write_text(json.dumps(doc))
    code = main(["verify", str(path), "--kms", KMS])
    captured = capsys.readouterr()
    assert code == 1
    assert "TAMPERED        snapshot-keys" in captured.out and "the key of another manifest list" in captured.out
    for secret in parquet_table.secrets:
        assert secret.hex() not in captured.out + captured.err
        assert base64.b64encode(secret).decode() not in captured.out + captured.err


def test_spark_tasks_give_the_cli_findings(capsys, spark, avro_table):
    """The new checks also run in Spark tasks (``verify_table``): a changed AGS1 header and a
    dropped last block, on Avro data files."""
    from pyiceberg_crypto.verify import verify_table

    big, small = the_data_file(avro_table), min(avro_table.paths[DATA], key=lambda p: len(read(p)))
    big_data, small_data = read(big), read(small)
    with replaced(big, big_data[:HEADER_LENGTH] + b"".join(_blocks(big_data)[:-1])), \
            replaced(small, small_data[:4] + struct.pack("<i", 4 * 1024 * 1024) + small_data[8:]):
        code, document = run_cli(capsys, avro_table, avro_table.location, "--kms", KMS)
        report = verify_table(spark, avro_table.name)
    assert code == 1
    assert sorted(only_failures(document)) == [(DATA, TAMPERED), (DATA, TRUNCATED)]
    assert report.to_dict()["files"] == document["files"]
