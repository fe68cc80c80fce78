"""The network-namespace clusters (pyiceberg_crypto/testing/netns.py, .../yarn.py): one of each per
test run, started on first use and shared by the module's tests; and the packed virtual environment
both modules ship with ``--archives`` (packed once per test run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyiceberg_crypto.kms.keystore import Keystore
from pyiceberg_crypto.testing.netns import ClusterUnavailableError, NetnsCluster
from tests.cluster.apps import pack_environment


@pytest.fixture(scope="session")
def netns_cluster(tmp_path_factory):
    try:
        cluster = NetnsCluster.start(tmp_path_factory.mktemp("netns-cluster"))
    except ClusterUnavailableError as exc:
        pytest.skip(f"no network-namespace cluster here: {exc}")
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="session")
def yarn_cluster(tmp_path_factory):
    """A ResourceManager and two NodeManagers (Hadoop 3.4.2), each in its own namespace, and an
    edge node that submits applications."""
    from pyiceberg_crypto.testing.yarn import YarnCluster

    try:
        cluster = YarnCluster.start(tmp_path_factory.mktemp("yarn-cluster"))
    except ClusterUnavailableError as exc:
        pytest.skip(f"no YARN cluster in network namespaces here: {exc}")
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def keystore(tmp_path_factory) -> Path:
    """A keystore file on the shared file system (every node, and this test process, can read it)."""
    path = tmp_path_factory.mktemp("keys") / "keys.json"
    store = Keystore(path)
    store.create()
    store.add_key("orders-key")
    return path


@pytest.fixture(scope="session")
def packed_env(dist, tmp_path_factory) -> Path:
    """The package's wheel and its dependencies in a venv packed by venv-pack (``env.tar.gz``), for
    ``spark-submit --archives ENV#env``: the standalone verification job and YARN's cluster mode
    ship the same archive, so the cluster lane packs it once (a venv, pip and venv-pack: ~1-2 min
    on a loaded 2-core machine)."""
    return pack_environment(dist["wheel"], tmp_path_factory.mktemp("packed-env"), dist["testing_wheel"])
