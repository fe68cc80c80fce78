"""``audit_catalog`` on a namespace of real tables written by Spark + Iceberg 1.12.0: encrypted ones
(one with expired snapshots, one with plaintext statistics), a plaintext one, one whose metadata
cannot be read, one whose master key the KMS refuses, and a plain Hive table. Every table gets
its verdict, the files of all tables are checked in one Spark job, the ledgers make the next
audit incremental, and nothing in any table changes."""

from __future__ import annotations

import json
import os
import uuid
from html.parser import HTMLParser
from pathlib import Path

import jsonschema
import pytest

from pyiceberg_crypto import config
from pyiceberg_crypto.kms import InMemoryKms
from pyiceberg_crypto.catalog import spark as metastore
from pyiceberg_crypto.catalog.spark import catalog_properties
from pyiceberg_crypto.audit import CatalogReport, audit_catalog
from pyiceberg_crypto.audit.lake import audit_schema, ledger_path
from pyiceberg_crypto.verify.report import KEY_ERROR, OK, PLAINTEXT, STATISTICS
from tests.conftest import CATALOG
from tests.verify.conftest import local, metastore_entry

pytestmark = [pytest.mark.slow, pytest.mark.balance]  # in the cluster lane (make test): the lanes even out

VALIDATOR = jsonschema.Draft202012Validator(audit_schema())


def assert_valid(document: dict) -> None:
    errors = sorted(VALIDATOR.iter_errors(document), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors[:10])


def create_plain_hive_table(spark, database: str, name: str, location: Path) -> None:
    """A Hive (not Iceberg) table, made with the metastore's own client."""
    jvm = spark.sparkContext._jvm
    api = jvm.org.apache.hadoop.hive.metastore.api
    client = metastore._new_client(spark, catalog_properties(spark, CATALOG))
    try:
        cols = jvm.java.util.ArrayList()
        cols.add(api.FieldSchema("id", "bigint", None))
        sd = api.StorageDescriptor()
        sd.setCols(cols)
        sd.setLocation(location.as_uri())
        sd.setInputFormat("org.apache.hadoop.mapred.TextInputFormat")
        sd.setOutputFormat("org.apache.hadoop.hive.ql.io.HiveIgnoreKeyTextOutputFormat")
        sd.setSerdeInfo(api.SerDeInfo(name, "org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe",
                                      jvm.java.util.HashMap()))
        table = api.Table()
        table.setDbName(database)
        table.setTableName(name)
        table.setTableType("EXTERNAL_TABLE")
        table.setSd(sd)
        table.setPartitionKeys(jvm.java.util.ArrayList())
        params = jvm.java.util.HashMap()
        params.put("EXTERNAL", "TRUE")
        table.setParameters(params)
        client.createTable(table)
    finally:
        client.close()


@pytest.fixture(scope="module")
def lake(spark, kms_registration, tmp_path_factory):
    """A namespace of six tables; returns (namespace, {role: namespace.name})."""
    ns = f"audit_{uuid.uuid4().hex[:6]}"
    spark.sql(f"CREATE NAMESPACE {CATALOG}.{ns}")
    names = {role: f"{ns}.{role}" for role in ("expired", "good", "plain", "broken", "k2", "stats", "hive")}

    def create(role: str, properties: dict[str, str]) -> None:
        spark.sql(f"CREATE TABLE {CATALOG}.{names[role]} (id bigint, v string) USING iceberg "
                  + config.tblproperties_sql(properties))

    for role, key in (("expired", "k1"), ("good", "k1"), ("broken", "k1"), ("k2", "k2"), ("stats", "k1")):
        create(role, config.table_properties(key))
    create("plain", {"format-version": "2"})
    for role in ("expired", "good", "plain", "broken", "k2", "stats"):
        spark.sql(f"INSERT INTO {CATALOG}.{names[role]} VALUES (1, 'a'), (2, 'b')")
    spark.sql(f"INSERT INTO {CATALOG}.{names['expired']} VALUES (3, 'c')")
    spark.sql(f"INSERT INTO {CATALOG}.{names['expired']} VALUES (4, 'd')")
    spark.sql(f"CALL {CATALOG}.system.expire_snapshots(table => '{names['expired']}', "
              "older_than => TIMESTAMP '2999-01-01 00:00:00', retain_last => 1)")
    spark.sql(f"CALL {CATALOG}.system.compute_table_stats(table => '{names['stats']}')")
    broken = Path(local(metastore_entry(spark, f"{CATALOG}.{names['broken']}")["metadata_location"]))
    broken.write_text("{ this is not table metadata")
    create_plain_hive_table(spark, ns, "hive", tmp_path_factory.mktemp("hive-table"))
    return ns, names


def locations(spark, lake) -> dict[str, str]:
    ns, names = lake
    return {role: metastore_entry(spark, f"{CATALOG}.{name}")["metadata_location"]
            for role, name in names.items() if role != "hive"}


def table_files(spark, lake) -> dict[str, float]:
    """Every file under the tables' directories with its modification time."""
    out = {}
    for location in locations(spark, lake).values():
        root = Path(local(location)).parent.parent
        for path in root.rglob("*"):
            if path.is_file():
                out[str(path)] = path.stat().st_mtime_ns
    return out


@pytest.fixture(scope="module")
def first_audit(spark, lake, master_keys, tmp_path_factory):
    """The first audit (a KMS that holds k1 only: the k2 table's key is refused), before and after."""
    state_dir = tmp_path_factory.mktemp("ledgers")
    before = (locations(spark, lake), table_files(spark, lake))
    report = audit_catalog(spark, CATALOG, namespaces=[lake[0]], state_dir=str(state_dir),
                           kms=InMemoryKms({"k1": master_keys["k1"]}), driver_max_files=0)
    after = (locations(spark, lake), table_files(spark, lake))
    return report, state_dir, before, after


def test_every_table_gets_its_verdict(first_audit, lake):
    report, state_dir, _, _ = first_audit
    ns, names = lake
    assert isinstance(report, CatalogReport) and not report.ok
    assert [t.table for t in report.tables] == sorted(names.values())
    entry = {role: report.table(name) for role, name in names.items()}

    for role in ("good", "expired"):
        assert (entry[role].state, entry[role].ok, entry[role].encrypted, entry[role].key_id) == ("OK", True, True, "k1")
        assert entry[role].files > 0 and set(entry[role].by_status) == {OK}
        assert entry[role].keks and all(k["age_days"] < 1 and not k["rotation_due"] for k in entry[role].keks)
        assert entry[role].mode == "current"
    # expire_snapshots leaves the manifest-list keys of the expired snapshots: keys prune would remove them
    assert len(entry["expired"].prunable_entries) == 2 and entry["good"].prunable_entries == []

    assert (entry["plain"].state, entry["plain"].encrypted, entry["plain"].ok, entry["plain"].key_id) == (
        "UNENCRYPTED", False, False, None)
    assert entry["plain"].reason == PLAINTEXT and "format-version 2" in entry["plain"].detail

    assert (entry["broken"].state, entry["broken"].reason, entry["broken"].ok) == ("UNCHECKED", "UNREADABLE", False)
    assert entry["broken"].detail.startswith(f"{entry['broken'].metadata_location} is not JSON table metadata: ")

    assert (entry["k2"].state, entry["k2"].reason, entry["k2"].encrypted, entry["k2"].key_id) == (
        "UNCHECKED", KEY_ERROR, True, "k2")
    assert "k2" in entry["k2"].detail

    assert (entry["stats"].state, entry["stats"].reason) == ("FAILED", PLAINTEXT)
    assert len(entry["stats"].plaintext_statistics) == 1
    assert entry["stats"].plaintext_statistics[0].endswith(".stats")
    assert any(f["kind"] == STATISTICS and f["status"] == PLAINTEXT for f in entry["stats"].findings)

    assert (entry["hive"].iceberg, entry["hive"].state, entry["hive"].files) == (False, "SKIPPED", 0)
    assert report.summary()["by_state"] == {"OK": 2, "FAILED": 1, "UNENCRYPTED": 1, "UNCHECKED": 2, "SKIPPED": 1}
    assert {t.table for t in report.not_ok()} == {names[r] for r in ("plain", "broken", "k2", "stats")}


def test_the_files_of_all_tables_are_checked_in_one_spark_job(spark, first_audit):
    report = first_audit[0]
    run = report.run
    assert run["where"] == "spark" and run["tables_checked"] == 5  # all Iceberg tables but the unreadable one
    jobs = spark.sparkContext.statusTracker().getJobIdsForGroup(run["job_group"])
    assert len(jobs) == 1
    batched = [f for t in report.tables if t.report for f in t.report.files if f.kind not in ("manifest", "manifest-list")]
    assert run["files_checked"] == len(batched) > 5  # data and statistics files of every table, in that job


def test_the_audit_never_modifies_a_table(first_audit):
    _, _, (locations_before, files_before), (locations_after, files_after) = first_audit
    assert locations_after == locations_before
    assert files_after == files_before


def test_the_document_follows_its_schema(first_audit, tmp_path):
    report = first_audit[0]
    doc = report.to_dict()
    assert_valid(doc)
    assert doc["ok"] is False
    for entry in doc["tables"]:
        assert {"table", "encrypted", "ok", "key_id"} <= set(entry)
    assert json.loads(json.dumps(doc)) == doc
    assert "k1" in doc["summary"]["key_ids"]
    # no key material anywhere: the wrapped KEKs of the metadata are not in the report
    meta = json.loads(Path(local(report.table(next(t.table for t in report.tables if t.ok)).metadata_location))
                      .read_text())
    for key in meta.get("encryption-keys", []):
        assert key["encrypted-key-metadata"] not in json.dumps(doc)


def test_ledgers_make_the_next_audit_incremental_and_full_rewalks(spark, first_audit, lake, master_keys):
    report, state_dir, _, _ = first_audit
    ns, names = lake
    good = report.table(names["good"])
    assert good.last_verified["advanced"] and good.last_verified["ledger"] == ledger_path(str(state_dir), names["good"])
    assert os.path.exists(ledger_path(str(state_dir), names["good"]))
    assert not os.path.exists(ledger_path(str(state_dir), names["stats"]))  # not OK: the ledger does not advance

    spark.sql(f"INSERT INTO {CATALOG}.{names['good']} VALUES (5, 'e')")
    kms = InMemoryKms(master_keys)
    second = audit_catalog(spark, CATALOG, namespaces=[ns], state_dir=str(state_dir), kms=kms)
    good2, expired2 = second.table(names["good"]), second.table(names["expired"])
    assert good2.ok and good2.mode == "since" and good2.by_status == {OK: 3}  # manifest list, manifest, data file
    assert good2.last_verified["snapshot_id"] != good.last_verified["snapshot_id"]
    assert good.last_verified["files_verified"] == good.files  # the first run: the current snapshot in full
    assert good2.last_verified["files_verified"] == good.files + 3  # so far: the first run's and this one's
    assert expired2.ok and expired2.mode == "since" and expired2.files < report.table(names["expired"]).files
    assert second.table(names["k2"]).ok  # with k2 in the KMS: verified in full (no ledger yet)
    assert second.run["where"] == "driver"  # a handful of files: checked on the driver

    full = audit_catalog(spark, CATALOG, namespaces=[ns], state_dir=str(state_dir), kms=kms, full=True)
    assert full.table(names["good"]).mode == "all" and full.table(names["good"]).files > good2.files


def test_the_page_and_the_textfile_of_a_real_audit(first_audit, lake, tmp_path):
    report = first_audit[0]
    page, textfile = tmp_path / "audit.html", tmp_path / "audit.prom"
    report.write_html(str(page))
    report.write_prometheus(str(textfile))
    parsed = PageParser()
    parsed.feed(page.read_text())
    assert parsed.external == [] and parsed.rows == len(report.tables)
    metrics = textfile.read_text()
    ns, names = lake
    assert f'pyiceberg_crypto_audit_table_ok{{catalog="{CATALOG}",table="{names["good"]}"}} 1.0' in metrics
    assert f'pyiceberg_crypto_audit_table_ok{{catalog="{CATALOG}",table="{names["k2"]}"}} 0.0' in metrics
    assert f'pyiceberg_crypto_audit_ok{{catalog="{CATALOG}"}} 0.0' in metrics
    assert names["hive"] not in metrics  # not an Iceberg table: no gauges


def test_bad_input_is_a_clear_error(spark, kms_registration, tmp_path):
    from pyiceberg_crypto.errors import TableInputError

    with pytest.raises(TableInputError, match="no Spark catalog named 'nope'"):
        audit_catalog(spark, "nope")
    with pytest.raises(TableInputError, match="database 'no_such_namespace' does not exist"):
        audit_catalog(spark, CATALOG, namespaces=["no_such_namespace"])
    with pytest.raises(TableInputError, match="ledger directory .* does not exist"):
        audit_catalog(spark, CATALOG, namespaces=["default"], state_dir=str(tmp_path / "missing"))


class PageParser(HTMLParser):
    """Counts the table rows and collects any reference to something outside the page."""

    def __init__(self):
        super().__init__()
        self.rows, self.external = 0, []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "tbody":
            self.rows += 1
        for name in ("src", "href"):
            value = attrs.get(name)
            if value is not None and not value.startswith(("#", "data:")):
                self.external.append((tag, name, value))
