"""Faults on disk: each is reported on the right file with the right status, and the CLI exits 1.

One encrypted table (partitioned, merge-on-read, a deletion vector) is written once; each test
changes real bytes on disk and restores them afterwards."""

from __future__ import annotations

import base64
import contextlib
import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pyiceberg_crypto.cli.main import main
from pyiceberg_crypto.formats.ags1 import Ags1Reader
from pyiceberg_crypto.formats.key_metadata import StandardKeyMetadata
from pyiceberg_crypto.kms import InMemoryKms
from pyiceberg_crypto.verify import verify_metadata, verify_table
from pyiceberg_crypto.verify.report import (
    DATA,
    DELETION_VECTOR,
    KEY_ERROR,
    LENGTH_MISMATCH,
    MANIFEST,
    MANIFEST_LIST,
    MISSING,
    OK,
    PLAINTEXT,
    STATISTICS,
    TAMPERED,
    TRUNCATED,
    WRONG_FILE,
)
from tests.verify.conftest import create_table, local, metadata_location

KMS = "tests.verify.kms_factory:session_kms"


@pytest.fixture(scope="module")
def victim(spark, kms_registration, master_keys):
    """A table and the clean report of its current snapshot (paths by kind)."""
    table = create_table(spark, "victim", partitioned_by="p",
                         properties={"write.delete.mode": "merge-on-read"})
    for start in (0, 30, 60):
        spark.sql(f"INSERT INTO {table} SELECT id, cast(id AS string), cast(id % 2 AS int) FROM range({start}, {start + 30})")
    spark.sql(f"DELETE FROM {table} WHERE id % 10 = 0")
    location = metadata_location(spark, table)
    report = verify_metadata(location, InMemoryKms(master_keys))
    assert report.ok, report.not_ok()
    paths: dict[str, list[str]] = {}
    for finding in report.files:
        paths.setdefault(finding.kind, []).append(finding.path)
    return table, location, paths


def run_cli(capsys, *args: str) -> tuple[int, dict]:
    code = main(["verify", *args, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def finding(document: dict, path: str) -> dict:
    matches = [f for f in document["files"] if f["path"] == path]
    assert len(matches) == 1, f"{path} not reported once: {document['files']}"
    return matches[0]


def assert_only_failure(capsys, location: str, path: str, status: str) -> dict:
    """The CLI exits 1 and reports ``status`` on ``path`` and on nothing else."""
    code, document = run_cli(capsys, location, "--kms", KMS)
    assert code == 1
    assert document["ok"] is False
    reported = finding(document, path)
    assert reported["status"] == status, reported
    others = [f for f in document["files"] if f["path"] != path and f["status"] != OK]
    assert others == []
    return reported


@contextlib.contextmanager
def replaced(path: str, content: bytes | None):
    """Put ``content`` at ``path`` (None: delete it) and restore the original afterwards."""
    target = Path(local(path))
    original = target.read_bytes()
    try:
        if content is None:
            target.unlink()
        else:
            target.write_bytes(content)
        yield original
    finally:
        target.write_bytes(original)


def flipped(data: bytes, offset: int) -> bytes:
    return data[:offset] + bytes([data[offset] ^ 0x01]) + data[offset + 1:]


def read(path: str) -> bytes:
    return Path(local(path)).read_bytes()


def test_byte_flip_in_a_data_file_names_the_module(capsys, victim):
    _, location, paths = victim
    path = paths[DATA][0]
    data = read(path)
    with replaced(path, flipped(data, len(data) // 2)):
        reported = assert_only_failure(capsys, location, path, TAMPERED)
    assert reported["location"]  # row group / column / page / module, or the footer
    # The middle byte lies in a module's ciphertext (the layout of these small files is fixed), not
    # in a length prefix: the module's GCM tag fails.
    assert "authentication failed" in reported["detail"], reported


def test_byte_flip_in_a_deletion_vector(capsys, victim):
    _, location, paths = victim
    path = paths[DELETION_VECTOR][0]
    data = read(path)
    with replaced(path, flipped(data, 40)):
        reported = assert_only_failure(capsys, location, path, TAMPERED)
    assert reported["location"] == "block 0"


def test_byte_flip_in_a_manifest_stops_the_walk_below_it(capsys, victim):
    _, location, paths = victim
    path = next(p for p in paths[MANIFEST] if "-m0" in p or True)
    data = read(path)
    with replaced(path, flipped(data, 100)):
        code, document = run_cli(capsys, location, "--kms", KMS)
    assert code == 1
    reported = finding(document, path)
    assert (reported["status"], reported["location"]) == (TAMPERED, "block 0")
    assert len([f for f in document["files"] if f["kind"] in (DATA, DELETION_VECTOR)]) < \
        len(paths[DATA]) + len(paths[DELETION_VECTOR])  # files of an untrusted manifest are not listed


def test_byte_flip_in_the_manifest_list(capsys, victim):
    _, location, paths = victim
    path = paths[MANIFEST_LIST][0]
    data = read(path)
    with replaced(path, flipped(data, len(data) - 5)):  # inside the last tag
        code, document = run_cli(capsys, location, "--kms", KMS)
    assert code == 1
    assert finding(document, path)["status"] == TAMPERED
    assert [f["kind"] for f in document["files"]] == [MANIFEST_LIST]


def test_data_file_replaced_by_another_data_file_of_the_table(capsys, victim):
    _, location, paths = victim
    path, other = paths[DATA][0], paths[DATA][1]
    with replaced(path, read(other)):
        reported = assert_only_failure(capsys, location, path, WRONG_FILE)
    assert reported["same_as"] == other


def test_manifest_replaced_by_another_manifest(capsys, victim):
    _, location, paths = victim
    path, other = paths[MANIFEST][0], paths[MANIFEST][1]
    with replaced(path, read(other)):
        code, document = run_cli(capsys, location, "--kms", KMS)
    assert code == 1
    reported = finding(document, path)
    assert (reported["status"], reported["same_as"]) == (WRONG_FILE, other)


def test_plaintext_parquet_in_place_of_a_data_file(capsys, victim, tmp_path):
    _, location, paths = victim
    plain = tmp_path / "plain.parquet"
    pq.write_table(pa.table({"id": [1, 2], "v": ["a", "b"], "p": [0, 0]}), plain)
    path = paths[DATA][0]
    with replaced(path, plain.read_bytes()):
        reported = assert_only_failure(capsys, location, path, PLAINTEXT)
    assert "Parquet" in reported["detail"]


def test_plaintext_manifest(capsys, victim, spark, master_keys):
    """The manifest's own plaintext (decrypted with its real key) in place of the encrypted file."""
    _, location, paths = victim
    path = paths[MANIFEST][0]
    key = _manifest_key(location, path, master_keys)
    with Ags1Reader(local(path), key.encryption_key, key.aad_prefix, file_length=key.file_length) as reader:
        plaintext = reader.read()
    assert plaintext[:4] == b"Obj\x01"
    with replaced(path, plaintext):
        code, document = run_cli(capsys, location, "--kms", KMS)
    assert code == 1
    assert finding(document, path)["status"] == PLAINTEXT


@pytest.mark.parametrize("kind", [DATA, DELETION_VECTOR, MANIFEST])
def test_truncated_files(capsys, victim, kind):
    _, location, paths = victim
    path = paths[kind][0]
    with replaced(path, read(path)[:-20]):
        code, document = run_cli(capsys, location, "--kms", KMS)
    assert code == 1
    reported = finding(document, path)
    assert reported["status"] == TRUNCATED
    assert reported["size"] == reported["expected_size"] - 20


def test_bytes_appended_to_a_data_file(capsys, victim):
    _, location, paths = victim
    path = paths[DATA][0]
    with replaced(path, read(path) + b"\0" * 7):
        reported = assert_only_failure(capsys, location, path, LENGTH_MISMATCH)
    assert reported["size"] == reported["expected_size"] + 7


@pytest.mark.parametrize("kind", [DATA, MANIFEST])
def test_deleted_file(capsys, victim, kind):
    _, location, paths = victim
    path = paths[kind][-1]
    with replaced(path, None):
        code, document = run_cli(capsys, location, "--kms", KMS)
    assert code == 1
    assert finding(document, path)["status"] == MISSING


def test_wrong_master_key_is_a_key_error(capsys, victim):
    _, location, paths = victim
    code, document = run_cli(capsys, location, "--kms", "tests.verify.kms_factory:wrong_master_key")
    assert code == 1
    checks = [c for c in document["table"]["checks"] if c["name"] == "kek"]
    assert checks and all(c["status"] == KEY_ERROR for c in checks)
    assert "does not authenticate under master key 'k1'" in checks[0]["detail"]
    assert finding(document, paths[MANIFEST_LIST][0])["status"] == KEY_ERROR


def test_human_output_lists_each_failure_with_its_reason(capsys, victim):
    _, location, paths = victim
    path = paths[DATA][0]
    with replaced(path, None):
        code = main(["verify", location, "--kms", KMS])
    out = capsys.readouterr().out
    assert code == 1
    assert f"MISSING         data                 {path}" in out
    assert "FAILED: 1 file(s) and 0 table check(s) not OK" in out
    assert "data " in out and "manifest-list" in out  # counts by kind


def test_clean_table_cli_exits_0(capsys, victim):
    _, location, _ = victim
    code, document = run_cli(capsys, location, "--kms", KMS)
    assert code == 0 and document["ok"] is True
    assert document["summary"]["by_status"] == {OK: len(document["files"])}


def test_usage_and_unreadable_input_exit_2_with_json(capsys, victim, tmp_path):
    _, location, _ = victim
    code, document = run_cli(capsys, str(tmp_path / "missing.metadata.json"), "--kms", KMS)
    assert code == 2 and document["ok"] is False and document["error"]["type"] == "unreadable"
    code, document = run_cli(capsys, location, "--kms", "no_such_module:factory")
    assert code == 2 and "cannot import KMS module" in document["error"]["message"]
    code, document = run_cli(capsys, location, "--kms", KMS, "--snapshot", "12345")
    assert code == 2 and "snapshot 12345 is not in the table metadata" in document["error"]["message"]
    not_json = tmp_path / "x.metadata.json"
    not_json.write_text("{nope")
    code, document = run_cli(capsys, str(not_json), "--kms", KMS)
    assert code == 2 and "not JSON" in document["error"]["message"]


def test_plaintext_statistics_file_from_compute_table_stats(capsys, spark, kms_registration):
    """Iceberg 1.12.0 writes Puffin statistics unencrypted (apache/iceberg#17995): a finding."""
    table = create_table(spark, "stats")
    spark.sql(f"INSERT INTO {table} SELECT id, cast(id AS string), 1 FROM range(0, 50)")
    spark.sql(f"CALL local.system.compute_table_stats('{table.split('.', 1)[1]}')")
    location = metadata_location(spark, table)
    code, document = run_cli(capsys, location, "--kms", KMS)
    assert code == 1
    stats = [f for f in document["files"] if f["kind"] == STATISTICS]
    assert len(stats) == 1 and stats[0]["status"] == PLAINTEXT
    assert "NDV" in stats[0]["detail"]
    assert [f for f in document["files"] if f["status"] != OK] == stats


def test_metadata_json_replaced_by_an_older_one_through_verify_table(spark, victim):
    table, location, _ = victim
    older = sorted(Path(local(location)).parent.glob("*.metadata.json"))[-2]
    with replaced(location, older.read_bytes()):
        report = verify_table(spark, table)
    checks = {c.name: c.status for c in report.checks}
    assert checks["metadata-hash"] == TAMPERED
    assert report.ok is False
    assert verify_table(spark, table).ok  # restored


def test_verify_table_gives_the_cli_findings_and_no_key_bytes(capsys, spark, victim, master_keys):
    table, location, paths = victim
    path = paths[DATA][0]
    data = read(path)
    with replaced(path, flipped(data, len(data) // 3)):
        code, document = run_cli(capsys, location, "--kms", KMS)
        report = verify_table(spark, table)
    assert code == 1
    assert report.to_dict()["files"] == document["files"]
    assert [c for c in report.to_dict()["table"]["checks"] if c["name"] not in ("metastore", "metadata-hash")] == \
        document["table"]["checks"]
    text = json.dumps(report.to_dict())
    for secret in _secrets(location, master_keys):
        assert secret.hex() not in text and base64.b64encode(secret).decode() not in text


def _manifest_key(location: str, manifest_path: str, master_keys) -> StandardKeyMetadata:
    from pyiceberg_crypto.io import LocalFileIO
    from pyiceberg_crypto.table.keys import TableKeys
    from pyiceberg_crypto.table.metadata import TableMetadata
    from pyiceberg_crypto.verify.plan import read_avro
    from pyiceberg_crypto.verify.checks import FileTask

    meta = TableMetadata.parse(read(location), location)
    keys = TableKeys(meta, InMemoryKms(master_keys))
    snapshot = meta.select_snapshots()[0]
    list_key = keys.manifest_list_key(snapshot)
    task = FileTask(snapshot.manifest_list, MANIFEST_LIST, "AVRO", key_metadata=list_key.serialize())
    _, records = read_avro(task, LocalFileIO())
    record = next(r for r in records if r["manifest_path"] == manifest_path)
    return StandardKeyMetadata.parse(record["key_metadata"])


def _secrets(location: str, master_keys) -> list[bytes]:
    """Master keys, KEKs and every file's DEK of the current snapshot."""
    from pyiceberg_crypto.io import LocalFileIO
    from pyiceberg_crypto.verify.checks import FileTask
    from pyiceberg_crypto.table.keys import TableKeys
    from pyiceberg_crypto.table.metadata import TableMetadata
    from pyiceberg_crypto.verify.plan import read_avro

    meta = TableMetadata.parse(read(location), location)
    keys = TableKeys(meta, InMemoryKms(master_keys))
    secrets = list(master_keys.values()) + [keys.kek(e.key_id) for e in keys.kek_entries()]
    snapshot = meta.select_snapshots()[0]
    list_key = keys.manifest_list_key(snapshot)
    secrets.append(list_key.encryption_key)
    _, records = read_avro(FileTask(snapshot.manifest_list, MANIFEST_LIST, "AVRO", key_metadata=list_key.serialize()),
                           LocalFileIO())
    for record in records:
        manifest_key = StandardKeyMetadata.parse(record["key_metadata"])
        secrets.append(manifest_key.encryption_key)
        _, entries = read_avro(FileTask(record["manifest_path"], MANIFEST, "AVRO", key_metadata=record["key_metadata"]),
                               LocalFileIO())
        secrets += [StandardKeyMetadata.parse(e["data_file"]["key_metadata"]).encryption_key for e in entries]
    assert len(secrets) > 5
    return secrets


def test_metadata_hash_option_checks_the_file_against_the_metastore_value(capsys, spark, victim):
    from tests.verify.conftest import metastore_entry

    table, location, _ = victim
    recorded = metastore_entry(spark, table)["metadata_hash"]
    code, document = run_cli(capsys, location, "--kms", KMS, "--metadata-hash", recorded)
    assert code == 0 and {"name": "metadata-hash", "status": OK,
                          "detail": "metadata.json matches the metastore's metadata_hash"} in document["table"]["checks"]
    code, document = run_cli(capsys, location, "--kms", KMS, "--metadata-hash", base64.b64encode(b"x" * 32).decode())
    assert code == 1 and [c["status"] for c in document["table"]["checks"] if c["name"] == "metadata-hash"] == [TAMPERED]


def test_manifest_list_replaced_by_an_older_snapshots_list_is_a_replay(capsys, victim):
    _, location, paths = victim
    current = paths[MANIFEST_LIST][0]
    older = sorted(str(p) for p in Path(local(current)).parent.glob("snap-*.avro") if str(p) != local(current))[0]
    with replaced(current, Path(older).read_bytes()):
        code, document = run_cli(capsys, location, "--kms", KMS)
    assert code == 1
    reported = finding(document, current)
    assert reported["status"] == WRONG_FILE and local(reported["same_as"]) == older


def test_progress_bar_on_a_terminal_only(capsys, monkeypatch, victim):
    _, location, _ = victim
    assert main(["verify", location, "--kms", KMS]) == 0
    assert "verifying" not in capsys.readouterr().err  # piped: no bar
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(["verify", location, "--kms", KMS]) == 0
    captured = capsys.readouterr()
    assert "verifying" in captured.err and "verifying" not in captured.out
