"""The network-namespace cluster (tests/cluster/netns.py): one per test run, started on first use."""

from __future__ import annotations

import pytest

from tests.cluster.netns import ClusterUnavailable, NetnsCluster


@pytest.fixture(scope="session")
def netns_cluster(tmp_path_factory):
    try:
        cluster = NetnsCluster.start(tmp_path_factory.mktemp("netns-cluster"))
    except ClusterUnavailable as exc:
        pytest.skip(f"no network-namespace cluster here: {exc}")
    try:
        yield cluster
    finally:
        cluster.close()
