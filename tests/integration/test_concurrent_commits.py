"""Commit safety of the embedded default (lock-free commits, HIVE-26882 compare-and-swap)."""

from __future__ import annotations

import threading
import uuid

import pytest

from pyiceberg_crypto import config
from pyiceberg_crypto.verify import verify_table
from tests.conftest import CATALOG, add_catalog

WRITERS = 2
COMMITS_PER_WRITER = 4


def test_concurrent_writers_through_separate_catalogs_lose_no_commit(spark, kms_registration):
    """Two catalogs = two independent Iceberg clients with their own cached metadata: only the
    metastore's atomic swap of metadata_location keeps one from overwriting the other's commit."""
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.db")
    name = f"db.concurrent_{uuid.uuid4().hex[:8]}"
    props = config.table_properties("k1", extra={"commit.retry.num-retries": "20", "commit.retry.min-wait-ms": "50"})
    spark.sql(f"CREATE TABLE {CATALOG}.{name} (writer int, n int) USING iceberg {config.tblproperties_sql(props)}")
    warehouse = spark.conf.get(f"spark.sql.catalog.{CATALOG}.warehouse")
    catalogs = []
    for index in range(WRITERS):
        catalog = f"writer{index}_{uuid.uuid4().hex[:4]}"
        add_catalog(spark, catalog, warehouse=warehouse, kms_name="test",
                    extra_catalog_properties={"cache-enabled": "false"})
        catalogs.append(catalog)

    errors: list[BaseException] = []
    start = threading.Barrier(WRITERS)

    def write(index: int) -> None:
        try:
            start.wait(timeout=60)
            for n in range(COMMITS_PER_WRITER):
                spark.sql(f"INSERT INTO {catalogs[index]}.{name} VALUES ({index}, {n})")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert not errors, errors
    rows = sorted(tuple(r) for r in spark.sql(f"SELECT * FROM {catalogs[0]}.{name}").collect())
    assert rows == sorted((w, n) for w in range(WRITERS) for n in range(COMMITS_PER_WRITER))
    snapshots = spark.sql(f"SELECT count(*) FROM {catalogs[0]}.{name}.snapshots").first()[0]
    assert snapshots == WRITERS * COMMITS_PER_WRITER
    report = verify_table(spark, f"{CATALOG}.{name}", all_snapshots=True)  # every file encrypted and authentic
    assert report.ok, report.not_ok()
    assert report.summary()["entries_by_kind"]["data"] == WRITERS * COMMITS_PER_WRITER


def test_stale_commit_is_refused_by_the_metastore_swap(spark, jvm, kms_registration):
    """Deterministic version of the race: two clients hold the same base metadata; the first
    commits; the second's commit must be refused (CommitFailedException), not silently win."""
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.db")
    name = f"db.stale_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TABLE {CATALOG}.{name} (id int) USING iceberg {config.tblproperties_sql(config.table_properties('k1'))}")
    warehouse = spark.conf.get(f"spark.sql.catalog.{CATALOG}.warehouse")
    clients, catalogs = [], []
    for index in range(2):
        catalog = f"stale{index}_{uuid.uuid4().hex[:4]}"
        add_catalog(spark, catalog, warehouse=warehouse, kms_name="test",
                    extra_catalog_properties={"cache-enabled": "false"})
        table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, f"{catalog}.{name}")
        clients.append(table.operations())
        catalogs.append(catalog)
    bases = [ops.current() for ops in clients]
    assert bases[0].metadataFileLocation() == bases[1].metadataFileLocation()

    def with_property(base, value):
        props = jvm.java.util.HashMap()
        props.put("written-by", value)
        return jvm.org.apache.iceberg.TableMetadata.buildFrom(base).setProperties(props).build()

    clients[0].commit(bases[0], with_property(bases[0], "first"))
    with pytest.raises(Exception, match="CommitFailedException") as excinfo:
        clients[1].commit(bases[1], with_property(bases[1], "second"))
    assert "is not same as the current table metadata location" in str(excinfo.value)
    current = spark.sql(f"SHOW TBLPROPERTIES {catalogs[1]}.{name} ('written-by')").first().value
    assert current == "first"


def test_bundled_metastore_refuses_a_stale_swap_of_metadata_location(spark, jvm, kms_registration):
    """The property the lock-free commit relies on, checked at the metastore itself: Iceberg's
    alter_table with expected_parameter_key/value (HIVE-26882) must be refused when the expected
    metadata_location is stale, even though no lock is held (this closes the window between
    Iceberg's own pre-check and the alter)."""
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.db")
    name = f"cas_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TABLE {CATALOG}.db.{name} (id int) USING iceberg {config.tblproperties_sql(config.table_properties('k1'))}")
    hive_conf = jvm.org.apache.hadoop.hive.conf.HiveConf()
    for key in ("javax.jdo.option.ConnectionURL", "datanucleus.schema.autoCreateAll", "hive.metastore.schema.verification"):
        hive_conf.set(key, spark.conf.get(f"spark.hadoop.{key}"))
    client = jvm.org.apache.hadoop.hive.metastore.HiveMetaStoreClient(hive_conf)
    try:
        table = client.getTable("db", name)
        current = table.getParameters().get("metadata_location")
        assert current.endswith(".metadata.json")

        def swap(expected: str) -> None:
            env = jvm.java.util.HashMap()
            env.put("expected_parameter_key", "metadata_location")
            env.put("expected_parameter_value", expected)
            updated = table.deepCopy()
            updated.getParameters().put("metadata_location", current + ".next")
            context = jvm.org.apache.hadoop.hive.metastore.api.EnvironmentContext(env)
            client.alter_table_with_environmentContext("db", name, updated, context)

        with pytest.raises(Exception, match="has been modified"):
            swap(current + ".stale")
        assert client.getTable("db", name).getParameters().get("metadata_location") == current
        swap(current)  # the right expected value goes through
        assert client.getTable("db", name).getParameters().get("metadata_location") == current + ".next"
    finally:
        client.close()
