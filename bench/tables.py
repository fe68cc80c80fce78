"""Section 4, tables: an encrypted vs a plaintext Iceberg table in PySpark, same data.

After an untimed warm-up, each repeat creates both tables afresh (alternating which goes first) and
times one ``INSERT ... SELECT`` of the rows, then one full scan of every column (Spark's ``noop``
sink: read and decode everything, write nothing). Bytes on disk: every file of the table's
``data/`` and ``metadata/`` directories (Hadoop ``.crc`` side files excluded).
"""

from __future__ import annotations

import time

from bench.context import Context
from bench.harness import Row, Section
from bench.workloads import create_table, directory_bytes, table_location

TITLE = "4. Tables: encrypted vs plaintext Iceberg table (PySpark, local[2])"
COLUMNS = "id bigint, name string, score double, qty int, ts timestamp, note string"


def _select(rows: int) -> str:
    return (
        "SELECT id, concat('name-', id % 1000), rand(3), cast(id % 97 AS int), "
        "timestamp_micros(1700000000000000 + id * 1000), md5(cast(id AS string)) "
        f"FROM range(0, {rows}, 1, 2)"
    )


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run(ctx: Context) -> Section:
    spark = ctx.spark
    rows = ctx.sizes.table_rows
    samples: dict[str, list[float]] = {}
    for kind in ("plain", "enc"):  # untimed warm-up: JIT, first-query planning, file system caches
        table = create_table(ctx, f"rows_{kind}", COLUMNS, encrypted=kind == "enc")
        spark.sql(f"INSERT INTO {table} {_select(min(rows, 100_000))}")
        spark.table(table).write.format("noop").mode("overwrite").save()
        spark.sql(f"DROP TABLE {table} PURGE")
    for repeat in range(ctx.sizes.table_repeats):
        for kind in ("plain", "enc") if repeat % 2 == 0 else ("enc", "plain"):
            ctx.log(f"tables: repeat {repeat + 1}, {kind}")
            table = create_table(ctx, f"rows_{kind}", COLUMNS, encrypted=kind == "enc")
            samples.setdefault(f"insert_{kind}", []).append(
                _seconds(lambda: spark.sql(f"INSERT INTO {table} {_select(rows)}")))
            samples.setdefault(f"scan_{kind}", []).append(
                _seconds(lambda: spark.table(table).write.format("noop").mode("overwrite").save()))
            samples.setdefault(f"bytes_{kind}", []).append(directory_bytes(table_location(ctx, table)) / 2**20)
            spark.sql(f"DROP TABLE {table} PURGE")
    section = Section(
        TITLE,
        f"{rows:,} rows (`{COLUMNS}`), one INSERT per table, written by 2 Spark tasks; full scan = "
        "`spark.table(t).write.format('noop')`. Reference: the plaintext table (same catalog, same data, "
        "no `encryption.key-id`).",
    )
    labels = {"insert": ("INSERT wall time", "s"), "scan": ("full scan wall time", "s"),
              "bytes": ("bytes on disk (data + metadata)", "MiB")}
    for metric, (label, unit) in labels.items():
        section.rows.append(Row("tables", f"{metric}_plain", f"{label}, plaintext table", unit, samples[f"{metric}_plain"],
                                short="plaintext"))
        section.rows.append(Row("tables", f"{metric}_enc", f"{label}, encrypted table", unit, samples[f"{metric}_enc"],
                                refs=(f"{metric}_plain",), headline=True))
    return section
