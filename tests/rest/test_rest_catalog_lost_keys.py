"""A REST catalog server that does not keep encryption metadata (issue 33, Known limits).

Real REST servers may not implement the spec's ``add-encryption-key`` update, or may drop
``encryption-keys`` from the metadata they store or serve. The test double is a loopback HTTP proxy
in front of the real test server (``rest_catalog_server``) that drops ``add-encryption-key`` updates
from commit requests, or strips ``encryption-keys`` from table load responses. What the
EncryptingRestCatalog must do then: fail the write naming the server's fault and leave nothing
unreadable current (the commit is rolled back), and refuse a table served without its keys with a
message that names the server, never plaintext and never a silently unreadable snapshot.
"""

from __future__ import annotations

import glob
import json
import re
import urllib.request
import uuid
from pathlib import Path

import pytest

from pyiceberg_crypto import config
from pyiceberg_crypto.kms import InMemoryKms
from pyiceberg_crypto.read import read_table
from pyiceberg_crypto.testing.pytest_plugin import rest_catalog_server  # noqa: F401
from pyiceberg_crypto.verify.pipeline import verify_metadata
from tests.rest.rest_proxy import RestProxy
from tests.rest.tables import new_rest_catalog


def load(uri: str, namespace: str, table: str) -> dict:
    with urllib.request.urlopen(f"{uri}/v1/namespaces/{namespace}/tables/{table}", timeout=30) as response:
        return json.loads(response.read())


def magics(metadata: dict) -> tuple[set[bytes], set[bytes]]:
    """First four bytes of the table's data files and of its Avro metadata files (what is on disk)."""
    table_dir = Path(metadata["location"].removeprefix("file:"))
    data = glob.glob(str(table_dir / "data" / "**" / "*.parquet"), recursive=True)
    avro = glob.glob(str(table_dir / "metadata" / "*.avro"))
    return {Path(f).read_bytes()[:4] for f in data}, {Path(f).read_bytes()[:4] for f in avro}


def rows(spark, table: str) -> list[tuple]:
    return sorted(tuple(r) for r in spark.table(table).collect())


def new_catalog(spark, tmp_path, uri: str) -> str:
    return new_rest_catalog(spark, uri, tmp_path / "warehouse", prefix="restlost")


@pytest.mark.slow
def test_rest_catalog_server_dropping_add_encryption_key_fails_the_write_and_rolls_it_back(
        spark, kms_registration, master_keys, rest_catalog_server, tmp_path):  # noqa: F811
    """A server that drops ``add-encryption-key``: the INSERT fails naming the server's fault, the
    commit is rolled back (the first one to no snapshot, a later one to the previous snapshot), and
    the table reads back its previous rows everywhere, every file on disk PARE/AGS1."""
    server = rest_catalog_server.uri
    direct = new_catalog(spark, tmp_path, server)
    namespace = f"lost_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE NAMESPACE {direct}.{namespace}")
    with RestProxy(server, drop_key_updates=True) as proxy:
        forgetful = new_catalog(spark, tmp_path, proxy.uri)
        table = f"{namespace}.orders"
        # CREATE TABLE commits no key yet: it passes through the proxy
        spark.sql(f"CREATE TABLE {forgetful}.{table} (id BIGINT, note STRING) USING iceberg "
                  + config.tblproperties_sql(config.table_properties(key_id="k1")))
        error = re.escape(f"the REST catalog at {proxy.uri} did not keep the table's encryption keys "
                          "(add-encryption-key)") + ".*cannot store encrypted tables"

        with pytest.raises(Exception, match=error + ".*rolled back.*'main' is removed again"):
            spark.sql(f"INSERT INTO {forgetful}.{table} VALUES (9, 'lost')")
        assert proxy.dropped >= 1
        metadata = load(server, namespace, "orders")["metadata"]
        assert metadata.get("current-snapshot-id") in (None, -1) and not metadata.get("snapshots")
        assert rows(spark, f"{direct}.{table}") == []

        spark.sql(f"INSERT INTO {direct}.{table} VALUES (1, 'a'), (2, 'b')")
        kept = load(server, namespace, "orders")["metadata"]["current-snapshot-id"]
        with pytest.raises(Exception, match=error + f".*rolled back.*'main' is back at snapshot {kept}"):
            spark.sql(f"INSERT INTO {forgetful}.{table} VALUES (3, 'c')")
        assert proxy.dropped >= 2

        loaded = load(server, namespace, "orders")
        metadata = loaded["metadata"]
        assert metadata["current-snapshot-id"] == kept
        assert [s["snapshot-id"] for s in metadata["snapshots"]] == [kept]  # the lost one is gone
        spark.sql(f"REFRESH TABLE {direct}.{table}")
        assert rows(spark, f"{direct}.{table}") == [(1, "a"), (2, "b")]
        assert rows(spark, f"{forgetful}.{table}") == [(1, "a"), (2, "b")]  # the failed writer too
        assert rows(spark, f"{new_catalog(spark, tmp_path, server)}.{table}") == [(1, "a"), (2, "b")]

    data, avro = magics(metadata)
    assert data == {b"PARE"} and avro == {b"AGS1"}  # never plaintext, whatever was left behind
    kms = InMemoryKms(master_keys)
    report = verify_metadata(loaded["metadata-location"], kms)
    assert report.ok, report
    assert read_table(loaded["metadata-location"], kms).sort_by("id").to_pylist() == [
        {"id": 1, "note": "a"}, {"id": 2, "note": "b"}]


@pytest.mark.slow
def test_rest_catalog_server_serving_no_encryption_keys_is_refused_clearly_on_read_and_write(
        spark, kms_registration, master_keys, rest_catalog_server, tmp_path):  # noqa: F811
    """A server that stores the keys but strips ``encryption-keys`` from load responses: reading or
    appending through it fails with a message naming the server and the missing key (not Iceberg's
    "Cannot find manifest list key metadata"), and the table is unchanged."""
    server = rest_catalog_server.uri
    direct = new_catalog(spark, tmp_path, server)
    namespace = f"strip_{uuid.uuid4().hex[:8]}"
    table = f"{namespace}.events"
    spark.sql(f"CREATE NAMESPACE {direct}.{namespace}")
    spark.sql(f"CREATE TABLE {direct}.{table} (id BIGINT) USING iceberg "
              + config.tblproperties_sql(config.table_properties(key_id="k1")))
    spark.sql(f"INSERT INTO {direct}.{table} VALUES (1), (2)")
    before = load(server, namespace, "events")["metadata"]
    key_id = next(s["key-id"] for s in before["snapshots"] if s["snapshot-id"] == before["current-snapshot-id"])

    with RestProxy(server, strip_keys_on_load=True) as proxy:
        stripping = new_catalog(spark, tmp_path, proxy.uri)
        error = re.escape(f"the REST catalog at {proxy.uri} served table {namespace}.events without the "
                          f"encryption key '{key_id}' of its current snapshot {before['current-snapshot-id']}")
        for statement in (f"SELECT * FROM {stripping}.{table}", f"INSERT INTO {stripping}.{table} VALUES (3)"):
            with pytest.raises(Exception, match=error) as failure:
                spark.sql(statement).collect()
            assert "Cannot find manifest list key metadata" not in str(failure.value)
        assert proxy.stripped >= 2

    after = load(server, namespace, "events")["metadata"]
    assert after["current-snapshot-id"] == before["current-snapshot-id"] and after["encryption-keys"]
    assert rows(spark, f"{direct}.{table}") == [(1,), (2,)]
