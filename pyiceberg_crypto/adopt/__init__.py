"""Encrypt the lake you already have (issue 51): an existing plaintext Iceberg table becomes an
encrypted table under its own name, verified row for row before the swap::

    from pyiceberg_crypto.adopt import encrypt_table

    result = encrypt_table(spark, "lake.db.orders", "orders-key")             # original kept, renamed
    result = encrypt_table(spark, "lake.db.orders", "orders-key", purge_now=True, prove=proof)
    result.swapped, result.compared, result.kept, result.not_kept, result.purge_command

Modules: :mod:`.encrypt` (the phases: stage, copy, catch-up, verify, swap, purge), :mod:`.rows` (the
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

__all__ = ["PHASES", "REFS_DROP", "REFS_KEEP_ORIGINAL", "AdoptChangedError", "AdoptError", "AdoptResult",
           "AdoptVerificationError", "encrypt_table"]
