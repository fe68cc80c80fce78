"""Running the Spark applications of tests/testing/spark_apps.py and checking what they wrote.

``s3`` is anything with ``environment()``, ``client()``, ``catalog_properties()`` (an
:class:`~pyiceberg_crypto.testing.s3.S3Server`, or the MinIO container of the docker tests).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from pyiceberg_crypto.io import file_io_for
from pyiceberg_crypto.io.s3 import split_uri
from pyiceberg_crypto.kms import InMemoryKms
from pyiceberg_crypto.verify import verify_metadata
from pyiceberg_crypto.verify.magic_scan import EXPECTED_MAGIC, classify
from pyiceberg_crypto.table import Limits
from tests.testkit import eventually

ROOT = Path(__file__).resolve().parents[2]
APP_TIMEOUT = 420

#: Master keys of the running test, for ``pyiceberg-crypto verify --kms tests.testing.helpers:cli_kms``.
CLI_MASTER_KEYS: dict[str, bytes] = {}


def cli_kms() -> InMemoryKms:
    return InMemoryKms(CLI_MASTER_KEYS)


def app_environment(s3) -> dict[str, str]:
    return dict(os.environ, **s3.environment(), PYSPARK_PYTHON=sys.executable, PYTHONPATH=str(ROOT))


def start_app(scenario: str, job: dict, s3) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.testing.spark_apps", scenario], cwd=ROOT, env=app_environment(s3),
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
        """Until the application printed ``times`` lines starting with ``prefix`` (fails at once if it ended)."""
        def printed() -> bool:
            if self.count(prefix) >= times:
                return True
            if self.process.poll() is not None:
                for reader in self._readers:  # what it printed before it ended
                    reader.join(30)
                if self.count(prefix) >= times:
                    return True
                pytest.fail(f"the application ended before {times}x {prefix!r}\n{self.failure()}")
            return False

        eventually(printed, timeout, message=lambda: f"{times}x {prefix!r}\n{self.failure()}")

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


def run_app(scenario: str, job: dict, s3) -> dict:
    return AppOutput(start_app(scenario, job, s3)).result()


def table_files(s3, location: str) -> list[tuple[str, str, bytes]]:
    """(kind, key, first 4 bytes) of every data / manifest / manifest-list object of a table."""
    bucket, prefix = split_uri(location.rstrip("/") + "/")
    client = s3.client()
    found = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            kind = classify(Path(item["Key"][len(prefix):]))
            if kind is not None:
                head = client.get_object(Bucket=bucket, Key=item["Key"], Range="bytes=0-3")["Body"].read()
                found.append((kind, item["Key"], head))
    return sorted(found)


def assert_every_file_encrypted(s3, location: str, min_data_files: int) -> None:
    files = table_files(s3, location)
    kinds = [kind for kind, _, _ in files]
    assert kinds.count("data") >= min_data_files and "manifest" in kinds and "manifest-list" in kinds, files
    plaintext = [(kind, key, magic) for kind, key, magic in files if EXPECTED_MAGIC.get(kind) != magic]
    assert plaintext == []


def assert_verified(result: dict, master_keys, s3, min_data_files: int, key_id: str) -> None:
    """Both verifiers agree the table is clean: ``verify_table`` in the application (metastore entry,
    Spark tasks) and ``verify_metadata`` here (pure Python, S3 FileIO, every snapshot)."""
    in_spark = result["verify_table"]
    assert in_spark["ok"], in_spark["problems"]
    file_io = file_io_for(result["metadata_json"], s3.catalog_properties())
    report = verify_metadata(result["metadata_json"], InMemoryKms(master_keys), all_snapshots=True,
                             limits=Limits(file_io=file_io))
    assert report.ok, [f.to_dict() for f in report.not_ok()] + [c.to_dict() for c in report.failed_checks()]
    kinds = [f.kind for f in report.files]
    assert kinds.count("data") >= min_data_files and "manifest" in kinds and "manifest-list" in kinds
    assert report.key_id == key_id
