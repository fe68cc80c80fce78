"""Master key rotation end to end with the keystore KMS (issue 16): several snapshots, `keystore
rotate`, the inventory and the verifier's warning, a dry run, a KMS failing part-way (nothing
committed), a commit that races an INSERT (redone, nothing lost), the re-wrap, retiring the old
version, then every snapshot read through Spark with a fresh KMS and verified without a JVM.

One table lives through the module; tests run in file order, each continuing its story."""

from __future__ import annotations

import base64
import json

import pytest

from pyiceberg_crypto.errors import OperationError
from pyiceberg_crypto.bridge import register_kms
from pyiceberg_crypto.cli.main import main
from pyiceberg_crypto.keys import key_inventory, rewrap_keks
from pyiceberg_crypto.keys.inventory import inventory_from_metadata
from pyiceberg_crypto.kms import KeystoreKms
from pyiceberg_crypto.verify import verify_metadata, verify_table
from pyiceberg_crypto.verify.report import KEY_ERROR, OK, WARN
from tests.conftest import add_catalog
from tests.keys.tables import InsertDuringWrap, keystore_table, metadata_doc, metadata_location

MASTER = "rot"


def kek_versions(location: str) -> dict[str, int]:
    """KEK id -> the keystore version in its PKW1 blob, read straight from the metadata.json."""
    doc = metadata_doc(location)
    return {k["key-id"]: int.from_bytes(base64.b64decode(k["encrypted-key-metadata"])[4:8], "big")
            for k in doc["encryption-keys"] if k.get("encrypted-by-id") == MASTER}


class FailingWrap(KeystoreKms):
    """The keystore KMS, failing at the wrap (after the unwrap): a re-wrap that breaks part-way."""

    def wrap_key(self, key, wrapping_key_id):
        raise ConnectionError("KMS endpoint went away")


@pytest.fixture(scope="module")
def story(spark, tmp_path_factory):
    """A keystore, a catalog using it, and a table with several snapshots (all under version 1)."""
    work = tmp_path_factory.mktemp("rotation")
    keystore, table, registration = keystore_table(spark, work, MASTER, "rot")
    for start in (1, 10, 20):
        spark.sql(f"INSERT INTO {table} SELECT id FROM range({start}, {start + 3})")
    snapshots = [r.snapshot_id for r in spark.sql(f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at").collect()]
    yield {"keystore": keystore, "table": table, "work": work, "snapshots": snapshots,
           "before": metadata_location(spark, table)}
    registration.close()


def test_inventory_matches_the_metadata_json(capsys, spark, story):
    location = metadata_location(spark, story["table"])
    inventory = key_inventory(spark, story["table"])
    doc = metadata_doc(location)
    assert inventory.metadata_location == location and inventory.master_key_id == MASTER
    assert {k.key_id for k in inventory.keks} == set(kek_versions(location))
    live = {s["key-id"]: s["snapshot-id"] for s in doc["snapshots"]}
    sealed_by = {k["key-id"]: k["encrypted-by-id"] for k in doc["encryption-keys"]}
    for kek in inventory.keks:
        assert kek.snapshot_ids == sorted(sid for key_id, sid in live.items() if sealed_by[key_id] == kek.key_id)
        assert (kek.master_key_version, kek.current_master_key_version, kek.outdated) == ("1", "1", False)
        assert kek.age_days is not None and kek.age_days < 1 and not kek.rotation_due
    assert sorted(s for k in inventory.keks for s in k.snapshot_ids) == sorted(story["snapshots"])
    assert main(["keys", "list", location, "--kms", "keystore", "--kms-property",
                 f"keystore.path={story['keystore']}", "--json"]) == 0
    out = capsys.readouterr().out
    printed = json.loads(out)
    expected = inventory.to_dict()
    for document in (printed, expected):
        for kek in document["keks"]:
            kek.pop("age_days")  # a clock reading
    assert printed == expected
    wrapped = [k["encrypted-key-metadata"] for k in doc["encryption-keys"]]
    assert not any(blob in out for blob in wrapped)  # no wrapped key (let alone a key) is printed


def test_after_rotate_the_inventory_and_the_verifier_say_re_wrap(spark, story):
    assert main(["keystore", "rotate", str(story["keystore"]), MASTER]) == 0
    inventory = key_inventory(spark, story["table"], kms=KeystoreKms(story["keystore"]))
    assert {(k.master_key_version, k.current_master_key_version, k.outdated) for k in inventory.keks} == {("1", "2", True)}
    report = verify_table(spark, story["table"], kms=KeystoreKms(story["keystore"]))
    rotation = next(c for c in report.checks if c.name == "kek-rotation")
    assert rotation.status == WARN and "keys rewrap" in rotation.detail
    assert report.ok  # a warning, not a failure


def test_dry_run_changes_nothing(spark, story):
    before = metadata_location(spark, story["table"])
    result = rewrap_keks(spark, story["table"], kms=KeystoreKms(story["keystore"]), dry_run=True)
    assert not result.committed and [(c.old_version, c.new_version) for c in result.changes] == [("1", "2")] * len(result.changes)
    assert result.changes and metadata_location(spark, story["table"]) == before


def test_a_kms_failing_part_way_commits_nothing(spark, story):
    before = metadata_location(spark, story["table"])
    with pytest.raises(OperationError, match="KMS endpoint went away.*nothing was committed"):
        rewrap_keks(spark, story["table"], kms=FailingWrap(story["keystore"]))
    assert metadata_location(spark, story["table"]) == before
    assert set(kek_versions(before).values()) == {1}


def test_rewrap_races_an_insert_and_loses_nothing(spark, story):
    table = story["table"]
    kms = InsertDuringWrap(story["keystore"], spark, table)
    result = rewrap_keks(spark, table, kms=kms)
    assert kms.inserted and result.committed and result.attempts == 2  # refused once, redone on the new state
    location = metadata_location(spark, table)
    assert location == result.metadata_location
    assert set(kek_versions(location).values()) == {2}
    rows = sorted(r[0] for r in spark.table(table).collect())
    assert rows == [1, 2, 3, 10, 11, 12, 20, 21, 22, 100, 101]
    snapshots = [r.snapshot_id for r in spark.sql(f"SELECT snapshot_id FROM {table}.snapshots").collect()]
    assert set(story["snapshots"]) < set(snapshots)  # the racing INSERT's snapshot is there too
    story["snapshots"] = snapshots
    assert main(["keys", "rewrap", table, "--kms", "keystore", "--kms-property",
                 f"keystore.path={story['keystore']}", "--dry-run"]) == 0  # nothing left to re-wrap


def test_retire_the_old_version_then_every_snapshot_reads_and_verifies(spark, story, capsys):
    keystore, table = story["keystore"], story["table"]
    assert main(["keystore", "retire", str(keystore), MASTER, "2"]) == 2  # the newest cannot go
    assert main(["keystore", "retire", str(keystore), MASTER, "1", "--table", table]) == 0  # checked: re-wrapped
    capsys.readouterr()
    # The metadata.json from before the re-wrap needs version 1: it no longer opens (the control).
    old = verify_metadata(story["before"], KeystoreKms(keystore))
    assert {c.status for c in old.checks if c.name == "kek"} == {KEY_ERROR}
    # A fresh KMS and a fresh catalog (nothing cached): every snapshot reads through Spark.
    fresh = f"{table.split('.')[0]}_fresh"
    with register_kms(spark, KeystoreKms(keystore), name=fresh):
        add_catalog(spark, fresh, warehouse=story["work"] / "wh", kms_name=fresh)
        reread = table.replace(table.split(".")[0], fresh, 1)
        assert spark.table(reread).count() == 11
        for snapshot_id in story["snapshots"]:
            assert spark.sql(f"SELECT count(*) FROM {reread} VERSION AS OF {snapshot_id}").first()[0] > 0
    report = verify_metadata(metadata_location(spark, table), KeystoreKms(keystore), all_snapshots=True)
    assert report.ok, (report.failed_checks(), report.not_ok())
    assert {c.status for c in report.checks if c.name == "kek-rotation"} == {OK}
    inventory = inventory_from_metadata(metadata_location(spark, table), KeystoreKms(keystore))
    assert inventory.master_key_versions() == {(MASTER, "2")}
