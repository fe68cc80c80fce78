"""A Spark application whose executors are separate JVMs (``local-cluster[2,1,1024]``), run as a
subprocess by tests/integration/test_kms_executors.py (one application for every scenario: a
session costs ~10 s).

    python kms_cluster_app.py WORKDIR

Runs, in WORKDIR, every operation that calls the KMS on executors, then executor-side faults
(a KMS that raises, that hangs, a callback server that went away) and their recovery, then
``DROP TABLE ... PURGE``, then the maintenance calls on a table of a REST catalog (the bridge's
EncryptingRestCatalog over the loopback REST server). Logging is at its most verbose everywhere (log4j DEBUG in the driver and
executors, java.util.logging INFO, Python DEBUG) and the Spark event log is on. Prints one
``RESULT {json}`` line per step; writes the secrets that must never appear in a log (master key,
KEKs, data keys, auth tokens; hex) to WORKDIR/secrets.json.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from pathlib import Path

from pyiceberg_crypto import config
from pyiceberg_crypto.bridge import register_kms
from pyiceberg_crypto.formats.key_metadata import StandardKeyMetadata
from pyiceberg_crypto.kms import InMemoryKms, KmsError
from pyiceberg_crypto.testing.rest import RestCatalogServer
from tests.testkit import SPARK_JVM_OPTIONS

TIMEOUT_SECONDS = 3
FORWARDED = {"pyiceberg-crypto.kms.region": "test-region", "pyiceberg-crypto.kms.endpoint": "https://kms.example/a?b=c&d"}


class FaultyKms(InMemoryKms):
    """An in-memory KMS that can be told to fail or hang, and remembers what must stay secret."""

    def __init__(self, master_keys):
        super().__init__(master_keys)
        self.mode = "ok"  # "ok" | "raise" | "hang"
        self.released = threading.Event()
        self.initialized: list[dict] = []
        self.keks: set[bytes] = set()

    def initialize(self, properties):
        self.initialized.append(dict(properties))

    def _fault(self, key_id):
        if self.mode == "raise":
            raise KmsError(f"simulated outage for {key_id}")
        if self.mode == "hang":
            self.released.wait(60)

    def wrap_key(self, key, wrapping_key_id):
        self._fault(wrapping_key_id)
        self.keks.add(bytes(key))
        return super().wrap_key(key, wrapping_key_id)

    def unwrap_key(self, wrapped, wrapping_key_id):
        self._fault(wrapping_key_id)
        key = super().unwrap_key(wrapped, wrapping_key_id)
        self.keks.add(key)
        return key


LOG4J_DEBUG = """
rootLogger.level = debug
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c: %m%n%ex
# Only the metastore's database layer stays quieter (megabytes of SQL text, nothing of ours).
logger.datanucleus.name = DataNucleus
logger.datanucleus.level = info
logger.derby.name = org.apache.derby
logger.derby.level = info
"""
# java.util.logging at INFO, where Py4J logs every callback command (with key bytes) unless the
# bridge silences it. (Not ALL: Janino's FINE-level code paths then break Spark's code generation.)
JUL_INFO = """
handlers = java.util.logging.ConsoleHandler
.level = INFO
java.util.logging.ConsoleHandler.level = ALL
"""


def verbose_logging_options(workdir: Path) -> str:
    (workdir / "log4j2-debug.properties").write_text(LOG4J_DEBUG)
    (workdir / "jul-info.properties").write_text(JUL_INFO)
    logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
    return (f"-Dlog4j2.configurationFile={(workdir / 'log4j2-debug.properties').as_uri()} "
            f"-Djava.util.logging.config.file={workdir / 'jul-info.properties'}")


def main(workdir: Path) -> None:
    os.chdir(workdir)
    java_options = verbose_logging_options(workdir)
    master_key = os.urandom(16)
    kms = FaultyKms({"k": master_key})
    settings = config.spark_settings("c", warehouse="wh", extra_catalog_properties={
        key.removeprefix("spark.sql.catalog.c."): value for key, value in FORWARDED.items()})
    builder = (
        config.local_spark_builder("kms-executors", master="local-cluster[2,1,1024]")
        .config("spark.eventLog.enabled", "true")
        .config("spark.eventLog.dir", (workdir / "events").as_uri())
        .config("spark.task.maxFailures", "2")
        .config("spark.executor.memory", "768m")
        .config("spark.driver.extraJavaOptions", java_options)
        # executors live seconds: C1 only and the serial collector
        .config("spark.executor.extraJavaOptions", f"{SPARK_JVM_OPTIONS} {java_options}")
    )
    (workdir / "events").mkdir()
    spark = config.configure_spark_with_encryption(builder, settings).getOrCreate()
    spark.sparkContext.setLogLevel("DEBUG")  # PySpark resets the driver's root level to WARN at start
    tokens = []

    def register(**options):
        registration = register_kms(spark, kms, name="default", kms_timeout=TIMEOUT_SECONDS, **options)
        tokens.append(registration._server.auth_token)
        return registration

    registration = register()
    from pyspark.find_spark_home import _find_spark_home

    report("application", True, work_dir=str(Path(_find_spark_home()) / "work" / spark.sparkContext.applicationId))

    spark.sql("CREATE NAMESPACE c.db")
    props = config.table_properties("k", extra={"write.delete.mode": "merge-on-read",
                                                "write.update.mode": "merge-on-read"})
    spark.sql(f"CREATE TABLE c.db.t (id bigint, v string) USING iceberg {config.tblproperties_sql(props)}")
    for start in (0, 1000, 2000):
        spark.sql(f"INSERT INTO c.db.t SELECT id, cast(id as string) FROM range({start}, {start + 1000}, 1, 2)")
    spark.sql("DELETE FROM c.db.t WHERE id % 10 = 0")
    data_keys = data_keys_of(spark)
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    report("executors", executors == 2, executors=executors)
    orphan = next(Path("wh/db.db/t/data").glob("*.parquet")).with_name("orphan.parquet")
    orphan.write_bytes(b"not a table file")
    os.utime(orphan, (time.time() - 7 * 86400,) * 2)
    expected = (2700, sum(i for i in range(3000) if i % 10))

    def count():
        return tuple(spark.sql("SELECT count(*), sum(id) FROM c.db.t").first())

    future = "TIMESTAMP '2999-01-01 00:00:00'"
    two_days_ago = time.strftime("TIMESTAMP '%Y-%m-%d %H:%M:%S'", time.localtime(time.time() - 2 * 86400))
    operations = {  # (the name, the statement, the first value of its first row if it must be checked)
        "files": ("SELECT count(*) FROM c.db.t.files", None),
        "entries": ("SELECT count(*) FROM c.db.t.entries", None),
        "position_deletes": ("SELECT count(*) FROM c.db.t.position_deletes", 300),
        "rewrite_position_delete_files":
            ("CALL c.system.rewrite_position_delete_files(table => 'db.t', options => map('rewrite-all', 'true'))",
             None),
        "rewrite_data_files":
            ("CALL c.system.rewrite_data_files(table => 'db.t', options => map('min-input-files', '2'))", None),
        "rewrite_manifests": ("CALL c.system.rewrite_manifests('db.t')", None),
        "expire_snapshots":
            (f"CALL c.system.expire_snapshots(table => 'db.t', older_than => {future}, retain_last => 1)", None),
        "remove_orphan_files": (f"CALL c.system.remove_orphan_files(table => 'db.t', older_than => {two_days_ago})",
                                None),
    }
    for name, (sql, first) in operations.items():
        before = registration.stats.snapshot()
        step(name, lambda sql=sql: [tuple(r) for r in spark.sql(sql).collect()],
             check=None if first is None else (lambda rows, first=first: rows[0][0] == first))
        report(f"{name} kms calls", True, unwrap=registration.stats.since(before).unwrap)
    step("rows after maintenance", count, expected=list(expected))
    report("orphan removed", not orphan.exists())
    report("forwarded properties", True, initialized=kms.initialized)

    # Executor-side faults. The driver's table (and its KEK) is cached; executors deserialize a fresh
    # encryption manager per task and unwrap the KEK there, so remove_orphan_files calls the KMS
    # on executors each time.
    probe = "CALL c.system.remove_orphan_files(table => 'db.t', dry_run => true)"
    snapshot = current_snapshot(spark)
    for mode in ("raise", "hang"):
        kms.mode = mode
        kms.released.clear()
        step(f"executor fault {mode}", lambda: spark.sql(probe).collect())
        kms.mode = "ok"
        kms.released.set()
        step(f"recovered after {mode}", lambda: spark.sql(probe).collect())

    registration._server.close()  # the callback server went away (as if its process died)
    step("executor fault unreachable", lambda: spark.sql(probe).collect())
    # Registering again gives executors a new endpoint; this one on another address, so from now on
    # executors talk TLS with the certificate pinned in the endpoint they receive.
    registration = register(bind_address="127.0.0.2")
    report("re-registered with TLS", registration.tls)
    step("recovered after re-registration", lambda: spark.sql(probe).collect())
    report("snapshot unchanged by faults", current_snapshot(spark) == snapshot)
    step("rows after faults", count, expected=list(expected))

    # A fresh catalog (no cached table, no cached KEK): the driver calls the KMS too.
    for key, value in config.catalog_settings("fresh", warehouse="wh").items():
        spark.conf.set(key, value)
    data_files = set(Path("wh/db.db/t/data").glob("*.parquet"))
    kms.mode = "raise"
    step("driver fault raise", lambda: spark.sql("INSERT INTO fresh.db.t VALUES (1, 'x')").collect())
    kms.mode = "ok"
    report("driver fault committed nothing", current_snapshot(spark, "fresh") == snapshot,
           data_files_left_by_failed_write=len(set(Path("wh/db.db/t/data").glob("*.parquet")) - data_files))

    data_keys |= data_keys_of(spark)
    tracked = [Path(row[0].removeprefix("file:")) for row in spark.sql(
        "SELECT file_path FROM c.db.t.all_files UNION ALL SELECT path FROM c.db.t.all_manifests").collect()]
    step("drop table purge", lambda: spark.sql("DROP TABLE c.db.t PURGE").collect())
    report("purge deleted files", bool(tracked) and not any(p.exists() for p in tracked), tracked=len(tracked))
    report("stats", True, stats=registration.stats.to_dict())
    # Last: it takes longer than the catalog's table cache keeps c.db.t (30 s), and the executor
    # faults above rely on the driver holding that table and its KEK.
    rest_catalog_maintenance(spark, workdir, registration)

    (workdir / "secrets.json").write_text(json.dumps({
        "master key": master_key.hex(),
        **{f"kek {i}": kek.hex() for i, kek in enumerate(sorted(kms.keks))},
        **{f"data key {i}": key.hex() for i, key in enumerate(sorted(data_keys))},
        **{f"token {i}": token for i, token in enumerate(tokens)},
    }))
    spark.stop()


def rest_catalog_maintenance(spark, workdir: Path, registration) -> None:
    """The maintenance calls that run on executors, on a table of a REST catalog: executors get the
    table (its EncryptingRESTTableOperations' encryption manager and KMS client) serialized from the
    driver, as with the Hive catalog."""
    with RestCatalogServer(workdir / "rest") as server:
        for key, value in config.catalog_settings("r", warehouse="rest-wh", catalog_type="rest", uri=server.uri,
                                                  kms_name="default").items():
            spark.conf.set(key, value)
        spark.sql("CREATE NAMESPACE r.db")
        props = config.table_properties("k", extra={"write.delete.mode": "merge-on-read"})
        spark.sql(f"CREATE TABLE r.db.t (id bigint, v string) USING iceberg {config.tblproperties_sql(props)}")
        for start in (0, 100, 200):
            spark.sql(f"INSERT INTO r.db.t SELECT id, cast(id as string) FROM range({start}, {start + 100}, 1, 2)")
        spark.sql("DELETE FROM r.db.t WHERE id % 10 = 0")
        future = "TIMESTAMP '2999-01-01 00:00:00'"
        for name, sql in (
                ("rest rewrite_data_files", "CALL r.system.rewrite_data_files(table => 'db.t', "
                                            "options => map('min-input-files', '2'))"),
                ("rest rewrite_manifests", "CALL r.system.rewrite_manifests('db.t')"),
                ("rest expire_snapshots", f"CALL r.system.expire_snapshots(table => 'db.t', older_than => {future}, "
                                          "retain_last => 1)"),
                ("rest remove_orphan_files", "CALL r.system.remove_orphan_files(table => 'db.t', dry_run => true)")):
            before = registration.stats.snapshot()
            step(name, lambda sql=sql: [tuple(r) for r in spark.sql(sql).collect()])
            report(f"{name} kms calls", True, unwrap=registration.stats.since(before).unwrap)
        step("rest rows after maintenance", lambda: tuple(spark.sql("SELECT count(*), sum(id) FROM r.db.t").first()),
             expected=[270, sum(i for i in range(300) if i % 10)])
        location = spark.sql("SELECT file FROM r.db.t.metadata_log_entries ORDER BY timestamp DESC LIMIT 1").first()[0]
        table_dir = Path(location.removeprefix("file:")).parent.parent
        magics = sorted({p.read_bytes()[:4].decode("latin-1") for p in table_dir.rglob("*")
                         if p.is_file() and p.suffix in (".parquet", ".avro")})
        report("rest files encrypted", magics == ["AGS1", "PARE"], magics=magics)
        spark.sql("DROP TABLE r.db.t PURGE")


def data_keys_of(spark) -> set[bytes]:
    """The DEKs of every data and delete file the table still references."""
    rows = spark.sql("SELECT key_metadata FROM c.db.t.all_files").collect()
    return {StandardKeyMetadata.parse(bytes(row[0])).encryption_key for row in rows}


def current_snapshot(spark, catalog: str = "c"):
    return spark.sql(f"SELECT snapshot_id FROM {catalog}.db.t.snapshots ORDER BY committed_at DESC LIMIT 1").first()[0]


def step(name: str, action, expected=None, check=None) -> None:
    start = time.monotonic()
    try:
        value = action()
        ok = (expected is None or list(value) == expected) and (check is None or check(value))
        report(name, ok, seconds=round(time.monotonic() - start, 1), value=str(value)[:200])
    except Exception as exc:  # noqa: BLE001 - the test judges the message
        message = str(exc)
        kms_line = next((line for line in message.splitlines() if "Python KMS" in line), message[:500])
        report(name, False, seconds=round(time.monotonic() - start, 1), error=kms_line[:800])


def report(name: str, ok: bool, **details) -> None:
    print("RESULT " + json.dumps({"step": name, "ok": ok, **details}), flush=True)


def results_of(stdout: str) -> dict[str, dict]:
    """The :func:`report` lines of an application's output, by step name."""
    return {entry["step"]: entry for entry in (json.loads(line.removeprefix("RESULT "))
                                               for line in stdout.splitlines() if line.startswith("RESULT "))}


def ok(steps: dict[str, dict], name: str) -> dict:
    """The step ``name``, asserted to have run and succeeded."""
    assert name in steps, f"step {name!r} did not run"
    assert steps[name]["ok"], steps[name]
    return steps[name]


if __name__ == "__main__":
    main(Path(sys.argv[1]).absolute())
