"""A YARN cluster made of Linux network namespaces (:mod:`.netns`): a ResourceManager and two
NodeManagers, each its own "host", and an edge node that submits applications (the driver's host
in client mode). Hadoop 3.4.2's daemons run from the jars ``make yarn-jars`` resolved into
``.cache/yarn`` (``$PYICEBERG_CRYPTO_YARN_JARS``) with a plain ``java`` (17) and generated
``yarn-site.xml`` / ``core-site.xml``; the file system is ``file:///``, shared by every node, as
on a cluster image with Spark installed (``spark.yarn.jars=local:...``: nothing uploaded per
application)::

    cluster = YarnCluster.start(workdir)              # needs root, `ip`, iptables, tcpdump, java
    try:
        conf = cluster.spark_conf("client")           # spark.master=yarn, addresses, staging, sizes
        result = cluster.run(cluster.edge, [spark_submit, *config.spark_conf_args(conf), "job.py"],
                             env=cluster.submit_env())
        cluster.kill_nodemanager(1)                   # a lost machine: its NodeManager and containers
        cluster.ensure_nodemanagers()                 # started again, registered
    finally:
        cluster.close()

By hand: ``python -m pyiceberg_crypto.testing yarn --directory DIR`` starts it and prints the
ResourceManager's address and the ``HADOOP_CONF_DIR`` to submit with (from the edge namespace).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from xml.sax.saxutils import escape

from pyiceberg_crypto.testing._jvm import java_command, java_executable, pyspark_jars_dir
from pyiceberg_crypto.testing._process import ServiceError
from pyiceberg_crypto.testing._wait import eventually
from pyiceberg_crypto.testing.netns import SUBNET, ClusterUnavailableError, Namespaces, Node, check_namespaces_possible

#: Where ``make yarn-jars`` puts the daemons' jars (``$PYICEBERG_CRYPTO_YARN_JARS`` overrides).
YARN_JARS_ENV = "PYICEBERG_CRYPTO_YARN_JARS"
RM_WEB_PORT = 8088
NODEMANAGER_MEMORY_MB = 3072
NODEMANAGER_VCORES = 2
RESOURCE_MANAGER = "org.apache.hadoop.yarn.server.resourcemanager.ResourceManager"
NODE_MANAGER = "org.apache.hadoop.yarn.server.nodemanager.NodeManager"
#: What Hadoop 3.4's daemons reach by reflection on Java 17 (Guice, Jersey, Netty).
_OPENS = ("java.base/java.lang", "java.base/java.lang.reflect", "java.base/java.io", "java.base/java.net",
          "java.base/java.nio", "java.base/java.util", "java.base/java.util.concurrent",
          "java.base/sun.nio.ch", "java.base/sun.net.util")


def yarn_jars_dir() -> Path:
    """Where ``make yarn-jars`` put the ResourceManager's and NodeManager's jars."""
    configured = os.environ.get(YARN_JARS_ENV)
    if configured:
        return Path(configured)
    return Path(__file__).resolve().parents[2] / ".cache" / "yarn"


def check_yarn_jars() -> Path:
    """The jar directory, or :class:`ClusterUnavailableError` saying how to get it."""
    directory = yarn_jars_dir()
    if not (directory / ".complete").is_file():
        raise ClusterUnavailableError(f"no YARN jars in {directory}: run `make yarn-jars` (Maven, once)")
    return directory


def site_xml(properties: dict[str, object]) -> str:
    """A Hadoop ``*-site.xml`` document with ``properties`` (in their order)."""
    rows = "".join(f"  <property><name>{escape(k)}</name><value>{escape(str(v))}</value></property>\n"
                   for k, v in properties.items())
    return f'<?xml version="1.0"?>\n<configuration>\n{rows}</configuration>\n'


LOG4J = """log4j.rootLogger=INFO,console
log4j.appender.console=org.apache.log4j.ConsoleAppender
log4j.appender.console.layout=org.apache.log4j.PatternLayout
log4j.appender.console.layout.ConversionPattern=%d{HH:mm:ss,SSS} %p %c{1}: %m%n
log4j.logger.org.apache.hadoop.util.NativeCodeLoader=ERROR
log4j.logger.org.eclipse.jetty=WARN
"""


class YarnCluster(Namespaces):
    """A ResourceManager, two NodeManagers and an edge node, each in its own namespace."""

    def __init__(self, workdir: Path, prefix: str, jars: Path):
        self.resource_manager = Node("rm", f"{prefix}-rm", f"{SUBNET}.2")
        self.nodemanagers = [Node("nm1", f"{prefix}-nm1", f"{SUBNET}.3"), Node("nm2", f"{prefix}-nm2", f"{SUBNET}.4")]
        self.edge = Node("edge", f"{prefix}-edge", f"{SUBNET}.5")
        super().__init__(workdir, prefix, [self.resource_manager, *self.nodemanagers, self.edge])
        self.jars = jars

    # --- lifecycle ---------------------------------------------------------------------------

    @classmethod
    def start(cls, workdir: Path, *, startup_timeout: float = 120) -> YarnCluster:
        """Make the namespaces, start the daemons and wait until both NodeManagers are RUNNING."""
        check_namespaces_possible()
        jars = check_yarn_jars()
        cluster = cls(Path(workdir).absolute(), cls.new_prefix(), jars)
        try:
            cluster._make_network()
            cluster._write_configuration()
            cluster._start_daemon(cluster.resource_manager)
            for node in cluster.nodemanagers:
                cluster._start_daemon(node)
            cluster.wait_for_nodemanagers(len(cluster.nodemanagers), startup_timeout)
        except BaseException:
            cluster.close()
            raise
        return cluster

    def conf_dir(self, node: Node) -> Path:
        return self.workdir / "conf" / node.name

    @property
    def client_conf_dir(self) -> Path:
        """``HADOOP_CONF_DIR`` for spark-submit (Spark ships it to the ApplicationMaster)."""
        return self.conf_dir(self.edge)

    @property
    def staging_dir(self) -> Path:
        return self.workdir / "staging"

    def _yarn_site(self, node: Node | None) -> dict[str, object]:
        site: dict[str, object] = {
            "yarn.resourcemanager.hostname": self.resource_manager.address,
            "yarn.resourcemanager.webapp.address": f"{self.resource_manager.address}:{RM_WEB_PORT}",
            "yarn.nodemanager.resource.memory-mb": NODEMANAGER_MEMORY_MB,
            "yarn.nodemanager.resource.cpu-vcores": NODEMANAGER_VCORES,
            "yarn.scheduler.minimum-allocation-mb": 128,
            "yarn.scheduler.maximum-allocation-mb": NODEMANAGER_MEMORY_MB,
            "yarn.nodemanager.vmem-check-enabled": "false",
            "yarn.nodemanager.pmem-check-enabled": "false",
            "yarn.nodemanager.container-executor.class":
                "org.apache.hadoop.yarn.server.nodemanager.DefaultContainerExecutor",
            "yarn.nodemanager.disk-health-checker.max-disk-utilization-per-disk-percentage": "99.5",
            # A killed NodeManager is noticed in seconds, not the default 10 minutes; an ApplicationMaster
            # has 2 minutes to register (a JVM with Spark's ~400 jars, on a busy machine).
            "yarn.nm.liveness-monitor.expiry-interval-ms": 15000,
            "yarn.am.liveness-monitor.expiry-interval-ms": 120000,
            "yarn.resourcemanager.nodemanagers.heartbeat-interval-ms": 500,
            "yarn.resourcemanager.am.max-attempts": 2,
            # One container per node per heartbeat: an application's executors spread over both nodes.
            "yarn.scheduler.capacity.per-node-heartbeat.multiple-assignments-enabled": "false",
            "yarn.log-aggregation-enable": "false",
        }
        if node in self.nodemanagers:
            home = self.workdir / node.name
            site.update({
                "yarn.nodemanager.hostname": node.address,
                "yarn.nodemanager.local-dirs": home / "local",
                "yarn.nodemanager.log-dirs": home / "logs",
                "yarn.nodemanager.delete.debug-delay-sec": 3600,  # containers' files kept for the tests
                "yarn.nodemanager.env-whitelist": "JAVA_HOME,PATH,LANG,TZ",
            })
        return site

    def _write_configuration(self) -> None:
        capacity = {
            "yarn.scheduler.capacity.root.queues": "default",
            "yarn.scheduler.capacity.root.default.capacity": 100,
            "yarn.scheduler.capacity.root.default.maximum-capacity": 100,
            "yarn.scheduler.capacity.maximum-am-resource-percent": 0.5,
        }
        for node in self.nodes:
            directory = self.conf_dir(node)
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "core-site.xml").write_text(site_xml({"fs.defaultFS": "file:///"}))
            (directory / "yarn-site.xml").write_text(site_xml(self._yarn_site(node)))
            (directory / "capacity-scheduler.xml").write_text(site_xml(capacity))
            (directory / "log4j.properties").write_text(LOG4J)
        self.staging_dir.mkdir(parents=True, exist_ok=True)

    def daemon_log(self, node: Node) -> Path:
        return self.workdir / node.name / "daemon.log"

    def _daemon_env(self) -> dict[str, str]:
        java_home = str(Path(java_executable()).resolve().parents[1])
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HADOOP_", "YARN_", "SPARK_"))}
        env["JAVA_HOME"] = java_home  # containers' {{JAVA_HOME}}/bin/java
        return env

    def _start_daemon(self, node: Node) -> None:
        is_rm = node is self.resource_manager
        command = java_command(
            RESOURCE_MANAGER if is_rm else NODE_MANAGER,
            classpath=[self.conf_dir(node), self.jars / "*"], heap="384m" if is_rm else "256m",
            options=[f"--add-opens={module}=ALL-UNNAMED" for module in _OPENS],
            system_properties={"hadoop.log.dir": self.workdir / node.name, "yarn.log.dir": self.workdir / node.name})
        self._start_logged(node, command, self._daemon_env(), self.daemon_log(node))

    def log_tail(self, node: Node, lines: int = 30) -> str:
        path = self.daemon_log(node)
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else "(no log)"

    # --- state, from the ResourceManager's REST API (asked from the edge namespace) ------------

    def rest(self, path: str, timeout: float = 30) -> dict:
        """``GET http://<rm>:8088/ws/v1/cluster/<path>`` as JSON."""
        url = f"http://{self.resource_manager.address}:{RM_WEB_PORT}/ws/v1/cluster/{path}"
        code = ("import sys, urllib.request; sys.stdout.write(urllib.request.urlopen("
                f"urllib.request.Request({url!r}, headers={{'Accept': 'application/json'}}), timeout=5).read().decode())")
        result = self.run(self.edge, [sys.executable, "-c", code], timeout=timeout)
        if result.returncode != 0:
            raise ServiceError(f"the ResourceManager's REST API did not answer {url}: {result.stderr.strip()[-500:]}")
        return json.loads(result.stdout)

    def running_nodemanagers(self) -> list[str]:
        """``host:port`` of every RUNNING NodeManager."""
        nodes = (self.rest("nodes").get("nodes") or {}).get("node") or []
        return sorted(n["id"] for n in nodes if n.get("state") == "RUNNING")

    def running_addresses(self) -> set[str]:
        return {node_id.rsplit(":", 1)[0] for node_id in self.running_nodemanagers()}

    def wait_for_nodemanagers(self, count: int, timeout: float = 120) -> None:
        """Wait until ``count`` NodeManagers are RUNNING; a daemon that exits ends the wait at once.
        Errors quote the daemons' logs."""
        def logs() -> str:
            tails = "\n".join(f"--- {n.name}\n{self.log_tail(n)}" for n in [self.resource_manager, *self.nodemanagers])
            return f"{count} RUNNING NodeManagers at the ResourceManager:\n{tails}"

        def enough() -> bool:
            for node in [self.resource_manager, *self.nodemanagers]:
                if node.name in self._daemons and not self.daemon_running(node):
                    raise ServiceError(f"the {node.name} daemon exited while starting:\n{self.log_tail(node)}")
            try:
                return len(self.running_nodemanagers()) >= count
            except ServiceError:  # the ResourceManager's web server is not up yet
                return False

        eventually(enough, timeout, interval=1, retry_on=(ValueError,), message=logs)

    def application(self, app_id: str) -> dict:
        return self.rest(f"apps/{app_id}")["app"]

    def application_master_hosts(self) -> set[str]:
        """Addresses of the NodeManagers that run a RUNNING application's ApplicationMaster."""
        apps = (self.rest("apps?states=RUNNING").get("apps") or {}).get("app") or []
        return {app["amHostHttpAddress"].rsplit(":", 1)[0] for app in apps if app.get("amHostHttpAddress")}

    def app_attempts(self, app_id: str) -> list[dict]:
        return (self.rest(f"apps/{app_id}/appattempts").get("appAttempts") or {}).get("appAttempt") or []

    # --- faults --------------------------------------------------------------------------------

    def kill_nodemanager(self, index: int) -> list[int]:
        """SIGKILL NodeManager ``index`` and every container it runs: a lost machine."""
        return self.kill_node(self.nodemanagers[index])

    def ensure_nodemanagers(self, timeout: float = 120) -> None:
        """Start again any NodeManager that is no longer running; wait until all are RUNNING."""
        restarted = [node for node in self.nodemanagers if not self.daemon_running(node)]
        for node in restarted:
            self._start_daemon(node)
        if restarted:
            eventually(lambda: {n.address for n in self.nodemanagers} <= self.running_addresses(), timeout,
                       interval=1, retry_on=(ValueError,),
                       message=lambda: "the restarted NodeManagers to be RUNNING:\n" + "\n".join(
                           f"--- {n.name}\n{self.log_tail(n)}" for n in restarted))

    # --- submitting applications -------------------------------------------------------------

    def submit_env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """Environment of ``spark-submit`` (or a PySpark driver) on the edge node."""
        import pyspark

        env = {k: v for k, v in os.environ.items() if not k.startswith(("HADOOP_", "YARN_", "SPARK_"))}
        env.update({
            "HADOOP_CONF_DIR": str(self.client_conf_dir),
            "SPARK_HOME": str(Path(pyspark.__file__).parent),
            "SPARK_LOCAL_IP": self.edge.address,
            "PYSPARK_ARCHIVES_PATH": f"local:{self.pyspark_python_dir()}",
        })
        env.update(extra or {})
        return env

    def pyspark_python_dir(self) -> Path:
        """A directory with pyspark's and py4j's Python sources (links to the installed ones): what
        ``$SPARK_HOME/python`` is on a Spark installation, put on containers' PYTHONPATH."""
        import py4j
        import pyspark

        directory = self.workdir / "spark-python"
        directory.mkdir(parents=True, exist_ok=True)
        for module in (pyspark, py4j):
            link = directory / module.__name__
            if not link.exists():
                link.symlink_to(Path(module.__file__).parent, target_is_directory=True)
        return directory

    def spark_conf(self, deploy_mode: str = "client") -> dict[str, str]:
        """Spark settings of an application on this cluster (``deploy_mode`` client or cluster)."""
        conf = {
            "spark.master": "yarn",
            "spark.submit.deployMode": deploy_mode,
            "spark.yarn.jars": f"local:{pyspark_jars_dir()}/*",  # Spark installed on every node
            "spark.yarn.stagingDir": self.staging_dir.as_uri(),
            "spark.yarn.maxAppAttempts": "1",
            "spark.yarn.am.memory": "384m",
            "spark.driver.memory": "768m",
            "spark.executor.instances": "2",
            "spark.executor.cores": "1",
            "spark.executor.memory": "640m",
            "spark.sql.shuffle.partitions": "2",
            "spark.ui.enabled": "false",
            "spark.authenticate": "true",  # YARN hands the application its secret
            "spark.network.crypto.enabled": "true",
        }
        if deploy_mode == "client":
            conf.update({"spark.driver.host": self.edge.address, "spark.driver.bindAddress": self.edge.address})
        return conf

    def container_logs(self, app_id: str) -> dict[str, Path]:
        """Every container directory of ``app_id`` in the NodeManagers' log dirs, by container id."""
        found = {}
        for node in self.nodemanagers:
            for directory in sorted((self.workdir / node.name / "logs" / app_id).glob("container_*")):
                found[directory.name] = directory
        return found

    def describe(self) -> str:
        return json.dumps({
            **{n.name: {"netns": n.netns, "address": n.address} for n in self.nodes},
            "resourcemanager": f"http://{self.resource_manager.address}:{RM_WEB_PORT}",
            "HADOOP_CONF_DIR": str(self.client_conf_dir),
        })
