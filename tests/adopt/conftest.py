"""The adopt tests' catalog: one per test package run (the session's one metastore serves every
catalog, so its namespaces are its own), shared by the modules to keep set-up cheap."""

from __future__ import annotations

import uuid

import pytest

from pyiceberg_crypto.bridge import register_kms
from pyiceberg_crypto.cli.main import main
from pyiceberg_crypto.kms import KeystoreKms
from tests.conftest import add_catalog

MASTER = "adopt-key"


@pytest.fixture(scope="package")
def lake(spark, tmp_path_factory):
    """A catalog (Hive, the session's metastore) whose KMS is a keystore with MASTER; a namespace."""
    work = tmp_path_factory.mktemp("adopt")
    keystore = work / "keys.json"
    assert main(["keystore", "create", str(keystore)]) == 0
    assert main(["keystore", "add", str(keystore), MASTER]) == 0
    suffix = uuid.uuid4().hex[:6]
    catalog, kms_name = f"adopt_{suffix}", f"adopt-{suffix}"
    registration = register_kms(spark, KeystoreKms(keystore), name=kms_name)
    add_catalog(spark, catalog, warehouse=work / "wh", kms_name=kms_name)
    ns = f"adopt_{suffix}"  # the session's one metastore serves every catalog: a namespace of its own
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.{ns}")
    yield {"catalog": catalog, "schema": f"{catalog}.{ns}", "keystore": keystore, "work": work, "kms_name": kms_name}
    registration.close()
