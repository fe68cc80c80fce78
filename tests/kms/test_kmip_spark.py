"""The KMIP KMS through the Spark spine, against a real PyKMIP server on 127.0.0.1 (mutual TLS):
create, write, read, rotate (a new key with the same Name), re-wrap the KEKs, retire the old key,
verify, read without a JVM."""

from __future__ import annotations

import base64
import json
import time
import uuid
from pathlib import Path

import pytest

pytest.importorskip("kmip")

from pyiceberg_crypto import config  # noqa: E402
from pyiceberg_crypto.bridge import register_kms  # noqa: E402
from pyiceberg_crypto.keys.rewrap import rewrap_keks  # noqa: E402
from pyiceberg_crypto.kms.loader import load_kms  # noqa: E402
from pyiceberg_crypto.verify import verify_metadata  # noqa: E402
from tests.conftest import add_catalog  # noqa: E402
from tests.kms.kmip_server import KmipTestServer  # noqa: E402
from tests.testkit import metadata_location  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.loopback]


def _wrapping_uids(kms, metadata: str, key_id: str) -> set[str]:
    document = json.loads(Path(metadata.removeprefix("file:")).read_text())
    return {kms.key_version(base64.b64decode(k["encrypted-key-metadata"]), key_id)
            for k in document["encryption-keys"] if k.get("encrypted-by-id") == key_id}


def test_kmip_spark_spine(spark, tmp_path):
    with KmipTestServer(tmp_path / "kmip") as server:
        first = server.create_key("lake-orders")
        props = server.client_properties(**{"kmip.timeout": "5"})
        # The driver's KMS starts with the wrong port; the catalog's pyiceberg-crypto.kms.kmip.* properties
        # (prefix removed, through initialize) point it at the server before the first key operation.
        kms = load_kms("kmip", {**props, "kmip.port": "1"})
        catalog_props = {f"pyiceberg-crypto.kms.kmip.{name}": props[f"kmip.{name}"] for name in ("port", "timeout")}
        suffix = uuid.uuid4().hex[:6]
        # The catalogs of one session share its metastore: a namespace of its own (tests/keys has db.orders).
        catalog, table = f"kmip_{suffix}", f"kmip_{suffix}.kmip_{suffix}.orders"
        with register_kms(spark, kms, name=f"kmip-{suffix}") as registration:
            add_catalog(spark, catalog, warehouse=tmp_path / "wh", kms_name=f"kmip-{suffix}",
                        extra_catalog_properties=catalog_props)
            spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.kmip_{suffix}")
            tbl = config.tblproperties_sql(config.table_properties("lake-orders"))
            spark.sql(f"CREATE TABLE {table} (id bigint, v string) USING iceberg {tbl}")
            spark.sql(f"INSERT INTO {table} VALUES (1, 'a'), (2, 'b')")
            rows = sorted(tuple(r) for r in spark.table(table).collect())
            assert rows == [(1, "a"), (2, "b")]
            assert registration.stats.wrap >= 1 and registration.stats.errors == 0
            assert kms.port == server.port
            before = metadata_location(spark, table)
            assert _wrapping_uids(kms, before, "lake-orders") == {first}

            time.sleep(1.1)  # the behaviour: Initial Date has one-second resolution, the new key is strictly newer
            second = server.create_key("lake-orders")  # rotation: same Name, the old key still Active
            result = rewrap_keks(spark, table)
            assert result.committed and result.changes
            assert all(c.old_version == first and c.new_version == second for c in result.changes)
            spark.sql(f"INSERT INTO {table} VALUES (3, 'c')")
            rows = sorted(tuple(r) for r in spark.table(table).collect())
            after = metadata_location(spark, table)
        assert rows == [(1, "a"), (2, "b"), (3, "c")]
        assert _wrapping_uids(kms, after, "lake-orders") == {second}

        # The old key is no longer needed: retire it (Revoke), then verify and read without a JVM.
        server.deactivate(first)
        fresh = load_kms("kmip", props)
        assert verify_metadata(after, fresh).ok
        from pyiceberg_crypto.read import read_table

        arrow = read_table(after, fresh)
        assert sorted(zip(arrow.column("id").to_pylist(), arrow.column("v").to_pylist())) == rows
        # The CLI, with the KMS by short name and properties.
        from pyiceberg_crypto.cli.main import main

        cli = ["verify", after, "--kms", "kmip", "--json"]
        for name, value in props.items():
            cli += ["--kms-property", f"{name}={value}"]
        assert main(cli) == 0
        # The metadata before the re-wrap has only KEKs wrapped by the retired key: unreadable now.
        assert verify_metadata(before, fresh).ok is False
