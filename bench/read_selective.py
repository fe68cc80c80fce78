"""Section 9, selective reads: ``read_table(..., row_filter=...)`` vs a full read vs Spark's WHERE.

One encrypted Iceberg table of 2,000,000 rows (quick: 100,000), columns ``id`` bigint, ``part``
int (``id % 100``, the identity partition), ``name`` string (64-char hex), ``score`` double,
written by Spark through the shared ``local[2]`` session with ``WRITE DISTRIBUTED BY PARTITION
LOCALLY ORDERED BY id``: one data file per partition (100), rows in ``id`` order inside each, a
Parquet row group every ~128 KiB (``write.parquet.row-group-size-bytes``).

Two queries of 1 % of the rows each, warm (this process, warm page cache), contenders taking turns
in each repeat after an untimed warm-up:

* **by partition**: ``part == 7``: the manifests' bounds leave one data file of the 100 to read;
* **by id range**: ``id in [n/2, n/2 + n/100)``: every file holds 1 % of the range, contiguous in
  its id order, so each file is opened (footer authenticated) and only the row groups whose
  statistics overlap the range are decrypted and decoded.

Contenders: ``read_table(metadata_json, kms, row_filter=...)``; the same full read (no filter) as
the reference; Spark ``spark.table(t).where(...).toArrow()`` in the warm session (JVM started).
Every result is checked against Spark's row count for the same WHERE.
"""

from __future__ import annotations

from bench.context import Context
from bench.harness import Goal, Row, Section, time_interleaved
from bench.workloads import create_table, current_metadata_json

TITLE = "9. Selective reads: `read_table(..., row_filter=...)` vs a full read vs Spark's WHERE"
COLUMNS = "id bigint, part int, name string, score double"
PARTITIONS = 100
ROWS_FULL, ROWS_QUICK = 2_000_000, 100_000
PROPERTIES = {
    "write.parquet.row-group-size-bytes": str(128 * 1024),
    "write.parquet.row-group-check-min-record-count": "100",
    "write.parquet.row-group-check-max-record-count": "1000",
}


def write_table(ctx: Context, rows: int) -> str:
    table = create_table(ctx, "read_selective", COLUMNS, properties=PROPERTIES)
    spark = ctx.spark
    spark.sql(f"ALTER TABLE {table} ADD PARTITION FIELD part")
    spark.sql(f"ALTER TABLE {table} WRITE DISTRIBUTED BY PARTITION LOCALLY ORDERED BY id")
    spark.sql(f"INSERT INTO {table} SELECT id, CAST(id % {PARTITIONS} AS int), sha2(CAST(id AS string), 256), "
              f"rand(7) FROM range(0, {rows}, 1, 2)")
    return table


def run(ctx: Context) -> Section:
    from pyiceberg_crypto.kms import InMemoryKms
    from pyiceberg_crypto.read import read_table

    rows = ROWS_QUICK if ctx.quick else ROWS_FULL
    spark = ctx.spark
    ctx.log(f"selective: Spark writes {rows:,} rows in {PARTITIONS} partitions, ordered by id")
    table = write_table(ctx, rows)
    metadata = current_metadata_json(ctx, table)
    kms = InMemoryKms(ctx.master_keys)
    files = spark.sql(f"SELECT count(*) FROM {table}.files").first()[0]
    low = rows // 2
    queries = {
        "part": ([("part", "==", 7)], "part = 7"),
        "range": ([("id", ">=", low), ("id", "<", low + rows // 100)], f"id >= {low} AND id < {low + rows // 100}"),
    }
    expected = {key: spark.sql(f"SELECT count(*) FROM {table} WHERE {where}").first()[0]
                for key, (_, where) in queries.items()}

    def check(n: int, want: int, what: str) -> None:
        if n != want:
            raise RuntimeError(f"{what} returned {n} rows, Spark's WHERE {want}")

    def ours(key: str):
        row_filter = queries[key][0]
        return lambda: check(read_table(metadata, kms, row_filter=row_filter).num_rows, expected[key], key)

    def spark_where(key: str):
        where = queries[key][1]
        return lambda: check(spark.table(table).where(where).toArrow().num_rows, expected[key], f"Spark {key}")

    ctx.log("selective: warm contenders (this process, shared Spark session)")
    warm = time_interleaved({
        "full": lambda: check(read_table(metadata, kms).num_rows, rows, "full read"),
        "part": ours("part"), "spark_part": spark_where("part"),
        "range": ours("range"), "spark_range": spark_where("range"),
    }, ctx.sizes.goal_repeats)

    section = Section(TITLE, (
        f"{rows:,} rows (`{COLUMNS}`) in {files} data files (identity partition `part` = `id % {PARTITIONS}`, "
        f"one file per partition, rows in `id` order, a row group per ~128 KiB), encrypted, written by Spark "
        "(`local[2]`). Warm: this process, warm page cache, contenders take turns in each repeat. Each query "
        "returns 1 % of the rows, checked against Spark's count for the same WHERE. Reference: the full read "
        "(`read_table` without a filter) and Spark `where(...).toArrow()` in the warm shared session."
    ))
    add = section.rows.append
    add(Row("selective", "full", "`read_table(metadata_json, kms)`, every row (no filter)", "s", warm["full"],
            short="full read"))
    add(Row("selective", "spark_part", f"Spark `where('{queries['part'][1]}').toArrow()`, warm", "s",
            warm["spark_part"], refs=("full",), short="Spark by partition"))
    add(Row("selective", "part", f"`read_table(..., row_filter=[('part', '==', 7)])`: 1 % by partition", "s",
            warm["part"], refs=("full", "spark_part"), note=f"{expected['part']:,} rows; 1 of {files} files read",
            headline=True))
    add(Row("selective", "spark_range", f"Spark `where('{queries['range'][1]}').toArrow()`, warm", "s",
            warm["spark_range"], refs=("full",), short="Spark by id range"))
    add(Row("selective", "range", "`read_table(..., row_filter=[id range])`: 1 % by id range", "s",
            warm["range"], refs=("full", "spark_range"),
            note=f"{expected['range']:,} rows; every file opened, row groups pruned by their statistics",
            headline=True))
    section.goals = [
        Goal("1 % by partition: `read_table` vs Spark's WHERE", "part", 1.0, ref="spark_part", at_most=True),
        Goal("1 % by id range: `read_table` vs Spark's WHERE", "range", 1.0, ref="spark_range", at_most=True),
        Goal("1 % by id range: `read_table` vs a full read", "range", 1.0, ref="full", at_most=True,
             why="Every file is still opened, its footer authenticated and re-encoded in Python (at quick sizes "
                 "each file is one row group: nothing to prune)."),
    ]
    return section
