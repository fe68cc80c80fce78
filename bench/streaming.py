"""Section 11, streaming: micro-batch duration into an encrypted table vs a plaintext one, and the lag
of :class:`~pyiceberg_crypto.verify.VerifyEachCommit` from a commit to its verification.

The stream is the same for every row: Spark's ``rate-micro-batch`` source (a fixed number of rows per
micro-batch, in 10 partitions), written with ``writeStream.toTable`` (no shuffle: each batch commits
10 data files), processing-time trigger of 1 s, in the shared ``local[2]`` session.

* Micro-batch duration: per repetition, one query into the encrypted table and one into the
  plaintext table, taking turns (a new checkpoint each time); a repetition's figure is the median
  ``durationMs.triggerExecution`` of its batches after the first (which plans the query). Goal:
  encrypted at most 1.10x plaintext (median of the pair ratios).
* Lag: one query into a fresh encrypted table with a ``VerifyEachCommit`` listener (ledger in the
  bench data directory); per commit, the seconds from the snapshot's ``committed_at`` to the end
  of the check that found it OK (``listener.verified_at``). Goal: median at most 2 s.
"""

from __future__ import annotations

import shutil
import statistics
import time

from bench.context import Context
from bench.harness import Goal, Row, Section
from bench.workloads import create_table

TITLE = "11. Streaming: micro-batch duration encrypted vs plaintext, and VerifyEachCommit lag"

PARTITIONS = 10  # files per commit
TRIGGER = "1 second"
COLUMNS = "timestamp timestamp, value bigint"
#: no shuffle before the write: each of the batch's PARTITIONS tasks writes one file
TABLE_PROPERTIES = {"write.distribution-mode": "none"}


def _stream(ctx: Context, table: str, checkpoint: str):
    return (ctx.spark.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", ctx.sizes.stream_rows_per_batch)
            .option("numPartitions", PARTITIONS)
            .load()
            .writeStream.option("checkpointLocation", checkpoint)
            .trigger(processingTime=TRIGGER)
            .toTable(table))


def _run_batches(ctx: Context, table: str, batches: int, tag: str) -> list[float]:
    """Run one query until it committed ``batches`` batches; the trigger durations (s) of all but the first."""
    checkpoint = ctx.data_dir / "streaming" / f"checkpoint-{tag}"
    shutil.rmtree(checkpoint, ignore_errors=True)
    query = _stream(ctx, table, str(checkpoint))
    try:
        deadline = time.monotonic() + 120 + 30 * batches
        while len([p for p in query.recentProgress if p["numInputRows"]]) < batches:
            if query.exception() is not None:
                raise RuntimeError(f"stream into {table} failed: {query.exception()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"stream into {table}: {batches} batches not done in time")
            time.sleep(0.2)
    finally:
        query.stop()
    progress = [p for p in query.recentProgress if p["numInputRows"]][:batches]
    return [p["durationMs"]["triggerExecution"] / 1000 for p in progress[1:]]


def _micro_batches(ctx: Context) -> tuple[list[float], list[float]]:
    sizes = ctx.sizes
    encrypted = create_table(ctx, "stream_encrypted", COLUMNS, properties=TABLE_PROPERTIES)
    plaintext = create_table(ctx, "stream_plaintext", COLUMNS, encrypted=False, properties=TABLE_PROPERTIES)
    seconds: dict[str, list[float]] = {"encrypted": [], "plaintext": []}
    for repetition in range(sizes.goal_repeats + 1):  # the first round warms up, untimed
        for name, table in (("encrypted", encrypted), ("plaintext", plaintext)):
            durations = _run_batches(ctx, table, sizes.stream_batches, f"{name}-{repetition}")
            if repetition:
                seconds[name].append(statistics.median(durations))
        ctx.log(f"streaming: repetition {repetition} of {sizes.goal_repeats} "
                f"({'warm-up' if not repetition else 'timed'})")
    return seconds["encrypted"], seconds["plaintext"]


def _lag(ctx: Context) -> tuple[list[float], int]:
    """Seconds from each commit to its verification, and the number of checks that ran."""
    from pyiceberg_crypto.verify import VerifyEachCommit

    sizes = ctx.sizes
    table = create_table(ctx, "stream_verified", COLUMNS, properties=TABLE_PROPERTIES)
    ledger = ctx.data_dir / "streaming" / "stream_verified.ledger.json"
    ledger.unlink(missing_ok=True)
    listener = VerifyEachCommit(ctx.spark, table, state=str(ledger), on_failure="log")
    ctx.spark.streams.addListener(listener)
    try:
        _run_batches(ctx, table, sizes.stream_lag_batches, "lag")
        listener.wait(300)
        listener.close()
    finally:
        ctx.spark.streams.removeListener(listener)
    if listener.failures or listener.errors:
        raise RuntimeError(f"VerifyEachCommit on {table}: {len(listener.failures)} failure(s), errors {listener.errors}")
    committed = {row[0]: row[1].timestamp() for row in ctx.spark.sql(
        f"SELECT snapshot_id, committed_at FROM {table}.snapshots").collect()}
    missing = set(committed) - set(listener.verified_at)
    if missing:
        raise RuntimeError(f"VerifyEachCommit on {table}: snapshots {sorted(missing)} never verified")
    return [listener.verified_at[s] - committed[s] for s in committed], len(listener.reports)


def run(ctx: Context) -> Section:
    sizes = ctx.sizes
    (ctx.data_dir / "streaming").mkdir(parents=True, exist_ok=True)
    ctx.log(f"streaming: {sizes.goal_repeats} repetitions x 2 queries of {sizes.stream_batches} micro-batches "
            f"({sizes.stream_rows_per_batch:,} rows, {PARTITIONS} files each)")
    encrypted, plaintext = _micro_batches(ctx)
    ctx.log(f"streaming: VerifyEachCommit lag over {sizes.stream_lag_batches} commits")
    lags, checks = _lag(ctx)
    section = Section(
        TITLE,
        f"One stream for every row: `rate-micro-batch` ({sizes.stream_rows_per_batch:,} rows per micro-batch in "
        f"{PARTITIONS} partitions, so each commit adds {PARTITIONS} data files), `writeStream.toTable` with a "
        f"processing-time trigger of {TRIGGER}, shared `local[2]` session, Python KMS over Py4J. Micro-batch "
        f"duration: `durationMs.triggerExecution` of each batch after the first of a query (median per query); "
        f"{sizes.goal_repeats} repetitions, each one query into the encrypted table and one into the plaintext "
        f"table taking turns, after one untimed round; a query of {sizes.stream_batches} batches per table per "
        "repetition. Lag: a query into a fresh encrypted table with `VerifyEachCommit` (`on_failure=\"log\"`), "
        f"{sizes.stream_lag_batches} commits; per commit, `listener.verified_at[snapshot] - committed_at` "
        f"(all {len(lags)} snapshots verified OK, in {checks} checks: checks asked for while one runs merge).",
    )
    section.rows += [
        Row(section.title, "batch_plain", "micro-batch, plaintext table", "s", plaintext, short="plaintext"),
        Row(section.title, "batch_encrypted", "micro-batch, encrypted table", "s", encrypted, refs=("batch_plain",),
            headline=True),
        Row(section.title, "lag", "VerifyEachCommit lag, commit to verified", "s", lags,
            note=f"{len(lags)} commits of {PARTITIONS} files; {checks} checks"),
    ]
    section.goals += [
        Goal("micro-batch duration, encrypted vs plaintext", "batch_encrypted", 1.10, ref="batch_plain",
             at_most=True, why="the KMS calls per commit (wrap of the manifest list key) and AES-GCM of each file"),
        Goal("VerifyEachCommit lag, median, 10-file commits", "lag", 2.0, at_most=True,
             why="a check is an incremental verify_table: a Spark job planned on the driver"),
    ]
    return section
