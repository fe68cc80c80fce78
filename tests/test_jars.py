"""JVM artifacts by coordinates: the Spark line picks the runtime, unsupported lines fail clearly,
offline downloads are checked against pinned SHA-256 sums, and the CLI says what a session gets."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys

import pytest

from pyiceberg_crypto import config, jars
from pyiceberg_crypto.errors import SetupError
from pyiceberg_crypto.testing import jars as testing_jars
from pyiceberg_crypto.cli.main import main
from tests.testkit import ROOT

pytestmark = pytest.mark.spine


@pytest.mark.parametrize(
    ("version", "coordinate"),
    [
        ("3.5.0", "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.12.0"),
        ("3.5.9", "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.12.0"),
        ("4.1.4", "org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.12.0"),
        ("4.1.0.dev1", "org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.12.0"),
    ],
)
@pytest.mark.jars
def test_the_spark_line_picks_the_runtime(version, coordinate):
    assert jars.runtime_artifact(jars.spark_line(version)).coordinate == coordinate
    settings = config.jar_settings("packages", spark_version=version)
    assert settings["spark.jars.packages"] == f"{coordinate},{jars.bridge_artifact().coordinate}"


@pytest.mark.parametrize("version", ["3.4.4", "4.0.1", "4.2.0", "4.3.0", "2.4.8", "nonsense"])
def test_unsupported_spark_fails_at_build_naming_the_supported_lines(tmp_path, version):
    with pytest.raises(SetupError) as info:
        config.spark_settings("c", warehouse=tmp_path, spark_version=version)
    message = str(info.value)
    assert f"pyspark {version} is not supported" in message
    assert "Spark 3.5.x (Scala 2.12) and Spark 4.1.x (Scala 2.13)" in message
    assert "Traceback" not in message


def test_the_installed_pyspark_is_a_supported_line():
    line = jars.spark_line()
    import pyspark

    assert pyspark.__version__.startswith(line.spark + ".")


def test_pyproject_declares_the_same_range_as_the_code():
    import tomllib

    from tests.testkit import ROOT

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert jars.PYSPARK_REQUIREMENT in project["dependencies"]
    assert not [d for d in project["dependencies"] if "==" in d], "exact pins belong in constraints/"


@pytest.mark.parametrize(("spec", "major"), [("11", 11), ("17", 17), ("21", 21), ("25", 25)])
def test_java_11_and_newer_run_the_bridge(spec, major):
    assert jars.check_java_version(spec) == major


def test_java_8_gets_a_clear_error():
    with pytest.raises(SetupError, match=r"runs on Java 8: .*needs Java 11 or newer.*JAVA_HOME"):
        jars.check_java_version("1.8")
    with pytest.raises(SetupError, match="Spark 4.1 needs Java 17"):
        jars.check_java_version("11", jars.SUPPORTED_SPARK_LINES["4.1"])


def test_the_session_jvm_passes_the_java_check(spark):
    spec = spark.sparkContext._jvm.java.lang.System.getProperty("java.specification.version")
    assert jars.check_java_version(spec, jars.spark_line()) >= 11


# --- offline jars: download into a directory, checked against the pinned SHA-256 ------------


def _fake_repository(root, artifact, content: bytes):
    path = root / "repo" / artifact.url("").lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return (root / "repo").as_uri()


def test_download_lands_only_jars_that_match_their_pinned_digest(tmp_path, monkeypatch):
    artifact = jars.aws_bundle_artifact()
    good = b"PK\x03\x04 not really a jar"
    monkeypatch.setitem(jars.PINNED_SHA256, artifact.file_name, hashlib.sha256(good).hexdigest())
    repository = _fake_repository(tmp_path, artifact, good)
    [path] = jars.download(tmp_path / "jars", [artifact], repository=repository)
    assert path.read_bytes() == good
    # A second run finds it intact and does not fetch again (the repository is gone).
    shutil.rmtree(tmp_path / "repo")
    assert jars.download(tmp_path / "jars", [artifact], repository=repository) == [path]


def test_download_refuses_an_altered_jar_and_leaves_nothing_behind(tmp_path, monkeypatch):
    artifact = jars.aws_bundle_artifact()
    monkeypatch.setitem(jars.PINNED_SHA256, artifact.file_name, hashlib.sha256(b"the real one").hexdigest())
    repository = _fake_repository(tmp_path, artifact, b"the real one, with a backdoor")
    with pytest.raises(SetupError, match="does not match its pinned SHA-256"):
        jars.download(tmp_path / "jars", [artifact], repository=repository)
    assert list((tmp_path / "jars").iterdir()) == []


def test_download_cli_reports_an_unreachable_repository(tmp_path, capsys):
    code = main(["jars", "download", str(tmp_path / "jars"), "--spark", "3.5",
                 "--repository", (tmp_path / "nowhere").as_uri()])
    assert code == 2
    err = capsys.readouterr().err
    assert "cannot download file:" in err and "iceberg-spark-runtime-3.5_2.12-1.12.0.jar" in err
    assert list((tmp_path / "jars").iterdir()) == []


def test_pinned_jars_in_the_project_cache_match_their_digests():
    directory = jars.local_jars_dir()
    if directory is None:
        pytest.skip(f"{jars.JARS_DIR_ENV} is not set (make sets it)")
    broker = {artifact.file_name for artifact in testing_jars.kafka_broker_artifacts()}
    for name, digest in jars.PINNED_SHA256.items():
        where = testing_jars.kafka_broker_dir() if name in broker else directory  # the broker's jars: a directory of their own
        assert hashlib.sha256((where / name).read_bytes()).hexdigest() == digest, name


@pytest.mark.parametrize(("version", "connector", "token_provider"), [
    ("3.5.9", "org.apache.spark:spark-sql-kafka-0-10_2.12:3.5.7", "spark-token-provider-kafka-0-10_2.12-3.5.7.jar"),
    ("4.1.4", "org.apache.spark:spark-sql-kafka-0-10_2.13:4.1.3", "spark-token-provider-kafka-0-10_2.13-4.1.1.jar"),
])
@pytest.mark.jars
def test_the_kafka_connector_follows_the_spark_line_in_both_channels(tmp_path, version, connector, token_provider):
    packages = config.jar_settings("packages", kafka=True, spark_version=version)["spark.jars.packages"].split(",")
    assert connector in packages and not any("token-provider" in p or "kafka-clients" in p for p in packages), \
        "Spark's --packages resolves the connector's dependencies itself"
    assert connector not in config.jar_settings("packages", spark_version=version)["spark.jars.packages"]

    wanted = jars.artifacts(jars.spark_line(version), kafka=True, local=True)
    assert all(a.file_name in jars.PINNED_SHA256 for a in wanted), "every local jar is pinned by SHA-256"
    names = {a.file_name for a in wanted}
    assert token_provider in names and any(n.startswith("kafka-clients-") for n in names) \
        and any(n.startswith("commons-pool2-") for n in names)
    with pytest.raises(SetupError, match="--kafka"):
        config.jar_settings("local", jars_dir=tmp_path, kafka=True, spark_version=version)
    for artifact in wanted:
        (tmp_path / artifact.file_name).write_bytes(b"jar")
    local = config.jar_settings("local", jars_dir=tmp_path, kafka=True, spark_version=version)["spark.jars"].split(",")
    assert {str(tmp_path / name) for name in names} <= set(local)


@pytest.mark.jars
def test_spark_settings_with_kafka_and_jars_show(capsys, monkeypatch):
    monkeypatch.delenv(jars.JARS_DIR_ENV, raising=False)
    settings = config.spark_settings("lake", warehouse="/tmp/wh", kafka=True, spark_version="4.1.4")
    assert "org.apache.spark:spark-sql-kafka-0-10_2.13:4.1.3" in settings["spark.jars.packages"]
    assert main(["jars", "show", "--spark", "4.1.4", "--kafka", "--json"]) == 0
    assert "org.apache.spark:spark-sql-kafka-0-10_2.13:4.1.3" in json.loads(capsys.readouterr().out)["packages"]


def test_the_kafka_broker_jars_are_pinned_and_say_how_to_fetch_them_offline(tmp_path, monkeypatch):
    broker = testing_jars.kafka_broker_artifacts()
    assert {a.artifact for a in broker} >= {"kafka_2.13", "kafka-server", "kafka-raft", "kafka-metadata",
                                             "kafka-storage", "kafka-clients", "scala-library", "log4j-slf4j-impl"}
    assert all(a.version == testing_jars.KAFKA_VERSION for a in broker if a.group == "org.apache.kafka")
    assert all(jars.PINNED_SHA256[a.file_name] for a in broker)
    monkeypatch.setenv(jars.JARS_DIR_ENV, str(tmp_path))
    assert testing_jars.kafka_broker_dir() == tmp_path / f"kafka-{testing_jars.KAFKA_VERSION}"
    with pytest.raises(SetupError, match=r"pyiceberg_crypto.testing jars .* --kafka-broker"):
        testing_jars.kafka_broker_jars(download_missing=False)


@pytest.mark.jars
def test_jars_show_names_the_coordinates_for_a_spark_version(capsys, monkeypatch):
    monkeypatch.delenv(jars.JARS_DIR_ENV, raising=False)
    assert main(["jars", "show", "--spark", "3.5.9", "--aws", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["packages"] == ["org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.12.0",
                                    "org.apache.iceberg:iceberg-aws-bundle:1.12.0", jars.bridge_artifact().coordinate]
    assert document["repositories"] == [jars.bridge_repository().as_uri()]
    assert document["mode"] == "packages" and document["bridge_jar"].endswith("pyiceberg-crypto-bridge.jar")
    assert main(["jars", "show", "--spark", "4.0.0"]) == 2
    assert "Spark 3.5.x (Scala 2.12) and Spark 4.1.x (Scala 2.13)" in capsys.readouterr().err


def test_the_bridge_artifact_is_the_shipped_jar_under_a_digest_version(tmp_path, monkeypatch):
    """The Maven copy of the bridge must hold the jar's own bytes: a stale copy is refused, by name."""
    sys.path.insert(0, str(ROOT / "jars"))
    import build_bridge

    jar = tmp_path / jars.BRIDGE_JAR_NAME
    jar.write_bytes(b"PK first build")
    monkeypatch.setattr(jars, "bridge_jar", lambda: jar)
    with pytest.raises(SetupError, match="missing or stale.*make jars"):
        jars.bridge_artifact()
    build_bridge.write_maven_repository(tmp_path / "maven", jar.read_bytes(), "0.1.0")
    first = jars.bridge_artifact()
    digest = hashlib.sha256(b"PK first build").hexdigest()[:16]
    assert first.coordinate == f"io.pyicebergcrypto:pyiceberg-crypto-bridge:0.1.0-{digest}"
    jar.write_bytes(b"PK rebuilt")  # a rebuild without its Maven copy: never ship the old classes
    with pytest.raises(SetupError, match="stale"):
        jars.bridge_artifact()
    build_bridge.write_maven_repository(tmp_path / "maven", jar.read_bytes(), "0.1.0")
    assert jars.bridge_artifact().version != first.version
    assert [p.name for p in (tmp_path / "maven").rglob("*.jar")] == [f"pyiceberg-crypto-bridge-{jars.bridge_artifact().version}.jar"]
