"""Operating ``kms serve``: Prometheus metrics and ``/healthz`` (``--metrics``, ``--health-key``),
and a connection cap that refuses clearly (the JVM's statement says why) instead of hanging."""

from __future__ import annotations

import re
import signal
import time
import urllib.error
import urllib.request
import uuid

import pytest
from py4j.protocol import Py4JJavaError

from pyiceberg_crypto import config
from tests.conftest import add_catalog
from tests.serve.raw_client import RawClient
from tests.serve.service_process import ServiceProcess
from tests.serve.test_service import java_client, java_error, unwrap, wrap
from tests.testkit import eventually, load_factor

KEY = b"m" * 16


def _get(url: str) -> tuple[int, str]:
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with direct.open(url, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _metric(text: str, name: str, **labels: str) -> float:
    """The value of the sample ``name`` with exactly these labels, in any order."""
    for match in re.finditer(r"^(\w+)(?:\{(.*)\})? (\S+)$", text, re.M):
        found = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(2) or ""))
        if match.group(1) == name and found == labels:
            return float(match.group(3))
    raise AssertionError(f"{name}{labels} not in metrics:\n{text}")


def _client(service: ServiceProcess) -> RawClient:
    host, port = service.address.rsplit(":", 1)
    client = RawClient(host, int(port))
    assert client.handshake(service.token_file.read_text().strip()) == b"!yv"
    return client


def test_metrics_and_healthz_of_kms_serve(tmp_path, keystore):
    service = ServiceProcess.start(tmp_path / "service", keystore,
                                   extra=["--metrics", "0", "--health-key", "k1", "--health-interval", "0.1"])
    base = f"http://127.0.0.1:{service.metrics_port}"
    try:
        assert f"metrics: {base}/metrics, health: {base}/healthz (canary key id 'k1')" in service.log()
        with _client(service) as client:
            wrapped = RawClient.bytes_of(client.call("wrapKey", KEY, "k1"))
            assert RawClient.bytes_of(client.call("unwrapKey", wrapped, "k1")) == KEY
            assert client.call("wrapKey", KEY, "missing").startswith(b"!x")
            status, text = _get(f"{base}/metrics")
            assert status == 200
            assert _metric(text, "pyiceberg_crypto_kms_calls_total", face="py4j", principal="py4j:default", operation="wrap") == 2
            assert _metric(text, "pyiceberg_crypto_kms_failures_total", operation="wrap") == 1
            assert _metric(text, "pyiceberg_crypto_kms_calls_total", face="py4j", principal="py4j:default", operation="unwrap") == 1
            assert _metric(text, "pyiceberg_crypto_kms_call_duration_seconds_count", operation="wrap") == 2
            assert _metric(text, "pyiceberg_crypto_kms_call_duration_seconds_bucket", operation="wrap", le="+Inf") == 2
            assert _metric(text, "pyiceberg_crypto_kms_connected_clients") == 1
            assert _metric(text, "pyiceberg_crypto_kms_up") == 1
        host, listen_port = service.address.rsplit(":", 1)
        with RawClient(host, int(listen_port)) as intruder:
            assert intruder.auth("0" * 64) != b"!yv"  # Py4J's A command with a wrong token
        service.signal(signal.SIGHUP)

        def reloaded_and_refused() -> str | None:
            text = _get(f"{base}/metrics")[1]
            done = (_metric(text, "pyiceberg_crypto_kms_reloads_total") >= 1
                    and _metric(text, "pyiceberg_crypto_kms_refused_tokens_total") >= 1
                    # the clients gone: counted off when the service's thread sees the close
                    and _metric(text, "pyiceberg_crypto_kms_connected_clients") == 0)
            return text if done else None

        text = eventually(reloaded_and_refused,
                          message="the reload, the refused token and no connected client in the metrics")
        assert _metric(text, "pyiceberg_crypto_kms_reloads_total") == 1
        assert _metric(text, "pyiceberg_crypto_kms_refused_tokens_total") == 1
        assert _metric(text, "pyiceberg_crypto_kms_connected_clients") == 0
        # The health check: a canary wrap/unwrap through the KMS, not counted as a client call.
        status, body = _get(f"{base}/healthz")
        assert status == 200 and body.startswith("ok: canary wrap/unwrap with key id 'k1' in "), body
        text = _get(f"{base}/metrics")[1]
        assert _metric(text, "pyiceberg_crypto_kms_calls_total", face="py4j", principal="py4j:default", operation="wrap") == 2
        assert _metric(text, "pyiceberg_crypto_kms_health_checks_total", result="ok") >= 1
        assert _get(f"{base}/nothing")[0] == 404
        token = service.token_file.read_text().strip()
        assert token not in text and token not in body
    finally:
        service.stop()
    # Gone with the service.
    with pytest.raises(OSError):
        urllib.request.build_opener(urllib.request.ProxyHandler({})).open(f"{base}/metrics", timeout=2)


def test_healthz_answers_503_with_the_reason_when_the_kms_fails(tmp_path, keystore):
    service = ServiceProcess.start(tmp_path / "service", keystore,
                                   extra=["--metrics", "127.0.0.1:0", "--health-key", "retired"])
    port = service.metrics_port
    try:
        status, body = _get(f"http://127.0.0.1:{port}/healthz")
        assert status == 503, body
        assert body.startswith("unhealthy: canary wrap/unwrap with key id 'retired' failed: UnknownKeyError: ")
        assert "keys.json" not in body  # the KMS's detail stays in the service's log
        text = _get(f"http://127.0.0.1:{port}/metrics")[1]
        assert _metric(text, "pyiceberg_crypto_kms_health_checks_total", result="failed") == 1
    finally:
        service.stop()


def test_200_connections_are_served_and_the_next_is_refused_clearly_in_the_statement(spark, jvm, tmp_path, keystore):
    service = ServiceProcess.start(tmp_path / "service", keystore, extra=["--max-connections", "200"])
    clients: list[RawClient] = []
    try:
        clients = [_client(service) for _ in range(200)]
        # All 200 are served (each can call), and the service stays up.
        for client in (clients[0], clients[99], clients[-1]):
            assert RawClient.bytes_of(client.call("wrapKey", KEY, "k1"))
        status = service.refresh_status()
        assert status["running"] and status["connections"]["open"] == 200
        # The 201st: the JVM's call fails at once, saying why.
        started = time.monotonic()
        client = java_client(jvm, kms_timeout=120, **service.client_settings())
        with pytest.raises(Py4JJavaError) as excinfo:
            wrap(jvm, client)
        message = java_error(excinfo)
        assert "the KMS listener refused this connection: too many connections (cap 200)" in message, message
        assert "--max-connections" in message and "token" not in message.split("(cap")[0]
        # Refused, not hung: at most 80 s on a loaded machine, short of this client's 120 s call timeout.
        assert time.monotonic() - started < 20 * load_factor()
        # In a Spark SQL statement through the same service: the same words.
        suffix = uuid.uuid4().hex[:6]
        catalog = f"capped_{suffix}"
        add_catalog(spark, catalog, warehouse=tmp_path / "wh", **service.client_settings())
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.capped_{suffix}")
        table = f"{catalog}.capped_{suffix}.t"
        spark.sql(f"CREATE TABLE {table} (id bigint) USING iceberg "
                  f"{config.tblproperties_sql(config.table_properties('k1'))}")
        with pytest.raises(Exception, match=r"refused this connection: too many connections \(cap 200\)"):
            spark.sql(f"INSERT INTO {table} VALUES (1)")
        assert service.refresh_status()["refused_reasons"].get("too many connections (cap 200)", 0) >= 2
        # One connection fewer: the JVM gets in.
        clients.pop().close()
        service.wait_for_status(lambda s: s["connections"]["open"] < 200, 30, "a connection to close")
        assert unwrap(jvm, client, wrap(jvm, client)) == b"d" * 16
        clients.pop().close()  # room for the Spark statement's own connection too
        spark.sql(f"INSERT INTO {table} VALUES (2)")
        assert [r[0] for r in spark.table(table).collect()] == [2]  # the refused INSERT committed nothing
    finally:
        for raw in clients:
            raw.close()
        service.stop()
