"""The set-up the REST catalog tests share: a fresh Spark catalog on a REST server, a fresh
namespace in it, and an encrypted table::

    catalog = new_rest_catalog(spark, rest_catalog_server.uri, tmp_path / "warehouse", prefix="restenc")
    namespace = new_namespace(spark, catalog, "enc")
    table = create_encrypted_table(spark, f"{catalog}.{namespace}.orders", key_id="k1")
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from pathlib import Path

from pyiceberg_crypto import config
from tests.conftest import add_catalog


def new_rest_catalog(spark, uri: str, warehouse: Path, *, prefix: str, kms_name: str = "test", **settings) -> str:
    """A Spark catalog with a fresh name (``<prefix>_<8 hex>``) on the REST server at ``uri``."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    add_catalog(spark, name, warehouse, catalog_type="rest", uri=uri, kms_name=kms_name, **settings)
    return name


def new_namespace(spark, catalog: str, prefix: str) -> str:
    """A fresh namespace (``<prefix>_<8 hex>``) created in ``catalog``; returns its name alone."""
    namespace = f"{prefix}_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE NAMESPACE {catalog}.{namespace}")
    return namespace


def create_encrypted_table(spark, table: str, *, key_id: str = "k1", columns: str = "id BIGINT, note STRING",
                           location: str | None = None, extra: Mapping[str, str] | None = None) -> str:
    """CREATE TABLE ``table`` with ``encryption.key-id`` = ``key_id`` (and the ``extra`` properties)."""
    where = f" LOCATION '{location}'" if location else ""
    spark.sql(f"CREATE TABLE {table} ({columns}) USING iceberg{where} "
              + config.tblproperties_sql(config.table_properties(key_id=key_id, extra=extra)))
    return table
