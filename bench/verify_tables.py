"""Section 5, whole-table verification: time vs number of files, local walk vs Spark job.

Encrypted tables with N small data files each (one INSERT: 2 Spark tasks whose rolling writers
close a ~4 KB file every 1,000 rows, see :func:`bench.workloads.table_with_rolled_files`) are
verified, from the current metadata.json down to every data file, by

* the local walk ``verify_metadata(metadata_json, kms)`` in this process (no JVM; its default
  thread pool): the reference;
* the Spark job ``verify_table(spark, "bench.db.t")`` in a ``local-cluster[E,1,1024]`` application
  (E = 1 and 2 executor JVMs, each with one core and Python workers), run in a subprocess
  (``python -m bench.verify_tables --cluster ...``): the embedded metastore admits one process at a
  time, so the shared session is stopped first. One untimed ``verify_table`` of the smallest table
  warms each application up (executor and Python worker start); the local walk likewise warms up
  once, on the smallest table.

files/s = files in the report (data files + manifests + manifest list) / seconds, per run.
Driver share = ``report.timings["plan"]`` (the driver reading manifest lists and manifests) / the
run's wall time. The goal (issue): files/s at the largest size within 20 % of files/s at the
smallest, i.e. a ratio >= 0.80x in the files/s rows.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.context import FULL, KMS_NAME, QUICK, Context
from bench.harness import Goal, Row, Section, not_measured
from bench.workloads import current_metadata_json, table_with_rolled_files

TITLE = "5. Whole-table verification: local walk vs Spark job (local-cluster)"
EXECUTORS = (1, 2)
#: Quick mode starts no Spark application besides the shared session: each `local-cluster`
#: application (a JVM, its executors and their Python workers, a warm-up job) took ~100 s of a
#: quick run on a busy 2-vCPU VM, a quarter of it.
QUICK_SKIP = ("quick mode starts no Spark application besides the shared session (a `local-cluster` application, "
              "its executors and their Python workers took ~100 s of a quick run on a busy 2-vCPU VM); "
              "`make bench` measures them")


def _check(report, what: str, data_files: int) -> int:
    if not report.ok:
        bad = [(f.path, f.status) for f in report.files if f.status != "OK"][:3]
        raise RuntimeError(f"{what}: verification failed on clean tables: {bad}")
    found = sum(1 for f in report.files if f.kind == "data")
    if found != data_files:
        raise RuntimeError(f"{what}: the report lists {found} data files, the table has {data_files}")
    return len(report.files)


#: per table size: (wall seconds per run, files in the report, plan seconds per run)
Measured = dict[int, tuple[list[float], int, list[float]]]


def _local_walk(ctx: Context, tables: dict[int, tuple[str, str]]) -> tuple[Measured, Measured]:
    """The local walk of every table (its defaults: worker processes, one per core, for long task
    lists), and of the largest with one process (the issue 24 goal: cores used), all taking turns
    in each of ``goal_repeats`` repeats (the goals pair repetition i of one table with i of another)."""
    from pyiceberg_crypto.io import file_io_for
    from pyiceberg_crypto.kms import InMemoryKms
    from pyiceberg_crypto.verify import verify_metadata
    from pyiceberg_crypto.verify.runners import local_runner

    kms = InMemoryKms(ctx.master_keys)
    verify_metadata(tables[min(tables)][1], kms)  # warm-up (imports, first KMS call)
    largest = max(tables)
    contenders = [(files, "default", metadata_json, {}) for files, (_, metadata_json) in tables.items()]
    contenders.append((largest, "one", tables[largest][1],
                       {"runner": local_runner(file_io_for(tables[largest][1]), processes=1)}))
    measured: dict[tuple[int, str], tuple[list[float], int, list[float]]] = {
        (files, name): ([], 0, []) for files, name, _, _ in contenders}
    for _ in range(ctx.sizes.goal_repeats):
        for files, name, metadata_json, options in contenders:
            samples, _, plans = measured[files, name]
            start = time.perf_counter()
            report = verify_metadata(metadata_json, kms, **options)
            samples.append(time.perf_counter() - start)
            plans.append(report.timings["plan"])
            measured[files, name] = (samples, _check(report, f"local walk of {files} files ({name})", files), plans)
    out = {files: measured[files, "default"] for files in tables}
    for files in tables:
        ctx.log(f"verify: local walk, {files} files: {statistics.median(out[files][0]):.2f} s")
    return out, {largest: measured[largest, "one"]}


def _spark_job(ctx: Context, executors: int, tables: dict[int, tuple[str, str]]) -> Measured:
    request = {
        "executors": executors,
        "data_dir": str(ctx.data_dir),
        "quick": ctx.quick,
        "tables": {str(files): table for files, (table, _) in tables.items()},
        "master_keys": {k: v.hex() for k, v in ctx.master_keys.items()},
    }
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    root = Path(__file__).resolve().parents[1]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    result = subprocess.run([sys.executable, "-m", "bench.verify_tables", "--cluster"], input=json.dumps(request),
                            cwd=root, env=env, capture_output=True, text=True, timeout=3600)
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    if result.returncode != 0 or not lines:
        raise RuntimeError(f"verify_table subprocess failed ({result.returncode}): {result.stderr[-2000:]}")
    answer = json.loads(lines[-1].removeprefix("RESULT "))
    return {int(files): (samples, count, plans) for files, (samples, count, plans) in answer.items()}


def _files_per_second(measured: tuple[list[float], int, list[float]]) -> list[float]:
    samples, count, _ = measured
    return [count / s for s in samples]


def _driver_share(measured: tuple[list[float], int, list[float]]) -> list[float]:
    samples, _, plans = measured
    return [100 * plan / wall for plan, wall in zip(plans, samples)]


def _summary(measured: tuple[list[float], int, list[float]]) -> str:
    return (f"{statistics.median(_files_per_second(measured)):,.0f} files/s; "
            f"driver {statistics.median(_driver_share(measured)):.0f} %")


def run(ctx: Context) -> Section:
    tables: dict[int, tuple[str, str]] = {}
    for files in ctx.sizes.verify_files:
        ctx.log(f"verify: a table of {files} files")
        start = time.perf_counter()
        table = table_with_rolled_files(ctx, files)
        tables[files] = (table, current_metadata_json(ctx, table))
        ctx.log(f"verify: {files} files written in {time.perf_counter() - start:.0f} s")
    ctx.stop_spark()
    ctx.log("verify: local walk")
    local, one_process = _local_walk(ctx, tables)
    spark = {}
    for executors in () if ctx.quick else EXECUTORS:
        ctx.log(f"verify: Spark job, local-cluster with {executors} executor(s)")
        spark[executors] = _spark_job(ctx, executors, tables)
    sizes = ctx.sizes.verify_files
    first, last = sizes[0], sizes[-1]
    section = Section(
        TITLE,
        f"Encrypted tables of N small data files (~4 KB, 1,000 rows; one INSERT whose 2 Spark tasks roll to a "
        f"new file every 1,000 rows), current snapshot, timed runs after one warm-up on the smallest table: "
        f"{ctx.sizes.goal_repeats} of the local walk (every table and the one-process walk taking turns in each), "
        f"{ctx.sizes.verify_repeats} of each Spark job. Reference: the local walk `verify_metadata(metadata_json, kms)` (pure Python, "
        "its default thread pool). Spark job: `verify_table(spark, table)` in a `local-cluster[E,1,1024]` "
        "application (E executor JVMs with 1 core each). files/s = files in the report (data + manifests + "
        "manifest list) / seconds, per run. Driver share = `report.timings[\"plan\"]` (the driver reading the "
        "manifest list and manifests) / wall time, per run. Goal: files/s at the largest size within 20 % of "
        f"files/s at {first:,} data files (ratio >= 0.80x in the files/s rows)."
        + (f" Not measured in this run: the Spark jobs, {QUICK_SKIP}." if ctx.quick else ""),
    )
    for files in sizes:
        ref = f"local_{files}"
        section.rows.append(Row("verify", ref, f"{files:,} data files: local walk `verify_metadata`", "s",
                                local[files][0], note=_summary(local[files]), short="local walk",
                                headline=files == last))
        for executors in EXECUTORS:
            name = f"{files:,} data files: Spark job `verify_table`, {executors} executor{'s' if executors > 1 else ''}"
            if executors not in spark:
                section.rows.append(not_measured("verify", f"spark{executors}_{files}", name, "s", "quick mode (see above)",
                                                 refs=(ref,), headline=files == last))
                continue
            measured = spark[executors][files]
            section.rows.append(Row("verify", f"spark{executors}_{files}", name, "s", measured[0], refs=(ref,),
                                    note=_summary(measured), headline=files == last))
    contenders = [("local", "local walk", local), ("spark2", "Spark job, 2 executors", spark.get(2))]
    metrics = [("fps", "files/s", "files/s", _files_per_second, True),
               ("share", "driver share (plan / wall)", "%", _driver_share, False)]
    for prefix, title, unit, metric, headline in metrics:
        for key, label, measured in contenders:
            for files in sizes:
                section.rows.append(Row(
                    "verify", f"{prefix}_{key}_{files}", f"{title}, {label}, {files:,} data files", unit,
                    metric(measured[files]) if measured else [], refs=() if files == first else (f"{prefix}_{key}_{first}",),
                    short=f"{first:,} data files", headline=headline and files == last,
                    note="" if measured else "not measured in this run: quick mode (see above)"))
    for files, measured in one_process.items():
        section.rows.append(Row(
            "verify", f"fps_local1_{files}", f"files/s, local walk in one process, {files:,} data files", "files/s",
            _files_per_second(measured), short="one process"))
        section.rows.append(Row(
            "verify", f"fps_localcores_{files}",
            f"files/s, local walk in {os.cpu_count()} worker processes (its default), {files:,} data files", "files/s",
            _files_per_second(local[files]), refs=(f"fps_local1_{files}",), headline=True))
        section.goals.append(Goal(f"files/s of the local walk with {os.cpu_count()} worker processes vs one, "
                                  f"{files:,} data files", f"fps_localcores_{files}", 1.7, ref=f"fps_local1_{files}",
                                  why="The driver's share (reading the manifests) stays in one process."))
    section.goals.append(Goal(f"files/s of the local walk at {last:,} data files vs {first:,}", f"fps_local_{last}",
                              0.80, ref=f"fps_local_{first}"))
    return section


# ------------------------------------------------------------------ subprocess: one Spark application


def _cluster_main() -> int:
    """Read a JSON request on stdin, time ``verify_table`` on each table, print ``RESULT {json}``
    (per table: wall seconds per run, files in the report, ``timings["plan"]`` per run)."""
    from pyiceberg_crypto import config
    from pyiceberg_crypto.bridge import register_kms
    from pyiceberg_crypto.kms import InMemoryKms
    from pyiceberg_crypto.verify import verify_table

    request = json.loads(sys.stdin.read())
    ctx = Context(QUICK if request["quick"] else FULL, Path(request["data_dir"]), request["quick"])
    master = f"local-cluster[{request['executors']},1,1024]"
    builder = config.local_spark_builder(f"bench-verify-{request['executors']}", master=master)
    spark = config.configure_spark_with_encryption(builder, ctx.spark_settings()).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        register_kms(spark, InMemoryKms({k: bytes.fromhex(v) for k, v in request["master_keys"].items()}),
                     name=KMS_NAME)
        results = {}
        tables = request["tables"]
        verify_table(spark, tables[min(tables, key=int)])  # warm-up: executors, Python workers
        for files, table in tables.items():
            samples, plans, count = [], [], 0
            for _ in range(ctx.sizes.verify_repeats):
                start = time.perf_counter()
                report = verify_table(spark, table)
                samples.append(time.perf_counter() - start)
                plans.append(report.timings["plan"])
                count = _check(report, f"verify_table of {files} files", int(files))
            results[files] = (samples, count, plans)
        print("RESULT " + json.dumps(results), flush=True)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--cluster", action="store_true", required=True)
    parser.parse_args()
    sys.exit(_cluster_main())
