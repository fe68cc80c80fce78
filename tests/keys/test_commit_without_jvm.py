"""`keys rewrap` and `keys prune` commit to the catalog directly (issue 41, item 2): a standalone Hive
metastore over Thrift (the HIVE-26882 compare-and-swap Iceberg commits with) and a REST catalog over
HTTP (add/remove-encryption-key updates with requirements), no Spark in the committing code; the
shared Spark session writes the tables and races the commits. No commit of either side is lost,
Iceberg accepts the new metadata.json (its metadata_hash), and every table verifies."""

from __future__ import annotations

import base64
import json
import threading

import pytest

from pyiceberg_crypto.errors import OperationError
from pyiceberg_crypto import config
from pyiceberg_crypto.cli.main import main
from pyiceberg_crypto.catalog.hive import table_parameters
from pyiceberg_crypto.catalog.commit import current_metadata
from pyiceberg_crypto.keys.prune import prune_keys_in_catalog
from pyiceberg_crypto.keys.rewrap import rewrap_keks_in_catalog
from pyiceberg_crypto.kms import KeystoreKms
from pyiceberg_crypto.testing.pytest_plugin import rest_catalog_server  # noqa: F401
from pyiceberg_crypto.verify import verify_table
from tests.keys.tables import InsertDuringWrap, keystore_catalogs, kms_args, run_cli

pytestmark = [pytest.mark.loopback, pytest.mark.slow]

MASTER = "cj-key"


@pytest.fixture(scope="module")
def lake(spark, hive_metastore, rest_catalog_server, tmp_path_factory):  # noqa: F811
    """One table under MASTER (three INSERTs, version 1) in a Hive and in a REST catalog; then the
    key is rotated, so every KEK is outdated."""
    work = tmp_path_factory.mktemp("commit-without-jvm")
    lake = keystore_catalogs(spark, work, (MASTER,), prefix="cj", metastore_uri=hive_metastore.uri,
                             rest_uri=rest_catalog_server.uri)
    keystore, registration, hive, rest, ns = lake.keystore, lake.registration, lake.hive, lake.rest, lake.ns
    for catalog in (hive, rest):
        spark.sql(f"CREATE NAMESPACE {catalog}.{ns}")
        for name in ("orders", "pruned", "cli"):
            table = f"{catalog}.{ns}.{name}"
            spark.sql(f"CREATE TABLE {table} (id bigint) USING iceberg "
                      f"{config.tblproperties_sql(config.table_properties(MASTER))}")
            for start in (1, 10, 20):
                spark.sql(f"INSERT INTO {table} SELECT id FROM range({start}, {start + 3})")
    assert main(["keystore", "rotate", str(keystore), MASTER]) == 0
    yield {"keystore": keystore, "ns": ns, "hive": hive, "rest": rest,
           "services": {hive: {"uri": hive_metastore.uri}, rest: {"type": "rest", "uri": rest_catalog_server.uri}}}
    registration.close()


def kek_versions(meta) -> set[int]:
    """The keystore versions in the PKW1 blobs of the table's KEKs."""
    return {int.from_bytes(base64.b64decode(k.encrypted_key_metadata)[4:8], "big")
            for k in meta.encryption_keys.values() if k.encrypted_by_id == MASTER}


def rows(spark, table: str) -> list[int]:
    spark.sql(f"REFRESH TABLE {table}")
    return sorted(r[0] for r in spark.table(table).collect())


@pytest.mark.parametrize("kind", ["hive", "rest"])
def test_rewrap_races_an_insert_and_loses_nothing(spark, lake, kind):
    catalog = lake[kind]
    table, service = f"{catalog}.{lake['ns']}.orders", lake["services"][catalog]
    before = current_metadata(service, table)
    kms = InsertDuringWrap(lake["keystore"], spark, table)
    result = rewrap_keks_in_catalog(service, table, kms)
    assert kms.inserted and result.committed and result.attempts == 2  # refused once, redone on the new state
    after = current_metadata(service, table)
    assert after.location == result.metadata_location and kek_versions(after) == {2}
    assert set(before.snapshots) < set(after.snapshots)  # the racing INSERT's snapshot is kept
    assert rows(spark, table) == [1, 2, 3, 10, 11, 12, 20, 21, 22, 100, 101]
    spark.sql(f"INSERT INTO {table} VALUES (200)")  # Iceberg loads our metadata.json (its hash) and commits on it
    report = verify_table(spark, table, kms=KeystoreKms(lake["keystore"]), all_snapshots=True)
    assert report.ok, [(c.name, c.status, c.detail) for c in report.checks if c.status != "OK"]
    if kind == "hive":
        assert {c.name: c.status for c in report.checks}["metadata-hash"] == "OK"


def test_concurrent_spark_appends_and_rewraps_all_land(spark, lake):
    """A Spark thread appending while the JVM-free re-wrap commits again and again (--all)."""
    catalog = lake["hive"]
    table, service = f"{catalog}.{lake['ns']}.orders", lake["services"][catalog]
    expected = rows(spark, table) + list(range(1000, 1006))
    failures: list[BaseException] = []

    def append() -> None:
        try:
            for i in range(1000, 1006):
                spark.sql(f"INSERT INTO {table} VALUES ({i})")
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            failures.append(exc)

    writer = threading.Thread(target=append)
    writer.start()
    committed = 0
    for _ in range(4):
        result = rewrap_keks_in_catalog(service, table, KeystoreKms(lake["keystore"]), all_keks=True, max_attempts=8)
        committed += result.committed
    writer.join(timeout=600)
    assert not writer.is_alive() and not failures, failures
    assert committed == 4
    assert rows(spark, table) == sorted(expected)  # no append lost
    assert kek_versions(current_metadata(service, table)) == {2}
    assert verify_table(spark, table, kms=KeystoreKms(lake["keystore"])).ok


@pytest.mark.parametrize("kind", ["hive", "rest"])
def test_prune_after_expiry_without_a_jvm(spark, lake, kind):
    catalog = lake[kind]
    table, service = f"{catalog}.{lake['ns']}.pruned", lake["services"][catalog]
    spark.sql(f"CALL {catalog}.system.expire_snapshots(table => '{lake['ns']}.pruned', "
              "older_than => TIMESTAMP '9999-01-01 00:00:00', retain_last => 1)")
    dry = prune_keys_in_catalog(service, table, dry_run=True)
    assert len(dry.removed_entries) == 2 and not dry.committed
    result = prune_keys_in_catalog(service, table)
    assert result.committed and result.removed_entries == dry.removed_entries and not result.not_removed
    assert not set(result.removed_entries) & set(current_metadata(service, table).encryption_keys)
    assert rows(spark, table) == [1, 2, 3, 10, 11, 12, 20, 21, 22]
    spark.sql(f"INSERT INTO {table} VALUES (30)")
    assert verify_table(spark, table, kms=KeystoreKms(lake["keystore"]), all_snapshots=True).ok
    assert not prune_keys_in_catalog(service, table).committed  # nothing left


def test_the_cli_commits_without_a_jvm_and_refuses_what_it_cannot_do_safely(spark, lake):
    ns, kms = lake["ns"], kms_args(lake["keystore"])
    hive_uri, rest_uri = lake["services"][lake["hive"]]["uri"], lake["services"][lake["rest"]]["uri"]
    done = run_cli("keys", "rewrap", f"lake.{ns}.cli", *kms, "--metastore-uri", hive_uri, "--dry-run", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["changes"] and not json.loads(done.stdout)["committed"]
    done = run_cli("keys", "rewrap", f"lake.{ns}.cli", *kms, "--metastore-uri", hive_uri)
    assert done.returncode == 0 and "re-wrapped" in done.stdout, done.stderr
    assert kek_versions(current_metadata({"uri": hive_uri}, f"lake.{ns}.cli")) == {2}
    done = run_cli("keys", "rewrap", f"shop.{ns}.cli", *kms, "--rest-uri", rest_uri, "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["committed"], done.stderr
    done = run_cli("keys", "prune", f"shop.{ns}.cli", *kms, "--rest-uri", rest_uri)
    assert done.returncode == 0, done.stderr
    # A table whose writers take the metastore lock: refused before anything is written.
    spark.sql(f"ALTER TABLE {lake['hive']}.{ns}.cli SET TBLPROPERTIES ('engine.hive.lock-enabled'='true')")
    location = table_parameters(hive_uri, ns, "cli")["metadata_location"]
    done = run_cli("keys", "rewrap", f"lake.{ns}.cli", *kms, "--metastore-uri", hive_uri, "--all")
    assert done.returncode == 2 and "engine.hive.lock-enabled=true" in done.stderr and "spark-submit" in done.stderr
    assert table_parameters(hive_uri, ns, "cli")["metadata_location"] == location


def test_a_kms_failing_part_way_commits_nothing(lake):
    class FailingWrap(KeystoreKms):
        def wrap_key(self, key, wrapping_key_id):
            raise ConnectionError("KMS endpoint went away")

    service = lake["services"][lake["hive"]]
    table = f"lake.{lake['ns']}.pruned"
    before = current_metadata(service, table).location
    with pytest.raises(OperationError, match="KMS endpoint went away.*nothing was committed"):
        rewrap_keks_in_catalog(service, table, FailingWrap(lake["keystore"]), all_keks=True)
    assert current_metadata(service, table).location == before
