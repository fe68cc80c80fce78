"""The independent verifier: proves, file by file, that what Iceberg's JVM wrote is encrypted,
authentic, of its trusted length and bound to its own AAD, with code that shares nothing with the
writer (pure Python + ``cryptography``)::

    from pyiceberg_crypto.verify import verify_metadata, verify_table

    report = verify_metadata("file:/wh/db.db/t/metadata/00003-....metadata.json", kms)   # no JVM
    report = verify_table(spark, "lake.db.orders")                                      # on Spark
    report = verify_table(spark, "lake.db.orders", state="/var/lib/verify/orders.json")   # incremental
    report.ok, report.not_ok(), report.to_dict()

Built on the table model (:mod:`pyiceberg_crypto.table`), under the lake audit (:mod:`pyiceberg_crypto.audit`)
and the spark-submit job (:mod:`pyiceberg_crypto.cli.verify_job`). Modules, in the order :mod:`.pipeline` runs them:

- :mod:`.pipeline` ``verify_metadata``, the whole walk of one metadata.json; :mod:`.ledger` the
  verifier's memory (what an earlier OK run proved, the ``history`` check)
- :mod:`.table_checks` format version, key id, KEKs, snapshots, metadata hash, KEK rotation
- :mod:`.plan` scope (current / snapshot / all / since) -> manifest lists -> manifests -> one task per file
- :mod:`.runners` where file checks run (threads, or Spark tasks in :mod:`.spark`); :mod:`.checks`
  one file against its key metadata (the unit every runner runs)
- :mod:`._forensics` failing files that authenticate as other files: swaps and replays
- :mod:`.report` findings and the report document; :mod:`.render` text, JSON, error documents
- :mod:`.spark` ``verify_table``; :mod:`.each_commit` ``VerifyEachCommit``, a streaming listener
  verifying each new snapshot; :mod:`.magic_scan` the key-less magic scan (the demo's)
"""

from pyiceberg_crypto.errors import TableInputError
from pyiceberg_crypto.table.limits import Limits
from pyiceberg_crypto.verify.ledger import LedgerError
from pyiceberg_crypto.verify.pipeline import verify_catalog_table, verify_metadata
from pyiceberg_crypto.verify.report import FileFinding, TableCheck, TableReport
from pyiceberg_crypto.verify.spark import verify_table

__all__ = ["FileFinding", "LedgerError", "Limits", "TableCheck", "TableInputError", "TableReport", "VerifyEachCommit",
           "verify_catalog_table", "verify_metadata", "verify_table"]


def __getattr__(name: str):
    """``VerifyEachCommit`` is imported when first used: it loads ``pyspark.sql.streaming`` (~0.4 s),
    which the JVM-free verifier (``pyiceberg-crypto verify``) does not need."""
    if name == "VerifyEachCommit":
        from pyiceberg_crypto.verify.each_commit import VerifyEachCommit

        return VerifyEachCommit
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
