"""One metadata change of a table's ``encryption-keys``, committed through its catalog with Iceberg
Java over Py4J and redone on a concurrent commit (shared by :mod:`.rewrap`, :mod:`.prune` and
:mod:`.reencrypt`)::

    full_name, ops = load_operations(spark, "lake.db.orders", OperationError)
    full_name, ops, kms = load_operations_and_kms(spark, "lake.db.orders", None, OperationError)  # + its KMS
    table_key_id = master_key_id(ops.refresh(), OperationError)     # the table's encryption.key-id
    attempts, committed, location = commit_with_retries(spark, ops, full_name, step, what="re-wrap",
                                                        error=OperationError, max_attempts=4)

``step(base)`` gets the freshly read ``TableMetadata`` and returns the new one (built with
``TableMetadata.buildFrom(base)``) or None for nothing to commit. ``TableOperations.commit(base,
new)`` is the metastore's compare-and-swap: when another writer committed in between, it raises
``CommitFailedException`` and the table is re-read and ``step`` asked again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyiceberg_crypto.kms.base import KeyManagementClient
from pyiceberg_crypto.catalog.spark import catalog_properties, registered_kms, split_table_name
from pyiceberg_crypto.properties import KEY_ID
from pyiceberg_crypto.spark.java import java_class, java_line

#: Nothing here is public API: the package's own modules use these helpers (the key commands' commit).
__all__: list[str] = []


def load_operations(spark, table: str, error: type[Exception]) -> tuple[str, Any]:
    """(catalog.db.table, its Iceberg ``TableOperations``), else ``error``."""
    full_name = ".".join(split_table_name(spark, table))
    jvm = spark.sparkContext._jvm
    try:
        ops = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, full_name).operations()
    except Exception as exc:
        raise error(f"cannot load {full_name} as an Iceberg table: {java_line(exc)}") from None
    return full_name, ops


def load_operations_and_kms(spark, table: str, kms: KeyManagementClient | None,
                            error: type[Exception]) -> tuple[str, Any, KeyManagementClient]:
    """:func:`load_operations`, and the KMS of the table's master key: ``kms``, or the Python KMS
    registered for its catalog (TableInputError when there is none)."""
    full_name, ops = load_operations(spark, table, error)
    if kms is None:
        catalog = full_name.split(".")[0]
        kms = registered_kms(catalog_properties(spark, catalog), catalog)
    return full_name, ops, kms


def master_key_id(base, error: type[Exception], table: str = "the table") -> str:
    """The ``encryption.key-id`` of Iceberg ``TableMetadata`` ``base`` (the master key wrapping
    its KEKs), else ``error``: the table is not encrypted."""
    key_id = base.properties().get(KEY_ID)
    if not key_id:
        raise error(f"{table} has no encryption.key-id: it is not encrypted")
    return key_id


def commit_with_retries(spark, ops, full_name: str, step: Callable[[Any], Any], *, what: str,
                        error: type[Exception], max_attempts: int) -> tuple[int, bool, str]:
    """(attempts, committed, metadata location after the commit or of the last table read)."""
    for attempt in range(1, max_attempts + 1):
        base = ops.refresh()
        new = step(base)
        if new is None:
            return attempt, False, base.metadataFileLocation()
        try:
            ops.commit(base, new)
        except Exception as exc:
            kind = java_class(exc)
            if kind.endswith("CommitFailedException") and attempt < max_attempts:
                continue  # a concurrent commit won: re-read the table and redo
            if kind.endswith("CommitStateUnknownException"):
                raise error(f"the commit of {full_name} may or may not have happened ({java_line(exc)}): "
                            "check `pyiceberg-crypto keys list` before retrying") from None
            raise error(f"the {what} of {full_name} was not committed: {java_line(exc)}") from None
        location = ops.refresh().metadataFileLocation()
        spark.sql(f"REFRESH TABLE {full_name}")
        return attempt, True, location
    raise error(f"the {what} of {full_name} was refused {max_attempts} times by concurrent commits")


