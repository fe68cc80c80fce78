"""The Azure Key Vault provider through the Spark spine, against the HTTPS loopback stand-in of the Key
Vault keys REST API: create, write, read, rotate (new current version), re-wrap the KEKs, verify, read
without a JVM."""

from __future__ import annotations

import uuid

import pytest

pytest.importorskip("azure.keyvault.keys")

from pyiceberg_crypto import config  # noqa: E402
from pyiceberg_crypto.bridge import register_kms  # noqa: E402
from pyiceberg_crypto.keys.rewrap import rewrap_keks  # noqa: E402
from pyiceberg_crypto.kms.loader import load_kms  # noqa: E402
from pyiceberg_crypto.verify import verify_metadata  # noqa: E402
from tests.conftest import add_catalog  # noqa: E402
from tests.kms.azure_standin import KeyVaultStandIn  # noqa: E402
from tests.kms.conftest import kek_versions  # noqa: E402
from tests.testkit import metadata_location  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.loopback]


def test_azure_key_vault_spark_spine(spark, tmp_path):
    vault = KeyVaultStandIn()
    try:
        key_id = vault.create_key("lake-orders")
        first = vault.keys["lake-orders"]["order"][0]
        token = tmp_path / "token"
        token.write_text(vault.principal("lake-writer"))
        props = {"azure.auth": "static-token", "azure.token-file": str(token), "azure.ca-cert": vault.ca_cert,
                 "azure.timeout": "5"}
        kms = load_kms("azure", props)
        suffix = uuid.uuid4().hex[:6]
        # One metastore serves every catalog of the session: a namespace of its own.
        catalog, table = f"azure_{suffix}", f"azure_{suffix}.db_{suffix}.orders"
        with register_kms(spark, kms, name=f"azure-{suffix}") as registration:
            add_catalog(spark, catalog, warehouse=tmp_path / "wh", kms_name=f"azure-{suffix}")
            spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.db_{suffix}")
            tbl = config.tblproperties_sql(config.table_properties(key_id))
            spark.sql(f"CREATE TABLE {table} (id bigint, v string) USING iceberg {tbl}")
            spark.sql(f"INSERT INTO {table} VALUES (1, 'a'), (2, 'b')")
            rows = sorted(tuple(r) for r in spark.table(table).collect())
            assert rows == [(1, "a"), (2, "b")]
            assert registration.stats.wrap >= 1 and registration.stats.errors == 0
            before = metadata_location(spark, table)
            assert kek_versions(before, key_id, kms) == {first}

            second = vault.rotate("lake-orders")  # az keyvault key rotate --name lake-orders
            result = rewrap_keks(spark, table)
            assert result.committed and result.changes
            assert all(c.old_version == first and c.new_version == second for c in result.changes)
            spark.sql(f"INSERT INTO {table} VALUES (3, 'c')")
            rows = sorted(tuple(r) for r in spark.table(table).collect())
            after = metadata_location(spark, table)
        assert rows == [(1, "a"), (2, "b"), (3, "c")]
        assert kek_versions(after, key_id, kms) == {second}

        # The first version no longer needed: disable it, then verify and read without a JVM.
        vault.set_enabled("lake-orders", first, False)  # az keyvault key set-attributes --version ... --enabled false
        fresh = load_kms("azure", props)
        assert verify_metadata(after, fresh).ok
        from pyiceberg_crypto.read import read_table

        arrow = read_table(after, fresh)
        assert sorted(zip(arrow.column("id").to_pylist(), arrow.column("v").to_pylist())) == rows
        from pyiceberg_crypto.cli.main import main

        assert main(["verify", after, "--kms", "azure", *[a for k, v in props.items()
                                                          for a in ("--kms-property", f"{k}={v}")], "--json"]) == 0
        # The metadata before the re-wrap has only KEKs of the first version, which is disabled now.
        assert verify_metadata(before, fresh).ok is False
    finally:
        vault.close()
