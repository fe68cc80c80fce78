"""Kafka into encrypted Iceberg tables (issue 30 item 2), on the shared Spark session and the test
broker: a topic of JSON events streamed with ``toTable`` under VerifyEachCommit, and a
``foreachBatch`` MERGE of change events into a format-version 3 table with deletion vectors. Every
table verifies and reads back with the JVM-free reader."""

from __future__ import annotations

import uuid

import pytest

from pyiceberg_crypto import config
from pyiceberg_crypto.kms import InMemoryKms
from pyiceberg_crypto.read import read_table
from pyiceberg_crypto.verify import VerifyEachCommit, verify_table
from tests.conftest import CATALOG
from tests.streaming.kafka import json_stream, new_topic, produce
from tests.testkit import metadata_location

pytestmark = pytest.mark.usefixtures("kms_registration")

MERGE_ON_READ = {"write.delete.mode": "merge-on-read", "write.update.mode": "merge-on-read",
                 "write.merge.mode": "merge-on-read"}


def create_table(spark, columns: str, extra: dict | None = None) -> str:
    table = f"{CATALOG}.stream.kafka_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.stream")
    properties = config.table_properties("k1", format_version=3, extra=extra)
    spark.sql(f"CREATE TABLE {table} ({columns}) USING iceberg {config.tblproperties_sql(properties)}")
    return table


def snapshot_ids(spark, table: str) -> list[int]:
    spark.sql(f"REFRESH TABLE {table}")
    return sorted(r.snapshot_id for r in spark.sql(f"SELECT snapshot_id FROM {table}.snapshots").collect())


def jvm_free_rows(spark, table: str, master_keys, key: str) -> list[dict]:
    """The table as the JVM-free reader sees it, sorted by ``key``."""
    arrow = read_table(metadata_location(spark, table), InMemoryKms(master_keys))
    return sorted(arrow.to_pylist(), key=lambda row: row[key])


def test_kafka_json_events_stream_into_an_encrypted_table_verified_per_commit(
        spark, kafka_broker, master_keys, tmp_path):
    table = create_table(spark, "id bigint, name string, amount double")
    topic = new_topic("events")
    events = [{"id": i, "name": f"customer-{i % 7}", "amount": i * 1.5} for i in range(30)]
    produce(spark, kafka_broker.bootstrap_servers, topic, events)

    listener = VerifyEachCommit(spark, table, state=str(tmp_path / "ledger.json"))
    spark.streams.addListener(listener)
    try:
        query = (json_stream(spark, kafka_broker.bootstrap_servers, topic, "id bigint, name string, amount double",
                             per_trigger=10)
                 .writeStream.option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .trigger(availableNow=True).toTable(table))
        assert query.awaitTermination(300), "availableNow ends once the topic is read"
        assert query.exception() is None
    finally:
        spark.streams.removeListener(listener)
    listener.close()

    assert listener.ok and not listener.errors, [r.not_ok() for r in listener.failures]
    assert all(r.ok for r in listener.reports)
    verified = [s for r in listener.reports for s in r.snapshot_ids]
    assert sorted(verified) == snapshot_ids(spark, table) and len(verified) == 3, \
        "three micro-batches of 10 records: three commits, each verified once"
    assert sorted((r.asDict() for r in spark.table(table).collect()), key=lambda row: row["id"]) == events, \
        "every produced event exactly once"
    assert verify_table(spark, table).ok
    assert jvm_free_rows(spark, table, master_keys, "id") == events


def apply_changes(state: dict[int, dict], changes: list[dict]) -> dict[int, dict]:
    """What the MERGE must leave: the last change of each id wins, a delete removes the row."""
    for change in changes:
        if change["op"] == "D":
            state.pop(change["id"], None)
        else:
            state[change["id"]] = {"id": change["id"], "name": change["name"], "balance": change["balance"]}
    return state


def merge_changes(table: str):
    """The ``foreachBatch`` function: the latest change per id in the batch, MERGEd into ``table``."""

    def upsert(batch, batch_id: int) -> None:
        batch.createOrReplaceTempView("changes")
        session = batch.sparkSession
        session.sql("""
            SELECT op, id, name, balance FROM (
              SELECT *, row_number() OVER (PARTITION BY id ORDER BY seq DESC) AS newest FROM changes)
            WHERE newest = 1""").createOrReplaceTempView("latest_changes")
        session.sql(f"""
            MERGE INTO {table} t USING latest_changes c ON t.id = c.id
            WHEN MATCHED AND c.op = 'D' THEN DELETE
            WHEN MATCHED THEN UPDATE SET t.name = c.name, t.balance = c.balance
            WHEN NOT MATCHED AND c.op <> 'D' THEN INSERT (id, name, balance) VALUES (c.id, c.name, c.balance)""")

    return upsert


def test_kafka_change_events_merged_by_foreach_batch_into_a_v3_table_with_deletion_vectors(
        spark, kafka_broker, master_keys, tmp_path):
    table = create_table(spark, "id bigint, name string, balance bigint", MERGE_ON_READ)
    topic = new_topic("changes")
    changes, seq = [], 0

    def change(op: str, id_: int, name: str = "", balance: int = 0) -> None:
        nonlocal seq
        seq += 1
        changes.append({"seq": seq, "op": op, "id": id_, "name": name, "balance": balance})

    for i in range(12):                        # batch 1: inserts
        change("I", i, f"account-{i}", 100 * i)
    for i in range(0, 12, 3):                  # batch 2: updates of rows in data files
        change("U", i, f"account-{i}-renamed", 100 * i + 1)
    for i in range(1, 12, 4):                  # batch 3: deletes, an update and a re-insert
        change("D", i)
    change("U", 2, "account-2-late", 7)
    change("I", 1, "account-1-again", 11)
    change("D", 6)
    produce(spark, kafka_broker.bootstrap_servers, topic, changes)
    expected = sorted(apply_changes({}, changes).values(), key=lambda row: row["id"])

    listener = VerifyEachCommit(spark, table, state=str(tmp_path / "ledger.json"))
    spark.streams.addListener(listener)
    try:
        query = (json_stream(spark, kafka_broker.bootstrap_servers, topic,
                             "seq bigint, op string, id bigint, name string, balance bigint", per_trigger=12)
                 .writeStream.option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .trigger(availableNow=True).foreachBatch(merge_changes(table)).start())
        assert query.awaitTermination(300)
        assert query.exception() is None
    finally:
        spark.streams.removeListener(listener)
    listener.close()

    assert listener.ok and not listener.errors, [r.not_ok() for r in listener.failures]
    assert sorted(s for r in listener.reports for s in r.snapshot_ids) == snapshot_ids(spark, table)
    rows = sorted((r.asDict() for r in spark.table(table).collect()), key=lambda row: row["id"])
    assert rows == expected
    deletion_vectors = spark.sql(f"SELECT count(*) FROM {table}.delete_files WHERE file_format = 'PUFFIN'").first()[0]
    assert deletion_vectors > 0, "merge-on-read updates and deletes of a v3 table write deletion vectors"
    report = verify_table(spark, table)
    assert report.ok, report.not_ok()
    assert jvm_free_rows(spark, table, master_keys, "id") == expected
