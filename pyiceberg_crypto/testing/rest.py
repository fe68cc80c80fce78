"""A small Iceberg REST catalog server on 127.0.0.1, for tests: namespaces and tables kept in a directory.

    from pyiceberg_crypto.testing.rest import RestCatalogServer

    with RestCatalogServer("/tmp/rest") as server:              # started and ready
        for key, value in config.catalog_settings("lake", catalog_type="rest", uri=server.uri,
                                                  warehouse="/tmp/rest/warehouse").items():
            spark.conf.set(key, value)                          # the encrypting REST catalog
    # stopped here; the catalog stays in /tmp/rest for the next start

(Iceberg's own ``type=rest`` with ``uri=server.uri`` reaches it too, but writes ``encryption.key-id``
tables in plaintext: :mod:`pyiceberg_crypto.catalog.kinds`.)

It runs ``io.pyicebergcrypto.testing.LoopbackRestCatalog`` (in the test kit's jar, :func:`~pyiceberg_crypto.testing.jars.testing_jar`): the JDK's HTTP server
routing the REST endpoints Spark's ``RESTCatalog`` uses to Iceberg's own ``CatalogHandlers`` over a
``JdbcCatalog`` on an H2 database file (``<directory>/catalog.mv.db``), so the wire format is Iceberg
1.12.0's and everything survives a restart. Table files go under ``<directory>/warehouse`` unless a
table or the client says otherwise. It has no authentication: it binds 127.0.0.1 only.

Not a production catalog: no credential vending, no server-side scan planning, no multi-table
transactions. The log is ``<directory>/rest-catalog.log``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pyiceberg_crypto.testing.jars import rest_catalog_jars, testing_jar
from pyiceberg_crypto.testing.ports import reserve_port
from pyiceberg_crypto.testing._process import LOOPBACK, ServiceError, ServiceProcess, port_open
from pyiceberg_crypto.testing._jvm import java_command, pyspark_jars_dir

SERVER_CLASS = "io.pyicebergcrypto.testing.LoopbackRestCatalog"


class RestCatalogServer(ServiceProcess):
    """An Iceberg REST catalog server in its own JVM, bound to 127.0.0.1.

    Args:
        directory: holds the H2 catalog database, the default warehouse and the log.
        port: TCP port; 0 for one reserved for this process
            (:func:`~pyiceberg_crypto.testing.ports.reserve_port`: no other process is handed it, so a
            restart takes it again and clients keep their URI; another if it turns out taken).
        startup_timeout: seconds to wait for the ``LISTENING`` line.
        heap: JVM maximum heap (``-Xmx``).
    """

    name = "REST catalog"

    def __init__(self, directory: str | Path, *, port: int = 0, startup_timeout: float = 120.0,
                 heap: str = "256m") -> None:
        super().__init__(directory, startup_timeout=startup_timeout)
        self.host = LOOPBACK
        self.port = port or reserve_port(self.host)
        self._port_picked = not port  # picked here: another is tried if it turns out taken
        self.heap = heap

    @property
    def uri(self) -> str:
        """``http://127.0.0.1:PORT``, the ``uri`` catalog property of a REST catalog."""
        if not self.port:
            raise ServiceError("the REST catalog has no port yet: start() it first")
        return f"http://{self.host}:{self.port}"

    @property
    def warehouse(self) -> Path:
        """The default warehouse directory of tables created without a location."""
        return self.directory / "warehouse"

    def start(self) -> "RestCatalogServer":
        if not self._port_picked and port_open(self.host, self.port):
            raise ServiceError(f"port {self.port} on {self.host} is already in use: pick another port, "
                               "or 0 for a free one")
        super().start()
        return self

    def _command(self) -> Sequence[str]:
        return java_command(
            SERVER_CLASS, "--directory", str(self.directory), "--host", self.host, "--port", str(self.port),
            classpath=[pyspark_jars_dir() / "*", *rest_catalog_jars(), testing_jar()],
            heap=self.heap,
        )

    def _is_ready(self) -> bool:
        return self._listening_and_open(self.host)

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"RestCatalogServer(port={self.port}, directory='{self.directory}', {state})"
