"""Post-write verification as a step of a PySpark pipeline.

    from pyiceberg_crypto.verify import verify_table

    spark.sql("INSERT INTO lake.db.orders ...")
    report = verify_table(spark, "lake.db.orders")         # the KMS registered for catalog "lake"
    if not report.ok:
        raise RuntimeError(f"{len(report.not_ok())} files of lake.db.orders failed verification")

The driver asks the metastore for the table's current ``metadata_location`` and ``metadata_hash``
(checked against the file), unwraps the KEKs with the Python KMS, and reads the manifest lists and
manifests; data and delete files are then verified in parallel by Spark tasks running this
package's own Python code (no JVM crypto). Each task receives only the key metadata of the files it
checks (their DEKs and AAD prefixes), never a master key or a KEK.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from pyiceberg_crypto.io import DEFAULT_MAX_METADATA_BYTES, FileIO, file_io_for
from pyiceberg_crypto.kms.bounded import DEFAULT_KMS_TIMEOUT_SECONDS
from pyiceberg_crypto.verify.checks import FileTask, check_file
from pyiceberg_crypto.verify.metastore import MetastoreError, catalog_properties, table_parameters
from pyiceberg_crypto.verify.pipeline import VerifyInputError, verify_metadata
from pyiceberg_crypto.verify.plan import Progress
from pyiceberg_crypto.verify.report import OK, UNVERIFIABLE, FileFinding, TableCheck, TableReport
from pyiceberg_crypto.verify.run import Runner, local_runner

KMS_NAME_PROPERTY = "pyiceberg-crypto.kms-name"
#: Task lists this small are checked on the driver (a Spark job costs ~0.5-1 s to schedule).
DEFAULT_DRIVER_MAX_FILES = 32
DRIVER_MAX_BYTES = 256 * 1024 * 1024


def verify_table(
    spark,
    table: str,
    *,
    kms=None,
    snapshot_id: int | None = None,
    all_snapshots: bool = False,
    since_snapshot_id: int | None = None,
    state: str | None = None,
    accept_history: bool = False,
    allowed_locations: list[str] | tuple[str, ...] = (),
    parallelism: int | None = None,
    driver_max_files: int = DEFAULT_DRIVER_MAX_FILES,
    progress: Progress | None = None,
    max_metadata_bytes: int = DEFAULT_MAX_METADATA_BYTES,
    kms_timeout: float | None = DEFAULT_KMS_TIMEOUT_SECONDS,
) -> TableReport:
    """Verify ``table`` (``catalog.db.table``) from its metastore entry down to every file.

    Args:
        spark: a classic SparkSession with the table's catalog configured.
        kms: the Python KMS with the table's master key; default: the one registered with
            :func:`pyiceberg_crypto.bridge.register_kms` under the catalog's ``pyiceberg-crypto.kms-name``.
        snapshot_id / all_snapshots: which snapshots to walk (default: the current one).
        since_snapshot_id / state / accept_history: incremental verification and the ledger, as in
            :func:`~pyiceberg_crypto.verify.verify_metadata` (the ledger records ``catalog.db.table``).
        allowed_locations: as in :func:`~pyiceberg_crypto.verify.verify_metadata`; the plan is made on
            the driver, so Spark tasks only ever receive files inside the table's locations.
        parallelism: number of Spark tasks for data and delete files (default: from the cluster).
        driver_max_files: at most this many files (and at most 256 MiB in all) are checked on the
            driver, with the same code, instead of in Spark tasks: scheduling a Spark job costs more
            than checking a few files (a post-write ``since`` check of one commit). 0: always Spark tasks.
        max_metadata_bytes / kms_timeout: as in :func:`~pyiceberg_crypto.verify.verify_metadata`
            (the KMS is called on the driver only).

    Raises:
        VerifyInputError: unknown catalog or table, no KMS, unreadable metadata.json.
        LedgerError: the ledger is unreadable, corrupt or another table's.
    """
    entry = metastore_table(spark, table, kms)
    metadata_location = entry.metadata_location
    file_io = entry.file_io
    expected_hash = entry.parameters.get("metadata_hash")
    source = [TableCheck("metastore", OK, f"metadata_location of {entry.name} read from the metastore")]
    if expected_hash is None:
        source.append(TableCheck("metadata-hash", UNVERIFIABLE, "the metastore records no metadata_hash for this table"))
    return verify_metadata(
        metadata_location,
        entry.kms,
        snapshot_id=snapshot_id,
        all_snapshots=all_snapshots,
        since_snapshot_id=since_snapshot_id,
        state=state,
        accept_history=accept_history,
        allowed_locations=allowed_locations,
        table_name=entry.name,
        file_io=file_io,
        expected_metadata_hash=expected_hash,
        source_checks=source,
        runner=spark_runner(spark, file_io, parallelism, description=f"pyiceberg-crypto verify {table}",
                            driver_max_files=driver_max_files),
        progress=progress,
        max_metadata_bytes=max_metadata_bytes,
        kms_timeout=kms_timeout,
    )


@dataclass(frozen=True)
class MetastoreTable:
    """What the metastore and the Spark catalog say about one table, and the KMS to use for it."""

    name: str  # catalog.db.table
    properties: dict[str, str]  # the catalog's settings
    parameters: dict[str, str]  # the metastore's table parameters (metadata_location, metadata_hash, ...)
    kms: object

    @property
    def metadata_location(self) -> str:
        return self.parameters["metadata_location"]

    @property
    def file_io(self) -> FileIO:
        return file_io_for(self.metadata_location, self.properties)


def metastore_table(spark, table: str, kms=None) -> MetastoreTable:
    """Look ``table`` up in its catalog's metastore; ``kms`` defaults to the Python KMS registered
    for the catalog. Raises VerifyInputError (unknown catalog or table, no KMS)."""
    catalog, database, name = split_table_name(spark, table)
    try:
        properties = catalog_properties(spark, catalog)
        parameters = table_parameters(spark, properties, database, name)
    except MetastoreError as exc:
        raise VerifyInputError(str(exc)) from None
    kms = kms if kms is not None else registered_kms(properties, catalog)
    return MetastoreTable(f"{catalog}.{database}.{name}", properties, parameters, kms)


def split_table_name(spark, table: str) -> tuple[str, str, str]:
    parts = table.split(".")
    if len(parts) == 2:
        parts = [spark.catalog.currentCatalog(), *parts]
    if len(parts) != 3 or not all(parts):
        raise VerifyInputError(f"table must be catalog.db.table, got {table!r}")
    return parts[0], parts[1], parts[2]


def registered_kms(properties: dict[str, str], catalog: str):
    from pyiceberg_crypto.bridge import registered

    service = properties.get("pyiceberg-crypto.kms-service")
    if service:
        raise VerifyInputError(
            f"catalog {catalog!r} uses the KMS service {service} (pyiceberg-crypto kms serve), which serves "
            "JVMs only: pass the same KMS to verify_table(..., kms=load_kms(...)) (the verifier unwraps keys "
            "in Python), or --kms to the verification job"
        )
    name = properties.get(KMS_NAME_PROPERTY, "default")
    registration = registered(name)
    if registration is None or not registration.active:
        raise VerifyInputError(
            f"no Python KMS is registered under {name!r} (catalog {catalog!r}): call "
            f"register_kms(spark, kms, name={name!r}) first, or pass kms= to verify_table"
        )
    return registration.kms


def spark_runner(spark, file_io: FileIO, parallelism: int | None = None, description: str | None = None,
                 driver_max_files: int = 0) -> Runner:
    """A runner that verifies files in Spark tasks (Python workers running this package); task
    lists of at most ``driver_max_files`` files and :data:`DRIVER_MAX_BYTES` run in the driver."""
    on_driver = local_runner(file_io, threads=2)

    def run(tasks: list[FileTask]) -> list[FileFinding]:
        if not tasks:
            return []
        if len(tasks) <= driver_max_files and sum(t.expected_size or 0 for t in tasks) <= DRIVER_MAX_BYTES:
            return on_driver(tasks)
        sc = spark.sparkContext
        slices = parallelism or max(1, min(len(tasks), sc.defaultParallelism * 4))
        if description:
            sc.setJobDescription(description)
        try:
            return sc.parallelize(tasks, slices).mapPartitions(partial(verify_partition, file_io)).collect()
        finally:
            if description:
                sc.setJobDescription(None)

    return run


def verify_partition(file_io: FileIO, tasks):
    """Runs in a Spark Python worker: verify each file of one partition."""
    for task in tasks:
        yield check_file(task, file_io)
