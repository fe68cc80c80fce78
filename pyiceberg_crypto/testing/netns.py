"""Clusters made of Linux network namespaces: each node a "host" with its own loopback and address,
joined by a bridge that lives in a namespace of its own (the root namespace, where the tests run, has
no route to them). The file system is shared, as on a cluster with a shared warehouse (NFS, an
object store) and Spark installed on every machine's image.

:class:`Namespaces` is the network and the bookkeeping (nodes, processes started in them, firewall
rules, captures, ``close()``); :class:`NetnsCluster` is a Spark standalone cluster on it (a master,
two workers and a driver), :class:`pyiceberg_crypto.testing.yarn.YarnCluster` a YARN one.

    cluster = NetnsCluster.start(workdir)            # needs root and iproute2's `ip`
    try:
        result = cluster.run(cluster.driver, [sys.executable, "app.py"], env=cluster.driver_env())
        cluster.kill_worker(0)                       # a machine failure: its Worker and executors
        cluster.block_port(cluster.workers[1], 4242) # a firewall rule in one node
        with cluster.capture(workdir / "bridge.pcap"):
            ...
    finally:
        cluster.close()                              # every process ended by PID, namespaces deleted

Spark's RPC between every node is authenticated and encrypted (``spark.authenticate``,
``spark.network.crypto.enabled``, a secret per cluster), as on a production cluster: the capture
tests then show what the package itself puts on the wire.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from pyiceberg_crypto.testing._process import ServiceError
from pyiceberg_crypto.testing._wait import eventually

SUBNET = "10.77.0"
MASTER_PORT = 7077
MASTER_UI_PORT = 8080


class ClusterUnavailableError(ServiceError):
    """Namespaces cannot be made here (not root, no `ip`, a kernel without them): tests skip."""


@dataclass(frozen=True)
class Node:
    name: str  # "master", "w1", "w2", "driver"; "rm", "nm1", "nm2" on YARN
    netns: str
    address: str


def check_namespaces_possible() -> None:
    """Raise :class:`ClusterUnavailableError` saying why this machine cannot host the cluster."""
    if os.geteuid() != 0:
        raise ClusterUnavailableError("network namespaces need root (ip netns add)")
    for tool in ("ip", "iptables", "tcpdump", "java"):
        if shutil.which(tool) is None:
            raise ClusterUnavailableError(f"`{tool}` is not installed (make test installs iptables and tcpdump as root)")
    probe = f"pic{os.getpid()}-probe"
    result = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if result.returncode != 0:
        raise ClusterUnavailableError(f"`ip netns add` failed: {result.stderr.strip()}")
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)


def _ip(*args: str, netns: str | None = None) -> None:
    command = ["ip", *(["-n", netns] if netns else []), *args]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise ServiceError(f"{' '.join(command)} failed: {result.stderr.strip()}")


class Namespaces:
    """The namespaces of ``nodes`` on one bridge, the processes started in them, and the operations
    tests need on them (firewall rules, captures, killing a node). Subclasses start the daemons."""

    def __init__(self, workdir: Path, prefix: str, nodes: list[Node]):
        self.workdir = workdir
        self.prefix = prefix
        self.bridge_netns = f"{prefix}-br"
        self.bridge_interface = "br0"
        self._nodes = nodes
        self._daemons: dict[str, subprocess.Popen] = {}
        self._processes: list[subprocess.Popen] = []
        self._namespaces: list[str] = []

    @staticmethod
    def new_prefix() -> str:
        """A prefix for namespace names no other run uses (``pic<pid>-<random>``)."""
        return f"pic{os.getpid()}-{secrets.token_hex(2)}"

    @property
    def nodes(self) -> list[Node]:
        return list(self._nodes)

    def _make_network(self) -> None:
        _ip("netns", "add", self.bridge_netns)
        self._namespaces.append(self.bridge_netns)
        _ip("link", "add", self.bridge_interface, "type", "bridge", netns=self.bridge_netns)
        _ip("link", "set", self.bridge_interface, "up", netns=self.bridge_netns)
        for node in self.nodes:
            _ip("netns", "add", node.netns)
            self._namespaces.append(node.netns)
            peer = f"v-{node.name}"
            _ip("link", "add", "eth0", "netns", node.netns, "type", "veth", "peer", "name", peer,
                "netns", self.bridge_netns)
            _ip("link", "set", peer, "master", self.bridge_interface, netns=self.bridge_netns)
            _ip("link", "set", peer, "up", netns=self.bridge_netns)
            _ip("addr", "add", f"{node.address}/24", "dev", "eth0", netns=node.netns)
            _ip("link", "set", "eth0", "up", netns=node.netns)
            _ip("link", "set", "lo", "up", netns=node.netns)

    def close(self) -> None:
        """End every process (by PID, then whatever is left in the namespaces) and delete them."""
        for process in self._processes:
            _terminate(process)
        for netns in self._namespaces:
            _kill_namespace_processes(netns)
        for netns in reversed(self._namespaces):
            subprocess.run(["ip", "netns", "del", netns], capture_output=True)
        self._namespaces.clear()

    # --- running things on nodes -------------------------------------------------------------

    def popen(self, node: Node, argv: list[str], **kwargs) -> subprocess.Popen:
        """Start ``argv`` in ``node``'s namespace (tracked: ended by :meth:`close`)."""
        process = subprocess.Popen(["ip", "netns", "exec", node.netns, *argv], start_new_session=True, **kwargs)
        self._processes.append(process)
        return process

    def run(self, node: Node, argv: list[str], *, env=None, cwd=None, timeout: float = 600) -> subprocess.CompletedProcess:
        """Run ``argv`` in ``node``'s namespace to completion (killed with its group on timeout)."""
        process = self.popen(node, argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _terminate(process)
            stdout, stderr = process.communicate()
            stderr += f"\n[killed after {timeout} s]"
        return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)

    def _start_logged(self, node: Node, argv: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen:
        """Start ``node``'s daemon, its output appended to ``log_path`` (restarted by ``ensure_*``)."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            process = self.popen(node, argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        self._daemons[node.name] = process
        return process

    def daemon_running(self, node: Node) -> bool:
        process = self._daemons.get(node.name)
        return process is not None and process.poll() is None

    def kill_node(self, node: Node) -> list[int]:
        """SIGKILL every process in ``node``'s namespace (its daemon and its children): a lost machine."""
        pids = _namespace_pids(node.netns)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        process = self._daemons.get(node.name)
        if process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(10)
        return pids

    # --- faults and observation --------------------------------------------------------------

    def block_port(self, node: Node, port: int) -> None:
        """Drop TCP from ``node`` to destination ``port`` (an iptables rule in its namespace)."""
        subprocess.run(["ip", "netns", "exec", node.netns, "iptables", "-A", "OUTPUT", "-p", "tcp",
                        "--dport", str(port), "-j", "DROP"], check=True, capture_output=True)

    def unblock_port(self, node: Node, port: int) -> None:
        subprocess.run(["ip", "netns", "exec", node.netns, "iptables", "-D", "OUTPUT", "-p", "tcp",
                        "--dport", str(port), "-j", "DROP"], check=True, capture_output=True)

    @contextlib.contextmanager
    def capture(self, path: Path, bpf_filter: str = "tcp"):
        """tcpdump on the bridge (every packet between nodes) into ``path`` while the block runs."""
        log = open(Path(path).with_suffix(".log"), "wb")
        process = self.popen(Node("bridge", self.bridge_netns, ""),
                             ["tcpdump", "-i", self.bridge_interface, "-U", "-s", "0", "-w", str(path), bpf_filter],
                             stdout=log, stderr=subprocess.STDOUT)
        try:
            def listening() -> bool:
                if process.poll() is not None:
                    raise ServiceError(f"tcpdump exited: {Path(log.name).read_text(errors='replace')}")
                return b"listening on" in Path(log.name).read_bytes()

            eventually(listening, 10, retry_on=(OSError,), message=lambda: f"tcpdump to listen on the bridge:\n"
                       f"{Path(log.name).read_text(errors='replace')}")
            yield path
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(10)
            _terminate(process)
            log.close()

    @staticmethod
    def root_namespace_addresses() -> str:
        """Every address of the root namespace (where the tests run), for "not on the bridge" checks."""
        return subprocess.run(["ip", "-br", "addr"], capture_output=True, text=True).stdout

    def describe(self) -> str:
        return json.dumps({n.name: {"netns": n.netns, "address": n.address} for n in self.nodes})


class NetnsCluster(Namespaces):
    """A Spark standalone cluster: a master, two workers and a driver, each in its own namespace."""

    def __init__(self, workdir: Path, prefix: str):
        self.master = Node("master", f"{prefix}-master", f"{SUBNET}.2")
        self.workers = [Node("w1", f"{prefix}-w1", f"{SUBNET}.3"), Node("w2", f"{prefix}-w2", f"{SUBNET}.4")]
        self.driver = Node("driver", f"{prefix}-driver", f"{SUBNET}.5")
        super().__init__(workdir, prefix, [self.master, *self.workers, self.driver])
        self.auth_secret = secrets.token_hex(32)

    # --- lifecycle ---------------------------------------------------------------------------

    @classmethod
    def start(cls, workdir: Path, *, startup_timeout: float = 90) -> NetnsCluster:
        check_namespaces_possible()
        cluster = cls(Path(workdir), cls.new_prefix())
        try:
            cluster._make_network()
            cluster._start_daemon(cluster.master)
            for worker in cluster.workers:
                cluster._start_daemon(worker)
            cluster.wait_for_workers(2, startup_timeout)
        except BaseException:
            cluster.close()
            raise
        return cluster

    @property
    def master_url(self) -> str:
        return f"spark://{self.master.address}:{MASTER_PORT}"

    def _spark_home(self) -> Path:
        import pyspark

        return Path(pyspark.__file__).parent

    def node_env(self, node: Node) -> dict[str, str]:
        """Environment of a Spark process on ``node`` (its own address for every bind)."""
        home = self.workdir / node.name
        for sub in ("work", "logs", "local"):
            (home / sub).mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env.update({
            "SPARK_HOME": str(self._spark_home()),
            "SPARK_LOCAL_IP": node.address,
            "SPARK_LOCAL_HOSTNAME": node.address,
            "SPARK_WORKER_DIR": str(home / "work"),
            "SPARK_LOG_DIR": str(home / "logs"),
            "SPARK_LOCAL_DIRS": str(home / "local"),
            "PYSPARK_PYTHON": sys.executable,
        })
        return env

    def _daemon_options(self) -> str:
        return (f"-Dspark.authenticate=true -Dspark.authenticate.secret={self.auth_secret} "
                "-Dspark.network.crypto.enabled=true")

    def _start_daemon(self, node: Node) -> None:
        spark_class = str(self._spark_home() / "bin" / "spark-class")
        if node is self.master:
            argv = [spark_class, "org.apache.spark.deploy.master.Master", "--host", node.address,
                    "--port", str(MASTER_PORT), "--webui-port", str(MASTER_UI_PORT)]
        else:
            argv = [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", node.address, "--cores", "1",
                    "--memory", "1g", "--webui-port", "8081", self.master_url]
        env = self.node_env(node)
        env["SPARK_DAEMON_JAVA_OPTS"] = self._daemon_options()
        self._start_logged(node, argv, env, self.workdir / node.name / "logs" / "daemon.log")

    def wait_for_workers(self, count: int, timeout: float = 90) -> None:
        """Wait until the master lists ``count`` ALIVE workers (a clear error with the node logs)."""
        def logs() -> str:
            tails = "\n".join(f"--- {node.name}\n{self.log_tail(node)}" for node in [self.master, *self.workers])
            return f"{count} ALIVE workers in the master's status (-1: no answer):\n{tails}"

        eventually(lambda: self.alive_workers() >= count, timeout, interval=1, message=logs)

    def alive_workers(self) -> int:
        """ALIVE workers in the master's JSON status (asked from the driver's namespace)."""
        code = ("import json, urllib.request; d = json.load(urllib.request.urlopen("
                f"'http://{self.master.address}:{MASTER_UI_PORT}/json/', timeout=3)); "
                "print(sum(w['state'] == 'ALIVE' for w in d['workers']))")
        result = self.run(self.driver, [sys.executable, "-c", code], timeout=20)
        return int(result.stdout.strip()) if result.returncode == 0 and result.stdout.strip() else -1

    def log_tail(self, node: Node, lines: int = 30) -> str:
        path = self.workdir / node.name / "logs" / "daemon.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else "(no log)"

    def ensure_workers(self) -> None:
        """Restart any worker that is no longer running (after :meth:`kill_worker`)."""
        restarted = False
        for worker in self.workers:
            if not self.daemon_running(worker):
                self._start_daemon(worker)
                restarted = True
        if restarted:
            self.wait_for_workers(len(self.workers))

    def driver_env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """Environment of a PySpark driver process in the driver's namespace."""
        env = self.node_env(self.driver)
        env.update(extra or {})
        return env

    def driver_conf(self) -> dict[str, str]:
        """Spark settings of a driver in the driver's namespace on this cluster."""
        return {
            "spark.master": self.master_url,
            "spark.driver.host": self.driver.address,
            "spark.driver.bindAddress": self.driver.address,
            "spark.ui.enabled": "false",
            "spark.executor.cores": "1",
            "spark.executor.memory": "768m",
            "spark.cores.max": "2",
            "spark.sql.shuffle.partitions": "2",
            "spark.authenticate": "true",
            "spark.authenticate.secret": self.auth_secret,
            "spark.network.crypto.enabled": "true",
        }

    # --- faults and observation --------------------------------------------------------------

    def kill_worker(self, index: int) -> list[int]:
        """SIGKILL every process of worker ``index`` (its Worker and executor JVMs): a lost machine."""
        return self.kill_node(self.workers[index])


def _namespace_pids(netns: str) -> list[int]:
    result = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True)
    return [int(pid) for pid in result.stdout.split()]


def _kill_namespace_processes(netns: str) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = _namespace_pids(netns)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        with contextlib.suppress(AssertionError):  # still there after SIGTERM: SIGKILL next
            eventually(lambda: not _namespace_pids(netns), 5, interval=0.2, message=f"the processes in {netns} to end")


def _terminate(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(5)
            return
        except subprocess.TimeoutExpired:
            continue


def read_pcap_payloads(path: Path) -> list[tuple[str, int, str, int, bytes]]:
    """TCP payloads of a classic libpcap file (Ethernet, IPv4): ``(src, sport, dst, dport, payload)``."""
    data = Path(path).read_bytes()
    if len(data) < 24:
        return []
    magic = data[:4]
    endian = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    packets, offset = [], 24
    while offset + 16 <= len(data):
        _, _, captured, _ = struct.unpack(endian + "IIII", data[offset:offset + 16])
        frame = data[offset + 16:offset + 16 + captured]
        offset += 16 + captured
        if len(frame) < 34 or frame[12:14] != b"\x08\x00":
            continue
        ip = frame[14:]
        header_length = (ip[0] & 0x0F) * 4
        total_length = struct.unpack(">H", ip[2:4])[0]
        if ip[9] != 6:
            continue
        tcp = ip[header_length:total_length]
        if len(tcp) < 20:
            continue
        sport, dport = struct.unpack(">HH", tcp[:4])
        payload = tcp[(tcp[12] >> 4) * 4:]
        if payload:
            packets.append((socket.inet_ntoa(ip[12:16]), sport, socket.inet_ntoa(ip[16:20]), dport, payload))
    return packets
