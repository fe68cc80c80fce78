"""A real AWS KMS API on loopback: moto in server mode, in its own process (boto3 is not mocked)."""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

# One real OpenBao dev server per session (test_vault_openbao*.py).
from pyiceberg_crypto.testing.pytest_plugin import openbao_server  # noqa: F401
from tests.testkit import eventually

#: Dummy credentials and region for the moto server; handed to clients explicitly, never via os.environ.
AWS_TEST_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing-secret", "AWS_REGION": "us-east-1"}


def _free_loopback_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def moto_kms_endpoint(tmp_path_factory):
    """``http://127.0.0.1:PORT`` of a moto server process serving the KMS API."""
    pytest.importorskip("boto3")
    moto_server = Path(sys.executable).with_name("moto_server")
    command = [str(moto_server)] if moto_server.exists() else [sys.executable, "-m", "moto.server"]
    port = _free_loopback_port()
    log = (tmp_path_factory.mktemp("moto") / "moto.log").open("wb")
    process = subprocess.Popen([*command, "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"

    def serving() -> bool:
        if process.poll() is not None:
            pytest.fail(f"moto server exited ({process.returncode}) before serving on {endpoint} (see {log.name})")
        urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2).close()
        return True

    try:
        eventually(serving, 60, interval=0.2, retry_on=(OSError,),
                   message=f"moto server on {endpoint} (see {log.name})")
    except BaseException:
        process.kill()
        raise
    yield endpoint
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
    log.close()


@pytest.fixture(scope="session")
def aws_properties(moto_kms_endpoint):
    """AwsKms properties pointing at the moto server (static test credentials)."""
    return {
        "kms.endpoint": moto_kms_endpoint,
        "client.region": AWS_TEST_ENV["AWS_REGION"],
        "kms.access-key-id": AWS_TEST_ENV["AWS_ACCESS_KEY_ID"],
        "kms.secret-access-key": AWS_TEST_ENV["AWS_SECRET_ACCESS_KEY"],
    }


@pytest.fixture(scope="session")
def kms_admin(aws_properties):
    """A plain boto3 KMS client for creating keys and aliases on the moto server."""
    import boto3

    return boto3.client(
        "kms",
        endpoint_url=aws_properties["kms.endpoint"],
        region_name=aws_properties["client.region"],
        aws_access_key_id=aws_properties["kms.access-key-id"],
        aws_secret_access_key=aws_properties["kms.secret-access-key"],
    )


@pytest.fixture
def aws_key(kms_admin):
    """A fresh symmetric KMS key: its metadata (``KeyId``, ``Arn``)."""
    return kms_admin.create_key(Description="pyiceberg-crypto test")["KeyMetadata"]


def kek_versions(metadata: str, key_id: str, kms) -> set[str | None]:
    """The master key versions (``kms.key_version``) of the table's KEKs wrapped by ``key_id``."""
    document = json.loads(Path(metadata.removeprefix("file:")).read_text())
    return {kms.key_version(base64.b64decode(k["encrypted-key-metadata"]), key_id)
            for k in document["encryption-keys"] if k.get("encrypted-by-id") == key_id}
