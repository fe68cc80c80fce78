"""Row filters of the JVM-free reader: exactly the rows Spark's WHERE returns, and files whose
manifest column bounds rule the filter out are never opened (a tampered one is not even noticed),
while every file that is read is still authenticated."""

from __future__ import annotations

import json
import struct
import uuid
from datetime import date, datetime, timezone
from pathlib import Path

import pytest

from pyiceberg_crypto.errors import InvalidArgumentError, ReadIntegrityError, TableInputError
from pyiceberg_crypto import config
from pyiceberg_crypto.cli.main import main
from pyiceberg_crypto.kms import InMemoryKms
from pyiceberg_crypto.read import read_table
from pyiceberg_crypto.read.filter import RowFilter, decode_bound, parse_predicate
from tests.conftest import CATALOG
from tests.read.kms_factory import VARIABLE
from tests.verify.test_tamper import flipped, replaced
from tests.testkit import metadata_location

pytest.importorskip("pyarrow")
KMS_SPEC = "tests.read.kms_factory:from_environment"


@pytest.fixture(scope="module")
def events(spark, kms_registration, master_keys):
    """Four appends with disjoint id ranges (one file each per category), a merge-on-read DELETE."""
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.db")
    table = f"{CATALOG}.db.events_{uuid.uuid4().hex[:8]}"
    props = config.table_properties("k1", extra={"write.delete.mode": "merge-on-read"})
    spark.sql(f"CREATE TABLE {table} (id bigint, category string, d date, ts timestamp, score double) "
              f"USING iceberg PARTITIONED BY (category) {config.tblproperties_sql(props)}")
    for start in range(0, 400, 100):
        spark.sql(f"""INSERT INTO {table} SELECT id, IF(id % 2 = 0, 'even', 'odd'), date_add(DATE'2024-01-01', CAST(id AS int)),
                      timestamp_seconds(1700000000 + id * 3600), id / 4.0
                      FROM range({start}, {start + 100}, 1, 1)""")
    spark.sql(f"DELETE FROM {table} WHERE id % 9 = 0")
    return table, metadata_location(spark, table), InMemoryKms(master_keys)


PREDICATES = [
    ([("id", ">=", 250)], "id >= 250"),
    ([("id", "in", [3, 150, 399, 1000])], "id IN (3, 150, 399, 1000)"),
    ([("category", "==", "odd"), ("id", "<", 120)], "category = 'odd' AND id < 120"),
    ([("d", "<=", date(2024, 2, 1))], "d <= DATE'2024-02-01'"),
    ([("ts", ">", datetime(2023, 11, 30, tzinfo=timezone.utc))], "ts > TIMESTAMP'2023-11-30 00:00:00 UTC'"),
    ([("score", ">", 95.0), ("id", "!=", 390)], "score > 95.0 AND id != 390"),
    ([("category", "not in", ["even"])], "category NOT IN ('even')"),
]


@pytest.mark.parametrize(("row_filter", "where"), PREDICATES, ids=[w for _, w in PREDICATES])
def test_the_filtered_rows_are_spark_s_where(spark, events, row_filter, where):
    table, location, kms = events
    ours = read_table(location, kms, columns=["id", "category"], row_filter=row_filter).sort_by("id")
    spark_rows = spark.sql(f"SELECT id, category FROM {table} WHERE {where} ORDER BY id").toArrow()
    assert ours.column_names == ["id", "category"]  # the filter's own columns are not returned
    assert ours.column("id").to_pylist() == spark_rows.column("id").to_pylist()
    assert ours.column("category").to_pylist() == spark_rows.column("category").to_pylist()


def test_files_ruled_out_by_their_bounds_are_not_opened(spark, events):
    table, location, kms = events
    files = spark.sql(f"SELECT file_path, lower_bounds[1] AS low FROM {table}.files WHERE content = 0").collect()
    outside = next(r.file_path for r in files if int.from_bytes(r.low, "little") < 100)  # ids 0..99
    path = outside.removeprefix("file:")
    with replaced(outside, flipped(Path(path).read_bytes(), 200)):
        kept = read_table(location, kms, row_filter=[("id", ">=", 300)])  # never opens the tampered file
        assert kept.num_rows == spark.sql(f"SELECT count(*) FROM {table} WHERE id >= 300").first()[0]
        with pytest.raises(ReadIntegrityError) as excinfo:  # a filter that needs it reads (and refuses) it
            read_table(location, kms, row_filter=[("id", "<", 50)])
        assert excinfo.value.file == outside
        with pytest.raises(ReadIntegrityError):
            read_table(location, kms)


def test_bad_filters_fail_before_any_file_is_read(events):
    _, location, kms = events
    with pytest.raises(TableInputError, match="no column 'nope'"):
        read_table(location, kms, row_filter=[("nope", "==", 1)])
    with pytest.raises(TableInputError, match="unknown operator"):
        read_table(location, kms, row_filter=[("id", "~", 1)])
    with pytest.raises(TableInputError, match="never matches"):
        read_table(location, kms, row_filter=[("id", "==", None)])


def test_head_where(capsys, events, master_keys, monkeypatch):
    _, location, _ = events
    monkeypatch.setenv(VARIABLE, json.dumps({k: v.hex() for k, v in master_keys.items()}))
    code = main(["head", location, "--kms", KMS_SPEC, "--where", "id >= 395",
                 "--where", "category = odd", "--columns", "id", "--json"])
    out = capsys.readouterr().out
    assert code == 0 and [line for line in out.splitlines() if line] == ['{"id": 395}', '{"id": 397}', '{"id": 399}']
    assert main(["head", location, "--kms", KMS_SPEC, "--where", "id ~ 3"]) == 2
    assert "a filter is COLUMN OP VALUE" in capsys.readouterr().err


def test_bounds_and_predicates_without_spark():
    assert decode_bound("long", (7).to_bytes(4, "little")) == 7  # written as int before a promotion
    assert decode_bound("date", (3).to_bytes(4, "little")) == 3 and decode_bound("binary", b"x") is None
    fields = {"id": (1, "long"), "name": (2, "string")}
    lower, upper = {1: (10).to_bytes(8, "little"), 2: b"apple"}, {1: (20).to_bytes(8, "little"), 2: b"melon"}
    may = lambda *p: RowFilter.of(list(p)).may_match(lower, upper, fields)  # noqa: E731
    assert may(("id", ">=", 20)) and not may(("id", ">", 20)) and not may(("id", "<", 10))
    assert may(("id", "in", [1, 15])) and not may(("id", "in", [1, 25]))
    assert may(("name", "==", "banana")) and not may(("name", "==", "zebra"))
    assert may(("id", "==", "not a number"))  # not comparable with the bounds: read, filter exactly
    assert not may(("id", ">", 5), ("name", "<", "aaa"))  # AND: one predicate ruling out is enough
    assert parse_predicate("tags not in ('a', 'b')") == ("tags", "not in", ["a", "b"])
    with pytest.raises(InvalidArgumentError):
        RowFilter.of([("id", "in", 5)])


# --- row groups -------------------------------------------------------------------------------
ROW_GROUP_PROPERTIES = {  # Iceberg checks the row group size every 100 rows: a group per 100 rows
    "write.parquet.row-group-size-bytes": "1",
    "write.parquet.row-group-check-min-record-count": "100",
    "write.parquet.row-group-check-max-record-count": "100",
    "write.delete.mode": "merge-on-read",
}


@pytest.fixture(scope="module")
def row_groups(spark, kms_registration, master_keys):
    """One data file of 1,000 rows in id order, a row group per 100 rows, then a merge-on-read
    DELETE (a deletion vector: positions in the file)."""
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.db")
    table = f"{CATALOG}.db.groups_{uuid.uuid4().hex[:8]}"
    props = config.table_properties("k1", extra=ROW_GROUP_PROPERTIES)
    spark.sql(f"CREATE TABLE {table} (id bigint, name string, score double) USING iceberg "
              f"{config.tblproperties_sql(props)}")
    spark.sql(f"INSERT INTO {table} SELECT id, concat('n', CAST(id AS string)), id / 4.0 FROM range(0, 1000, 1, 1)")
    spark.sql(f"DELETE FROM {table} WHERE id % 7 = 0 OR id = 955")
    [data_file] = [r.file_path for r in spark.sql(f"SELECT file_path FROM {table}.files WHERE content = 0").collect()]
    return table, metadata_location(spark, table), InMemoryKms(master_keys), data_file


ROW_GROUP_PREDICATES = [
    ([("id", ">=", 950)], "id >= 950"),
    ([("id", ">", 100), ("id", "<", 130)], "id > 100 AND id < 130"),
    ([("id", "in", [5, 955, 999])], "id IN (5, 955, 999)"),
    ([("name", "==", "n960")], "name = 'n960'"),
    ([("score", ">=", 240.0)], "score >= 240.0"),
    ([("id", "<", 0)], "id < 0"),
]


@pytest.mark.parametrize(("row_filter", "where"), ROW_GROUP_PREDICATES, ids=[w for _, w in ROW_GROUP_PREDICATES])
def test_rows_of_a_pruned_file_are_spark_s_where_with_its_deletion_vector(spark, row_groups, row_filter, where):
    table, location, kms, _ = row_groups
    ours = read_table(location, kms, columns=["id", "name"], row_filter=row_filter).sort_by("id")
    expected = spark.sql(f"SELECT id, name FROM {table} WHERE {where} ORDER BY id").toArrow()
    assert ours.column("id").to_pylist() == expected.column("id").to_pylist()
    assert ours.column("name").to_pylist() == expected.column("name").to_pylist()


def test_row_groups_ruled_out_by_their_statistics_are_never_decrypted(spark, row_groups):
    """A flipped byte in the first row group (ids 0..99): a filter for ids >= 900 reads the file's
    last row group only and never sees it; a filter that needs the first group refuses the file."""
    table, location, kms, data_file = row_groups
    expected = spark.sql(f"SELECT id FROM {table} WHERE id >= 900 ORDER BY id").toArrow().column("id").to_pylist()
    assert len(expected) > 80
    path = data_file.removeprefix("file:")
    with replaced(data_file, flipped(Path(path).read_bytes(), 200)):  # inside the first group's first page
        kept = read_table(location, kms, row_filter=[("id", ">=", 900)]).sort_by("id")
        assert kept.column("id").to_pylist() == expected
        with pytest.raises(ReadIntegrityError) as excinfo:
            read_table(location, kms, row_filter=[("id", "<", 50)])
        assert excinfo.value.file == data_file
        with pytest.raises(ReadIntegrityError):
            read_table(location, kms)


def test_float_inequality_is_never_ruled_out_by_bounds():
    """Bounds and statistics leave NaN out, and NaN != x is true: != / not in on floats read the file."""
    fields = {"x": (1, "double")}
    lower = upper = {1: struct.pack("<d", 1.0)}
    assert RowFilter.of([("x", "!=", 1.0)]).may_match(lower, upper, fields)
    assert RowFilter.of([("x", "not in", [1.0])]).may_match(lower, upper, fields)
    assert not RowFilter.of([("x", ">", 1.0)]).may_match(lower, upper, fields)
    assert not RowFilter.of([("id", "!=", 1)]).may_match({1: (1).to_bytes(8, "little")}, {1: (1).to_bytes(8, "little")},
                                                        {"id": (1, "long")})


# --- decimal columns: int and float literals as Spark's WHERE takes them (issue 34) ----------------
@pytest.fixture(scope="module")
def amounts(spark, kms_registration, master_keys):
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.db")
    table = f"{CATALOG}.db.amounts_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TABLE {table} (id bigint, amount decimal(10,2)) USING iceberg "
              + config.tblproperties_sql(config.table_properties("k1")))
    spark.sql(f"INSERT INTO {table} SELECT id, CAST(id * 1.25 AS decimal(10,2)) FROM range(0, 200)")
    return table, metadata_location(spark, table), InMemoryKms(master_keys)


DECIMAL_PREDICATES = [
    ([("amount", ">", 100)], "amount > 100"),
    ([("amount", "<=", 12.5)], "amount <= 12.5"),
    ([("amount", "==", 25)], "amount = 25"),
    ([("amount", "!=", 2.5), ("id", "<", 10)], "amount != 2.5 AND id < 10"),
    ([("amount", "in", [0, 1.25, 247.5, 99999999])], "amount IN (0, 1.25, 247.5, 99999999)"),
    ([("amount", "not in", [0, 1.25])], "amount NOT IN (0, 1.25)"),
    ([("amount", ">=", 0.1)], "amount >= 0.1"),  # a float as its shortest decimal: 0.1, as in SQL
]


@pytest.mark.parametrize(("row_filter", "where"), DECIMAL_PREDICATES, ids=[w for _, w in DECIMAL_PREDICATES])
def test_int_and_float_literals_on_a_decimal_column_are_spark_s_where(spark, amounts, row_filter, where):
    table, location, kms = amounts
    ours = read_table(location, kms, columns=["id"], row_filter=row_filter).sort_by("id").column("id").to_pylist()
    theirs = [r.id for r in spark.sql(f"SELECT id FROM {table} WHERE {where} ORDER BY id").collect()]
    assert ours == theirs and theirs  # every predicate selects some rows (amount = 25: id 20)


def test_a_literal_that_is_not_the_decimal_type_exactly_says_compare_with_a_decimal(amounts):
    _, location, kms = amounts
    for value in (100.125, 1e12, float("nan"), True, "100"):
        with pytest.raises(TableInputError, match="compare decimal column amount with a Decimal"):
            read_table(location, kms, row_filter=[("amount", ">", value)])
    from decimal import Decimal

    # A Decimal is compared as it is, exactly, whatever its scale.
    assert read_table(location, kms, row_filter=[("amount", ">", Decimal("248.745"))]).num_rows == 1  # 248.75


def test_head_where_on_a_decimal_column(capsys, amounts, master_keys, monkeypatch):
    table, location, _ = amounts
    monkeypatch.setenv(VARIABLE, json.dumps({k: v.hex() for k, v in master_keys.items()}))
    code = main(["head", location, "--kms", KMS_SPEC, "--where", "amount > 245", "--columns", "id", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert [json.loads(line)["id"] for line in out.splitlines() if line] == [197, 198, 199]
    assert main(["head", location, "--kms", KMS_SPEC, "--where", "amount > 1.001"]) == 2
    assert "compare decimal column amount with a Decimal" in capsys.readouterr().err


def test_decimal_binding_without_spark():
    from decimal import Decimal

    bound = RowFilter.of([("amount", ">", 100), ("n", "==", 3)]).bind({"amount": "decimal(5,2)", "n": "long"})
    assert bound.predicates[0].value.value == Decimal("100.00") and bound.predicates[1].value == 3
    with pytest.raises(InvalidArgumentError, match=r"compare decimal column amount with a Decimal: 1000 is not a decimal\(5,2\)"):
        RowFilter.of([("amount", ">", 1000)]).bind({"amount": "decimal(5,2)"})  # 1000.00 needs precision 6
