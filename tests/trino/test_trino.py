"""Trino 483 reads what PySpark wrote, with keys from a Python KMS behind the AWS KMS face.

One PySpark application (tests/trino/spark_writer.py) writes the tables through one Hive metastore:
through the Py4J bridge with the keystore KMS (raw keystore-wrapped KEKs), through Iceberg's own
``AwsKeyManagementClient`` pointed at the face (``kms serve --aws-kms-api``, the same keystore), and
through the same client against moto (AWS KMS itself). Then Trino, started by the test kit in its
own JVM (Java 25, jars from Maven: ``make trino-jars``), reads them with
``iceberg.encryption.kms-type=AWS`` and nothing but the AWS SDK's environment pointing at the face.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pyiceberg_crypto.kms.aws import AwsKms
from pyiceberg_crypto.kms.aws_face_blob import FaceBlobKms
from pyiceberg_crypto.kms.keystore import KeystoreKms
from pyiceberg_crypto.testing import trino
from pyiceberg_crypto.testing.metastore import StandaloneMetastore
from pyiceberg_crypto.verify import verify_metadata
from tests.kms.conftest import AWS_TEST_ENV
from tests.serve.aws_face import ACCESS_KEY_ID, REGION, SECRET, FaceProcess
from tests.serve.service_process import ROOT, make_keystore
from tests.testkit import SHORT_DRIVER_ENV

pytestmark = [pytest.mark.slow, pytest.mark.loopback, pytest.mark.apps, pytest.mark.jvm]  # Spark and Trino JVMs
KEY_ID = "lake-key"
ALL_ROWS = [[1, "eu", 10.5], [2, "us", 20.0], [3, "eu", 30.25], [4, "ap", 40.0], [5, "us", 50.5]]


@pytest.fixture(scope="module")
def harness_ready():
    reason = trino.missing()
    if reason:
        if os.environ.get("PYICEBERG_CRYPTO_REQUIRE_TRINO") == "1":  # make test: never skipped
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture(scope="module")
def lake(harness_ready, tmp_path_factory, kms_admin, moto_kms_endpoint, openbao_server, rest_catalog_server):
    """The tables, written once: (metastore, face process, Spark's view of each table, paths)."""
    base = tmp_path_factory.mktemp("trino-lake")
    base.chmod(0o700)
    keystore = make_keystore(base / "keys.json", KEY_ID)
    face = FaceProcess.start(base / "face", keystore)
    moto_key = kms_admin.create_key(Description="trino (a)")["KeyMetadata"]["KeyId"]
    bao_key = f"trino-{os.getpid()}"
    openbao_server.create_transit_key(bao_key)
    with StandaloneMetastore(base / "hms") as metastore:
        job = {"metastore_uri": metastore.uri, "warehouse": str(base / "wh"), "keystore": str(keystore),
               "key_id": KEY_ID, "face_endpoint": face.endpoint, "truststore": str(face.truststore),
               "region": REGION, "moto_endpoint": moto_kms_endpoint, "moto_key_id": moto_key,
               "moto_region": AWS_TEST_ENV["AWS_REGION"], "vault_properties": openbao_server.kms_properties(),
               "vault_key_id": bao_key, "rest_uri": rest_catalog_server.uri, "rest_namespace": f"trino_{os.getpid()}"}
        (base / "job.json").write_text(json.dumps(job))
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYSPARK_PYTHON=sys.executable, AWS_ACCESS_KEY_ID=ACCESS_KEY_ID,
                   AWS_SECRET_ACCESS_KEY=SECRET, AWS_REGION=REGION, **SHORT_DRIVER_ENV)
        proc = subprocess.run([sys.executable, str(Path(__file__).with_name("spark_writer.py")),
                               str(base / "job.json")], cwd=base, env=env, capture_output=True, text=True,
                              timeout=1200)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        causes = [line for line in proc.stderr.splitlines() if "Exception" in line and not line.strip().startswith("at ")]
        assert proc.returncode == 0 and lines, "\n".join(causes[-30:]) + proc.stderr[-2000:]
        spark = json.loads(lines[-1].removeprefix("RESULT "))
        # A plaintext Parquet file's bytes where an encrypted data file was (same rows: region ap).
        swapped = next(p for p, _ in spark["orders_swapped"]["files"] if "region=ap" in p)
        plain = next(p for p, _ in spark["orders_plain"]["files"] if "region=ap" in p)
        shutil.copyfile(plain.removeprefix("file:"), swapped.removeprefix("file:"))
        try:
            yield {"metastore": metastore, "face": face, "spark": spark, "keystore": keystore, "base": base,
                   "moto_endpoint": moto_kms_endpoint, "bao": openbao_server, "rest": rest_catalog_server,
                   "rest_namespace": job["rest_namespace"]}
        finally:
            face.stop()


@pytest.fixture(scope="module")
def trino_face(lake):
    """Trino pointed at the face, the way an operator configures it: environment + truststore."""
    face = lake["face"]
    with trino.TrinoHarness(trino.hive_catalog_properties(lake["metastore"].uri), workdir=lake["base"] / "trino",
                            env=trino.aws_environment(face.endpoint, ACCESS_KEY_ID, SECRET, REGION),
                            jvm_options=trino.truststore_options(face.truststore)) as harness:
        yield harness


def sort(rows):
    return sorted(rows, key=lambda row: json.dumps(row))


def test_trino_reads_a_bridge_written_table_through_the_aws_face(lake, trino_face):
    """(b) PySpark wrote through the Py4J bridge (keystore); Trino reads through the face, the same
    keys served both ways: Iceberg's Decrypt sends the table's key id, which unwraps the raw blob."""
    spark = lake["spark"]["orders"]
    assert spark["rows"] == ALL_ROWS
    assert trino_face.rows("SELECT id, region, amount FROM db.orders ORDER BY id") == ALL_ROWS
    assert sorted(r[0] for r in trino_face.rows('SELECT snapshot_id FROM db."orders$snapshots"')) \
        == spark["snapshots"]
    assert sort(trino_face.rows('SELECT file_path, record_count FROM db."orders$files"')) == sort(spark["files"])
    # A predicate and a partition filter.
    assert trino_face.rows("SELECT id FROM db.orders WHERE region = 'eu' AND amount > 20") == [[3]]
    assert trino_face.rows("SELECT region, count(*), sum(amount) FROM db.orders WHERE region IN ('us', 'ap') "
                           "GROUP BY region ORDER BY region") == [["ap", 1, 40.0], ["us", 2, 70.5]]
    # The plaintext twin reads the same.
    assert trino_face.rows("SELECT id, region, amount FROM db.orders_plain ORDER BY id") == ALL_ROWS
    assert lake["spark"]["data_magic"] == ["PARE"]  # every file of the encrypted tables is encrypted


def test_trino_and_pyiceberg_crypto_read_what_iceberg_aws_client_wrote_through_the_aws_face(lake, trino_face,
                                                                                          monkeypatch):
    """Iceberg's AwsKeyManagementClient in PySpark (iceberg-aws-bundle only) wrote through the face;
    Trino reads it, and pyiceberg-crypto verifies and reads it with the same keystore, without a JVM."""
    spark = lake["spark"]["orders_face"]
    assert spark["rows"] == ALL_ROWS
    assert trino_face.rows("SELECT id, region, amount FROM db.orders_face ORDER BY id") == ALL_ROWS
    assert sorted(r[0] for r in trino_face.rows('SELECT snapshot_id FROM db."orders_face$snapshots"')) \
        == spark["snapshots"]
    assert sort(trino_face.rows('SELECT file_path, record_count FROM db."orders_face$files"')) == sort(spark["files"])
    metadata = spark["metadata"]
    keystore = KeystoreKms(lake["keystore"])
    report = verify_metadata(metadata, FaceBlobKms(keystore))  # the face's blobs, opened locally
    assert report.ok and len(report.files) >= 7, report
    face = lake["face"]
    monkeypatch.setenv("AWS_CA_BUNDLE", str(face.ca_file))  # boto3 trusts the face's CA
    through_face = AwsKms(region=REGION, endpoint_url=face.endpoint, access_key_id=ACCESS_KEY_ID,
                          secret_access_key=SECRET, encryption_context=None)
    report = verify_metadata(metadata, through_face)  # or through the face itself, as AWS KMS
    assert report.ok, report
    from pyiceberg_crypto.read import read_table

    table = read_table(metadata, FaceBlobKms(keystore))
    assert sorted([r["id"], r["region"], r["amount"]] for r in table.to_pylist()) == ALL_ROWS


def test_trino_deletion_vectors(lake, trino_face):
    """Spark's merge-on-read DELETE writes an encrypted deletion vector (Puffin); Trino 483 reads
    encrypted Parquet only and says so."""
    assert [r[0] for r in lake["spark"]["orders_dv"]["rows"]] == [1, 2, 4, 5]
    answer = trino_face.query("SELECT id FROM db.orders_dv ORDER BY id")
    assert "Reading encrypted non-Parquet file is not supported" in answer.get("error", ""), answer
    assert ".puffin" in answer["error"]


def test_trino_plaintext_files_in_an_encrypted_table(lake, trino_face):
    """A plaintext file appended without key metadata is read by Trino (and Spark): only files the
    manifest says are encrypted get decryption properties, so
    iceberg.encryption.plaintext-files-allowed-for-encrypted-tables (default false) does not apply.
    pyiceberg-crypto's verifier flags it. A plaintext file swapped in where the manifest carries key
    metadata is refused by Trino."""
    expected = sort(ALL_ROWS + [[5, "us", 50.5]])
    assert sort(lake["spark"]["orders_slipped"]["rows"]) == expected
    assert sort(trino_face.rows("SELECT id, region, amount FROM db.orders_slipped")) == expected
    report = verify_metadata(lake["spark"]["orders_slipped"]["metadata"], KeystoreKms(lake["keystore"]))
    assert not report.ok
    assert any("orders_plain" in json.dumps(f.to_dict()) for f in report.not_ok()), report.to_dict()
    answer = trino_face.query("SELECT id FROM db.orders_swapped WHERE region = 'ap'")
    assert "error" in answer, answer
    assert "rows" not in answer


def _readable_by(metadata: str, keystore) -> dict:
    report = verify_metadata(metadata, KeystoreKms(keystore))
    assert report.ok, report.to_dict()
    return {a["engine"]: a for a in report.readable_by}, report


def test_trino_fails_on_a_table_made_as_the_stream_how_to_makes_it(lake, trino_face):
    """(a) The stream how-to's settings (format 3, merge-on-read) and its MERGE upsert deleting a row:
    a deletion vector. Trino 483 fails the whole query on the Puffin, and ``verify`` said so first."""
    spark = lake["spark"]
    assert spark["dvs_orders_stream"] == 2  # the delete's (region eu) and the update's (region ap)
    assert [r[0] for r in spark["orders_stream"]["rows"]] == [1, 2, 4, 5]
    answer = trino_face.query("SELECT id FROM db.orders_stream ORDER BY id")
    assert "Reading encrypted non-Parquet file is not supported" in answer.get("error", ""), answer
    assert ".puffin" in answer["error"]
    answers, _ = _readable_by(spark["orders_stream"]["metadata"], lake["keystore"])
    assert answers["trino"]["readable"] is False and answers["spark"]["readable"] is True
    assert answers["jvm-free"]["readable"] is True
    assert answers["trino"]["reasons"] == ["2 encrypted deletion vectors (Puffin): Trino 483 reads only Parquet "
                                           "when encrypted (in partition(s) region=ap, region=eu; a query whose "
                                           "filter skips them does not open them)"]
    assert answers["trino"]["blocked_partitions"] == ["region=ap", "region=eu"]
    # What "blocked in partitions" means, in Trino itself: a query that skips them reads
    assert trino_face.rows("SELECT id FROM db.orders_stream WHERE region = 'us' ORDER BY id") == [
        [r[0]] for r in spark["orders_stream"]["rows"] if r[1] == "us"]


def test_the_reader_set_profile_reads_in_trino_after_delete_update_merge(lake, trino_face):
    """(b) ``table_properties(key, readers=("trino",))``: copy-on-write, so DELETE, UPDATE and MERGE
    write no deletion vector; Trino reads what Spark reads, and ``verify`` says Trino can."""
    spark = lake["spark"]
    expected = [[1, "eu", 10.5], [2, "us", 20.0], [4, "ap", 44.0], [5, "us", 55.5], [6, "eu", 60.0]]
    assert spark["orders_trino"]["rows"] == expected and spark["dvs_orders_trino"] == 0
    assert trino_face.rows("SELECT id, region, amount FROM db.orders_trino ORDER BY id") == expected
    answers, report = _readable_by(spark["orders_trino"]["metadata"], lake["keystore"])
    assert all(a["readable"] for a in answers.values()), answers
    assert not [c for c in report.checks if c.name == "readers"]


def test_converting_a_table_with_deletion_vectors_makes_it_readable_by_trino(lake, trino_face):
    """(c) Copy-on-write modes, then ``rewrite_data_files`` with ``delete-file-threshold=1``: the
    deletion vector is folded into new data files and leaves the current snapshot; Trino reads it,
    and ``declare_readers`` accepted the table afterwards."""
    spark = lake["spark"]
    assert spark["dvs_before_conversion"] == 2 and spark["dvs_orders_converted"] == 0
    expected = [[1, "eu", 10.5], [2, "us", 20.0], [4, "ap", 44.0], [5, "us", 50.5]]
    assert spark["orders_converted"]["rows"] == expected
    assert trino_face.rows("SELECT id, region, amount FROM db.orders_converted ORDER BY id") == expected
    answers, report = _readable_by(spark["orders_converted"]["metadata"], lake["keystore"])
    assert answers["trino"]["readable"] is True
    assert not [c for c in report.checks if c.name == "readers"]


def test_trino_reads_aws_kms_tables_directly(lake):
    """(a) Iceberg's AwsKeyManagementClient wrote against AWS KMS (moto); Trino reads it with the
    same AWS SDK settings pointed there."""
    assert lake["spark"]["orders_moto"]["rows"] == ALL_ROWS
    env = trino.aws_environment(lake["moto_endpoint"], AWS_TEST_ENV["AWS_ACCESS_KEY_ID"],
                                AWS_TEST_ENV["AWS_SECRET_ACCESS_KEY"], "us-east-1")
    with trino.TrinoHarness(trino.hive_catalog_properties(lake["metastore"].uri), workdir=lake["base"] / "trino-moto",
                            env=env) as harness:
        assert harness.rows("SELECT id, region, amount FROM db.orders_moto ORDER BY id") == ALL_ROWS
        spark = lake["spark"]["orders_moto"]
        assert sort(harness.rows('SELECT file_path, record_count FROM db."orders_moto$files"')) == sort(spark["files"])
        # The face's table does not read against AWS KMS: another KMS holds its keys.
        assert "error" in harness.query("SELECT id FROM db.orders_face")


def test_trino_reads_openbao_keys_through_the_aws_face(lake):
    """(c) PySpark wrote through the bridge with OpenBao's Transit as the Python KMS; a second
    ``kms serve --kms vault --aws-kms-api`` serves the same Transit key to Trino."""
    assert lake["spark"]["orders_bao"]["rows"] == ALL_ROWS
    face = FaceProcess.start(lake["base"] / "face-bao", None, kms="vault", properties=lake["bao"].kms_properties())
    try:
        with trino.TrinoHarness(trino.hive_catalog_properties(lake["metastore"].uri),
                                workdir=lake["base"] / "trino-bao",
                                env=trino.aws_environment(face.endpoint, ACCESS_KEY_ID, SECRET, REGION),
                                jvm_options=trino.truststore_options(face.truststore)) as harness:
            assert harness.rows("SELECT id, region, amount FROM db.orders_bao ORDER BY id") == ALL_ROWS
            assert harness.rows("SELECT count(*) FROM db.orders_bao WHERE region = 'us'") == [[2]]
    finally:
        face.stop()


def test_trino_cannot_read_a_rest_catalog_table_and_says_why(lake):
    """The same harness on a table in a REST catalog (written through the bridge's encrypting REST
    catalog): Trino 483 bundles Iceberg 1.11.0, whose RESTTableOperations has no encryption manager
    and a plain FileIO, so reading the encrypted manifest list stops at Iceberg's own check, before
    any KMS call."""
    assert lake["spark"]["orders_rest"]["rows"] == ALL_ROWS[:3]
    face = lake["face"]
    properties = {"iceberg.catalog.type": "rest", "iceberg.rest-catalog.uri": lake["rest"].uri,
                  "iceberg.encryption.kms-type": "AWS", "fs.local.enabled": "true", "local.location": "/"}
    with trino.TrinoHarness(properties, workdir=lake["base"] / "trino-rest",
                            env=trino.aws_environment(face.endpoint, ACCESS_KEY_ID, SECRET, REGION),
                            jvm_options=trino.truststore_options(face.truststore)) as harness:
        answer = harness.query(f"SELECT id FROM {lake['rest_namespace']}.orders")
    assert "Cannot decrypt manifest list" in answer.get("error", "") and "use EncryptingFileIO" in answer["error"], answer


def test_trino_with_another_region_than_the_face_shows_the_faces_message(lake):
    """The client's AWS_REGION must equal ``--aws-kms-api-region``: the SDK signs for its region, the
    face refuses the credential scope, and Trino shows the message text (not the exception name)."""
    face = lake["face"]
    class_log = lake["base"] / "trino-region-classes.log"
    with trino.TrinoHarness(trino.hive_catalog_properties(lake["metastore"].uri), workdir=lake["base"] / "trino-region",
                            env=trino.aws_environment(face.endpoint, ACCESS_KEY_ID, SECRET, "us-east-1"),
                            jvm_options=(*trino.truststore_options(face.truststore),
                                         f"-Xlog:class+load=info:file={class_log}")) as harness:
        answer = harness.query("SELECT id FROM db.orders")
    # The starts before this one (the moto and OpenBao tests' own) left the class-data sharing
    # archive: this JVM mapped Trino's classes from it (testing.trino.archive_path).
    assert harness.archive.exists()
    assert "source: shared objects file (top)" in class_log.read_text(errors="replace")
    error = answer.get("error", "")
    assert "credential scope names region 'us-east-1', this endpoint is 'eu-west-1'" in error, answer
    assert "InvalidSignatureException" not in error  # the AWS error type is not shown, only its message


def test_trino_wrong_secret_then_stopped_service(lake, trino_face):
    """A wrong secret is refused by the face (SigV4) and Trino says so; a stopped service is a clear
    connection error. Runs last: it stops the face."""
    face = lake["face"]
    with trino.TrinoHarness(trino.hive_catalog_properties(lake["metastore"].uri), workdir=lake["base"] / "trino-bad",
                            env=trino.aws_environment(face.endpoint, ACCESS_KEY_ID, "wrong-secret-0123456789abc",
                                                      REGION),
                            jvm_options=trino.truststore_options(face.truststore)) as harness:
        answer = harness.query("SELECT id FROM db.orders")
    # Trino shows the face's message text, not the AWS error type (InvalidSignatureException).
    assert "the request signature does not match" in answer.get("error", ""), answer
    assert "InvalidSignatureException" not in answer["error"]
    assert "wrong-secret" not in answer["error"]
    face.stop()
    answer = trino_face.query("SELECT id FROM db.orders_spare")
    error = answer.get("error", "")
    assert error and ("Connection refused" in error or "Unable to execute HTTP request" in error), answer
