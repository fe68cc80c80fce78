"""VerifyEachCommit (issue 30 item 1): a streaming listener that verifies each new snapshot of an
encrypted table against the ledger, as a file-source stream (``toTable``) and a ``foreachBatch``
writer commit; a plaintext file slipped in by ``add_files`` stops the stream; a restart with the
same ledger continues without re-verifying or reporting DIVERGED; bad input fails at once."""

from __future__ import annotations

import json
import uuid

import pytest

from pyiceberg_crypto.errors import TableInputError
from pyiceberg_crypto.kms import KeystoreKms
from pyiceberg_crypto.verify import LedgerError, VerifyEachCommit
from pyiceberg_crypto.verify.report import OUTSIDE_TABLE, PLAINTEXT
from tests.keys.tables import keystore_table


@pytest.fixture
def stream_table(spark, tmp_path):
    keystore, table, registration = keystore_table(spark, tmp_path, "stream-key", "stream")
    spark.sql(f"INSERT INTO {table} VALUES (0)")
    yield {"table": table, "kms": KeystoreKms(keystore), "work": tmp_path}
    for query in spark.streams.active:
        query.stop()
    registration.close()


def drop_events(directory, ids: list[int]) -> None:
    directory.mkdir(exist_ok=True)
    (directory / f"{uuid.uuid4().hex}.json").write_text("".join(json.dumps({"id": i}) + "\n" for i in ids))


def file_stream(spark, source):
    source.mkdir(exist_ok=True)
    return spark.readStream.schema("id bigint").option("maxFilesPerTrigger", 1).json(str(source))


def snapshot_ids(spark, table: str) -> list[int]:
    spark.sql(f"REFRESH TABLE {table}")  # the catalog caches tables: see the streams' last commits
    return sorted(r.snapshot_id for r in spark.sql(f"SELECT snapshot_id FROM {table}.snapshots").collect())


def test_every_commit_of_two_writers_is_verified_once(spark, stream_table):
    table, work = stream_table["table"], stream_table["work"]
    listener = VerifyEachCommit(spark, table, state=str(work / "ledger.json"), kms=stream_table["kms"])
    assert [r.snapshot_ids for r in listener.reports] == [snapshot_ids(spark, table)]  # the baseline, in full
    spark.streams.addListener(listener)
    try:
        to_table = (file_stream(spark, work / "a").writeStream.option("checkpointLocation", str(work / "ck-a"))
                    .trigger(processingTime="200 milliseconds").toTable(table))

        def upsert(batch, batch_id):  # foreachBatch: the sink does not name the table
            batch.writeTo(table).append()

        for_each = (file_stream(spark, work / "b").writeStream.option("checkpointLocation", str(work / "ck-b"))
                    .trigger(processingTime="200 milliseconds").foreachBatch(upsert).start())
        for start in (10, 20, 30):
            drop_events(work / "a", [start, start + 1])
            drop_events(work / "b", [start + 100])
            to_table.processAllAvailable()
            for_each.processAllAvailable()
        to_table.stop()
        for_each.stop()
    finally:
        spark.streams.removeListener(listener)
    listener.close()
    assert listener.ok and not listener.errors, [r.not_ok() for r in listener.failures]
    verified = [s for r in listener.reports for s in r.snapshot_ids]
    history = spark.sql(f"SELECT snapshot_id, parent_id, committed_at FROM {table}.snapshots ORDER BY committed_at").collect()
    assert sorted(verified) == snapshot_ids(spark, table), (
        "every snapshot exactly once", [(r.mode, r.snapshot_ids) for r in listener.reports], history)
    assert len(verified) == 1 + 6 and all(r.mode in ("current", "since") for r in listener.reports)
    committed = {r.snapshot_id: r.committed_at.timestamp()  # after snapshot_ids' REFRESH: every commit
                 for r in spark.sql(f"SELECT snapshot_id, committed_at FROM {table}.snapshots").collect()}
    assert set(listener.verified_at) == set(committed)  # when each was found OK: after its commit
    assert all(listener.verified_at[s] >= committed[s] - 1 for s in committed), (listener.verified_at, committed)
    assert spark.table(table).count() == 1 + 9

    again = VerifyEachCommit(spark, table, state=str(work / "ledger.json"), kms=stream_table["kms"])
    again.close()
    assert again.reports == [] and again.ok, "a restart with the same ledger has nothing new to verify"


def test_a_plaintext_file_added_to_the_table_stops_the_stream(spark, stream_table, tmp_path):
    table, work = stream_table["table"], stream_table["work"]
    listener = VerifyEachCommit(spark, table, state=str(work / "ledger.json"), kms=stream_table["kms"])
    spark.streams.addListener(listener)
    try:
        query = (file_stream(spark, work / "a").writeStream.option("checkpointLocation", str(work / "ck-a"))
                 .trigger(processingTime="200 milliseconds").toTable(table))
        drop_events(work / "a", [1])
        query.processAllAvailable()
        assert listener.wait(120) and listener.ok
        plain = tmp_path / "plain"
        spark.range(5, 8).write.parquet(str(plain))
        catalog, rest = table.split(".", 1)
        spark.sql(f"CALL {catalog}.system.add_files(table => '{rest}', source_table => '`parquet`.`{plain}`')")
        drop_events(work / "a", [2])  # the next batch's progress event triggers the check
        assert query.awaitTermination(180), "the listener stops the query that writes the table"
    finally:
        spark.streams.removeListener(listener)
    listener.close()
    assert listener.failures and not listener.ok
    # Both verdicts, each for its own file: add_files names the parquet files where they are, outside
    # the table's location (refused unread: OUTSIDE_TABLE, never opened to find them PLAINTEXT), and
    # the manifest add_files writes in its Spark tasks is plaintext (the table records no key for it).
    refused = listener.failures[0].not_ok()
    assert {(f.kind, f.status) for f in refused} == {("data", OUTSIDE_TABLE), ("manifest", PLAINTEXT)}, [
        (f.path, f.status, f.detail) for f in refused]
    assert all(str(plain) in f.path for f in refused if f.kind == "data")
    assert all("the table records no key for it" in f.detail for f in refused if f.kind == "manifest")
    assert all(r.ok or r in listener.failures for r in listener.reports)


def test_bad_input_fails_before_any_stream(spark, stream_table, tmp_path):
    table, work = stream_table["table"], stream_table["work"]
    with pytest.raises(TableInputError, match=r"no_such_table' does not exist: .*create the table before the listener"):
        VerifyEachCommit(spark, table + "_no_such_table", state=str(work / "l.json"), kms=stream_table["kms"])
    with pytest.raises(TableInputError, match=r"cannot find table 'no_such_catalog.db.t' .*catalog configured"):
        VerifyEachCommit(spark, "no_such_catalog.db.t", state=str(work / "l.json"), kms=stream_table["kms"])
    assert not (work / "l.json").exists(), "bad input writes no ledger"
    with pytest.raises(TableInputError, match="on_failure"):
        VerifyEachCommit(spark, table, state=str(work / "l.json"), on_failure="explode", kms=stream_table["kms"])
    with pytest.raises(TypeError, match="since_snapshot_id"):  # the ledger chooses: not a parameter at all
        VerifyEachCommit(spark, table, state=str(work / "l.json"), since_snapshot_id=1, kms=stream_table["kms"])
    (tmp_path / "other").mkdir()
    other, other_table, registration = keystore_table(spark, tmp_path / "other", "other-key", "other")
    try:
        VerifyEachCommit(spark, other_table, state=str(work / "other.json"), kms=KeystoreKms(other)).close()
        with pytest.raises(LedgerError, match="use one ledger file per table.*needs state= the ledger of this table"):
            VerifyEachCommit(spark, table, state=str(work / "other.json"), kms=stream_table["kms"])
        assert json.loads((work / "other.json").read_text())["last"]["table_uuid"], "the other ledger is kept"
    finally:
        registration.close()


def test_a_spark_connect_session_is_refused_with_what_to_do_instead(tmp_path):
    """A real Connect client session (no server needed: nothing is sent before the refusal)."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    connect = ConnectSession.builder.remote("sc://127.0.0.1:9").create()
    try:
        with pytest.raises(TableInputError, match="classic SparkSession.*pyiceberg-crypto verify --state"):
            VerifyEachCommit(connect, "lake.db.events", state=str(tmp_path / "ledger.json"))
    finally:
        connect.release_session_on_close = False  # no server to release it on: stop() would retry for minutes
        connect.stop()
    assert not (tmp_path / "ledger.json").exists()
