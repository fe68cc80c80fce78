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

from pyiceberg_crypto._deprecated import renamed_classes
from pyiceberg_crypto.errors import IntegrityError, OperationError, ReportError
from pyiceberg_crypto.adopt.encrypt import PHASES, REFS_DROP, REFS_KEEP_ORIGINAL, AdoptResult, encrypt_table, reload_table
from pyiceberg_crypto.adopt.lake import (
    LakeListing,
    LakeOutcome,
    encrypt_each,
    encrypt_tables,
    read_report,
    unencrypted_tables,
)

__all__ = ["PHASES", "REFS_DROP", "REFS_KEEP_ORIGINAL", "AdoptResult", "LakeListing", "LakeOutcome", "encrypt_each",
           "encrypt_table", "encrypt_tables", "read_report", "reload_table", "unencrypted_tables"]

#: Old names, kept for one release (CHANGELOG.md).
__getattr__ = renamed_classes(__name__, {"AdoptError": OperationError, "AdoptChangedError": OperationError,
                                         "AdoptVerificationError": IntegrityError, "ReportFileError": ReportError})
