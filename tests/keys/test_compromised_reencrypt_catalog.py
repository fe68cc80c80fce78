"""A master key version marked compromised, seen across a lake and fixed catalog-wide (issue 42):
``keystore compromised`` marks version 1 (it still decrypts), ``audit`` fails naming the tables that
depend on it (reason COMPROMISED_KEY), ``keys where-used --compromised`` lists them and exits 1;
``keys reencrypt CATALOG --all-tables`` re-encrypts them one after another, goes on past a table
that fails (one of its data files moved away) and names it; once the file is back, a second run
finishes (the tag moved to a re-encrypted copy), and the audit is green again. Tables live on a standalone Hive metastore (listed over Thrift),
written by the shared Spark session; tests run in file order, each continuing the story."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from pyiceberg_crypto import config
from pyiceberg_crypto.bridge import register_kms
from pyiceberg_crypto.cli.main import main
from pyiceberg_crypto.kms import KeystoreKms
from tests.conftest import add_catalog
from tests.keys.tables import kms_args
from tests.audit.test_audit import assert_valid

pytestmark = [pytest.mark.loopback, pytest.mark.slow]

KEY, OTHER = "cmp-key", "cmp-other"
ROWS = [1, 2, 3, 10, 11]


@pytest.fixture(scope="module")
def lake(spark, hive_metastore, tmp_path_factory):
    """orders and returns under KEY (returns has a tag), steady under OTHER; KEY rotated, version 1 marked."""
    work = tmp_path_factory.mktemp("compromised")
    keystore = work / "keys.json"
    for argv in (["create", str(keystore)], ["add", str(keystore), KEY], ["add", str(keystore), OTHER]):
        assert main(["keystore", *argv]) == 0
    suffix = uuid.uuid4().hex[:6]
    catalog, ns, kms_name = f"cmp_{suffix}", f"ns_{suffix}", f"cmp-{suffix}"
    registration = register_kms(spark, KeystoreKms(keystore), name=kms_name)
    add_catalog(spark, catalog, warehouse=work / "wh", kms_name=kms_name, metastore_uri=hive_metastore.uri)
    spark.sql(f"CREATE NAMESPACE {catalog}.{ns}")
    for name, key in (("orders", KEY), ("returns", KEY), ("steady", OTHER)):
        table = f"{catalog}.{ns}.{name}"
        spark.sql(f"CREATE TABLE {table} (id bigint) USING iceberg {config.tblproperties_sql(config.table_properties(key))}")
        spark.sql(f"INSERT INTO {table} VALUES (1), (2), (3)")
        spark.sql(f"INSERT INTO {table} VALUES (10), (11)")
    spark.sql(f"ALTER TABLE {catalog}.{ns}.returns CREATE TAG keep")
    assert main(["keystore", "rotate", str(keystore), KEY]) == 0
    assert main(["keystore", "compromised", str(keystore), KEY, "1"]) == 0
    yield {"keystore": keystore, "kms": kms_args(keystore), "catalog": catalog, "ns": ns, "uri": hive_metastore.uri,
           "report": work / "all-tables.json"}
    registration.close()


def audit(lake, capsys, *extra: str) -> tuple[int, dict | str, str]:
    code = main(["audit", "--metastore-uri", lake["uri"], "--namespace", lake["ns"], *lake["kms"], *extra])
    captured = capsys.readouterr()
    return code, (json.loads(captured.out) if "--json" in extra else captured.out), captured.err


def where_used_compromised(lake, capsys) -> tuple[int, dict]:
    code = main(["keys", "where-used", KEY, "--compromised", *lake["kms"], "--metastore-uri", lake["uri"],
                 "--namespace", lake["ns"], "--catalog", lake["catalog"], "--json"])
    return code, json.loads(capsys.readouterr().out)


def reencrypt_all(lake, capsys, *extra: str) -> tuple[int, dict, str]:
    code = main(["keys", "reencrypt", lake["catalog"], "--all-tables", "--compromised-version", f"{KEY}:1",
                 "--metastore-uri", lake["uri"], "--namespace", lake["ns"], *lake["kms"], "--json", *extra])
    captured = capsys.readouterr()
    return code, json.loads(captured.out), captured.err


def rows(spark, table: str) -> list[int]:
    spark.sql(f"REFRESH TABLE {table}")
    return sorted(r[0] for r in spark.table(table).collect())


def test_compromised_version_still_decrypts_and_is_flagged_in_the_keystore(spark, lake, capsys):
    assert KeystoreKms(lake["keystore"]).compromised_versions(KEY) == {"1"}
    assert KeystoreKms(lake["keystore"]).compromised_versions(OTHER) == frozenset()
    assert main(["keystore", "list", str(lake["keystore"]), "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)["keys"][KEY]
    assert [v.get("compromised") is not None for v in listing] == [True, False]
    assert rows(spark, f"{lake['catalog']}.{lake['ns']}.orders") == ROWS  # marking does not stop reads


def test_compromised_audit_exits_1_naming_the_tables_and_where_used_lists_them(lake, capsys):
    ns = lake["ns"]
    code, doc, err = audit(lake, capsys, "--json")
    assert code == 1, err
    assert_valid(doc)
    tables = {t["table"]: t for t in doc["tables"]}
    for name in ("orders", "returns"):
        entry = tables[f"{ns}.{name}"]
        assert (entry["state"], entry["reason"], entry["compromised"]) == ("FAILED", "COMPROMISED_KEY", [f"{KEY}@1"])
        assert "keys reencrypt" in entry["detail"] and f"--compromised-version {KEY}:1" in entry["detail"]
        assert entry["findings"] == [] and set(entry["by_status"]) == {"OK"}  # its files verify: the key is the finding
        assert [k["compromised"] for k in entry["keks"]] == [True]
    assert tables[f"{ns}.steady"]["state"] == "OK" and tables[f"{ns}.steady"]["compromised"] == []
    assert doc["summary"]["compromised_tables"] == 2
    code, text, _ = audit(lake, capsys)
    assert code == 1 and f"{ns}.orders" in text and f"{ns}.returns" in text and "COMPROMISED_KEY" in text
    code, used = where_used_compromised(lake, capsys)
    assert code == 1
    assert sorted(u["table"] for u in used["uses"]) == [f"{lake['catalog']}.{ns}.orders", f"{lake['catalog']}.{ns}.returns"]
    assert all(u["compromised_versions"] == ["1"] for u in used["uses"])
    assert used["compromised_only"] is True and f"{lake['catalog']}.{ns}.steady" in used["checked"]


def test_reencrypt_all_tables_goes_on_past_a_failing_table_and_names_it(spark, lake, capsys):
    catalog, ns = lake["catalog"], lake["ns"]
    orders, returns = f"{catalog}.{ns}.orders", f"{catalog}.{ns}.returns"
    data_file = Path(spark.sql(f"SELECT file_path FROM {returns}.files").collect()[0][0].removeprefix("file:"))
    aside = data_file.with_name(data_file.name + ".aside")
    data_file.rename(aside)
    try:
        code, summary, err = reencrypt_all(lake, capsys, "--parallel", "2", "--report", str(lake["report"]))
    finally:  # (both tables at once, one session)
        aside.rename(data_file)
    assert code == 2, err
    assert summary["tables"] == [orders, returns] and not summary["ok"]
    assert json.loads(lake["report"].read_text()) == summary  # the report, rewritten as each table ended
    assert list(summary["done"]) == [orders] and summary["done"][orders]["proof"]["ok"]
    assert list(summary["failed"]) == [returns] and "rewrite_data_files" in summary["failed"][returns]
    assert f"[1/2] {orders}" in err and f"[2/2] {returns}: FAILED" in err
    assert rows(spark, orders) == ROWS and rows(spark, returns) == ROWS
    code, doc, _ = audit(lake, capsys, "--json")
    states = {t["table"]: (t["state"], t["reason"]) for t in doc["tables"]}
    assert code == 1 and states[f"{ns}.orders"] == ("OK", None) and states[f"{ns}.returns"] == ("FAILED", "COMPROMISED_KEY")
    # the fresh KEK is in (its first commit), the rewrite is not: an unfinished re-encryption, not a clean table
    detail = next(t["detail"] for t in doc["tables"] if t["table"] == f"{ns}.returns")
    assert "unfinished re-encryption" in detail


def test_reencrypt_all_tables_second_run_finishes_and_the_audit_is_green(spark, lake, capsys):
    catalog, ns = lake["catalog"], lake["ns"]
    returns = f"{catalog}.{ns}.returns"
    orders = f"{catalog}.{ns}.orders"
    code, summary, err = reencrypt_all(lake, capsys, "--report", str(lake["report"]))
    assert code == 0, (summary, err)
    # orders no longer depends (where-used skips it); the earlier run's proof of it is carried over
    assert f"resumed from {lake['report']}: 1 table(s) proven by an earlier run ({orders})" in err
    assert summary["ok"] and summary["finished"] and summary["tables"] == [returns] and summary["resumed"] == [orders]
    assert list(summary["done"]) == [orders, returns] and summary["done"][orders]["proof"]["ok"]
    assert json.loads(lake["report"].read_text()) == summary
    assert summary["done"][returns]["reencrypt"]["tags_rewritten"] == ["keep"]
    assert sorted(r[0] for r in spark.read.option("versionAsOf", "keep").table(returns).collect()) == ROWS
    proof = summary["done"][returns]["proof"]
    assert proof["ok"] and {s["master_key_version"] for s in proof["snapshots"]} == {"2"}
    assert rows(spark, returns) == ROWS
    code, doc, err = audit(lake, capsys, "--json")
    assert code == 0, (err, [t for t in doc["tables"] if not t["ok"]])
    assert doc["summary"]["compromised_tables"] == 0
    code, used = where_used_compromised(lake, capsys)
    assert code == 0 and used["uses"] == [] and not used["unchecked"]
