"""The Vault Transit KMS through the Spark spine, against the loopback stand-in of the Transit API:
create, write, read, rotate the Transit key, re-wrap the KEKs, verify, read without a JVM."""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path

import pytest

pytest.importorskip("hvac")

from pyiceberg_crypto import config  # noqa: E402
from pyiceberg_crypto.bridge import register_kms  # noqa: E402
from pyiceberg_crypto.keys.rewrap import rewrap_keks  # noqa: E402
from pyiceberg_crypto.kms.loader import load_kms  # noqa: E402
from pyiceberg_crypto.verify import verify_metadata  # noqa: E402
from tests.conftest import add_catalog  # noqa: E402
from tests.kms.vault_standin import TransitStandIn  # noqa: E402
from tests.testkit import metadata_location  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.loopback]


def _versions(metadata: str, key_id: str) -> list[bytes]:
    document = json.loads(Path(metadata.removeprefix("file:")).read_text())
    return sorted(base64.b64decode(k["encrypted-key-metadata"])[:9]
                  for k in document["encryption-keys"] if k.get("encrypted-by-id") == key_id)


def test_vault_transit_spark_spine(spark, tmp_path, monkeypatch):
    vault = TransitStandIn()
    try:
        vault.create_key("lake-orders")
        monkeypatch.setenv("VAULT_TOKEN", vault.root_token)
        props = {"vault.address": vault.address, "vault.timeout": "5"}
        suffix = uuid.uuid4().hex[:6]
        # The catalogs of one session share its metastore: a namespace of its own (tests/keys has db.orders).
        catalog, table = f"vault_{suffix}", f"vault_{suffix}.vault_{suffix}.orders"
        with register_kms(spark, load_kms("vault", props), name=f"vault-{suffix}") as registration:
            add_catalog(spark, catalog, warehouse=tmp_path / "wh", kms_name=f"vault-{suffix}")
            spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.vault_{suffix}")
            tbl = config.tblproperties_sql(config.table_properties("lake-orders"))
            spark.sql(f"CREATE TABLE {table} (id bigint, v string) USING iceberg {tbl}")
            spark.sql(f"INSERT INTO {table} VALUES (1, 'a'), (2, 'b')")
            rows = sorted(tuple(r) for r in spark.table(table).collect())
            assert rows == [(1, "a"), (2, "b")]
            assert registration.stats.wrap >= 1 and registration.stats.errors == 0
            before = metadata_location(spark, table)
            assert _versions(before, "lake-orders") and all(
                w.startswith(b"vault:v1:") for w in _versions(before, "lake-orders"))

            vault.rotate("lake-orders")  # vault write -f transit/keys/lake-orders/rotate
            result = rewrap_keks(spark, table)
            assert result.committed and result.changes
            assert all(c.old_version == "v1" and c.new_version == "v2" for c in result.changes)
            spark.sql(f"INSERT INTO {table} VALUES (3, 'c')")
            rows = sorted(tuple(r) for r in spark.table(table).collect())
            after = metadata_location(spark, table)
        assert rows == [(1, "a"), (2, "b"), (3, "c")]
        assert all(w.startswith(b"vault:v2:") for w in _versions(after, "lake-orders"))

        # v1 no longer needed: raise min_decryption_version, then verify and read without a JVM.
        vault.keys["lake-orders"]["min_dec"] = 2
        kms = load_kms("vault", props)
        report = verify_metadata(after, kms)
        assert report.ok
        from pyiceberg_crypto.read import read_table

        arrow = read_table(after, kms)
        assert sorted(zip(arrow.column("id").to_pylist(), arrow.column("v").to_pylist())) == rows
        # The CLI, with the KMS by short name and properties (token from VAULT_TOKEN).
        from pyiceberg_crypto.cli.main import main

        assert main(["verify", after, "--kms", "vault", "--kms-property", f"vault.address={vault.address}",
                     "--json"]) == 0
        # The metadata before the re-wrap has only v1-wrapped KEKs, which v1's retirement makes unreadable.
        assert verify_metadata(before, kms).ok is False
    finally:
        vault.close()
