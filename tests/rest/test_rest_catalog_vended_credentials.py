"""Storage credential vending with the EncryptingRestCatalog (issue 33, Known limits).

A client asks for vended credentials with the ``X-Iceberg-Access-Delegation: vended-credentials``
header (catalog property ``header.X-Iceberg-Access-Delegation``); a server that vends answers a
table load with ``storage-credentials``, and Iceberg 1.12.0's ``RESTSessionCatalog`` then builds a
table FileIO of its own with them (instead of the catalog's). The test double is the loopback proxy
adding ``storage-credentials`` to load responses: the encrypting table operations wrap that vended
FileIO, so files stay PARE/AGS1 and the table reads back. (The credentials are for storage only:
the KMS is reached as before, with the catalog's ``encryption.kms-impl``.)
"""

from __future__ import annotations

import glob
import json
import urllib.request
import uuid
from pathlib import Path

import pytest

from pyiceberg_crypto.testing.pytest_plugin import rest_catalog_server  # noqa: F401
from tests.rest.rest_proxy import ACCESS_DELEGATION, RestProxy
from tests.rest.tables import create_encrypted_table, new_rest_catalog


def storage_credentials_under_the_encrypting_io(spark, table: str) -> list[tuple[str, dict]]:
    """(prefix, config) of the storage credentials of the FileIO inside the table's ``EncryptingFileIO``."""
    jvm = spark.sparkContext._jvm
    io = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table).io()
    encrypting = io.getClass()  # EncryptingFileIO or one of its nested subclasses
    while encrypting is not None and encrypting.getName() != "org.apache.iceberg.encryption.EncryptingFileIO":
        encrypting = encrypting.getSuperclass()
    assert encrypting is not None, f"{io.getClass().getName()} is not an EncryptingFileIO"
    field = encrypting.getDeclaredField("io")
    field.setAccessible(True)
    inner = field.get(io)  # RESTSessionCatalog's default io-impl, a SupportsStorageCredentials
    assert inner.getClass().getName() == "org.apache.iceberg.io.ResolvingFileIO"
    return [(c.prefix(), dict(c.config())) for c in inner.credentials()]


@pytest.mark.slow
def test_rest_catalog_vended_storage_credentials_reach_a_file_io_that_still_encrypts(
        spark, kms_registration, rest_catalog_server, tmp_path):  # noqa: F811
    namespace = f"vend_{uuid.uuid4().hex[:8]}"
    location = f"file:{tmp_path}/vended/{namespace}/orders"
    vended = [{"prefix": location, "config": {"s3.access-key-id": "vended-id", "s3.secret-access-key": "vended"}}]
    with RestProxy(rest_catalog_server.uri, vend_credentials=vended) as proxy:
        name = new_rest_catalog(spark, proxy.uri, tmp_path / "warehouse", prefix="restvend",
                                extra_catalog_properties={f"header.{ACCESS_DELEGATION[0]}": ACCESS_DELEGATION[1]})
        spark.sql(f"CREATE NAMESPACE {name}.{namespace}")
        table = create_encrypted_table(spark, f"{name}.{namespace}.orders", key_id="k1", location=location)
        spark.sql(f"INSERT INTO {table} VALUES (1, 'a'), (2, 'b')")
        spark.sql(f"REFRESH TABLE {table}")
        assert sorted(tuple(r) for r in spark.table(table).collect()) == [(1, "a"), (2, "b")]
        assert proxy.vended >= 1  # the client asked (the header) and got credentials on load
        credentials = storage_credentials_under_the_encrypting_io(spark, table)
        assert credentials == [(location, vended[0]["config"])]

    with urllib.request.urlopen(f"{rest_catalog_server.uri}/v1/namespaces/{namespace}/tables/orders") as response:
        metadata = json.loads(response.read())["metadata"]
    table_dir = Path(metadata["location"].removeprefix("file:"))
    data = glob.glob(str(table_dir / "data" / "**" / "*.parquet"), recursive=True)
    avro = glob.glob(str(table_dir / "metadata" / "*.avro"))
    assert data and avro and metadata["encryption-keys"]
    assert {Path(f).read_bytes()[:4] for f in data} == {b"PARE"}
    assert {Path(f).read_bytes()[:4] for f in avro} == {b"AGS1"}
