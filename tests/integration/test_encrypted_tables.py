"""End-to-end: real PySpark + Iceberg 1.11 + Hive metastore (embedded Derby) + the Python KMS bridge."""

from __future__ import annotations

import base64
import os
import uuid

import pyarrow.parquet as pq
import pytest

from pyiceberg_crypto import config
from pyiceberg_crypto.bridge import register_kms
from pyiceberg_crypto.kms import InMemoryKms, KmsError
from pyiceberg_crypto.verify.magic_scan import scan_table_files, table_location
from tests.conftest import CATALOG, add_catalog

pytestmark = pytest.mark.spine  # the core path: make test also runs it on Spark 3.5


def _table(name: str) -> str:
    return f"{CATALOG}.db.{name}_{uuid.uuid4().hex[:8]}"


def _props(key_id: str = "k1", **kwargs) -> str:
    return config.tblproperties_sql(config.table_properties(key_id, **kwargs))


def _rows(spark, sql: str) -> list[tuple]:
    return [tuple(r) for r in spark.sql(sql).collect()]


@pytest.fixture(scope="module")
def db(spark, kms_registration):
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.db")
    return f"{CATALOG}.db"


def test_round_trip_create_insert_select_delete_merge_ctas(spark, db):
    table = _table("orders")
    spark.sql(f"CREATE TABLE {table} (id bigint, item string, qty int) USING iceberg {_props()}")
    spark.sql(f"INSERT INTO {table} VALUES (1, 'apple', 3), (2, 'pear', 5), (3, 'fig', 7)")
    assert _rows(spark, f"SELECT * FROM {table} ORDER BY id") == [(1, "apple", 3), (2, "pear", 5), (3, "fig", 7)]

    spark.sql(f"DELETE FROM {table} WHERE id = 2")
    assert _rows(spark, f"SELECT id FROM {table} ORDER BY id") == [(1,), (3,)]

    spark.createDataFrame([(3, "fig", 70), (4, "kiwi", 1)], "id bigint, item string, qty int").createOrReplaceTempView(
        "updates"
    )
    spark.sql(
        f"""MERGE INTO {table} t USING updates u ON t.id = u.id
            WHEN MATCHED THEN UPDATE SET t.qty = u.qty
            WHEN NOT MATCHED THEN INSERT *"""
    )
    assert _rows(spark, f"SELECT * FROM {table} ORDER BY id") == [(1, "apple", 3), (3, "fig", 70), (4, "kiwi", 1)]

    copy = _table("orders_copy")
    spark.sql(f"CREATE TABLE {copy} USING iceberg {_props('k2', data_key_length=32)} AS SELECT * FROM {table}")
    assert _rows(spark, f"SELECT * FROM {copy} ORDER BY id") == [(1, "apple", 3), (3, "fig", 70), (4, "kiwi", 1)]
    assert spark.sql(f"SHOW TBLPROPERTIES {copy} ('encryption.key-id')").first().value == "k2"

    for name in (table, copy):
        findings = scan_table_files(table_location(spark, name))
        kinds = {f.kind for f in findings}
        assert {"data", "manifest", "manifest-list"} <= kinds, kinds
        not_encrypted = [(f.kind, f.magic, f.path.name) for f in findings if not f.ok]
        assert not_encrypted == []


def test_every_file_starts_with_pare_or_ags1(spark, db):
    table = _table("magic")
    spark.sql(f"CREATE TABLE {table} (id bigint, v string) USING iceberg {_props()}")
    for batch in range(3):
        spark.sql(f"INSERT INTO {table} SELECT id, concat('v', id) FROM range({batch * 100}, {batch * 100 + 100})")
    findings = scan_table_files(table_location(spark, table))
    data = [f for f in findings if f.kind == "data"]
    manifests = [f for f in findings if f.kind == "manifest"]
    lists = [f for f in findings if f.kind == "manifest-list"]
    assert len(lists) == 3 and len(manifests) >= 3 and len(data) >= 3
    assert {f.magic for f in data} == {b"PARE"}
    assert {f.magic for f in manifests + lists} == {b"AGS1"}
    # Parquet modular encryption with encrypted footer also ends with PARE.
    for f in data:
        assert f.path.read_bytes()[-4:] == b"PARE"


def test_data_file_cannot_be_read_without_keys(spark, db):
    table = _table("secret")
    spark.sql(f"CREATE TABLE {table} (id bigint, ssn string) USING iceberg {_props()}")
    spark.sql(f"INSERT INTO {table} VALUES (1, '078-05-1120')")
    data_file = next(f.path for f in scan_table_files(table_location(spark, table)) if f.kind == "data")
    assert b"078-05-1120" not in data_file.read_bytes()
    with pytest.raises(Exception, match="(?i)encrypt|footer|magic"):
        pq.read_table(data_file)
    with pytest.raises(Exception, match="(?i)encrypt|footer|magic|key"):
        spark.read.parquet(str(data_file)).collect()


def test_python_kms_is_called_and_counted(spark, db, kms_registration):
    table = _table("counted")
    before = kms_registration.stats.wrap
    spark.sql(f"CREATE TABLE {table} (id bigint) USING iceberg {_props()}")
    spark.sql(f"INSERT INTO {table} VALUES (1)")
    # A new table gets a new KEK on its first commit: Iceberg asks the KMS to wrap it.
    assert kms_registration.stats.wrap == before + 1

    # A fresh catalog has no cached KEK: reading makes it unwrap through Python.
    fresh = f"fresh_{uuid.uuid4().hex[:6]}"
    add_catalog(spark, fresh, warehouse=spark.conf.get(f"spark.sql.catalog.{CATALOG}.warehouse"), kms_name="test")
    unwraps = kms_registration.stats.unwrap
    assert _rows(spark, f"SELECT * FROM {table.replace(CATALOG, fresh, 1)}") == [(1,)]
    assert kms_registration.stats.unwrap > unwraps


def test_other_master_key_cannot_read(spark, db, master_keys):
    table = _table("isolated")
    spark.sql(f"CREATE TABLE {table} (id bigint) USING iceberg {_props()}")
    spark.sql(f"INSERT INTO {table} VALUES (42)")

    # Same key id, different key bytes: a different KMS (e.g. another tenant / environment).
    other_keys = {key_id: os.urandom(16) for key_id in master_keys}
    with register_kms(spark, InMemoryKms(other_keys), name="other") as other:
        add_catalog(spark, "othercat", warehouse=spark.conf.get(f"spark.sql.catalog.{CATALOG}.warehouse"),
                    kms_name="other")
        with pytest.raises(Exception) as excinfo:
            spark.sql(f"SELECT * FROM {table.replace(CATALOG, 'othercat', 1)}").collect()
        message = str(excinfo.value)
        assert "Python KMS 'other' failed to unwrap a key with key id 'k1'" in message
        assert "KmsError" in message and "does not authenticate" in message
        assert other.stats.unwrap >= 1 and other.stats.errors >= 1


def test_encryption_key_id_cannot_change_or_be_removed(spark, db):
    table = _table("pinned")
    spark.sql(f"CREATE TABLE {table} (id bigint) USING iceberg {_props()}")
    spark.sql(f"INSERT INTO {table} VALUES (1)")
    with pytest.raises(Exception, match="(?i)cannot (modify|remove|unset|change).*key id|key id.*encrypted table"):
        spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('encryption.key-id'='k2')")
    with pytest.raises(Exception, match="(?i)cannot (modify|remove|unset|change).*key id|key id.*encrypted table"):
        spark.sql(f"ALTER TABLE {table} UNSET TBLPROPERTIES ('encryption.key-id')")
    assert spark.sql(f"SHOW TBLPROPERTIES {table} ('encryption.key-id')").first().value == "k1"
    assert _rows(spark, f"SELECT * FROM {table}") == [(1,)]


class SwitchableKms(InMemoryKms):
    """A real KMS whose service can be switched off, as during an outage."""

    available = True

    def wrap_key(self, key, wrapping_key_id):
        if not self.available:
            raise KmsError("KMS unavailable: simulated outage")
        return super().wrap_key(key, wrapping_key_id)

    def unwrap_key(self, wrapped, wrapping_key_id):
        if not self.available:
            raise KmsError("KMS unavailable: simulated outage")
        return super().unwrap_key(wrapped, wrapping_key_id)


def test_failing_kms_fails_the_write_and_keeps_the_previous_snapshot(spark, db, master_keys):
    kms = SwitchableKms(master_keys)
    warehouse = spark.conf.get(f"spark.sql.catalog.{CATALOG}.warehouse")
    with register_kms(spark, kms, name="flaky") as registration:
        # No table cache: every statement loads the table, so the KEK must be unwrapped again.
        add_catalog(spark, "flakycat", warehouse=warehouse, kms_name="flaky",
                    extra_catalog_properties={"cache-enabled": "false"})
        table = _table("outage").replace(CATALOG, "flakycat", 1)
        spark.sql(f"CREATE TABLE {table} (id bigint, v string) USING iceberg {_props()}")
        spark.sql(f"INSERT INTO {table} VALUES (1, 'kept')")
        snapshot = spark.sql(f"SELECT snapshot_id FROM {table}.snapshots").collect()

        kms.available = False
        with pytest.raises(Exception) as excinfo:
            spark.sql(f"INSERT INTO {table} VALUES (2, 'lost')")
        message = str(excinfo.value)
        assert "Python KMS 'flaky' failed to" in message
        assert "key id 'k1'" in message
        assert "KmsError: KMS unavailable: simulated outage" in message
        assert registration.stats.errors >= 1

        kms.available = True
        assert spark.sql(f"SELECT snapshot_id FROM {table}.snapshots").collect() == snapshot
        assert _rows(spark, f"SELECT * FROM {table}") == [(1, "kept")]


def test_tables_interoperate_with_javas_memory_kms(spark, db, master_keys):
    """InMemoryKms wraps keys exactly like Iceberg's MemoryMockKMS: both directions."""
    warehouse = spark.conf.get(f"spark.sql.catalog.{CATALOG}.warehouse")
    add_catalog(
        spark, "javaref", warehouse=warehouse, kms_impl="io.pyicebergcrypto.testkit.JavaMemoryKms",
        extra_catalog_properties={
            f"testkit.master-key.{key_id}": base64.b64encode(key).decode() for key_id, key in master_keys.items()
        },
    )
    python_written = _table("py_written")
    spark.sql(f"CREATE TABLE {python_written} (id bigint) USING iceberg {_props()}")
    spark.sql(f"INSERT INTO {python_written} VALUES (7)")
    assert _rows(spark, f"SELECT * FROM {python_written.replace(CATALOG, 'javaref', 1)}") == [(7,)]

    java_written = _table("java_written")
    spark.sql(f"CREATE TABLE {java_written.replace(CATALOG, 'javaref', 1)} (id bigint) USING iceberg {_props('k2')}")
    spark.sql(f"INSERT INTO {java_written.replace(CATALOG, 'javaref', 1)} VALUES (8)")
    fresh = f"pyread_{uuid.uuid4().hex[:6]}"
    add_catalog(spark, fresh, warehouse=warehouse, kms_name="test")
    assert _rows(spark, f"SELECT * FROM {java_written.replace(CATALOG, fresh, 1)}") == [(8,)]


def test_unregistered_kms_name_fails_with_instructions(spark, db):
    warehouse = spark.conf.get(f"spark.sql.catalog.{CATALOG}.warehouse")
    add_catalog(spark, "nobodycat", warehouse=warehouse, kms_name="nobody")
    table = f"nobodycat.db.t_{uuid.uuid4().hex[:6]}"
    spark.sql(f"CREATE TABLE {table} (id bigint) USING iceberg {_props()}")  # no key needed yet
    with pytest.raises(Exception) as excinfo:
        spark.sql(f"INSERT INTO {table} VALUES (1)")
    message = str(excinfo.value)
    assert "No Python KMS is registered under the name 'nobody'" in message
    assert "register_kms(spark, kms, name='nobody')" in message
