"""A master key the catalog's KMS does not know is caught before CREATE TABLE (issue 41, item 3):
Iceberg 1.12.0 calls no KMS at CREATE (so plain SQL accepts it and the first INSERT fails); the
product's check asks the registered Python KMS, and names the key id and the KMS."""

from __future__ import annotations

import uuid

import pytest

from pyiceberg_crypto import config
from pyiceberg_crypto.bridge import KeyCheckSkippedWarning, check_key_id, register_kms
from pyiceberg_crypto.kms import KeystoreKms
from pyiceberg_crypto.cli.main import main
from pyiceberg_crypto.errors import InvalidArgumentError
from tests.conftest import add_catalog

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def catalog(spark, tmp_path_factory):
    """A catalog on the session's metastore whose KMS is a keystore holding only 'kc-key'."""
    work = tmp_path_factory.mktemp("key-check")
    keystore = work / "keys.json"
    assert main(["keystore", "create", str(keystore)]) == 0
    assert main(["keystore", "add", str(keystore), "kc-key"]) == 0
    suffix = uuid.uuid4().hex[:6]
    name, kms_name = f"kc_{suffix}", f"kc-{suffix}"
    registration = register_kms(spark, KeystoreKms(keystore), name=kms_name)
    add_catalog(spark, name, warehouse=work / "wh", kms_name=kms_name)
    spark.sql(f"CREATE NAMESPACE {name}.db")
    yield {"name": name, "kms_name": kms_name, "registration": registration}
    registration.close()


def test_iceberg_calls_no_kms_at_create_so_plain_sql_accepts_an_unknown_key(spark, catalog):
    """Why the check is the product's: the reason pinned (an Iceberg that checks at CREATE fails this)."""
    before = catalog["registration"].stats.snapshot()
    spark.sql(f"CREATE TABLE {catalog['name']}.db.accepted (id bigint) USING iceberg "
              f"{config.tblproperties_sql(config.table_properties('nope'))}")
    assert catalog["registration"].stats.since(before).total == 0
    with pytest.raises(Exception, match="nope"):  # the first INSERT is where Iceberg finds out
        spark.sql(f"INSERT INTO {catalog['name']}.db.accepted VALUES (1)")


def test_check_key_id_names_the_key_and_the_kms(spark, catalog):
    with pytest.raises(InvalidArgumentError) as raised:
        check_key_id(spark, "nope", catalog=catalog["name"])
    message = str(raised.value)
    assert "'nope'" in message and repr(catalog["kms_name"]) in message and "KeystoreKms" in message
    assert "keystore add" in message  # the next step
    check_key_id(spark, "kc-key", catalog=catalog["name"])  # a key it knows: no error


def test_without_catalog_the_check_asks_the_sessions_current_catalog(spark, catalog):
    """No made-up default name: the current catalog, or a clear error when it is not one the session
    configures (Spark's own ``spark_catalog`` here)."""
    before = spark.catalog.currentCatalog()
    try:
        spark.catalog.setCurrentCatalog("spark_catalog")
        with pytest.raises(InvalidArgumentError, match="current catalog 'spark_catalog' is not one it configures.*catalog="):
            check_key_id(spark, "kc-key")
        spark.catalog.setCurrentCatalog(catalog["name"])
        check_key_id(spark, "kc-key")  # the current catalog's KMS knows it
        with pytest.raises(InvalidArgumentError, match=repr(catalog["kms_name"])):
            config.table_properties("nope", spark=spark)
    finally:
        spark.catalog.setCurrentCatalog(before)


def test_table_properties_with_the_session_refuses_the_key_before_create(spark, catalog):
    with pytest.raises(InvalidArgumentError, match="nope"):
        config.table_properties("nope", spark=spark, catalog=catalog["name"])
    props = config.table_properties("kc-key", spark=spark, catalog=catalog["name"])
    table = f"{catalog['name']}.db.checked"
    spark.sql(f"CREATE TABLE {table} (id bigint) USING iceberg {config.tblproperties_sql(props)}")
    spark.sql(f"INSERT INTO {table} VALUES (1)")
    assert spark.table(table).count() == 1


def test_a_catalog_on_a_kms_service_is_not_checked_and_says_so(spark, catalog):
    name = f"kcs_{uuid.uuid4().hex[:6]}"
    spark.conf.set(f"spark.sql.catalog.{name}.pyiceberg-crypto.kms-service", "127.0.0.1:1")
    with pytest.warns(KeyCheckSkippedWarning, match="kms serve"):
        check_key_id(spark, "nope", catalog=name)
    with pytest.raises(config.InvalidArgumentError, match="no Python KMS is registered under 'unregistered'"):
        spark.conf.set(f"spark.sql.catalog.{name}.pyiceberg-crypto.kms-service", "")
        spark.conf.set(f"spark.sql.catalog.{name}.pyiceberg-crypto.kms-name", "unregistered")
        check_key_id(spark, "nope", catalog=name)
