"""Spark applications whose driver runs in the network-namespace cluster's driver namespace, with
executors on two workers in namespaces of their own (pyiceberg_crypto/testing/netns.py). Run by
tests/cluster/test_cluster.py as ``python cluster_app.py SCENARIO CONFIG.json``:

- ``main``: the package's public API with its default jar path (``spark.jars.packages``): the
  README's ten lines with ``bind_address``, INSERT / UPDATE / MERGE / DELETE, ``expire_snapshots``,
  ``remove_orphan_files``, ``verify_table`` (file checks in Python tasks on the workers), the driver
  re-registering its KMS mid-application, ``DROP TABLE ... PURGE``, then a worker killed during an
  INSERT (``spark.task.maxFailures`` 4: tasks rerun on the other worker).
- ``faults``: ``spark.task.maxFailures`` 1, so that a task failing on one worker fails its
  statement: the KMS port blocked from one worker only, and a KMS registered on loopback.

Machine-level actions (kill a worker, add a firewall rule) are asked of the test process, which
owns the namespaces, through files in ``WORKDIR/requests`` (:func:`ask`). Prints one
``RESULT {json}`` line per step (tests/integration/kms_cluster_app.py's format) and writes the
secrets that must never cross the network in clear (KEKs, DEKs, tokens, master key) to
``WORKDIR/secrets.json``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from pathlib import Path

from pyspark.sql import SparkSession

from pyiceberg_crypto import config
from pyiceberg_crypto.bridge import register_kms
from pyiceberg_crypto.formats.key_metadata import StandardKeyMetadata
from pyiceberg_crypto.kms import KeystoreKms
from tests.integration.kms_cluster_app import report, step
from tests.testkit import eventually

CATALOG = "lake"
KMS_TIMEOUT_SECONDS = 5


class RecordingKeystoreKms(KeystoreKms):
    """The keystore KMS, remembering every KEK it wrapped or unwrapped (to look for them on the wire)."""

    def __init__(self, path):
        super().__init__(path)
        self.keks: set[bytes] = set()

    def wrap_key(self, key, wrapping_key_id):
        self.keks.add(bytes(key))
        return super().wrap_key(key, wrapping_key_id)

    def unwrap_key(self, wrapped, wrapping_key_id):
        key = super().unwrap_key(wrapped, wrapping_key_id)
        self.keks.add(bytes(key))
        return key


def ask(workdir: Path, action: str, timeout: float = 120, **arguments) -> dict:
    """Ask the test process to do ``action`` (it owns the namespaces) and wait until it is done."""
    requests = workdir / "requests"
    requests.mkdir(exist_ok=True)
    number = len(list(requests.glob("*.json")))
    request = requests / f"{number:03d}.json"
    request.with_suffix(".tmp").write_text(json.dumps({"action": action, **arguments}))
    request.with_suffix(".tmp").rename(request)
    done = request.with_suffix(".done")
    eventually(done.exists, timeout, message=f"the test to do {action} {arguments}")
    return json.loads(done.read_text())


def session(settings: dict, cluster_conf: dict, app_name: str, max_failures: int) -> SparkSession:
    """The README's way: the package's settings (default jar path) on an ordinary builder."""
    builder = SparkSession.builder.appName(app_name)
    for key, value in cluster_conf.items():
        builder = builder.config(key, value)
    builder = builder.config("spark.task.maxFailures", str(max_failures))
    if max_failures == 1:  # tasks go to any free executor at once: each worker gets one of two tasks
        builder = builder.config("spark.locality.wait", "0")
    spark = config.configure_spark_with_encryption(builder, settings).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def executor_hosts(spark) -> list[str]:
    """Where a small job's tasks ran (the executors' addresses, one per task)."""
    def host(_):
        import os as os_

        return [os_.environ.get("NM_HOST") or os_.environ.get("SPARK_LOCAL_IP", "?")]  # YARN or standalone

    return sorted(set(spark.sparkContext.parallelize(range(8), 8).mapPartitions(host).collect()))


def data_keys_of(spark, table: str) -> set[bytes]:
    rows = spark.sql(f"SELECT key_metadata FROM {table}.all_files").collect()
    return {StandardKeyMetadata.parse(bytes(row[0])).encryption_key for row in rows}


def totals(spark, table: str) -> list:
    return list(spark.sql(f"SELECT count(*), sum(id), count(DISTINCT id) FROM {table}").first())


def current_snapshot(spark, table: str):
    return spark.sql(f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at DESC LIMIT 1").first()[0]


def plant_orphan(table_dir: Path) -> Path:
    orphan = next((table_dir / "data").glob("*.parquet")).with_name("orphan-from-a-failed-write.parquet")
    orphan.write_bytes(b"not a table file")
    os.utime(orphan, (time.time() - 7 * 86400,) * 2)
    return orphan


REMOVE_ORPHANS = ("CALL lake.system.remove_orphan_files(table => 'db.t', "
                  "older_than => TIMESTAMP '{:%Y-%m-%d %H:%M:%S}')")


def remove_orphans_sql() -> str:
    from datetime import datetime, timedelta

    return REMOVE_ORPHANS.format(datetime.now() - timedelta(days=2))


def advertised_address(spark, bind_address: str) -> str:
    """Where executors reach a KMS bound to ``bind_address`` (the wildcard: spark.driver.host)."""
    return spark.conf.get("spark.driver.host") if bind_address == "0.0.0.0" else bind_address


def main_scenario(spark, kms, cfg: dict, workdir: Path) -> dict:
    driver_address = cfg["driver_address"]
    tokens, data_keys = [], set()
    registration = register_kms(spark, kms, bind_address=driver_address, kms_timeout=KMS_TIMEOUT_SECONDS)
    tokens.append(registration._server.auth_token)
    report("registered", registration.tls and registration.address == driver_address,
           port=registration.port, address=registration.address, advertised=advertised_address(spark, driver_address))
    listed = spark.sparkContext._jsc.sc().listJars().mkString(",")
    report("jars shipped to executors", "iceberg-spark-runtime" in listed and "pyiceberg-crypto-bridge" in listed,
           jars=listed)
    report("executors", True, hosts=executor_hosts(spark))

    # The README's ten lines (bind_address added: the one setting a cluster needs).
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.shop")
    spark.sql("CREATE TABLE lake.shop.orders (id bigint, item string) USING iceberg "
              + config.tblproperties_sql(config.table_properties("orders-key")))
    spark.sql("INSERT INTO lake.shop.orders VALUES (1, 'apple')")
    step("ten lines", lambda: [tuple(r) for r in spark.table("lake.shop.orders").collect()], expected=[(1, "apple")])

    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.db")
    props = config.table_properties("orders-key", extra={"write.delete.mode": "merge-on-read",
                                                         "write.update.mode": "merge-on-read",
                                                         "write.merge.mode": "merge-on-read"})
    spark.sql(f"CREATE TABLE lake.db.t (id bigint, v string) USING iceberg {config.tblproperties_sql(props)}")
    model = {}
    for start in (0, 1000, 2000):
        spark.sql(f"INSERT INTO lake.db.t SELECT id, 'v' || id FROM range({start}, {start + 1000}, 1, 4)")
        model.update({i: f"v{i}" for i in range(start, start + 1000)})
    spark.sql("UPDATE lake.db.t SET v = 'updated' WHERE id % 5 = 0")
    model.update({i: "updated" for i in model if i % 5 == 0})
    spark.createDataFrame([(i, "merged") for i in range(2900, 3100)], "id bigint, v string").createOrReplaceTempView("src")
    spark.sql("MERGE INTO lake.db.t t USING src s ON t.id = s.id "
              "WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *")
    model.update({i: "merged" for i in range(2900, 3100)})
    spark.sql("DELETE FROM lake.db.t WHERE id % 7 = 0")
    model = {i: v for i, v in model.items() if i % 7}
    step("insert update merge delete", lambda: sorted(tuple(r) for r in spark.table("lake.db.t").collect()),
         expected=sorted(model.items()))
    data_keys |= data_keys_of(spark, "lake.db.t")

    # Maintenance: Iceberg reads manifest lists on executors there, so they unwrap the KEK over TLS.
    orphan = plant_orphan(workdir / "wh" / "db.db" / "t")
    before = registration.stats.snapshot()
    step("expire_snapshots", lambda: spark.sql(
        "CALL lake.system.expire_snapshots(table => 'db.t', older_than => TIMESTAMP '2999-01-01 00:00:00', "
        "retain_last => 2)").collect())
    step("remove_orphan_files", lambda: spark.sql(remove_orphans_sql()).collect())
    report("orphan removed", not orphan.exists(), kms_unwraps=registration.stats.since(before).unwrap)
    expected = [len(model), sum(model), len(model)]
    step("rows after maintenance", lambda: totals(spark, "lake.db.t"), expected=expected)

    from pyiceberg_crypto.verify import verify_table

    step("verify_table", lambda: verify_table(spark, "lake.db.t", driver_max_files=0).summary(),  # on workers
         check=lambda summary: set(summary["by_status"]) == {"OK"} and summary["files"] > 5)

    # The driver registers its KMS again (a new listener, token and certificate): executors switch.
    old_port = registration.port
    registration = register_kms(spark, RecordingKeystoreKms(kms.path), bind_address=driver_address,
                                kms_timeout=KMS_TIMEOUT_SECONDS)
    registration.kms.keks = kms.keks  # one record of every KEK seen
    tokens.append(registration._server.auth_token)
    report("re-registered", registration.port != old_port, port=registration.port, old_port=old_port)
    plant_orphan(workdir / "wh" / "db.db" / "t")
    before = registration.stats.snapshot()
    step("remove_orphan_files after re-registration", lambda: spark.sql(remove_orphans_sql()).collect())
    report("executors called the new registration", registration.stats.since(before).unwrap > 0,
           unwrap=registration.stats.since(before).unwrap)

    # DROP TABLE ... PURGE: executors unwrap the KEK to find every file, and delete them.
    spark.sql(f"CREATE TABLE lake.db.purged (id bigint) USING iceberg {config.tblproperties_sql(props)}")
    spark.sql("INSERT INTO lake.db.purged SELECT id FROM range(0, 100, 1, 4)")
    spark.sql("INSERT INTO lake.db.purged SELECT id FROM range(100, 200, 1, 4)")
    tracked = [Path(r[0].removeprefix("file:")) for r in spark.sql(
        "SELECT file_path FROM lake.db.purged.all_files UNION ALL SELECT path FROM lake.db.purged.all_manifests"
    ).collect()]
    data_keys |= data_keys_of(spark, "lake.db.purged")
    step("drop table purge", lambda: spark.sql("DROP TABLE lake.db.purged PURGE").collect())
    report("purge deleted every file", bool(tracked) and not any(p.exists() for p in tracked), tracked=len(tracked))

    if cfg.get("kill_during_insert", True):
        worker_killed_during_insert(spark, cfg, workdir, model)
    data_keys |= data_keys_of(spark, "lake.db.t")
    location = spark.sql("SELECT file FROM lake.db.t.metadata_log_entries ORDER BY timestamp DESC LIMIT 1").first()[0]
    report("table", True, metadata_location=location, rows=len(model), sum=sum(model))
    return {"tokens": tokens, "data_keys": data_keys, "kms": registration.kms}


def worker_killed_during_insert(spark, cfg: dict, workdir: Path, model: dict) -> None:
    """Kill worker 1 (its Worker and executor JVMs) while an INSERT's tasks run on both workers.

    The first partition's rows pass at once; every other row waits until the driver has asked for
    the kill (a marker file, which the executors see: the namespaces share the filesystem), so the
    kill always lands while tasks run, however slowly a loaded machine runs them."""
    killed_marker = str(workdir / "insert-worker-killed")
    first_partition_end = 10250  # range(10000, 12000, 1, 8): 8 partitions of 250 rows

    def slow(value):
        if value >= first_partition_end:
            waited = 0.0
            while waited < 300 and not os.path.exists(killed_marker):  # bounded: the task then goes on
                time.sleep(0.05)
                waited += 0.05
        return value

    spark.udf.register("slow_identity", slow, "bigint")
    outcome = {}

    def insert():
        try:
            spark.sql("INSERT INTO lake.db.t SELECT slow_identity(id), 'late' FROM range(10000, 12000, 1, 8)").collect()
            outcome["ok"] = True
        except Exception as exc:  # noqa: BLE001 - reported below
            outcome["error"] = str(exc)[:800]

    tracker = spark.sparkContext.statusTracker()
    snapshot = current_snapshot(spark, "lake.db.t")
    thread = threading.Thread(target=insert)
    thread.start()

    def tasks_done_and_running() -> bool:
        stages = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
        return any(s and s.numCompletedTasks >= 1 and s.numActiveTasks >= 1 for s in stages)

    with contextlib.suppress(AssertionError):  # kill anyway: running_at_kill below reports what it hit
        eventually(tasks_done_and_running, 60, message="a task of the INSERT done and one running")
    running_at_kill = thread.is_alive()
    killed = ask(workdir, "kill_worker", index=0)
    Path(killed_marker).write_text("killed\n")  # the waiting rows (and the retried tasks) go on
    thread.join(300)
    model.update({i: "late" for i in range(10000, 12000)})
    report("insert survived a worker kill", outcome.get("ok", False) and not thread.is_alive(),
           killed=killed, running_at_kill=running_at_kill, error=outcome.get("error"))
    report("every row once", totals(spark, "lake.db.t") == [len(model), sum(model), len(model)],
           totals=totals(spark, "lake.db.t"), expected=[len(model), sum(model), len(model)],
           snapshot_changed=current_snapshot(spark, "lake.db.t") != snapshot)


def faults_scenario(spark, kms, cfg: dict, workdir: Path) -> dict:
    driver_address = cfg["driver_address"]
    tokens = []
    # A KMS registered on loopback with a cluster master: executors cannot reach it.
    registration = register_kms(spark, kms, kms_timeout=KMS_TIMEOUT_SECONDS)
    tokens.append(registration._server.auth_token)
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.db")
    props = config.table_properties("orders-key")
    spark.sql(f"CREATE TABLE lake.db.t (id bigint) USING iceberg {config.tblproperties_sql(props)}")
    for start in (0, 500):
        spark.sql(f"INSERT INTO lake.db.t SELECT id FROM range({start}, {start + 500}, 1, 4)")
    expected = [1000, sum(range(1000)), 1000]
    snapshot = current_snapshot(spark, "lake.db.t")
    orphan = plant_orphan(workdir / "wh" / "db.db" / "t")
    step("loopback registration", lambda: spark.sql(remove_orphans_sql()).collect())
    report("loopback: nothing removed", orphan.exists())

    registration = register_kms(spark, kms, bind_address=driver_address, kms_timeout=KMS_TIMEOUT_SECONDS)
    tokens.append(registration._server.auth_token)
    blocked = ask(workdir, "block_port", node="w1", port=registration.port)
    step("kms blocked from one worker", lambda: spark.sql(remove_orphans_sql()).collect())
    report("blocked: nothing removed, nothing committed",
           orphan.exists() and current_snapshot(spark, "lake.db.t") == snapshot, blocked=blocked,
           port=registration.port)
    ask(workdir, "unblock_port", node="w1", port=registration.port)
    step("unblocked: the same session works", lambda: spark.sql(remove_orphans_sql()).collect())
    report("unblocked: orphan removed", not orphan.exists())
    step("rows after faults", lambda: totals(spark, "lake.db.t"), expected=expected)
    return {"tokens": tokens, "data_keys": data_keys_of(spark, "lake.db.t"), "kms": kms}


SCENARIOS = {"main": (main_scenario, 4), "faults": (faults_scenario, 1)}


def first_attempt_dies(spark, kms, cfg: dict) -> None:
    """With ``spark.yarn.maxAppAttempts=2`` (``cfg["first_attempt_dies"]``): attempt 1 registers its
    Python KMS, writes an encrypted table and dies; attempt 2 (a new driver, a new registration)
    reads that table back and goes on with the scenario."""
    option = spark.sparkContext._jsc.sc().applicationAttemptId()  # Scala Option: YARN cluster mode sets it
    attempt = option.get() if option.isDefined() else "1"
    registration = register_kms(spark, kms, bind_address=cfg["driver_address"], kms_timeout=KMS_TIMEOUT_SECONDS)
    report("attempt", True, attempt=attempt, port=registration.port,
           advertised=advertised_address(spark, cfg["driver_address"]))
    if attempt == "1":
        spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.attempts")
        spark.sql("CREATE TABLE lake.attempts.t (id bigint) USING iceberg "
                  + config.tblproperties_sql(config.table_properties("orders-key")))
        spark.sql("INSERT INTO lake.attempts.t SELECT id FROM range(0, 100, 1, 2)")
        step("attempt 1 wrote", lambda: totals(spark, "lake.attempts.t"), expected=[100, sum(range(100)), 100])
        sys.stdout.flush()
        os._exit(17)  # the driver dies: YARN starts attempt 2 in a new ApplicationMaster container
    step("attempt 2 reads what attempt 1 wrote", lambda: totals(spark, "lake.attempts.t"),
         expected=[100, sum(range(100)), 100])
    spark.sql("INSERT INTO lake.attempts.t SELECT id FROM range(100, 200, 1, 2)")
    step("attempt 2 writes", lambda: totals(spark, "lake.attempts.t"), expected=[200, sum(range(200)), 200])


def run(scenario: str, cfg: dict) -> None:
    workdir = Path(cfg["workdir"])
    os.chdir(workdir)
    body, max_failures = SCENARIOS[scenario]
    settings = config.spark_settings(CATALOG, warehouse=workdir / "wh")
    spark = session(settings, cfg["spark_conf"], f"cluster-{scenario}", max_failures)
    kms = RecordingKeystoreKms(cfg["keystore"])
    import pyiceberg_crypto

    report("driver python", True, executable=sys.executable, package=pyiceberg_crypto.__file__,
           application_id=spark.sparkContext.applicationId)
    if cfg.get("first_attempt_dies"):
        first_attempt_dies(spark, kms, cfg)
    secrets = body(spark, kms, cfg, workdir)
    (workdir / "secrets.json").write_text(json.dumps({
        **{f"kek {i}": kek.hex() for i, kek in enumerate(sorted(secrets["kms"].keks | kms.keks))},
        **{f"data key {i}": key.hex() for i, key in enumerate(sorted(secrets["data_keys"]))},
        **{f"token {i}": token for i, token in enumerate(secrets["tokens"])},
        "spark secret": cfg["spark_conf"].get("spark.authenticate.secret", ""),
    }))
    spark.stop()


if __name__ == "__main__":
    run(sys.argv[1], json.loads(Path(sys.argv[2]).read_text()))
