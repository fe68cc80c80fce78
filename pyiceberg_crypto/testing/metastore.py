"""A standalone Hive metastore (thrift) process on 127.0.0.1, with its Derby database in a directory.

Several Spark applications can share it (the embedded Derby default allows one JVM), which is what
concurrent writers from separate applications need::

    from pyiceberg_crypto import config
    from pyiceberg_crypto.testing.metastore import StandaloneMetastore

    with StandaloneMetastore("/tmp/hms") as metastore:           # started and ready
        settings = config.spark_settings("lake", warehouse="/data/wh", metastore_uri=metastore.uri)
        ...
    # stopped here; the database stays in /tmp/hms/metastore_db for the next start

It runs the Hive 2.3.10 metastore classes that ship with pyspark 4.1, through
``io.pyicebergcrypto.testing.LoopbackMetastore`` (in the test kit jar), which binds the socket to
``host`` (127.0.0.1 by default). Port 0 picks a port reserved for this process
(:func:`~pyiceberg_crypto.testing.ports.reserve_port`), taken again on a restart. Commits use the
metastore's atomic swap of ``metadata_location`` (HIVE-26882), not the HIVE_LOCKS lock; object-store
locations are only recorded. The log is ``<directory>/hive-metastore.log``.

Why a launcher, and what the metastore does with ``s3://`` locations: docs/how-to/services.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from pyiceberg_crypto.testing._jvm import java_command, pyspark_jars_dir
from pyiceberg_crypto.testing.ports import reserve_port
from pyiceberg_crypto.testing._process import LOOPBACK, ServiceError, ServiceProcess
from pyiceberg_crypto.testing.jars import testing_jar

LAUNCHER_CLASS = "io.pyicebergcrypto.testing.LoopbackMetastore"
LOCATION_ONLY_FS = "io.pyicebergcrypto.testing.LocationOnlyFileSystem"


class StandaloneMetastore(ServiceProcess):
    """A Hive metastore thrift server in its own JVM, bound to ``host`` (loopback by default).

    Args:
        directory: holds the Derby database (``metastore_db``), ``derby.log`` and the process log.
        host: address to bind; keep 127.0.0.1 unless other machines must reach it (it has no auth).
        port: TCP port, 0 for a free one (known after :meth:`start`, see :attr:`uri`).
        hadoop_conf: extra Hive / Hadoop settings for the metastore (``key: value``); they are
            passed on its command line, so never put a password here.
        startup_timeout: seconds to wait for the port to open (measured 10-35 s on a busy
            2-vCPU machine; the first start also creates the Derby schema).
        heap: JVM maximum heap (``-Xmx``).
    """

    name = "Hive metastore"

    def __init__(
        self,
        directory: str | Path,
        *,
        host: str = LOOPBACK,
        port: int = 0,
        hadoop_conf: Mapping[str, str] | None = None,
        startup_timeout: float = 180.0,
        heap: str = "512m",
    ) -> None:
        super().__init__(directory, startup_timeout=startup_timeout)
        self.host = host
        self.port = port or reserve_port(host)
        self._port_picked = not port  # picked here: another is tried if it turns out taken
        self.heap = heap
        self.hadoop_conf = dict(hadoop_conf or {})

    @property
    def uri(self) -> str:
        """``thrift://host:port`` for ``config.spark_settings(metastore_uri=...)``."""
        if not self.port:
            raise ServiceError("the metastore has no port yet: start() it first")
        host = LOOPBACK if self.host == "0.0.0.0" else self.host  # all interfaces: reach it locally
        return f"thrift://{host}:{self.port}"

    def settings(self) -> dict[str, str]:
        """The Hive settings the metastore runs with (no secrets: Derby has no password here)."""
        return {
            "javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={self.directory / 'metastore_db'};create=true",
            "datanucleus.schema.autoCreateAll": "true",
            "hive.metastore.schema.verification": "false",
            "hive.metastore.warehouse.dir": (self.directory / "hive-warehouse").as_uri(),
            "hive.metastore.disallow.incompatible.col.type.changes": "false",  # Iceberg reorders columns
            "fs.s3a.impl": LOCATION_ONLY_FS,
            "fs.s3.impl": LOCATION_ONLY_FS,
            **self.hadoop_conf,
        }

    def _command(self) -> Sequence[str]:
        # A metastore serves small requests: C1 only and the serial collector halve its start time.
        command = java_command(
            LAUNCHER_CLASS, "--host", self.host, "--port", str(self.port),
            classpath=[pyspark_jars_dir() / "*", testing_jar()],
            heap=self.heap,
            system_properties={"hive.async.log.enabled": "false",
                               "derby.stream.error.file": str(self.directory / "derby.log")},
        )
        for key, value in self.settings().items():
            command += ["--conf", f"{key}={value}"]
        return command

    def _is_ready(self) -> bool:
        return self._listening_and_open(LOOPBACK if self.host == "0.0.0.0" else self.host)

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"StandaloneMetastore(host={self.host!r}, port={self.port}, directory='{self.directory}', {state})"
