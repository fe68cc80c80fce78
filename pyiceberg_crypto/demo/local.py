"""The main job: an encrypted Iceberg table on local Spark, keys handled by a KMS written in Python.

Run it with ``make demo`` or ``pyiceberg-crypto demo``. Steps:

1. start local Spark with an embedded Hive metastore (Derby) and a local warehouse;
2. register an :class:`~pyiceberg_crypto.kms.InMemoryKms` as the catalog's KMS;
3. ``CREATE TABLE ... TBLPROPERTIES ('encryption.key-id'=..., 'format-version'='3')``, INSERT,
   UPDATE, DELETE (a deletion vector), SELECT back;
4. show each file's magic (``PARE`` / ``AGS1``) and how many KMS calls Python served;
5. verify the whole table with the independent verifier (:func:`pyiceberg_crypto.verify.verify_table`:
   every block and module authenticated, trusted lengths, own AAD) and print its report;
6. with Spark stopped, read the table back without a JVM (:func:`pyiceberg_crypto.read.read_table`,
   the ``[read]`` extra) and compare the rows with Spark's.

:func:`run_demo` returns a :class:`DemoReport` (data); the CLI prints it.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from pyiceberg_crypto._deprecated import renamed_classes
from pyiceberg_crypto import config
from pyiceberg_crypto.bridge import KmsCallStats, register_kms
from pyiceberg_crypto.errors import FileAccessError
from pyiceberg_crypto.kms import InMemoryKms
from pyiceberg_crypto.kms.base import KeyManagementClient
from pyiceberg_crypto.verify import TableReport, verify_table
from pyiceberg_crypto.verify.magic_scan import MagicFinding, scan_table_files, table_location

__all__ = ["DemoReport", "build_session", "print_report", "run_demo"]

#: Old names, kept for one release (CHANGELOG.md).
__getattr__ = renamed_classes(__name__, {"DemoWorkdirError": FileAccessError})

CATALOG = "demo"
TABLE = f"{CATALOG}.shop.orders"
MASTER_KEY_ID = "demo-master-key"


@dataclass
class DemoReport:
    rows: list[tuple] = field(default_factory=list)
    files: list[MagicFinding] = field(default_factory=list)
    kms_stats: KmsCallStats = field(default_factory=KmsCallStats)
    table_location: str = ""
    verification: TableReport | None = None
    metadata_location: str = ""
    jvm_free_rows: list[tuple] | None = None  # read back without a JVM; None without the [read] extra

    @property
    def ok(self) -> bool:
        kinds = {f.kind for f in self.files}
        return (bool(self.rows) and {"data", "manifest", "manifest-list"} <= kinds and all(f.ok for f in self.files)
                and self.verification is not None and self.verification.ok
                and self.jvm_free_rows in (None, self.rows))


def build_session(workdir: Path):
    """A local SparkSession configured by :func:`pyiceberg_crypto.config.spark_settings`."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings = config.spark_settings(
        CATALOG, warehouse=workdir / "warehouse", metastore_dir=workdir / "metastore", kms_name="demo"
    )
    builder = config.local_spark_builder("pyiceberg-crypto-demo")
    spark = config.configure_spark_with_encryption(builder, settings).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def run_demo(workdir: str | os.PathLike = "demo-warehouse", *, keep: bool = False, log=print) -> DemoReport:
    """Run the demo in ``workdir`` (wiped first unless ``keep``) and return its report."""
    workdir = Path(workdir).absolute()
    try:
        if workdir.exists() and not keep:
            shutil.rmtree(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise FileAccessError(f"cannot use {workdir} as the demo's directory: {exc.strerror or exc}") from None

    log(f"Starting local Spark (Iceberg {config.ICEBERG_VERSION}, embedded Hive metastore in {workdir})")
    spark = build_session(workdir)
    report = DemoReport()
    try:
        kms = InMemoryKms.with_random_keys(MASTER_KEY_ID)
        registration = register_kms(spark, kms, name="demo")
        log(f"Registered Python KMS {kms!r} (authenticated loopback callback on port {registration.port})")

        props = config.tblproperties_sql(
            config.table_properties(MASTER_KEY_ID, extra={"write.delete.mode": "merge-on-read"}))
        statements = [
            f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.shop",
            f"DROP TABLE IF EXISTS {TABLE}",
            f"CREATE TABLE {TABLE} (id bigint, customer string, amount decimal(10,2)) USING iceberg {props}",
            f"INSERT INTO {TABLE} VALUES (1, 'ada', 12.50), (2, 'grace', 99.99), (3, 'linus', 5.00)",
            f"INSERT INTO {TABLE} VALUES (4, 'barbara', 42.00)",
            f"UPDATE {TABLE} SET amount = amount + 1 WHERE id = 3",
            f"DELETE FROM {TABLE} WHERE id = 2",
        ]
        for statement in statements:
            log(f"  sql> {statement}")
            spark.sql(statement)
        report.rows = [tuple(r) for r in spark.sql(f"SELECT * FROM {TABLE} ORDER BY id").collect()]
        log(f"  sql> SELECT * FROM {TABLE} ORDER BY id")
        for row in report.rows:
            log(f"       {row}")

        report.table_location = table_location(spark, TABLE)
        report.files = scan_table_files(report.table_location)
        report.kms_stats = registration.stats.snapshot()
        log(f"Verifying {TABLE} with the independent pure-Python verifier (Spark tasks)...")
        report.verification = verify_table(spark, TABLE)
        report.metadata_location = spark.sql(
            f"SELECT file FROM {TABLE}.metadata_log_entries ORDER BY timestamp DESC LIMIT 1").first()[0]
        registration.close()
    finally:
        spark.stop()
    report.jvm_free_rows = _read_without_a_jvm(report.metadata_location, kms, log)
    return report


def _read_without_a_jvm(metadata_location: str, kms: KeyManagementClient, log) -> list[tuple] | None:
    try:
        from pyiceberg_crypto.read import read_table
    except ImportError:
        log("(pip install 'pyiceberg-crypto[read]' to also read the table back without a JVM)")
        return None
    log(f"Spark stopped. Reading {TABLE} back without a JVM (pyiceberg_crypto.read.read_table)...")
    table = read_table(metadata_location, kms).sort_by("id")
    return [tuple(row.values()) for row in table.to_pylist()]


def print_report(report: DemoReport, log=print) -> None:
    log(f"\nFiles of {TABLE} ({report.table_location}):")
    root = report.table_location.removeprefix("file:")
    for finding in report.files:
        status = "encrypted" if finding.ok else f"NOT ENCRYPTED (expected {finding.expected_magic!r})"
        log(f"  {finding.magic_text:<4}  {finding.kind:<13}  {status:<10}  {os.path.relpath(finding.path, root)}")
    stats = report.kms_stats
    log(f"\nPython KMS calls served: wrap={stats.wrap} unwrap={stats.unwrap} generate={stats.generate} errors={stats.errors}")
    if report.verification is not None:
        from pyiceberg_crypto.verify.render import format_text as format_report

        log("\nVerification report (pyiceberg_crypto.verify.verify_table):")
        log(format_report(report.verification))
    if report.jvm_free_rows is not None:
        same = "the same rows as Spark's SELECT" if report.jvm_free_rows == report.rows else "DIFFERENT rows from Spark's"
        log(f"\nRead without a JVM (pyiceberg_crypto.read): {len(report.jvm_free_rows)} rows, {same}")
        for row in report.jvm_free_rows:
            log(f"       {row}")
    if report.ok:
        log("OK: every file is encrypted (PARE / AGS1), authenticated and of its trusted length.")
    else:
        log("FAILED: see the findings above.")
