""""Readable by" against real tables Spark + Iceberg 1.12.0 wrote: the reader-set profile after
DELETE/UPDATE/MERGE (copy-on-write), a merge-on-read table with a deletion vector after one DELETE,
the same table declared for Trino (a WARN check, in verify's JSON and text and in the audit's JSON,
HTML and Prometheus forms), and the guard that refuses to declare Trino where it cannot read."""

from __future__ import annotations

import json
import uuid

import jsonschema
import pytest

from pyiceberg_crypto import config
from pyiceberg_crypto.audit import audit_catalog
from pyiceberg_crypto.audit.lake import audit_schema
from pyiceberg_crypto.errors import InvalidArgumentError
from pyiceberg_crypto.kms import InMemoryKms
from pyiceberg_crypto.properties import READERS_PROPERTY
from pyiceberg_crypto.verify import verify_metadata
from pyiceberg_crypto.verify.render import format_text
from pyiceberg_crypto.verify.report import WARN, report_schema
from tests.conftest import CATALOG
from tests.verify.conftest import metadata_location

pytestmark = pytest.mark.slow

MOR = {"write.delete.mode": "merge-on-read", "write.update.mode": "merge-on-read", "write.merge.mode": "merge-on-read"}
DV_REASON = "1 encrypted deletion vector (Puffin): Trino 483 reads only Parquet when encrypted"


@pytest.fixture(scope="module")
def lake(spark, kms_registration):
    """namespace, {role: catalog.ns.table}: ``profile`` (readers=trino, then DELETE/UPDATE/MERGE),
    ``mor`` (merge-on-read, one DELETE: a DV), ``declared`` (as ``mor``, then the readers property set
    by hand, as an ALTER TABLE would), ``mor_clean`` (merge-on-read modes, no row-level change yet)."""
    ns = f"readers_{uuid.uuid4().hex[:6]}"
    spark.sql(f"CREATE NAMESPACE {CATALOG}.{ns}")
    names = {role: f"{CATALOG}.{ns}.{role}" for role in ("profile", "mor", "declared", "mor_clean")}
    props = {"profile": config.table_properties("k1", readers=("trino",)), "mor": config.table_properties("k1", extra=MOR),
             "declared": config.table_properties("k1", extra=MOR), "mor_clean": config.table_properties("k1", extra=MOR)}
    for role, name in names.items():
        spark.sql(f"CREATE TABLE {name} (id bigint, v string) USING iceberg " + config.tblproperties_sql(props[role]))
        spark.sql(f"INSERT INTO {name} SELECT id, cast(id AS string) FROM range(0, 10)")
    for role in ("profile", "mor", "declared"):
        spark.sql(f"DELETE FROM {names[role]} WHERE id = 3")
    spark.sql(f"UPDATE {names['profile']} SET v = 'u' WHERE id = 4")
    spark.sql(f"MERGE INTO {names['profile']} t USING (SELECT 5L AS id, 'm' AS v UNION ALL SELECT 11L, 'n') s "
              "ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *")
    spark.sql(f"ALTER TABLE {names['declared']} SET TBLPROPERTIES ('{READERS_PROPERTY}'='spark,trino')")
    return ns, names


def verify(spark, master_keys, table):
    return verify_metadata(metadata_location(spark, table), InMemoryKms({"k1": master_keys["k1"]}))


def test_the_profile_stays_readable_by_every_engine(spark, master_keys, lake):
    report = verify(spark, master_keys, lake[1]["profile"])
    assert report.ok
    assert {a["engine"]: a["readable"] for a in report.readable_by} == {"spark": True, "trino": True, "jvm-free": True,
                                                                        "comet": True}
    assert next(a for a in report.readable_by if a["engine"] == "comet")["native"] is True
    assert not [c for c in report.checks if c.name == "readers"]
    assert spark.sql(f"SELECT count(*) FROM {lake[1]['profile']}.delete_files").first()[0] == 0


def test_a_deletion_vector_makes_the_table_unreadable_by_trino_and_says_why(spark, master_keys, lake):
    report = verify(spark, master_keys, lake[1]["mor"])
    assert report.ok  # authentic files: readability is not integrity
    answers = {a["engine"]: a for a in report.readable_by}
    assert answers["trino"]["readable"] is False and answers["trino"]["reasons"] == [DV_REASON]
    assert answers["spark"]["readable"] is True and answers["jvm-free"]["readable"] is True
    assert (answers["comet"]["readable"], answers["comet"]["native"]) == (True, True)  # Comet reads DVs natively
    assert not [c for c in report.checks if c.name == "readers"]  # nothing declared: an answer, not a warning
    jsonschema.validate(report.to_dict(), report_schema())
    text = format_text(report)
    assert "readable by (current snapshot)" in text and f"no       Trino 483 through the AWS KMS face (trino)" in text
    assert DV_REASON in text


def test_a_table_declared_for_trino_that_holds_a_dv_is_a_warning(spark, master_keys, lake):
    report = verify(spark, master_keys, lake[1]["declared"])
    [check] = [c for c in report.checks if c.name == "readers"]
    assert check.status == WARN and report.ok
    assert check.detail.startswith(f"{READERS_PROPERTY} names trino, which cannot read the current snapshot: {DV_REASON}")
    assert "write.delete.mode=merge-on-read" in check.detail  # and its modes will write more
    # the whole fix, in order: the modes, then the rewrite that folds the deletion vectors in
    fix = check.detail.split("; fix: ", 1)[1]
    assert fix.index("'write.delete.mode'='copy-on-write'") < fix.index("rewrite_data_files") < fix.index("convert=True")


def test_another_snapshot_gives_no_answer_about_the_current_one(spark, master_keys, lake):
    first = spark.sql(f"SELECT snapshot_id FROM {lake[1]['mor']}.snapshots ORDER BY committed_at").first()[0]
    report = verify_metadata(metadata_location(spark, lake[1]["mor"]), InMemoryKms({"k1": master_keys["k1"]}),
                             snapshot_id=first)
    assert report.readable_by is None and report.to_dict()["readable_by"] is None


def test_the_audit_reports_readers_in_json_html_and_prometheus(spark, master_keys, lake, tmp_path):
    ns, names = lake
    report = audit_catalog(spark, CATALOG, namespaces=[ns], kms=InMemoryKms({"k1": master_keys["k1"]}),
                           driver_max_files=1000)
    doc = report.to_dict()
    jsonschema.validate(doc, audit_schema())
    by_table = {t["table"].split(".")[-1]: t for t in doc["tables"]}
    assert by_table["declared"]["declared_reader_blocked"] is True
    assert by_table["mor_clean"]["declared_reader_blocked"] is False  # not declared for Trino
    assert not by_table["profile"]["declared_reader_blocked"]
    assert [a["readable"] for a in by_table["mor"]["readable_by"] if a["engine"] == "trino"] == [False]
    assert doc["summary"]["declared_reader_blocked"] == 1 and doc["summary"]["unreadable_by"] == {"trino": 2}
    report.write_prometheus(str(tmp_path / "lake.prom"))
    prom = (tmp_path / "lake.prom").read_text()
    assert (f'pyiceberg_crypto_audit_table_readable{{catalog="{CATALOG}",engine="trino",table="{ns}.mor"}} 0.0'
            in prom), prom
    assert f'pyiceberg_crypto_audit_table_readable{{catalog="{CATALOG}",engine="trino",table="{ns}.profile"}} 1.0' in prom
    assert f'pyiceberg_crypto_audit_table_declared_reader_blocked{{catalog="{CATALOG}",table="{ns}.declared"}} 1.0' in prom
    report.write_html(str(tmp_path / "lake.html"))
    page = (tmp_path / "lake.html").read_text()
    assert "declared reader blocked" in page and "spark, jvm-free (not trino)" in page
    assert json.dumps(DV_REASON)[1:-1] in page


def test_declaring_trino_is_refused_where_it_cannot_keep_reading(spark, lake):
    names = lake[1]
    with pytest.raises(InvalidArgumentError, match=r"write.delete.mode=merge-on-read .*; fix: ALTER TABLE .* SET TBLPROPERTIES "
                                          r"\('write.delete.mode'='copy-on-write'"):
        config.declare_readers(spark, names["mor_clean"], ["trino"])
    with pytest.raises(InvalidArgumentError, match="holds 1 deletion vector.*rewrite_data_files with delete-file-threshold=1"):
        config.declare_readers(spark, names["mor"], ["trino"], set_modes=True)
    with pytest.raises(InvalidArgumentError, match="unknown reader"):
        config.declare_readers(spark, names["mor_clean"], ["presto"])
    with pytest.raises(InvalidArgumentError, match="cannot read the properties of"):
        config.declare_readers(spark, f"{CATALOG}.{lake[0]}.no_such_table", ["trino"])
    # every obstacle at once: the modes and the deletion vector, and the whole fix
    with pytest.raises(InvalidArgumentError) as refused:
        config.declare_readers(spark, names["mor"], ["trino"])
    message = str(refused.value)
    assert "write.delete.mode=merge-on-read" in message and "holds 1 deletion vector(s)" in message, message
    assert message.index("fix: ALTER TABLE") < message.index("rewrite_data_files") < message.index("convert=True")
    with pytest.raises(InvalidArgumentError, match="convert=True needs set_modes=True"):
        config.declare_readers(spark, names["mor"], ["trino"], convert=True)
    properties = lambda t: {r[0]: r[1] for r in spark.sql(f"SHOW TBLPROPERTIES {t}").collect()}  # noqa: E731
    assert READERS_PROPERTY not in properties(names["mor_clean"]) and READERS_PROPERTY not in properties(names["mor"])
    # With set_modes the same table is redirected: copy-on-write, and its next DELETE writes no DV.
    assert config.declare_readers(spark, names["mor_clean"], ["spark", "trino"], set_modes=True)[READERS_PROPERTY] \
        == "spark,trino"
    assert properties(names["mor_clean"])["write.delete.mode"] == "copy-on-write"
    spark.sql(f"DELETE FROM {names['mor_clean']} WHERE id = 1")
    assert spark.sql(f"SELECT count(*) FROM {names['mor_clean']}.delete_files").first()[0] == 0


def test_declaring_trino_with_convert_folds_the_deletion_vectors_in_at_once(spark, master_keys, lake):
    """One call makes a merge-on-read table with a deletion vector readable by Trino: the modes,
    the rewrite, the declaration; verify then has no warning and says Trino reads it."""
    table = lake[1]["mor"]
    rows = sorted(r[0] for r in spark.sql(f"SELECT id FROM {table}").collect())
    declared = config.declare_readers(spark, table, ["spark", "trino"], set_modes=True, convert=True)
    assert declared[READERS_PROPERTY] == "spark,trino" and declared["write.delete.mode"] == "copy-on-write"
    assert spark.sql(f"SELECT count(*) FROM {table}.delete_files").first()[0] == 0
    assert sorted(r[0] for r in spark.sql(f"SELECT id FROM {table}").collect()) == rows
    report = verify(spark, master_keys, table)
    assert report.ok and not [c for c in report.checks if c.name == "readers"]
    assert {a["engine"]: a["readable"] for a in report.readable_by}["trino"] is True


def test_a_deletion_vector_in_one_partition_blocks_trino_there_only(spark, master_keys, lake):
    """A partitioned merge-on-read table whose only DELETE touched partition grp=1: Trino's "no"
    names that partition (``blocked_partitions``), since a query whose filter skips it does not open
    the deletion vector; an unpartitioned table's answer names none (every query is blocked)."""
    table = f"{CATALOG}.{lake[0]}.by_grp"
    spark.sql(f"CREATE TABLE {table} (id bigint, grp int) USING iceberg PARTITIONED BY (grp) "
              + config.tblproperties_sql(config.table_properties("k1", extra=MOR)))
    spark.sql(f"INSERT INTO {table} SELECT id, CAST(id % 2 AS int) FROM range(0, 10)")
    spark.sql(f"DELETE FROM {table} WHERE id = 3")  # grp = 1 only
    report = verify(spark, master_keys, table)
    answers = {a["engine"]: a for a in report.readable_by}
    assert answers["trino"]["readable"] is False and answers["trino"]["blocked_partitions"] == ["grp=1"]
    assert "(in partition(s) grp=1; a query whose filter skips them does not open them)" in answers["trino"]["reasons"][0]
    assert "blocked_partitions" not in answers["spark"]  # it reads everything
    jsonschema.validate(report.to_dict(), report_schema())
    unpartitioned = {a["engine"]: a for a in verify(spark, master_keys, lake[1]["declared"]).readable_by}
    assert unpartitioned["trino"]["readable"] is False and "blocked_partitions" not in unpartitioned["trino"]
