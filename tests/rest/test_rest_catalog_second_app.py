"""A REST table shared by two Spark applications with different KMS wiring (issue 33).

The test session writes through ``register_kms`` (its Python KMS over Py4J); a second PySpark
application, its own process and driver JVM, reaches the same REST catalog server with
``config.spark_settings(catalog_type="rest", uri=..., kms_service=..., kms_token_file=...)``: every
JVM calls a ``pyiceberg-crypto kms serve`` service serving the same master keys. It reads what the
session wrote and appends; the session then sees its rows, and every file is PARE/AGS1.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pyiceberg_crypto import config
from pyiceberg_crypto.kms import InMemoryKms
from pyiceberg_crypto.testing.pytest_plugin import rest_catalog_server  # noqa: F401
from pyiceberg_crypto.verify.pipeline import verify_metadata
from tests.rest.tables import create_encrypted_table, new_namespace, new_rest_catalog
from tests.serve.service_process import ROOT, ServiceProcess

#: The second application: settings as JSON on stdin (no secret in them: the token stays in its file).
SECOND_APP = textwrap.dedent(
    """
    import json, sys
    from pyiceberg_crypto import config
    from tests.testkit import SPARK_JVM_OPTIONS

    job = json.loads(sys.stdin.read())
    builder = (config.local_spark_builder("rest-second-app", master="local[1]")
               .config("spark.driver.memory", "768m")
               .config("spark.driver.extraJavaOptions", SPARK_JVM_OPTIONS))
    spark = config.configure_spark_with_encryption(builder, job["settings"]).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    table = job["table"]
    before = sorted(tuple(r) for r in spark.table(table).collect())
    spark.sql(f"INSERT INTO {table} VALUES (3, 'from the second app'), (4, 'from the second app')")
    after = sorted(tuple(r) for r in spark.table(table).collect())
    print("RESULT", json.dumps({"before": before, "after": after}), flush=True)
    spark.stop()
    """
)


def run_second_app(settings: dict[str, str], table: str, cwd: Path) -> dict:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYTHONPATH=str(ROOT), SPARK_LOCAL_IP="127.0.0.1")
    done = subprocess.run([sys.executable, "-c", SECOND_APP], input=json.dumps({"settings": settings, "table": table}),
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    (cwd / "second-app.log").write_text(f"exit {done.returncode}\n{done.stdout}\n{done.stderr}")
    assert done.returncode == 0, done.stderr[-4000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


@pytest.mark.slow
def test_rest_catalog_table_is_read_and_appended_by_a_second_application_through_kms_serve(
        spark, kms_registration, master_keys, rest_catalog_server, tmp_path):  # noqa: F811
    name = new_rest_catalog(spark, rest_catalog_server.uri, tmp_path / "warehouse", prefix="restapp")
    namespace = new_namespace(spark, name, "apps")
    table = f"{namespace}.orders"
    create_encrypted_table(spark, f"{name}.{table}", key_id="k1")
    spark.sql(f"INSERT INTO {name}.{table} VALUES (1, 'from the session'), (2, 'from the session')")

    # kms serve with the session's own master keys (a file only the test user can read)
    keys_file = tmp_path / "master-keys.json"
    keys_file.touch(mode=0o600)
    keys_file.write_text(json.dumps({key_id: key.hex() for key_id, key in master_keys.items()}))
    service = ServiceProcess.start(tmp_path / "kms", kms="tests.serve.factories:memory_kms",
                                   properties={"keys.path": str(keys_file)})
    try:
        settings = config.spark_settings("lake", warehouse=tmp_path / "warehouse", catalog_type="rest",
                                         uri=rest_catalog_server.uri, **service.client_settings())
        assert not [key for key in settings if key.endswith(config.KMS_NAME_PROPERTY)]
        app = tmp_path / "second-app"
        app.mkdir()
        result = run_second_app(settings, f"lake.{table}", app)
        operations = service.refresh_status()["operations"]
    finally:
        service.stop()

    session_rows = [[1, "from the session"], [2, "from the session"]]
    assert result["before"] == session_rows
    assert result["after"] == session_rows + [[3, "from the second app"], [4, "from the second app"]]
    # the second application's keys came from the service: it unwrapped the session's KEK (and
    # wrapped nothing: Iceberg reuses a table's KEK until it is due for rotation)
    assert operations["unwrap"]["calls"] >= 1 and operations["unwrap"]["failures"] == 0

    spark.sql(f"REFRESH TABLE {name}.{table}")
    assert sorted(list(r) for r in spark.table(f"{name}.{table}").collect()) == result["after"]
    location = spark.sql(f"SELECT file FROM {name}.{table}.metadata_log_entries ORDER BY timestamp DESC").first()[0]
    metadata = json.loads(Path(location.removeprefix("file:")).read_text())
    table_dir = Path(metadata["location"].removeprefix("file:"))
    data = glob.glob(str(table_dir / "data" / "**" / "*.parquet"), recursive=True)
    avro = glob.glob(str(table_dir / "metadata" / "*.avro"))
    assert len(data) >= 2 and avro
    assert {Path(f).read_bytes()[:4] for f in data} == {b"PARE"}
    assert {Path(f).read_bytes()[:4] for f in avro} == {b"AGS1"}
    report = verify_metadata(location, InMemoryKms(master_keys), all_snapshots=True)
    assert report.ok, report
