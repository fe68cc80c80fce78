"""KMS calls do not grow with the number of data files: a commit and a table load make the same
number of KMS calls with 1, 20 and 200 data files (Iceberg wraps per-file keys locally with
the KEK; the bridge adds no call per file)."""

from __future__ import annotations

import uuid

import pytest

from pyiceberg_crypto import config
from tests.conftest import CATALOG, add_catalog

FILE_COUNTS = (1, 20, 200)


@pytest.fixture(scope="module")
def uncached_catalog(spark, kms_registration):
    """A catalog without table cache: every statement loads its table (and unwraps its KEK) anew."""
    warehouse = spark.conf.get(f"spark.sql.catalog.{CATALOG}.warehouse")
    add_catalog(spark, "countcat", warehouse=warehouse, kms_name="test",
                extra_catalog_properties={"cache-enabled": "false"})
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.db")
    return "countcat"


def _calls(registration, spark, sql):
    before = registration.stats.snapshot()
    rows = spark.sql(sql).collect()
    stats = registration.stats.since(before)
    return {"wrap": stats.wrap, "unwrap": stats.unwrap, "generate": stats.generate, "errors": stats.errors}, rows


def test_commit_and_load_make_the_same_kms_calls_for_1_20_and_200_files(spark, uncached_catalog,
                                                                          kms_registration):
    # Range distribution: Spark sorts by partition and Iceberg writes one file at a time
    # (the default fanout writer would hold every partition's Parquet writer open in one task).
    props = config.tblproperties_sql(config.table_properties("k1", extra={"write.distribution-mode": "range", "write.spark.fanout.enabled": "false"}))
    measured = {}
    for files in FILE_COUNTS:
        table = f"{uncached_catalog}.db.counts_{files}_{uuid.uuid4().hex[:6]}"
        # One row per partition: the commit adds exactly `files` encrypted data files.
        spark.sql(f"CREATE TABLE {table} (id bigint, p bigint) USING iceberg PARTITIONED BY (p) {props}")
        commit, _ = _calls(kms_registration, spark, f"INSERT INTO {table} SELECT id, id FROM range(0, {files}, 1, 2)")
        written = spark.sql(f"SELECT count(*) FROM {table}.files").first()[0]
        load, result = _calls(kms_registration, spark, f"SELECT count(*), max(id) FROM {table}")
        assert written == files
        assert tuple(result[0]) == (files, files - 1)
        measured[files] = {"commit": commit, "load": load}

    first = measured[FILE_COUNTS[0]]
    assert first["commit"]["wrap"] + first["commit"]["unwrap"] >= 1  # the KMS is really in the path
    assert first["load"]["unwrap"] >= 1
    assert all(m == first for m in measured.values()), measured  # O(1): independent of the file count
