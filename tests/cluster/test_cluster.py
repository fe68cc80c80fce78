"""The package on a Spark standalone cluster whose nodes share no loopback (pyiceberg_crypto/testing/netns.py):
the default jar path, the Python KMS over TLS from executors on other hosts, maintenance, the
verifier in Python tasks on the workers, faults, and what crosses the wire.

Two Spark applications run in the driver's namespace (tests/cluster/cluster_app.py): ``faults``
(maxFailures 1) and ``main`` (a tcpdump capture on the bridge around it). Then the verification job
runs through ``spark-submit`` with a packed virtual environment, and the JVM-free reader and the
CLI verifier read the table from the shared warehouse.
"""

from __future__ import annotations

import base64
import json
import sys
import threading
from pathlib import Path

import pytest

from pyiceberg_crypto.kms import KeystoreKms
from pyiceberg_crypto.kms.keystore import Keystore
from pyiceberg_crypto.testing.netns import read_pcap_payloads
from tests.cluster.apps import serve_requests, short_lived_jvms
from tests.integration.kms_cluster_app import ok, results_of
from tests.testkit import PROJECT_ENV, ROOT, SHORT_DRIVER_ENV

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

APP = Path(__file__).with_name("cluster_app.py")
WORKER_NODES = {"w1": 0, "w2": 1}


def default_jar_env(cluster) -> dict[str, str]:
    """The driver's environment as a user's: no local jar directory, so spark.jars.packages is used
    (the driver JVM short-lived: SHORT_DRIVER_ENV)."""
    env = {k: v for k, v in cluster.driver_env().items() if k not in PROJECT_ENV}
    env.update(SHORT_DRIVER_ENV)
    env["PYTHONPATH"] = str(ROOT)  # for tests.* helpers; pyiceberg_crypto is installed in the venv
    env["PYSPARK_PYTHON"] = sys.executable
    return env


def worker_actions(cluster):
    """What the ``faults`` and ``main`` applications ask of the machine, done on ``cluster``."""
    def handle(ask: dict) -> None:
        if ask["action"] == "kill_worker":
            cluster.kill_worker(ask["index"])
        elif ask["action"] == "block_port":
            cluster.block_port(cluster.workers[WORKER_NODES[ask["node"]]], ask["port"])
        elif ask["action"] == "unblock_port":
            cluster.unblock_port(cluster.workers[WORKER_NODES[ask["node"]]], ask["port"])

    return handle


def run_app(cluster, scenario: str, workdir: Path, keystore: Path, timeout: int = 900) -> dict:
    workdir.mkdir(parents=True, exist_ok=True)
    cfg = {"workdir": str(workdir), "spark_conf": short_lived_jvms(cluster.driver_conf()),
           "driver_address": cluster.driver.address,
           "keystore": str(keystore)}
    (workdir / "config.json").write_text(json.dumps(cfg))
    stop = threading.Event()
    handled = serve_requests(workdir, stop, worker_actions(cluster))
    try:
        result = cluster.run(cluster.driver, [sys.executable, str(APP), scenario, str(workdir / "config.json")],
                             env=default_jar_env(cluster), cwd=workdir, timeout=timeout)
    finally:
        stop.set()
    (workdir / "driver-stdout.txt").write_text(result.stdout)
    (workdir / "driver-stderr.txt").write_text(result.stderr)
    assert result.returncode == 0, result.stderr[-4000:]
    return {"steps": results_of(result.stdout), "workdir": workdir, "handled": handled,
            "secrets": json.loads((workdir / "secrets.json").read_text())}


def failed(steps: dict, name: str) -> str:
    assert name in steps, f"step {name!r} did not run"
    assert not steps[name]["ok"], f"{name} should have failed: {steps[name]}"
    return steps[name]["error"]


# --- faults (one application, maxFailures 1) ---------------------------------------------------------


@pytest.fixture(scope="module")
def faults_run(netns_cluster, keystore, tmp_path_factory):
    netns_cluster.ensure_workers()
    return run_app(netns_cluster, "faults", tmp_path_factory.mktemp("faults"), keystore)


def test_a_loopback_kms_with_a_cluster_master_says_to_pass_bind_address(faults_run):
    error = failed(faults_run["steps"], "loopback registration")
    assert "Python KMS 'default' failed to unwrap a key with key id 'orders-key'" in error
    assert "is unreachable at 127.0.0.1:" in error
    assert "registered on loopback (127.0.0.1)" in error and "bind_address=" in error
    ok(faults_run["steps"], "loopback: nothing removed")


def test_kms_port_blocked_from_one_worker_fails_naming_the_kms_and_its_address(faults_run, netns_cluster):
    steps = faults_run["steps"]
    port = steps["blocked: nothing removed, nothing committed"]["port"]
    error = failed(steps, "kms blocked from one worker")
    assert "Python KMS 'default' failed to unwrap a key with key id 'orders-key'" in error
    assert f"is unreachable at {netns_cluster.driver.address}:{port}, TLS: no connection within its timeout" in error
    assert f"({netns_cluster.workers[0].address} executor" in error  # the blocked worker's task failed
    ok(steps, "blocked: nothing removed, nothing committed")
    ok(steps, "unblocked: the same session works")
    ok(steps, "unblocked: orphan removed")
    ok(steps, "rows after faults")
    assert [a["action"] for a in faults_run["handled"]] == ["block_port", "unblock_port"]


# --- the main application, captured on the bridge ----------------------------------------------------


@pytest.fixture(scope="module")
def main_run(netns_cluster, keystore, tmp_path_factory, faults_run):
    netns_cluster.ensure_workers()
    workdir = tmp_path_factory.mktemp("main")
    capture = workdir / "bridge.pcap"
    with netns_cluster.capture(capture):
        run = run_app(netns_cluster, "main", workdir, keystore)
    run["capture"] = capture
    yield run
    capture.unlink()  # ~150 MB: the jars, tasks and results of a whole application
    netns_cluster.ensure_workers()  # the scenario killed worker 1


def test_the_default_jar_path_reaches_executors_on_other_hosts(main_run, netns_cluster):
    steps = main_run["steps"]
    ok(steps, "jars shipped to executors")
    assert ok(steps, "executors")["hosts"] == sorted(w.address for w in netns_cluster.workers)
    registered = ok(steps, "registered")
    assert registered["address"] == netns_cluster.driver.address


def test_readme_dml_and_maintenance_on_the_cluster(main_run):
    steps = main_run["steps"]
    for name in ("ten lines", "insert update merge delete", "expire_snapshots", "remove_orphan_files",
                 "orphan removed", "rows after maintenance", "verify_table", "drop table purge",
                 "purge deleted every file"):
        ok(steps, name)
    assert steps["orphan removed"]["kms_unwraps"] >= 2  # executors unwrapped the KEK over TLS


def test_executors_switch_to_a_re_registered_kms(main_run):
    steps = main_run["steps"]
    ok(steps, "re-registered")
    ok(steps, "remove_orphan_files after re-registration")
    ok(steps, "executors called the new registration")


def test_a_worker_killed_during_an_insert_loses_and_duplicates_nothing(main_run):
    steps = main_run["steps"]
    assert ok(steps, "insert survived a worker kill")["running_at_kill"]
    every = ok(steps, "every row once")
    assert every["snapshot_changed"]
    assert [a["action"] for a in main_run["handled"]] == ["kill_worker"]


def _encodings(secret: bytes) -> set[bytes]:
    return {secret, secret.hex().encode(), secret.hex().upper().encode(), base64.b64encode(secret),
            base64.urlsafe_b64encode(secret), base64.b64encode(secret).rstrip(b"=")}


def test_nothing_secret_crosses_the_bridge_and_the_kms_port_speaks_only_tls(main_run, netns_cluster, keystore):
    packets = read_pcap_payloads(main_run["capture"])
    steps = main_run["steps"]
    kms_ports = {steps["registered"]["port"], steps["re-registered"]["port"]}
    kms_packets = [p for p in packets if p[3] in kms_ports or p[1] in kms_ports]
    # Executors on both workers reached the KMS (the capture saw them), and only over TLS.
    clients = {p[0] for p in kms_packets if p[3] in kms_ports}
    assert clients == {w.address for w in netns_cluster.workers}, clients
    new_port = steps["re-registered"]["port"]  # after re-registration, executors used the new listener
    assert {p[0] for p in kms_packets if p[3] == new_port} & clients
    streams: dict[tuple, bytes] = {}
    for src, sport, dst, dport, payload in kms_packets:
        streams[(src, sport, dst, dport)] = streams.get((src, sport, dst, dport), b"") + payload
    assert streams
    for key, data in streams.items():
        assert_tls_records(data, key)

    secrets: set[bytes] = set()
    for name, value in main_run["secrets"].items():
        if value:
            secrets |= _encodings(bytes.fromhex(value) if name.startswith(("kek", "data key")) else value.encode())
    for versions in Keystore(keystore).load().values():
        for version in versions:
            secrets |= _encodings(version.key)
    wire = b"".join(p[4] for p in packets)
    assert len(wire) > 1_000_000  # the capture saw the application (jars, tasks, results)
    leaked = [s[:6] + b"..." for s in secrets if s in wire]
    assert not leaked, f"{len(leaked)} secret encodings found in the capture"


def assert_tls_records(data: bytes, stream) -> None:
    """``data`` (one direction of one TCP stream) is a sequence of TLS records, nothing else."""
    offset = 0
    while offset < len(data):
        header = data[offset:offset + 5]
        if len(header) < 5:
            break  # a record cut by the end of the capture
        content_type, major, minor = header[0], header[1], header[2]
        assert content_type in (20, 21, 22, 23) and major == 3 and minor in (1, 2, 3, 4), (
            f"not TLS at byte {offset} of {stream}: {header.hex()}")
        offset += 5 + int.from_bytes(header[3:5], "big")


# --- after the applications: spark-submit with a packed environment; the table without a JVM ---------


def test_the_verification_job_through_spark_submit_with_a_packed_environment(main_run, netns_cluster, keystore,
                                                                              packed_env, tmp_path):

    import pyspark
    from pyiceberg_crypto import config

    settings = config.spark_settings("lake", warehouse=main_run["workdir"] / "wh")
    conf = short_lived_jvms({**netns_cluster.driver_conf(), **settings})
    job = Path(__import__("pyiceberg_crypto.cli.verify_job", fromlist=["job"]).__file__)
    command = [str(Path(pyspark.__file__).parent / "bin" / "spark-submit"), "--archives", f"{packed_env}#env",
               "--conf", "spark.pyspark.python=./env/bin/python", "--conf", f"spark.pyspark.driver.python={sys.executable}",
               *config.spark_conf_args(conf), str(job), "--table", "lake.db.t", "--kms", "keystore",
               "--kms-property", f"keystore.path={keystore}", "--json", "--output", str(tmp_path / "report.json"),
               "--driver-max-files", "0"]
    result = netns_cluster.run(netns_cluster.driver, command, env=default_jar_env(netns_cluster), cwd=tmp_path,
                               timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads((tmp_path / "report.json").read_text())
    statuses = {f["status"] for f in report["files"]}
    assert report["ok"] and statuses == {"OK"} and len(report["files"]) > 5
    # The workers' executors unpacked the archive and ran the file checks with its Python.
    unpacked = [w.name for w in netns_cluster.workers
                if list((netns_cluster.workdir / w.name / "work").glob("app-*/*/env/bin/python"))]
    assert unpacked, "no worker unpacked env.tar.gz"


def test_the_jvm_free_reader_and_the_cli_read_the_cluster_table(main_run, keystore):
    pytest.importorskip("pyarrow")
    from pyiceberg_crypto.read import read_table
    from pyiceberg_crypto.verify import verify_metadata

    table = main_run["steps"]["table"]
    location = table["metadata_location"]
    kms = KeystoreKms(keystore)
    arrow = read_table(location, kms)
    ids = arrow.column("id").to_pylist()
    assert len(ids) == table["rows"] == len(set(ids)) and sum(ids) == table["sum"]
    assert verify_metadata(location, kms).ok
