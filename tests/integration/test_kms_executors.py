"""The Python KMS called from executor JVMs (``local-cluster[2,1,1024]``): every operation Iceberg
runs on executors, executor-side faults and recovery, and no token or key in any log.

One subprocess application (tests/integration/kms_cluster_app.py) runs every scenario; the tests
below judge its ``RESULT`` lines, its logs and its Spark event log."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.kms_cluster_app import ok, results_of
from tests.testkit import SHORT_DRIVER_ENV

ROOT = Path(__file__).resolve().parents[2]
APP = Path(__file__).with_name("kms_cluster_app.py")

# A local-cluster Spark application in a subprocess (jvm). Spark 3.5 runs the lighter executor test
# (test_readme_and_cluster) instead (not spine).
pytestmark = [pytest.mark.slow, pytest.mark.jvm, pytest.mark.executors]


@pytest.fixture(scope="module")
def cluster_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("kms-cluster")
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYTHONPATH=str(ROOT), **SHORT_DRIVER_ENV)
    result = subprocess.run([sys.executable, str(APP), str(workdir)], cwd=workdir, env=env,
                            capture_output=True, text=True, timeout=900)
    (workdir / "driver-stdout.txt").write_text(result.stdout)
    (workdir / "driver-stderr.txt").write_text(result.stderr)
    steps = results_of(result.stdout)
    work_dir = Path(steps["application"]["work_dir"]) if "application" in steps else None
    executor_logs = {}
    if work_dir is not None and work_dir.is_dir():  # executor stdout/stderr, then drop the jar copies
        executor_logs = {str(p): p.read_bytes() for p in work_dir.rglob("std*")}
        shutil.rmtree(work_dir, ignore_errors=True)
    assert result.returncode == 0, result.stderr[-3000:]
    yield {"steps": steps, "workdir": workdir, "executor_logs": executor_logs}


def test_operations_that_call_the_kms_on_executors_work(cluster_run):
    steps = cluster_run["steps"]
    assert ok(steps, "executors")["executors"] == 2
    for name in ("files", "entries", "position_deletes", "rewrite_position_delete_files", "rewrite_data_files",
                 "rewrite_manifests", "expire_snapshots", "remove_orphan_files", "rows after maintenance",
                 "orphan removed", "drop table purge", "purge deleted files"):
        ok(steps, name)
    # Executors called the driver's KMS (maintenance reads manifest lists there, apache/iceberg#14764).
    assert steps["expire_snapshots kms calls"]["unwrap"] >= 1
    assert steps["remove_orphan_files kms calls"]["unwrap"] >= 1


def test_rest_catalog_maintenance_on_executors_in_separate_jvms(cluster_run):
    """The same maintenance on a table of the bridge's EncryptingRestCatalog: the executors (two
    other JVMs) decrypt with the table the driver serialized, and the files stay PARE/AGS1."""
    steps = cluster_run["steps"]
    for name in ("rest rewrite_data_files", "rest rewrite_manifests", "rest expire_snapshots",
                 "rest remove_orphan_files", "rest rows after maintenance", "rest files encrypted"):
        ok(steps, name)
    assert steps["rest remove_orphan_files kms calls"]["unwrap"] >= 1  # executors asked the driver's KMS


def test_catalog_properties_are_forwarded_to_initialize_once(cluster_run):
    initialized = ok(cluster_run["steps"], "forwarded properties")["initialized"]
    assert initialized == [{"region": "test-region", "endpoint": "https://kms.example/a?b=c&d"}]


@pytest.mark.parametrize("fault, reason", [
    ("raise", "KmsError: simulated outage for k"),
    ("hang", "no answer from the Python KMS within its timeout"),
    ("unreachable", "the Python KMS is unreachable"),
])
def test_executor_faults_fail_with_kms_operation_and_key_id_then_recover(cluster_run, fault, reason):
    steps = cluster_run["steps"]
    failed = steps[f"executor fault {fault}"]
    assert not failed["ok"]
    assert "Python KMS 'default' failed to unwrap a key with key id 'k'" in failed["error"]
    assert reason in failed["error"]
    assert "executor" in failed["error"]  # it really failed in an executor JVM
    if fault == "unreachable":
        ok(steps, "re-registered with TLS")  # executors switched to the new endpoint, over TLS
    recovered = "recovered after re-registration" if fault == "unreachable" else f"recovered after {fault}"
    assert "orphan.parquet" not in ok(steps, recovered)["value"]  # dry run finds nothing left to remove


def test_faults_commit_nothing_and_the_table_still_reads(cluster_run):
    steps = cluster_run["steps"]
    ok(steps, "snapshot unchanged by faults")
    ok(steps, "rows after faults")
    failed = steps["driver fault raise"]
    assert not failed["ok"] and "Python KMS 'default' failed to unwrap a key with key id 'k'" in failed["error"]
    ok(steps, "driver fault committed nothing")


def test_no_token_or_key_in_debug_logs_or_the_spark_event_log(cluster_run):
    """Driver and executors log at DEBUG (Python too); the event log is on. No master key, KEK, data
    key or token, in hex, base64 or raw bytes, in any log line, exception text or event."""
    workdir = cluster_run["workdir"]
    secrets = json.loads((workdir / "secrets.json").read_text())
    for kind in ("master key", "kek", "data key", "token"):
        assert any(name.startswith(kind) for name in secrets), f"no {kind} to look for"
    event_logs = [p for p in (workdir / "events").rglob("*") if p.is_file()]
    assert event_logs, "Spark wrote no event log"
    logs = {str(p): p.read_bytes() for p in event_logs}
    logs.update(cluster_run["executor_logs"])
    assert len(cluster_run["executor_logs"]) >= 2, "executor logs not found"
    for name in ("driver-stdout.txt", "driver-stderr.txt"):
        logs[name] = (workdir / name).read_bytes()
    for where, data in logs.items():
        for name, value in secrets.items():
            for form in _forms(name, value):
                assert form not in data, f"{name} appears in {where}"


def _forms(name: str, value: str) -> list[bytes]:
    if name.startswith("token"):  # tokens are hex text
        return [value.encode()]
    raw = bytes.fromhex(value)
    return [value.encode(), value.upper().encode(), base64.b64encode(raw), raw]
