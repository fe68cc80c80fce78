"""The Python S3 FileIO against a real S3 API on loopback (moto in server mode)."""

from __future__ import annotations

import io
import os
import pickle

import pytest

from pyiceberg_crypto.io import file_io_for
from pyiceberg_crypto.io.s3 import S3FileIO, split_uri

pytestmark = pytest.mark.loopback

PAYLOAD = os.urandom(3 * 1024 * 1024 + 17)


@pytest.fixture(scope="module")
def stored(s3_server):
    s3_server.client().put_object(Bucket=s3_server.bucket, Key="t/data/a.bin", Body=PAYLOAD)
    return f"s3://{s3_server.bucket}/t/data/a.bin"


@pytest.fixture
def file_io(s3_environment):
    return file_io_for("s3://x/y", s3_environment.catalog_properties())


def test_catalog_properties_pick_the_s3_file_io(file_io, s3_server):
    assert isinstance(file_io, S3FileIO)
    assert file_io.endpoint == s3_server.endpoint and file_io.path_style_access
    assert isinstance(file_io_for("s3a://b/k", s3_server.catalog_properties()), S3FileIO)


def test_size_exists_and_whole_read(file_io, stored):
    assert file_io.size(stored) == len(PAYLOAD)
    assert file_io.exists(stored)
    assert not file_io.exists(stored + ".missing")
    with file_io.open(stored) as f:
        assert f.read() == PAYLOAD


def test_seek_and_ranged_reads(file_io, stored):
    with file_io.open(stored) as f:
        assert f.seekable()
        f.seek(-8, io.SEEK_END)
        assert f.read(8) == PAYLOAD[-8:]
        f.seek(1024 * 1024 - 3)
        assert f.read(10) == PAYLOAD[1024 * 1024 - 3: 1024 * 1024 + 7]
        f.seek(5)
        f.seek(4, io.SEEK_CUR)
        assert f.tell() == 9 and f.read(4) == PAYLOAD[9:13]
        f.seek(len(PAYLOAD) + 10)
        assert f.read(4) == b""


def test_missing_object_raises_file_not_found(file_io, s3_server):
    missing = f"s3://{s3_server.bucket}/nope/x.avro"
    with pytest.raises(FileNotFoundError, match="nope/x.avro"):
        file_io.open(missing)
    with pytest.raises(FileNotFoundError):
        file_io.size(f"s3://no-such-bucket-{os.getpid()}/k")


def test_pickles_without_client_and_repr_has_no_secrets(file_io, stored, s3_server):
    file_io.size(stored)  # creates the client
    clone = pickle.loads(pickle.dumps(file_io))
    assert clone.size(stored) == len(PAYLOAD)
    secrets = [v for k, v in s3_server.environment().items() if "KEY" in k]
    for text in (repr(file_io), repr(clone), repr(s3_server), pickle.dumps(file_io).decode("latin-1")):
        assert not any(secret in text for secret in secrets)


def test_credentials_come_only_from_the_environment(s3_server, stored, monkeypatch):
    """Without credentials in the environment (nor a profile) the FileIO cannot sign a request: it
    holds none of its own."""
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    from botocore.exceptions import NoCredentialsError

    with pytest.raises(NoCredentialsError):
        S3FileIO.from_properties(s3_server.catalog_properties()).size(stored)


@pytest.mark.parametrize("uri", ["file:/a", "s3://bucket", "s3://", "gs://b/k"])
def test_split_uri_refuses_non_object_uris(uri):
    with pytest.raises(ValueError):
        split_uri(uri)
