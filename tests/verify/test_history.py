"""The ledger's ``history`` rule on hand-made table metadata (no JVM): what is a continuation of
the verified state, what is a rollback or a replacement, and what cannot be traced."""

from __future__ import annotations

import json

import pytest

from pyiceberg_crypto.verify.ledger import LedgerEntry, descends_from, divergence, history_check
from pyiceberg_crypto.table.metadata import TableMetadata
from pyiceberg_crypto.verify.plan import select_scope
from pyiceberg_crypto.verify.report import DIVERGED, OK

UUID = "00000000-0000-0000-0000-00000000000a"


def meta(current: int, snapshots: list[tuple[int, int, int | None]], uuid: str = UUID,
         location: str = "file:/wh/t/metadata/v9.metadata.json") -> TableMetadata:
    """snapshots: (id, sequence number, parent id)."""
    doc = {"format-version": 3, "table-uuid": uuid, "location": "file:/wh/t", "current-snapshot-id": current,
           "snapshots": [{"snapshot-id": i, "sequence-number": seq, "manifest-list": f"file:/wh/t/metadata/snap-{i}.avro",
                          **({"parent-snapshot-id": parent} if parent is not None else {})}
                         for i, seq, parent in snapshots]}
    return TableMetadata.parse(json.dumps(doc), location)


def entry(snapshot_id: int, sequence_number: int, **changes) -> LedgerEntry:
    values = dict(table_uuid=UUID, table_location="file:/wh/t", snapshot_id=snapshot_id,
                  sequence_number=sequence_number, metadata_location="file:/wh/t/metadata/v5.metadata.json",
                  metadata_hash="h", verified_at="2026-11-23T00:00:00+00:00", mode="current")
    return LedgerEntry(**{**values, **changes})


LINE = [(1, 1, None), (2, 2, 1), (3, 3, 2), (4, 4, 3), (5, 5, 4)]


def test_a_newer_snapshot_on_the_same_line_continues():
    table = meta(5, LINE)
    assert descends_from(table, table.current_snapshot, 3, 3) is True
    assert divergence(table, "x", entry(3, 3)) is None
    assert history_check(table, "x", entry(3, 3)).status == OK


def test_the_recorded_snapshot_expired_but_named_as_a_parent_still_proves_descent():
    table = meta(5, [(4, 4, 3), (5, 5, 4)])  # 1-3 expired; 4's parent id is 3
    assert descends_from(table, table.current_snapshot, 3, 3) is True
    check = history_check(table, "x", entry(3, 3))
    assert check.status == OK and "still the parent of a newer one" in check.detail


def test_rollback_then_new_commits_then_the_recorded_snapshot_expired_is_caught():
    # verified 5; rolled back to 3; committed 6 and 7; 4 and 5 expired.
    table = meta(7, [(1, 1, None), (2, 2, 1), (3, 3, 2), (6, 6, 3), (7, 7, 6)])
    assert descends_from(table, table.current_snapshot, 5, 5) is False
    check = history_check(table, "x", entry(5, 5))
    assert check.status == DIVERGED and "no longer an ancestor" in check.detail


def test_a_chain_that_leaves_the_metadata_cannot_be_traced_and_the_cut_off_holds():
    table = meta(9, [(9, 9, 8)])  # everything before 9 expired
    assert descends_from(table, table.current_snapshot, 5, 5) is None
    check = history_check(table, "x", entry(5, 5))
    assert check.status == OK and "cannot be traced" in check.detail
    scope = select_scope(table, since_snapshot_id=5, after_sequence_number=5)
    assert [s.snapshot_id for s in scope.snapshots] == [9]


@pytest.mark.parametrize("table, last, reason", [
    (meta(5, LINE, uuid="00000000-0000-0000-0000-00000000000b"), entry(5, 5), "the table was replaced"),
    (meta(3, LINE), entry(5, 5), "went backwards"),
    (meta(5, LINE, location="file:/wh/t/metadata/v5.metadata.json"), entry(5, 5), "rewritten in place"),
    (meta(5, [(1, 1, None), (2, 2, 1), (3, 7, 2), (4, 4, 3), (5, 5, 4)]), entry(3, 3), "history was rewritten"),
])
def test_divergences(table, last, reason):
    assert reason in divergence(table, "not-h", last)
    assert history_check(table, "not-h", last).status == DIVERGED


def test_a_listed_snapshot_off_the_line_is_a_usage_error_without_a_ledger():
    from pyiceberg_crypto.errors import TableInputError

    table = meta(7, [(1, 1, None), (2, 2, 1), (3, 3, 2), (5, 5, 3), (6, 6, 3), (7, 7, 6)])
    with pytest.raises(TableInputError, match="not an ancestor"):
        select_scope(table, since_snapshot_id=5)


def test_encrypted_files_without_a_key_are_reworded_by_their_reason_code(tmp_path):
    """The plan and forensics recognise "no key metadata" by its code, not by its text."""
    from pyiceberg_crypto.kms import InMemoryKms
    from pyiceberg_crypto.verify import verify_metadata
    from pyiceberg_crypto.verify.report import MANIFEST_LIST, STATISTICS, UNVERIFIABLE
    from tests.verify.test_hostile_input import write_metadata

    encrypted_looking = b"AGS1" + (1 << 20).to_bytes(4, "little") + bytes(40)
    (tmp_path / "snap-1.avro").write_bytes(encrypted_looking)
    (tmp_path / "stats.puffin").write_bytes(encrypted_looking)
    stats = [{"statistics-path": f"file:{tmp_path}/stats.puffin", "snapshot-id": 1, "file-size-in-bytes": 48}]
    path = write_metadata(tmp_path / "m.metadata.json", manifest_list=f"file:{tmp_path}/snap-1.avro", statistics=stats)
    report = verify_metadata(str(path), InMemoryKms({"k1": bytes(16)}))
    found = {f.kind: f for f in report.files}
    assert found[MANIFEST_LIST].status == UNVERIFIABLE
    assert found[MANIFEST_LIST].detail.startswith("encrypted, but snapshot 1 has no key-id")
    assert found[STATISTICS].status == UNVERIFIABLE
    assert found[STATISTICS].detail == "encrypted, but the table metadata records no key for it"
