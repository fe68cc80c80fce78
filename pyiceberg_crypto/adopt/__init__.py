"""Encrypt the lake you already have (issue 51): an existing plaintext Iceberg table becomes an
encrypted table under its own name, verified row for row before the swap::

    from pyiceberg_crypto.adopt import encrypt_table

    result = encrypt_table(spark, "lake.db.orders", "orders-key")             # original kept, renamed
    result = encrypt_table(spark, "lake.db.orders", "orders-key", purge_now=True, prove=proof)
    result.swapped, result.compared, result.kept, result.not_kept, result.purge_command

The whole lake (the audit's ``UNENCRYPTED`` tables, several at a time, resumable from its report)::

    outcome = encrypt_tables(spark, "lake", "lake-key", namespaces=["shop"], parallel=2, report="lake.json")
    outcome.ok, outcome.done, outcome.failed, outcome.skipped
    encrypt_tables(spark, "lake", "lake-key", resume="lake.json")      # skips what is done

Modules: :mod:`.lake` (every table of a catalog), :mod:`.encrypt` (the phases: stage, copy, catch-up, verify, swap, purge), :mod:`.rows` (the
order-independent per-partition fingerprint of a table's rows).
"""

from pyiceberg_crypto.adopt.encrypt import (
    PHASES,
    REFS_DROP,
    REFS_KEEP_ORIGINAL,
    AdoptChangedError,
    AdoptError,
    AdoptResult,
    AdoptVerificationError,
    encrypt_table,
)
from pyiceberg_crypto.adopt import lake as _lake
from pyiceberg_crypto.adopt.lake import (
    LakeListing,
    LakeOutcome,
    encrypt_each,
    encrypt_tables,
    read_report,
    unencrypted_tables,
)

__all__ = ["PHASES", "REFS_DROP", "REFS_KEEP_ORIGINAL", "AdoptChangedError", "AdoptError", "AdoptResult",
           "AdoptVerificationError", "LakeListing", "LakeOutcome", "encrypt_each", "encrypt_table",
           "encrypt_tables", "read_report", "unencrypted_tables"]


def __getattr__(name: str):
    """``ReportFileError``, the old name of :class:`~pyiceberg_crypto.errors.ReportError` (one error
    for a report that cannot be used): kept for one release, with a DeprecationWarning."""
    if name == "ReportFileError":
        return _lake._deprecated_report_file_error(stacklevel=3)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
