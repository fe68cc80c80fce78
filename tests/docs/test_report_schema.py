"""The verification report's JSON Schema (pyiceberg_crypto/verify/report.schema.json, published in
docs/reference/report.md) against real reports: `pyiceberg-crypto verify --json` on a table Spark
and Iceberg 1.12.0 wrote (clean, every snapshot, --since, with a ledger, tampered, wrong master
key), `verify_table` through Spark, and the error documents of exit status 2."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from pyiceberg_crypto.cli.main import main
from pyiceberg_crypto.verify import verify_table
from pyiceberg_crypto.verify.report import KINDS, STATUSES, WARN, report_schema
from tests.read.test_read_integrity import flip, tampered
from tests.verify import kms_factory
from tests.verify.conftest import create_table, local, metadata_location

KMS = "tests.verify.kms_factory:session_kms"
MOR = {"write.delete.mode": "merge-on-read"}
SCHEMA = report_schema()
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


def assert_valid(document: dict) -> None:
    errors = sorted(VALIDATOR.iter_errors(document), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors[:10])


@pytest.fixture(scope="module")
def table(spark, kms_registration, master_keys):
    """Two snapshots and a DELETE that writes a deletion vector (format version 3)."""
    kms_factory.MASTER_KEYS.clear()
    kms_factory.MASTER_KEYS.update(master_keys)
    name = create_table(spark, "schema", properties=MOR)
    spark.sql(f"INSERT INTO {name} SELECT id, cast(id AS string), 1 FROM range(0, 20)")
    spark.sql(f"INSERT INTO {name} VALUES (100, 'x', 2)")
    spark.sql(f"DELETE FROM {name} WHERE id = 3")
    return name


def verify_json(capsys, *argv: str) -> tuple[int, dict]:
    code = main(["verify", *argv, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def test_the_schema_is_a_valid_2020_12_schema_and_names_the_codes_statuses_and_kinds():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    defs = SCHEMA["$defs"]
    assert tuple(defs["kind"]["enum"]) == KINDS
    assert tuple(defs["file_status"]["enum"]) == STATUSES
    assert set(defs["check_status"]["enum"]) == {*STATUSES, WARN}


def test_clean_reports_every_mode(spark, table, capsys, tmp_path):
    location = metadata_location(spark, table)
    code, current = verify_json(capsys, location, "--kms", KMS)
    assert code == 0 and current["ok"] and current["table"]["mode"] == "current"
    kinds = {f["kind"] for f in current["files"]}
    assert {"data", "deletion-vector", "manifest", "manifest-list"} <= kinds
    assert_valid(current)

    code, everything = verify_json(capsys, location, "--kms", KMS, "--all-snapshots")
    assert code == 0 and everything["table"]["mode"] == "all" and len(everything["table"]["snapshot_ids"]) == 3
    assert_valid(everything)

    first = min(everything["table"]["snapshot_ids"])
    code, since = verify_json(capsys, location, "--kms", KMS, "--since", str(first))
    assert code == 0 and since["table"]["scope"]["since_snapshot_id"] == first
    assert_valid(since)

    ledger = tmp_path / "ledger.json"
    code, full = verify_json(capsys, location, "--kms", KMS, "--state", str(ledger))
    assert code == 0 and full["ledger"]["advanced"] and full["ledger"]["previous"] is None
    assert_valid(full)
    spark.sql(f"INSERT INTO {table} VALUES (101, 'y', 2)")
    code, incremental = verify_json(capsys, metadata_location(spark, table), "--kms", KMS, "--state", str(ledger))
    assert code == 0 and incremental["table"]["mode"] == "since" and incremental["ledger"]["previous"]["snapshot_id"]
    assert_valid(incremental)


def test_verify_table_through_spark(spark, table):
    document = verify_table(spark, table).to_dict()
    assert document["ok"] and any(c["name"] == "metastore" for c in document["table"]["checks"])
    assert_valid(document)


def test_reports_that_are_not_ok(spark, table, capsys):
    location = metadata_location(spark, table)
    code, wrong_key = verify_json(capsys, location, "--kms", "tests.verify.kms_factory:wrong_master_key")
    assert code == 1 and any(c["status"] == "KEY_ERROR" for c in wrong_key["table"]["checks"])
    assert_valid(wrong_key)

    data = sorted(Path(local(location)).parent.parent.glob("data/**/*.parquet"))[0]
    with tampered(data, flip(data.stat().st_size // 2)):
        code, report = verify_json(capsys, location, "--kms", KMS)
    bad = [f for f in report["files"] if f["status"] != "OK"]
    assert code == 1 and not report["ok"] and bad and bad[0]["status"] == "TAMPERED" and bad[0]["location"]
    assert report["summary"]["by_status"]["TAMPERED"] >= 1
    assert_valid(report)


def test_error_documents(spark, table, capsys, tmp_path):
    location = metadata_location(spark, table)
    corrupt = tmp_path / "corrupt-ledger.json"
    corrupt.write_text("{not json")
    cases = {
        "unreadable": [str(tmp_path / "00009-missing.metadata.json"), "--kms", KMS],
        "usage": [location, "--kms", "no.such.module:factory"],
        "kms": [location, "--kms", "tests.verify.kms_factory:raising"],
        "ledger": [location, "--kms", KMS, "--state", str(corrupt)],
    }
    for kind, argv in cases.items():
        code, document = verify_json(capsys, *argv)
        assert code == 2 and document["error"]["type"] == kind, (kind, document)
        assert_valid(document)


def test_the_schema_rejects_what_is_not_a_report(spark, table, capsys):
    """Validation is not vacuous: a report with an unknown status, a missing field or an extra one fails."""
    _, document = verify_json(capsys, metadata_location(spark, table), "--kms", KMS)
    unknown_status = json.loads(json.dumps(document))
    unknown_status["files"][0]["status"] = "FINE"
    missing = json.loads(json.dumps(document))
    del missing["summary"]["by_kind"]
    extra = json.loads(json.dumps(document))
    extra["files"][0]["dek"] = "00" * 32
    error_with_files = {"ok": False, "version": 1, "error": {"type": "usage", "message": "x"},
                        "table": None, "summary": None, "files": [document["files"][0]]}
    for broken in (unknown_status, missing, extra, error_with_files):
        assert not VALIDATOR.is_valid(broken)


def test_the_schema_is_package_data():
    """The wheel carries the schema: it is declared as package data and in MANIFEST.in (sdist)."""
    import tomllib

    root = Path(__file__).resolve().parents[2]
    package_data = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "report.schema.json" in package_data["pyiceberg_crypto.verify"]
    assert "include pyiceberg_crypto/verify/report.schema.json" in (root / "MANIFEST.in").read_text()
