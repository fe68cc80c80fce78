"""A real AWS KMS API on loopback: moto in server mode, in its own process (boto3 is not mocked)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

# One real OpenBao dev server per session (test_vault_openbao*.py).
from pyiceberg_crypto.testing.pytest_plugin import openbao_server  # noqa: F401
from pyiceberg_crypto.testing.s3 import S3Server

#: Dummy credentials and region for the moto server; handed to clients explicitly, never via os.environ.
AWS_TEST_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing-secret", "AWS_REGION": "us-east-1"}


@pytest.fixture(scope="session")
def moto_kms_endpoint(tmp_path_factory):
    """``http://127.0.0.1:PORT`` of a moto server process serving the KMS API (the test kit's
    S3 server: moto serves every AWS API it knows on one port)."""
    pytest.importorskip("boto3")
    with S3Server(tmp_path_factory.mktemp("moto"), bucket=None) as server:
        yield server.endpoint


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
