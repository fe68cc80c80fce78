"""A ``kms serve`` service behind the two Spark servers that have no Python driver of ours: a Spark
Connect server with a PySpark Connect client, and the Thrift JDBC server with ``beeline``.

Each server is started as its ``sbin/start-*-server.sh`` script starts it (``spark-submit --class``,
whose launcher supplies the ``spark-internal`` resource for these classes; here in the foreground, in
its own process group), listening on 127.0.0.1 only, on a free port, with nothing but the ``--conf``
lines of ``config.spark_settings(..., kms_service=..., kms_token_file=...)``. A client in another
process creates an encrypted table (TBLPROPERTIES), inserts and selects; then:

- the service counted wrap (the write) and unwrap (the SELECT) calls from 127.0.0.1, the server's JVM:
  no other JVM runs;
- the table passes the verifier and reads with the JVM-free reader, with the keystore's keys;
- the service's token is nowhere in the server's log nor in the client's output.

pip's pyspark 3.5 has the Thrift server and beeline but no Spark Connect server jar: there the
Connect test skips.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from pyiceberg_crypto import config
from pyiceberg_crypto.kms.keystore import KeystoreKms
from pyiceberg_crypto.testing.ports import reserve_port
from tests.serve.service_process import ROOT
from tests.testkit import SHORT_DRIVER_ENV, eventually

pytestmark = [pytest.mark.slow, pytest.mark.apps]

TBLPROPERTIES = config.tblproperties_sql(config.table_properties(key_id="k1"))
ROWS = [(1, "apple"), (2, "pear"), (3, "plum")]
INSERT_VALUES = ", ".join(f"({i}, '{item}')" for i, item in ROWS)
STARTUP_TIMEOUT = 180  # a Spark server JVM on a busy 2-core machine


def spark_bin(name: str) -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / name)


def spark_env() -> dict[str, str]:
    return dict(os.environ, PYSPARK_PYTHON=sys.executable, PYTHONPATH=str(ROOT), SPARK_LOCAL_IP="127.0.0.1",
                **SHORT_DRIVER_ENV)


def tail(path: Path, lines: int = 60) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return "\n".join(text.splitlines()[-lines:])


def listening_addresses(port: int) -> set[str]:
    """The local addresses with a listening TCP socket on ``port`` (Linux /proc/net/tcp, tcp6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:
                raw = bytes.fromhex(address)  # 32-bit words in host (little-endian) order
                ip = ipaddress.ip_address(b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4)))
                found.add(str(getattr(ip, "ipv4_mapped", None) or ip))  # a JVM's ::ffff:127.0.0.1 too
    return found


def metadata_location(warehouse: Path, table: str) -> str:
    files = sorted((warehouse / "db.db" / table / "metadata").glob("*.metadata.json"))
    assert files, f"no metadata file under {warehouse}"
    return str(files[-1])


class Server:
    """A Spark server JVM in its own process group, its output in ``log``."""

    def __init__(self, name: str, args: list[str], workdir: Path, port: int, ready: str):
        self.name, self.port, self.ready, self.log = name, port, ready, workdir / f"{name}.log"
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(args, cwd=workdir, env=spark_env(), stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        self.started = time.monotonic()

    def wait_until_accepting(self, timeout: float = STARTUP_TIMEOUT) -> float:
        """Seconds from start until the server printed its ready line and accepts on loopback only."""
        def accepting() -> bool:
            if self.process.poll() is not None:
                pytest.fail(f"{self.name} exited ({self.process.returncode}) before accepting on "
                            f"{self.port}:\n{self.log_tail()}")
            if self.ready not in self.output():  # the server's own line: not another process on the port
                return False
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True

        eventually(accepting, timeout, interval=0.5, retry_on=(OSError,),
                   message=lambda: f"{self.name} accepting on {self.port}:\n{self.log_tail()}")
        bound = listening_addresses(self.port)
        assert bound == {"127.0.0.1"}, f"{self.name} listens on {bound}, not on loopback only"
        return time.monotonic() - self.started

    def log_tail(self) -> str:
        return f"--- {self.name} log tail ({self.log})\n{tail(self.log)}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        """SIGTERM to the process group, SIGKILL after 30 s: never left running."""
        for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
            if self.process.poll() is not None:
                return
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.process.wait(wait)
            except subprocess.TimeoutExpired:
                continue


@contextmanager
def running(server: Server):
    try:
        yield server
    finally:
        server.stop()


def server_settings(root: Path, kms_service) -> dict[str, str]:
    settings = config.spark_settings("lake", warehouse=root / "wh", metastore_dir=root / "ms",
                                     **kms_service.client_settings())
    settings["spark.ui.enabled"] = "false"
    return settings


def run_client(args: list[str], cwd: Path, server: Server, timeout: float = 300) -> subprocess.CompletedProcess:
    try:
        result = subprocess.run(args, cwd=cwd, env=spark_env(), capture_output=True, text=True, timeout=timeout,
                                stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"client timed out after {timeout}s: {e.stdout!r}\n{e.stderr!r}\n"
                             f"{server.log_tail()}") from None
    assert result.returncode == 0, f"client failed:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}\n{server.log_tail()}"
    return result


def check_service_and_table(kms_service, keystore: Path, token: str, server: Server, client_output: str,
                            warehouse: Path, table: str) -> dict:
    """What every server must show: key operations from its JVM, a verifiable table, no token in its log."""
    status = kms_service.refresh_status()
    clients = status.get("clients", {})
    assert set(clients) == {"127.0.0.1"}, (status, server.log_tail())
    calls = clients["127.0.0.1"]
    assert calls.get("wrap", 0) > 0 and calls.get("unwrap", 0) > 0, (status, server.log_tail())
    assert calls.get("failures", 0) == 0, (status, server.log_tail())

    from pyiceberg_crypto.read import read_table
    from pyiceberg_crypto.verify import verify_metadata

    kms = KeystoreKms(keystore)
    location = metadata_location(warehouse, table)
    report = verify_metadata(location, kms)
    assert report.ok, [f for f in report.files if not f.ok][:3]
    arrow = read_table(location, kms)
    assert sorted(zip(arrow.column("id").to_pylist(), arrow.column("item").to_pylist())) == ROWS

    assert len(token) == 64
    assert token not in server.output(), f"the service token appears in {server.log}"
    assert token not in client_output, "the service token appears in the client's output"
    return calls


CONNECT_CLIENT = textwrap.dedent(
    """
    import json, sys
    from pyspark.sql import SparkSession

    url, tblproperties, values = sys.argv[1:4]
    spark = SparkSession.builder.remote(url).getOrCreate()
    print("CONNECT", type(spark).__module__)
    spark.sql("CREATE DATABASE IF NOT EXISTS lake.db")
    spark.sql("CREATE TABLE lake.db.orders (id bigint, item string) USING iceberg " + tblproperties)
    spark.sql("INSERT INTO lake.db.orders VALUES " + values)
    rows = spark.sql("SELECT id, item FROM lake.db.orders ORDER BY id").collect()
    print("ROWS", json.dumps([[r.id, r.item] for r in rows]))
    spark.stop()
    """
)


def test_spark_connect_server_through_the_service(tmp_path, keystore, kms_service):
    pytest.importorskip("grpc", reason="the Spark Connect client needs pyproject's test extra (grpcio, ...)")
    pytest.importorskip("pyspark.sql.connect.session")
    if not list(Path(spark_bin("spark-submit")).parents[1].glob("jars/spark-connect_*.jar")):
        pytest.skip("this pyspark ships no Spark Connect server jar (pip's pyspark has it from 4.0 on)")
    token = kms_service.token_file.read_text().strip()
    root = tmp_path / "connect"
    root.mkdir()
    port = reserve_port()
    settings = server_settings(root, kms_service)
    settings.update({"spark.connect.grpc.binding.address": "127.0.0.1", "spark.connect.grpc.binding.port": str(port),
                     "spark.connect.grpc.port.maxRetries": "0"})
    args = [spark_bin("spark-submit"), "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
            "--name", "Spark Connect server", "--master", "local[2]", *config.spark_conf_args(settings)]
    with running(Server("connect-server", args, root, port,
                        ready=f"Spark Connect server started at: 127.0.0.1:{port}")) as server:
        startup = server.wait_until_accepting()
        result = run_client([sys.executable, "-c", CONNECT_CLIENT, f"sc://127.0.0.1:{port}", TBLPROPERTIES,
                             INSERT_VALUES], root, server)
        assert "CONNECT pyspark.sql.connect.session" in result.stdout, result.stdout
        rows = json.loads(next(line for line in result.stdout.splitlines() if line.startswith("ROWS "))[5:])
        assert [tuple(r) for r in rows] == ROWS
        calls = check_service_and_table(kms_service, keystore, token, server, result.stdout + result.stderr,
                                        root / "wh", "orders")
    print(f"connect: server accepting after {startup:.1f}s, service calls {calls}")


def test_thrift_server_and_beeline_through_the_service(tmp_path, keystore, kms_service):
    token = kms_service.token_file.read_text().strip()
    root = tmp_path / "thrift"
    root.mkdir()
    port = reserve_port()
    settings = server_settings(root, kms_service)
    args = [spark_bin("spark-submit"), "--class", "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2",
            "--name", "Thrift JDBC/ODBC Server", "--master", "local[2]", *config.spark_conf_args(settings),
            "--hiveconf", f"hive.server2.thrift.port={port}",
            "--hiveconf", "hive.server2.thrift.bind.host=127.0.0.1"]
    script = root / "statements.sql"
    script.write_text(
        "CREATE DATABASE IF NOT EXISTS lake.db;\n"
        f"CREATE TABLE lake.db.orders (id bigint, item string) USING iceberg {TBLPROPERTIES};\n"
        f"INSERT INTO lake.db.orders VALUES {INSERT_VALUES};\n"
        "SELECT 'ROW', id, item FROM lake.db.orders ORDER BY id;\n")
    with running(Server("thrift-server", args, root, port,
                        ready=f"Starting ThriftBinaryCLIService on port {port} ")) as server:
        startup = server.wait_until_accepting()
        result = run_client([spark_bin("beeline"), "-u", f"jdbc:hive2://127.0.0.1:{port}", "-n", "user",
                             "--silent=true", "--outputformat=tsv2", "--showHeader=false", "-f", str(script)],
                            root, server)
        # tsv2 rows; --silent still prints "null" for each statement without a result set, unterminated.
        rows = re.findall(r"ROW\t(\d+)\t(\w+)$", result.stdout, re.M)
        assert [(int(i), item) for i, item in rows] == ROWS, f"{result.stdout}\n{result.stderr[-2000:]}"
        calls = check_service_and_table(kms_service, keystore, token, server, result.stdout + result.stderr,
                                        root / "wh", "orders")
    print(f"thrift: server accepting after {startup:.1f}s, service calls {calls}")
