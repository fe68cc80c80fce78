"""Section 17, encrypting an existing table (issue 51): ``encrypt_table``'s copy and verification vs a
plain ``INSERT INTO ... SELECT`` of the same rows into an encrypted table; the swap's window.

Per repetition, one plaintext table (format 2, identity-partitioned by ``part`` = id % 8, ``COMMITS``
INSERTs of ``rows`` rows of an id, the part and a 64-character string, in the shared ``bench``
catalog), then, taking turns (the order alternates; the first repetition warms up):

* ``encrypt_table`` without a proof and without a purge: stage (create the encrypted table), copy
  (one append of the snapshot's rows), catch-up (nothing to carry: no writer), verify (count and
  hash of every row per partition, of the original and of the copy: two Spark queries), the two
  renames. The verifier's proof is left out: it is section 5's subject;
* ``INSERT INTO`` an encrypted table of the same schema and spec (created untimed) ``SELECT * FROM``
  the same plaintext table (under its kept name when ``encrypt_table`` ran first): the same rows,
  the same files read, the same encrypted writes.

Goal: copy-and-verify within 1.3x of the plain INSERT (median of the pair ratios). The swap's
window, when no table has the name: from the progress message of the first rename (the original
renamed away) to the return of ``encrypt_table`` (the second rename done, plus one table load: an
upper bound). Goal: under 5 s per table. Every run is checked: the encrypted table has the rows
and its ``encryption.key-id``, the kept original the same count.
"""

from __future__ import annotations

import statistics
import time
import uuid

from bench.context import CATALOG, MASTER_KEY_ID, Context
from bench.harness import Goal, Row, Section

TITLE = "17. Encrypting an existing table: `encrypt_table` vs a plain `INSERT INTO ... SELECT`"
COMMITS = 2
ROWS = {True: 20_000, False: 1_000_000}  # quick, full: rows per commit (full: a 2-million-row table)
SCHEMA = "id bigint, part int, payload string"


def _plaintext(ctx: Context, name: str, rows: int) -> str:
    table = f"{CATALOG}.db.{name}"
    spark = ctx.spark
    spark.sql(f"CREATE TABLE {table} ({SCHEMA}) USING iceberg PARTITIONED BY (part) "
              "TBLPROPERTIES ('format-version'='2')")
    for commit in range(COMMITS):
        spark.sql(f"INSERT INTO {table} SELECT id, CAST(id % 8 AS int), sha2(CAST(id AS string), 256) "
                  f"FROM range({commit * rows}, {(commit + 1) * rows})")
    return table


def _encrypted_target(ctx: Context, name: str) -> str:
    from pyiceberg_crypto import config

    table = f"{CATALOG}.db.{name}"
    ctx.spark.sql(f"CREATE TABLE {table} ({SCHEMA}) USING iceberg PARTITIONED BY (part) "
                  + config.tblproperties_sql(config.table_properties(MASTER_KEY_ID)))
    return table


class WindowClock:
    """When the original left the name: the progress message of its rename."""

    def __init__(self, table: str) -> None:
        self.prefix, self.renamed_at = f"rename {table} to ", None

    def progress(self, message: str) -> None:
        if message.startswith(self.prefix) and self.renamed_at is None:
            self.renamed_at = time.perf_counter()


def run(ctx: Context) -> Section:
    from pyiceberg_crypto.adopt import encrypt_table

    rows = ROWS[ctx.quick]
    total = COMMITS * rows
    repeats = ctx.sizes.goal_repeats
    spark = ctx.spark
    seconds: dict[str, list[float]] = {"encrypt": [], "insert": [], "window": []}
    ctx.log(f"adopt: {repeats} repetitions, a plaintext table of {COMMITS} commits of {rows} rows each")
    for repeat in range(repeats + 1):  # the first repetition warms up
        suffix = uuid.uuid4().hex[:6]
        source = _plaintext(ctx, f"adopt_src_{suffix}", rows)
        target = _encrypted_target(ctx, f"adopt_ins_{suffix}")
        order = ("encrypt", "insert") if repeat % 2 == 0 else ("insert", "encrypt")
        timed: dict[str, float] = {}
        read_from = source
        for name in order:
            started = time.perf_counter()
            if name == "encrypt":
                clock = WindowClock(source)
                result = encrypt_table(spark, source, MASTER_KEY_ID, progress=clock.progress)
                ended = time.perf_counter()
                if clock.renamed_at is None:
                    raise RuntimeError(f"encrypt_table of {source}: no rename message")
                timed["window"] = ended - clock.renamed_at
                read_from = result.plaintext_table
            else:
                spark.sql(f"INSERT INTO {target} SELECT * FROM {read_from}")
                ended = time.perf_counter()
            timed[name] = ended - started
        _check(ctx, source, result, target, total)
        if repeat:
            for name, value in timed.items():
                seconds[name].append(value)
        for table in (source, result.plaintext_table, target):
            spark.sql(f"DROP TABLE IF EXISTS {table} PURGE")
    section = Section(
        TITLE,
        f"One plaintext table per repetition (format 2, 8 identity partitions, {COMMITS} INSERTs of {rows} rows of "
        "an id, an int and a 64-character string), in the shared local[2] session with the in-memory KMS: "
        "`encrypt_table` of it (stage, copy, catch-up with nothing to carry, the row comparison per partition of "
        "the original and the copy, the two renames; no proof, no purge) and, taking turns, a plain `INSERT INTO` "
        "an encrypted table of the same schema and spec `SELECT *` from the same plaintext table; the first "
        "repetition warms up. Every run was checked (rows, key id, the kept original's count). Wall seconds.")
    section.rows.append(Row("adopt", "insert", "`INSERT INTO` encrypted `SELECT * FROM` plaintext (plain)", "s",
                            seconds["insert"], short="INSERT INTO ... SELECT"))
    section.rows.append(Row("adopt", "encrypt", "`encrypt_table` (copy, verify, swap; no proof, no purge)", "s",
                            seconds["encrypt"], refs=("insert",), headline=True,
                            note=f"median {statistics.median(seconds['encrypt']):.2f} s for {total} rows"))
    section.rows.append(Row("adopt", "window", "the swap's window: no table under the name (first rename to the "
                            "return, an upper bound)", "s", seconds["window"], headline=True))
    section.goals.append(Goal(f"encrypting a {total:,}-row table (copy and verify) within 1.3x of a plain "
                              "`INSERT INTO ... SELECT` of the same rows", "encrypt", 1.3, ref="insert", at_most=True,
                              why="besides the copy: the staging table's creation, the row comparison (two "
                                  "aggregations over every row) and the renames"))
    section.goals.append(Goal("the swap's window under 5 s per table", "window", 5.0, at_most=True,
                              why="two catalog renames and, between them, a check that nothing was committed "
                                  "to the original"))
    return section


def _check(ctx: Context, source: str, result, target: str, total: int) -> None:
    spark = ctx.spark
    properties = {r.key: r.value for r in spark.sql(f"SHOW TBLPROPERTIES {source}").collect()}
    counts = [spark.table(t).count() for t in (source, result.plaintext_table, target)]
    if properties.get("encryption.key-id") != MASTER_KEY_ID or counts != [total] * 3 or not result.swapped:
        raise RuntimeError(f"encrypt_table of {source}: key id {properties.get('encryption.key-id')!r}, "
                           f"counts {counts} (expected {total}), swapped {result.swapped}")
