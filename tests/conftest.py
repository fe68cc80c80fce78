"""Shared fixtures: one real SparkSession per test process (real Iceberg runtime, real Hive
metastore on embedded Derby, the real bridge jar), plus its JVM gateway for reference vectors.

Also the two lanes (``make test-fast`` runs ``-m "not jvm"`` with no ``java`` on PATH) and the
per-test timeouts: see :func:`pytest_collection_modifyitems`.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from pyiceberg_crypto import config
# One standalone Hive metastore (loopback) for every test that needs one, started on first use.
from pyiceberg_crypto.testing.ports import closed_port
from pyiceberg_crypto.testing.pytest_plugin import hive_metastore  # noqa: F401
from tests.testkit import (DIST_STATUS_ENV, SPARK_JVM_OPTIONS, TEST_DIST_ENV, awaited_dist, build_dist, found_dist,
                           testkit_jar)

CATALOG = "local"

# The session's own driver JVM (the ``spark`` fixture: pyspark starts it through spark-submit, which
# reads SPARK_SUBMIT_OPTS) with C1 only and the serial collector, like every other short-lived
# driver the tests start (tests.testkit.SHORT_DRIVER_ENV). Measured on tests/verify, read and audit
# (243 tests, idle 2-core machine, two runs each): the same wall time (93-100 s) for 113-122 CPU
# seconds instead of 145-156; the lanes share 2 cores, so CPU seconds are what the suite's time is
# made of. With them, the class-data sharing archive ``make test`` makes (tests.jvm_archive; a driver
# that starts before it is made runs without it). A value already set is kept; subprocesses inherit
# it (a test that wants C2 drops it).
os.environ.setdefault("SPARK_SUBMIT_OPTS", SPARK_JVM_OPTIONS)

# --- lanes and timeouts ---------------------------------------------------------------------

# Fixtures that start a JVM (directly or through the fixtures they use: pytest lists the whole
# closure in item.fixturenames): the Spark driver, the Java test services, the wheel build (Maven).
JVM_FIXTURES = frozenset({
    "spark", "jvm", "kms_registration", "hive_metastore", "rest_catalog_server", "kafka_broker",
    "dist", "netns_cluster", "yarn_cluster",
})
# Markers whose tests start JVMs of their own, by subprocess (spark-submit, Spark applications,
# the namespace cluster, local-cluster applications, wheels installed into fresh environments, the docs walk).
JVM_MARKERS = frozenset({"apps", "cluster", "executors", "newcomer", "processes"})
# A hang fails one test, by name, after this many seconds (pyproject.toml: timeout = 300 for a
# unit test). The longest tests take ~8 minutes under CI's load (a docs-walk chain more): these markers get 30 minutes;
# other JVM tests 15 (the first one of a session also waits for Spark and the services to start).
LONG_TIMEOUT_MARKERS = frozenset({"slow", "apps", "cluster", "executors", "newcomer"})
LONG_TIMEOUT_SECONDS = 1800
JVM_TIMEOUT_SECONDS = 900

# What Maven builds (make jars): tests marked ``jars`` read them (the builders put the bridge jar
# on spark.jars, the packaging tests list them) without starting a JVM. Where they are not built
# (make test-fast on a fresh clone: no Java, no Maven), those tests skip, saying so.
ROOT = Path(__file__).resolve().parents[1]
BUILT_JARS = (
    ROOT / "pyiceberg_crypto" / "_jars" / "pyiceberg-crypto-bridge.jar",
    ROOT / "pyiceberg_crypto" / "testing" / "_jars" / "pyiceberg-crypto-testing.jar",
    ROOT / "jars" / "target" / "pyiceberg-crypto-bridge-tests.jar",
)


def pytest_collection_modifyitems(config, items):
    """Mark every test that starts a JVM ``jvm`` (by its fixtures or markers, or an explicit
    ``pytest.mark.jvm`` for subprocess JVMs), give long tests their longer timeout, and skip the
    ``jars`` tests where the jars are not built."""
    missing_jars = [str(path.relative_to(ROOT)) for path in BUILT_JARS if not path.is_file()]
    for item in items:
        markers = {mark.name for mark in item.iter_markers()}
        if "jars" in markers and missing_jars:
            item.add_marker(pytest.mark.skip(reason=f"not built (make jars): {', '.join(missing_jars)}"))
        if "jvm" not in markers and (JVM_FIXTURES.intersection(item.fixturenames) or markers & JVM_MARKERS):
            item.add_marker(pytest.mark.jvm)
            markers.add("jvm")
        if "timeout" not in markers and markers & LONG_TIMEOUT_MARKERS:
            item.add_marker(pytest.mark.timeout(LONG_TIMEOUT_SECONDS))
        elif "timeout" not in markers and "jvm" in markers:
            item.add_marker(pytest.mark.timeout(JVM_TIMEOUT_SECONDS))


@pytest.fixture(scope="session")
def spark_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("spark")
    return {"warehouse": root / "warehouse", "metastore": root / "metastore", "root": root}


@pytest.fixture(scope="session")
def spark(spark_dirs):
    """A local SparkSession configured by our own builders (catalog ``local``, KMS name ``test``)."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.fail("no java on PATH and no JAVA_HOME: this test starts Spark (a jvm test; make test-fast runs -m 'not jvm')")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings = config.spark_settings(
        CATALOG,
        warehouse=spark_dirs["warehouse"],
        metastore_dir=spark_dirs["metastore"],
        kms_name="test",
        kafka=True,  # Spark's Kafka connector (tests/streaming): four small jars
    )
    builder = (config.local_spark_builder("pyiceberg-crypto-tests").config("spark.driver.memory", "2g")
               .config("spark.jars", str(testkit_jar())))  # merged with the settings' jars
    session = config.configure_spark_with_encryption(builder, settings).getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def dist(tmp_path_factory):
    """The sdist and wheel built from the working tree, once per test run (newcomer and cluster tests).

    ``make test`` builds them once, in the background as its lanes start (``make dist`` into
    ``.cache/test-dist``), and names the directory in ``PYICEBERG_CRYPTO_TEST_DIST``, so two lanes
    never build at once: the fixture waits for that build to end. Without it (a single pytest run)
    the fixture builds them itself, the same way."""
    prebuilt, status = os.environ.get(TEST_DIST_ENV), os.environ.get(DIST_STATUS_ENV)
    if prebuilt and status:
        return awaited_dist(Path(prebuilt), Path(status))
    if prebuilt:
        return found_dist(Path(prebuilt))
    return build_dist(tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="session")
def jvm(spark):
    """The driver JVM (Py4J view), for calling Iceberg / parquet-java reference classes."""
    return spark.sparkContext._jvm


# --- Python KMS registered under the session catalog's name ("test") -------------------------

MASTER_KEY_IDS = ("k1", "k2")


@pytest.fixture
def refused_port():
    """A loopback port where every TCP connection is refused during the test (bound, never
    listened on: no other process can take it): a server that is down."""
    with closed_port() as port:
        yield port


@pytest.fixture(scope="session")
def master_keys():
    """Master keys of the session's InMemoryKms (random per test run)."""
    return {key_id: os.urandom(16) for key_id in MASTER_KEY_IDS}


@pytest.fixture(scope="session")
def kms_registration(spark, master_keys):
    from pyiceberg_crypto.bridge import register_kms
    from pyiceberg_crypto.kms import InMemoryKms

    registration = register_kms(spark, InMemoryKms(master_keys), name="test")
    yield registration
    registration.close()


def add_catalog(spark, name, warehouse, **kwargs):
    """Register another Iceberg catalog at run time on the session's (shared) metastore."""
    for key, value in config.catalog_settings(name, warehouse=warehouse, **kwargs).items():
        spark.conf.set(key, value)
