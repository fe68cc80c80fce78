"""What the namespace-cluster tests share to run applications (tests/cluster/test_cluster.py on
Spark standalone, tests/cluster/test_yarn.py on YARN): the loop that does what an application asks
of the machine (kill a node, firewall a port), a packed virtual environment for ``--archives``, and
the JVM options of the applications' short-lived JVMs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from tests.testkit import PROJECT_ENV, SPARK_JVM_OPTIONS


def short_lived_jvms(conf: dict[str, str], *, driver: bool = False) -> dict[str, str]:
    """``conf`` with C1 only, the serial collector and the JVM archive (``SPARK_JVM_OPTIONS``) for the test
    applications' executors and YARN ApplicationMaster, and with ``driver`` for a driver that Spark
    starts in a container (YARN cluster mode); the driver on the edge or driver node gets them from
    ``SPARK_SUBMIT_OPTS`` (tests.testkit.SHORT_DRIVER_ENV). A test application starts four to six
    JVMs on the 2 cores and lives a few minutes: too short for C2 and the parallel collector to pay
    back the CPU their threads take from every other JVM. Options ``conf`` already has are kept."""
    keys = ["spark.executor.extraJavaOptions", "spark.yarn.am.extraJavaOptions"]
    if driver:
        keys.append("spark.driver.extraJavaOptions")
    merged = dict(conf)
    for key in keys:
        merged[key] = f"{SPARK_JVM_OPTIONS} {merged.get(key, '')}".strip()
    return merged


def serve_requests(workdir: Path, stop: threading.Event, handle: Callable[[dict], dict | None]) -> list[dict]:
    """Do what the application asks in ``workdir/requests`` (cluster_app.ask) with ``handle`` until
    ``stop``; return the requests handled (filled in as they come)."""
    handled: list[dict] = []

    def loop():
        requests = workdir / "requests"
        while not stop.is_set():
            for request in sorted(requests.glob("*.json")) if requests.is_dir() else []:
                done = request.with_suffix(".done")
                if done.exists():
                    continue
                ask = json.loads(request.read_text())
                result = handle(ask) or {}
                handled.append(ask)
                done.write_text(json.dumps({"done": ask["action"], **result}))
            stop.wait(0.1)  # a server's loop: the pace at which it looks for requests

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return handled


def pack_environment(wheel: Path, workdir: Path, testing_wheel: Path | None = None) -> Path:
    """A virtual environment with the package's wheel and its dependencies (pyspark left out: the
    nodes' Spark brings its own), packed by venv-pack into ``workdir/env.tar.gz``; with
    ``testing_wheel``, the test kit's wheel too (the cluster-mode driver runs the tests' helpers,
    which use it: the main wheel has no test kit). pip runs without
    the project's variables: with this checkout on PYTHONPATH it would find the package "already
    installed" (its egg-info) and pack an environment without it."""
    env_dir = workdir / "env"
    clean = {k: v for k, v in os.environ.items() if k not in PROJECT_ENV}
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True, timeout=120, env=clean)
    pip = [str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "--no-deps", str(wheel), *([str(testing_wheel)] if testing_wheel else [])],
                   check=True, timeout=300, env=clean)
    subprocess.run([*pip, "cryptography", "fastavro", "rich", "prometheus-client"], check=True, timeout=300, env=clean)
    check = subprocess.run([str(env_dir / "bin" / "python"), "-c", "import pyiceberg_crypto"], env=clean,
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, f"the packed environment lacks the package: {check.stderr}"
    archive = workdir / "env.tar.gz"
    subprocess.run([sys.executable, "-m", "venv_pack", "-p", str(env_dir), "-o", str(archive)], check=True,
                   timeout=300, capture_output=True)
    return archive
