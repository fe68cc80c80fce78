"""Issue 39, item 5: ``kms serve`` stays available under hostile peers, on real processes and
loopback only, every loop bounded in time or count.

- idle sockets without a token cannot lock legitimate clients out (the oldest silent one makes room);
- an authenticated client cannot hold a slot forever (idle timeout), and the JVM reconnects;
- the metrics/health port has a connection cap and a request deadline, logs one line per burst of
  errors (no traceback) and stays on loopback unless told otherwise;
- per-peer state is bounded and refusal labels come from a fixed set.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest

from pyiceberg_crypto.errors import InvalidArgumentError
from pyiceberg_crypto import config
from pyiceberg_crypto.serve.metrics import MetricsServer
from pyiceberg_crypto.serve.py4j import MAX_TRACKED_PEERS, Py4jFace
from pyiceberg_crypto.serve.served_kms import ServedKms
from pyiceberg_crypto.kms.keystore import KeystoreKms
from tests.conftest import add_catalog
from tests.serve.raw_client import RawClient
from tests.serve.service_process import ServiceProcess
from tests.serve.test_operations import _get, _metric
from tests.serve.test_service import java_client, unwrap, wrap
from tests.testkit import eventually, load_factor

KEY = b"h" * 16

#: Holds ``count`` idle connections (sending nothing) for ``seconds``, opening a new one for each the
#: listener closes; prints how many it opened. Its own process: the attack does not share our GIL.
ATTACKER = textwrap.dedent("""
    import selectors, socket, sys, time
    host, port, count, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    selector = selectors.DefaultSelector()
    opened = 0

    def open_one():
        global opened
        sock = socket.socket()
        sock.setblocking(False)
        sock.connect_ex((host, port))
        selector.register(sock, selectors.EVENT_READ)
        opened += 1

    for _ in range(count):
        open_one()
    print("ready", flush=True)
    # Until the test closes our stdin (at most `seconds`): the attack lasts as long as the test's
    # legitimate clients need, however slowly a loaded machine serves them.
    selector.register(sys.stdin, selectors.EVENT_READ)
    end = time.monotonic() + seconds
    running = True
    while running and time.monotonic() < end:
        for key, _ in selector.select(timeout=0.1):
            sock = key.fileobj
            if sock is sys.stdin:
                running = False
                break
            try:
                if sock.recv(4096):
                    continue  # a busy line: the close follows
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                pass
            selector.unregister(sock)
            sock.close()
            open_one()
    print(opened, flush=True)
""")


def _host_port(service: ServiceProcess) -> tuple[str, int]:
    host, port = service.address.rsplit(":", 1)
    return host, int(port)


def _token(service: ServiceProcess) -> str:
    return service.token_file.read_text().strip()


def _attack(host: str, port: int, count: int, seconds: float) -> subprocess.Popen:
    attacker = subprocess.Popen([sys.executable, "-c", ATTACKER, host, str(port), str(count), str(seconds)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert attacker.stdout.readline().strip() == "ready"
    return attacker


def _threads(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


# --- idle sockets without a token ------------------------------------------------------------------

def test_idle_connections_without_a_token_cannot_lock_legitimate_clients_out(tmp_path, keystore):
    """Issue 39: 64 idle sockets refused every newcomer (``!busy too many unauthenticated
    connections``). Now 300 idle sockets, re-opened as the listener closes them, let at least 99 %
    of 20 or more legitimate handshakes through (the default caps: 64 unauthenticated, 256 open)."""
    service = ServiceProcess.start(tmp_path / "service", keystore)
    host, port = _host_port(service)
    token = _token(service)
    # The attack lasts until the legitimate clients are done: at least 3 s and 20 attempts, so that
    # the 99 % is taken over enough attempts however slowly a loaded machine serves each one (each
    # takes ~0.2 s under the attack on 2 cores, and the attackers re-open thousands of sockets).
    attacker = _attack(host, port, 300, 600)
    succeeded, failed = 0, []
    try:
        eventually(lambda: service.refresh_status()["connections"]["unauthenticated"] >= 32, 5,
                   message="the attack under way: the unauthenticated slots taken")
        end = time.monotonic() + 3.0
        while time.monotonic() < end or succeeded + len(failed) < 20:
            try:
                # A slow answer on a loaded machine is not a lock-out (that was an immediate !busy).
                with RawClient(host, port, timeout=20 * load_factor()) as client:
                    reply = client.handshake(token)
                    if reply == b"!yv":
                        RawClient.bytes_of(client.call("wrapKey", KEY, "k1"))
                        succeeded += 1
                    else:
                        failed.append(reply[:120])
            except (OSError, AssertionError, ValueError) as exc:
                failed.append(repr(exc)[:120])
        assert attacker.poll() is None, "the attacker stopped before the legitimate clients were done"
        opened = int(attacker.communicate(input="", timeout=30)[0].strip().splitlines()[-1])
    finally:
        if attacker.poll() is None:
            attacker.kill()
            attacker.wait(10)
        status = service.refresh_status()
        service.stop()
    attempts = succeeded + len(failed)
    assert attempts >= 20, (attempts, failed[:5])
    assert succeeded >= 0.99 * attempts, (succeeded, attempts, failed[:5])
    assert opened > 300  # the listener closed attackers to make room, and they came back
    reasons = status["refused_reasons"]
    assert reasons.get("closed to make room: the unauthenticated slots were full", 0) > 0, reasons
    assert not any(r.startswith("too many unauthenticated") for r in reasons), reasons


# --- authenticated but idle --------------------------------------------------------------------------

def test_an_authenticated_client_cannot_hold_a_slot_forever(tmp_path, keystore):
    service = ServiceProcess.start(tmp_path / "service", keystore,
                                   extra=["--idle-timeout", "1.5", "--max-connections", "4", "--metrics", "0"])
    metrics_port = service.metrics_port
    host, port = _host_port(service)
    try:
        holders = [RawClient(host, port) for _ in range(4)]
        for holder in holders:
            assert holder.handshake(_token(service)) == b"!yv"
        busy = RawClient(host, port)
        assert busy.stream.readline().startswith(b"!busy too many connections (cap 4)")
        busy.close()
        # A client that keeps calling is not idle, however long it stays. (The sleeps are the client's
        # pace: 2 s in all, longer than the idle timeout; a gap reaches 1.5 s only if a call stalls 1 s.)
        for _ in range(4):
            time.sleep(0.5)
            assert RawClient.bytes_of(holders[0].call("wrapKey", KEY, "k1"))
        # The others, silent since their handshake, were closed: they read the end of the stream.
        for holder in holders[1:]:
            holder.sock.settimeout(5 * load_factor())
            assert holder.stream.readline() == b""
        with RawClient(host, port) as newcomer:
            assert newcomer.handshake(_token(service)) == b"!yv"
            assert RawClient.bytes_of(newcomer.call("wrapKey", KEY, "k1"))
        status = service.refresh_status()
        assert status["connections"]["idle_closed"] >= 3 and status["limits"]["idle_timeout_seconds"] == 1.5
        text = _get(f"http://127.0.0.1:{metrics_port}/metrics")[1]
        assert _metric(text, "pyiceberg_crypto_kms_idle_closed_total") >= 3
        for holder in holders:
            holder.close()
    finally:
        service.stop()


def test_the_jvm_reconnects_after_the_service_closed_its_idle_connections(spark, jvm, tmp_path, keystore):
    """Spark statements before and after an idle period longer than the service's idle timeout: the
    JVM's pooled connections were closed by the service; the next statement opens new ones and
    fails nothing. (The default, 120 s, is beyond the 60 s the JVM keeps idle connections; the
    short timeout here makes the JVM meet connections the service closed, the worst case.)"""
    service = ServiceProcess.start(tmp_path / "service", keystore, extra=["--idle-timeout", "2"])
    try:
        suffix = uuid.uuid4().hex[:6]
        catalog = f"idle_{suffix}"
        add_catalog(spark, catalog, warehouse=tmp_path / "wh", **service.client_settings())
        table = f"{catalog}.idle_{suffix}.t"
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.idle_{suffix}")
        spark.sql(f"CREATE TABLE {table} (id bigint, part int) USING iceberg PARTITIONED BY (part) "
                  f"{config.tblproperties_sql(config.table_properties('k1'))}")
        client = java_client(jvm, **service.client_settings())  # the same JVM-wide pool as the catalog's
        rows = 0
        for round_ in range(3):
            spark.sql(f"INSERT INTO {table} SELECT id, CAST(id % 4 AS INT) FROM range(40) DISTRIBUTE BY id % 4")
            rows += 40
            assert spark.sql(f"SELECT count(*) FROM {table}").collect()[0][0] == rows
            _wrap_from_threads(jvm, client, threads=4, calls=10)  # several connections in the JVM's pool
            status = service.refresh_status()
            calls = _calls(status)
            if round_ == 0:  # the pool holds several connections, all closed by the service below
                assert status["connections"]["open"] >= 2, status["connections"]
            status = service.wait_for_status(lambda s: s["connections"]["open"] == 0, 30, "the idle connections to close")
            assert status["connections"]["idle_closed"] >= round_ + 1
            time.sleep(0.5)
        spark.sql(f"INSERT INTO {table} SELECT id, CAST(id % 4 AS INT) FROM range(40) DISTRIBUTE BY id % 4")
        assert spark.sql(f"SELECT count(*) FROM {table}").collect()[0][0] == rows + 40
        assert unwrap(jvm, client, wrap(jvm, client)) == b"d" * 16
        status = service.refresh_status()
        assert _calls(status) > calls
        assert sum(c.get("failures", 0) for c in status["clients"].values()) == 0, status["clients"]
        assert status["refused_reasons"] == {}, status["refused_reasons"]
    finally:
        service.stop()


def _calls(status: dict) -> int:
    return sum(op["calls"] for op in status["operations"].values())


def _wrap_from_threads(jvm, client, *, threads: int, calls: int) -> None:
    """``threads`` Python threads calling at once: py4j gives each its own JVM thread, and each JVM
    thread its own connection to the service while the others are busy."""
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []

    def run():
        try:
            barrier.wait(30)
            for _ in range(calls):
                wrap(jvm, client)
        except BaseException as exc:  # reported below
            errors.append(exc)

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert errors == [], errors


# --- the metrics and health port ------------------------------------------------------------------------

def test_the_metrics_port_caps_connections_and_reaps_idle_ones(tmp_path, keystore):
    """Issue 39: each idle socket cost the service a thread and a descriptor, without limit."""
    service = ServiceProcess.start(tmp_path / "service", keystore, extra=["--metrics", "0"])
    port = service.metrics_port
    idle: list[socket.socket] = []
    try:
        pid = service.process.pid
        before = _threads(pid)
        for _ in range(200):
            try:
                idle.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            except OSError:
                break
        time.sleep(1.0)  # time for threads to appear: on a loaded machine the check is weaker, never flaky
        assert _threads(pid) - before <= 40, (before, _threads(pid))
        # 10 s idle, up to 40 s on a loaded machine: short of kept for good (recv below would time out).
        bound = 10 * load_factor()
        started = time.monotonic()
        status, text = _get(f"http://127.0.0.1:{port}/metrics")  # a scraper still gets its answer
        assert status == 200 and _metric(text, "pyiceberg_crypto_kms_up") == 1
        assert time.monotonic() - started < bound
        # The idle sockets are closed at the request deadline (5 s) at the latest, not kept.
        oldest = idle[-1]
        oldest.settimeout(bound)
        try:
            assert oldest.recv(100) == b""
        except ConnectionResetError:
            pass
        assert time.monotonic() - started < bound
    finally:
        for sock in idle:
            sock.close()
        service.stop()
    assert "Traceback" not in service.log()


def test_resets_before_the_answer_cost_one_log_line_not_a_traceback_each(tmp_path, keystore):
    """Issue 39: 200 requests reset before their answer wrote 300 KB of tracebacks."""
    service = ServiceProcess.start(tmp_path / "service", keystore, extra=["--metrics", "0"])
    port = service.metrics_port
    try:
        size_before = len(service.log().encode())
        # In bursts of 50, each followed by a scrape: it is answered once the listener has accepted
        # every connection queued before it, so no burst overflows the listen backlog (64) and no
        # connect waits for the kernel's 1 s SYN retry (200 in a row lost ~3 s to them).
        for _ in range(4):
            for _ in range(50):
                sock = socket.create_connection(("127.0.0.1", port), timeout=5)
                sock.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                sock.close()
            assert _get(f"http://127.0.0.1:{port}/metrics")[0] == 200
        time.sleep(1.0)  # time for late log lines: on a loaded machine the check is weaker, never flaky
        grown = service.log()[size_before:]
        assert "Traceback" not in grown, grown[:2000]
        assert len(grown.encode()) < 4096, grown[:2000]
    finally:
        service.stop()


def test_metrics_beyond_loopback_need_an_explicit_flag(tmp_path, keystore):
    refused = subprocess.run(
        [sys.executable, "-m", "pyiceberg_crypto.cli.main", "kms", "serve", "--kms", "keystore",
         f"--kms-property=keystore.path={keystore}", "--listen", "127.0.0.1:0", "--token-file",
         str(tmp_path / "kms.token"), "--metrics", "0.0.0.0:0"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert refused.returncode == 2, refused.stderr
    assert "not a loopback address" in refused.stderr and "--metrics-allow-remote" in refused.stderr
    assert "Traceback" not in refused.stderr and not (tmp_path / "kms.token").exists()
    # The Python API refuses it too (nothing is bound: the check comes first).
    service = Py4jFace(ServedKms(lambda: KeystoreKms(keystore)), token_file=tmp_path / "api.token", listen="127.0.0.1:0")
    with service:
        for host in ("0.0.0.0", "::", "192.0.2.1"):
            with pytest.raises(InvalidArgumentError, match="--metrics-allow-remote"):
                MetricsServer([service], host, 0)
        local = MetricsServer([service], "127.0.0.1", 0)  # loopback needs no flag
        try:
            assert _get(f"http://{local.address}/metrics")[0] == 200
        finally:
            local.close()


# --- bounded per-peer state, fixed labels ------------------------------------------------------------------

def test_refusals_per_peer_are_bounded_and_reason_labels_are_a_fixed_set(tmp_path, keystore):
    service = ServiceProcess.start(tmp_path / "service", keystore, extra=["--metrics", "0"])
    port = service.metrics_port
    host, listen_port = _host_port(service)
    peers = MAX_TRACKED_PEERS + 100
    try:
        for i in range(peers):  # one refusal from each of many loopback source addresses
            sock = socket.socket()
            sock.bind((f"127.1.{i // 250}.{i % 250 + 1}", 0))
            sock.settimeout(5)
            sock.connect((host, listen_port))
            sock.sendall(b"no token\n")
            try:
                sock.recv(10)
            except OSError:
                pass
            sock.close()
        # Lines over what is left of the 512-byte budget, after first lines of chosen lengths.
        for chosen in (1, 7, 42):
            with socket.create_connection((host, listen_port), timeout=5) as sock:
                try:
                    sock.sendall(b"A\n" + b"x" * chosen + b"\n" + b"y" * 600)
                    sock.recv(10)
                except OSError:
                    pass
        status = service.wait_for_fresh_status(lambda s: sum(s["refused_reasons"].values()) >= peers + 3, 60,
                                               "the refusals to be counted")
        assert len(status["refused"]) <= MAX_TRACKED_PEERS
        assert status["peers_forgotten"]["refused"] >= 100
        assert status["refused_reasons"] == {"no token": peers, "more than 512 bytes before authenticating": 3}
        text = _get(f"http://127.0.0.1:{port}/metrics")[1]
        labels = {line.split('reason="', 1)[1].split('"', 1)[0] for line in text.splitlines()
                  if line.startswith("pyiceberg_crypto_kms_refused_connections_total{")}
        assert labels == {"no token", "more than 512 bytes before authenticating"}
    finally:
        service.stop()
