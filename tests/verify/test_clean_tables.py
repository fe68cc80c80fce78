"""Clean tables written by Spark verify OK everywhere, and the verifier counts what Iceberg's own
metadata tables count (``files``, ``manifests``, ``snapshots``)."""

from __future__ import annotations

import pytest

from pyiceberg_crypto.kms import InMemoryKms
from pyiceberg_crypto.verify import verify_metadata
from pyiceberg_crypto.verify.report import DATA, DELETION_VECTOR, MANIFEST, MANIFEST_LIST, OK, POSITION_DELETE
from tests.verify.conftest import create_table, local, metadata_location

#: What Spark 3.5 writes is verified too (make test's spine): a table with deletes of each mode and
#: Avro data files, and the rewrite_manifests regression. Many files, all snapshots and one snapshot
#: by id exercise the verifier's walk, the same whatever Spark line wrote the files: Spark 4.1 only.
SPINE = pytest.mark.spine

MOR = {"write.delete.mode": "merge-on-read", "write.update.mode": "merge-on-read", "write.merge.mode": "merge-on-read"}
COW = {"write.delete.mode": "copy-on-write", "write.update.mode": "copy-on-write", "write.merge.mode": "copy-on-write"}


def _merge(spark, table: str) -> None:
    spark.sql("SELECT id, concat('m', id) AS v, cast(id % 3 AS int) AS p FROM range(25, 35)").createOrReplaceTempView("src")
    spark.sql(f"MERGE INTO {table} t USING src s ON t.id = s.id "
              "WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *")


@pytest.fixture(scope="module")
def merge_on_read_table(spark, kms_registration):
    """Partitioned, merge-on-read: DELETE / UPDATE / MERGE write deletion vectors; then
    rewrite_manifests (which corrupted such tables in Iceberg 1.11.0)."""
    table = create_table(spark, "mor", partitioned_by="p", properties=MOR)
    for start in (0, 20, 40):
        spark.sql(f"INSERT INTO {table} SELECT id, cast(id AS string), cast(id % 3 AS int) FROM range({start}, {start + 20})")
    spark.sql(f"DELETE FROM {table} WHERE id < 5")
    spark.sql(f"UPDATE {table} SET v = 'u' WHERE id BETWEEN 20 AND 24")
    _merge(spark, table)
    spark.sql(f"CALL local.system.rewrite_manifests('{table.split('.', 1)[1]}')")
    return table


@pytest.fixture(scope="module")
def copy_on_write_table(spark, kms_registration):
    """Appends, INSERT OVERWRITE, copy-on-write DELETE / UPDATE / MERGE, rewrite_data_files, expire_snapshots."""
    table = create_table(spark, "cow", properties=COW)
    spark.sql(f"INSERT INTO {table} SELECT id, cast(id AS string), cast(id % 3 AS int) FROM range(0, 30)")
    spark.sql(f"INSERT OVERWRITE {table} SELECT id, cast(id AS string), cast(id % 3 AS int) FROM range(0, 40)")
    spark.sql(f"INSERT INTO {table} SELECT id, 'x', 1 FROM range(40, 50)")
    spark.sql(f"DELETE FROM {table} WHERE id < 3")
    spark.sql(f"UPDATE {table} SET v = 'u' WHERE id = 10")
    _merge(spark, table)
    ident = table.split(".", 1)[1]
    spark.sql(f"CALL local.system.rewrite_data_files(table => '{ident}', options => map('rewrite-all', 'true'))")
    # A literal, not now(): Iceberg's CALL parser for Spark 3.5 takes constant arguments only.
    spark.sql(f"CALL local.system.expire_snapshots(table => '{ident}', older_than => TIMESTAMP '2999-01-01 00:00:00', "
              "retain_last => 3)")
    return table


@pytest.fixture(scope="module")
def many_files_table(spark, kms_registration):
    """Many small files over several appends."""
    table = create_table(spark, "many")
    spark.range(0, 600, 1, 40).selectExpr("id", "cast(id AS string) AS v", "cast(id % 2 AS int) AS p") \
        .writeTo(table).append()
    spark.range(600, 700, 1, 8).selectExpr("id", "cast(id AS string) AS v", "cast(id % 2 AS int) AS p") \
        .writeTo(table).append()
    return table


@pytest.fixture(scope="module")
def avro_table(spark, kms_registration):
    """Avro data files: AGS1 like manifests, their stored length in key metadata."""
    table = create_table(spark, "avro", properties={"write.format.default": "avro", **MOR})
    spark.sql(f"INSERT INTO {table} SELECT id, cast(id AS string), 1 FROM range(0, 100, 1, 2)")
    spark.sql(f"DELETE FROM {table} WHERE id < 10")
    return table


TABLES = ["merge_on_read_table", "copy_on_write_table", "many_files_table", "avro_table"]


@pytest.mark.parametrize("fixture", [pytest.param(t, marks=() if t == "many_files_table" else SPINE) for t in TABLES])
def test_clean_table_is_ok_and_counts_match_iceberg(spark, master_keys, fixture, request):
    table = request.getfixturevalue(fixture)
    report = verify_metadata(metadata_location(spark, table), InMemoryKms(master_keys))
    assert report.ok, report.not_ok() or report.failed_checks()
    assert {f.status for f in report.files} == {OK}

    entries = report.summary()["entries_by_kind"]
    files_by_content = dict(spark.sql(f"SELECT content, count(*) FROM {table}.files GROUP BY content").collect())
    assert entries.get(DATA, 0) == files_by_content.get(0, 0)
    assert entries.get(DELETION_VECTOR, 0) + entries.get(POSITION_DELETE, 0) == files_by_content.get(1, 0)
    live_paths = {r[0] for r in spark.sql(f"SELECT file_path FROM {table}.files").collect()}
    assert {f.path for f in report.files if f.kind in (DATA, DELETION_VECTOR, POSITION_DELETE)} == live_paths
    manifests = {r[0] for r in spark.sql(f"SELECT path FROM {table}.manifests").collect()}
    assert {f.path for f in report.files if f.kind == MANIFEST} == manifests
    assert [f.kind for f in report.files].count(MANIFEST_LIST) == 1


@pytest.mark.parametrize("fixture", TABLES)
def test_all_snapshots_are_ok_and_each_file_is_verified_once(spark, master_keys, fixture, request):
    table = request.getfixturevalue(fixture)
    report = verify_metadata(metadata_location(spark, table), InMemoryKms(master_keys), all_snapshots=True)
    assert report.ok, report.not_ok() or report.failed_checks()
    snapshots = {r[0] for r in spark.sql(f"SELECT snapshot_id FROM {table}.snapshots").collect()}
    assert set(report.snapshot_ids) == snapshots
    assert [f.kind for f in report.files].count(MANIFEST_LIST) == len(snapshots)
    assert len({f.path for f in report.files}) == len(report.files)
    all_data = {r[0] for r in spark.sql(f"SELECT file_path FROM {table}.all_files").collect()}
    assert {f.path for f in report.files if f.kind in (DATA, DELETION_VECTOR, POSITION_DELETE)} == all_data


def test_one_snapshot_by_id(spark, master_keys, many_files_table):
    first = spark.sql(f"SELECT snapshot_id FROM {many_files_table}.snapshots ORDER BY committed_at").first()[0]
    report = verify_metadata(metadata_location(spark, many_files_table), InMemoryKms(master_keys), snapshot_id=first)
    assert report.ok and report.snapshot_ids == [first] and report.mode == "snapshot"
    data = spark.sql(f"SELECT count(*) FROM {many_files_table}.files VERSION AS OF {first}").first()[0]
    assert report.summary()["entries_by_kind"][DATA] == data


@SPINE
def test_rewrite_manifests_keeps_manifests_encrypted_and_the_table_readable(spark, merge_on_read_table):
    """Regression for Iceberg 1.11.0 (apache/iceberg#17991): with deletion vectors, rewrite_manifests
    wrote plaintext manifests and every later scan failed on 'Null key metadata buffer'."""
    summary = spark.sql(f"SELECT summary FROM {merge_on_read_table}.snapshots ORDER BY committed_at DESC").first()[0]
    assert summary.get("manifests-created") and summary.get("manifests-replaced")  # the rewrite happened
    for (path,) in spark.sql(f"SELECT path FROM {merge_on_read_table}.manifests").collect():
        with open(local(path), "rb") as handle:
            assert handle.read(4) == b"AGS1", path
    rows = spark.sql(f"SELECT count(*), sum(id) FROM {merge_on_read_table}").first()
    assert tuple(rows) == (55, sum(range(5, 60)))
    deletes = spark.sql(f"SELECT count(*) FROM {merge_on_read_table}.files WHERE content = 1").first()[0]
    assert deletes >= 1  # deletion vectors are in the rewritten manifests
