"""``pyiceberg-crypto audit`` against a standalone Hive metastore on loopback (tables written by the
shared Spark session through a catalog on that metastore): no Spark in the command itself, the
JSON report, the page and the textfile, exit statuses 0 / 1 / 2."""

from __future__ import annotations

import json
import uuid

import pytest

from pyiceberg_crypto import config
from pyiceberg_crypto.cli.main import main
from pyiceberg_crypto.testing.ports import closed_port
from tests.conftest import add_catalog
from tests.verify import kms_factory
from tests.audit.test_audit import PageParser, assert_valid

pytestmark = [pytest.mark.loopback, pytest.mark.slow]

KMS = "tests.verify.kms_factory:session_kms"


@pytest.fixture(scope="module")
def remote_lake(spark, kms_registration, master_keys, hive_metastore, tmp_path_factory):
    """Two namespaces on the standalone metastore: one of encrypted tables only, one with a plaintext table too."""
    kms_factory.MASTER_KEYS.clear()
    kms_factory.MASTER_KEYS.update(master_keys)
    catalog = "audit_cli"
    add_catalog(spark, catalog, warehouse=tmp_path_factory.mktemp("audit-cli-wh"), kms_name="test",
                metastore_uri=hive_metastore.uri)
    clean, mixed = f"clean_{uuid.uuid4().hex[:6]}", f"mixed_{uuid.uuid4().hex[:6]}"
    for ns in (clean, mixed):
        spark.sql(f"CREATE NAMESPACE {catalog}.{ns}")
    encrypted = config.tblproperties_sql(config.table_properties("k1"))
    for table in (f"{clean}.a", f"{clean}.b", f"{mixed}.c"):
        spark.sql(f"CREATE TABLE {catalog}.{table} (id bigint) USING iceberg " + encrypted)
        spark.sql(f"INSERT INTO {catalog}.{table} VALUES (1), (2)")
    spark.sql(f"CREATE TABLE {catalog}.{mixed}.plain (id bigint) USING iceberg TBLPROPERTIES ('format-version'='2')")
    spark.sql(f"INSERT INTO {catalog}.{mixed}.plain VALUES (1)")
    return hive_metastore.uri, clean, mixed


def audit(capsys, *argv: str) -> tuple[int, dict | str, str]:
    code = main(["audit", *argv])
    captured = capsys.readouterr()
    out = captured.out
    return code, (json.loads(out) if "--json" in argv else out), captured.err


def test_a_clean_namespace_exits_0_and_writes_the_report_page_and_textfile(remote_lake, capsys, tmp_path):
    uri, clean, _ = remote_lake
    page, textfile, ledgers = tmp_path / "audit.html", tmp_path / "audit.prom", tmp_path / "ledgers"
    ledgers.mkdir()
    code, doc, err = audit(capsys, "--metastore-uri", uri, "--warehouse", "file:/wh", "--kms", KMS,
                           "--namespace", clean, "--state-dir", str(ledgers), "--json", "--html", str(page),
                           "--prometheus", str(textfile))
    assert code == 0, err
    assert_valid(doc)
    assert doc["ok"] is True and doc["run"]["where"] == "local" and doc["metastore"] == uri
    assert [(t["table"], t["state"], t["encrypted"], t["ok"], t["key_id"]) for t in doc["tables"]] == [
        (f"{clean}.a", "OK", True, True, "k1"), (f"{clean}.b", "OK", True, True, "k1")]
    assert all(t["last_verified"]["advanced"] for t in doc["tables"])
    assert sorted(p.name for p in ledgers.iterdir()) == [f"{clean}.a.ledger.json", f"{clean}.b.ledger.json"]
    parsed = PageParser()
    parsed.feed(page.read_text())
    assert parsed.rows == 2 and parsed.external == []
    assert f'pyiceberg_crypto_audit_table_ok{{catalog="{uri}",table="{clean}.a"}} 1' in textfile.read_text()

    first = {t["table"]: t["files"] for t in doc["tables"]}
    assert all(t["last_verified"]["files_verified"] == t["files"] > 0 for t in doc["tables"])

    code, doc, _ = audit(capsys, "--metastore-uri", uri, "--kms", KMS, "--namespace", clean,
                         "--state-dir", str(ledgers), "--json", "--html", str(page))
    assert code == 0 and {t["mode"] for t in doc["tables"]} == {"since"}  # the ledgers: incremental
    # issue 41: nothing new to verify, and the row says so beside what the ledger has verified so far
    assert {t["table"]: (t["files"], t["last_verified"]["files_verified"]) for t in doc["tables"]} == {
        name: (0, files) for name, files in first.items()}
    assert f"0 this run, {first[f'{clean}.a']} so far" in page.read_text()


def test_findings_exit_1_and_the_human_summary_names_the_table(remote_lake, capsys):
    uri, clean, mixed = remote_lake
    code, out, _ = audit(capsys, "--metastore-uri", uri, "--kms", KMS, "--namespace", mixed)
    assert code == 1
    assert f"UNENCRYPTED  {mixed}.plain  PLAINTEXT" in out and "FAILED: 1 of 2 Iceberg table(s)" in out
    code, doc, _ = audit(capsys, "--metastore-uri", uri, "--kms", KMS, "--namespace", mixed, "--namespace", clean,
                         "--json")
    assert code == 1 and len(doc["tables"]) == 4 and doc["summary"]["by_state"] == {"OK": 3, "UNENCRYPTED": 1}


def test_bad_input_exits_2_with_a_clear_error(remote_lake, capsys, tmp_path):
    uri, _, _ = remote_lake
    with closed_port() as port:
        code, doc, err = audit(capsys, "--metastore-uri", f"thrift://127.0.0.1:{port}", "--kms", KMS, "--json")
    assert code == 2 and doc["error"]["type"] == "metastore"
    assert_valid(doc)
    assert err.strip() == (f"pyiceberg-crypto audit: cannot reach the Hive metastore to list its tables: "
                           f"127.0.0.1:{port} (Connection refused)")
    code, _, err = audit(capsys, "--metastore-uri", uri, "--kms", KMS, "--namespace", "no_such_namespace")
    assert code == 2 and "database 'no_such_namespace' does not exist" in err
    code, _, err = audit(capsys, "--metastore-uri", uri, "--kms", KMS, "--state-dir", str(tmp_path / "missing"))
    assert code == 2 and "does not exist: create it" in err
    code, _, err = audit(capsys, "--metastore-uri", "http://nope", "--kms", KMS)
    assert code == 2 and "expected thrift://host:port" in err
