"""Spark Declarative Pipelines (``spark-pipelines run``, Spark 4.1) into an encrypted Iceberg catalog
whose KMS is ``pyiceberg-crypto kms serve``.

``spark-pipelines`` runs the pipeline's definitions in a Python process of its own, against a local
Spark Connect server that it starts: there is no PySpark driver of ours to register a Python KMS
in, so the catalog's KMS is the service. The settings reach that server through
``$SPARK_CONF_DIR/spark-defaults.conf`` (the pipeline spec's ``configuration`` is applied as SQL
settings per flow, where ``spark.jars`` is refused), as docs/how-to/declarative-pipelines.md says.

One pipeline, a streaming table fed by a directory of JSON files and a materialized view over it,
run three times:

1. the KMS serving: both tables are written, every file is ``PARE``/``AGS1``, they verify and read
   back with the JVM-free reader, and the view holds the right counts;
2. a new input file and the KMS stopped: the run fails, the error names the KMS service, and the
   streaming table's snapshot has not moved;
3. the KMS back: the run picks up the new file once (no row lost, none twice).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from pyiceberg_crypto import config
from pyiceberg_crypto.kms.keystore import KeystoreKms
from pyiceberg_crypto.testing.ports import SPARK_CONNECT_PORT, fixed_port
from tests.serve.test_connect_and_thrift import spark_bin, spark_env
from tests.testkit import SHORT_JVM_OPTIONS

pytestmark = [pytest.mark.slow, pytest.mark.apps]

RUN_TIMEOUT = 600  # a Connect server JVM and two flows on a busy 2-core machine

DEFINITIONS = textwrap.dedent(
    """
    from pyspark import pipelines as dp
    from pyspark.sql import SparkSession, functions as F

    spark = SparkSession.active()
    ENCRYPTED = {"format-version": "3", "encryption.key-id": "k1"}


    @dp.table(format="iceberg", table_properties=ENCRYPTED)
    def events():
        return spark.readStream.schema("id bigint, item string").json(INPUT)


    @dp.materialized_view(format="iceberg", table_properties=ENCRYPTED)
    def events_by_bucket():
        return spark.read.table("events").groupBy((F.col("id") % 3).alias("bucket")).count()
    """
)


def write_events(directory: Path, name: str, ids: range) -> None:
    with open(directory / f"{name}.json", "w") as out:
        for i in ids:
            out.write(json.dumps({"id": i, "item": f"item-{i}"}) + "\n")


def make_pipeline(root: Path, kms_service) -> tuple[Path, Path]:
    """The pipeline directory (spec + definitions) and the configuration directory."""
    settings = config.spark_settings("lake", warehouse=root / "wh", metastore_dir=root / "ms",
                                     **kms_service.client_settings())
    settings["spark.ui.enabled"] = "false"
    conf_dir = root / "conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(config.spark_defaults_lines(settings) + "\n")

    pipeline = root / "pipeline"
    (pipeline / "transformations").mkdir(parents=True)
    (pipeline / "spark-pipeline.yml").write_text(textwrap.dedent(
        f"""\
        name: orders
        storage: {(root / 'storage').as_uri()}
        catalog: lake
        database: default
        libraries:
          - glob:
              include: transformations/**
        """))
    (pipeline / "transformations" / "flows.py").write_text(
        f"INPUT = {str(root / 'input')!r}\n" + DEFINITIONS)
    return pipeline, conf_dir


def run_pipeline(pipeline: Path, conf_dir: Path) -> subprocess.CompletedProcess:
    env = dict(spark_env(), SPARK_CONF_DIR=str(conf_dir),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    # C1 and the serial collector (the short drivers' options): this test took 157 CPU-s with the JIT's
    # full tiers, 101 with these (its processes and theirs, a loaded 2-core machine). No class-data
    # archive: the class path of these JVMs begins with SPARK_CONF_DIR, which the archive's does not.
    env["SPARK_SUBMIT_OPTS"] = SHORT_JVM_OPTIONS
    try:
        # Its Connect server binds 15002, whatever the settings: one run at a time on this machine
        # (the docs walk's pipelines page holds it too).
        with fixed_port(SPARK_CONNECT_PORT):
            return subprocess.run([spark_bin("spark-pipelines"), "run", "--spec", "spark-pipeline.yml"], cwd=pipeline,
                                  env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"spark-pipelines run timed out after {RUN_TIMEOUT}s:\n{e.stdout}\n{e.stderr}") from None


def output(result: subprocess.CompletedProcess, lines: int = 40) -> str:
    text = (result.stdout or "") + (result.stderr or "")
    return "\n".join([line for line in text.splitlines() if not line.lstrip().startswith("at ")][-lines:])


def current_metadata(warehouse: Path, table: str) -> Path:
    found = sorted(warehouse.glob(f"**/{table}/metadata/*.metadata.json"))
    assert found, f"no metadata of {table} under {warehouse}"
    return found[-1]


def current_snapshot(warehouse: Path, table: str) -> int | None:
    return json.loads(current_metadata(warehouse, table).read_text()).get("current-snapshot-id")


def check_encrypted_table(warehouse: Path, table: str, kms) -> list[dict]:
    """Every file PARE/AGS1, the verifier's OK, and the rows as the JVM-free reader sees them."""
    from pyiceberg_crypto.read import read_table
    from pyiceberg_crypto.verify import verify_metadata

    table_dir = current_metadata(warehouse, table).parents[1]
    data_files = list((table_dir / "data").rglob("*.parquet"))
    assert data_files, f"{table} has no data files"
    for path in data_files:
        assert path.read_bytes()[:4] == b"PARE", f"{path} is not an encrypted Parquet file"
    for path in (table_dir / "metadata").glob("*.avro"):
        assert path.read_bytes()[:4] == b"AGS1", f"{path} is not an AGS1 stream"
    location = str(current_metadata(warehouse, table))
    report = verify_metadata(location, kms)
    assert report.ok, [f for f in report.files if not f.ok][:3]
    return read_table(location, kms).to_pylist()


def test_declarative_pipeline_through_the_kms_service(tmp_path, keystore, kms_service):
    if not Path(spark_bin("spark-pipelines")).exists():
        pytest.skip("this pyspark has no spark-pipelines (Spark Declarative Pipelines come with Spark 4.1)")
    pytest.importorskip("grpc", reason="spark-pipelines needs the Spark Connect client (pyproject's test extra)")
    kms = KeystoreKms(keystore)
    pipeline, conf_dir = make_pipeline(tmp_path, kms_service)
    warehouse, inputs = tmp_path / "wh", tmp_path / "input"
    inputs.mkdir()
    write_events(inputs, "first", range(0, 12))

    first = run_pipeline(pipeline, conf_dir)
    assert first.returncode == 0, output(first)
    rows = check_encrypted_table(warehouse, "events", kms)
    assert sorted(r["id"] for r in rows) == list(range(0, 12))
    counts = {r["bucket"]: r["count"] for r in check_encrypted_table(warehouse, "events_by_bucket", kms)}
    assert counts == {0: 4, 1: 4, 2: 4}
    calls = kms_service.refresh_status()["clients"]
    assert set(calls) == {"127.0.0.1"} and calls["127.0.0.1"].get("wrap", 0) > 0, calls

    # The KMS down: the run fails on the key, naming the service; no data commit.
    write_events(inputs, "second", range(12, 20))
    before = current_snapshot(warehouse, "events")
    address = kms_service.address
    kms_service.stop()
    failed = run_pipeline(pipeline, conf_dir)
    assert failed.returncode != 0, output(failed)
    assert "pyiceberg-crypto kms serve" in output(failed, 400) and "failed to" in output(failed, 400), output(failed)
    assert current_snapshot(warehouse, "events") == before

    # The KMS back: the next run takes the new file exactly once.
    kms_service.restart(listen=address)
    resumed = run_pipeline(pipeline, conf_dir)
    assert resumed.returncode == 0, output(resumed)
    ids = Counter(r["id"] for r in check_encrypted_table(warehouse, "events", kms))
    assert sorted(ids) == list(range(0, 20)) and set(ids.values()) == {1}, ids
    counts = {r["bucket"]: r["count"] for r in check_encrypted_table(warehouse, "events_by_bucket", kms)}
    assert counts == {0: 7, 1: 7, 2: 6}
    token = kms_service.token_file.read_text().strip()
    assert token not in first.stdout + first.stderr + resumed.stdout + resumed.stderr
