"""AWS KMS (moto on loopback): the inventory reports the KMS key ARN that wraps each KEK; moving the
table's alias to a new KMS key makes the KEKs outdated (and unreadable through the alias: the KMS
reports the old key), the re-wrap moves them to the new key in one commit, and with the old key
disabled every snapshot still reads and verifies."""

from __future__ import annotations

import uuid

import pytest

from pyiceberg_crypto import config
from pyiceberg_crypto.bridge import register_kms
from pyiceberg_crypto.keys import key_inventory, rewrap_keks
from pyiceberg_crypto.kms import AwsKms
from pyiceberg_crypto.verify import verify_metadata
from pyiceberg_crypto.verify.report import KEY_ERROR, WARN
from tests.conftest import add_catalog
from tests.kms.conftest import aws_properties, kms_admin, moto_kms_endpoint  # noqa: F401 (fixtures)
from tests.testkit import metadata_location

pytestmark = pytest.mark.loopback


def test_alias_moved_to_a_new_key_rewrap_then_disable_the_old_key(spark, tmp_path, kms_admin, aws_properties):
    old_key = kms_admin.create_key(Description="orders v1")["KeyMetadata"]
    new_key = kms_admin.create_key(Description="orders v2")["KeyMetadata"]
    alias = f"alias/orders-{uuid.uuid4().hex[:8]}"
    kms_admin.create_alias(AliasName=alias, TargetKeyId=old_key["KeyId"])
    suffix = uuid.uuid4().hex[:6]
    catalog, name = f"aws_{suffix}", f"aws-{suffix}"
    kms = AwsKms.from_properties(aws_properties)
    with register_kms(spark, kms, name=name):
        add_catalog(spark, catalog, warehouse=tmp_path / "wh", kms_name=name)
        table = f"{catalog}.db.orders"
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.db")
        spark.sql(f"CREATE TABLE {table} (id bigint) USING iceberg {config.tblproperties_sql(config.table_properties(alias))}")
        spark.sql(f"INSERT INTO {table} VALUES (1), (2)")
        spark.sql(f"INSERT INTO {table} VALUES (3)")
        snapshots = [r[0] for r in spark.sql(f"SELECT snapshot_id FROM {table}.snapshots").collect()]

        inventory = key_inventory(spark, table)
        assert {(k.master_key_id, k.master_key_version, k.outdated) for k in inventory.keks} == {
            (alias, old_key["Arn"], False)}

        kms_admin.update_alias(AliasName=alias, TargetKeyId=new_key["KeyId"])
        inventory = key_inventory(spark, table, kms=AwsKms.from_properties(aws_properties))
        assert {(k.master_key_version, k.current_master_key_version) for k in inventory.keks} == {
            (old_key["Arn"], new_key["Arn"])}
        before = verify_metadata(metadata_location(spark, table), AwsKms.from_properties(aws_properties))
        assert {c.status for c in before.checks if c.name == "kek"} == {KEY_ERROR}  # the alias names the new key now
        assert {c.status for c in before.checks if c.name == "kek-rotation"} == {WARN}

        result = rewrap_keks(spark, table, kms=AwsKms.from_properties(aws_properties))
        assert result.committed and {(c.old_version, c.new_version) for c in result.changes} == {
            (old_key["Arn"], new_key["Arn"])}
        kms_admin.disable_key(KeyId=old_key["KeyId"])

    fresh = f"{catalog}_fresh"
    with register_kms(spark, AwsKms.from_properties(aws_properties), name=fresh):
        add_catalog(spark, fresh, warehouse=tmp_path / "wh", kms_name=fresh)
        assert sorted(r[0] for r in spark.table(f"{fresh}.db.orders").collect()) == [1, 2, 3]
        for snapshot_id in snapshots:
            assert spark.sql(f"SELECT count(*) FROM {fresh}.db.orders VERSION AS OF {snapshot_id}").first()[0] >= 2
    report = verify_metadata(metadata_location(spark, table), AwsKms.from_properties(aws_properties), all_snapshots=True)
    assert report.ok, (report.failed_checks(), report.not_ok())
    assert {k.master_key_version for k in key_inventory(spark, table, kms=AwsKms.from_properties(aws_properties)).keks} == {
        new_key["Arn"]}
