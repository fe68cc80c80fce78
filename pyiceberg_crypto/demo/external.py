"""The demo against real services: a metastore at ``thrift://...`` and an S3-compatible store.

What ``docker compose run client`` runs (see ``docker/``); it works the same against the loopback
services of this package or any metastore + S3 store::

    METASTORE_URI=thrift://127.0.0.1:9083 WAREHOUSE=s3://warehouse/wh S3_ENDPOINT=http://127.0.0.1:9000 \\
    AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... python -m pyiceberg_crypto.demo.external

Steps: Spark with the catalog built by :func:`pyiceberg_crypto.config.spark_settings`; an
:class:`~pyiceberg_crypto.kms.InMemoryKms` with a fresh master key; create an encrypted table,
insert, delete, read back; then the whole-table verifier twice: ``verify_table`` (metastore entry,
Spark tasks) and ``verify_metadata`` (pure Python, reading S3 directly). Exit status 0 only when the
rows are right and both reports are clean.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from pyiceberg_crypto._deprecated import renamed_classes
from pyiceberg_crypto import config
from pyiceberg_crypto.errors import InvalidArgumentError
from pyiceberg_crypto.kms.base import KeyManagementClient
from pyiceberg_crypto.verify.report import TableReport

__all__ = [ "ServicesDemoResult", "run_demo", "settings_from_environment"]

#: Old names, kept for one release (CHANGELOG.md).
__getattr__ = renamed_classes(__name__, {"DemoConfigError": InvalidArgumentError})

CATALOG = "lake"
KEY_ID = "demo-master-key"
EXPECTED_ROWS = [(1, "apple"), (3, "fig"), (4, "kiwi")]


def settings_from_environment(env: Mapping[str, str] = os.environ, *, kms_name: str = "demo") -> dict[str, str]:
    """Spark settings from ``METASTORE_URI``, ``WAREHOUSE``, ``S3_ENDPOINT``, ``S3_REGION``,
    ``S3_PATH_STYLE_ACCESS`` (default true). Credentials stay in the environment."""
    missing = [name for name in ("METASTORE_URI", "WAREHOUSE") if not env.get(name)]
    if missing:
        raise InvalidArgumentError(f"set {' and '.join(missing)} (e.g. thrift://metastore:9083, s3://warehouse/wh)")
    return config.spark_settings(
        CATALOG,
        warehouse=env["WAREHOUSE"],
        metastore_uri=env["METASTORE_URI"],
        kms_name=kms_name,
        s3_endpoint=env.get("S3_ENDPOINT") or None,
        s3_region=env.get("S3_REGION") or env.get("AWS_REGION") or "us-east-1",
        s3_path_style_access=env.get("S3_PATH_STYLE_ACCESS", "true").lower() == "true",
    )


def encrypted_round_trip(spark, table: str, key_id: str, extra_properties: Mapping[str, str] | None = None):
    """Create ``table`` encrypted under ``key_id``, insert twice, delete one row; return its rows."""
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {table.rsplit('.', 1)[0]}")
    props = config.tblproperties_sql(config.table_properties(key_id, extra=extra_properties))
    spark.sql(f"CREATE TABLE {table} (id bigint, item string) USING iceberg {props}")
    spark.sql(f"INSERT INTO {table} VALUES (1, 'apple'), (2, 'pear'), (3, 'fig')")
    spark.sql(f"INSERT INTO {table} VALUES (4, 'kiwi')")
    spark.sql(f"DELETE FROM {table} WHERE id = 2")
    return [tuple(r) for r in spark.sql(f"SELECT id, item FROM {table} ORDER BY id").collect()]


@dataclass
class ServicesDemoResult:
    """Rows read back and the two verification reports of one demo table."""

    table: str
    rows: list[tuple]
    metadata_json: str
    in_spark: TableReport  # verify_table: metastore entry, Spark tasks
    pure_python: TableReport  # verify_metadata: this process, reading storage directly

    @property
    def ok(self) -> bool:
        return self.rows == EXPECTED_ROWS and self.in_spark.ok and self.pure_python.ok


def run_demo(spark, kms: KeyManagementClient, table: str, *, key_id: str = KEY_ID) -> ServicesDemoResult:
    """The round trip on ``table`` (catalog configured on ``spark``, ``kms`` registered for it),
    then both verifiers over every snapshot."""
    from pyiceberg_crypto.table import Limits
    from pyiceberg_crypto.catalog.spark import catalog_properties
    from pyiceberg_crypto.verify import verify_metadata, verify_table

    rows = encrypted_round_trip(spark, table, key_id)
    in_spark = verify_table(spark, table, all_snapshots=True)
    metadata_json = spark.sql(f"SELECT file FROM {table}.metadata_log_entries ORDER BY timestamp DESC").first()[0]
    properties = catalog_properties(spark, table.split(".", 1)[0])
    pure_python = verify_metadata(metadata_json, kms, all_snapshots=True, limits=Limits(properties=properties))
    return ServicesDemoResult(table, rows, metadata_json, in_spark, pure_python)


def main() -> int:
    from pyiceberg_crypto.bridge import register_kms
    from pyiceberg_crypto.kms import InMemoryKms

    try:
        settings = settings_from_environment()
    except InvalidArgumentError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = config.local_spark_builder("pyiceberg-crypto-services-demo")
    spark = config.configure_spark_with_encryption(builder, settings).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        kms = InMemoryKms.with_random_keys(KEY_ID)
        register_kms(spark, kms, name="demo")
        result = run_demo(spark, kms, f"{CATALOG}.shop.orders_{uuid.uuid4().hex[:8]}")
        print(f"{result.table}: {result.rows}")
        for name, report in (("verify_table (Spark tasks)", result.in_spark),
                             ("verify_metadata (pure Python)", result.pure_python)):
            print(f"{name}: {'OK' if report.ok else 'FAILED'} {report.summary()}")
            for check in report.failed_checks():
                print(f"  {check.name}: {check.status} {check.detail}")
            for finding in report.not_ok():
                print(f"  {finding.kind} {finding.path}: {finding.status} {finding.detail}")
        print("all files encrypted and verified" if result.ok else "FAILED")
        return 0 if result.ok else 1
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
