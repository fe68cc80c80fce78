"""The same services in containers (testcontainers): MinIO and the metastore image of docker/.

Skipped, fast, where no Docker engine answers (as on this project's development machines): the
engine is looked for once, at import, with a one-second ping. Correct by reading; the code paths
they drive are the ones tests/testing/test_loopback_tables.py runs on loopback services.
"""

from __future__ import annotations

import os
import secrets
import uuid
from functools import lru_cache

import pytest

from tests.testing.helpers import ROOT, assert_every_file_encrypted, assert_verified, run_app

MINIO_IMAGE = "minio/minio:RELEASE.2025-04-22T22-12-26Z"
IMAGE_TAG = "pyiceberg-crypto:test"
BUCKET = "warehouse"
REGION = "us-east-1"
KEY_ID = "orders-key"


@lru_cache(maxsize=1)
def docker_engine_problem() -> str | None:
    """Why no Docker engine can be used here (None when one answers a ping within a second)."""
    host = os.environ.get("DOCKER_HOST", "")
    if not host and not os.path.exists("/var/run/docker.sock"):
        return "no Docker engine: DOCKER_HOST is unset and /var/run/docker.sock does not exist"
    try:
        import docker

        docker.from_env(timeout=1).ping()
    except Exception as exc:  # noqa: BLE001 - any failure means "no usable engine"
        return f"no Docker engine answers at {host or 'unix:///var/run/docker.sock'}: {type(exc).__name__}"
    return None


pytestmark = [
    pytest.mark.docker,
    pytest.mark.slow,
    pytest.mark.skipif(docker_engine_problem() is not None, reason=str(docker_engine_problem())),
]


class MinioStore:
    """The MinIO container seen like an S3Server (environment, client, catalog properties)."""

    def __init__(self, endpoint: str, access_key: str, secret_key: str) -> None:
        self.endpoint, self.region, self.bucket = endpoint, REGION, BUCKET
        self._access_key, self._secret_key = access_key, secret_key

    def environment(self) -> dict[str, str]:
        return {"AWS_ACCESS_KEY_ID": self._access_key, "AWS_SECRET_ACCESS_KEY": self._secret_key,
                "AWS_REGION": REGION, "AWS_DEFAULT_REGION": REGION}

    def catalog_properties(self) -> dict[str, str]:
        return {"s3.endpoint": self.endpoint, "s3.path-style-access": "true", "client.region": REGION}

    def warehouse(self, prefix: str) -> str:
        return f"s3://{BUCKET}/{prefix}"

    def client(self):
        import boto3
        from botocore.config import Config

        return boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION, aws_access_key_id=self._access_key,
                            aws_secret_access_key=self._secret_key, config=Config(s3={"addressing_style": "path"}))


@pytest.fixture(scope="module")
def network():
    from testcontainers.core.network import Network

    with Network() as net:
        yield net


@pytest.fixture(scope="module")
def image():
    """docker/Dockerfile built from the repository (what `docker compose build` builds)."""
    from testcontainers.core.image import DockerImage

    with DockerImage(path=ROOT, dockerfile_path="docker/Dockerfile", tag=IMAGE_TAG) as built:
        yield built


@pytest.fixture(scope="module")
def minio(network):
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.wait_strategies import HttpWaitStrategy

    access_key, secret_key = "lake-" + secrets.token_hex(6), secrets.token_hex(20)
    container = (
        DockerContainer(MINIO_IMAGE)
        .with_command("server /data")
        .with_env("MINIO_ROOT_USER", access_key)
        .with_env("MINIO_ROOT_PASSWORD", secret_key)
        .with_exposed_ports(9000)
        .with_network(network)
        .with_network_aliases("minio")
        .waiting_for(HttpWaitStrategy(9000, "/minio/health/live").for_status_code(200))
    )
    with container:
        endpoint = f"http://{container.get_container_host_ip()}:{container.get_exposed_port(9000)}"
        store = MinioStore(endpoint, access_key, secret_key)
        store.client().create_bucket(Bucket=BUCKET)
        store.container = container
        yield store


@pytest.fixture(scope="module")
def metastore(image, network):
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.wait_strategies import LogMessageWaitStrategy

    container = (
        DockerContainer(str(image))
        .with_command("python -m pyiceberg_crypto.testing metastore --host 0.0.0.0 --port 9083 "
                      "--directory /var/lib/metastore")
        .with_exposed_ports(9083)
        .with_network(network)
        .with_network_aliases("metastore")
        .waiting_for(LogMessageWaitStrategy("Hive metastore ready at").with_startup_timeout(300))
    )
    with container:
        yield f"thrift://{container.get_container_host_ip()}:{container.get_exposed_port(9083)}"


def test_round_trip_and_verifiers_against_containers(minio, metastore):
    """Spark here, metastore and MinIO in containers: encrypted round trip, key-id pinning,
    verify_table in the application and verify_metadata here."""
    master_keys = {KEY_ID: os.urandom(16)}
    table = f"lake.db.orders_{uuid.uuid4().hex[:8]}"
    job = {
        "catalog": "lake", "table": table, "warehouse": minio.warehouse("wh"), "metastore_uri": metastore,
        "s3_endpoint": minio.endpoint, "s3_region": REGION, "key_id": KEY_ID,
        "master_keys": {k: v.hex() for k, v in master_keys.items()},
    }
    result = run_app("round_trip", job, minio)
    assert [tuple(row) for row in result["rows"]] == [(1, "apple"), (3, "fig"), (4, "kiwi")]
    assert result["refused"]["change"] and result["refused"]["remove"]
    os.environ.update(minio.environment())  # the pure-Python verifier reads MinIO from this process
    try:
        assert_verified(result, master_keys, minio, min_data_files=2, key_id=KEY_ID)
    finally:
        for key in minio.environment():
            os.environ.pop(key, None)
    assert_every_file_encrypted(minio, f"{minio.warehouse('wh')}/db.db/{table.rsplit('.', 1)[1]}", min_data_files=2)


def test_client_image_runs_the_demo_and_the_verifiers(image, network, minio, metastore):
    """What `docker compose run client` does: the demo and both verifiers inside the image."""
    from testcontainers.core.container import DockerContainer

    client = (
        DockerContainer(str(image))
        .with_command("python -m pyiceberg_crypto.demo.external")
        .with_envs(**minio.environment(), METASTORE_URI="thrift://metastore:9083", WAREHOUSE="s3://warehouse/wh",
                   S3_ENDPOINT="http://minio:9000", S3_PATH_STYLE_ACCESS="true")
        .with_network(network)
    )
    with client:
        status = client.get_wrapped_container().wait(timeout=900)["StatusCode"]
        stdout, stderr = client.get_logs()
    text = stdout.decode(errors="replace")
    assert status == 0, text[-3000:] + stderr.decode(errors="replace")[-3000:]
    assert "all files encrypted and verified" in text
