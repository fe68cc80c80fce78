"""Retiring a master key version another table still needs (issue 34): two tables under one key,
one re-wrapped, and `keystore retire` must refuse, name the other table and its snapshots, change
nothing; `keys where-used` answers the same across the catalog; once both are re-wrapped the
retire goes ahead after a 0600 backup. A version retired anyway (--force) is a KEY_ERROR in
`head`, `verify` and `read_table`, never "not authentic".

One keystore and one catalog live through the module; tests run in file order."""

from __future__ import annotations

import json
import stat
import uuid

import pytest

from pyiceberg_crypto import config
from pyiceberg_crypto.bridge import register_kms
from pyiceberg_crypto.cli.main import main
from pyiceberg_crypto.keys import rewrap_keks
from pyiceberg_crypto.keys.where_used import where_used_in_catalog, where_used_in_metadata
from pyiceberg_crypto.kms import KeystoreKms
from pyiceberg_crypto.kms.keystore import Keystore
from pyiceberg_crypto.keys.where_used import iceberg_tables
from pyiceberg_crypto.verify import verify_metadata
from tests.conftest import add_catalog
from tests.testkit import metadata_location

KEY = "shared-key"
OTHER = "lonely-key"


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory):
    work = tmp_path_factory.mktemp("retire")
    keystore = work / "keys.json"
    assert main(["keystore", "create", str(keystore)]) == 0
    assert main(["keystore", "add", str(keystore), KEY]) == 0
    assert main(["keystore", "add", str(keystore), OTHER]) == 0
    suffix = uuid.uuid4().hex[:6]
    catalog, kms_name = f"retire_{suffix}", f"retire-{suffix}"
    registration = register_kms(spark, KeystoreKms(keystore), name=kms_name)
    add_catalog(spark, catalog, warehouse=work / "wh", kms_name=kms_name)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.db")
    tables = {}
    for name, key in (("orders", KEY), ("returns", KEY), ("audit", OTHER)):
        table = f"{catalog}.db.{name}_{suffix}"  # one metastore serves every catalog of the session
        spark.sql(f"CREATE TABLE {table} (id bigint) USING iceberg {config.tblproperties_sql(config.table_properties(key))}")
        spark.sql(f"INSERT INTO {table} VALUES (1), (2)")
        spark.sql(f"INSERT INTO {table} VALUES (3)")
        tables[name] = table
    yield {"keystore": keystore, "catalog": catalog, "work": work, **tables}
    registration.close()


def snapshot_ids(spark, table: str) -> list[int]:
    return sorted(r.snapshot_id for r in spark.sql(f"SELECT snapshot_id FROM {table}.snapshots").collect())


def versions(keystore) -> list[int]:
    return [v.version for v in Keystore(keystore).load()[KEY]]


def backups(lake) -> list:
    return sorted(lake["work"].glob("keys.json.*.bak"))


def test_after_one_rewrap_the_other_table_still_needs_version_1(spark, lake):
    assert main(["keystore", "rotate", str(lake["keystore"]), KEY]) == 0
    result = rewrap_keks(spark, lake["orders"])
    assert result.committed and result.changes
    found = where_used_in_catalog(spark, lake["catalog"], KEY, "1", KeystoreKms(lake["keystore"]),
                                  tables=[lake["orders"], lake["returns"], lake["audit"]])
    assert [u.table for u in found.uses] == [lake["returns"]]
    assert found.uses[0].snapshot_ids == snapshot_ids(spark, lake["returns"])
    assert found.needed and not found.unchecked and len(found.checked) == 3
    assert not where_used_in_catalog(spark, lake["catalog"], KEY, "2", KeystoreKms(lake["keystore"]),
                                     tables=[lake["audit"]]).needed


def test_the_catalog_listing_finds_the_tables(spark, lake):
    listed = iceberg_tables(spark, lake["catalog"])
    assert {lake["orders"], lake["returns"], lake["audit"]} <= set(listed)


def test_retire_without_a_catalog_refuses_and_says_how(capsys, lake):
    assert main(["keystore", "retire", str(lake["keystore"]), KEY, "1"]) == 2
    err = capsys.readouterr().err
    assert "cannot tell which tables still need it" in err and "--warehouse" in err and "--force" in err
    assert versions(lake["keystore"]) == [1, 2] and backups(lake) == []


def test_retire_refuses_naming_the_table_and_its_snapshots(capsys, spark, lake):
    assert main(["keystore", "retire", str(lake["keystore"]), KEY, "1", "--catalog", lake["catalog"],
                 "--table", lake["orders"], "--table", lake["returns"]]) == 2
    err = capsys.readouterr().err
    assert "not retiring" in err and "still needed" in err and lake["returns"] in err
    assert lake["orders"] + ":" not in err
    assert all(str(s) in err for s in snapshot_ids(spark, lake["returns"]))
    assert versions(lake["keystore"]) == [1, 2] and backups(lake) == []


def test_where_used_across_the_catalog(capsys, lake):
    assert main(["keys", "where-used", KEY, "1", "--kms", "keystore", "--kms-property",
                 f"keystore.path={lake['keystore']}", "--catalog", lake["catalog"], "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    tables = [u["table"] for u in doc["uses"]]
    assert doc["needed"] and lake["returns"] in tables and lake["orders"] not in tables
    assert lake["orders"] in doc["checked"]


def test_where_used_without_a_catalog_name_takes_the_sessions_current_iceberg_catalog(capsys, spark, lake):
    """Issue 48 item 5: in the session spark-submit configured (here the test session, which
    getOrCreate returns), no --catalog and no CATALOG.DB.TABLE: the tables are the session's current
    catalog's when it is an Iceberg catalog the session configures, else a usage error (no name made up)."""
    kms = ["--kms", "keystore", "--kms-property", f"keystore.path={lake['keystore']}"]
    before = spark.catalog.currentCatalog()
    try:
        spark.catalog.setCurrentCatalog("spark_catalog")  # Spark's own session catalog: not Iceberg here
        assert main(["keys", "where-used", KEY, "1", *kms]) == 2
        err = capsys.readouterr().err
        assert "the session's current catalog 'spark_catalog' is not an Iceberg catalog" in err, err
        assert "name the catalog with --catalog NAME or give --table as CATALOG.DB.TABLE" in err
        spark.catalog.setCurrentCatalog(lake["catalog"])
        short = lake["returns"].split(".", 1)[1]  # db.returns_...: in the current catalog
        assert main(["keys", "where-used", KEY, "1", *kms, "--table", short, "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert [u["table"] for u in doc["uses"]] == [lake["returns"]] and doc["checked"] == [lake["returns"]]
    finally:
        spark.catalog.setCurrentCatalog(before)


def test_where_used_from_metadata_files_needs_no_spark(spark, lake):
    locations = [metadata_location(spark, lake[name]) for name in ("orders", "returns")]
    found = where_used_in_metadata(locations, KEY, 1, KeystoreKms(lake["keystore"]))
    assert [u.metadata_location for u in found.uses] == [locations[1]]
    found = where_used_in_metadata([str(lake["work"] / "missing.metadata.json")], KEY, 1, KeystoreKms(lake["keystore"]))
    assert found.needed and not found.uses and found.unchecked  # not provably unused: refuse


def test_retire_goes_ahead_after_every_table_is_rewrapped_with_a_backup(capsys, spark, lake):
    assert rewrap_keks(spark, lake["returns"]).committed
    before = lake["keystore"].read_bytes()
    assert main(["keystore", "retire", str(lake["keystore"]), KEY, "1", "--catalog", lake["catalog"],
                 "--table", lake["orders"], "--table", lake["returns"]]) == 0
    out = capsys.readouterr().out
    [backup] = backups(lake)
    assert str(backup) in out and backup.read_bytes() == before
    assert stat.S_IMODE(backup.stat().st_mode) == 0o600
    assert versions(lake["keystore"]) == [2]
    fresh = KeystoreKms(lake["keystore"])  # no cached KEKs (Iceberg's JVM keeps them for an hour)
    for name in ("orders", "returns"):
        report = verify_metadata(metadata_location(spark, lake[name]), fresh, all_snapshots=True)
        assert report.ok, report.not_ok()


def test_a_version_retired_anyway_is_a_key_error_not_an_integrity_failure(capsys, spark, lake):
    assert main(["keystore", "rotate", str(lake["keystore"]), OTHER]) == 0
    assert main(["keystore", "retire", str(lake["keystore"]), OTHER, "1", "--force"]) == 0
    capsys.readouterr()
    location = metadata_location(spark, lake["audit"])
    kms_args = ["--kms", "keystore", "--kms-property", f"keystore.path={lake['keystore']}"]
    assert main(["head", location, *kms_args]) == 1
    err = capsys.readouterr().err
    assert "KEY_ERROR" in err and "not authentic" not in err and "has no version 1" in err
    assert main(["verify", location, *kms_args, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert {c["status"] for c in report["table"]["checks"] if c["name"] == "kek"} == {"KEY_ERROR"}
    from pyiceberg_crypto.read import ReadIntegrityError, read_table

    with pytest.raises(ReadIntegrityError) as caught:
        read_table(location, KeystoreKms(lake["keystore"]))
    assert caught.value.status == "KEY_ERROR"
