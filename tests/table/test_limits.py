"""``Limits``: one object for the limit/IO settings every entry point takes (``limits=`` only)."""

from __future__ import annotations

import json

import pytest

from pyiceberg_crypto.errors import TableInputError
from pyiceberg_crypto.io import DEFAULT_MAX_METADATA_BYTES
from pyiceberg_crypto.keys.inventory import inventory_from_metadata
from pyiceberg_crypto.kms.bounded import DEFAULT_KMS_TIMEOUT_SECONDS
from pyiceberg_crypto.table import Limits
from pyiceberg_crypto.verify import verify_metadata

METADATA = {"format-version": 3, "table-uuid": "u", "location": "file:/nowhere", "properties": {},
            "current-snapshot-id": -1, "snapshots": [], "encryption-keys": []}


def test_defaults_are_the_entry_points_defaults():
    limits = Limits()
    assert (limits.max_metadata_bytes, limits.kms_timeout, limits.allowed_locations) == \
        (DEFAULT_MAX_METADATA_BYTES, DEFAULT_KMS_TIMEOUT_SECONDS, ())


def test_allowed_locations_are_kept_as_a_tuple():
    assert Limits(allowed_locations=["s3://b/x"]).allowed_locations == ("s3://b/x",)
    assert Limits(kms_timeout=None).kms_timeout is None  # None means "no limit": a real setting


@pytest.fixture
def metadata(tmp_path):
    path = tmp_path / "00000-x.metadata.json"
    path.write_text(json.dumps(METADATA))
    return str(path)


@pytest.mark.parametrize("entry_point", ["verify_metadata", "inventory_from_metadata", "read_table"])
def test_every_entry_point_honours_limits(metadata, entry_point):
    small = Limits(max_metadata_bytes=16)
    if entry_point == "read_table":
        from pyiceberg_crypto.read import read_table as call
    else:
        call = {"verify_metadata": verify_metadata, "inventory_from_metadata": inventory_from_metadata}[entry_point]
    with pytest.raises(TableInputError, match="too large"):
        call(metadata, None, limits=small)
    with pytest.raises(TypeError, match="max_metadata_bytes"):
        call(metadata, None, max_metadata_bytes=16)  # the separate keywords are gone: limits= only


@pytest.mark.parametrize("keyword", ["allowed_locations", "max_metadata_bytes", "kms_timeout", "file_io", "properties"])
def test_the_limits_are_not_separate_keywords(keyword):
    import inspect

    from pyiceberg_crypto.read import read_table, scan
    from pyiceberg_crypto.verify import verify_table
    from pyiceberg_crypto.verify.each_commit import VerifyEachCommit

    for entry_point in (verify_metadata, verify_table, read_table, scan, inventory_from_metadata, VerifyEachCommit):
        parameters = inspect.signature(entry_point).parameters
        assert keyword not in parameters, f"{entry_point.__name__} takes {keyword}= besides limits="
        assert "limits" in parameters, entry_point.__name__

