"""A Python KMS that raises, hangs, or whose callback server went away: the Spark statement fails
(never hangs) with a message naming the KMS, the operation and the key id, commits nothing, and
the table works again once the KMS recovers or is registered again, without restarting Spark.

Executor-side faults are in tests/integration/test_kms_executors.py."""

from __future__ import annotations

import threading
import uuid

import pytest

from pyiceberg_crypto import config
from pyiceberg_crypto.bridge import register_kms
from pyiceberg_crypto.kms import InMemoryKms, KmsError
from tests.conftest import CATALOG, add_catalog

TIMEOUT_SECONDS = 2
NEVER_HANG_SECONDS = TIMEOUT_SECONDS + 120  # generous: only tells a bounded failure from a hang


class FaultyKms(InMemoryKms):
    def __init__(self, master_keys):
        super().__init__(master_keys)
        self.mode = "ok"
        self.released = threading.Event()

    def unwrap_key(self, wrapped, wrapping_key_id):
        if self.mode == "raise":
            raise KmsError("simulated outage")
        if self.mode == "hang":
            self.released.wait(NEVER_HANG_SECONDS)
        return super().unwrap_key(wrapped, wrapping_key_id)


@pytest.fixture(scope="module")
def faulty(spark, master_keys, kms_registration):
    """A KMS with faults on demand behind a catalog without table cache: every statement loads the
    table, so every statement unwraps the KEK through the KMS."""
    kms = FaultyKms(master_keys)
    registration = register_kms(spark, kms, name="faulty", kms_timeout=TIMEOUT_SECONDS)
    warehouse = spark.conf.get(f"spark.sql.catalog.{CATALOG}.warehouse")
    add_catalog(spark, "faultcat", warehouse=warehouse, kms_name="faulty",
                extra_catalog_properties={"cache-enabled": "false"})
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.db")
    table = f"faultcat.db.faults_{uuid.uuid4().hex[:8]}"
    props = config.tblproperties_sql(config.table_properties("k1"))
    spark.sql(f"CREATE TABLE {table} (id bigint) USING iceberg {props}")
    spark.sql(f"INSERT INTO {table} VALUES (0)")
    state = {"kms": kms, "registration": registration, "table": table, "rows": [0]}
    yield state
    kms.released.set()
    state["registration"].close()


def _statement_outcome(spark, sql: str) -> BaseException | None:
    """Run ``sql`` in a thread; fail the test if it neither returns nor raises in time."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            spark.sql(sql).collect()
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - judged by the caller
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(NEVER_HANG_SECONDS)
    assert not worker.is_alive(), f"{sql!r} hung although the KMS timeout is {TIMEOUT_SECONDS}s"
    return outcome[0]


def _snapshot_ids(spark, table):
    return sorted(r[0] for r in spark.sql(f"SELECT snapshot_id FROM {table}.snapshots").collect())


@pytest.mark.parametrize("fault, reason", [
    ("raise", "KmsError: simulated outage"),
    ("hang", "no answer from the Python KMS within its timeout"),
    ("gone", "the Python KMS is unreachable"),
])
def test_a_kms_fault_fails_the_write_commits_nothing_and_the_table_recovers(spark, faulty, fault, reason):
    kms, table = faulty["kms"], faulty["table"]
    snapshots = _snapshot_ids(spark, table)
    before = faulty["registration"].stats.snapshot()

    if fault == "gone":
        faulty["registration"]._server.close()  # as if the process serving the KMS went away
    else:
        kms.mode = fault
        kms.released.clear()
    error = _statement_outcome(spark, f"INSERT INTO {table} VALUES (1)")

    assert error is not None, "the write succeeded although the KMS failed"
    message = str(error)
    assert "Python KMS 'faulty' failed to unwrap a key with key id 'k1'" in message
    assert reason in message
    stats = faulty["registration"].stats.since(before)
    if fault == "raise":
        assert stats.errors >= 1
    elif fault == "hang":
        assert stats.operations["unwrap"].in_flight >= 1  # still stuck in Python; the JVM gave up

    # Recovery: the KMS answers again, or is registered again after its server went away.
    kms.mode = "ok"
    kms.released.set()
    if fault == "gone":
        faulty["registration"] = register_kms(spark, kms, name="faulty", kms_timeout=TIMEOUT_SECONDS)
    assert _snapshot_ids(spark, table) == snapshots  # nothing was committed
    spark.sql(f"INSERT INTO {table} VALUES ({len(faulty['rows'])})")
    faulty["rows"].append(len(faulty["rows"]))
    assert sorted(r[0] for r in spark.sql(f"SELECT id FROM {table}").collect()) == faulty["rows"]
