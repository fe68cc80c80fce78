"""`keys reencrypt` end to end (issue 42) on the Hive catalog: a v3 table with several commits, a
merge-on-read DELETE (deletion vectors), a branch and a tag; master key version 1 leaks and is
rotated. The dry run names the branch and the tag it keeps, the run crashes once mid-way (the table stays
readable), then finishes on a second run; the proof: every remaining file opens with the current
keystore, none opens with only the compromised material (the old keystore copy, the old KEK
bytes), and every file the old snapshots reached is gone from storage.

One table lives through the module; tests run in file order, each continuing its story."""

from __future__ import annotations

import base64
import os
import shutil
from pathlib import Path

import pytest

from pyiceberg_crypto.errors import OperationError
from pyiceberg_crypto.formats.manifest_list_key import decrypt_manifest_list_key_metadata
from pyiceberg_crypto.keys.reencrypt import FRESH_KEK_PROPERTY, reencrypt_table
from pyiceberg_crypto.kms import KeystoreKms
from pyiceberg_crypto.verify import verify_metadata
from pyiceberg_crypto.verify.compromise import compromise_report
from tests.keys.tables import keystore_table, metadata_doc, metadata_location

MASTER = "reencrypt-key"
ROWS = sorted([*range(1, 6), *range(10, 16), *range(20, 26)])
DELETED = {3, 12}


def files_under(location: str) -> set[str]:
    root = Path(location.removeprefix("file:"))
    return {str(p) for p in root.rglob("*") if p.is_file() and "/metadata/" not in f"/{p.relative_to(root)}"
            or p.is_file() and (p.suffix in (".avro",) or p.name.startswith("snap-"))}


def rows(spark, table: str) -> list[int]:
    return sorted(r[0] for r in spark.table(table).collect())


@pytest.fixture(scope="module")
def story(spark, tmp_path_factory):
    work = tmp_path_factory.mktemp("reencrypt")
    keystore, table, registration = keystore_table(spark, work, MASTER, "reenc")
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('write.delete.mode'='merge-on-read', "
              "'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read')")
    for start, stop in ((1, 6), (10, 16), (20, 26)):
        spark.sql(f"INSERT INTO {table} SELECT id FROM range({start}, {stop})")
    spark.sql(f"DELETE FROM {table} WHERE id IN ({', '.join(str(i) for i in DELETED)})")
    spark.sql(f"ALTER TABLE {table} CREATE BRANCH audit_b")
    spark.sql(f"ALTER TABLE {table} CREATE TAG before_leak")
    old_keystore = work / "leaked-keys.json"  # what the attacker holds: version 1 only
    shutil.copy(keystore, old_keystore)
    before = metadata_location(spark, table)
    old_kms = KeystoreKms(old_keystore)
    old_keks = {e["key-id"]: old_kms.unwrap_key(base64.b64decode(e["encrypted-key-metadata"]), MASTER)
                for e in metadata_doc(before)["encryption-keys"] if e["encrypted-by-id"] == MASTER}
    dependent = compromise_report(before, KeystoreKms(keystore), compromised_master_keys=[(MASTER, "1")])
    assert dependent.dependent_paths() and not dependent.ok  # every file: all of it is under version 1
    KeystoreKms(keystore).rotate_key(MASTER)
    yield {"before_doc": metadata_doc(before), "dependent": dependent.dependent_paths(), "keystore": keystore, "old_keystore": old_keystore, "table": table, "work": work, "before": before,
           "old_keks": old_keks}
    registration.close()


def test_reencrypt_dry_run_names_the_refs_it_keeps_and_changes_nothing(spark, story):
    table, before = story["table"], story["before"]
    deletes = spark.sql(f"SELECT content, file_format FROM {table}.delete_files").collect()
    assert [tuple(r) for r in deletes] == [(1, "PUFFIN")] * 2  # a deletion vector per file with deleted rows
    dry = reencrypt_table(spark, table, compromised_master_keys=[(MASTER, "1")], dry_run=True)
    assert dry.compromised_keks == sorted(story["old_keks"]) and dry.refs_dropped == []
    assert dry.branches_rewritten == ["audit_b"] and dry.tags_rewritten == ["before_leak"]
    assert len(dry.expired_snapshots) == 4  # every one: the heads are replaced by re-encrypted copies
    assert metadata_location(spark, table) == before
    with pytest.raises(OperationError, match="current version"):
        reencrypt_table(spark, table, compromised_master_keys=[(MASTER, "2")])
    with pytest.raises(OperationError, match=f"to master key 'another-key'.*rotate '{MASTER}' and name the old"):
        reencrypt_table(spark, table, compromised_master_keys=[(MASTER, "1")], new_key_id="another-key")


def test_reencrypt_crash_mid_run_leaves_the_table_readable(spark, story):
    table = story["table"]
    with pytest.raises(OperationError, match="stopped before the expire phase"):
        reencrypt_table(spark, table, compromised_master_keys=[(MASTER, "1")], fail_at="expire")
    assert rows(spark, table) == [i for i in ROWS if i not in DELETED]
    doc = metadata_doc(metadata_location(spark, table))
    keks = [e for e in doc["encryption-keys"] if e["encrypted-by-id"] == MASTER]
    assert FRESH_KEK_PROPERTY in keks[0]["properties"] and keks[0]["key-id"] not in story["old_keks"]
    current = next(s for s in doc["snapshots"] if s["snapshot-id"] == doc["current-snapshot-id"])
    sealed_by = {e["key-id"]: e["encrypted-by-id"] for e in doc["encryption-keys"]}
    assert sealed_by[current["key-id"]] == keks[0]["key-id"]  # the rewrite wrote under the fresh KEK
    story["fresh_kek"] = keks[0]["key-id"]


def test_reencrypt_after_a_crash_the_report_still_counts_resealed_snapshots_as_dependent(spark, story):
    """After the crash the old snapshots' manifest-list keys are sealed by the fresh KEK (a clean-looking
    chain), but the leaked material opened them before: the re-run's 'before' must still list their files."""
    location = metadata_location(spark, story["table"])
    doc = metadata_doc(location)
    report = compromise_report(location, KeystoreKms(story["keystore"]), compromised_master_keys=[(MASTER, "1")])
    old = {s["snapshot-id"] for s in story["before_doc"]["snapshots"]}  # the snapshots before the run
    assert old and {c.snapshot_id for c in report.chains.values() if c.resealed} == old
    assert all(c.master_key_version == "2" and c.compromised for c in report.chains.values() if c.resealed)
    current = report.chains[doc["current-snapshot-id"]]
    assert not current.resealed and not current.compromised
    reachable = {f.path for f in report.files}
    still_reached = set(story["dependent"]) & reachable
    assert still_reached and still_reached <= set(report.dependent_paths())
    # issue 61: the Python proof walks the storage by default; without the walk it says so and is never OK
    assert report.storage is not None and report.to_dict()["storage_walked"] is True
    partial = compromise_report(location, KeystoreKms(story["keystore"]), compromised_master_keys=[(MASTER, "1")],
                                storage=False)
    assert not partial.ok and partial.to_dict()["storage_walked"] is False
    assert "storage: NOT WALKED" in partial.render_text() and "not the full proof" in partial.render_text()


def test_reencrypt_second_run_finishes_and_old_material_opens_nothing(spark, story):
    table, keystore = story["table"], story["keystore"]
    result = reencrypt_table(spark, table, compromised_master_keys=[(MASTER, "1")])
    assert result.fresh_kek == story["fresh_kek"] and result.fresh_kek_master_version == "2"
    assert result.rounds == 0 and "expire" in result.steps_done and result.expired_snapshots
    assert rows(spark, table) == [i for i in ROWS if i not in DELETED]
    assert sorted(r[0] for r in spark.sql(f"SELECT name FROM {table}.refs").collect()) == ["audit_b", "before_leak", "main"]
    location = metadata_location(spark, table)
    doc = metadata_doc(location)
    assert len(doc["snapshots"]) == 3  # main's, the branch's and the tag's re-encrypted heads
    assert not set(story["old_keks"]) & {e["key-id"] for e in doc["encryption-keys"]}
    good = verify_metadata(location, KeystoreKms(keystore), all_snapshots=True)
    assert good.ok, (good.failed_checks(), good.not_ok())
    leaked = verify_metadata(location, KeystoreKms(story["old_keystore"]), all_snapshots=True)
    assert not leaked.ok
    # With the old KEK bytes, no remaining manifest-list key opens.
    entries = {e["key-id"]: e for e in doc["encryption-keys"]}
    for snapshot in doc["snapshots"]:
        sealed = entries[snapshot["key-id"]]
        for kek in story["old_keks"].values():
            with pytest.raises(Exception):
                decrypt_manifest_list_key_metadata(kek, base64.b64decode(sealed["encrypted-key-metadata"]),
                                                   entries[sealed["encrypted-by-id"]]["properties"]["KEY_TIMESTAMP"])
    # Every file the snapshots before the run reached is gone from storage.
    old_doc = story["before_doc"]
    assert not Path(story["before"].removeprefix("file:")).exists()  # it held the KEKs version 1 wrapped
    for snapshot in old_doc["snapshots"]:
        assert not Path(snapshot["manifest-list"].removeprefix("file:")).exists()
    # The verifier's proof: every chain ends at version 2, every file that depended on version 1 is gone.
    proof = compromise_report(location, KeystoreKms(keystore), compromised_master_keys=[(MASTER, "1")],
                              previously_dependent=story["dependent"])
    assert proof.ok, proof.render_text()
    assert {c.master_key_version for c in proof.chains.values()} == {"2"} and proof.files
    assert {f.kind for f in proof.files} >= {"manifest-list", "manifest", "data"}
    assert proof.previously_dependent == len(story["dependent"]) > 10 and proof.still_present == []
    named = compromise_report(location, KeystoreKms(keystore), compromised_keks=[result.fresh_kek])
    assert not named.ok and len(named.dependent) == len(proof.files)  # the check can fail


def test_a_metadata_json_a_killed_writer_cut_short_is_an_orphan_the_run_removes(spark, story):
    """A writer killed while writing a metadata.json (the re-encryption itself, SIGKILLed mid-rewrite:
    tests/keys/test_reencrypt_killed.py) leaves a file no commit ever pointed to, which the storage
    proof cannot read. The next run removes it, whatever the orphan window: written before the run
    began, it is no commit in flight (writing one takes a moment); a file it cannot read is never
    judged, and the current metadata.json is never touched."""
    from datetime import datetime, timezone

    table, kms = story["table"], KeystoreKms(story["keystore"])
    location = metadata_location(spark, table)
    current = Path(location.removeprefix("file:"))
    cut, empty = current.parent / "00998-cut-short.metadata.json", current.parent / "00999-empty.metadata.json"
    cut.write_bytes(current.read_bytes()[: current.stat().st_size // 2])
    empty.write_bytes(b"")
    hour_ago = datetime.now(timezone.utc).timestamp() - 3600
    for path in (cut, empty):
        os.utime(path, (hour_ago, hour_ago))
    before = compromise_report(location, kms, compromised_master_keys=[(MASTER, "1")], storage=True)
    assert {(Path(f.path.removeprefix("file:")).name, f.finding) for f in before.storage.findings} == {
        (cut.name, "UNREADABLE_METADATA"), (empty.name, "UNREADABLE_METADATA")}
    assert not before.ok

    dry = reencrypt_table(spark, table, compromised_master_keys=[(MASTER, "1")], dry_run=True)
    assert {Path(p.removeprefix("file:")).name for p in dry.leftovers} >= {cut.name, empty.name}
    assert cut.exists() and empty.exists()  # a dry run removes nothing
    result = reencrypt_table(spark, table, compromised_master_keys=[(MASTER, "1")])  # the default window: 3 days
    assert {Path(p.removeprefix("file:")).name for p in result.leftovers} >= {cut.name, empty.name}
    assert not cut.exists() and not empty.exists() and current.exists()
    assert rows(spark, table) == [i for i in ROWS if i not in DELETED]
    proof = compromise_report(metadata_location(spark, table), kms, compromised_master_keys=[(MASTER, "1")],
                              storage=True)
    assert proof.ok and proof.storage.ok, proof.render_text()
