"""The verdict on a file or a table check: the words the verifier's report, the reader's
integrity errors and a key lookup share (:mod:`pyiceberg_crypto.verify.report` re-exports them)::

    from pyiceberg_crypto.table.statuses import OK, TAMPERED, KEY_ERROR
"""

__all__ = ["DIVERGED", "KEY_ERROR", "LENGTH_MISMATCH", "MISSING", "OK", "OUTSIDE_TABLE", "PLAINTEXT", "STATUSES",
           "TAMPERED", "TRUNCATED", "UNVERIFIABLE", "WARN", "WRONG_FILE"]

OK = "OK"  # encrypted, every block/module authenticated, trusted length, own AAD
PLAINTEXT = "PLAINTEXT"  # should be encrypted and is not
TAMPERED = "TAMPERED"  # a GCM tag failed or the structure is corrupt: names the block/module
TRUNCATED = "TRUNCATED"  # shorter than its trusted length
LENGTH_MISMATCH = "LENGTH_MISMATCH"  # longer than, or otherwise not, its trusted length
WRONG_FILE = "WRONG_FILE"  # authenticates only as another file of the table (swap / replay)
MISSING = "MISSING"  # referenced but not found
KEY_ERROR = "KEY_ERROR"  # the KMS refused, or the key id is unknown
UNVERIFIABLE = "UNVERIFIABLE"  # could not be checked (e.g. no key for it): never counted as OK
OUTSIDE_TABLE = "OUTSIDE_TABLE"  # named by the table but outside its locations: never opened
DIVERGED = "DIVERGED"  # table check "history": not a continuation of what the ledger verified
WARN = "WARN"  # table check only: fine today, act soon (e.g. "kek-rotation": re-wrap); counts as OK
STATUSES = (OK, PLAINTEXT, TAMPERED, TRUNCATED, LENGTH_MISMATCH, WRONG_FILE, MISSING, KEY_ERROR,
            UNVERIFIABLE, OUTSIDE_TABLE, DIVERGED)
