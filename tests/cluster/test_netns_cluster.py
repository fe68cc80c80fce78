"""The cluster in a box itself: nodes that share no loopback, reachable from each other only over
the bridge, workers registered, firewall rules and captures that do what the other tests rely on."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from pyiceberg_crypto.testing.netns import SUBNET, ClusterUnavailableError, NetnsCluster, read_pcap_payloads
from tests.testkit import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

LISTENER = """
import socket, sys
server = socket.socket(); server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # the previous test's
server.bind((sys.argv[1], int(sys.argv[2]))); server.listen(8)  # listener left TIME_WAIT connections on the port
server.settimeout(30)
open(sys.argv[3] + ".ready", "w").close()
while True:
    try:
        connection, _ = server.accept()
    except socket.timeout:
        break
    connection.settimeout(5)
    with open(sys.argv[3], "ab") as out:
        try:
            out.write(connection.recv(1024) + b"\\n")
        except socket.timeout:
            pass
    connection.close()
"""

SEND = """
import socket, sys
try:
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3) as s:
        s.sendall(sys.argv[3].encode())
    print("sent")
except OSError as exc:
    print("failed", type(exc).__name__)
"""


@pytest.fixture
def listener(netns_cluster, tmp_path):
    """A TCP listener on the driver's address, port 9999, appending what it receives to a file (one
    connection at a time, in the order they came)."""
    received = tmp_path / "received.txt"
    received.write_bytes(b"")
    process = netns_cluster.popen(netns_cluster.driver, [sys.executable, "-c", LISTENER, netns_cluster.driver.address,
                                                         "9999", str(received)])

    def listening() -> bool:
        if process.poll() is not None:
            pytest.fail("the listener did not start (see the captured stderr)")
        return (tmp_path / "received.txt.ready").exists()

    eventually(listening, 30, message="the listener on the driver's address")
    yield received
    process.kill()
    process.wait(10)


def send(cluster, node, marker: str) -> str:
    return cluster.run(node, [sys.executable, "-c", SEND, cluster.driver.address, "9999", marker], timeout=30).stdout.strip()


def test_workers_registered_and_every_node_has_its_own_address(netns_cluster):
    assert netns_cluster.alive_workers() == 2
    for node in netns_cluster.nodes:
        shown = netns_cluster.run(node, ["ip", "-br", "addr"], timeout=10).stdout
        assert f"{node.address}/24" in shown and "127.0.0.1" in shown  # its own loopback
    assert f"{SUBNET}." not in NetnsCluster.root_namespace_addresses()  # the host is not on the bridge


def test_only_nodes_on_the_bridge_reach_each_other(netns_cluster, listener):
    from_worker, from_host = f"w1-{uuid.uuid4()}", f"host-{uuid.uuid4()}"
    assert send(netns_cluster, netns_cluster.workers[0], from_worker) == "sent"
    subprocess.run([sys.executable, "-c", SEND, netns_cluster.driver.address, "9999", from_host], timeout=30,
                   capture_output=True)
    # The listener serves connections in order: once a later marker is written, the host's would be too.
    after = f"after-{uuid.uuid4()}"
    assert send(netns_cluster, netns_cluster.workers[0], after) == "sent"
    eventually(lambda: after in listener.read_text(), message=lambda: f"{after} received: {listener.read_text()!r}")
    received = listener.read_text()
    assert from_worker in received and from_host not in received


def test_a_blocked_port_drops_one_worker_only_until_unblocked(netns_cluster, listener):
    w1, w2 = netns_cluster.workers
    netns_cluster.block_port(w1, 9999)
    try:
        assert send(netns_cluster, w1, "blocked") == "failed TimeoutError"
        assert send(netns_cluster, w2, "other-worker") == "sent"
    finally:
        netns_cluster.unblock_port(w1, 9999)
    assert send(netns_cluster, w1, "unblocked") == "sent"
    eventually(lambda: "unblocked" in listener.read_text(), message="the unblocked worker's marker received")
    assert listener.read_text().splitlines() == ["other-worker", "unblocked"]


def test_the_capture_sees_what_crosses_the_bridge(netns_cluster, listener, tmp_path):
    marker = f"captured-{uuid.uuid4()}"
    with netns_cluster.capture(tmp_path / "smoke.pcap"):
        assert send(netns_cluster, netns_cluster.workers[1], marker) == "sent"
        eventually(lambda: any(marker.encode() in p[4] for p in read_pcap_payloads(tmp_path / "smoke.pcap")),
                   message="the marker in the capture")
    packets = read_pcap_payloads(tmp_path / "smoke.pcap")
    assert [(p[0], p[2], p[3]) for p in packets if marker.encode() in p[4]] == [
        (netns_cluster.workers[1].address, netns_cluster.driver.address, 9999)]


def test_close_ends_every_process_and_deletes_every_namespace(tmp_path):
    try:
        cluster = NetnsCluster.start(tmp_path, startup_timeout=90)
    except ClusterUnavailableError as exc:
        pytest.skip(str(exc))
    names = [cluster.bridge_netns, *(n.netns for n in cluster.nodes)]
    pids = [p.pid for p in cluster._processes]
    cluster.close()
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not [name for name in names if name in listed]
    alive = [pid for pid in pids if subprocess.run(["kill", "-0", str(pid)], capture_output=True).returncode == 0]
    assert not alive
