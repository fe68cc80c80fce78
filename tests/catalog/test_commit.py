"""The new metadata.json a JVM-free Hive commit writes (keys/catalog_commit.py): every field kept but
the changed entries, last-updated-ms, metadata-log (trimmed as Iceberg trims it), the next file name,
and bytes as Iceberg's Java writer writes them (compact JSON, non-ASCII as is)."""

from __future__ import annotations

import json
import re

from pyiceberg_crypto.catalog.commit import KeyChange, apply_key_change, metadata_bytes, new_metadata_location

BASE = "file:/wh/db.db/t/metadata/00007-1b6c.metadata.json"


def doc(**properties) -> dict:
    return {"format-version": 3, "table-uuid": "u", "location": "file:/wh/db.db/t", "last-updated-ms": 1000,
            "properties": {"encryption.key-id": "k", "comment": "caf\u00e9", **properties},
            "encryption-keys": [
                {"key-id": "kek1", "encrypted-key-metadata": "AAA=", "encrypted-by-id": "k",
                 "properties": {"KEY_TIMESTAMP": "5"}},
                {"key-id": "ml1", "encrypted-key-metadata": "BBB=", "encrypted-by-id": "kek1"},
                {"key-id": "ml2", "encrypted-key-metadata": "CCC=", "encrypted-by-id": "kek1"}],
            "refs": {"main": {"snapshot-id": 2, "type": "branch"}},
            "metadata-log": [{"timestamp-ms": 900, "metadata-file": "file:/wh/db.db/t/metadata/00006-a.metadata.json"}]}


def test_a_rewrap_changes_the_blob_in_place_and_keeps_everything_else():
    base = doc()
    new = apply_key_change(base, KeyChange(rewrapped={"kek1": "ZZZ="}), BASE, now_ms=2000)
    assert new["encryption-keys"][0] == {"key-id": "kek1", "encrypted-key-metadata": "ZZZ=", "encrypted-by-id": "k",
                                         "properties": {"KEY_TIMESTAMP": "5"}}
    assert new["encryption-keys"][1:] == base["encryption-keys"][1:]
    assert new["last-updated-ms"] == 2000
    assert new["metadata-log"][-1] == {"timestamp-ms": 1000, "metadata-file": BASE}
    assert {k: v for k, v in new.items() if k not in ("encryption-keys", "last-updated-ms", "metadata-log")} == \
        {k: v for k, v in base.items() if k not in ("encryption-keys", "last-updated-ms", "metadata-log")}
    assert base["encryption-keys"][0]["encrypted-key-metadata"] == "AAA="  # the base is not modified
    assert list(new) == list(base)  # the field order Iceberg's writer uses


def test_a_prune_removes_entries_and_the_log_keeps_previous_versions_max():
    new = apply_key_change(doc(**{"write.metadata.previous-versions-max": "1"}), KeyChange(removed=["ml1"]), BASE,
                           now_ms=500)
    assert [e["key-id"] for e in new["encryption-keys"]] == ["kek1", "ml2"]
    assert new["metadata-log"] == [{"timestamp-ms": 1000, "metadata-file": BASE}]
    assert new["last-updated-ms"] == 1000  # never earlier than the base


def test_the_next_file_is_named_as_iceberg_names_it():
    assert re.fullmatch(r"file:/wh/db\.db/t/metadata/00008-[0-9a-f-]{36}\.metadata\.json",
                        new_metadata_location(doc(), BASE))
    assert new_metadata_location(doc(**{"write.metadata.path": "file:/meta/"}), BASE).startswith("file:/meta/00008-")


def test_bytes_are_compact_json_with_non_ascii_as_is():
    data = metadata_bytes(doc())
    assert b'"format-version":3,"table-uuid":"u"' in data and "caf\u00e9".encode() in data
    assert json.loads(data) == doc()
