"""Section 8, the Python KMS on a cluster: executors on other hosts calling it over TLS, vs loopback.

The same Spark application (``python -m bench.cluster_kms --app CONFIG.json``) runs twice:

* **namespace cluster**: the Spark standalone cluster of ``pyiceberg_crypto/testing/netns.py`` (master, two
  workers, driver, each in its own Linux network namespace, joined by a bridge); the driver registers
  its KMS with ``bind_address=<driver address>``, so executors call it over TLS across the bridge,
  as on a real cluster;
* **YARN**: the YARN cluster of ``pyiceberg_crypto/testing/yarn.py`` (a ResourceManager and two
  NodeManagers in namespaces of their own, the driver on the edge node in client mode): executors in
  NodeManager containers call the driver's KMS over TLS, as on EMR or Dataproc;
* **loopback**: ``local-cluster[2,1,1024]`` on this machine, the KMS on 127.0.0.1 (token, no TLS).

In each: ``unwrapKey`` latency and calls/s from 1 and 8 JVM threads inside one executor (the test
kit's ``ExecutorKmsBench``: a ``PythonKmsClient`` made on the driver and shipped in the task, exactly
as Iceberg ships it), the same from the driver JVM (Py4J, no network) as the floor, then
``expire_snapshots`` on a table of N snapshots (one INSERT OVERWRITE of one data file each, so the
cleanup deletes N-1 data files, manifests and manifest lists in Spark tasks that unwrap the KEK on
executors): wall time, Spark tasks, and KMS calls counted by the registration.

The namespace clusters need root, ``ip``, ``iptables`` and ``tcpdump`` (``make test`` installs the last
two), YARN also its jars (``make yarn-jars``); elsewhere their rows are left out and the section says why.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.context import Context
from bench.harness import Row, Section, not_measured

TITLE = "8. The Python KMS from executors: TLS across network namespaces vs loopback"
ROOT = Path(__file__).resolve().parents[1]
KMS_KEY = "bench-key"
THREADS = (1, 8)
RESULT_PREFIX = "BENCH "
#: (config key, how the table names it, its reference in the same run)
ENVIRONMENTS = {
    "netns": "executor on another host, TLS",
    "yarn": "executor in a YARN container on another host, TLS",
    "loopback": "local-cluster executor, loopback",
}


# --- the application (runs in the driver's namespace, or on this machine for loopback) ------------


def _executor_latencies(spark, threads: int, per_thread: int, warmup: int, repeats: int) -> dict:
    jvm, jsc = spark.sparkContext._jvm, spark.sparkContext._jsc
    samples = {"p50": [], "p99": [], "calls_per_s": [], "hosts": set()}
    for _ in range(repeats):
        task = jvm.io.pyicebergcrypto.testkit.ExecutorKmsBench.forRegisteredKms(
            "default", KMS_KEY, threads, per_thread, warmup)
        [line] = list(jsc.parallelize(jvm.java.util.Collections.nCopies(1, 0), 1).mapPartitions(task).collect())
        host, p50, p99, calls_per_s, errors = line.split(",")
        if float(errors):
            raise RuntimeError(f"{errors} KMS calls failed on executor {host}")
        samples["p50"].append(float(p50))
        samples["p99"].append(float(p99))
        samples["calls_per_s"].append(float(calls_per_s))
        samples["hosts"].add(host)
    samples["hosts"] = sorted(samples["hosts"])
    return samples


def _driver_latencies(spark, threads: int, per_thread: int, warmup: int, repeats: int) -> dict:
    bench = spark.sparkContext._jvm.io.pyicebergcrypto.testkit.KmsBridgeBench
    runs = [list(bench.python("default", KMS_KEY, threads, per_thread, warmup)) for _ in range(repeats)]
    if any(run[3] for run in runs):
        raise RuntimeError("KMS calls failed in the driver JVM")
    return {"p50": [r[0] for r in runs], "p99": [r[1] for r in runs], "calls_per_s": [r[2] for r in runs]}


def _marker_job(spark, group: str) -> int:
    """Run a one-task job in ``group`` and return its id (job ids are sequential in an application)."""
    spark.sparkContext.setJobGroup(group, group)
    spark.sparkContext.parallelize([0], 1).count()
    [job_id] = spark.sparkContext.statusTracker().getJobIdsForGroup(group)
    return job_id


def _tasks_between(spark, first_job: int, last_job: int) -> int:
    """Spark tasks of the jobs that ran between two marker jobs (Iceberg sets its own job groups)."""
    tracker = spark.sparkContext.statusTracker()
    tasks = 0
    for job_id in range(first_job + 1, last_job):
        job = tracker.getJobInfo(job_id)
        for stage_id in job.stageIds if job else ():
            stage = tracker.getStageInfo(stage_id)
            tasks += stage.numTasks if stage else 0
    return tasks


def _expire(spark, registration, snapshots: int) -> dict:
    from pyiceberg_crypto import config

    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.db")
    spark.sql(f"CREATE TABLE lake.db.expiring (id bigint) USING iceberg "
              f"{config.tblproperties_sql(config.table_properties(KMS_KEY))}")
    for index in range(snapshots):
        spark.sql(f"INSERT OVERWRITE lake.db.expiring SELECT id FROM range({index * 10}, {index * 10 + 10}, 1, 1)")
    spark.sql("REFRESH TABLE lake.db.expiring")
    first_job = _marker_job(spark, "bench-before-expire")
    before = registration.stats.snapshot()
    start = time.perf_counter()
    result = spark.sql("CALL lake.system.expire_snapshots(table => 'db.expiring', "
                       "older_than => TIMESTAMP '2999-01-01 00:00:00', retain_last => 1)").first().asDict()
    seconds = time.perf_counter() - start
    calls = registration.stats.since(before)
    tasks = _tasks_between(spark, first_job, _marker_job(spark, "bench-after-expire"))
    count = spark.sql("SELECT count(*) FROM lake.db.expiring").first()[0]
    if count != 10:
        raise RuntimeError(f"expire_snapshots left {count} rows, not 10")
    return {"seconds": seconds, "wrap": calls.wrap, "unwrap": calls.unwrap, "tasks": tasks,
            "deleted": {k: v for k, v in result.items() if k.startswith("deleted")}}


def app(cfg: dict) -> dict:
    """Run the workload in a fresh session on ``cfg['spark_conf']``'s master; return the figures."""
    from pyspark.sql import SparkSession

    from pyiceberg_crypto import config
    from pyiceberg_crypto.bridge import register_kms
    from pyiceberg_crypto.kms import InMemoryKms

    workdir = Path(cfg["workdir"])
    os.chdir(workdir)
    settings = config.spark_settings("lake", warehouse=workdir / "wh")
    builder = SparkSession.builder.appName("bench-cluster-kms").config("spark.jars", cfg["testkit_jar"])
    for key, value in cfg["spark_conf"].items():
        builder = builder.config(key, value)
    spark = config.configure_spark_with_encryption(builder, settings).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        registration = register_kms(spark, InMemoryKms({KMS_KEY: os.urandom(16)}), bind_address=cfg["bind_address"],
                                    kms_timeout=30)
        calls, repeats = cfg["calls_per_thread"], cfg["repeats"]
        figures: dict = {"tls": registration.tls, "address": registration.address, "latency": {}}
        for threads in THREADS:
            per_thread = max(1, calls // threads)
            warmup = max(20, per_thread // 10)
            figures["latency"][str(threads)] = {
                "executor": _executor_latencies(spark, threads, per_thread, warmup, repeats),
                "driver": _driver_latencies(spark, threads, per_thread, warmup, repeats),
            }
        figures["expire"] = _expire(spark, registration, cfg["snapshots"])
        return figures
    finally:
        spark.stop()


# --- the section ------------------------------------------------------------------------------------


def _config(ctx: Context, name: str, spark_conf: dict, bind_address: str) -> Path:
    from tests.testkit import testkit_jar

    workdir = ctx.data_dir / f"cluster-kms-{name}"
    shutil.rmtree(workdir, ignore_errors=True)  # a fresh warehouse and metastore each run
    workdir.mkdir(parents=True)
    path = workdir / "config.json"
    path.write_text(json.dumps({
        "workdir": str(workdir), "spark_conf": spark_conf, "bind_address": bind_address,
        "testkit_jar": str(testkit_jar()), "calls_per_thread": ctx.sizes.cluster_kms_calls_per_thread,
        "repeats": ctx.sizes.repeats, "snapshots": ctx.sizes.cluster_snapshots,
    }))
    return path


def _parse(completed: subprocess.CompletedProcess, name: str) -> dict:
    lines = [line for line in completed.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if completed.returncode != 0 or not lines:
        raise RuntimeError(f"the {name} application failed (exit {completed.returncode}):\n{completed.stderr[-3000:]}")
    return json.loads(lines[-1][len(RESULT_PREFIX):])


def _app_command(config_path: Path) -> list[str]:
    return [sys.executable, "-m", "bench.cluster_kms", "--app", str(config_path)]


def _app_env(base: dict[str, str]) -> dict[str, str]:
    env = dict(base)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["PYSPARK_PYTHON"] = sys.executable
    return env


def _run_loopback(ctx: Context) -> dict:
    ctx.log("cluster KMS: local-cluster[2,1,1024], KMS on loopback")
    path = _config(ctx, "loopback", {"spark.master": "local-cluster[2,1,1024]", "spark.ui.enabled": "false",
                                     "spark.sql.shuffle.partitions": "2"}, "127.0.0.1")
    completed = subprocess.run(_app_command(path), env=_app_env(os.environ), cwd=path.parent, capture_output=True,
                               text=True, timeout=1800)
    return _parse(completed, "loopback")


def _run_netns(ctx: Context) -> dict:
    from pyiceberg_crypto.testing.netns import NetnsCluster

    ctx.log("cluster KMS: starting the network-namespace cluster (master, 2 workers, driver)")
    cluster = NetnsCluster.start(ctx.data_dir / "netns-cluster")
    try:
        path = _config(ctx, "netns", cluster.driver_conf(), cluster.driver.address)
        ctx.log("cluster KMS: executors in other namespaces, KMS over TLS")
        completed = cluster.run(cluster.driver, _app_command(path), env=_app_env(cluster.driver_env()),
                                cwd=path.parent, timeout=1800)
        return _parse(completed, "namespace cluster")
    finally:
        cluster.close()


def _run_yarn(ctx: Context) -> dict:
    from pyiceberg_crypto.testing.yarn import YarnCluster

    ctx.log("cluster KMS: starting the YARN cluster (ResourceManager, 2 NodeManagers, edge node)")
    cluster = YarnCluster.start(ctx.data_dir / "yarn-cluster")
    try:
        conf = {**cluster.spark_conf("client"), "spark.pyspark.python": sys.executable}
        path = _config(ctx, "yarn", conf, cluster.edge.address)
        ctx.log("cluster KMS: executors in YARN containers, KMS on the edge node over TLS")
        completed = cluster.run(cluster.edge, _app_command(path), env=_app_env(cluster.submit_env()),
                                cwd=path.parent, timeout=1800)
        return _parse(completed, "YARN")
    finally:
        cluster.close()


def _latency_rows(results: dict, skipped: dict[str, str]) -> list[Row]:
    """The latency rows of each environment measured (``results``) or left out (``skipped``: the
    reason; its rows keep their place in the table, without samples)."""
    rows: list[Row] = []
    metrics = (("p50", "p50 latency", "us"), ("p99", "p99 latency", "us"), ("calls_per_s", "throughput", "calls/s"))
    not_run = f"not measured in this run: {skipped.get('loopback', '')}"
    for threads in THREADS:
        label = f"{threads} JVM thread{'s' if threads > 1 else ''}"
        for metric, metric_name, unit in metrics:
            driver_key = f"driver_{metric}_{threads}"
            loop = results["loopback"]["latency"][str(threads)] if "loopback" in results else None
            rows.append(Row("cluster KMS", driver_key, f"{metric_name}, driver JVM -> Python KMS (Py4J), {label}",
                            unit, loop["driver"][metric] if loop else [], short="driver JVM",
                            note="" if loop else not_run))
            rows.append(Row("cluster KMS", f"loopback_{metric}_{threads}",
                            f"{metric_name}, {ENVIRONMENTS['loopback']}, {label}", unit,
                            loop["executor"][metric] if loop else [], refs=(driver_key,), short="loopback",
                            note="" if loop else not_run))
            for name in ("netns", "yarn"):
                refs = (f"loopback_{metric}_{threads}", driver_key) + ((f"netns_{metric}_{threads}",)
                                                                       if name == "yarn" and "netns" in results else ())
                if name in results:
                    measured = results[name]["latency"][str(threads)]
                    rows.append(Row("cluster KMS", f"{name}_{metric}_{threads}",
                                    f"{metric_name}, {ENVIRONMENTS[name]}, {label}", unit,
                                    measured["executor"][metric], refs=refs,
                                    headline=name == "netns" and metric != "p99",
                                    note="executor " + ", ".join(measured["executor"]["hosts"])))
                elif name in skipped:
                    rows.append(not_measured("cluster KMS", f"{name}_{metric}_{threads}",
                                             f"{metric_name}, {ENVIRONMENTS[name]}, {label}", unit, skipped[name],
                                             refs=refs, headline=name == "netns" and metric != "p99"))
    return rows


def _expire_rows(results: dict, skipped: dict[str, str], snapshots: int) -> list[Row]:
    rows: list[Row] = []
    for name in ("loopback", "netns", "yarn"):
        if name not in results and name not in skipped:
            continue
        refs = ("expire_loopback",) if name != "loopback" else ()
        wall = f"`expire_snapshots` wall time, {snapshots} snapshots, {ENVIRONMENTS[name]}"
        calls = f"KMS calls during `expire_snapshots`, {ENVIRONMENTS[name]}"
        calls_refs = ("expire_calls_loopback",) if name != "loopback" else ()
        if name not in results:
            rows.append(not_measured("cluster KMS", f"expire_{name}", wall, "s", skipped[name], refs=refs,
                                     short="loopback", headline=name == "netns"))
            rows.append(not_measured("cluster KMS", f"expire_calls_{name}", calls, "calls", skipped[name],
                                     refs=calls_refs, short="loopback"))
            continue
        expire = results[name]["expire"]
        deleted = ", ".join(f"{k.removeprefix('deleted_').removesuffix('_count')} {v}"
                            for k, v in expire["deleted"].items() if v)
        rows.append(Row("cluster KMS", f"expire_{name}", wall, "s", [expire["seconds"]], refs=refs, short="loopback",
                        headline=name == "netns", note=f"{expire['tasks']} Spark tasks; deleted {deleted}"))
        rows.append(Row("cluster KMS", f"expire_calls_{name}", calls, "calls", [float(expire["wrap"] + expire["unwrap"])],
                        refs=calls_refs, short="loopback", note=f"wrap {expire['wrap']}, unwrap {expire['unwrap']}"))
    return rows


#: Why quick mode measures nothing here: each environment is a Spark application of its own.
QUICK_SKIP = ("quick mode leaves this section out: it starts three Spark applications of their own (a "
              "`local-cluster`, a four-JVM standalone cluster and a YARN cluster in network namespaces), "
              "minutes of the quick run on 2 vCPUs; `make bench` measures it")


def run(ctx: Context) -> Section:
    from pyiceberg_crypto.testing.netns import ClusterUnavailableError, check_namespaces_possible
    from pyiceberg_crypto.testing.yarn import check_yarn_jars

    results: dict = {}
    skipped: dict[str, str] = {}
    missing = ""
    if ctx.quick:
        skipped = {"loopback": "quick mode (see above)", "netns": "quick mode (see above)",
                   "yarn": "quick mode (see above)"}
        missing = f" Not measured in this run: {QUICK_SKIP}."
        ctx.log(f"cluster KMS: skipped, {QUICK_SKIP}")
    else:
        results["loopback"] = _run_loopback(ctx)
        try:
            check_namespaces_possible()
        except ClusterUnavailableError as exc:
            missing = f" The namespace cluster rows are missing from this run: {exc}."
        else:
            results["netns"] = _run_netns(ctx)
            try:
                check_yarn_jars()
            except ClusterUnavailableError as exc:
                missing = f" The YARN rows are missing from this run: {exc}."
                skipped["yarn"] = str(exc)
            else:
                results["yarn"] = _run_yarn(ctx)
    sizes = ctx.sizes
    description = (
        "`unwrapKey` from inside one executor JVM through the `PythonKmsClient` Iceberg ships in its tasks "
        f"(test kit `ExecutorKmsBench`; {sizes.cluster_kms_calls_per_thread} calls split over the JVM threads, "
        f"after a warm-up, {sizes.repeats} repeats): on the Spark standalone cluster of `pyiceberg_crypto/testing/netns.py` "
        "(executors in other network namespaces, the driver's KMS registered with `bind_address`, so every call "
        "is TLS across the bridge), on the YARN cluster of `pyiceberg_crypto/testing/yarn.py` (executors in "
        "NodeManager containers, the driver in client mode on the edge node) "
        "and on `local-cluster[2,1,1024]` with the KMS on loopback; the driver JVM's "
        "own Py4J calls are the floor. Then `expire_snapshots(retain_last => 1)` on a table of "
        f"{sizes.cluster_snapshots} snapshots (INSERT OVERWRITE of one data file each): wall time, Spark tasks "
        "and KMS calls counted by the registration (one sample each: the table is consumed)." + missing)
    if "netns" in results:
        tls = results["netns"]
        description += f" Namespace cluster: KMS at {tls['address']}, TLS {'on' if tls['tls'] else 'OFF'}."
    if "yarn" in results:
        tls = results["yarn"]
        description += f" YARN: KMS at {tls['address']}, TLS {'on' if tls['tls'] else 'OFF'}."
    return Section(TITLE, description,
                   _latency_rows(results, skipped) + _expire_rows(results, skipped, sizes.cluster_snapshots))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the cluster KMS benchmark's Spark application")
    parser.add_argument("--app", type=Path, required=True, help="config.json written by the section")
    args = parser.parse_args(argv)
    figures = app(json.loads(args.app.read_text()))
    print(RESULT_PREFIX + json.dumps(figures), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
