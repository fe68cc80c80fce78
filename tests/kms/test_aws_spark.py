"""End to end with Spark: the AWS-backed Python KMS, and interoperability with Iceberg's own Java
``org.apache.iceberg.aws.AwsKeyManagementClient`` against the same KMS server (moto on loopback).

Runs in its own Spark application because the Java client needs the AWS SDK (iceberg-aws-bundle)
on the classpath, which the shared test session does not have.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.kms.conftest import AWS_TEST_ENV
from tests.testkit import SHORT_DRIVER_ENV

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.loopback, pytest.mark.jvm, pytest.mark.processes]  # Spark in a subprocess

APP = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from pyiceberg_crypto import config
    from pyiceberg_crypto.bridge import register_kms
    from pyiceberg_crypto.kms import AwsKms

    endpoint, key_id = sys.argv[1], sys.argv[2]
    aws = {"kms.endpoint": endpoint, "client.region": "us-east-1"}  # credentials: environment
    settings = config.spark_settings("pyctx", warehouse="wh", kms_name="aws-context")
    settings.update(config.jar_settings(aws=True))  # AWS KMS on the JVM side needs the AWS bundle
    settings.update(config.catalog_settings("py", warehouse="wh", kms_name="aws-no-context"))
    settings.update(config.catalog_settings(
        "java", warehouse="wh", kms_impl="org.apache.iceberg.aws.AwsKeyManagementClient",
        extra_catalog_properties=aws))
    builder = config.local_spark_builder("aws-kms-interop")
    spark = config.configure_spark_with_encryption(builder, settings).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    with_context = register_kms(spark, AwsKms.from_properties(aws), name="aws-context")
    no_context = register_kms(spark, AwsKms.from_properties({**aws, "kms.encryption-context": "none"}),
                              name="aws-no-context")
    props = config.tblproperties_sql(config.table_properties(key_id))
    result = {}

    def write(catalog, table):
        spark.sql(f"CREATE TABLE {catalog}.db.{table} (id bigint, v string) USING iceberg {props}")
        spark.sql(f"INSERT INTO {catalog}.db.{table} VALUES (1, 'a'), (2, 'b')")
        spark.sql(f"INSERT INTO {catalog}.db.{table} VALUES (3, 'c')")

    def read(catalog, table):
        try:
            return sorted(tuple(r) for r in spark.table(f"{catalog}.db.{table}").collect())
        except Exception as exc:
            return "ERROR " + str(exc).splitlines()[0][:600] + " | " + " ".join(
                line for line in str(exc).splitlines() if "Exception" in line)[:1500]

    spark.sql("CREATE NAMESPACE pyctx.db")
    write("pyctx", "with_context")          # default AwsKms: encryption context on
    write("py", "from_python")              # AwsKms with kms.encryption-context=none
    write("java", "from_java")              # Iceberg's AwsKeyManagementClient
    for catalog in ("pyctx", "py", "java"):
        for table in ("with_context", "from_python", "from_java"):
            result[f"{catalog}:{table}"] = read(catalog, table)
    # The JVM-free verifier, with the Python KMS by short name, on the table Java's client wrote.
    from pyiceberg_crypto.kms.loader import load_kms
    from pyiceberg_crypto.verify import verify_metadata
    java_metadata = spark.sql("SELECT file FROM java.db.from_java.metadata_log_entries "
                              "ORDER BY timestamp DESC LIMIT 1").first()[0]
    report = verify_metadata(java_metadata, load_kms("aws", {**aws, "kms.encryption-context": "none"}))
    result["verify_from_java"] = [report.ok, len(report.files)]
    result["stats"] = {"context": [with_context.stats.wrap, with_context.stats.unwrap],
                       "no_context": [no_context.stats.wrap, no_context.stats.unwrap]}
    result["data_magic"] = sorted({p.read_bytes()[:4].decode("latin-1") for p in Path("wh").rglob("*.parquet")})
    print("RESULT " + json.dumps(result))
    spark.stop()
    """
)


def test_aws_kms_tables_with_python_and_java_clients(tmp_path, kms_admin, moto_kms_endpoint):
    key_id = kms_admin.create_key(Description="iceberg table key")["KeyMetadata"]["KeyId"]
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYTHONPATH=str(ROOT), **AWS_TEST_ENV, **SHORT_DRIVER_ENV)
    proc = subprocess.run(
        [sys.executable, "-c", APP, moto_kms_endpoint, key_id],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    result = json.loads(lines[-1].removeprefix("RESULT "))
    rows = [[1, "a"], [2, "b"], [3, "c"]]

    # The Python AWS KMS end to end (encryption context on): write and read.
    assert result["pyctx:with_context"] == rows
    # Interop with kms.encryption-context=none: each client reads the other's table.
    assert result["java:from_python"] == rows
    assert result["py:from_java"] == rows
    assert result["py:from_python"] == rows and result["java:from_java"] == rows
    # With the context on, Java's client (no context) cannot unwrap, and we cannot unwrap Java's.
    assert "InvalidCiphertextException" in result["java:with_context"]
    assert "InvalidCiphertextException" in result["py:with_context"]  # Python, context off
    assert "InvalidCiphertextException" in result["pyctx:from_python"]  # Python, context on
    assert result["pyctx:from_java"].startswith("ERROR")
    assert "InvalidCiphertextException" in result["pyctx:from_java"]
    assert "kms.encryption-context=none" in result["pyctx:from_java"]  # the fix is in the message

    ok, files = result["verify_from_java"]
    assert ok and files >= 5  # 2 data files, their 2 manifests and the manifest list
    assert result["stats"]["context"][0] >= 1 and result["stats"]["no_context"][0] >= 1
    assert result["data_magic"] == ["PARE"]  # every data file is encrypted Parquet
    for secret in (AWS_TEST_ENV["AWS_SECRET_ACCESS_KEY"],):
        assert secret not in proc.stdout and secret not in proc.stderr
