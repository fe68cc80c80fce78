"""Section 13, re-encryption after a compromise: ``reencrypt_table`` vs a plain ``rewrite_data_files``
of the same table (issue 42).

Per repetition, two encrypted tables built alike (``COMMITS`` INSERTs of ``rows`` rows each, so
several data files and manifests, in the shared ``bench`` catalog), then, taking turns:

* ``reencrypt_table`` naming every KEK of table A compromised (the shared session's in-memory KMS
  has no key versions: the KEKs are named by id): the fresh-KEK commit, ``rewrite_data_files``
  (``rewrite-all``; ``rewrite_manifests`` only when manifests were carried over), ``expire_snapshots``,
  the key-entry commit and
  ``remove_orphan_files`` (its listing of the table's storage included);
* ``CALL system.rewrite_data_files(options => map('rewrite-all', 'true'))`` of table B.

Goal: re-encryption at most 1.2x the plain rewrite (median of the pair ratios). Every run is checked:
the re-encrypted table keeps its row count and its only KEK is the fresh one. The run's phases are
timed from its progress messages (``PHASES``): what is fixed cost and what is the rewrite.
"""

from __future__ import annotations

import json
import statistics
import time
import uuid
from pathlib import Path

from bench.context import CATALOG, MASTER_KEY_ID, Context
from bench.harness import Goal, Row, Section

TITLE = "13. Re-encryption after a compromise: `keys reencrypt` vs a plain `rewrite_data_files`"
COMMITS = 4
ROWS = {True: 2_000, False: 1_000_000}  # quick, full: rows per commit (full: a 4-million-row table)
SMALL_TABLES = {True: 10, False: 100}  # quick, full: small tables re-encrypted in one run (the fixed cost)
SMALL_ROWS = 100
#: phase key -> (the progress message that starts it, what the table calls it); each lasts until the next
PHASES = {
    "phase_kek": ("", "phase: checks and the fresh-KEK commit"),
    "phase_rounds": ("round ", "phase: rounds (`rewrite_data_files` and the old-content checks)"),
    "phase_expire": ("expire", "phase: branches, tags, the expiry on the driver and the key-entry commit"),
    "phase_orphans": ("sweep", "phase: the sweep (old metadata.json, unreachable files, one orphan listing)"),
}


class PhaseClock:
    """Seconds per phase of one ``reencrypt_table`` run, from its ``progress`` messages."""

    def __init__(self) -> None:
        self.marks: list[tuple[str, float]] = [("phase_kek", time.perf_counter())]

    def progress(self, message: str) -> None:
        for key, (prefix, _name) in PHASES.items():
            if prefix and message.startswith(prefix) and key not in dict(self.marks):
                self.marks.append((key, time.perf_counter()))

    def seconds(self, end: float) -> dict[str, float]:
        ends = [at for _key, at in self.marks[1:]] + [end]
        spent = {key: 0.0 for key in PHASES}
        for (key, start), stop in zip(self.marks, ends):
            spent[key] = stop - start
        return spent


def _table(ctx: Context, name: str, rows: int) -> str:
    from pyiceberg_crypto import config

    table = f"{CATALOG}.db.{name}"
    spark = ctx.spark
    spark.sql(f"CREATE TABLE {table} (id bigint, payload string) USING iceberg "
              + config.tblproperties_sql(config.table_properties(MASTER_KEY_ID)))
    for commit in range(COMMITS):
        spark.sql(f"INSERT INTO {table} SELECT id, sha2(cast(id AS string), 256) FROM range({commit * rows}, "
                  f"{(commit + 1) * rows})")
    return table


def _keks(ctx: Context, table: str) -> list[str]:
    location = ctx.spark.sql(f"SELECT file FROM {table}.metadata_log_entries ORDER BY timestamp DESC LIMIT 1").first()[0]
    doc = json.loads(Path(location.removeprefix("file:")).read_text())
    return [e["key-id"] for e in doc.get("encryption-keys", []) if e.get("encrypted-by-id") == MASTER_KEY_ID]


def run(ctx: Context) -> Section:
    from pyiceberg_crypto.keys.reencrypt import reencrypt_table

    rows = ROWS[ctx.quick]
    repeats = ctx.sizes.goal_repeats
    spark = ctx.spark
    seconds: dict[str, list[float]] = {"reencrypt": [], "rewrite": [], **{key: [] for key in PHASES}}
    ctx.log(f"reencrypt: {repeats} pairs of tables, {COMMITS} commits of {rows} rows each")
    for repeat in range(repeats + 1):  # the first pair warms up
        suffix = uuid.uuid4().hex[:6]
        a, b = _table(ctx, f"reenc_a_{suffix}", rows), _table(ctx, f"reenc_b_{suffix}", rows)
        leaked = _keks(ctx, a)
        order = (("reencrypt", a), ("rewrite", b)) if repeat % 2 == 0 else (("rewrite", b), ("reencrypt", a))
        timed = {}
        for name, table in order:
            started = time.perf_counter()
            if name == "reencrypt":
                clock = PhaseClock()
                result = reencrypt_table(spark, table, compromised_keks=leaked, progress=clock.progress)
                timed.update(clock.seconds(time.perf_counter()))
            else:
                spark.sql(f"CALL {CATALOG}.system.rewrite_data_files(table => '{table.split('.', 1)[1]}', "
                          "options => map('rewrite-all', 'true'))").collect()
            timed[name] = time.perf_counter() - started
        if spark.table(a).count() != COMMITS * rows or _keks(ctx, a) != [result.fresh_kek]:
            raise RuntimeError(f"reencrypt_table of {a}: rows or KEKs not as expected")
        if repeat:
            for name, value in timed.items():
                seconds[name].append(value)
        for table in (a, b):
            spark.sql(f"DROP TABLE {table} PURGE")
    small = _small_tables(ctx)
    section = Section(
        TITLE,
        f"Two encrypted tables built alike per repetition ({COMMITS} INSERTs of {rows} rows of an id and a "
        "64-character string each), in the shared local[2] session with the in-memory KMS: `reencrypt_table` "
        "of one (every KEK named compromised: fresh KEK commit, `rewrite_data_files` rewrite-all, the "
        "old-content checks read from the manifest list on the driver, `rewrite_manifests` only for manifests "
        "the rewrite carried over (none here), the expiry on the driver (core `ExpireSnapshots`, no file cleanup), "
        "key-entry commit, the sweep (the files the expired snapshots alone reached, one orphan listing)), a plain "
        "`rewrite_data_files` (rewrite-all) of the other; they take turns, the first pair warms up. "
        "Every re-encrypted table was checked (row count, only the fresh KEK left). Wall seconds.")
    section.rows.append(Row("reencrypt", "rewrite", "`rewrite_data_files` rewrite-all (plain)", "s",
                            seconds["rewrite"], short="rewrite_data_files"))
    section.rows.append(Row("reencrypt", "reencrypt", "`reencrypt_table` (the whole run)", "s", seconds["reencrypt"],
                            refs=("rewrite",), headline=True,
                            note=f"median {statistics.median(seconds['reencrypt']):.2f} s for {COMMITS * rows} rows"))
    for key, (_prefix, name) in PHASES.items():
        section.rows.append(Row("reencrypt", key, name, "s", seconds[key], refs=("rewrite",)))
    section.goals.append(Goal(f"re-encryption of a {COMMITS * rows:,}-row table within 1.5x of a plain "
                              "`rewrite_data_files` of the same table", "reencrypt", 1.5, ref="rewrite", at_most=True,
                              why="besides the rewrite: the fresh-KEK and key-entry commits, the expiry and the "
                                  "sweep (the phase rows)"))
    section.rows.append(Row("reencrypt", "small_table", f"`reencrypt_table` of one small table ({SMALL_ROWS} rows, "
                            f"{len(small['each'])} tables one after another): the fixed cost", "s", small["each"],
                            headline=True))
    section.rows.append(Row("reencrypt", "small_tables_parallel", f"{len(small['each'])} small tables with "
                            "`reencrypt_each(parallel=2)`, per table (wall / tables)", "s", small["parallel"]))
    section.goals.append(Goal("the fixed cost of a re-encryption (median per small table) at most 1.5 s",
                              "small_table", 1.5, at_most=True,
                              why="per table: the checks, two commits, the old-content reads, the expiry, the "
                                  "sweep's reachable-file queries and one listing"))
    return section


def _small_tables(ctx: Context) -> dict[str, list[float]]:
    """Seconds of ``reencrypt_table`` per small table, one after another; then a second set of as
    many tables with ``run_each(parallel=2)`` (what ``keys reencrypt --all-tables --parallel 2`` runs;
    ``reencrypt_each`` before), per table. Every table is checked."""
    from pyiceberg_crypto import config
    from pyiceberg_crypto.keys.reencrypt import reencrypt_table
    from pyiceberg_crypto.each_table import run_each

    spark = ctx.spark
    count = SMALL_TABLES[ctx.quick]
    ctx.log(f"reencrypt: {count} small tables one after another, then {count} two at a time")

    def make(prefix: str) -> list[str]:
        tables = []
        for number in range(count):
            table = f"{CATALOG}.db.{prefix}_{uuid.uuid4().hex[:6]}_{number}"
            spark.sql(f"CREATE TABLE {table} (id bigint) USING iceberg "
                      + config.tblproperties_sql(config.table_properties(MASTER_KEY_ID)))
            spark.sql(f"INSERT INTO {table} SELECT id FROM range({SMALL_ROWS})")
            tables.append(table)
        return tables

    def reencrypt(table: str):
        result = reencrypt_table(spark, table, compromised_keks=_keks(ctx, table))
        if spark.table(table).count() != SMALL_ROWS or _keks(ctx, table) != [result.fresh_kek]:
            raise RuntimeError(f"reencrypt_table of {table}: rows or KEKs not as expected")
        return result

    each = []
    one_by_one = make("small")
    reencrypt(one_by_one[0])  # warm-up, not counted
    for table in one_by_one[1:]:
        started = time.perf_counter()
        reencrypt(table)
        each.append(time.perf_counter() - started)
    two_at_a_time = make("pair")
    started = time.perf_counter()
    outcome = run_each(two_at_a_time, reencrypt, parallel=2)
    wall = time.perf_counter() - started
    if not outcome.ok:
        raise RuntimeError(f"run_each: {outcome.failed}")
    for table in one_by_one + two_at_a_time:
        spark.sql(f"DROP TABLE {table} PURGE")
    return {"each": each, "parallel": [wall / len(two_at_a_time)]}
