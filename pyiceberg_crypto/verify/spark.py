"""Post-write verification as a step of a PySpark pipeline.

    from pyiceberg_crypto.verify import verify_table

    spark.sql("INSERT INTO lake.db.orders ...")
    report = verify_table(spark, "lake.db.orders")         # the KMS registered for catalog "lake"
    if not report.ok:
        raise RuntimeError(f"{len(report.not_ok())} files of lake.db.orders failed verification")

The driver asks the table's catalog where its current metadata.json is: the Hive metastore (its
``metadata_location`` and ``metadata_hash``, checked against the file) or a REST catalog (its
``loadTable`` answer, whose metadata the file must equal), unwraps the KEKs with the Python KMS, and reads the manifest lists and
manifests; data and delete files are then verified in parallel by Spark tasks running this
package's own Python code (no JVM crypto). Each task receives only the key metadata of the files it
checks (their DEKs and AAD prefixes), never a master key or a KEK.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from pyiceberg_crypto.io import FileIO
from pyiceberg_crypto.kms.base import KeyManagementClient
from pyiceberg_crypto.catalog.spark import catalog_table
from pyiceberg_crypto.table.limits import Limits
from pyiceberg_crypto.verify.checks import FileTask, check_file
from pyiceberg_crypto.verify.pipeline import prepare_catalog_verification
from pyiceberg_crypto.verify.plan import Progress
from pyiceberg_crypto.verify.report import FileFinding, TableReport
from pyiceberg_crypto.verify.runners import (
    DEFAULT_DRIVER_MAX_FILES,
    Runner,
    in_one_spark_job,
    local_runner,
    on_the_driver,
)

__all__ = ["verify_table"]


def verify_table(
    spark,
    table: str,
    *,
    kms: KeyManagementClient | None = None,
    snapshot_id: int | None = None,
    all_snapshots: bool = False,
    since_snapshot_id: int | None = None,
    state: str | None = None,
    accept_history: bool = False,
    parallelism: int | None = None,
    driver_max_files: int = DEFAULT_DRIVER_MAX_FILES,
    progress: Progress | None = None,
    limits: Limits | None = None,
) -> TableReport:
    """Verify ``table`` (``catalog.db.table``) from its catalog entry down to every file (a Hive
    metastore's entry, or a REST catalog's ``loadTable`` answer).

    Args:
        spark: a classic SparkSession with the table's catalog configured.
        kms: the Python KMS with the table's master key; default: the one registered with
            :func:`pyiceberg_crypto.bridge.register_kms` under the catalog's ``pyiceberg-crypto.kms-name``.
        snapshot_id / all_snapshots: which snapshots to walk (default: the current one).
        since_snapshot_id / state / accept_history: incremental verification and the ledger, as in
            :func:`~pyiceberg_crypto.verify.verify_metadata` (the ledger records ``catalog.db.table``).
        parallelism: number of Spark tasks for data and delete files (default: from the cluster).
        driver_max_files: at most this many files (and at most 256 MiB in all) are checked on the
            driver, with the same code, instead of in Spark tasks: scheduling a Spark job costs more
            than checking a few files (a post-write ``since`` check of one commit). 0: always Spark tasks.
        limits: ``allowed_locations``, ``max_metadata_bytes`` and ``kms_timeout`` as in
            :func:`~pyiceberg_crypto.verify.verify_metadata` (default ``Limits()``; the plan is made
            on the driver, so Spark tasks only ever receive files inside the table's locations, and
            the KMS is called on the driver only). Its ``file_io`` and ``properties`` are ignored:
            files are read as the catalog's settings say.

    Raises:
        TableInputError: unknown catalog or table, no KMS, unreadable metadata.json.
        LedgerError: the ledger is unreadable, corrupt or another table's.
    """
    limits = limits or Limits()
    entry = catalog_table(spark, table, kms)
    file_io = entry.file_io
    prepared = prepare_catalog_verification(
        entry,
        entry.kms,
        table_name=entry.name,
        catalog_uri=entry.properties.get("uri"),
        snapshot_id=snapshot_id,
        all_snapshots=all_snapshots,
        since_snapshot_id=since_snapshot_id,
        state=state,
        accept_history=accept_history,
        progress=progress,
        limits=replace(limits, file_io=file_io, properties=None),
    )
    return prepared.run(spark_runner(spark, file_io, parallelism, description=f"pyiceberg-crypto verify {table}",
                                     driver_max_files=driver_max_files))


def spark_runner(spark, file_io: FileIO, parallelism: int | None = None, description: str | None = None,
                 driver_max_files: int = 0) -> Runner:
    """A runner that verifies files in Spark tasks (Python workers running this package); task
    lists of at most ``driver_max_files`` files and ``DRIVER_MAX_BYTES`` run in the driver
    (:func:`~pyiceberg_crypto.verify.runners.on_the_driver`, the audit's rule too)."""
    on_driver = local_runner(file_io, threads=2)

    def run(tasks: list[FileTask]) -> list[FileFinding]:
        if not tasks:
            return []
        if on_the_driver(tasks, driver_max_files):
            return on_driver(tasks)
        findings, _ = in_one_spark_job(spark, tasks, partial(verify_partition, file_io), parallelism=parallelism,
                                       description=description)
        return findings

    return run


def verify_partition(file_io: FileIO, tasks):
    """Runs in a Spark Python worker: verify each file of one partition."""
    for task in tasks:
        yield check_file(task, file_io)
