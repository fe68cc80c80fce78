"""What every benchmark section gets: sizes (full or quick), the data directory, and one shared
Spark session with a Python KMS registered (started on first use).

Sizes are chosen so that ``make bench`` stays within ~1 hour on 2 cores (sections 5 and 6,
which write 61,000 + 20,020 small data files and verify them, take ~50 minutes of it) and
``make bench-quick`` under 3 minutes while printing the same table shape (it also leaves out the
Spark applications a section would start besides the shared session: ``bench.run.QUICK_NOTE``).
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

CATALOG = "bench"
KMS_NAME = "bench"
MASTER_KEY_ID = "bench-master"


@dataclass(frozen=True)
class Sizes:
    """Workload sizes of one mode."""

    repeats: int
    goal_repeats: int  # repetitions of the rows a goal is measured on (harness.GOAL_MIN_REPEATS = 7)
    threads: int
    ags1_mib: int
    ags1_java_warmup: int  # untimed reads of the file before Java's timed ones (JIT warm-up)
    parquet_rows: int  # rows of the Iceberg- and PyArrow-written Parquet files (~256 MiB full)
    kms_calls_per_thread: int
    kms_latency_calls: int  # section 3: timed unwraps per configuration with a 5 ms KMS (split over the threads)
    kms_table_files: tuple[int, ...]
    table_rows: int
    table_repeats: int
    fresh_repeats: int  # section 7: runs of each fresh process (after an untimed one)
    verify_files: tuple[int, ...]  # data files of the section 5 tables (the first is the files/s reference)
    verify_repeats: int
    incremental_commits: int  # section 6: commits that build the table ...
    incremental_files_per_commit: int  # ... of this many data files each ...
    incremental_new_files: int  # ... then one commit of this many: what --since verifies
    cluster_kms_calls_per_thread: int  # section 8: unwraps per JVM thread on one executor ...
    cluster_snapshots: int  # ... and snapshots (one data file each) that expire_snapshots removes
    audit_tables: int  # section 10: tables of the audited namespace ...
    audit_files_per_table: int  # ... of this many data files each
    where_used_tables: int  # section 12: tables `keys where-used` checks
    stream_rows_per_batch: int  # section 11: rows of each micro-batch (10 data files per commit) ...
    stream_batches: int  # ... micro-batches per query (the first is not timed) ...
    stream_lag_batches: int  # ... and commits of the query whose VerifyEachCommit lag is measured
    face_calls: int  # section 14: timed unwraps per configuration of the faces (split over the threads)
    trino_rows: int  # section 14: rows of the encrypted table Trino reads (and of its plaintext twin) ...
    trino_files: int  # ... in this many data files


FULL = Sizes(
    repeats=5,
    goal_repeats=7,
    threads=2,
    ags1_mib=256,
    ags1_java_warmup=16,
    parquet_rows=5_800_000,
    kms_calls_per_thread=5_000,
    kms_latency_calls=400,
    kms_table_files=(1, 100, 1000),
    table_rows=2_000_000,
    table_repeats=3,
    fresh_repeats=3,
    verify_files=(1000, 10_000, 50_000),
    verify_repeats=3,
    incremental_commits=100,
    incremental_files_per_commit=100,
    incremental_new_files=10,
    cluster_kms_calls_per_thread=2_000,
    cluster_snapshots=100,
    audit_tables=200,
    audit_files_per_table=10,
    where_used_tables=20,
    stream_rows_per_batch=200_000,
    stream_batches=5,
    stream_lag_batches=20,
    face_calls=2_000,
    trino_rows=5_000,
    trino_files=4,
)

QUICK = Sizes(
    repeats=3,
    goal_repeats=3,
    threads=2,
    ags1_mib=16,
    ags1_java_warmup=2,
    parquet_rows=100_000,
    kms_calls_per_thread=500,
    kms_latency_calls=80,
    kms_table_files=(1, 5, 10),
    table_rows=20_000,
    table_repeats=1,
    fresh_repeats=1,
    verify_files=(10, 20, 50),
    verify_repeats=2,
    incremental_commits=3,
    incremental_files_per_commit=10,
    incremental_new_files=10,
    cluster_kms_calls_per_thread=200,
    cluster_snapshots=10,
    audit_tables=4,
    audit_files_per_table=3,
    where_used_tables=20,
    stream_rows_per_batch=2_000,
    stream_batches=2,
    stream_lag_batches=3,
    face_calls=300,
    trino_rows=2_000,
    trino_files=2,
)


@dataclass
class Context:
    """Shared state of one benchmark run."""

    sizes: Sizes
    data_dir: Path
    quick: bool
    #: encrypted tables with N data files already written in this run (N -> table), reused by sections
    file_tables: dict[int, str] = field(default_factory=dict)
    _spark: object | None = None
    _registration: object | None = None
    master_keys: dict[str, bytes] = field(default_factory=lambda: {MASTER_KEY_ID: os.urandom(16)})
    started: float = field(default_factory=time.perf_counter)

    def log(self, message: str) -> None:
        """Progress on stderr (the table goes to stdout / RESULTS.md), with the seconds since the run started."""
        print(f"[bench {time.perf_counter() - self.started:4.0f} s] {message}", file=sys.stderr, flush=True)

    @property
    def warehouse(self) -> Path:
        return self.data_dir / "warehouse"

    @property
    def metastore(self) -> Path:
        return self.data_dir / "metastore"

    def spark_settings(self) -> dict[str, str]:
        from pyiceberg_crypto import config

        return config.spark_settings(CATALOG, warehouse=self.warehouse, metastore_dir=self.metastore,
                                     kms_name=KMS_NAME)

    @property
    def spark(self):
        """The shared local[2] SparkSession (Iceberg Hive catalog ``bench``, Python KMS ``bench``)."""
        if self._spark is None:
            from pyiceberg_crypto import config
            from pyiceberg_crypto.bridge import register_kms
            from pyiceberg_crypto.kms import InMemoryKms

            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            self.log("starting Spark (local[2])")
            from tests.testkit import testkit_jar

            builder = (config.local_spark_builder("pyiceberg-crypto-bench").config("spark.driver.memory", "2g")
                       .config("spark.jars", str(testkit_jar())))
            self._spark = config.configure_spark_with_encryption(builder, self.spark_settings()).getOrCreate()
            self._spark.sparkContext.setLogLevel("ERROR")
            self._registration = register_kms(self._spark, InMemoryKms(self.master_keys), name=KMS_NAME)
            self._spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.db")
        return self._spark

    @property
    def registration(self):
        """The bridge registration of the shared session (``.stats`` counts KMS calls)."""
        self.spark  # noqa: B018 - starts the session if needed
        return self._registration

    def stop_spark(self) -> None:
        """Stop the shared session (the embedded metastore can then be opened by a subprocess)."""
        if self._spark is not None:
            self.log("stopping Spark")
            jvm = self._spark.sparkContext._jvm
            self._spark.stop()
            self._spark = self._registration = None
            try:  # the JVM lives on: shut the embedded Derby engine down to release its lock
                jvm.java.sql.DriverManager.getConnection("jdbc:derby:;shutdown=true")
            except Exception:  # noqa: BLE001 - Derby reports a successful shutdown as an SQLException
                pass


def prepare_data_dir(path: Path, *, fresh: bool) -> Path:
    """Create the (gitignored) data directory; ``fresh`` removes what a previous run left."""
    if fresh and path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
    return path
