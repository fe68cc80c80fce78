"""Iceberg tables the Spark sections write (all through the shared session of :mod:`bench.context`)."""

from __future__ import annotations

import os
from pathlib import Path

from bench.context import CATALOG, MASTER_KEY_ID, Context
from pyiceberg_crypto import config


def create_table(ctx: Context, name: str, columns: str, *, encrypted: bool = True,
                 properties: dict[str, str] | None = None) -> str:
    """``CREATE TABLE bench.db.<name>`` (dropped first), encrypted with the bench master key or not."""
    table = f"{CATALOG}.db.{name}"
    spark = ctx.spark
    spark.sql(f"DROP TABLE IF EXISTS {table} PURGE")
    props = config.table_properties(MASTER_KEY_ID) if encrypted else {"format-version": "3"}
    props = {**props, **(properties or {})}
    spark.sql(f"CREATE TABLE {table} ({columns}) USING iceberg {config.tblproperties_sql(props)}")
    return table


#: Tables of N files: unpartitioned, no shuffle before the write, so each of the N Spark tasks of
#: the INSERT writes exactly one file. (Identity partitions were tried first: Iceberg's fanout
#: writer keeps one Parquet writer open per partition and runs out of heap at ~1,000.)
FILES_PROPERTIES = {"write.distribution-mode": "none"}


def insert_files(ctx: Context, table: str, files: int, rows_per_file: int = 20) -> None:
    """One INSERT (one commit) writing ``files`` small data files, one per Spark task."""
    ctx.spark.sql(
        f"INSERT INTO {table} SELECT id, concat('v', id), cast(id % 7 AS int) "
        f"FROM range(0, {files * rows_per_file}, 1, {files})")


FILES_COLUMNS = "id bigint, v string, p int"

#: Tables of many files, written cheaply: with a 1-byte target file size, Iceberg's rolling writer
#: closes the current file at its size check, made every 1,000 rows (``ROWS_DIVISOR``), so each
#: task writes one ~4 KB file per 1,000 rows. Two tasks (the 2 cores) write many files per commit:
#: ~12 ms per file on the 2-vCPU VM, ~1.6x less than one Spark task per file.
ROLLED_PROPERTIES = {**FILES_PROPERTIES, "write.target-file-size-bytes": "1"}
ROLLED_ROWS_PER_FILE = 1000


def insert_rolled_files(ctx: Context, table: str, files: int) -> None:
    """One INSERT (one commit) of ``files`` data files of 1,000 rows each into a table created with
    :data:`ROLLED_PROPERTIES` (2 tasks when ``files`` is even, so each task's rows fill whole files)."""
    tasks = 2 if files % 2 == 0 else 1
    ctx.spark.sql(
        f"INSERT INTO {table} SELECT id, concat('v', id), cast(id % 7 AS int) "
        f"FROM range(0, {files * ROLLED_ROWS_PER_FILE}, 1, {tasks})")


def table_with_rolled_files(ctx: Context, files: int, name: str | None = None) -> str:
    """A new encrypted table with exactly ``files`` data files written by one INSERT
    (:func:`insert_rolled_files`); raises if Iceberg wrote another number of files."""
    table = create_table(ctx, name or f"rolled_{files}", FILES_COLUMNS, properties=ROLLED_PROPERTIES)
    insert_rolled_files(ctx, table, files)
    written = data_file_count(ctx, table)
    if written != files:
        raise RuntimeError(f"{table}: expected {files} data files, Iceberg wrote {written}")
    return table


def data_file_count(ctx: Context, table: str) -> int:
    """Live data files of ``table``'s current snapshot."""
    return ctx.spark.sql(f"SELECT count(*) FROM {table}.data_files").first()[0]


def table_with_files(ctx: Context, files: int) -> str:
    """An encrypted table with exactly ``files`` data files (see :func:`insert_files`), written
    once per run (``ctx.file_tables``)."""
    if files not in ctx.file_tables:
        table = create_table(ctx, f"files_{files}", FILES_COLUMNS, properties=FILES_PROPERTIES)
        insert_files(ctx, table, files)
        ctx.file_tables[files] = table
    return ctx.file_tables[files]


def table_location(ctx: Context, table: str) -> Path:
    """The local directory of ``table``."""
    from pyiceberg_crypto.verify.magic_scan import table_location as location

    return Path(location(ctx.spark, table).removeprefix("file:"))


def current_metadata_json(ctx: Context, table: str) -> str:
    """URI of the table's current metadata.json."""
    return ctx.spark.sql(
        f"SELECT file FROM {table}.metadata_log_entries ORDER BY timestamp DESC LIMIT 1").first()[0]


def directory_bytes(path: Path) -> int:
    """Bytes of every file under ``path`` except Hadoop's ``.crc`` checksum side files."""
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, names in os.walk(path) for f in names
               if not f.endswith(".crc"))
