"""``Limits``: one object for the limit/IO settings every entry point takes, the old keywords kept."""

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


def test_old_keywords_apply_and_conflict_with_an_explicit_limits():
    assert Limits.of(None, max_metadata_bytes=10).max_metadata_bytes == 10
    assert Limits.of(None, kms_timeout=None).kms_timeout is None  # None means "no limit": a real setting
    assert Limits.of(None, allowed_locations=["s3://b/x"]).allowed_locations == ("s3://b/x",)
    kept = Limits(kms_timeout=5)
    assert Limits.of(kept, kms_timeout=DEFAULT_KMS_TIMEOUT_SECONDS, allowed_locations=()) == kept
    with pytest.raises(TableInputError, match="kms_timeout"):
        Limits.of(kept, kms_timeout=7)
    with pytest.raises(TypeError, match="not a limit"):
        Limits.of(None, threads=3)


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
    with pytest.raises(TableInputError, match="too large"):
        call(metadata, None, max_metadata_bytes=16)  # the old keyword, same effect
    with pytest.raises(TableInputError, match="not both"):
        call(metadata, None, limits=small, max_metadata_bytes=32)

