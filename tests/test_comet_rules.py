"""Comet without a JVM: the settings ``spark_settings(accelerator="comet")`` adds (both jar
channels), the refusal on Spark 3.5, ``jars download --comet`` and its pin, and Comet's rules in
"readable by" (:mod:`pyiceberg_crypto.engines`). The local[2] session: tests/integration/test_comet.py."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from pyiceberg_crypto import config, engines, jars
from pyiceberg_crypto.cli.main import main
from pyiceberg_crypto.errors import InvalidArgumentError
from pyiceberg_crypto.properties import READERS_PROPERTY
from pyiceberg_crypto.audit.html import readable_by_text

COMET_COORDINATE = "org.apache.datafusion:comet-spark-spark4.1_2.13:1.2.0"
COMET_JAR = "comet-spark-spark4.1_2.13-1.2.0.jar"
DV = ("deletion-vector", "PUFFIN", True)
DATA = ("data", "PARQUET", True)


def _comet(census, **kwargs) -> engines.Readability:
    answers = {a.engine: a for a in engines.readable_by(census, encrypted_table=True, **kwargs)}
    complete = {"complete": kwargs["complete"]} if "complete" in kwargs else {}
    assert {k: v for k, v in answers.items() if k != "comet"} == {
        a.engine: a for a in engines.readable_by(census, encrypted_table=True, **complete) if a.engine != "comet"}, \
        "the other engines' answers do not depend on the key length or the format"
    return answers["comet"]


def _local_jars(tmp_path, line="4.1.4"):
    for artifact in jars.artifacts(jars.spark_line(line), comet=True, local=True):
        (tmp_path / artifact.file_name).write_bytes(b"PK")
    return tmp_path


@pytest.mark.jars
def test_comet_settings_with_local_jars_put_the_jar_on_every_class_path(tmp_path):
    directory = tmp_path / "jars"
    directory.mkdir()
    _local_jars(directory)
    settings = config.spark_settings("lake", warehouse=tmp_path / "wh", jars_dir=directory, spark_version="4.1.4",
                                     accelerator="comet")
    jar = str(directory / COMET_JAR)
    assert jar in settings["spark.jars"].split(",")
    assert settings["spark.driver.extraClassPath"] == settings["spark.executor.extraClassPath"] == jar
    assert {k: settings[k] for k in config.comet_settings()} == config.comet_settings()
    assert settings["spark.plugins"] == "org.apache.spark.CometPlugin"
    assert settings["spark.shuffle.manager"] == "org.apache.spark.sql.comet.execution.shuffle.CometShuffleManager"
    assert all(settings[f"spark.comet.{k}"] == "true"
               for k in ("enabled", "exec.enabled", "exec.shuffle.enabled", "scan.icebergNative.enabled"))
    assert settings["spark.memory.offHeap.enabled"] == "true" and settings["spark.memory.offHeap.size"] == "1g"
    plain = config.spark_settings("lake", warehouse=tmp_path / "wh", jars_dir=directory, spark_version="4.1.4")
    assert not set(config.comet_settings()) & set(plain) and "extraClassPath" not in str(plain)
    assert COMET_JAR not in plain["spark.jars"]


@pytest.mark.jars
def test_comet_settings_with_packages_use_the_coordinate(tmp_path, monkeypatch):
    monkeypatch.delenv(jars.JARS_DIR_ENV, raising=False)
    settings = config.spark_settings("lake", warehouse=tmp_path / "wh", spark_version="4.1.4", accelerator="comet")
    assert COMET_COORDINATE in settings["spark.jars.packages"].split(",")
    assert "spark.jars" not in settings  # one channel for every jar
    assert settings["spark.plugins"] == "org.apache.spark.CometPlugin"


@pytest.mark.jars
def test_comet_builder_merges_plugins_and_class_paths(tmp_path):
    directory = tmp_path / "jars"
    directory.mkdir()
    _local_jars(directory)
    builder = (SparkSession.builder.config("spark.plugins", "com.example.Other")
               .config("spark.driver.extraClassPath", "/opt/other.jar"))
    settings = config.spark_settings("lake", warehouse=tmp_path / "wh", jars_dir=directory, spark_version="4.1.4",
                                     accelerator="comet")
    options = config.configure_spark_with_encryption(builder, settings)._options
    assert options["spark.plugins"] == "com.example.Other,org.apache.spark.CometPlugin"
    assert options["spark.driver.extraClassPath"] == f"/opt/other.jar:{directory / COMET_JAR}"


def test_comet_on_spark_3_5_is_refused_clearly(tmp_path, monkeypatch):
    monkeypatch.delenv(jars.JARS_DIR_ENV, raising=False)
    for jar_mode in ("packages", "local"):
        with pytest.raises(InvalidArgumentError) as refused:
            config.spark_settings("lake", warehouse=tmp_path / "wh", spark_version="3.5.7", jars=jar_mode,
                                  jars_dir=tmp_path, accelerator="comet")
        assert str(refused.value).startswith("Comet is not supported on Spark 3.5: Comet 1.2.0 is served and "
                                             "measured with Iceberg 1.12.0 here for Spark 4.1 only")
    with pytest.raises(InvalidArgumentError, match="accelerator must be None or one of 'comet', got 'gluten'"):
        config.spark_settings("lake", warehouse=tmp_path / "wh", spark_version="4.1.4", accelerator="gluten")


def test_comet_jar_is_pinned_and_download_refuses_3_5_alone(tmp_path, capsys):
    artifact = jars.comet_artifact(jars.spark_line("4.1.4"))
    assert artifact.coordinate == COMET_COORDINATE
    assert jars.PINNED_SHA256[artifact.file_name] == "5055c43dca9e8cce83c33b1ff25646d1436c94698ca48beb3475bf60843b8d37"
    assert main(["jars", "download", str(tmp_path / "d"), "--spark", "3.5", "--comet"]) == 2
    assert "Comet is not supported on Spark 3.5" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()
    assert main(["jars", "show", "--spark", "4.1.4", "--comet", "--json"]) == 0
    assert COMET_COORDINATE in capsys.readouterr().out


def test_comet_readable_by_16_and_32_byte_keys_is_native():
    for length in (None, 16, 32):
        answer = _comet({DATA: 3, DV: 1}, data_key_length=length, format_version=3)
        assert (answer.readable, answer.native, answer.reasons) == (True, True, ())
        assert answer.to_dict()["native"] is True


def test_comet_readable_by_24_byte_keys_falls_back_and_says_why():
    answer = _comet({DATA: 3}, data_key_length=24, format_version=3)
    assert answer.readable is True and answer.native is False
    assert answer.reasons == ("falls back to Spark's scan: encryption.data-key-length=24 (AES-192): a 192-bit data "
                              "key is not yet supported natively",)


def test_comet_readable_by_other_files_and_formats_fall_back_or_are_not_known():
    avro = _comet({("data", "AVRO", True): 2}, format_version=3)
    assert avro.native is False and "2 encrypted data files (Avro): not read natively" in avro.reasons[0]
    assert _comet({DATA: 1}, format_version=2).native is False
    assert _comet({DATA: 1}).native is None  # no format version given: not claimed
    assert _comet({DATA: 1}, format_version=3, complete=False).native is None
    unreadable = _comet({("data", "ORC", True): 1}, format_version=3)
    assert unreadable.readable is False and unreadable.native is False  # what Spark cannot read, Comet cannot


def test_comet_readable_by_keeps_the_other_engines_dicts_and_declares_a_fallback():
    answers = engines.readable_by({DATA: 1}, encrypted_table=True, data_key_length=24, format_version=3)
    assert [a.engine for a in answers] == ["spark", "trino", "jvm-free", "comet"]
    assert all("native" not in a.to_dict() for a in answers[:3])
    name, detail = engines.readers_check({READERS_PROPERTY: "spark,comet"}, answers)
    assert name == "declared-reader-blocked" and "names comet, which does not read the current snapshot natively" in detail
    native = engines.readable_by({DATA: 1}, encrypted_table=True, data_key_length=32, format_version=3)
    assert engines.readers_check({READERS_PROPERTY: "comet"}, native) is None
    with pytest.raises(InvalidArgumentError, match="readers names comet, which reads natively only 16 or 32-byte"):
        config.table_properties("k1", readers=("comet",), data_key_length=24)
    assert config.table_properties("k1", readers=("comet",), data_key_length=32)[READERS_PROPERTY] == "comet"


def test_comet_readable_by_in_the_verify_text_and_the_audit_page():
    answers = [a.to_dict() for a in engines.readable_by({DATA: 1, DV: 1}, encrypted_table=True, data_key_length=24,
                                                       format_version=3)]
    assert readable_by_text(answers) == "spark, jvm-free (not trino); comet falls back to Spark"
