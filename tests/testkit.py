"""The Java test kit (reference vectors, benchmarks, ``JavaMemoryKms``): a test-only jar.

``make jars`` builds it from ``jars/src/test/java`` into ``jars/target``; it never ships in the
wheel. Tests and benchmarks add it to their sessions' ``spark.jars`` (or a plain ``java -cp``).
"""

from __future__ import annotations

import os
from pathlib import Path

from pyiceberg_crypto import jars

ROOT = Path(__file__).resolve().parents[1]
TESTKIT_JAR = ROOT / "jars" / "target" / "pyiceberg-crypto-bridge-tests.jar"


def testkit_jar() -> Path:
    """Path of the test-kit jar (a clear error when it was not built)."""
    if not TESTKIT_JAR.is_file():
        raise jars.JarNotFoundError(f"{TESTKIT_JAR} is missing: run `make jars` (builds it with the test kit)")
    return TESTKIT_JAR


def java_classpath() -> str:
    """A classpath for plain ``java`` runs of the test kit: the kit, the bridge, the Iceberg runtime."""
    directory = jars.local_jars_dir()
    if directory is None:
        raise jars.JarNotFoundError(f"plain java runs need {jars.JARS_DIR_ENV} (make sets it)")
    runtime = jars.local_jar(directory, jars.runtime_artifact(jars.spark_line()))
    return os.pathsep.join(str(p) for p in (testkit_jar(), jars.bridge_jar(), runtime))
