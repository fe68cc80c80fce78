"""The verifier's metastore lookups reuse one Hive client per application and catalog settings:
each lookup still sees the latest commit, and a kept client that broke is replaced, not reported."""

from __future__ import annotations

import pytest

from pyiceberg_crypto.errors import CatalogError
from pyiceberg_crypto.catalog import spark as metastore
from pyiceberg_crypto.catalog.spark import catalog_properties
from pyiceberg_crypto.catalog.spark import spark_table_parameters as table_parameters
from tests.conftest import CATALOG
from tests.verify.conftest import create_table


def test_a_kept_client_sees_every_commit_and_a_broken_one_is_replaced(spark, kms_registration):
    table = create_table(spark, "kept")
    database, name = table.split(".")[1:]
    properties = catalog_properties(spark, CATALOG)
    spark.sql(f"INSERT INTO {table} VALUES (1, 'a', 1)")
    first = table_parameters(spark, properties, database, name)
    key = metastore.client_key(spark, properties)
    kept = metastore._CLIENTS[key]
    assert set(first) <= set(metastore.ICEBERG_PARAMETERS)
    assert first["table_type"].upper() == "ICEBERG" and first.get("metadata_hash")

    spark.sql(f"INSERT INTO {table} VALUES (2, 'b', 1)")
    second = table_parameters(spark, properties, database, name)
    assert second["metadata_location"] != first["metadata_location"]  # the new commit, on the same client
    assert second["previous_metadata_location"] == first["metadata_location"]
    assert metastore._CLIENTS[key] is kept

    broken = DroppedConnection()  # e.g. a remote metastore that closed the connection
    metastore._CLIENTS[key] = broken
    assert table_parameters(spark, properties, database, name) == second  # on a new client
    assert broken.calls == 1 and broken.closed
    assert metastore._CLIENTS[key] is not broken

    with pytest.raises(CatalogError, match=f"cannot give table {database}.no_such_table"):
        table_parameters(spark, properties, database, "no_such_table")
    metastore.close_clients()
    assert not metastore._CLIENTS
    assert table_parameters(spark, properties, database, name) == second


class DroppedConnection:
    """A kept client whose connection is gone: its next call fails."""

    def __init__(self):
        self.calls, self.closed = 0, False

    def getTable(self, database, table):  # noqa: N802 - Hive's name
        self.calls += 1
        raise RuntimeError("org.apache.thrift.transport.TTransportException: Socket is closed by peer")

    def close(self):
        self.closed = True
