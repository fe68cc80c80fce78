"""What the tests share: the Java test kit, the tests' Spark settings, and :func:`eventually` (from pyiceberg_crypto.testing._wait).

The Java test kit (reference vectors, benchmarks, ``JavaMemoryKms``) is a test-only jar: ``make
jars`` builds it from ``jars/src/test/java`` into ``jars/target``; it never ships in the wheel.
Tests and benchmarks add it to their sessions' ``spark.jars`` (or a plain ``java -cp``).

Tests wait for a condition with :func:`eventually`, never with a fixed ``time.sleep`` before an
assertion (a sleep is too short on a loaded machine and wasted on an idle one).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from pyiceberg_crypto import jars
# The one wait with a load-scaled deadline, shared with the test kit's clusters (pyiceberg_crypto.testing).
from pyiceberg_crypto.testing._wait import MAX_LOAD_FACTOR, WaitTimeoutError, eventually, load_factor  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]
TESTKIT_JAR = ROOT / "jars" / "target" / "pyiceberg-crypto-bridge-tests.jar"


def testkit_jar() -> Path:
    """Path of the test-kit jar (a clear error when it was not built)."""
    if not TESTKIT_JAR.is_file():
        raise jars.SetupError(f"{TESTKIT_JAR} is missing: run `make jars` (builds it with the test kit)")
    return TESTKIT_JAR


#: Variables of the project's own environment that a user of the built wheel does not have.
PROJECT_ENV = ("PYICEBERG_CRYPTO_JARS", "PYICEBERG_CRYPTO_SKIP_JAR_BUILD", "PYICEBERG_CRYPTO_BRIDGE_JAR",
               "PYTHONPATH", "VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_HOME")


#: Settings for the tests' own Spark applications that ``config.local_spark_builder`` does not build
#: (``spark-sql``, ``spark-submit``, ``spark-pipelines``, plain builders): what that builder sets.
#: Spark's default of 200 shuffle partitions turns every shuffle of a tiny table (expire_snapshots,
#: remove_orphan_files, an aggregate) into 200 tasks; the web UI is a server nobody opens.
SMALL_APP_SETTINGS = {"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"}

#: Environment for the short-lived Spark drivers the tests start as processes (``spark-submit``,
#: ``spark-sql``, a ``python`` that builds a session, the CLI's own sessions): the driver JVM
#: (spark-submit's, which ``SPARK_SUBMIT_OPTS`` reaches) with the C1 compiler only and the serial
#: collector. A ``keys rewrap --dry-run`` took 52-59 s without and 26-29 s with them on a loaded
#: 2-core machine: such a JVM lives too short for C2 to pay back the CPU it takes. No JVM "Picked
#: up" notice on stderr (unlike JDK_JAVA_OPTIONS); servers keep their own options, executors too except
#: in the cluster tests (tests/cluster/apps.short_lived_jvms).
SHORT_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
#: Where ``make jvm-archive`` (tests/jvm_archive.py) writes the project environment's class-data
#: sharing archive (a Makefile variable too).
PROJECT_ARCHIVE = ROOT / ".cache" / "jvm" / "spark.jsa"
#: Unified-logging options that keep the JVM silent about its archive (used, missing or not matching):
#: a JVM's stdout is what some tests read.
QUIET_ARCHIVE_OPTIONS = "-Xlog:cds=off,cds+dynamic=off"


def use_options(archive: Path) -> str:
    """The JVM options that use ``archive``: a JVM that finds none there, or one it does not
    match, starts without it and says nothing."""
    return f"-XX:SharedArchiveFile={archive} {QUIET_ARCHIVE_OPTIONS}"


def spark_jvm_options(archive: Path) -> str:
    """:data:`SHORT_JVM_OPTIONS` and the use of ``archive``: a short-lived Spark JVM's options."""
    return f"{SHORT_JVM_OPTIONS} {use_options(archive)}"


#: The options of the tests' Spark JVMs (drivers, and the executors of their local-cluster and
#: cluster applications, whose class path is the driver's): :data:`SHORT_JVM_OPTIONS` and the project
#: environment's class-data sharing archive, which ``make test`` makes while its lanes start
#: (tests.jvm_archive: the classes of Spark, Hive and Iceberg mapped parsed and verified, 40-60% of
#: a short driver's CPU; a JVM that finds no archive, or one it does not match, starts without it).
SPARK_JVM_OPTIONS = spark_jvm_options(PROJECT_ARCHIVE)
SHORT_DRIVER_ENV = {"SPARK_SUBMIT_OPTS": SPARK_JVM_OPTIONS}

#: Environment for the ``pip install`` runs into fresh environments (the newcomer tests, the docs
#: walk and the pages it runs): pip byte-compiles every module it installs, all of pyspark's (a
#: pyspark 4.1 install took 103 s with and 64 s without on the loaded 2-core machine); without it
#: Python compiles the modules a program imports, once, on their first import. ``PIP_COMPILE=0`` is
#: ``pip install --no-compile``; what is installed is the same. No command of a page changes.
QUICK_INSTALL_ENV = {"PIP_COMPILE": "0"}


#: Set by ``make test``: the directory where it builds the sdist and wheel once for every lane.
TEST_DIST_ENV = "PYICEBERG_CRYPTO_TEST_DIST"
#: Set by ``make test``, which builds that directory in the background while the main lane, which
#: needs no wheel, already runs: the status file (``make dist``'s exit status) it writes once the
#: build has ended. The ``dist`` fixture waits for it; the build's output is in :data:`DIST_LOG`
#: (the Makefile's ``TEST_DIST_LOG``).
DIST_STATUS_ENV = "PYICEBERG_CRYPTO_TEST_DIST_STATUS"
DIST_LOG = ROOT / ".cache" / "test-dist.log"
#: How long the ``dist`` fixture waits for a background ``make dist`` (about a minute on a loaded machine).
DIST_WAIT_SECONDS = 900


def awaited_dist(directory: Path, status: Path, timeout: float = DIST_WAIT_SECONDS) -> dict[str, Path]:
    """:func:`found_dist` once the background ``make dist`` of ``make test`` has written its exit
    status to ``status`` (:data:`DIST_STATUS_ENV`); a clear failure if it failed or never ended."""
    code = eventually(lambda: status.read_text().strip(), timeout, interval=1,
                      message=f"make dist into {directory} to end ({DIST_LOG})")
    assert code == "0", f"make dist into {directory} failed (exit {code}); its output is in {DIST_LOG}"
    return found_dist(directory)


def found_dist(directory: Path) -> dict[str, Path]:
    """``make dist``'s output in ``directory``: the package's one wheel and one sdist, and the test
    kit's wheel (pyiceberg-crypto-testing), else a clear failure."""
    wheels = sorted(directory.glob("pyiceberg_crypto-*.whl"))
    testing = sorted(directory.glob("pyiceberg_crypto_testing-*.whl"))
    sdists = sorted(directory.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(testing) == 1 and len(sdists) == 1, (
        f"{TEST_DIST_ENV}={directory}: expected the wheel, the test kit's wheel and the sdist (make dist), found "
        f"{sorted(directory.iterdir())}")
    return {"wheel": wheels[0], "sdist": sdists[0], "testing_wheel": testing[0]}


def build_dist(out: Path) -> dict[str, Path]:
    """``make dist`` of the working tree into ``out``: ``python -m build`` in its isolated environment
    (as a user would, without the project's environment): ``{"wheel": ..., "sdist": ...}``."""
    env = {k: v for k, v in os.environ.items() if k not in PROJECT_ENV}
    result = subprocess.run(["make", "--no-print-directory", "-C", str(ROOT), "dist", f"DIST_DIR={out}"], cwd=out,
                            env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"make dist failed:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
    return found_dist(out)


def java_classpath() -> str:
    """A classpath for plain ``java`` runs of the test kit: the kit, the bridge, the Iceberg runtime."""
    directory = jars.local_jars_dir()
    if directory is None:
        raise jars.SetupError(f"plain java runs need {jars.JARS_DIR_ENV} (make sets it)")
    runtime = jars.local_jar(directory, jars.runtime_artifact(jars.spark_line()))
    return os.pathsep.join(str(p) for p in (testkit_jar(), jars.bridge_jar(), runtime))


def metadata_location(spark, table: str) -> str:
    """The table's current metadata.json, as Spark's ``metadata_log_entries`` lists it last."""
    return spark.sql(f"SELECT file FROM {table}.metadata_log_entries ORDER BY timestamp DESC LIMIT 1").first()[0]


