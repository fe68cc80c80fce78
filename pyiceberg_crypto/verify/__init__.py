"""The independent verifier: proves, file by file, that what Iceberg's JVM wrote is encrypted,
authentic, of its trusted length and bound to its own AAD, with code that shares nothing with the
writer (pure Python + ``cryptography``)::

    from pyiceberg_crypto.verify import verify_metadata, verify_table

    report = verify_metadata("file:/wh/db.db/t/metadata/00003-....metadata.json", kms)   # no JVM
    report = verify_table(spark, "lake.db.orders")                                      # on Spark
    report = verify_table(spark, "lake.db.orders", state="/var/lib/verify/orders.json")   # incremental
    report.ok, report.not_ok(), report.to_dict()

Modules, top-down as a verification runs (:mod:`.pipeline` calls them in this order):
- :mod:`.metadata`  the metadata.json view (snapshots, ancestry, encryption-keys, statistics files)
- :mod:`.ledger`    the verifier's memory: what an earlier OK run proved, and the ``history`` check
- :mod:`.keys`      master key -> KEKs -> each snapshot's manifest-list key
- :mod:`.plan`      scope (current / snapshot / all / since) -> manifest lists -> manifests -> one task per file
- :mod:`.run`       runners: threads here, Spark tasks in :mod:`.spark_job`
- :mod:`.checks`    one file against its key metadata (the unit every runner runs)
- :mod:`.forensics` failing files that authenticate as other files: swaps and replays
- :mod:`.report`    findings and the report document; :mod:`.render` text, JSON, error documents
- :mod:`.spark_job` ``verify_table``: metastore + Spark tasks; :mod:`.job` its spark-submit entry point
- :mod:`.files`     the key-less magic scan (what the demo prints before verifying)
"""

from pyiceberg_crypto.verify.ledger import LedgerError
from pyiceberg_crypto.verify.pipeline import VerifyInputError, verify_metadata
from pyiceberg_crypto.verify.report import FileFinding, TableCheck, TableReport


def verify_table(spark, table: str, **kwargs) -> TableReport:
    """Verify ``catalog.db.table`` through Spark; see :func:`pyiceberg_crypto.verify.spark_job.verify_table`."""
    from pyiceberg_crypto.verify.spark_job import verify_table as _verify_table

    return _verify_table(spark, table, **kwargs)


__all__ = ["FileFinding", "LedgerError", "TableCheck", "TableReport", "VerifyInputError", "verify_metadata", "verify_table"]
