"""An Apache Kafka broker on 127.0.0.1: one KRaft node (broker and controller in one JVM), run with a
plain ``java`` command from Kafka's Maven artifacts, its log segments in a directory.

For tests, demos and trying a stream by hand, without Docker or a Kafka download::

    from pyiceberg_crypto.testing.kafka import KafkaBroker

    with KafkaBroker("/tmp/kafka") as kafka:                 # formatted, started and ready
        (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
              .option("subscribe", "events") ...)
    # stopped here; the topics stay in /tmp/kafka/data for the next start

Jars: Kafka :data:`~pyiceberg_crypto.testing.jars.KAFKA_VERSION` and its dependencies, each pinned by
SHA-256 in :mod:`pyiceberg_crypto.jars` and downloaded once into
:func:`~pyiceberg_crypto.testing.jars.kafka_broker_dir` (offline: ``python -m pyiceberg_crypto.testing jars DIR
--kafka-broker`` and ``PYICEBERG_CRYPTO_JARS=DIR``). Kafka 4 needs Java 17+.

The first start formats the storage (``kafka-storage format``: ``kafka.tools.StorageTool`` with a
new cluster id, a second short JVM); later starts reuse it and the ports the first start got, so
clients keep their bootstrap address. Both listeners (clients and the controller) bind 127.0.0.1
only and have no authentication: keep it a local test broker. Topics are created when first
produced to (``auto.create.topics.enable``), with ``partitions`` partitions. The log is
``<directory>/kafka-broker.log``.
"""

from __future__ import annotations

import base64
import re
import subprocess
import uuid
from collections.abc import Sequence
from pathlib import Path

from pyiceberg_crypto.testing import jars as testing_jars
from pyiceberg_crypto.testing._process import LOOPBACK, ServiceError, ServiceProcess, port_open
from pyiceberg_crypto.testing.ports import reserve_port
from pyiceberg_crypto.testing._jvm import java_command

_STARTED = re.compile(rb"Kafka Server started")
NODE_ID = 1

LOG4J2_PROPERTIES = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = OUT
logger.raft_server.name = kafka.server.KafkaRaftServer
logger.raft_server.level = INFO
"""


class KafkaBroker(ServiceProcess):
    """A single-node KRaft Kafka cluster in its own JVM, bound to ``host`` (loopback by default).

    Args:
        directory: holds ``server.properties``, the log segments (``data/``) and the process log.
        host: address both listeners bind; keep 127.0.0.1 (no authentication).
        port: the client listener's TCP port, 0 for a free one (see :attr:`bootstrap_servers`).
        controller_port: the KRaft controller's port, 0 for a free one.
        partitions: partitions of a topic created on first use.
        heap: JVM maximum heap (``-Xmx``).
        jars_dir: directory of the broker's jars (default :func:`~pyiceberg_crypto.testing.jars.kafka_broker_dir`).
        startup_timeout: seconds to wait for "Kafka Server started" (about 15-20 s on a busy 2-vCPU machine).
    """

    name = "Kafka broker"

    def __init__(
        self,
        directory: str | Path,
        *,
        host: str = LOOPBACK,
        port: int = 0,
        controller_port: int = 0,
        partitions: int = 1,
        heap: str = "384m",
        jars_dir: str | Path | None = None,
        startup_timeout: float = 180.0,
    ) -> None:
        super().__init__(directory, startup_timeout=startup_timeout)
        self.host = host
        self.port = port
        self.controller_port = controller_port
        self._picked: dict[str, bool] = {}  # by attribute: picked by this start, not the caller's
        self.partitions = partitions
        self.heap = heap
        self.jars_dir = Path(jars_dir) if jars_dir is not None else None
        self._classpath: list[Path] = []

    @property
    def data_dir(self) -> Path:
        """The broker's ``log.dirs`` (topics, and the KRaft metadata log)."""
        return self.directory / "data"

    @property
    def properties_path(self) -> Path:
        return self.directory / "server.properties"

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` for ``kafka.bootstrap.servers``."""
        if not self.port:
            raise ServiceError("the Kafka broker has no port yet: start() it first")
        return f"{self.host}:{self.port}"

    def server_properties(self) -> dict[str, str]:
        """The broker's configuration (no secrets: the listeners are PLAINTEXT on loopback)."""
        return {
            "process.roles": "broker,controller",
            "node.id": str(NODE_ID),
            "controller.quorum.voters": f"{NODE_ID}@{self.host}:{self.controller_port}",
            "listeners": f"PLAINTEXT://{self.host}:{self.port},CONTROLLER://{self.host}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            "num.partitions": str(self.partitions),
            "auto.create.topics.enable": "true",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
        }

    def start(self) -> "KafkaBroker":
        self._classpath = testing_jars.kafka_broker_jars(testing_jars.kafka_broker_dir(self.jars_dir))
        previous = self._previous_ports()
        self._picked = {name: not getattr(self, name) and not previous.get(listener)
                        for name, listener in (("port", "PLAINTEXT"), ("controller_port", "CONTROLLER"))}
        self.port = self.port or previous.get("PLAINTEXT") or reserve_port(self.host)
        self.controller_port = self.controller_port or previous.get("CONTROLLER") or reserve_port(self.host)
        self._write_properties()
        (self.directory / "log4j2.properties").write_text(LOG4J2_PROPERTIES)
        if not (self.data_dir / "meta.properties").is_file():
            self._format_storage()
        super().start()
        return self

    def _write_properties(self) -> None:
        self.properties_path.write_text("".join(f"{k}={v}\n" for k, v in self.server_properties().items()))

    def _pick_other_ports(self) -> bool:
        """The ports this start picked itself (not the caller's, not a restart's) picked again."""
        picked = [name for name, was_picked in self._picked.items() if was_picked]
        for name in picked:
            setattr(self, name, reserve_port(self.host))
        if picked:
            self._write_properties()
        return bool(picked)

    def _previous_ports(self) -> dict[str, int]:
        """The ports of the last start in this directory (its ``server.properties``), by listener."""
        try:
            text = self.properties_path.read_text()
        except OSError:
            return {}
        found = re.search(r"^listeners=(.*)$", text, re.M)
        return {name: int(port) for name, port in re.findall(r"(\w+)://[^,]*:(\d+)", found.group(1))} if found else {}

    def _java(self, main_class: str, *args: str) -> list[str]:
        # C1 only, as the other servers: in tests/streaming/test_kafka_crash.py the broker took 9.3
        # CPU-s with it and 12.9 with C2 (a 40-event topic; a loaded 2-core machine).
        return java_command(
            main_class, *args,
            classpath=self._classpath,
            heap=self.heap,
            system_properties={"java.awt.headless": "true",
                               "log4j2.configurationFile": str(self.directory / "log4j2.properties")},
        )

    def _format_storage(self) -> None:
        """``kafka-storage format``: write ``meta.properties`` and the bootstrap metadata."""
        cluster_id = "-"
        while cluster_id.startswith("-"):  # Kafka's argument parser takes "-..." for an option (its own
            # Uuid.randomUuid() draws again for the same reason); 1 in 64 ids did, failing the format
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        command = self._java("kafka.tools.StorageTool", "format", "-t", cluster_id,
                             "-c", str(self.properties_path), "--ignore-formatted")
        with open(self.log_path, "ab") as log:
            log.write(b"--- formatting the storage (kafka.tools.StorageTool format)\n")
            log.flush()
            done = subprocess.run(command, cwd=self.directory, stdin=subprocess.DEVNULL, stdout=log,
                                  stderr=subprocess.STDOUT, timeout=self.startup_timeout)
        if done.returncode != 0:
            raise ServiceError(f"formatting the Kafka storage in {self.data_dir} failed "
                               f"(status {done.returncode}); {self._log_tail()}")

    def _command(self) -> Sequence[str]:
        return self._java("kafka.Kafka", str(self.properties_path))

    def _is_ready(self) -> bool:
        """This start logged "Kafka Server started" and the client port accepts connections."""
        return bool(_STARTED.search(self._log_since_start())) and port_open(self.host, self.port)

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        where = f"{self.host}:{self.port}" if self.port else self.host
        return f"KafkaBroker({where!r}, directory='{self.directory}', {state})"
