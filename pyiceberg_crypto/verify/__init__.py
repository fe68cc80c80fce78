"""The independent verifier: proves, file by file, that what Iceberg's JVM wrote is encrypted,
authentic, of its trusted length and bound to its own AAD, with code that shares nothing with the
writer (pure Python + ``cryptography``)::

    from pyiceberg_crypto.verify import verify_metadata, verify_table

    report = verify_metadata("file:/wh/db.db/t/metadata/00003-....metadata.json", kms)   # no JVM
    report = verify_table(spark, "lake.db.orders")                                      # on Spark
    report.ok, report.not_ok(), report.to_dict()

Modules, top-down as a verification runs:
- :mod:`.metadata`  the metadata.json view (snapshots, encryption-keys, statistics files)
- :mod:`.keys`      master key -> KEKs -> each snapshot's manifest-list key
- :mod:`.walk`      manifest lists -> manifests -> file tasks -> findings
- :mod:`.checks`    one file against its key metadata (runs locally or in Spark tasks)
- :mod:`.report`    findings and the report document
- :mod:`.spark_job` ``verify_table``: metastore + Spark tasks; :mod:`.job` its spark-submit entry point
- :mod:`.files`     the key-less magic scan (what the demo prints before verifying)
"""

from pyiceberg_crypto.verify.report import FileFinding, TableCheck, TableReport
from pyiceberg_crypto.verify.walk import VerifyInputError, verify_metadata


def verify_table(spark, table: str, **kwargs) -> TableReport:
    """Verify ``catalog.db.table`` through Spark; see :func:`pyiceberg_crypto.verify.spark_job.verify_table`."""
    from pyiceberg_crypto.verify.spark_job import verify_table as _verify_table

    return _verify_table(spark, table, **kwargs)


__all__ = ["FileFinding", "TableCheck", "TableReport", "VerifyInputError", "verify_metadata", "verify_table"]
