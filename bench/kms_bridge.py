"""Section 3, KMS over Py4J: the cost of a Python KMS as Iceberg's JVM sees it.

* Latency / throughput of ``unwrapKey`` measured inside the driver JVM
  (``io.pyicebergcrypto.testkit.KmsBridgeBench``) from 1 and 8 plain Java threads, through the
  registered ``PythonKmsClient`` (Py4J callback into our ``InMemoryKms``) and, as the reference,
  through the all-Java ``JavaMemoryKms`` (the same AES-GCM key wrap without leaving the JVM).
* KMS calls per commit (one INSERT writing N data files) and per table load (``REFRESH TABLE``
  then a full scan), counted by the registration's stats.
"""

from __future__ import annotations

from bench.context import KMS_NAME, MASTER_KEY_ID, Context
from bench.harness import Goal, Row, Section
from bench.workloads import FILES_COLUMNS, FILES_PROPERTIES, create_table, insert_files

TITLE = "3. KMS over Py4J: JVM -> Python round trips, KMS calls per commit and per table load"
THREADS = (1, 8)


def _latencies(ctx: Context) -> list[Row]:
    jvm = ctx.spark.sparkContext._jvm
    bench = jvm.io.pyicebergcrypto.testkit.KmsBridgeBench
    sizes = ctx.sizes
    master_key = ctx.master_keys[MASTER_KEY_ID]
    calls, warmup = sizes.kms_calls_per_thread, max(100, sizes.kms_calls_per_thread // 10)
    rows: list[Row] = []
    # Every configuration takes its turn in each repeat (1 and 8 threads, Python and Java), so that
    # the goal's pair ratio (8 threads over 1) compares repetitions measured side by side.
    results: dict[tuple[str, int], list[list[float]]] = {(kind, t): [] for t in THREADS for kind in ("py", "java")}
    for _ in range(sizes.goal_repeats):
        for threads in THREADS:
            per_thread = max(1, calls // threads)
            py = list(bench.python(KMS_NAME, MASTER_KEY_ID, threads, per_thread, warmup))
            java = list(bench.java(master_key, MASTER_KEY_ID, threads, per_thread, warmup))
            if py[3] or java[3]:
                raise RuntimeError(f"KMS calls failed during the benchmark: python {py[3]:.0f}, java {java[3]:.0f}")
            results["py", threads].append(py)
            results["java", threads].append(java)
    for threads in THREADS:
        label = f"{threads} JVM thread{'s' if threads > 1 else ''}"
        for index, (metric, unit) in enumerate((("p50 latency", "us"), ("p99 latency", "us"), ("throughput", "calls/s"))):
            key = f"{metric}_{threads}"
            rows.append(Row("KMS", f"java_{key}", f"{metric}, in-JVM `JavaMemoryKms`, {label}", unit,
                            [r[index] for r in results["java", threads]], short="in-JVM KMS"))
            rows.append(Row("KMS", f"py_{key}", f"{metric}, Python KMS over Py4J, {label}", unit,
                            [r[index] for r in results["py", threads]], refs=(f"java_{key}",),
                            headline=metric != "p99 latency"))
    return rows


def _call_counts(ctx: Context) -> list[Row]:
    stats = ctx.registration.stats
    spark = ctx.spark
    rows: list[Row] = []
    for files in ctx.sizes.kms_table_files:
        table = create_table(ctx, f"files_{files}", FILES_COLUMNS, properties=FILES_PROPERTIES)
        before = (stats.wrap, stats.unwrap, stats.generate)
        insert_files(ctx, table, files)
        commit = (stats.wrap - before[0], stats.unwrap - before[1], stats.generate - before[2])
        written = spark.sql(f"SELECT count(*) FROM {table}.files").first()[0]
        spark.sql(f"REFRESH TABLE {table}")
        before = (stats.wrap, stats.unwrap, stats.generate)
        spark.sql(f"SELECT sum(id), count(v) FROM {table}").collect()
        load = (stats.wrap - before[0], stats.unwrap - before[1], stats.generate - before[2])
        for kind, counts in (("commit", commit), ("load", load)):
            first = f"{kind}_{ctx.sizes.kms_table_files[0]}"
            rows.append(Row(
                "KMS", f"{kind}_{files}",
                f"KMS calls per {'commit (one INSERT)' if kind == 'commit' else 'table load + full scan'}, "
                f"{written} data file{'s' if written != 1 else ''}", "calls", [float(sum(counts))],
                refs=() if files == ctx.sizes.kms_table_files[0] else (first,),
                short=f"{files} file{'s' if files > 1 else ''}",
                headline=files == ctx.sizes.kms_table_files[-1],
                note=f"wrap {counts[0]}, unwrap {counts[1]}, generate {counts[2]}"))
        ctx.file_tables[files] = table  # section 5 verifies the same tables
    # commits first, then loads: easier to read
    return sorted(rows, key=lambda r: (not r.key.startswith("commit"),))


def run(ctx: Context) -> Section:
    ctx.log("KMS: latency from JVM threads")
    rows = _latencies(ctx)
    ctx.log("KMS: calls per commit and per load")
    rows += _call_counts(ctx)
    return Section(
        TITLE,
        "Latency and calls/s of `unwrapKey` measured in the driver JVM from plain Java threads "
        f"({ctx.sizes.kms_calls_per_thread:,} timed calls per configuration, split over the threads, after warm-up; "
        f"the 4 configurations take turns in each of {ctx.sizes.goal_repeats} repeats); "
        "reference: the all-Java `JavaMemoryKms` (same AES-GCM key wrap, no Py4J). Call counts: the "
        "registration's stats around one INSERT writing N files into a new encrypted table, and around "
        "`REFRESH TABLE` + a full scan; reference: the 1-file table.",
        rows,
        GOALS,
    )


#: Issue 24, item 3.
GOALS = [
    Goal("Python KMS calls/s, 8 JVM threads vs 1", "py_throughput_8", 2.0, ref="py_throughput_1",
         why="Each JVM connection is served by its own Python thread: on 2 vCPUs eight JVM and eight Python "
             "threads take turns for the cores and the GIL, and every call is a cross-thread wake-up."),
    Goal("p50 latency of the Python KMS, 8 JVM threads", "py_p50 latency_8", 150.0, at_most=True,
         why="The same hand-offs (see above)."),
]
