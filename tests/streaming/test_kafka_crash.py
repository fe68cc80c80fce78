"""Crash and fault recovery of a Kafka -> encrypted Iceberg stream (issue 30 item 3), with real
driver processes (tests/streaming/kafka_driver.py): a driver killed with SIGKILL mid-batch and
restarted from its checkpoint loses and duplicates nothing, with the KMS in the driver
(``register_kms``) and served by ``kms serve``; the KMS stopped during a batch fails that batch with
the KMS error and commits nothing, and a restart once it is back ends exact. The ledger of
VerifyEachCommit carries across the restarts (no re-verification, no false DIVERGED)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from pyiceberg_crypto.kms import InMemoryKms, KeystoreKms
from pyiceberg_crypto.read import read_table
from pyiceberg_crypto.verify import verify_metadata
from tests.serve.service_process import ServiceProcess, make_keystore
from tests.streaming.kafka import new_topic
from tests.testkit import SHORT_DRIVER_ENV, eventually

pytestmark = [pytest.mark.slow, pytest.mark.apps]

ROOT = Path(__file__).resolve().parents[2]
DRIVER_TIMEOUT = 420
EVENTS = 40
PER_TRIGGER = 10
EVENT_RECORDS = [{"id": i, "payload": f"event-{i}"} for i in range(EVENTS)]


class Driver:
    """One run of the driver process (its own process group: a SIGKILL ends the JVM with it)."""

    def __init__(self, job: dict, log: Path):
        self.log = log
        self.handle = open(log, "ab")
        self.process = subprocess.Popen([sys.executable, "-m", "tests.streaming.kafka_driver"], cwd=ROOT,
                                        stdin=subprocess.PIPE, stdout=self.handle, stderr=subprocess.STDOUT,
                                        env=dict(os.environ, PYTHONPATH=str(ROOT), PYICEBERG_CRYPTO_QUIET="1",
                                                 **SHORT_DRIVER_ENV),
                                        start_new_session=True)
        self.process.stdin.write(json.dumps(job).encode())
        self.process.stdin.close()

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait(self) -> int:
        try:
            return self.process.wait(DRIVER_TIMEOUT)
        finally:
            self.handle.close()

    def kill(self) -> None:
        """SIGKILL the driver and its JVM (the process group it leads), as a crash would."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.wait()

    def result(self) -> dict:
        code = self.wait()
        lines = [line for line in self.output().splitlines() if line.startswith("RESULT ")]
        assert code == 0 and lines, f"driver exited {code}:\n{self.output()[-6000:]}"
        return json.loads(lines[-1][len("RESULT "):])


def wait_mid_batch(driver: Driver, checkpoint: Path, after_batch: int = 1) -> int:
    """Block until the driver has committed ``after_batch`` batches and started the next one (its
    offsets are in the checkpoint, its commit is not); returns that batch's id."""
    def next_batch_running() -> list[int]:
        if driver.process.poll() is not None:
            pytest.fail(f"the driver ended early:\n{driver.output()[-6000:]}")
        commits = {int(p.name) for p in (checkpoint / "commits").glob("[0-9]*")} if (checkpoint / "commits").is_dir() else set()
        offsets = {int(p.name) for p in (checkpoint / "offsets").glob("[0-9]*")} if (checkpoint / "offsets").is_dir() else set()
        running = [b for b in offsets - commits if b >= after_batch]
        return running if len(commits) >= after_batch else []

    return eventually(next_batch_running, DRIVER_TIMEOUT, interval=0.05,
                      message=lambda: f"a batch after {after_batch} to start:\n{driver.output()[-6000:]}")[0]


def current_metadata(table_dir: Path) -> Path:
    """The newest metadata.json of the table (the highest version number)."""
    files = sorted((table_dir / "metadata").glob("*.metadata.json"), key=lambda p: int(p.name.split("-", 1)[0]))
    return files[-1]


@pytest.fixture
def crash_job(kafka_broker, tmp_path):
    """The job of a driver (a new table and topic) and the ids of the events its first run produces
    (``first_run``: the first driver writes them to the topic before its stream starts)."""
    topic = new_topic("crash")
    suffix = uuid.uuid4().hex[:6]
    job = {
        "catalog": f"crash_{suffix}", "table": f"crash_{suffix}.db.events", "key_id": "k1",
        "warehouse": str(tmp_path / "wh"), "metastore_dir": str(tmp_path / "metastore"),
        "bootstrap_servers": kafka_broker.bootstrap_servers, "topic": topic, "per_trigger": PER_TRIGGER,
        "checkpoint": str(tmp_path / "checkpoint"), "ledger": str(tmp_path / "ledger.json"),
    }
    return job, [e["id"] for e in EVENT_RECORDS]


#: A held row's sleep: a held batch lasts PER_TRIGGER times this (20 s), far longer than a loaded
#: machine may delay the test between seeing the batch start and killing the driver or the KMS.
HELD_ROW_MS = 2000


def held_from(batch: int) -> dict:
    """Job settings that hold batch ``batch`` and every later one (their rows sleep
    :data:`HELD_ROW_MS` each; batch ``n`` reads ids ``n * PER_TRIGGER`` on: one partition, in order)."""
    return {"row_delay_ms": HELD_ROW_MS, "hold_from_id": batch * PER_TRIGGER}


def first_run(job: dict) -> dict:
    """The first driver's job: it produces the events; batch 0 runs at full speed, batch 1 is held
    (to be killed mid-batch)."""
    return {**job, **held_from(1), "produce": EVENT_RECORDS}


def assert_exact(result: dict, produced: list[int], kms) -> None:
    """Every produced event exactly once, as Spark and the JVM-free reader see it, and it verifies."""
    assert result["ids"] == produced, "lost or duplicated events"
    assert sorted(read_table(result["metadata_location"], kms).column("id").to_pylist()) == produced
    report = verify_metadata(result["metadata_location"], kms)
    assert report.ok, report.not_ok()
    assert result["failures"] == 0 and all(r["ok"] for r in result["reports"])
    assert all(r["mode"] in ("current", "since") for r in result["reports"][1:]), \
        "the restarted listener continued from the ledger"


def test_kafka_driver_killed_mid_batch_with_register_kms_resumes_exactly(crash_job, tmp_path):
    job, produced = crash_job
    master_keys = {"k1": os.urandom(16)}
    job.update(kms_name="crash-kms", master_keys={k: v.hex() for k, v in master_keys.items()})

    first = Driver(first_run(job), tmp_path / "driver-1.log")
    in_flight = wait_mid_batch(first, Path(job["checkpoint"]))
    first.kill()
    assert not (Path(job["checkpoint"]) / "commits" / str(in_flight)).exists(), "killed before the batch committed"

    result = Driver(job, tmp_path / "driver-2.log").result()
    assert_exact(result, produced, InMemoryKms(master_keys))


def test_kafka_driver_killed_then_kms_down_with_kms_serve_resumes_exactly(crash_job, tmp_path):
    job, produced = crash_job
    keystore = make_keystore(tmp_path / "keys.json", "k1")
    service = ServiceProcess.start(tmp_path / "kms", keystore)
    try:
        job.update(kms_service=service.address, kms_token_file=str(service.token_file), keystore=str(keystore))
        checkpoint = Path(job["checkpoint"])

        first = Driver(first_run(job), tmp_path / "driver-1.log")
        in_flight = wait_mid_batch(first, checkpoint)
        first.kill()
        assert not (checkpoint / "commits" / str(in_flight)).exists()

        second = Driver({**job, **held_from(in_flight + 1)}, tmp_path / "driver-2.log")
        in_flight = wait_mid_batch(second, checkpoint, after_batch=in_flight + 1)
        table_dir = Path(job["warehouse"]) / "db.db" / "events"
        before = current_metadata(table_dir)
        address = service.address
        service.stop()                                   # the KMS goes away during a batch
        code = second.wait()
        output = second.output()
        assert code == 1 and "FAILED" in output, output[-6000:]
        failure = [line for line in output.splitlines() if line.startswith("FAILED")][-1]
        assert re.search(r"KMS|kms serve", failure), failure
        assert current_metadata(table_dir) == before, "nothing committed while the KMS was down"
        assert not (checkpoint / "commits" / str(in_flight)).exists()

        service = ServiceProcess.start(tmp_path / "kms", keystore, listen=address)  # back: same port, new token
        result = Driver(job, tmp_path / "driver-3.log").result()
    finally:
        service.stop()
    assert_exact(result, produced, KeystoreKms(keystore))
