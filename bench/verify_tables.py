"""Section 5, whole-table verification: time vs number of files, local walk vs Spark job.

Encrypted tables with N small data files each (one INSERT of N Spark tasks) are
verified, from the current metadata.json down to every data file, by

* the local walk ``verify_metadata(metadata_json, kms)`` in this process (no JVM; its default
  thread pool): the reference;
* the Spark job ``verify_table(spark, "bench.db.t")`` in a ``local-cluster[E,1,1024]`` application
  (E = 1 and 2 executor JVMs, each with one core and Python workers), run in a subprocess
  (``python -m bench.verify_tables --cluster ...``): the embedded metastore admits one process at a
  time, so the shared session is stopped first. One untimed ``verify_table`` warms each
  application up (executor and Python worker start).

files/s = files in the report (data files + manifests + manifest list) / median seconds.
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
from bench.harness import Row, Section
from bench.workloads import current_metadata_json, table_with_files

TITLE = "5. Whole-table verification: local walk vs Spark job (local-cluster)"
EXECUTORS = (1, 2)


def _check(report, what: str) -> int:
    if not report.ok:
        bad = [(f.path, f.status) for f in report.files if f.status != "OK"][:3]
        raise RuntimeError(f"{what}: verification failed on clean tables: {bad}")
    return len(report.files)


def _local_walk(ctx: Context, tables: dict[int, tuple[str, str]]) -> dict[int, tuple[list[float], int]]:
    from pyiceberg_crypto.kms import InMemoryKms
    from pyiceberg_crypto.verify import verify_metadata

    kms = InMemoryKms(ctx.master_keys)
    out = {}
    for files, (_, metadata_json) in tables.items():
        verify_metadata(metadata_json, kms)  # warm-up (imports, page cache)
        samples, count = [], 0
        for _ in range(ctx.sizes.verify_repeats):
            start = time.perf_counter()
            report = verify_metadata(metadata_json, kms)
            samples.append(time.perf_counter() - start)
            count = _check(report, f"local walk of {files} files")
        out[files] = (samples, count)
    return out


def _spark_job(ctx: Context, executors: int, tables: dict[int, tuple[str, str]]) -> dict[int, tuple[list[float], int]]:
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
    return {int(files): (samples, count) for files, (samples, count) in answer.items()}


def run(ctx: Context) -> Section:
    tables: dict[int, tuple[str, str]] = {}
    for files in ctx.sizes.verify_files:
        ctx.log(f"verify: a table of {files} files")
        table = table_with_files(ctx, files)
        tables[files] = (table, current_metadata_json(ctx, table))
    ctx.stop_spark()
    ctx.log("verify: local walk")
    local = _local_walk(ctx, tables)
    spark = {}
    for executors in EXECUTORS:
        ctx.log(f"verify: Spark job, local-cluster with {executors} executor(s)")
        spark[executors] = _spark_job(ctx, executors, tables)
    section = Section(
        TITLE,
        f"Encrypted tables of N small data files (one INSERT of N Spark tasks), current snapshot, "
        f"{ctx.sizes.verify_repeats} timed runs after one warm-up. Reference: the local walk "
        "`verify_metadata(metadata_json, kms)` (pure Python, its default thread pool). Spark job: "
        "`verify_table(spark, table)` in a `local-cluster[E,1,1024]` application (E executor JVMs "
        "with 1 core each). files/s = files in the report (data + manifests + manifest list) / "
        "median seconds.",
    )
    for files in ctx.sizes.verify_files:
        samples, count = local[files]
        ref = f"local_{files}"
        section.rows.append(Row("verify", ref, f"{files} data files: local walk `verify_metadata`", "s", samples,
                                note=f"{count / statistics.median(samples):,.0f} files/s", short="local walk",
                                headline=files == ctx.sizes.verify_files[-1]))
        for executors in EXECUTORS:
            samples, count = spark[executors][files]
            section.rows.append(Row(
                "verify", f"spark{executors}_{files}",
                f"{files} data files: Spark job `verify_table`, {executors} executor{'s' if executors > 1 else ''}",
                "s", samples, refs=(ref,), note=f"{count / statistics.median(samples):,.0f} files/s",
                headline=files == ctx.sizes.verify_files[-1]))
    return section


# ------------------------------------------------------------------ subprocess: one Spark application


def _cluster_main() -> int:
    """Read a JSON request on stdin, time ``verify_table`` on each table, print ``RESULT {json}``."""
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
            samples, count = [], 0
            for _ in range(ctx.sizes.verify_repeats):
                start = time.perf_counter()
                report = verify_table(spark, table)
                samples.append(time.perf_counter() - start)
                count = _check(report, f"verify_table of {files} files")
            results[files] = (samples, count)
        print("RESULT " + json.dumps(results), flush=True)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--cluster", action="store_true", required=True)
    parser.parse_args()
    sys.exit(_cluster_main())
