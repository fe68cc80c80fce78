"""Apache DataFusion Comet reads our encrypted tables natively: one ``local[2]`` session built by
``spark_settings(accelerator="comet")`` (the Comet jar from the project's own ``jars download
--comet``), the Python KMS registered through the bridge, a few rows per table.

Each read is compared with the same query with Comet off in the same session. The plan shows
``CometIcebergNativeScan`` for copy-on-write and merge-on-read tables (a deletion vector included),
with 16- and 32-byte data keys. A 24-byte table falls back to Spark's scan and says why. Comet's
Iceberg writer, when turned on, still falls back to Iceberg's on an encrypted table: every new file
is ``PARE`` and verify says OK, so a Comet that wrote plaintext fails here first.

The session is this module's own: Comet's plugin, shuffle manager and class path take effect only
when the driver JVM starts, so the module needs a pytest process with no Spark started before it
(make test's ``apps`` lane, where every other test starts its Spark applications in processes of
their own).
"""

from __future__ import annotations

import os
import sys
import uuid

import pytest

from pyiceberg_crypto import config
from pyiceberg_crypto.verify import verify_table
from pyiceberg_crypto.verify.render import format_text

pytestmark = [pytest.mark.slow, pytest.mark.jvm, pytest.mark.apps]

CATALOG = "comet"
NATIVE_SCAN = "CometIcebergNativeScan"
MOR = {"write.delete.mode": "merge-on-read", "write.update.mode": "merge-on-read", "write.merge.mode": "merge-on-read"}
ROWS = "SELECT id, cast(id * 10 AS string) AS v, id % 2 AS grp FROM range(0, 6)"


@pytest.fixture(scope="module")
def comet(tmp_path_factory):
    """(spark, namespace): a Comet session on catalog ``comet``, the in-memory KMS registered as ``comet``."""
    from pyspark import SparkContext

    from pyiceberg_crypto.bridge import register_kms
    from pyiceberg_crypto.kms import InMemoryKms

    if SparkContext._gateway is not None:
        pytest.fail("a driver JVM already runs in this pytest process: Comet's plugin and class path take effect "
                    "only in a JVM started with them. Run this module in a pytest process of its own (make test's "
                    "apps lane does)")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    root = tmp_path_factory.mktemp("comet")
    settings = config.spark_settings(CATALOG, warehouse=root / "warehouse", metastore_dir=root / "metastore",
                                     kms_name="comet", accelerator="comet")
    builder = config.local_spark_builder("pyiceberg-crypto-comet").config("spark.driver.memory", "1g")
    spark = config.configure_spark_with_encryption(builder, settings).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    registration = register_kms(spark, InMemoryKms({"k1": os.urandom(16)}), name="comet")
    namespace = f"{CATALOG}.comet_{uuid.uuid4().hex[:6]}"
    spark.sql(f"CREATE NAMESPACE {namespace}")
    yield spark, namespace
    registration.close()
    spark.stop()


def create(spark, namespace: str, name: str, **properties) -> str:
    """``namespace.name``, encrypted with master key k1, six rows in one INSERT."""
    extra = properties.pop("extra", None)
    table = f"{namespace}.{name}"
    props = config.table_properties("k1", extra=extra, **properties)
    spark.sql(f"CREATE TABLE {table} (id bigint, v string, grp bigint) USING iceberg " + config.tblproperties_sql(props))
    spark.sql(f"INSERT INTO {table} {ROWS}")
    return table


def read(spark, table: str, *, comet: bool) -> tuple[list[tuple], str]:
    """(rows, the executed plan and Comet's fallback reasons) of one full read, Comet on or off."""
    spark.conf.set("spark.comet.enabled", "true" if comet else "false")
    try:
        query = f"SELECT id, v, grp FROM {table} ORDER BY id"
        frame = spark.sql(query)
        rows = [tuple(r) for r in frame.collect()]
        plan = frame._jdf.queryExecution().executedPlan().toString()
        explained = spark.sql(f"EXPLAIN EXTENDED {query}").first()[0]
        return rows, plan + "\n" + explained
    finally:
        spark.conf.set("spark.comet.enabled", "true")


def assert_native_and_equal(spark, table: str) -> list[tuple]:
    rows, plan = read(spark, table, comet=True)
    baseline, spark_plan = read(spark, table, comet=False)
    assert NATIVE_SCAN in plan, plan
    assert NATIVE_SCAN not in spark_plan, spark_plan  # the comparison is with Spark's own scan
    assert rows == baseline and rows
    return rows


def test_comet_reads_copy_on_write_natively(comet):
    spark, namespace = comet
    table = create(spark, namespace, "cow")
    spark.sql(f"DELETE FROM {table} WHERE id = 2")  # copy-on-write (Iceberg's default): a data file rewritten
    assert spark.sql(f"SELECT count(*) FROM {table}.delete_files").first()[0] == 0
    rows = assert_native_and_equal(spark, table)
    assert [r[0] for r in rows] == [0, 1, 3, 4, 5]


def test_comet_reads_merge_on_read_with_deletion_vectors_natively(comet):
    spark, namespace = comet
    table = create(spark, namespace, "mor", extra=MOR)
    spark.sql(f"DELETE FROM {table} WHERE id = 3")
    formats = [r[0] for r in spark.sql(f"SELECT file_format FROM {table}.delete_files").collect()]
    assert formats == ["PUFFIN"]  # an encrypted deletion vector
    rows = assert_native_and_equal(spark, table)
    assert [r[0] for r in rows] == [0, 1, 2, 4, 5]


def test_comet_reads_32_byte_keys_natively(comet):
    spark, namespace = comet
    table = create(spark, namespace, "dek32", data_key_length=32)
    assert assert_native_and_equal(spark, table) == [(i, str(i * 10), i % 2) for i in range(6)]


def test_comet_falls_back_on_24_byte_keys_and_says_why(comet):
    spark, namespace = comet
    table = create(spark, namespace, "dek24", data_key_length=24)
    rows, plan = read(spark, table, comet=True)
    baseline, _ = read(spark, table, comet=False)
    assert NATIVE_SCAN not in plan, plan
    assert "192-bit" in plan, plan  # Comet's reason, in EXPLAIN EXTENDED
    assert rows == baseline == [(i, str(i * 10), i % 2) for i in range(6)]
    report = verify_table(spark, table)  # "readable by" says the same, and why
    comet_answer = next(a for a in report.readable_by if a["engine"] == "comet")
    assert (comet_answer["readable"], comet_answer["native"]) == (True, False)
    assert "192-bit data key is not yet supported" in comet_answer["reasons"][0]
    assert "(comet): falls back to Spark's scan" in format_text(report)


def test_comet_writer_falls_back_on_encrypted_tables_and_writes_no_plaintext(comet):
    spark, namespace = comet
    table = create(spark, namespace, "written")
    before = {r[0] for r in spark.sql(f"SELECT file_path FROM {table}.files").collect()}
    spark.conf.set("spark.comet.write.iceberg.enabled", "true")
    try:
        spark.sql(f"INSERT INTO {table} SELECT id, cast(id AS string), 7 FROM range(100, 104)")
    finally:
        spark.conf.unset("spark.comet.write.iceberg.enabled")
    new = {r[0] for r in spark.sql(f"SELECT file_path FROM {table}.files").collect()} - before
    assert new
    for path in new:
        with open(path.removeprefix("file:"), "rb") as handle:
            assert handle.read(4) == b"PARE", path  # encrypted Parquet: Iceberg's writer wrote it
    report = verify_table(spark, table)
    assert report.ok, report.to_dict()
    assert "(comet): natively" in format_text(report)  # a 16-byte key, Parquet files: Comet reads it natively
    assert spark.sql(f"SELECT count(*) FROM {table}").first()[0] == 10
