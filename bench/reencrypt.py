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
ROWS = {True: 2_000, False: 100_000}  # quick, full: rows per commit
#: phase key -> (the progress message that starts it, what the table calls it); each lasts until the next
PHASES = {
    "phase_kek": ("", "phase: checks and the fresh-KEK commit"),
    "phase_rounds": ("round ", "phase: rounds (`rewrite_data_files` and the old-content checks)"),
    "phase_expire": ("expire snapshots", "phase: `expire_snapshots` and the key-entry commit"),
    "phase_orphans": ("remove orphan files", "phase: `remove_orphan_files` (and the final refresh)"),
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
    section = Section(
        TITLE,
        f"Two encrypted tables built alike per repetition ({COMMITS} INSERTs of {rows} rows of an id and a "
        "64-character string each), in the shared local[2] session with the in-memory KMS: `reencrypt_table` "
        "of one (every KEK named compromised: fresh KEK commit, `rewrite_data_files` rewrite-all, the "
        "old-content checks read from the manifest list on the driver, `rewrite_manifests` only for manifests "
        "the rewrite carried over (none here), `expire_snapshots`, key-entry commit, `remove_orphan_files`), a plain "
        "`rewrite_data_files` (rewrite-all) of the other; they take turns, the first pair warms up. "
        "Every re-encrypted table was checked (row count, only the fresh KEK left). Wall seconds.")
    section.rows.append(Row("reencrypt", "rewrite", "`rewrite_data_files` rewrite-all (plain)", "s",
                            seconds["rewrite"], short="rewrite_data_files"))
    section.rows.append(Row("reencrypt", "reencrypt", "`reencrypt_table` (the whole run)", "s", seconds["reencrypt"],
                            refs=("rewrite",), headline=True,
                            note=f"median {statistics.median(seconds['reencrypt']):.2f} s for {COMMITS * rows} rows"))
    for key, (_prefix, name) in PHASES.items():
        section.rows.append(Row("reencrypt", key, name, "s", seconds[key], refs=("rewrite",)))
    section.goals.append(Goal("re-encryption within 1.2x of a plain `rewrite_data_files` of the same table",
                              "reencrypt", 1.2, ref="rewrite", at_most=True,
                              why="besides the rewrite: the fresh-KEK and key-entry commits, `expire_snapshots` "
                                  "and `remove_orphan_files` (a listing of the table's storage), Spark actions "
                                  "of a few jobs each or Iceberg commits (the phase rows)"))
    return section
