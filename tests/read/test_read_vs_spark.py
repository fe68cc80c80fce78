"""The JVM-free reader returns exactly what Spark's SELECT returns, on tables Iceberg wrote.

One module-scoped set of tables (the test budget is tight): a partitioned table taken through
appends, merge-on-read DELETE / UPDATE / MERGE (deletion vectors), schema evolution (rename, add,
drop, reorder, int -> long, a nested field added), partition evolution and time travel; an
overwritten table; an Avro table; an empty table; and a table with equality deletes written
through Iceberg's Java API (Spark cannot write them). Results are compared column by column,
sorted by id, with Spark's ``toArrow()``.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pytest

from pyiceberg_crypto import config
from pyiceberg_crypto.kms import InMemoryKms
from pyiceberg_crypto.read import ReadIntegrityError, TableInputError, read_table, scan
from tests.conftest import CATALOG
from tests.testkit import metadata_location

MOR = {"write.delete.mode": "merge-on-read", "write.update.mode": "merge-on-read", "write.merge.mode": "merge-on-read"}


def _create(spark, name: str, columns: str, partitioned_by: str = "", **extra) -> str:
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.db")
    table = f"{CATALOG}.db.{name}_{uuid.uuid4().hex[:8]}"
    props = config.table_properties("k1", extra={**MOR, **extra})
    spark.sql(f"CREATE TABLE {table} ({columns}) USING iceberg {partitioned_by} " + config.tblproperties_sql(props))
    return table


def current_snapshot(spark, table: str) -> int:
    return spark.sql(f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at DESC LIMIT 1").first()[0]


@pytest.fixture(scope="module")
def kms(master_keys):
    return InMemoryKms(master_keys)


@pytest.fixture(scope="module")
def evolving(spark, kms_registration):
    """A partitioned table through appends, DVs, schema and partition evolution (+ an old snapshot)."""
    table = _create(spark, "evolving",
                    "id int, category string, amount decimal(10,2), ts timestamp, ts_ntz timestamp_ntz, d date, "
                    "tags array<string>, attrs map<string,int>, point struct<x: double, y: double>, flag boolean, "
                    "data binary", "PARTITIONED BY (category)")
    spark.sql(f"""INSERT INTO {table} SELECT CAST(id AS int), element_at(array('a','b','c'), CAST(id % 3 AS int) + 1),
                  CAST(id * 1.25 AS decimal(10,2)), timestamp_seconds(1700000000 + id * 3600),
                  CAST(timestamp_seconds(1700000000 + id * 60) AS timestamp_ntz), date_add(DATE'2024-01-01', CAST(id AS int)),
                  IF(id % 4 = 0, NULL, array(concat('t', id), 'x')), map('k', CAST(id AS int)),
                  IF(id % 6 = 0, NULL, named_struct('x', id / 2.0, 'y', -id / 1.0)), id % 2 = 0, CAST(concat('b', id) AS binary)
                  FROM range(0, 300)""")
    first = current_snapshot(spark, table)
    first_rows = spark.sql(f"SELECT * FROM {table} VERSION AS OF {first}").toArrow()
    spark.sql(f"""INSERT INTO {table} SELECT CAST(id AS int), 'd', CAST(id AS decimal(10,2)), NULL, NULL, NULL, array(),
                  map(), named_struct('x', 1.0, 'y', 2.0), NULL, NULL FROM range(300, 400)""")
    spark.sql(f"DELETE FROM {table} WHERE id % 7 = 0")
    spark.sql(f"UPDATE {table} SET amount = amount + 1 WHERE id % 5 = 0")
    spark.sql(f"""MERGE INTO {table} t USING (SELECT CAST(id AS int) AS id FROM range(390, 410)) s ON t.id = s.id
                  WHEN MATCHED THEN UPDATE SET t.category = 'm'
                  WHEN NOT MATCHED THEN INSERT (id, category) VALUES (s.id, 'n')""")
    spark.sql(f"ALTER TABLE {table} RENAME COLUMN flag TO active")
    spark.sql(f"ALTER TABLE {table} DROP COLUMN data")
    spark.sql(f"ALTER TABLE {table} ADD COLUMN note string")
    spark.sql(f"ALTER TABLE {table} ADD COLUMN point.z double")
    spark.sql(f"ALTER TABLE {table} ALTER COLUMN id TYPE bigint")
    spark.sql(f"ALTER TABLE {table} ALTER COLUMN amount TYPE decimal(12,2)")
    spark.sql(f"ALTER TABLE {table} ALTER COLUMN d FIRST")
    spark.sql(f"ALTER TABLE {table} ADD PARTITION FIELD bucket(4, id)")
    spark.sql(f"""INSERT INTO {table} (id, category, amount, note, point) SELECT id, 'e', CAST(id AS decimal(10,2)),
                  concat('note ', id), named_struct('x', 0.5, 'y', 1.5, 'z', 2.5) FROM range(500, 560)""")
    spark.sql(f"DELETE FROM {table} WHERE id IN (501, 502, 3, 4)")
    return {"table": table, "first": first, "first_rows": first_rows}


def _assert_same(ours: pa.Table, spark_table: pa.Table) -> None:
    assert ours.column_names == spark_table.column_names
    assert ours.num_rows == spark_table.num_rows
    ours, theirs = ours.sort_by("id"), spark_table.sort_by("id")
    for name in ours.column_names:
        assert ours.column(name).to_pylist() == theirs.column(name).to_pylist(), name


def test_evolved_table_equals_spark(spark, evolving, kms):
    table = evolving["table"]
    ours = read_table(metadata_location(spark, table), kms)
    expected = spark.sql(f"SELECT * FROM {table}").toArrow()
    _assert_same(ours, expected)
    assert ours.column_names[:2] == ["d", "id"] and "active" in ours.column_names and "data" not in ours.column_names
    assert ours.schema.field("id").type == pa.int64() and ours.schema.field("amount").type == pa.decimal128(12, 2)
    deleted = {0, 7, 3, 4, 501, 502}
    assert not deleted & set(ours.column("id").to_pylist())  # the deletion vectors were applied


def test_time_travel_reads_the_snapshot_with_its_schema(spark, evolving, kms):
    ours = read_table(metadata_location(spark, evolving["table"]), kms, snapshot_id=evolving["first"])
    _assert_same(ours, evolving["first_rows"])
    assert "flag" in ours.column_names and "data" in ours.column_names and ours.schema.field("id").type == pa.int32()
    # By time, as Spark's TIMESTAMP AS OF: the snapshot current at the first commit's time, 1 ms later.
    location = metadata_location(spark, evolving["table"])
    doc = json.loads(Path(location.removeprefix("file:")).read_text())
    first_ms = next(s["timestamp-ms"] for s in doc["snapshots"] if s["snapshot-id"] == evolving["first"])
    at = datetime.fromtimestamp((first_ms + 1) / 1000, timezone.utc)
    _assert_same(read_table(location, kms, as_of=at), evolving["first_rows"])
    with pytest.raises(TableInputError, match="the table had no snapshot at"):
        read_table(location, kms, as_of=at - timedelta(days=1))


def test_projection_reads_only_the_columns_asked_for(spark, evolving, kms):
    table = evolving["table"]
    ours = read_table(metadata_location(spark, table), kms, columns=["id", "point", "note"])
    expected = spark.sql(f"SELECT id, point, note FROM {table}").toArrow()
    _assert_same(ours, expected)
    with pytest.raises(TableInputError, match="no column 'nope'"):
        read_table(metadata_location(spark, table), kms, columns=["id", "nope"])


def test_scan_streams_batches_of_the_same_rows(spark, evolving, kms):
    expected = spark.sql(f"SELECT count(*) FROM {evolving['table']}").first()[0]
    reader = scan(metadata_location(spark, evolving["table"]), kms, batch_rows=50, max_workers=2)
    batches = list(reader)
    assert batches and max(b.num_rows for b in batches) <= 50
    assert sum(b.num_rows for b in batches) == expected
    one_at_a_time = scan(metadata_location(spark, evolving["table"]), kms, max_buffered_bytes=1).read_all()
    assert one_at_a_time.num_rows == expected and one_at_a_time.schema == reader.schema


def test_overwrite_avro_and_empty_tables(spark, kms_registration, kms):
    over = _create(spark, "overwritten", "id bigint, name string")
    spark.sql(f"INSERT INTO {over} SELECT id, concat('old', id) FROM range(0, 50)")
    spark.sql(f"INSERT OVERWRITE {over} SELECT id, concat('new', id) FROM range(20, 70)")
    spark.sql(f"INSERT INTO {over} VALUES (1000, 'appended')")
    _assert_same(read_table(metadata_location(spark, over), kms), spark.sql(f"SELECT * FROM {over}").toArrow())

    avro = _create(spark, "avro", "id bigint, name string, amount decimal(12,3), ts timestamp, d date, "
                   "tags array<int>, attrs map<string,string>, s struct<a: int, b: string>",
                   **{"write.format.default": "avro", "write.delete.format.default": "avro"})
    spark.sql(f"""INSERT INTO {avro} SELECT id, concat('n', id), CAST(id / 3 AS decimal(12,3)),
                  timestamp_seconds(1700000000 + id), date_add(DATE'2020-02-28', CAST(id AS int)),
                  array(CAST(id AS int), NULL), map('a', concat('v', id)), named_struct('a', CAST(id AS int), 'b', 'x')
                  FROM range(0, 40)""")
    spark.sql(f"DELETE FROM {avro} WHERE id % 3 = 0")
    files = spark.sql(f"SELECT file_format FROM {avro}.data_files").collect()
    assert {r[0] for r in files} == {"AVRO"}
    _assert_same(read_table(metadata_location(spark, avro), kms), spark.sql(f"SELECT * FROM {avro}").toArrow())
    avro_file = Path(spark.sql(f"SELECT file_path FROM {avro}.data_files").first()[0].removeprefix("file:"))
    original = avro_file.read_bytes()
    avro_file.write_bytes(original[:100] + bytes([original[100] ^ 1]) + original[101:])
    try:
        with pytest.raises(ReadIntegrityError) as caught:
            read_table(metadata_location(spark, avro), kms)
    finally:
        avro_file.write_bytes(original)
    assert caught.value.file.endswith(avro_file.name) and "block 0" in str(caught.value)

    empty = _create(spark, "empty", "id bigint, v string")
    location = spark.sql(f"DESCRIBE TABLE EXTENDED {empty}").where("col_name = 'Location'").first()[1]
    first_metadata = sorted(Path(location.removeprefix("file:"), "metadata").glob("*.metadata.json"))[-1]
    result = read_table(str(first_metadata), kms)
    assert result.num_rows == 0 and result.column_names == ["id", "v"]


def _write_equality_deletes(spark, table: str, rows: list[tuple[int, str]]) -> None:
    """An encrypted equality delete file on (id, name) through Iceberg's Java API, committed with RowDelta."""
    jvm = spark.sparkContext._jvm
    gateway = spark.sparkContext._gateway
    iceberg = jvm.org.apache.iceberg
    loaded = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)
    schema = loaded.schema()
    ids = gateway.new_array(jvm.int, 2)
    ids[0], ids[1] = schema.findField("id").fieldId(), schema.findField("name").fieldId()
    names = jvm.java.util.ArrayList()
    names.add("id")
    names.add("name")
    delete_schema = schema.select(names)
    factory = (getattr(iceberg.data, "GenericFileWriterFactory$Builder")(loaded)
               .deleteFileFormat(iceberg.FileFormat.PARQUET).equalityFieldIds(ids)
               .equalityDeleteRowSchema(delete_schema).build())
    location = loaded.locationProvider().newDataLocation(f"eq-deletes-{uuid.uuid4().hex}.parquet")
    encrypted = loaded.encryption().encrypt(loaded.io().newOutputFile(location))
    writer = factory.newEqualityDeleteWriter(encrypted, loaded.spec(), None)
    for key, name in rows:
        record = iceberg.data.GenericRecord.create(delete_schema)
        record.setField("id", key)
        record.setField("name", name)
        writer.write(record)
    writer.close()
    loaded.newRowDelta().addDeletes(writer.toDeleteFile()).commit()
    spark.sql(f"REFRESH TABLE {table}")


def test_equality_deletes_follow_sequence_numbers(spark, kms_registration, kms):
    table = _create(spark, "equality", "id int, name string")
    spark.sql(f"INSERT INTO {table} SELECT CAST(id AS int), concat('n', id) FROM range(0, 20)")
    _write_equality_deletes(spark, table, [(3, "n3"), (4, "wrong"), (5, "n5")])
    spark.sql(f"INSERT INTO {table} VALUES (3, 'n3'), (100, 'n100')")  # newer than the delete: stays
    metadata = json.loads(Path(metadata_location(spark, table).removeprefix("file:")).read_text())
    assert any(m for m in metadata["snapshots"] if m["summary"].get("added-equality-delete-files") == "1")
    ours = read_table(metadata_location(spark, table), kms)
    expected = spark.sql(f"SELECT * FROM {table}").toArrow()
    _assert_same(ours, expected)
    assert 5 not in ours.column("id").to_pylist() and 4 in ours.column("id").to_pylist()
    assert ours.column("id").to_pylist().count(3) == 1
