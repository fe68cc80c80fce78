"""Things that need their own Spark application: the README example, and executors in other JVMs.

The README's ten lines and ``pyiceberg-crypto demo`` (``make demo``) run from the installed wheel in
tests/test_newcomer.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.testkit import SHORT_DRIVER_ENV

ROOT = Path(__file__).resolve().parents[2]


def _run_python(code: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYTHONPATH=str(ROOT), **SHORT_DRIVER_ENV)
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_readme_example_is_ten_lines():
    """The block itself runs from the installed wheel in tests/test_newcomer.py (rows, encrypted
    files, the KMS unregistered by ``spark.stop()``), on Spark 4.1 and 3.5."""
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"## Ten lines of PySpark\s+```python\n(.*?)```", readme, re.S).group(1)
    assert len([line for line in block.splitlines() if line.strip()]) <= 10
    assert "register_kms" in block and "table_properties" in block


CLUSTER_JOB = textwrap.dedent(
    """
    from pyiceberg_crypto import config
    from pyiceberg_crypto.bridge import register_kms
    from pyiceberg_crypto.kms import InMemoryKms
    from pyiceberg_crypto.verify.magic_scan import scan_table_files
    from tests.testkit import SPARK_JVM_OPTIONS

    settings = config.spark_settings("c", warehouse="wh")
    builder = (config.local_spark_builder("cluster-test", master="local-cluster[2,1,1024]")
               .config("spark.executor.extraJavaOptions", SPARK_JVM_OPTIONS))  # short-lived
    spark = config.configure_spark_with_encryption(builder, settings).getOrCreate()
    registration = register_kms(spark, InMemoryKms.with_random_keys("k"))
    spark.sql("CREATE NAMESPACE c.db")
    spark.sql("CREATE TABLE c.db.t (id bigint, v string) USING iceberg " + config.tblproperties_sql(config.table_properties("k")))
    spark.sql("INSERT INTO c.db.t SELECT id, cast(id as string) FROM range(0, 1000, 1, 4)")
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    count, total = spark.sql("SELECT count(*), sum(id) FROM c.db.t").first()
    files = scan_table_files("wh/db.db/t")
    print("EXECUTORS", executors)
    print("RESULT", count, total)
    print("FILES", sorted({(f.kind, f.ok) for f in files}))
    print("KMS", registration.stats.wrap >= 1)
    spark.stop()
    """
)


@pytest.mark.slow
@pytest.mark.executors
@pytest.mark.jvm
@pytest.mark.spine  # the executors' KMS path on Spark 3.5 too (the full scenario app runs on 4.1)
def test_write_and_read_with_executors_in_separate_jvms(tmp_path):
    """local-cluster executors are separate JVMs without the Python registry: Iceberg writes and
    reads data files there with per-file keys carried in the task, while KMS calls stay on the driver."""
    result = _run_python(CLUSTER_JOB, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "EXECUTORS 2" in result.stdout
    assert "RESULT 1000 499500" in result.stdout
    assert "FILES [('data', True), ('manifest', True), ('manifest-list', True)]" in result.stdout
    assert "KMS True" in result.stdout
