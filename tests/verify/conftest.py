"""Tables written by the real Spark + Iceberg 1.12.0 session, for the verifier's tests."""

from __future__ import annotations

import uuid

import pytest

from pyiceberg_crypto import config
from pyiceberg_crypto.catalog.spark import catalog_properties
from pyiceberg_crypto.catalog.spark import spark_table_parameters as table_parameters
from tests.conftest import CATALOG
from tests.verify import kms_factory


@pytest.fixture(scope="session", autouse=True)
def verify_kms_keys(master_keys):
    kms_factory.MASTER_KEYS.clear()
    kms_factory.MASTER_KEYS.update(master_keys)


def create_table(spark, stem: str, columns: str = "id bigint, v string, p int", *, partitioned_by: str | None = None,
                 properties: dict[str, str] | None = None) -> str:
    """CREATE an encrypted table (master key k1) with extra table properties; returns its name."""
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.vdb")
    name = f"{CATALOG}.vdb.{stem}_{uuid.uuid4().hex[:6]}"
    partition = f" PARTITIONED BY ({partitioned_by})" if partitioned_by else ""
    props = config.table_properties("k1", extra=properties)
    spark.sql(f"CREATE TABLE {name} ({columns}) USING iceberg{partition} " + config.tblproperties_sql(props))
    return name


def metastore_entry(spark, table: str) -> dict[str, str]:
    """The metastore's parameters of ``table`` (metadata_location, metadata_hash, ...)."""
    catalog, database, name = table.split(".")
    return table_parameters(spark, catalog_properties(spark, catalog), database, name)


def metadata_location(spark, table: str) -> str:
    return metastore_entry(spark, table)["metadata_location"]


def local(uri: str) -> str:
    return uri.removeprefix("file:")
