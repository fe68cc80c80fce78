"""``verify_table`` with executors in separate processes (local-cluster), and the spark-submit entry
point: the same findings as the JVM-free CLI walk."""

from __future__ import annotations

import json
import textwrap

import pytest

from tests.integration.test_readme_and_cluster import _run_python


KMS_MODULE = textwrap.dedent(
    """
    from pyiceberg_crypto.kms import InMemoryKms

    def make():
        return InMemoryKms({"k": bytes(range(16))})
    """
)

CLUSTER_VERIFY = textwrap.dedent(
    """
    import json, sys
    from pyiceberg_crypto import config
    from pyiceberg_crypto.bridge import register_kms
    from pyiceberg_crypto.verify import verify_metadata, verify_table
    from pyiceberg_crypto.cli import verify_job as job
    from cluster_kms import make
    from tests.testkit import SPARK_JVM_OPTIONS

    settings = config.spark_settings("c", warehouse="wh")
    builder = (config.local_spark_builder("verify-cluster", master="local-cluster[2,1,1024]")
               .config("spark.executor.extraJavaOptions", SPARK_JVM_OPTIONS))  # short-lived
    spark = config.configure_spark_with_encryption(builder, settings).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register_kms(spark, make())
    spark.sql("CREATE NAMESPACE c.db")
    spark.sql("CREATE TABLE c.db.t (id bigint, v string) USING iceberg "
              + config.tblproperties_sql(config.table_properties("k", extra={"write.delete.mode": "merge-on-read"})))
    spark.sql("INSERT INTO c.db.t SELECT id, cast(id as string) FROM range(0, 400, 1, 6)")
    spark.sql("DELETE FROM c.db.t WHERE id % 7 = 0")
    ledger_job = ["--table", "c.db.t", "--kms", "cluster_kms:make", "--state", "ledger.json", "--json"]
    first = job.main(ledger_job + ["--output", "ledger-first.json"])
    spark.sql("INSERT INTO c.db.t SELECT id, 'n' FROM range(1000, 1100, 1, 3)")
    second = job.main(ledger_job + ["--output", "ledger-second.json"])
    print("LEDGER", first, second)
    location = spark.sql("SELECT file FROM c.db.t.metadata_log_entries ORDER BY timestamp DESC LIMIT 1").first()[0]
    clean = verify_table(spark, "c.db.t", driver_max_files=0)  # file checks in the executors
    victim = sorted(r[0] for r in spark.sql("SELECT file_path FROM c.db.t.files WHERE content = 0").collect())[0]
    path = victim.removeprefix("file:")
    data = bytearray(open(path, "rb").read()); data[len(data) // 2] ^= 1
    open(path, "wb").write(bytes(data))
    spark_report = verify_table(spark, "c.db.t", driver_max_files=0)
    local_report = verify_metadata(location, make())
    code = job.main(["--table", "c.db.t", "--kms", "cluster_kms:make", "--json", "--output", "job.json",
                     "--driver-max-files", "0"])
    print("EXECUTORS", spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1)
    print("CLEAN", clean.ok, clean.summary()["by_status"])
    print("VICTIM", victim)
    print("SPARK", json.dumps(spark_report.to_dict()))
    print("LOCAL", json.dumps(local_report.to_dict()))
    print("JOBCODE", code)
    spark.stop()
    """
)


@pytest.mark.slow
@pytest.mark.executors
@pytest.mark.jvm  # a local-cluster Spark application in a subprocess
def test_verify_table_on_separate_executor_processes_matches_the_cli(tmp_path):
    (tmp_path / "cluster_kms.py").write_text(KMS_MODULE)
    result = _run_python(CLUSTER_VERIFY, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines() if line.split(" ", 1)[0].isupper())
    assert lines["EXECUTORS"] == "2"
    assert lines["CLEAN"].startswith("True")
    spark_report, local_report = json.loads(lines["SPARK"]), json.loads(lines["LOCAL"])
    assert spark_report["files"] == local_report["files"]
    bad = [f for f in spark_report["files"] if f["status"] != "OK"]
    assert [(f["path"], f["status"]) for f in bad] == [(lines["VICTIM"], "TAMPERED")]
    assert lines["JOBCODE"] == "1"
    assert lines["LEDGER"] == "0 0"  # the job with a ledger: full, then only the new commit
    first = json.loads((tmp_path / "ledger-first.json").read_text())
    second = json.loads((tmp_path / "ledger-second.json").read_text())
    assert (first["table"]["mode"], second["table"]["mode"]) == ("current", "since")
    new_data = [f for f in second["files"] if f["kind"] == "data"]
    assert 1 <= len(new_data) <= 3 and all(f["status"] == "OK" for f in second["files"])
    assert not {f["path"] for f in new_data} & {f["path"] for f in first["files"]}
    job_report = json.loads((tmp_path / "job.json").read_text())
    assert job_report["files"] == spark_report["files"] and job_report["ok"] is False
