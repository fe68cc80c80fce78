"""Confinement (issue 15, item 1): the verifier opens only files under the table's own locations
(``location``, ``write.data.path``, ``write.metadata.path``, and what ``--allow-location`` adds). A
path elsewhere, a ``..`` walk or a symlink out of the table is an ``OUTSIDE_TABLE`` finding and
the file is never touched, in the local walk and in ``verify_table``'s Spark tasks alike."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from pyiceberg_crypto.io import LocalFileIO
from pyiceberg_crypto.io.confinement import Confinement
from pyiceberg_crypto.verify import verify_metadata, verify_table
from pyiceberg_crypto.verify.report import DATA, MANIFEST_LIST, OK, OUTSIDE_TABLE
from pyiceberg_crypto.table import Limits
from tests.verify import kms_factory
from tests.verify.conftest import create_table, local, metadata_location
from tests.verify.test_hostile_input import run_cli_in_process, write_metadata

KMS = "tests.verify.kms_factory:session_kms"


# --- the rule ------------------------------------------------------------------------------------


@pytest.mark.parametrize("uri, inside", [
    ("file:/wh/db/t/data/a.parquet", True),
    ("/wh/db/t/metadata/snap-1.avro", True),
    ("file:///wh/db/t/data/a.parquet", True),
    ("file:/wh/db/t", True),
    ("file:/wh/db/t2/data/a.parquet", False),  # a sibling sharing the prefix
    ("file:/wh/db/t/../t2/data/a.parquet", False),  # '..' is refused outright
    ("file:/wh/db/t/data/../../../../etc/passwd", False),
    ("file:/etc/passwd", False),
    ("/dev/zero", False),
    ("s3://bucket/wh/db/t/data/a.parquet", False),  # another scheme
    ("file:/lake/data/t/a.parquet", True),  # write.data.path
    ("file:/wh/db/t/x#/../../../etc/passwd", False),  # '#' is not a URL fragment to LocalFileIO
    ("file://otherhost/wh/db/t/a.parquet", False),
    ("relative/wh/db/t/a.parquet", False),
])
def test_the_rule(uri, inside):
    rule = Confinement.for_table("file:/wh/db/t", {"write.data.path": "file:/lake/data/t"})
    assert (rule.refusal(uri) is None) is inside, rule.refusal(uri)


def test_object_store_roots_compare_bucket_and_prefix():
    rule = Confinement.for_table("s3://lake/wh/db/t", {}, extra=["s3a://archive/t"])
    assert rule.refusal("s3://lake/wh/db/t/data/a.parquet") is None
    assert rule.refusal("s3a://lake/wh/db/t/data/a.parquet") is None  # s3a is s3
    assert rule.refusal("s3://archive/t/x.parquet") is None
    assert "'..'" in rule.refusal("s3://lake/wh/db/t/a?x/../../../other/key")  # '?' is part of an S3 key
    assert "outside the table's locations" in rule.refusal("s3://other-bucket/wh/db/t/data/a.parquet")
    assert "names no location" in Confinement([]).refusal("file:/x")


def test_a_symlink_out_of_the_table_is_refused(tmp_path):
    table, outside = tmp_path / "t", tmp_path / "elsewhere"
    (table / "data").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret").write_bytes(b"x")
    os.symlink(outside / "secret", table / "data" / "a.parquet")
    rule = Confinement.for_table(f"file:{table}")
    assert "symbolic link" in rule.refusal(f"file:{table}/data/a.parquet")
    assert Confinement.for_table(f"file:{table}", extra=[f"file:{outside}"]).refusal(f"file:{table}/data/a.parquet") is None


# --- the walk never touches a refused file -------------------------------------------------------


class RecordingFileIO(LocalFileIO):
    """The real local FileIO, remembering every path it was asked about."""

    def __init__(self):
        super().__init__()
        self.touched: list[str] = []

    def size(self, uri):
        self.touched.append(uri)
        return super().size(uri)

    def open(self, uri):
        self.touched.append(uri)
        return super().open(uri)


@pytest.mark.parametrize("target", ["file:/etc/passwd", "/dev/zero", "file:{table}/metadata/../../../etc/passwd"])
def test_a_manifest_list_outside_the_table_is_never_opened(capsys, tmp_path, target):
    target = target.format(table=tmp_path)
    path = write_metadata(tmp_path / "m.metadata.json", manifest_list=target)
    file_io = RecordingFileIO()
    report = verify_metadata(str(path), kms_factory.session_kms(), limits=Limits(file_io=file_io))
    [finding] = report.files
    assert (finding.kind, finding.status) == (MANIFEST_LIST, OUTSIDE_TABLE)
    assert set(file_io.touched) == {str(path)}  # the metadata.json only (stat, then read)
    code, out, _ = run_cli_in_process(capsys, str(path), "--kms", KMS, "--json")
    assert code == 1 and json.loads(out)["files"][0]["status"] == OUTSIDE_TABLE


# --- real tables ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_table(spark, kms_registration):
    table = create_table(spark, "confined")
    spark.sql(f"INSERT INTO {table} SELECT id, cast(id AS string), 1 FROM range(0, 10, 1, 2)")
    return table


def test_a_data_file_symlinked_out_of_the_table_is_refused_in_the_walk_and_in_spark_tasks(
        capsys, spark, small_table, tmp_path):
    location = metadata_location(spark, small_table)
    report = verify_metadata(location, kms_factory.session_kms())
    victim = next(f.path for f in report.files if f.kind == DATA)
    outside = tmp_path / "copy.parquet"
    shutil.copyfile(local(victim), outside)  # identical bytes: it would verify OK if it were read
    original = Path(local(victim))
    moved = original.with_name(original.name + ".moved")
    original.rename(moved)
    try:
        os.symlink(outside, original)
        code, out, _ = run_cli_in_process(capsys, location, "--kms", KMS, "--json")
        refused = [f for f in json.loads(out)["files"] if f["status"] != OK]
        assert code == 1 and [(f["path"], f["status"]) for f in refused] == [(victim, OUTSIDE_TABLE)]
        assert "symbolic link" in refused[0]["detail"]
        spark_report = verify_table(spark, small_table)
        assert [(f.path, f.status) for f in spark_report.not_ok()] == [(victim, OUTSIDE_TABLE)]
        code, out, _ = run_cli_in_process(capsys, location, "--kms", KMS, "--json", "--allow-location", f"file:{tmp_path}")
        assert code == 0  # lifted explicitly: the copy is read and verifies
    finally:
        original.unlink()
        moved.rename(original)


def test_a_table_with_its_own_write_data_path_verifies(spark, kms_registration, tmp_path):
    data_dir = tmp_path / "elsewhere-data"
    table = create_table(spark, "datapath", properties={"write.data.path": f"file:{data_dir}"})
    spark.sql(f"INSERT INTO {table} SELECT id, 'x', 1 FROM range(0, 5)")
    report = verify_metadata(metadata_location(spark, table), kms_factory.session_kms())
    assert report.ok, report.not_ok()
    assert all(local(f.path).startswith(str(data_dir)) for f in report.files if f.kind == DATA)
