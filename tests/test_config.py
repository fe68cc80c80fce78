"""Configuration builders produce exactly the expected settings and reject bad input clearly."""

from __future__ import annotations

import os

import pytest
from pyspark.sql import SparkSession

from pyiceberg_crypto.errors import InvalidArgumentError
from pyiceberg_crypto import config, jars


pytestmark = pytest.mark.spine  # the builders must give each Spark line its own runtime


@pytest.mark.jars
def test_spark_settings_embedded_metastore_exact(tmp_path, monkeypatch):
    monkeypatch.delenv(jars.JARS_DIR_ENV, raising=False)
    settings = config.spark_settings("lake", warehouse=tmp_path / "wh", kms_name="prod")
    meta = (tmp_path / "wh-metastore").absolute()
    line = jars.spark_line()
    bridge = jars.bridge_artifact()
    assert bridge.coordinate.startswith("io.pyicebergcrypto:pyiceberg-crypto-bridge:0.1.0-")
    assert settings == {
        "spark.jars.packages": f"org.apache.iceberg:iceberg-spark-runtime-{line.spark}_{line.scala}:1.12.0,"
                               + bridge.coordinate,
        "spark.jars.repositories": (jars.bridge_jar().parent / "maven").as_uri(),
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions,"
                                "io.pyicebergcrypto.bridge.ReadersGuardExtensions",
        "spark.sql.catalog.lake": "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.catalog.lake.type": "hive",
        "spark.sql.catalog.lake.warehouse": (tmp_path / "wh").absolute().as_uri(),
        "spark.sql.catalog.lake.encryption.kms-impl": "io.pyicebergcrypto.bridge.PythonKmsClient",
        "spark.sql.catalog.lake.pyiceberg-crypto.kms-name": "prod",
        "spark.sql.catalog.lake.hadoop.iceberg.engine.hive.lock-enabled": "false",
        "spark.hadoop.javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={meta}/metastore_db;create=true",
        "spark.hadoop.datanucleus.schema.autoCreateAll": "true",
        "spark.hadoop.hive.metastore.schema.verification": "false",
        "spark.hadoop.hive.metastore.warehouse.dir": (meta / "hive-warehouse").as_uri(),
        "spark.hadoop.hive.metastore.disallow.incompatible.col.type.changes": "false",
        "spark.driver.extraJavaOptions": f"-Dderby.stream.error.file={meta}/derby.log "
                                         f"-Dlog4j2.configurationFile={config.QUIET_LOG4J.as_uri()}",
    }


@pytest.mark.jars
def test_external_metastore_is_one_argument(tmp_path):
    embedded = config.spark_settings("lake", warehouse="s3a://bucket/wh", metastore_dir=tmp_path)
    external = config.spark_settings("lake", warehouse="s3a://bucket/wh", metastore_uri="thrift://10.0.0.5:9083")
    assert external["spark.sql.catalog.lake.uri"] == "thrift://10.0.0.5:9083"
    assert not any(k.startswith("spark.hadoop.javax.jdo") for k in external)
    common = {k: v for k, v in embedded.items() if k in external}
    assert set(external) - set(common) == {"spark.sql.catalog.lake.uri"}
    assert external["spark.sql.catalog.lake.warehouse"] == "s3a://bucket/wh"


@pytest.mark.jars
def test_packages_mode_and_hive_lock_option(tmp_path):
    settings = config.spark_settings("c", warehouse=tmp_path, jars="packages", hive_lock=True,
                                     spark_version="4.1.4")
    assert settings["spark.jars.packages"].split(",") == [
        "org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.12.0", jars.bridge_artifact().coordinate]
    assert "spark.jars" not in settings  # one channel: PySpark would drop the packages from executors
    assert settings["spark.sql.catalog.c.hadoop.iceberg.engine.hive.lock-enabled"] == "true"


def test_table_properties_and_sql_fragment():
    props = config.table_properties("orders-key", data_key_length=24, extra={"write.format.default": "parquet"})
    assert props == {
        "encryption.key-id": "orders-key",
        "format-version": "3",
        "encryption.data-key-length": "24",
        "write.format.default": "parquet",
    }
    assert config.tblproperties_sql({"encryption.key-id": "it's", "format-version": "3"}) == (
        "TBLPROPERTIES ('encryption.key-id'='it\\'s', 'format-version'='3')"
    )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"key_id": ""}, "key_id is required"),
        ({"key_id": None}, "key_id is required"),
        ({"key_id": "k", "data_key_length": 20}, r"data_key_length must be one of \(16, 24, 32\)"),
        ({"key_id": "k", "format_version": 2}, "format-version >= 3"),
        ({"key_id": "k", "extra": {"encryption.key-id": "x"}}, "conflicts"),
    ],
)
def test_table_properties_validation(kwargs, message):
    with pytest.raises(InvalidArgumentError, match=message):
        config.table_properties(**kwargs)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"catalog_type": "rest"}, "catalog_type='rest' needs uri="),
        ({"catalog_type": "rest", "uri": "thrift://x:9083"}, "needs uri= of the REST catalog server"),
        ({"catalog_type": "rest", "uri": "http://x:8181", "metastore_uri": "thrift://x:9083"}, "no metastore"),
        ({"uri": "http://x:8181"}, "a Hive metastore goes in metastore_uri="),
        ({"catalog_type": "glue"}, "unknown catalog type 'glue'"),
        ({"metastore_uri": "http://x:9083"}, "thrift://host:port"),
        ({"catalog": "bad name"}, "catalog must be letters"),
        ({"kms_name": ""}, "kms_name is required"),
        ({"jars": "maven"}, "jars must be one of 'auto', 'packages', 'local'"),
    ],
)
@pytest.mark.jars
def test_spark_settings_validation(tmp_path, kwargs, message):
    with pytest.raises(InvalidArgumentError, match=message):
        config.spark_settings(**{"catalog": "c", "warehouse": tmp_path, **kwargs})


def test_rest_catalog_settings_render_the_encrypting_rest_catalog_exact(tmp_path):
    settings = config.catalog_settings("lake", warehouse=tmp_path / "wh", catalog_type="rest",
                                       uri="http://127.0.0.1:8181", kms_name="prod")
    assert settings == {
        "spark.sql.catalog.lake": "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.catalog.lake.catalog-impl": "io.pyicebergcrypto.rest.EncryptingRestCatalog",
        "spark.sql.catalog.lake.uri": "http://127.0.0.1:8181",
        "spark.sql.catalog.lake.warehouse": (tmp_path / "wh").absolute().as_uri(),
        "spark.sql.catalog.lake.encryption.kms-impl": config.PYTHON_KMS_IMPL,
        "spark.sql.catalog.lake.pyiceberg-crypto.kms-name": "prod",
    }


def test_rest_catalog_settings_with_a_kms_service_render_the_service_not_a_name(tmp_path):
    """A second application (spark-sql, another PySpark driver) on a REST catalog through ``kms serve``."""
    token = tmp_path / "kms.token"
    settings = config.catalog_settings("lake", warehouse=tmp_path / "wh", catalog_type="rest",
                                       uri="http://127.0.0.1:8181", kms_service="127.0.0.1:9600",
                                       kms_token_file=token)
    assert settings == {
        "spark.sql.catalog.lake": "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.catalog.lake.catalog-impl": "io.pyicebergcrypto.rest.EncryptingRestCatalog",
        "spark.sql.catalog.lake.uri": "http://127.0.0.1:8181",
        "spark.sql.catalog.lake.warehouse": (tmp_path / "wh").absolute().as_uri(),
        "spark.sql.catalog.lake.encryption.kms-impl": config.PYTHON_KMS_IMPL,
        "spark.sql.catalog.lake.pyiceberg-crypto.kms-service": "127.0.0.1:9600",
        "spark.sql.catalog.lake.pyiceberg-crypto.kms-service.token-file": str(token.absolute()),
    }


@pytest.mark.jars
def test_rest_catalog_spark_settings_have_no_metastore(tmp_path, monkeypatch):
    monkeypatch.delenv(jars.JARS_DIR_ENV, raising=False)
    settings = config.spark_settings("lake", warehouse=tmp_path / "wh", catalog_type="rest",
                                     uri="https://rest.example:8181", kms_name="prod")
    assert settings["spark.sql.catalog.lake.catalog-impl"] == config.ENCRYPTING_REST_CATALOG_IMPL
    assert settings["spark.sql.catalog.lake.uri"] == "https://rest.example:8181"
    assert "spark.sql.catalog.lake.type" not in settings  # Iceberg refuses type together with catalog-impl
    assert not [key for key in settings if "metastore" in key or "hive" in key or "derby" in key.lower()]
    assert settings["spark.sql.extensions"] == ("org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions,"
                                                "io.pyicebergcrypto.bridge.ReadersGuardExtensions")


def test_conf_renderings(tmp_path):
    settings = {"spark.a": "1", "spark.b": "x y"}
    assert config.spark_conf_args(settings) == ["--conf", "spark.a=1", "--conf", "spark.b=x y"]
    assert config.spark_conf_lines(settings) == "  --conf spark.a=1 \\\n  --conf 'spark.b=x y'"
    assert config.spark_defaults_lines(settings) == "spark.a 1\nspark.b x y"


@pytest.mark.jars
def test_configure_builder_merges_jars_and_java_options(tmp_path, caplog):
    builder = SparkSession.builder.config("spark.jars", "/opt/other.jar").config(
        "spark.driver.extraJavaOptions", "-Dfoo=1"
    )
    (tmp_path / "jars").mkdir()
    for artifact in jars.artifacts(jars.spark_line()):
        (tmp_path / "jars" / artifact.file_name).write_bytes(b"PK")
    settings = config.spark_settings("c", warehouse=tmp_path, jars_dir=tmp_path / "jars")
    with caplog.at_level("WARNING", logger="pyiceberg_crypto.config"):
        builder = config.configure_spark_with_encryption(builder, settings)
    options = builder._options
    assert options["spark.jars"].split(",") == ["/opt/other.jar", *settings["spark.jars"].split(",")]
    assert options["spark.driver.extraJavaOptions"].startswith("-Dfoo=1 -Dderby.stream.error.file=")
    assert options["spark.sql.catalog.c.encryption.kms-impl"] == config.PYTHON_KMS_IMPL
    # one channel (files): nothing to warn about (Spark 3.5 also warns about its metastore)
    assert not [r for r in caplog.records if "spark.jars.packages" in r.getMessage()]


@pytest.mark.jars
def test_configure_builder_warns_when_both_jar_channels_are_set(tmp_path, caplog, monkeypatch):
    """A user's spark.jars beside our packages: PySpark would ship only spark.jars to executors."""
    monkeypatch.delenv(jars.JARS_DIR_ENV, raising=False)
    builder = SparkSession.builder.config("spark.jars", "/opt/jdbc-driver.jar")
    with caplog.at_level("WARNING", logger="pyiceberg_crypto.config"):
        options = config.configure_spark_with_encryption(builder, config.spark_settings("c", warehouse=tmp_path))._options
    assert options["spark.jars"] == "/opt/jdbc-driver.jar"
    [warning] = [r.getMessage() for r in caplog.records if "spark.jars.packages" in r.getMessage()]
    assert "sets both spark.jars and spark.jars.packages" in warning and "missing on a cluster" in warning
    assert jars.bridge_artifact().coordinate in warning


def test_missing_local_jar_explains_how_to_download(tmp_path, monkeypatch):
    monkeypatch.setenv(jars.JARS_DIR_ENV, str(tmp_path / "empty"))
    with pytest.raises(jars.SetupError, match=r"pyiceberg-crypto jars download .*empty"):
        config.spark_settings("c", warehouse=tmp_path)


def test_local_mode_without_a_directory_says_how_to_get_one(tmp_path, monkeypatch):
    monkeypatch.delenv(jars.JARS_DIR_ENV, raising=False)
    with pytest.raises(jars.SetupError, match="jars_dir=.*PYICEBERG_CRYPTO_JARS"):
        config.spark_settings("c", warehouse=tmp_path, jars="local")


@pytest.mark.jars
def test_configure_builder_merges_packages_and_repositories(tmp_path):
    builder = (SparkSession.builder.config("spark.jars.packages", "io.delta:delta-spark_2.13:4.0.0")
               .config("spark.jars.repositories", "https://mirror.example/maven2"))
    settings = config.spark_settings("c", warehouse=tmp_path, jars="packages", spark_version="4.1.0")
    options = config.configure_spark_with_encryption(builder, settings)._options
    assert options["spark.jars.packages"].split(",") == [
        "io.delta:delta-spark_2.13:4.0.0", "org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.12.0",
        jars.bridge_artifact().coordinate]
    assert options["spark.jars.repositories"].split(",") == [
        "https://mirror.example/maven2", jars.bridge_repository().as_uri()]


@pytest.mark.jars
def test_spark_35_embedded_metastore_warns_that_commits_have_no_swap(tmp_path, caplog):
    with caplog.at_level("WARNING", logger="pyiceberg_crypto.config"):
        config.spark_settings("c", warehouse=tmp_path, jars="packages", spark_version="3.5.9")
        config.spark_settings("c", warehouse=tmp_path, jars="packages", spark_version="4.1.4")
        config.spark_settings("c", warehouse=tmp_path, jars="packages", spark_version="3.5.9",
                              metastore_uri="thrift://127.0.0.1:9083")
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "HIVE-26882" in warnings[0] and "Spark 3.5" in warnings[0]


@pytest.mark.jars
def test_quiet_logs_is_a_log4j_file_the_builder_s_own_overrides(tmp_path):
    """issue 34: the embedded metastore's start-up chatter is kept out of the terminal by default, by a
    log4j 2 file shipped in the package; quiet_logs=False, or a builder that names its own file, wins."""
    from pyspark.sql import SparkSession

    quiet = config.spark_settings("lake", warehouse=tmp_path / "wh")
    assert config.QUIET_LOG4J.is_file() and "DataNucleus" in config.QUIET_LOG4J.read_text()
    assert quiet["spark.driver.extraJavaOptions"].endswith(f"-Dlog4j2.configurationFile={config.QUIET_LOG4J.as_uri()}")
    loud = config.spark_settings("lake", warehouse=tmp_path / "wh", quiet_logs=False)
    assert "log4j2" not in loud["spark.driver.extraJavaOptions"]
    external = config.spark_settings("lake", warehouse="s3a://b/wh", metastore_uri="thrift://h:9083")
    assert external["spark.driver.extraJavaOptions"] == f"-Dlog4j2.configurationFile={config.QUIET_LOG4J.as_uri()}"
    mine = SparkSession.builder.config("spark.driver.extraJavaOptions", "-Dlog4j2.configurationFile=mine.properties")
    options = config.configure_spark_with_encryption(mine, quiet)._options["spark.driver.extraJavaOptions"]
    assert options.count("log4j2.configurationFile") == 1 and "mine.properties" in options and "derby" in options


@pytest.mark.jars
def test_a_starting_jvm_gets_one_progress_line_on_stderr(tmp_path, monkeypatch, capsys):
    """issue 34: a first run showed nothing for 14 s while the jars resolved and the JVM started."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    monkeypatch.setattr(SparkContext, "_active_spark_context", None)
    monkeypatch.setenv("HOME", str(tmp_path))  # an empty Ivy cache: the first start
    monkeypatch.delenv("PYICEBERG_CRYPTO_QUIET", raising=False)
    settings = config.spark_settings("lake", warehouse=tmp_path / "wh", jars="packages")
    config.configure_spark_with_encryption(SparkSession.builder, settings)
    err = capsys.readouterr().err
    assert err.startswith("pyiceberg-crypto: starting Spark (first start: Spark downloads the Iceberg runtime")
    runtime = settings["spark.jars.packages"].split(",")
    (tmp_path / ".ivy2.5.2" / "jars").mkdir(parents=True)
    for coordinate in runtime:
        group, artifact, version = coordinate.split(":")
        (tmp_path / ".ivy2.5.2" / "jars" / f"{group}_{artifact}-{version}.jar").write_bytes(b"")
    config.configure_spark_with_encryption(SparkSession.builder, settings)
    assert capsys.readouterr().err == "pyiceberg-crypto: starting Spark...\n"
    monkeypatch.setenv("PYICEBERG_CRYPTO_QUIET", "1")
    config.configure_spark_with_encryption(SparkSession.builder, settings)
    assert capsys.readouterr().err == ""


# --- no silent plaintext: catalogs Iceberg 1.12.0 writes in plaintext are refused (issue 39, item 1) ---

PLAINTEXT_CATALOGS = [
    ({"type": "rest", "uri": "http://127.0.0.1:8181"}, r"type=rest .*catalog-impl=io\.pyicebergcrypto\.rest\."
                                                       r"EncryptingRestCatalog"),
    ({"type": "hadoop"}, r"type=hadoop .*plaintext.*Hive catalog"),
    ({"type": "jdbc", "uri": "jdbc:sqlite:/tmp/x.db"}, r"type=jdbc .*plaintext"),
    ({"type": "glue"}, r"type=glue"),
    ({"type": "nessie"}, r"type=nessie"),
    ({"catalog-impl": "org.apache.iceberg.rest.RESTCatalog"}, r"catalog-impl=org\.apache\.iceberg\.rest\.RESTCatalog ignores.*"
                                                               r"catalog-impl=io\.pyicebergcrypto"),
    ({"catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog"}, r"catalog-impl=org\.apache\.iceberg\.jdbc\.JdbcCatalog ignores encryption\.key-id"),
    ({"catalog-impl": "org.apache.iceberg.hadoop.HadoopCatalog"}, r".*HadoopCatalog"),
    ({"catalog-impl": "org.apache.iceberg.inmemory.InMemoryCatalog"}, r".*InMemoryCatalog"),
]


@pytest.mark.parametrize("kind,why", PLAINTEXT_CATALOGS, ids=lambda v: str(v)[:40])
def test_catalog_settings_refuse_a_kms_on_a_catalog_that_writes_plaintext(tmp_path, kind, why):
    """The builders never render a KMS for a catalog whose tables Iceberg 1.12.0 writes in
    plaintext; the message names the catalog and the setting that encrypts."""
    with pytest.raises(InvalidArgumentError, match=rf"catalog 'lake' has a KMS but would write its tables in plaintext: {why}"):
        config.catalog_settings("lake", warehouse=tmp_path / "wh", extra_catalog_properties=kind)


def test_the_refusal_covers_a_default_key_id_and_spares_catalogs_that_encrypt_or_ask_nothing(tmp_path):
    iceberg = {"spark.sql.catalog.lake": "org.apache.iceberg.spark.SparkCatalog"}
    hadoop = {**iceberg, "spark.sql.catalog.lake.type": "hadoop"}
    config.refuse_plaintext_catalogs(hadoop)  # no KMS, no key id: a plain catalog, not a trap
    with pytest.raises(InvalidArgumentError, match="catalog 'lake'.*type=hadoop"):
        config.refuse_plaintext_catalogs({**hadoop, "spark.sql.catalog.lake.table-default.encryption.key-id": "k1"})
    with pytest.raises(InvalidArgumentError, match="catalog 'lake'.*type=hadoop"):
        config.refuse_plaintext_catalogs({**hadoop, "spark.sql.catalog.lake.pyiceberg-crypto.kms-service": "h:1"})
    asks = {"spark.sql.catalog.lake.encryption.kms-impl": config.PYTHON_KMS_IMPL}
    for encrypting in ({"spark.sql.catalog.lake.type": "hive"}, {},
                       {"spark.sql.catalog.lake.catalog-impl": config.ENCRYPTING_REST_CATALOG_IMPL},
                       {"spark.sql.catalog.lake.catalog-impl": "org.apache.iceberg.hive.HiveCatalog"},
                       {"spark.sql.catalog.lake.catalog-impl": "com.example.OwnHiveCatalog"}):  # not judged
        config.refuse_plaintext_catalogs({**iceberg, **asks, **encrypting})
    # not an Iceberg catalog of Spark: not judged
    config.refuse_plaintext_catalogs({"spark.sql.catalog.other": "com.example.Catalog",
                                      "spark.sql.catalog.other.type": "rest", **asks})
    assert config.catalog_settings("lake", warehouse=tmp_path / "wh", catalog_type="rest",
                                   uri="http://127.0.0.1:8181")  # the encrypting REST catalog


def test_configure_spark_with_encryption_refuses_type_rest_before_touching_the_builder(tmp_path):
    """The trap as a user meets it: the catalog settings with ``type=rest`` and the server's uri
    (what the test REST server used to print): refused, and the builder is left as it was."""
    settings = config.catalog_settings("lake", warehouse=tmp_path / "wh")
    settings["spark.sql.catalog.lake.type"] = "rest"
    settings["spark.sql.catalog.lake.uri"] = "http://127.0.0.1:8181"
    builder = SparkSession.builder.config("spark.app.name", "probe")
    before = dict(builder._options)
    with pytest.raises(InvalidArgumentError, match=r"catalog 'lake'.*type=rest.*catalog-impl=io\.pyicebergcrypto\.rest\."
                                          r"EncryptingRestCatalog"):
        config.configure_spark_with_encryption(builder, settings)
    assert builder._options == before
    # a builder that already holds such a catalog is refused too, whatever settings are added
    trap = SparkSession.builder
    for key, value in settings.items():
        trap = trap.config(key, value)
    with pytest.raises(InvalidArgumentError, match="catalog 'lake'"):
        config.configure_spark_with_encryption(trap, {"spark.sql.shuffle.partitions": "2"})


@pytest.mark.parametrize("catalog", [None, ""])
def test_a_local_session_needs_its_catalogs_name(catalog, tmp_path):
    with pytest.raises(InvalidArgumentError, match="a local session with a warehouse needs the name of its catalog"):
        config.session_for_catalog(catalog, warehouse=tmp_path / "wh")
    assert not (tmp_path / "wh").exists()


def test_adopt_a_local_session_runs_its_python_workers_on_this_interpreter(monkeypatch):
    """issue 61: the CLI's own --warehouse session (encrypt, keys, the verification job) set no
    executor Python, so tasks outside an activated virtual environment ran the system python3
    (ModuleNotFoundError: fastavro). PySpark's SparkContext reads PYSPARK_PYTHON when it starts."""
    import sys

    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    config.local_spark_builder("t")
    assert os.environ["PYSPARK_PYTHON"] == sys.executable
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/python/bin/python3")  # the user's choice stands
    config.local_spark_builder("t")
    assert os.environ["PYSPARK_PYTHON"] == "/opt/python/bin/python3"
