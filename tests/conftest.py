"""Shared fixtures: one real SparkSession per test process (real Iceberg runtime, real Hive
metastore on embedded Derby, the real bridge jar), plus its JVM gateway for reference vectors."""

from __future__ import annotations

import os

import pytest

from pyiceberg_crypto import config

CATALOG = "local"


@pytest.fixture(scope="session")
def spark_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("spark")
    return {"warehouse": root / "warehouse", "metastore": root / "metastore", "root": root}


@pytest.fixture(scope="session")
def spark(spark_dirs):
    """A local SparkSession configured by our own builders (catalog ``local``, KMS name ``test``)."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", os.sys.executable)
    settings = config.spark_settings(
        CATALOG,
        warehouse=spark_dirs["warehouse"],
        metastore_dir=spark_dirs["metastore"],
        kms_name="test",
    )
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("pyiceberg-crypto-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "2g")
    )
    session = config.configure_spark_with_encryption(builder, settings).getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def jvm(spark):
    """The driver JVM (Py4J view), for calling Iceberg / parquet-java reference classes."""
    return spark.sparkContext._jvm
