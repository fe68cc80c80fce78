"""One ``kms serve`` service for Spark entry points without a Python driver: the ``spark-sql`` CLI
and a JVM-only job through ``spark-submit`` (Connect and the Thrift server: test_connect_and_thrift.py),
and a PySpark driver with ``register_kms`` on the same tables, each way reading what the other wrote.

The scenario runs once (real processes, in order) and the tests check its parts:

1. ``spark-sql -e``: CREATE TABLE ... TBLPROPERTIES, INSERT, SELECT (metastore M).
2. The service is stopped: a ``spark-sql`` INSERT fails naming the service; restarted (new token).
3. A PySpark driver with ``register_kms`` (no service): reads t1 (nothing of step 2 committed),
   appends to it and writes t2.
4. At once: the JVM job (``spark-submit --class``, a ``local-cluster`` executor, metastore M) reads
   t1 and t2, writes t3, deletes its token file copy, expires snapshots; and ``spark-sql`` writes
   t4 in another metastore.
5. Every table passes the verifier and reads with the JVM-free reader.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pyiceberg_crypto import config
from pyiceberg_crypto.kms.keystore import KeystoreKms
from tests.serve.service_process import ROOT, ServiceProcess, make_keystore
from tests.testkit import SHORT_DRIVER_ENV, SHORT_JVM_OPTIONS, SPARK_JVM_OPTIONS, SMALL_APP_SETTINGS

pytestmark = [pytest.mark.slow, pytest.mark.apps]

JOB_SOURCE = Path(__file__).with_name("jvm_job") / "ServiceJob.java"
TBLPROPERTIES = config.tblproperties_sql(config.table_properties(key_id="k1"))
#: javac's and jar's own JVM: C1 and the serial collector (SHORT_JVM_OPTIONS), as for the short drivers.
JDK_TOOL_JVM_OPTIONS = [f"-J{option}" for option in SHORT_JVM_OPTIONS.split()]


def spark_bin(name: str) -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / name)


def spark_env() -> dict[str, str]:
    return dict(os.environ, PYSPARK_PYTHON=sys.executable, PYTHONPATH=str(ROOT), SPARK_LOCAL_IP="127.0.0.1",
                **SHORT_DRIVER_ENV)


def settings_for(root: Path, service: ServiceProcess, token_file: Path | None = None) -> dict[str, str]:
    client = service.client_settings()
    if token_file is not None:
        client["kms_token_file"] = str(token_file)
    return {**config.spark_settings("lake", warehouse=root / "wh", metastore_dir=root / "ms", **client),
            **SMALL_APP_SETTINGS}


def spark_sql(settings: dict[str, str], statements: str, cwd: Path, timeout: int = 300) -> subprocess.Popen:
    return subprocess.Popen([spark_bin("spark-sql"), "--master", "local[2]", *config.spark_conf_args(settings),
                             "-e", statements], cwd=cwd, env=spark_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen, timeout: int = 300, log: Path | None = None) -> subprocess.CompletedProcess:
    """Wait for ``process``; its output is kept in ``log`` (for a failing test's reader)."""
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
    if log is not None:
        log.write_text(f"exit {process.returncode}\n--- stdout\n{out}\n--- stderr\n{err}")
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def metadata_location(warehouse: Path, table: str) -> str:
    files = sorted((warehouse / "db.db" / table / "metadata").glob("*.metadata.json"))
    return str(files[-1])


PYSPARK_DRIVER = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession
    from pyiceberg_crypto import config
    from pyiceberg_crypto.bridge import register_kms
    from pyiceberg_crypto.kms.keystore import KeystoreKms

    root, keystore, props = sys.argv[1], sys.argv[2], sys.argv[3]
    settings = config.spark_settings("lake", warehouse=root + "/wh", metastore_dir=root + "/ms")
    builder = (SparkSession.builder.master("local[2]").config("spark.sql.shuffle.partitions", "2")
               .config("spark.ui.enabled", "false"))
    spark = config.configure_spark_with_encryption(builder, settings).getOrCreate()
    registration = register_kms(spark, KeystoreKms(keystore))
    print("READ", spark.sql("SELECT count(*), sum(id) FROM lake.db.t1").first()[:])
    spark.sql("INSERT INTO lake.db.t1 VALUES (10, 'ten'), (11, 'eleven')")
    spark.sql("CREATE TABLE lake.db.t2 (id bigint, v string) USING iceberg " + props)
    spark.sql("INSERT INTO lake.db.t2 VALUES (1, 'one')")
    print("KMS", registration.stats.wrap > 0)
    spark.stop()
    """
)


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    root = tmp_path_factory.mktemp("entry-points")
    keystore = make_keystore(root / "keys.json", "k1")
    service = ServiceProcess.start(root / "service", keystore)
    steps: dict = {"root": root, "keystore": keystore, "service": service}
    try:
        # 1. spark-sql through the service.
        app = root / "app"
        app.mkdir()
        settings = settings_for(app, service)
        steps["settings"] = settings
        steps["sql"] = finish(spark_sql(settings, (
            "CREATE DATABASE IF NOT EXISTS lake.db; "
            f"CREATE TABLE lake.db.t1 (id bigint, v string) USING iceberg {TBLPROPERTIES}; "
            "INSERT INTO lake.db.t1 VALUES (1, 'one'), (2, 'two'), (3, 'three'); "
            "SELECT 'ROWS', count(*), sum(id) FROM lake.db.t1;"), cwd=app), log=root / "sql.log")
        steps["after_sql"] = service.refresh_status()

        # 2. The service down: the INSERT fails; then restarted with a new token.
        steps["address"] = service.address
        old_token = service.token_file.read_text()
        service.stop()
        steps["outage"] = finish(spark_sql(settings, "INSERT INTO lake.db.t1 VALUES (99, 'lost');", cwd=app),
                                 log=root / "outage.log")
        service.restart()
        steps["token_changed"] = service.token_file.read_text() != old_token

        # 3. A PySpark driver with register_kms on the same metastore: reads, appends, writes t2.
        steps["pyspark"] = subprocess.run([sys.executable, "-c", PYSPARK_DRIVER, str(app), str(keystore), TBLPROPERTIES],
                                          cwd=app, env=spark_env(), capture_output=True, text=True, timeout=600)
        (root / "pyspark.log").write_text(f"exit {steps['pyspark'].returncode}\n{steps['pyspark'].stdout}\n"
                                          f"{steps['pyspark'].stderr}")

        # 4. At once: the JVM job (a local-cluster executor: a JVM of its own, a token file copy it deletes)
        # and spark-sql elsewhere.
        classes = root / "job-classes"
        spark_jars = Path(spark_bin("spark-submit")).parents[1] / "jars" / "*"
        compiled = subprocess.run(["javac", *JDK_TOOL_JVM_OPTIONS, "-cp", str(spark_jars), "-d", str(classes),
                                   str(JOB_SOURCE)], capture_output=True, text=True, timeout=300)
        assert compiled.returncode == 0, compiled.stderr
        job_jar = root / "service-job.jar"
        subprocess.run(["jar", *JDK_TOOL_JVM_OPTIONS, "cf", str(job_jar), "-C", str(classes), "."], check=True,
                       timeout=120)
        token_copy = root / "job.token"
        shutil.copy(service.token_file, token_copy)
        job_settings = settings_for(app, service, token_file=token_copy)
        job = subprocess.Popen([spark_bin("spark-submit"), "--master", "local-cluster[1,1,1024]",
                                "--class", "ServiceJob", *config.spark_conf_args(job_settings),
                                "--conf", f"spark.executor.extraJavaOptions={SPARK_JVM_OPTIONS}", str(job_jar),
                                "lake", TBLPROPERTIES, str(token_copy)],
                               cwd=app, env=spark_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        other = root / "other"
        other.mkdir()
        concurrent_sql = spark_sql(settings_for(other, service), (
            "CREATE DATABASE IF NOT EXISTS lake.db; "
            f"CREATE TABLE lake.db.t4 (id bigint, v string) USING iceberg {TBLPROPERTIES}; "
            "INSERT INTO lake.db.t4 SELECT id, CAST(id AS STRING) FROM range(0, 50); "
            "SELECT 'ROWS', count(*), sum(id) FROM lake.db.t4;"), cwd=other)
        started = time.monotonic()
        steps["job"] = finish(job, timeout=600, log=root / "job.log")
        steps["concurrent_sql"] = finish(concurrent_sql, timeout=600, log=root / "concurrent_sql.log")
        steps["both_seconds"] = time.monotonic() - started
        steps["final"] = service.refresh_status()
        steps["tokens"] = [old_token.strip(), service.token_file.read_text().strip()]
        yield steps
    finally:
        service.stop()


def rows_line(output: str) -> str:
    return next((line for line in output.splitlines() if line.startswith("ROWS")), "")


def test_spark_sql_writes_and_reads_through_the_service(scenario):
    sql = scenario["sql"]
    assert sql.returncode == 0, sql.stderr[-3000:]
    assert rows_line(sql.stdout).split() == ["ROWS", "3", "6"]
    operations = scenario["after_sql"]["operations"]
    assert operations["wrap"]["calls"] >= 1 and operations["wrap"]["failures"] == 0
    assert scenario["after_sql"]["clients"]["127.0.0.1"]["wrap"] == operations["wrap"]["calls"]


def test_the_service_down_fails_the_insert_naming_it_and_commits_nothing(scenario):
    outage = scenario["outage"]
    assert outage.returncode != 0
    # A new JVM finds no token file (a clean stop removes it), and says so in the failed statement.
    assert f"KMS service {scenario['address']} (pyiceberg-crypto kms serve) failed to" in outage.stderr
    assert "cannot read the token" in outage.stderr and "is the service running?" in outage.stderr
    assert scenario["token_changed"]
    # What the PySpark driver read next: t1 as step 1 left it (the failed INSERT is not there).
    assert "READ (3, 6)" in scenario["pyspark"].stdout, scenario["pyspark"].stderr[-3000:]


def test_a_registered_kms_and_the_service_read_each_others_tables(scenario):
    pyspark_run = scenario["pyspark"]
    assert pyspark_run.returncode == 0, pyspark_run.stderr[-3000:]
    assert "KMS True" in pyspark_run.stdout  # written through register_kms, not the service
    job = scenario["job"]
    assert job.returncode == 0, job.stderr[-3000:]
    assert "READ t1 5 t2 1" in job.stdout  # the JVM job, through the service, reads both


def test_a_jvm_job_and_spark_sql_at_once_on_one_service(scenario):
    job, sql = scenario["job"], scenario["concurrent_sql"]
    assert job.returncode == 0, job.stderr[-3000:]
    assert sql.returncode == 0, sql.stderr[-3000:]
    assert "RESULT 300 44850" in job.stdout  # expiring snapshots removes no live row
    assert rows_line(sql.stdout).split() == ["ROWS", "50", "1225"]
    # Maintenance after the token file copy was deleted: the driver's token, shipped to executors.
    expired = next(line for line in job.stdout.splitlines() if line.startswith("EXPIRED")).split()
    assert int(expired[2]) == 2  # two manifest lists removed: executors unwrapped their keys
    final = scenario["final"]["operations"]
    assert final["wrap"]["failures"] == 0 and final["unwrap"]["calls"] > 0


def test_every_table_verifies_and_reads_without_a_jvm(scenario):
    pytest.importorskip("pyarrow")
    from pyiceberg_crypto.read import read_table
    from pyiceberg_crypto.verify import verify_metadata

    kms = KeystoreKms(scenario["keystore"])
    root = scenario["root"]
    expected = {("app", "t1"): 5, ("app", "t2"): 1, ("app", "t3"): 300, ("other", "t4"): 50}
    for (app, table), rows in expected.items():
        location = metadata_location(root / app / "wh", table)
        report = verify_metadata(location, kms)
        assert report.ok, (table, [f for f in report.files if not f.ok][:3])
        assert read_table(location, kms).num_rows == rows, table


def test_no_token_in_any_output(scenario):
    outputs = [scenario[k].stdout + scenario[k].stderr for k in ("sql", "outage", "pyspark", "job", "concurrent_sql")]
    outputs.append(scenario["service"].log())
    for token in scenario["tokens"]:
        assert len(token) == 64 and not any(token in out for out in outputs)
