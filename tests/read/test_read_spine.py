"""The reader on a table each Spark line wrote (also run on Spark 3.5: ``-m spine``), compared
with ``collect()`` (Spark 3.5 has no ``toArrow``)."""

from __future__ import annotations

import uuid

import pytest

from pyiceberg_crypto import config
from pyiceberg_crypto.kms import InMemoryKms
from pyiceberg_crypto.read import read_table
from tests.conftest import CATALOG
from tests.read.test_read_vs_spark import MOR, metadata_location

pytestmark = pytest.mark.spine


def test_reader_equals_collect_after_appends_and_a_merge_on_read_delete(spark, kms_registration, master_keys):
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.db")
    table = f"{CATALOG}.db.spine_read_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TABLE {table} (id bigint, name string, amount decimal(10,2), d date, tags array<string>) "
              f"USING iceberg PARTITIONED BY (bucket(2, id)) "
              + config.tblproperties_sql(config.table_properties("k1", extra=MOR)))
    spark.sql(f"INSERT INTO {table} SELECT id, concat('n', id), CAST(id / 4 AS decimal(10,2)), "
              f"date_add(DATE'2024-02-27', CAST(id AS int)), array(concat('t', id)) FROM range(0, 60)")
    spark.sql(f"DELETE FROM {table} WHERE id % 4 = 1")
    spark.sql(f"INSERT INTO {table} VALUES (1000, NULL, NULL, NULL, NULL)")
    ours = read_table(metadata_location(spark, table), InMemoryKms(master_keys))
    rows = sorted((r["id"], r["name"], r["amount"], r["d"], r["tags"]) for r in ours.to_pylist())
    expected = sorted((r[0], r[1], r[2], r[3], list(r[4]) if r[4] is not None else None)
                      for r in spark.sql(f"SELECT * FROM {table}").collect())
    assert rows == expected and len(rows) == 46
