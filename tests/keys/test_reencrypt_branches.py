"""`keys reencrypt` after a compromise loses nothing and trusts nothing it is told (issue 49).

A format-3 merge-on-read table on the Hive catalog: inserts, a DELETE (deletion vectors), a tag,
a branch holding rows that are on neither main nor the tag, and an earlier expiry that left its
files on storage (``cleanExpiredFiles(false)``). Master key version 1 leaks; the attacker keeps
a copy of the keystore. The story:

1. refused before any change: the current version compromised (not rotated yet), a key that is
   not the table's, a version the KMS does not hold;
2. the dry run names every branch and tag and what it will do to each; ``tags="drop"`` counts the
   tag's rows found nowhere else;
3. the run is stopped before each of its phases in turn, and every stop leaves every branch's and
   tag's rows readable; a dry run then counts what the stopped runs left since their journal; the
   last run (the CLI, so the storage leftovers are found too) finishes and closes the journal;
4. afterwards every branch and tag has its rows, and no file on storage (every metadata.json,
   manifest list, manifest, data and delete file) opens with the stolen keystore; the
   verifier's storage-wide proof passes (and fails when a leftover is put back).

Tests run in file order, each continuing the story."""

from __future__ import annotations

import base64
import json
import os
import shutil
from pathlib import Path

import pytest

from pyiceberg_crypto.errors import OperationError
from pyiceberg_crypto.cli.main import main
from pyiceberg_crypto.keys.reencrypt import JOURNAL_CLOCK_MARGIN_MS, PHASES, reencrypt_table
from pyiceberg_crypto.kms import KeystoreKms
from pyiceberg_crypto.properties import REENCRYPT_JOURNAL_PROPERTY
from pyiceberg_crypto.verify.compromise import EXPOSED_FILE, EXPOSED_METADATA, compromise_report
from tests.keys.tables import keystore_table, kms_args, metadata_location

MASTER = "branch-key"

pytestmark = [pytest.mark.slow, pytest.mark.balance]  # in the cluster lane (make test): the lanes even out


def refs_rows(spark, table: str) -> dict[str, list[int]]:
    """Every ref's rows, sorted (a tag is read at its snapshot, a branch at its head)."""
    spark.sql(f"REFRESH TABLE {table}")
    refs = {r[0]: r[1] for r in spark.sql(f"SELECT name, type FROM {table}.refs").collect()}
    return {name: sorted(r[0] for r in spark.read.option("versionAsOf", name).table(table).collect())
            for name in refs if not name.startswith("pyiceberg_crypto_")}


def files_on_storage(table_dir: Path) -> list[Path]:
    return sorted(p for p in table_dir.rglob("*") if p.is_file() and not p.name.endswith(".crc"))


@pytest.fixture(scope="module")
def story(spark, tmp_path_factory):
    work = tmp_path_factory.mktemp("reencrypt-branches")
    keystore, table, registration = keystore_table(spark, work, MASTER, "rebr")
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('write.delete.mode'='merge-on-read', "
              "'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read')")
    spark.sql(f"INSERT INTO {table} SELECT id FROM range(1, 11)")
    spark.sql(f"INSERT INTO {table} SELECT id FROM range(11, 21)")
    # an earlier compaction, expired without cleaning its files: they stay on storage, unreachable
    spark.sql(f"CALL {table.split('.')[0]}.system.rewrite_data_files(table => '{table.split('.', 1)[1]}', "
              "options => map('rewrite-all', 'true'))")
    jvm = spark.sparkContext._jvm
    ops = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table).operations()
    java_table = jvm.org.apache.iceberg.BaseTable(ops, table)
    base = ops.refresh()
    current = base.currentSnapshot().snapshotId()
    expire = java_table.expireSnapshots().cleanExpiredFiles(False)
    for snapshot in list(base.snapshots()):
        if snapshot.snapshotId() != current:
            expire = expire.expireSnapshotId(snapshot.snapshotId())
    expire.commit()
    spark.sql(f"DELETE FROM {table} WHERE id IN (3, 13)")
    spark.sql(f"ALTER TABLE {table} CREATE TAG before_leak")
    spark.sql(f"ALTER TABLE {table} CREATE BRANCH audit")
    spark.sql(f"INSERT INTO {table}.branch_audit SELECT id FROM range(100, 146)")  # 46 rows only on the branch
    spark.sql(f"INSERT INTO {table} SELECT id FROM range(21, 31)")
    spark.sql(f"DELETE FROM {table} WHERE id = 25")
    stolen = work / "stolen-keys.json"
    shutil.copy(keystore, stolen)
    assert main(["keystore", "compromised", str(keystore), MASTER, "1"]) == 0
    location = metadata_location(spark, table)
    shutil.copy(location.removeprefix("file:"), work / "saved.json")
    before = compromise_report(location, KeystoreKms(keystore), compromised_master_keys=[(MASTER, "1")], storage=True)
    leftovers = [f.path for f in before.storage.findings if f.finding == EXPOSED_FILE]
    assert len(before.dependent) > 10 and leftovers  # every file; and the earlier expiry's files the key opens
    yield {"dependent": before.dependent_paths(), "leftovers": leftovers,"keystore": keystore, "stolen": stolen, "table": table, "work": work, "before": location,
           "rows": refs_rows(spark, table), "table_dir": Path(location.removeprefix("file:")).parent.parent}
    registration.close()


def test_refused_before_any_change(spark, story):
    table, before = story["table"], story["before"]
    assert set(story["rows"]) == {"main", "audit", "before_leak"}
    assert [i for i in story["rows"]["audit"] if i >= 100] == list(range(100, 146))
    with pytest.raises(OperationError, match=r"current version \(1\) of master key 'branch-key' is compromised: "
                                             "rotate it first"):
        reencrypt_table(spark, table)  # the KMS marks version 1; nothing named
    with pytest.raises(OperationError, match="nosuch:1 is not a version of .* master key 'branch-key'"):
        reencrypt_table(spark, table, compromised_master_keys=[("nosuch", "1")])
    KeystoreKms(story["keystore"]).rotate_key(MASTER)
    with pytest.raises(OperationError, match=r"holds no version '7' of master key 'branch-key' \(it holds: 1, 2\)"):
        reencrypt_table(spark, table, compromised_master_keys=[(MASTER, "7")])
    assert metadata_location(spark, table) == before
    code = main(["keys", "reencrypt", table, "--compromised-version", "nosuch:1", *kms_args(story["keystore"])])
    assert code == 2 and metadata_location(spark, table) == before


def test_dry_run_names_each_branch_and_tag(spark, story):
    table = story["table"]
    dry = reencrypt_table(spark, table, dry_run=True)
    assert dry.compromised_versions == ["1"] and dry.compromised_keks
    assert dry.branches_rewritten == ["audit"] and dry.tags_rewritten == ["before_leak"] and dry.refs_dropped == []
    snapshots = spark.sql(f"SELECT snapshot_id FROM {table}.snapshots").collect()
    assert len(dry.expired_snapshots) == len(snapshots)  # every one: each head is replaced by a re-encrypted copy
    drop = reencrypt_table(spark, table, dry_run=True, tags="drop")
    assert drop.refs_dropped == ["tag before_leak"] and drop.tags_rewritten == []
    # the tag holds ids 1..20 without 3 and 13; main and the branch hold them all: nothing only there
    assert drop.tag_rows_nowhere_else == {"before_leak": 0}
    assert metadata_location(spark, table) == story["before"]


@pytest.mark.parametrize("phase", PHASES)
def test_a_run_stopped_before_each_phase_loses_no_row(spark, story, phase):
    table = story["table"]
    with pytest.raises(OperationError, match=f"stopped before the {phase} phase"):
        reencrypt_table(spark, table, fail_at=phase)
    assert refs_rows(spark, table) == story["rows"]


def journal_times(spark, table: str) -> list[int]:
    """The re-encryption journal's times in the table's current metadata.json (a KEK's property)."""
    document = json.loads(Path(metadata_location(spark, table).removeprefix("file:")).read_text())
    return [int(entry["properties"][REENCRYPT_JOURNAL_PROPERTY]) for entry in document.get("encryption-keys", [])
            if REENCRYPT_JOURNAL_PROPERTY in (entry.get("properties") or {})]


def test_a_dry_run_counts_what_the_stopped_runs_left_since_their_journal(spark, story):
    """The stopped runs left the journal open (a time committed before any file was written). A file
    written after it that no commit reached is an unfinished run's leftover, whatever its age; one
    written before it is not (the orphan window judges it, 3 days by default)."""
    table, data = story["table"], story["table_dir"] / "data"
    [since] = journal_times(spark, table)
    leftover = data / "00000-0-killed-run-00001.parquet"
    leftover.write_bytes(b"PARE" + bytes(64) + b"PARE")
    older = data / "00000-0-before-the-journal-00001.parquet"
    older.write_bytes(b"PARE" + bytes(64) + b"PARE")
    seconds = (since - 3_600_000) / 1000
    os.utime(older, (seconds, seconds))
    dry = reencrypt_table(spark, table, dry_run=True)
    found = [Path(p.removeprefix("file:")) for p in dry.leftovers]
    assert leftover in found, (since, dry.leftovers)  # (and the files of the stopped runs' expired snapshots)
    assert older not in found, (since, dry.leftovers)
    assert all(p.stat().st_mtime * 1000 >= since - JOURNAL_CLOCK_MARGIN_MS for p in found)
    assert not [p for p in dry.orphans if p.endswith(older.name)]  # younger than the orphan window
    older.unlink()  # (the finishing run's proof would name it UNACCOUNTED)
    assert leftover.exists()  # a dry run removes nothing
    story["planted"] = leftover


def test_the_finishing_run_keeps_every_branch_and_tag_and_leaves_nothing_the_stolen_keys_open(spark, story, capsys):
    table, keystore, table_dir = story["table"], story["keystore"], story["table_dir"]
    report = story["work"] / "proof.json"
    code = main(["keys", "reencrypt", table, *kms_args(keystore), "--report", str(report), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0, json.dumps(doc["proof"]["storage"], indent=1)
    assert refs_rows(spark, table) == story["rows"]
    assert doc["proof"]["ok"] and doc["proof"]["storage"]["ok"] and doc["proof"]["storage"]["listed"] > 10
    assert doc["before"]["storage"]["findings"]  # the earlier expiry's leftovers, found before the run
    assert doc["reencrypt"]["compromised_versions"] == ["1"]
    assert doc["proof"]["still_present"] == []
    assert str(story["planted"]) in [p.removeprefix("file:") for p in doc["reencrypt"]["leftovers"]]
    assert not story["planted"].exists() and journal_times(spark, table) == []  # the journal is closed
    for path in [*story["dependent"], *story["leftovers"]]:  # what the stolen keys opened before: gone
        assert not Path(path.removeprefix("file:")).exists(), path
    # Independently of the proof: nothing on storage opens with the stolen keystore.
    stolen = KeystoreKms(story["stolen"])
    for path in files_on_storage(table_dir):
        if path.name.endswith(".metadata.json"):
            for entry in json.loads(path.read_text()).get("encryption-keys", []):
                if entry["encrypted-by-id"] == MASTER:
                    with pytest.raises(Exception):
                        stolen.unwrap_key(base64.b64decode(entry["encrypted-key-metadata"]), MASTER)
    for path in files_on_storage(table_dir):
        assert path.read_bytes()[:4] in (b"PARE", b"AGS1") or path.name.endswith((".metadata.json", ".text")), path
    story["removed"] = doc["reencrypt"]["removed_files"] + doc["reencrypt"]["removed_metadata_files"]
    # on the re-encrypted table, a key that does not exist gets no proof: an error, nothing changed
    after = metadata_location(spark, table)
    code = main(["keys", "reencrypt", table, "--compromised-version", "nosuch:1", *kms_args(keystore)])
    captured = capsys.readouterr()
    assert code == 2 and "nosuch:1 is not a version of" in captured.err and "compromise check" not in captured.out
    assert metadata_location(spark, table) == after


def test_the_storage_proof_names_a_leftover_put_back(spark, story):
    """The proof can fail: a pre-run metadata.json (a KEK wrapped by version 1) copied back is EXPOSED_METADATA."""
    table_dir = story["table_dir"]
    old = Path(story["before"].removeprefix("file:"))
    assert not old.exists() and str(old) in " ".join(story["removed"])
    shutil.copy(story["work"] / "saved.json", table_dir / "metadata" / old.name)
    location = metadata_location(spark, story["table"])
    proof = compromise_report(location, KeystoreKms(story["keystore"]), compromised_master_keys=[(MASTER, "1")],
                              storage=True)
    assert not proof.ok
    assert [f.finding for f in proof.storage.findings if f.path.endswith(old.name)] == [EXPOSED_METADATA]
    assert not [f for f in proof.storage.findings if f.finding == EXPOSED_FILE]  # what it reached is gone
    (table_dir / "metadata" / old.name).unlink()
    assert compromise_report(location, KeystoreKms(story["keystore"]), compromised_master_keys=[(MASTER, "1")],
                             storage=True).ok


def test_the_reachable_files_read_on_the_driver_are_the_metadata_tables(spark, story, monkeypatch):
    """What the sweep keeps is read from the manifests on the driver for a small table: the same set
    as Iceberg's all_manifests and all_files metadata tables (which a large table uses)."""
    from pyiceberg_crypto.keys import reencrypt as run
    from pyiceberg_crypto.keys.commit import load_operations

    table = story["table"]
    spark.sql(f"DELETE FROM {table} WHERE id = 7")  # a deletion vector, so delete files are in the set too
    full_name, ops = load_operations(spark, table, OperationError)
    on_driver = run._reachable_files(spark, ops, full_name)
    monkeypatch.setattr(run, "DRIVER_FILE_ENTRIES", 0)
    by_query = run._reachable_files(spark, ops, full_name)
    assert on_driver == by_query
    assert {p.rsplit(".", 1)[-1] for p in on_driver} >= {"parquet", "puffin", "avro"}
