"""The package on YARN: a ResourceManager and two NodeManagers in network namespaces of their own
(pyiceberg_crypto/testing/yarn.py), applications submitted with ``spark-submit --master yarn`` from
an edge node, the default jar path, the package's public API.

Two applications run the operations of tests/cluster/cluster_app.py's ``main`` scenario (the README's
ten lines, INSERT / UPDATE / MERGE / DELETE, ``expire_snapshots``, ``remove_orphan_files``,
``verify_table``, a KMS re-registered, ``DROP TABLE ... PURGE``):

- **client mode**: the driver on the edge node registers its Python KMS with ``bind_address``;
  executors in NodeManager containers call it over TLS; a NodeManager (and its executors) is
  killed during an INSERT;
- **cluster mode**: the driver in the ApplicationMaster container, its Python (and the executors')
  the packed virtual environment shipped with ``--archives``, the KMS registered in that driver
  (``bind_address="0.0.0.0"``); ``spark.yarn.maxAppAttempts=2`` and the first attempt dies after
  writing a table: the second attempt, a new driver with a new registration, reads it and goes on.

Then the JVM-free reader reads each result from the test host, and one short application without
its ``--archives`` shows what a missing Python environment on the containers looks like.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest

from pyiceberg_crypto import config
from pyiceberg_crypto.kms import KeystoreKms
from tests.cluster.apps import serve_requests, short_lived_jvms
from tests.integration.kms_cluster_app import ok, results_of
from tests.testkit import PROJECT_ENV, ROOT, SHORT_DRIVER_ENV

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

APP = Path(__file__).with_name("cluster_app.py")
#: The modules cluster_app.py imports from tests/ (shipped with --py-files in cluster mode).
APP_HELPERS = ("tests/__init__.py", "tests/testkit.py", "tests/integration/__init__.py",
               "tests/integration/kms_cluster_app.py", "tests/cluster/__init__.py", "tests/cluster/cluster_app.py")
MAIN_STEPS = ("ten lines", "insert update merge delete", "expire_snapshots", "remove_orphan_files", "orphan removed",
              "rows after maintenance", "verify_table", "re-registered", "remove_orphan_files after re-registration",
              "executors called the new registration", "drop table purge", "purge deleted every file")


def spark_submit() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-submit")


def submit(cluster, mode: str, workdir: Path, cfg: dict, *, conf: dict[str, str] | None = None,
           args: list[str] = (), env: dict[str, str] | None = None, timeout: float = 1200, scenario: str = "main"):
    """``spark-submit --master yarn --deploy-mode MODE ... cluster_app.py SCENARIO CONFIG`` on the edge
    node, the package's settings as ``--conf`` (the default jar path), the containers' JVMs short-lived
    (apps.short_lived_jvms); returns the finished
    process, the application id (from spark-submit's log; None when the driver's logging is quiet)
    and the requests the application made of the machine."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "config.json").write_text(json.dumps({"workdir": str(workdir), "spark_conf": {}, **cfg}))
    settings = config.spark_settings("lake", warehouse=workdir / "wh")
    all_conf = short_lived_jvms({**cluster.spark_conf(mode), **settings, **(conf or {})}, driver=mode == "cluster")
    command = [spark_submit(), *config.spark_conf_args(all_conf), *args, str(APP), scenario,
               str(workdir / "config.json")]
    stop = threading.Event()
    handled = serve_requests(workdir, stop, nodemanager_actions(cluster))
    try:
        result = cluster.run(cluster.edge, command, env=env, cwd=workdir, timeout=timeout)
    finally:
        stop.set()
    (workdir / "submit-stdout.txt").write_text(result.stdout)
    (workdir / "submit-stderr.txt").write_text(result.stderr)
    found = re.findall(r"application_\d+_\d+", result.stderr)
    return result, (found[0] if found else None), handled


def nodemanager_actions(cluster):
    """What cluster_app.py asks, on YARN: ``kill_worker`` SIGKILLs a NodeManager that runs executors
    but not the ApplicationMaster; ``block_port`` / ``unblock_port`` on "w1" / "w2" firewall
    NodeManager 1 / 2."""
    def handle(ask: dict) -> dict | None:
        if ask["action"] == "kill_worker":
            am_hosts = cluster.application_master_hosts()
            victim = next(i for i, node in enumerate(cluster.nodemanagers) if node.address not in am_hosts)
            cluster.kill_nodemanager(victim)
            return {"nodemanager": cluster.nodemanagers[victim].address}
        node = cluster.nodemanagers[{"w1": 0, "w2": 1}[ask["node"]]]
        if ask["action"] == "block_port":
            cluster.block_port(node, ask["port"])
        elif ask["action"] == "unblock_port":
            cluster.unblock_port(node, ask["port"])
        else:
            raise AssertionError(f"unexpected request {ask}")
        return None

    return handle


def edge_env(cluster, **extra: str) -> dict[str, str]:
    """spark-submit's environment on the edge node, as a user's: no project variables (its JVM
    short-lived: SHORT_DRIVER_ENV)."""
    env = {k: v for k, v in cluster.submit_env().items() if k not in PROJECT_ENV}
    env.update(SHORT_DRIVER_ENV)
    env.update(extra)
    return env


# --- client mode ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client_run(yarn_cluster, keystore, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("yarn-client")
    cfg = {"driver_address": yarn_cluster.edge.address, "keystore": str(keystore)}
    # The driver runs this checkout's package (PYTHONPATH), which Spark also puts on executors' path.
    result, app_id, handled = submit(yarn_cluster, "client", workdir, cfg,
                                     conf={"spark.pyspark.python": sys.executable},
                                     env=edge_env(yarn_cluster, PYTHONPATH=str(ROOT)))
    assert result.returncode == 0, result.stderr[-6000:]
    steps = results_of(result.stdout)
    app_id = app_id or ok(steps, "driver python")["application_id"]
    yield {"steps": steps, "app_id": app_id, "handled": handled, "workdir": workdir}
    yarn_cluster.ensure_nodemanagers()  # the scenario killed one


def test_yarn_client_mode_runs_the_readme_dml_and_maintenance(client_run, yarn_cluster):
    steps = client_run["steps"]
    ok(steps, "jars shipped to executors")  # spark.jars.packages, through YARN's distributed cache
    assert ok(steps, "registered")["address"] == yarn_cluster.edge.address
    assert ok(steps, "executors")["hosts"] == sorted(n.address for n in yarn_cluster.nodemanagers)
    for name in MAIN_STEPS:
        ok(steps, name)
    assert steps["orphan removed"]["kms_unwraps"] >= 2  # executors in containers unwrapped the KEK over TLS
    assert yarn_cluster.application(client_run["app_id"])["finalStatus"] == "SUCCEEDED"


def test_yarn_nodemanager_killed_during_an_insert_loses_and_duplicates_nothing(client_run, yarn_cluster):
    steps = client_run["steps"]
    assert ok(steps, "insert survived a worker kill")["running_at_kill"]
    assert ok(steps, "every row once")["snapshot_changed"]
    assert [a["action"] for a in client_run["handled"]] == ["kill_worker"]


def test_yarn_client_mode_table_reads_back_without_a_jvm(client_run, keystore):
    assert_reads_back(client_run["steps"], keystore)


def assert_reads_back(steps: dict, keystore: Path) -> None:
    pytest.importorskip("pyarrow")
    from pyiceberg_crypto.read import read_table
    from pyiceberg_crypto.verify import verify_metadata

    table = ok(steps, "table")
    kms = KeystoreKms(keystore)
    ids = read_table(table["metadata_location"], kms).column("id").to_pylist()
    assert len(ids) == table["rows"] == len(set(ids)) and sum(ids) == table["sum"]
    assert verify_metadata(table["metadata_location"], kms).ok


# --- cluster mode --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def app_helpers(tmp_path_factory) -> Path:
    """cluster_app.py's helper modules from tests/, for --py-files (the package comes from the archive)."""
    archive = tmp_path_factory.mktemp("yarn-py-files") / "tests.zip"
    with zipfile.ZipFile(archive, "w") as out:
        for name in APP_HELPERS:
            out.write(ROOT / name, name)
    return archive


@pytest.fixture(scope="module")
def cluster_run(yarn_cluster, keystore, tmp_path_factory, packed_env, app_helpers):
    yarn_cluster.ensure_nodemanagers()
    workdir = tmp_path_factory.mktemp("yarn-cluster-mode")
    cfg = {"driver_address": "0.0.0.0", "keystore": str(keystore), "kill_during_insert": False,
           "first_attempt_dies": True}
    conf = {"spark.pyspark.python": "./env/bin/python", "spark.pyspark.driver.python": "./env/bin/python",
            "spark.yarn.maxAppAttempts": "2"}
    result, app_id, _ = submit(yarn_cluster, "cluster", workdir, cfg, conf=conf, env=edge_env(yarn_cluster),
                               args=["--archives", f"{packed_env}#env", "--py-files", str(app_helpers)])
    assert app_id, result.stderr[-4000:]
    drivers = {name: path for name, path in yarn_cluster.container_logs(app_id).items() if name.endswith("_000001")}
    attempts = {name.split("_")[-2]: results_of((path / "stdout").read_text()) for name, path in sorted(drivers.items())}
    logs = "\n".join(f"--- {name}\n{(path / 'stderr').read_text(errors='replace')[-3000:]}"
                     for name, path in drivers.items())
    assert result.returncode == 0, f"{result.stderr[-3000:]}\n{logs}"
    return {"app_id": app_id, "attempts": attempts, "workdir": workdir, "logs": logs}


def test_yarn_cluster_mode_retries_a_failed_attempt_with_a_new_kms_registration(cluster_run, yarn_cluster):
    attempts = cluster_run["attempts"]
    assert sorted(attempts) == ["01", "02"], cluster_run["logs"]
    first, second = attempts["01"], attempts["02"]
    ok(first, "attempt 1 wrote")
    assert "attempt 2 reads what attempt 1 wrote" not in first  # attempt 1 died there
    ok(second, "attempt 2 reads what attempt 1 wrote")
    ok(second, "attempt 2 writes")
    nodes = {n.address for n in yarn_cluster.nodemanagers}
    assert first["attempt"]["advertised"] in nodes and second["attempt"]["advertised"] in nodes  # the AMs' hosts
    assert len(yarn_cluster.app_attempts(cluster_run["app_id"])) == 2
    assert yarn_cluster.application(cluster_run["app_id"])["finalStatus"] == "SUCCEEDED"


def test_yarn_cluster_mode_runs_the_same_operations_from_the_packed_environment(cluster_run, yarn_cluster):
    steps = cluster_run["attempts"]["02"]
    driver = ok(steps, "driver python")
    assert "/env/" in driver["package"] and "container_" in driver["package"], driver  # --archives, not the host's
    registered = ok(steps, "registered")
    assert registered["address"] == "0.0.0.0"
    assert registered["advertised"] in {n.address for n in yarn_cluster.nodemanagers}  # the AM's host
    assert set(ok(steps, "executors")["hosts"]) <= {n.address for n in yarn_cluster.nodemanagers}
    for name in MAIN_STEPS:
        ok(steps, name)
    assert steps["orphan removed"]["kms_unwraps"] >= 2


def test_yarn_cluster_mode_table_reads_back_without_a_jvm(cluster_run, keystore):
    assert_reads_back(cluster_run["attempts"]["02"], keystore)


# --- faults --------------------------------------------------------------------------------------


def test_yarn_kms_port_blocked_from_one_nodemanager_fails_naming_the_kms_and_its_address(yarn_cluster, keystore,
                                                                                         tmp_path):
    """cluster_app.py's ``faults`` (spark.task.maxFailures 1): a KMS on loopback, then the KMS port
    blocked from NodeManager 1 by an iptables rule in its namespace, then unblocked."""
    yarn_cluster.ensure_nodemanagers()
    cfg = {"driver_address": yarn_cluster.edge.address, "keystore": str(keystore)}
    result, _, handled = submit(yarn_cluster, "client", tmp_path / "app", cfg, scenario="faults",
                                conf={"spark.pyspark.python": sys.executable},
                                env=edge_env(yarn_cluster, PYTHONPATH=str(ROOT)), timeout=900)
    assert result.returncode == 0, result.stderr[-6000:]
    steps = results_of(result.stdout)
    error = failed(steps, "loopback registration")
    assert "is unreachable at 127.0.0.1:" in error and "bind_address=" in error
    port = ok(steps, "blocked: nothing removed, nothing committed")["port"]
    error = failed(steps, "kms blocked from one worker")
    assert "Python KMS 'default' failed to unwrap a key with key id 'orders-key'" in error
    assert f"is unreachable at {yarn_cluster.edge.address}:{port}, TLS: no connection within its timeout" in error
    assert f"({yarn_cluster.nodemanagers[0].address} executor" in error  # the blocked NodeManager's task failed
    for name in ("unblocked: the same session works", "unblocked: orphan removed", "rows after faults"):
        ok(steps, name)
    assert [a["action"] for a in handled] == ["block_port", "unblock_port"]


def failed(steps: dict, name: str) -> str:
    assert name in steps, f"step {name!r} did not run"
    assert not steps[name]["ok"], f"{name} should have failed: {steps[name]}"
    return steps[name]["error"]


def test_yarn_python_environment_missing_on_the_containers_fails_naming_the_interpreter(yarn_cluster, keystore,
                                                                                         tmp_path):
    """spark.pyspark.python points into an archive that was not shipped (--archives forgotten)."""
    cfg = {"driver_address": "0.0.0.0", "keystore": str(keystore)}
    conf = {"spark.pyspark.python": "./env/bin/python", "spark.pyspark.driver.python": "./env/bin/python"}
    result, app_id, _ = submit(yarn_cluster, "cluster", tmp_path / "app", cfg, conf=conf, env=edge_env(yarn_cluster),
                               timeout=600)
    assert result.returncode != 0
    assert yarn_cluster.application(app_id)["finalStatus"] == "FAILED"
    driver_logs = [path for name, path in yarn_cluster.container_logs(app_id).items() if name.endswith("_000001")]
    stderr = "".join((path / "stderr").read_text(errors="replace") for path in driver_logs)
    assert 'Cannot run program "./env/bin/python"' in stderr and "No such file or directory" in stderr


# --- by hand -------------------------------------------------------------------------------------


def test_yarn_cluster_by_hand_starts_and_stops_with_its_namespaces(yarn_cluster, tmp_path):
    """``python -m pyiceberg_crypto.testing yarn`` starts the same cluster (the fixture's gates: root,
    tools, jars) until SIGTERM, and leaves no namespace behind."""
    process = subprocess.Popen([sys.executable, "-m", "pyiceberg_crypto.testing", "yarn", "--directory",
                                str(tmp_path / "yarn")], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        line = process.stdout.readline()
        assert line.startswith("YARN cluster ready: ResourceManager at 10.77.0.2, NodeManagers at 10.77.0.3, "
                               "10.77.0.4; submit from the edge node: ip netns exec pic"), process.stderr.read()
        prefix = re.search(r"ip netns exec (pic\d+-[0-9a-f]{4})-edge", line).group(1)
        assert f"HADOOP_CONF_DIR={tmp_path / 'yarn' / 'conf' / 'edge'}" in line
        assert (tmp_path / "yarn" / "conf" / "edge" / "yarn-site.xml").is_file()
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(120) == 0
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert prefix not in namespaces
