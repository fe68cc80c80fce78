"""Encrypted tables on real services: a standalone Hive metastore process and an S3 server, both on
127.0.0.1, used by separate Spark applications (each test's Spark runs in its own process)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from pyiceberg_crypto.io.s3 import split_uri
from pyiceberg_crypto.verify.files import EXPECTED_MAGIC, classify

pytestmark = [pytest.mark.loopback, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CATALOG = "lake"
KEY_ID = "orders-key"
APP_TIMEOUT = 420


@pytest.fixture(scope="module")
def master_keys():
    return {KEY_ID: os.urandom(16)}


@pytest.fixture(scope="module")
def job(hive_metastore, s3_server, master_keys):
    """What every Spark application of this module is told (keys go over stdin only)."""
    return {
        "catalog": CATALOG,
        "warehouse": s3_server.warehouse("wh"),
        "metastore_uri": hive_metastore.uri,
        "s3_endpoint": s3_server.endpoint,
        "s3_region": s3_server.region,
        "key_id": KEY_ID,
        "master_keys": {key_id: key.hex() for key_id, key in master_keys.items()},
    }


def _env(s3_server) -> dict[str, str]:
    return dict(os.environ, **s3_server.environment(), PYSPARK_PYTHON=sys.executable, PYTHONPATH=str(ROOT))


def _start_app(scenario: str, job: dict, s3_server) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.services.spark_apps", scenario], cwd=ROOT, env=_env(s3_server),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    process.stdin.write(json.dumps(job))
    process.stdin.close()
    return process


class AppOutput:
    """Collects an application's stdout lines as they come (so a test can wait for progress)."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process = process
        self.lines: list[str] = []
        self.stderr = ""
        self._readers = [threading.Thread(target=self._read_stdout, daemon=True),
                         threading.Thread(target=self._read_stderr, daemon=True)]
        for reader in self._readers:
            reader.start()

    def _read_stdout(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def _read_stderr(self) -> None:
        self.stderr = self.process.stderr.read()

    def count(self, prefix: str) -> int:
        return sum(1 for line in list(self.lines) if line.startswith(prefix))

    def wait_for(self, prefix: str, times: int = 1, timeout: float = APP_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while self.count(prefix) < times:
            assert self.process.poll() is None or self.count(prefix) >= times, self.failure()
            assert time.monotonic() < deadline, f"no {times}x {prefix!r} after {timeout} s\n{self.failure()}"
            time.sleep(0.1)

    def result(self) -> dict:
        self.process.wait(APP_TIMEOUT)
        for reader in self._readers:
            reader.join(30)
        print("\n".join(line for line in self.lines if line.startswith("TIMING")))
        assert self.process.returncode == 0, self.failure()
        line = next(line for line in self.lines if line.startswith("RESULT "))
        return json.loads(line[len("RESULT "):])

    def failure(self) -> str:
        return "stdout:\n" + "\n".join(self.lines[-20:]) + "\nstderr:\n" + self.stderr[-4000:]


def run_app(scenario: str, job: dict, s3_server) -> dict:
    return AppOutput(_start_app(scenario, job, s3_server)).result()


def table_files(s3_server, location: str) -> list[tuple[str, str, bytes]]:
    """(kind, key, first 4 bytes) of every data / manifest / manifest-list object of a table."""
    bucket, prefix = split_uri(location.rstrip("/") + "/")
    client = s3_server.client()
    found = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            kind = classify(Path(item["Key"][len(prefix):]))
            if kind is not None:
                head = client.get_object(Bucket=bucket, Key=item["Key"], Range="bytes=0-3")["Body"].read()
                found.append((kind, item["Key"], head))
    return sorted(found)


def assert_every_file_encrypted(s3_server, location: str, min_data_files: int) -> None:
    files = table_files(s3_server, location)
    kinds = [kind for kind, _, _ in files]
    assert kinds.count("data") >= min_data_files and "manifest" in kinds and "manifest-list" in kinds, files
    plaintext = [(kind, key, magic) for kind, key, magic in files if EXPECTED_MAGIC.get(kind) != magic]
    assert plaintext == []


def _table(name: str) -> str:
    return f"{CATALOG}.db.{name}_{uuid.uuid4().hex[:8]}"


def _location(s3_server, table: str) -> str:
    _, db, name = table.split(".")
    return f"{s3_server.warehouse('wh')}/{db}.db/{name}"


# --- the tests ---------------------------------------------------------------------------------


def test_round_trip_and_key_id_pinning_on_standalone_metastore_and_s3(job, s3_server, hive_metastore):
    table = _table("orders")
    result = run_app("round_trip", dict(job, table=table), s3_server)

    assert [tuple(row) for row in result["rows"]] == [(1, "apple"), (3, "fig"), (4, "kiwi")]
    assert result["key_id"] == KEY_ID
    pinned = re.compile(r"(?i)cannot (modify|remove|unset|change).*key id|key id.*encrypted table")
    assert pinned.search(result["refused"]["change"] or ""), result["refused"]
    assert pinned.search(result["refused"]["remove"] or ""), result["refused"]
    assert result["kms_calls"]["wrap"] >= 1 and result["kms_calls"]["unwrap"] >= 1
    # The table lives in the S3 server, the metastore records it there, and nothing is plaintext.
    assert result["metadata_json"].startswith(_location(s3_server, table) + "/metadata/")
    assert_every_file_encrypted(s3_server, _location(s3_server, table), min_data_files=2)
    if "verify_table_ok" in result:
        assert result["verify_table_ok"], result["verify_table_failures"]


WRITERS = 2
COMMITS_PER_WRITER = 4


def test_two_applications_append_concurrently_without_losing_a_commit(job, s3_server, tmp_path):
    """Two driver JVMs, one table, one metastore: their commits race on the metastore's atomic
    swap of metadata_location; the loser of each race retries on the new base."""
    table = _table("concurrent")
    start_file, read_file = tmp_path / "go", tmp_path / "read"
    apps = [
        AppOutput(_start_app("writer", dict(job, table=table, writer=index, commits=COMMITS_PER_WRITER,
                                            create=index == 0, start_file=str(start_file),
                                            read_after=str(read_file) if index == 0 else None), s3_server))
        for index in range(WRITERS)
    ]
    for app in apps:
        app.wait_for("READY")
    start_file.touch()  # both drivers hold the same base metadata now: their commits race
    for app in apps:
        app.wait_for("DONE")
    read_file.touch()
    results = [app.result() for app in apps]

    rows = sorted(tuple(row) for row in results[0]["rows"])
    assert rows == sorted((w, n) for w in range(WRITERS) for n in range(COMMITS_PER_WRITER))
    assert results[0]["snapshots"] == WRITERS * COMMITS_PER_WRITER  # one snapshot per commit, none lost
    assert_every_file_encrypted(s3_server, _location(s3_server, table), min_data_files=WRITERS * COMMITS_PER_WRITER)
    if "verify_table_ok" in results[0]:
        assert results[0]["verify_table_ok"], results[0]["verify_table_failures"]


def test_metastore_killed_while_a_writer_commits_leaves_a_consistent_table(job, s3_server, hive_metastore, tmp_path):
    """SIGKILL the metastore while an application commits in a loop: commits fail while it is down
    (each either fully in the table or not at all), the table keeps a consistent current snapshot,
    and after a restart on the same port the same application commits, reads and verifies again."""
    table = _table("killed")
    stop_file = tmp_path / "stop"
    app = AppOutput(_start_app("loop_writer", dict(job, table=table, writer=7, stop_file=str(stop_file)), s3_server))
    try:
        app.wait_for("COMMITTED", times=2)
        hive_metastore.kill()  # mid-loop: lands in some phase of a commit
        app.wait_for("FAILED", times=1)
        hive_metastore.start()
        committed_before_restart = app.count("COMMITTED")
        app.wait_for("COMMITTED", times=committed_before_restart + 2)
    finally:
        if not hive_metastore.running:
            hive_metastore.start()
        stop_file.touch()
    result = app.result()

    committed, failed = set(result["committed"]), set(result["failed"])
    assert failed, "no commit failed while the metastore was down"
    rows = {n for writer, n in result["rows"]}
    # Every acknowledged commit is there; a failed one is there at most once, and only if its
    # metadata swap reached the metastore before the kill (commit state unknown to the writer).
    assert committed <= rows <= committed | failed
    assert len(result["rows"]) == len(rows)
    assert result["snapshots"] == len(rows)
    assert_every_file_encrypted(s3_server, _location(s3_server, table), min_data_files=len(rows))
    if "verify_table_ok" in result:
        assert result["verify_table_ok"], result["verify_table_failures"]
