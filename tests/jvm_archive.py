"""A class-data sharing archive for the tests' short-lived Spark drivers (JDK CDS, JEP 350).

A Spark driver that lives seconds (a CLI command with ``--warehouse``, a test's own application)
spends most of its CPU loading, parsing and verifying the same ~20,000 classes of Spark, Hive and
Iceberg. A dynamic CDS archive holds them parsed and verified: the JVM maps it instead. Measured on
an idle 2-core machine, one session creating, filling and reading an encrypted table: 13-14 CPU
seconds (11-12 s wall) without, 5.5 CPU seconds (4.3 s wall) with. The lanes of ``make test`` share
two cores, so CPU seconds are the suite's time.

What it changes is the JVM's start, never what runs: the JVM checks the archive against its own
build and its class path (the jars' paths, sizes and times) and, where it does not match (another
environment's pyspark, a rebuilt jar, another JVM), ignores it and loads the classes as always.
``-Xlog:cds=off`` keeps that quiet: a JVM's stdout is what some tests read.

``make test`` makes the archive once (``make jvm-archive``), with the project's environment, while
its lanes start; :data:`~tests.testkit.SPARK_JVM_OPTIONS` names it (the drivers' ``SPARK_SUBMIT_OPTS``,
the executors' options).
A JVM started before it is there runs without it (a missing archive is ignored, quietly too); it
appears whole or not at all (written beside, then renamed). The docs walk makes one for its own
environment (a pyspark of another path).

Usage::

    python -m tests.jvm_archive .cache/jvm/spark.jsa            # the project's environment
    make_archive(venv / "bin" / "python", archive, env=env)     # another environment's
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.testkit import PROJECT_ARCHIVE, QUIET_ARCHIVE_OPTIONS, SHORT_JVM_OPTIONS

#: What the archive's JVM runs: the classes of a session that makes, fills, changes and reads an
#: encrypted table through the bridge, on the embedded metastore (what most short drivers do).
WORKLOAD = """
import sys
from pyspark import SparkContext
from pyiceberg_crypto import config
from pyiceberg_crypto.bridge import register_kms
from pyiceberg_crypto.kms import InMemoryKms

spark = config.session_for_catalog("lake", warehouse=sys.argv[1])
register_kms(spark, InMemoryKms.with_random_keys("k"))
spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.db")
spark.sql("CREATE TABLE lake.db.t (id bigint, item string) USING iceberg PARTITIONED BY (bucket(2, id)) "
          + config.tblproperties_sql(config.table_properties("k")))
spark.sql("INSERT INTO lake.db.t SELECT id, CAST(id AS string) FROM range(1, 21)")
spark.sql("DELETE FROM lake.db.t WHERE id = 5")
spark.sql("UPDATE lake.db.t SET item = 'x' WHERE id = 6")
spark.sql("MERGE INTO lake.db.t AS t USING (SELECT 7 AS id, 'y' AS item) AS s ON t.id = s.id "
          "WHEN MATCHED THEN UPDATE SET item = s.item")
spark.sql("SELECT * FROM lake.db.t.snapshots").collect()
spark.sql("SELECT * FROM lake.db.t.files").collect()
assert spark.sql("SELECT count(*) FROM lake.db.t").collect()[0][0] == 19
spark.sql("CALL lake.system.rewrite_data_files(table => 'db.t')").collect()
gateway = SparkContext._gateway
spark.stop()
# The archive is written when the JVM exits: it does on its stdin's end (pyspark's gateway), and
# this process waits for it, rather than leave it writing behind.
gateway.proc.stdin.close()
gateway.proc.wait(600)
"""


def make_archive(python: Path | str, archive: Path, *, env: dict[str, str] | None = None,
                 base_options: str = "", timeout: float = 900) -> Path:
    """Run :data:`WORKLOAD` with ``python`` (whose pyspark and pyiceberg-crypto the archive is for)
    and write the classes its driver JVM loaded to ``archive`` (replaced only once complete)."""
    archive = archive.resolve()  # the JVM runs in a scratch directory
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(archive.name + ".partial")
    partial.unlink(missing_ok=True)
    env = dict(os.environ if env is None else env)
    env["SPARK_SUBMIT_OPTS"] = f"{base_options} -XX:ArchiveClassesAtExit={partial} {QUIET_ARCHIVE_OPTIONS}"
    with tempfile.TemporaryDirectory(prefix="jvm-archive-") as scratch:
        done = subprocess.run([str(python), "-c", WORKLOAD, str(Path(scratch) / "warehouse")], cwd=scratch, env=env,
                              capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0 or not partial.is_file():
        raise RuntimeError(f"no JVM archive made (exit {done.returncode}):\n{done.stderr[-3000:]}")
    partial.replace(archive)
    return archive


def main(argv: list[str]) -> int:
    archive = Path(argv[0]) if argv else PROJECT_ARCHIVE
    make_archive(sys.executable, archive, base_options=SHORT_JVM_OPTIONS)
    print(f"JVM archive: {archive} ({archive.stat().st_size // 2**20} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
