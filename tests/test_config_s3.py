"""Builders for S3 warehouses: S3FileIO properties, the AWS bundle jar only when needed, no secrets."""

from __future__ import annotations

import pytest

from pyiceberg_crypto.errors import InvalidArgumentError
from pyiceberg_crypto import config, jars

METASTORE = "thrift://127.0.0.1:9083"


@pytest.mark.jars
def test_s3_warehouse_selects_s3fileio_and_adds_the_aws_bundle():
    settings = config.spark_settings(
        "lake", warehouse="s3://bucket/wh", metastore_uri=METASTORE, jars="packages",
        s3_endpoint="http://127.0.0.1:9000", s3_region="eu-west-1", s3_path_style_access=True,
    )
    assert settings["spark.sql.catalog.lake.io-impl"] == "org.apache.iceberg.aws.s3.S3FileIO"
    assert settings["spark.sql.catalog.lake.s3.endpoint"] == "http://127.0.0.1:9000"
    assert settings["spark.sql.catalog.lake.s3.path-style-access"] == "true"
    assert settings["spark.sql.catalog.lake.client.region"] == "eu-west-1"
    assert settings["spark.jars.packages"].split(",")[1] == "org.apache.iceberg:iceberg-aws-bundle:1.12.0"
    assert not any("secret" in key or "access-key" in key for key in settings)


@pytest.mark.parametrize("warehouse", ["s3a://bucket/wh", "s3n://bucket/wh"])
@pytest.mark.jars
def test_every_s3_scheme_uses_s3fileio_with_aws_defaults(warehouse):
    settings = config.spark_settings("lake", warehouse=warehouse, metastore_uri=METASTORE)
    assert settings["spark.sql.catalog.lake.io-impl"] == config.S3_FILE_IO
    assert "spark.sql.catalog.lake.s3.endpoint" not in settings  # AWS itself


@pytest.mark.parametrize("mode", ["packages", "local"])
@pytest.mark.jars
def test_local_warehouse_has_no_aws_jar_and_no_io_impl(tmp_path, mode):
    if mode == "local" and jars.local_jars_dir() is None:
        pytest.skip(f"{jars.JARS_DIR_ENV} is not set (make sets it)")
    settings = config.spark_settings("lake", warehouse=tmp_path / "wh", jars=mode)
    assert "iceberg-aws-bundle" not in settings.get("spark.jars", "") + settings.get("spark.jars.packages", "")
    assert not any(key.endswith(".io-impl") for key in settings)


@pytest.mark.jars
def test_packages_mode_resolves_the_aws_bundle_too():
    settings = config.spark_settings("c", warehouse="s3://b/wh", metastore_uri=METASTORE, jars="packages",
                                     spark_version="3.5.9")
    assert settings["spark.jars.packages"].split(",") == [
        "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.12.0", "org.apache.iceberg:iceberg-aws-bundle:1.12.0",
        jars.bridge_artifact().coordinate]


@pytest.mark.jars
def test_local_mode_puts_the_aws_bundle_file_on_spark_jars(tmp_path):
    for name in ("iceberg-spark-runtime-4.1_2.13-1.12.0.jar", "iceberg-aws-bundle-1.12.0.jar"):
        (tmp_path / name).write_bytes(b"PK")
    settings = config.spark_settings("c", warehouse="s3://b/wh", metastore_uri=METASTORE, jars_dir=tmp_path,
                                     spark_version="4.1.4")
    assert settings["spark.jars"].split(",") == [
        str(jars.bridge_jar()), str(tmp_path / "iceberg-spark-runtime-4.1_2.13-1.12.0.jar"),
        str(tmp_path / "iceberg-aws-bundle-1.12.0.jar")]
    assert "spark.jars.packages" not in settings


@pytest.mark.parametrize("key", config.SECRET_PROPERTIES)
@pytest.mark.jars
def test_credentials_in_catalog_properties_are_refused(key):
    with pytest.raises(InvalidArgumentError, match="AWS_ACCESS_KEY_ID"):
        config.spark_settings("c", warehouse="s3://b/wh", metastore_uri=METASTORE,
                              extra_catalog_properties={key: "AKIA-not-a-real-one"})


@pytest.mark.jars
def test_s3_warehouse_with_embedded_metastore_needs_a_metastore_dir():
    with pytest.raises(InvalidArgumentError, match="metastore_dir is required"):
        config.spark_settings("c", warehouse="s3://b/wh")


def test_bad_endpoint_is_refused():
    with pytest.raises(InvalidArgumentError, match="s3_endpoint"):
        config.s3_catalog_properties("127.0.0.1:9000")
