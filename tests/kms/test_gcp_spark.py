"""The Google Cloud KMS provider through the Spark spine, against the loopback stand-in of the Cloud KMS
REST API: create, write, read, rotate (new primary version), re-wrap the KEKs, verify, read without a JVM."""

from __future__ import annotations

import uuid

import pytest

pytest.importorskip("google.cloud.kms_v1")

from pyiceberg_crypto import config  # noqa: E402
from pyiceberg_crypto.bridge import register_kms  # noqa: E402
from pyiceberg_crypto.keys.rewrap import rewrap_keks  # noqa: E402
from pyiceberg_crypto.kms.gcp import GcpKms  # noqa: E402
from pyiceberg_crypto.kms.loader import load_kms  # noqa: E402
from pyiceberg_crypto.verify import verify_metadata  # noqa: E402
from tests.conftest import add_catalog  # noqa: E402
from tests.kms.gcp_standin import CloudKmsStandIn  # noqa: E402
from tests.kms.conftest import kek_versions  # noqa: E402
from tests.testkit import metadata_location  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.loopback]


@pytest.fixture(autouse=True)
def _no_metadata_server(monkeypatch):
    """Application default credentials must never probe the GCE metadata server (a link-local
    address) from a test: every test passes credentials, and should one not, no probe is made."""
    from google.auth.compute_engine import _metadata

    monkeypatch.setattr(_metadata, "_NO_GCE_CHECK", True)  # google-auth reads NO_GCE_CHECK at import
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)


def test_gcp_kms_spark_spine(spark, tmp_path):
    cloud = CloudKmsStandIn()
    try:
        key_id = cloud.create_key("lake-orders")
        props = {"gcp.endpoint": cloud.address, "gcp.credentials-file": str(cloud.service_account(tmp_path)),
                 "gcp.timeout": "5"}
        # The driver's KMS is registered without settings (and would need ADC); the catalog's
        # pyiceberg-crypto.kms.gcp.* properties configure it before its first call.
        kms = GcpKms()
        catalog_props = {f"pyiceberg-crypto.kms.{k}": v for k, v in props.items()}
        suffix = uuid.uuid4().hex[:6]
        # One metastore serves every catalog of the session: a namespace of its own.
        catalog, table = f"gcp_{suffix}", f"gcp_{suffix}.db_{suffix}.orders"
        with register_kms(spark, kms, name=f"gcp-{suffix}") as registration:
            add_catalog(spark, catalog, warehouse=tmp_path / "wh", kms_name=f"gcp-{suffix}",
                        extra_catalog_properties=catalog_props)
            spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.db_{suffix}")
            tbl = config.tblproperties_sql(config.table_properties(key_id))
            spark.sql(f"CREATE TABLE {table} (id bigint, v string) USING iceberg {tbl}")
            spark.sql(f"INSERT INTO {table} VALUES (1, 'a'), (2, 'b')")
            rows = sorted(tuple(r) for r in spark.table(table).collect())
            assert rows == [(1, "a"), (2, "b")]
            assert registration.stats.wrap >= 1 and registration.stats.errors == 0
            assert kms.endpoint == cloud.address
            before = metadata_location(spark, table)
            assert kek_versions(before, key_id, kms) == {"1"}

            cloud.rotate(key_id)  # gcloud kms keys versions create --key lake-orders --primary
            result = rewrap_keks(spark, table)
            assert result.committed and result.changes
            assert all(c.old_version == "1" and c.new_version == "2" for c in result.changes)
            spark.sql(f"INSERT INTO {table} VALUES (3, 'c')")
            rows = sorted(tuple(r) for r in spark.table(table).collect())
            after = metadata_location(spark, table)
        assert rows == [(1, "a"), (2, "b"), (3, "c")]
        assert kek_versions(after, key_id, kms) == {"2"}

        # Version 1 no longer needed: disable it, then verify and read without a JVM.
        cloud.set_state(key_id, 1, "DISABLED")  # gcloud kms keys versions disable 1
        fresh = load_kms("gcp", props)
        assert verify_metadata(after, fresh).ok
        from pyiceberg_crypto.read import read_table

        arrow = read_table(after, fresh)
        assert sorted(zip(arrow.column("id").to_pylist(), arrow.column("v").to_pylist())) == rows
        from pyiceberg_crypto.cli.main import main

        assert main(["verify", after, "--kms", "gcp", "--kms-property", f"gcp.endpoint={cloud.address}",
                     "--kms-property", f"gcp.credentials-file={props['gcp.credentials-file']}", "--json"]) == 0
        # The metadata before the re-wrap has only version-1 KEKs, which the disabled version cannot open.
        assert verify_metadata(before, fresh).ok is False
    finally:
        cloud.close()
