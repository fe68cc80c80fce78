"""The ``metadata-location`` warning: a metadata.json outside the table location it describes."""

from __future__ import annotations

import json

from pyiceberg_crypto.verify import verify_metadata
from tests.table.test_limits import METADATA


def test_a_metadata_json_outside_its_table_location_is_a_warning(tmp_path):
    """A copied table directory: its metadata.json names the original's location (issue 34)."""
    inside = tmp_path / "t" / "metadata" / "00000-x.metadata.json"
    inside.parent.mkdir(parents=True)
    inside.write_text(json.dumps({**METADATA, "location": f"file:{tmp_path / 't'}"}))
    copy = tmp_path / "copy" / "metadata" / "00000-x.metadata.json"
    copy.parent.mkdir(parents=True)
    copy.write_text(inside.read_text())
    names = {c.name: c for c in verify_metadata(str(copy), None).checks}
    assert names["metadata-location"].status == "WARN" and str(tmp_path / "t") in names["metadata-location"].detail
    assert "metadata-location" not in {c.name for c in verify_metadata(str(inside), None).checks}
