"""`reencrypt_table` while others write (issue 42): a second Spark session (its own catalog and table
cache) inserting in a thread, and a stream with VerifyEachCommit writing into the table. Either the
run goes on (their commits are retried or re-sealed in another round) or it stops cleanly with a
message saying to run again; the table stays readable, no row is lost, and once the writers have
stopped the proof holds (after at most one more run)."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest

from pyiceberg_crypto.errors import OperationError
from pyiceberg_crypto.keys.reencrypt import reencrypt_table
from pyiceberg_crypto.kms import KeystoreKms
from pyiceberg_crypto.safe_text import exception_line
from pyiceberg_crypto.verify import VerifyEachCommit
from pyiceberg_crypto.verify.compromise import compromise_report
from tests.conftest import add_catalog
from tests.keys.tables import keystore_table, metadata_location
from tests.testkit import eventually

#: make test runs these in the cluster lane, which ends minutes before the main one (the marker
#: `balance`, pyproject.toml): about a minute and a half of the main lane's time on a loaded machine.
pytestmark = [pytest.mark.slow, pytest.mark.balance]

MASTER = "reenc-conc"
LEAKED = [(MASTER, "1")]


def rows(spark, table: str) -> list[int]:
    spark.sql(f"REFRESH TABLE {table}")
    return sorted(r[0] for r in spark.table(table).collect())


def reencrypt_until_proven(spark, table: str, keystore) -> tuple[list[str], object]:
    """Run the re-encryption (a second time when the first stopped, or when a late writer put an
    old-KEK snapshot back); returns the stop messages and the final proof."""
    stops = []
    for _attempt in range(2):
        try:
            reencrypt_table(spark, table, compromised_master_keys=LEAKED)
        except OperationError as exc:
            stops.append(str(exc))
            continue
        proof = compromise_report(metadata_location(spark, table), KeystoreKms(keystore), compromised_master_keys=LEAKED)
        if proof.ok:
            return stops, proof
    reencrypt_table(spark, table, compromised_master_keys=LEAKED)
    return stops, compromise_report(metadata_location(spark, table), KeystoreKms(keystore), compromised_master_keys=LEAKED)


@pytest.fixture
def leaked_table(spark, tmp_path):
    keystore, table, registration = keystore_table(spark, tmp_path, MASTER, "rconc")
    for start in (1, 10):
        spark.sql(f"INSERT INTO {table} SELECT id FROM range({start}, {start + 3})")
    KeystoreKms(keystore).rotate_key(MASTER)
    yield {"keystore": keystore, "table": table, "work": tmp_path, "kms_name": registration.name,
           "initial": [1, 2, 3, 10, 11, 12]}
    for query in spark.streams.active:
        query.stop()
    registration.close()


def test_reencrypt_with_a_concurrent_writer_session_loses_no_row(spark, leaked_table):
    table, work = leaked_table["table"], leaked_table["work"]
    other = spark.newSession()  # its own catalog instance and table cache: another writer
    add_catalog(other, table.split(".")[0], warehouse=work / "wh", kms_name=leaked_table["kms_name"])
    written: list[int] = []
    failed: list[str] = []
    during = threading.Event()
    stop = threading.Event()

    def writer() -> None:
        for n in range(100, 100 + 10 * 40, 10):  # bounded: 40 commits at most
            if stop.is_set():
                return
            try:
                other.sql(f"INSERT INTO {table} VALUES ({n}), ({n + 1})")
                written.extend((n, n + 1))
                if during.is_set():
                    written.append(-1)  # marks a commit that landed while the run was going
            except Exception as exc:  # a commit that failed: its rows must not be in the table
                failed.append(exception_line(exc))
            time.sleep(0.2)

    def hold_the_first_round_for_a_concurrent_commit(message: str) -> None:
        """The run's progress: its first rewrite round waits until a commit of the other writer has
        landed during the run (the rewrite then meets it), however slowly each side goes."""
        if message.startswith("round 1:"):
            eventually(lambda: written.count(-1) >= 1, 120, interval=0.2,
                       message=lambda: f"a commit of the other writer during the run (failures: {failed})")

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    during.set()
    stopped = None
    try:
        reencrypt_table(spark, table, compromised_master_keys=LEAKED,
                        progress=hold_the_first_round_for_a_concurrent_commit)
    except OperationError as exc:
        stopped = str(exc)
    during.clear()
    stop.set()
    thread.join(timeout=120)
    assert not thread.is_alive()
    landed_during = written.count(-1)
    inserted = [n for n in written if n >= 0]
    assert landed_during >= 1, "no commit of the other writer landed during the run: the test proves nothing"
    if stopped is not None:  # a clean stop says what to do
        assert "stays readable" in stopped and "again" in stopped, stopped
    assert rows(spark, table) == sorted(leaked_table["initial"] + inserted), failed  # readable, nothing lost
    stops, proof = reencrypt_until_proven(spark, table, leaked_table["keystore"])
    assert proof.ok, proof.render_text()
    assert rows(spark, table) == sorted(leaked_table["initial"] + inserted)


def test_reencrypt_while_a_verified_stream_writes_loses_no_event(spark, leaked_table):
    table, work = leaked_table["table"], leaked_table["work"]
    source, checkpoint = work / "events", work / "checkpoint"
    source.mkdir()
    listener = VerifyEachCommit(spark, table, state=str(work / "ledger.json"), kms=KeystoreKms(leaked_table["keystore"]))
    spark.streams.addListener(listener)
    sent: list[int] = []

    def send(ids: list[int]) -> None:
        (source / f"{uuid.uuid4().hex}.json").write_text("".join(json.dumps({"id": i}) + "\n" for i in ids))
        sent.extend(ids)

    def start():
        return (spark.readStream.schema("id bigint").option("maxFilesPerTrigger", 1).json(str(source))
                .writeStream.option("checkpointLocation", str(checkpoint)).trigger(processingTime="300 milliseconds")
                .toTable(table))

    query = start()
    stop = threading.Event()

    def feeder() -> None:
        for n in range(1000, 1000 + 10 * 30, 10):  # bounded: 30 files at most
            if stop.is_set():
                return
            send([n, n + 1])
            time.sleep(0.5)

    send([900])
    query.processAllAvailable()
    thread = threading.Thread(target=feeder, daemon=True)
    thread.start()
    stopped = None
    try:
        reencrypt_table(spark, table, compromised_master_keys=LEAKED)
    except OperationError as exc:
        stopped = str(exc)
    stop.set()
    thread.join(timeout=60)
    if stopped is not None:  # a clean stop says what to do
        assert "stays readable" in stopped and "run the re-encryption again" in stopped, stopped
    send([5000])
    outcome = "went on"
    if query.isActive:
        query.processAllAvailable()
    else:  # stopped by the listener (a check failed) or by an error: it must say why
        outcome = "stopped"
        assert listener.failures or query.exception() is not None
        message = (str(query.exception()) if query.exception() is not None
                   else listener.failures[-1].not_ok()[0].detail if listener.failures[-1].not_ok()
                   else str(listener.failures[-1].failed_checks()))
        assert message.strip(), "the stream stopped without a message"
        query = start()  # the same checkpoint: it continues where it stopped
        query.processAllAvailable()
    query.stop()
    spark.streams.removeListener(listener)
    listener.close()
    assert rows(spark, table) == sorted(leaked_table["initial"] + sent), (outcome, stopped)  # no event lost, none twice
    stops, proof = reencrypt_until_proven(spark, table, leaked_table["keystore"])
    assert proof.ok, (outcome, stopped, stops, proof.render_text())
    assert rows(spark, table) == sorted(leaked_table["initial"] + sent)
    print(f"stream during re-encryption: {outcome}; run stopped: {stopped}; listener failures: {len(listener.failures)}")
