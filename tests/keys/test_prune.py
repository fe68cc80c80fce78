"""`keys prune` end to end (issue 25): a table with two KEKs (one past Iceberg's 730 days, made by a
write whose encryption manager's clock is set back, the way Iceberg's own rotation tests do), a tag,
expire_snapshots, prune (dry run, kept while a tag needs it, an INSERT racing the commit, a second
prune that commits nothing), then every remaining snapshot read through Spark with a fresh KMS and
catalog, and verified.

One table lives through the module; tests run in file order, each continuing its story."""

from __future__ import annotations

import json

import pytest

from pyiceberg_crypto.errors import OperationError
from pyiceberg_crypto.bridge import register_kms
from pyiceberg_crypto.cli.main import main
from pyiceberg_crypto.keys import key_inventory, prune_keys
from pyiceberg_crypto.keys import prune as prune_module
from pyiceberg_crypto.keys.inventory import DAY_MS
from pyiceberg_crypto.kms import KeystoreKms
from pyiceberg_crypto.verify import verify_metadata
from pyiceberg_crypto.table.metadata import TableMetadata
from tests.conftest import add_catalog
from tests.keys.tables import keystore_table, metadata_doc, metadata_location

MASTER = "prune-key"
OLD_KEK_DAYS = 740


def entries(location: str) -> dict[str, str]:
    """encryption-keys entry id -> what wraps it (the master key id for a KEK, else the KEK id)."""
    return {k["key-id"]: k["encrypted-by-id"] for k in metadata_doc(location)["encryption-keys"]}


def snapshot_ids(spark, table: str) -> list[int]:
    return [r[0] for r in spark.sql(f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at").collect()]


def empty_append_with_an_old_kek(spark, table: str, days: int) -> None:
    """Commit an (empty) append whose manifest list is sealed by a new KEK dated ``days`` ago: the
    encryption manager's clock is set back (its package-private ``setTestTimeShift``) and the
    append runs in a transaction, which keeps that manager until the commit."""
    jvm, gateway = spark.sparkContext._jvm, spark.sparkContext._gateway
    iceberg = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)
    transaction = iceberg.newTransaction()  # (re-reads the table: a new manager after this)
    manager = iceberg.operations().encryption()
    types = gateway.new_array(jvm.java.lang.Class, 1)
    types[0] = jvm.java.lang.Long.TYPE
    shift = manager.getClass().getDeclaredMethod("setTestTimeShift", types)
    shift.setAccessible(True)
    args = gateway.new_array(jvm.java.lang.Object, 1)
    args[0] = jvm.java.lang.Long(-days * DAY_MS)
    shift.invoke(manager, args)
    transaction.newAppend().commit()
    transaction.commitTransaction()
    spark.sql(f"REFRESH TABLE {table}")


def expire_all_but_current(spark, table: str) -> None:
    catalog, rest = table.split(".", 1)
    spark.sql(f"CALL {catalog}.system.expire_snapshots(table => '{rest}', older_than => TIMESTAMP '9999-01-01 00:00:00', "
              "retain_last => 1)")


@pytest.fixture(scope="module")
def story(spark, tmp_path_factory):
    """A keystore, a catalog using it, and a table: one snapshot sealed by a 740-day-old KEK, then
    three INSERTs sealed by a new KEK (Iceberg makes one: the old one is past 730 days)."""
    work = tmp_path_factory.mktemp("prune")
    keystore, table, registration = keystore_table(spark, work, MASTER, "prune")
    empty_append_with_an_old_kek(spark, table, OLD_KEK_DAYS)
    for start in (1, 10, 20):
        spark.sql(f"INSERT INTO {table} SELECT id FROM range({start}, {start + 3})")
    yield {"keystore": keystore, "table": table, "work": work, "snapshots": snapshot_ids(spark, table)}
    registration.close()


def test_two_keks_all_in_use_nothing_to_prune(spark, story):
    table = story["table"]
    inventory = key_inventory(spark, table)
    assert len(inventory.keks) == 2 and all(k.in_use for k in inventory.keks)
    old, new = sorted(inventory.keks, key=lambda k: -k.age_days)
    assert old.rotation_due and old.snapshot_ids == story["snapshots"][:1]
    assert not new.rotation_due and new.snapshot_ids == sorted(story["snapshots"][1:])
    story["old_kek"], story["new_kek"] = old.key_id, new.key_id
    before = metadata_location(spark, table)
    result = prune_keys(spark, table)
    assert (result.removed, result.committed, result.attempts) == (0, False, 1)
    assert result.metadata_location == before == metadata_location(spark, table)
    assert sorted(result.kept_keks) == sorted([old.key_id, new.key_id])


def test_a_tagged_snapshot_keeps_its_kek_and_dry_run_changes_nothing(spark, story, capsys):
    table, snapshots = story["table"], story["snapshots"]
    spark.sql(f"ALTER TABLE {table} CREATE TAG old_kek AS OF VERSION {snapshots[0]}")
    expire_all_but_current(spark, table)
    assert snapshot_ids(spark, table) == [snapshots[0], snapshots[-1]]  # the tag and the current one
    before = metadata_location(spark, table)
    gone = {e for e, by in entries(before).items() if by == story["new_kek"]} - {
        s["key-id"] for s in metadata_doc(before)["snapshots"]}
    assert len(gone) == 2  # Iceberg left the expired snapshots' manifest-list keys behind
    dry = prune_keys(spark, table, dry_run=True)
    assert (dry.removed_keks, sorted(dry.removed_entries), dry.committed) == ([], sorted(gone), False)
    assert main(["keys", "prune", table, "--kms", "keystore", "--kms-property",
                 f"keystore.path={story['keystore']}", "--dry-run"]) == 0
    assert "would remove 0 KEK(s) and 2 manifest-list key(s) no snapshot needs; 2 KEK(s) kept" in capsys.readouterr().out
    assert metadata_location(spark, table) == before
    result = prune_keys(spark, table)
    assert result.committed and result.attempts == 1 and sorted(result.removed_entries) == sorted(gone)
    assert result.not_removed == []
    after = metadata_location(spark, table)
    assert after == result.metadata_location != before
    assert set(entries(after)) == set(entries(before)) - gone
    assert story["old_kek"] in entries(after)  # the tag's snapshot still needs it


def test_prune_races_an_insert_and_loses_nothing(spark, story, monkeypatch):
    table, snapshots = story["table"], story["snapshots"]
    spark.sql(f"ALTER TABLE {table} DROP TAG old_kek")
    expire_all_but_current(spark, table)
    assert snapshot_ids(spark, table) == [snapshots[-1]]
    planned, real_plan = [], prune_module.plan_prune

    def plan_then_insert(meta, now_ms=None):  # another writer commits between prune's read and its commit
        plan = real_plan(meta, now_ms)
        planned.append(plan)
        if len(planned) == 1:
            spark.sql(f"INSERT INTO {table} VALUES (100), (101)")
        return plan

    monkeypatch.setattr(prune_module, "plan_prune", plan_then_insert)
    result = prune_keys(spark, table)
    assert result.committed and result.attempts == 2 and planned[0] == planned[1]  # refused once, redone
    assert result.removed_keks == [story["old_kek"]] and result.kept_keks == [story["new_kek"]]
    assert result.not_removed == []
    after = metadata_location(spark, table)
    doc = metadata_doc(after)
    live = {s["snapshot-id"]: s["key-id"] for s in doc["snapshots"]}
    assert len(live) == 2 and snapshots[-1] in live  # the racing INSERT's snapshot is there
    assert entries(after) == {**{key: story["new_kek"] for key in live.values()}, story["new_kek"]: MASTER}
    assert sorted(r[0] for r in spark.table(table).collect()) == [1, 2, 3, 10, 11, 12, 20, 21, 22, 100, 101]
    story["live"] = sorted(live)


def test_a_second_prune_commits_nothing_and_every_snapshot_reads_and_verifies(spark, story, capsys):
    table, keystore = story["table"], story["keystore"]
    before = metadata_location(spark, table)
    kms = ["--kms", "keystore", "--kms-property", f"keystore.path={keystore}"]
    assert main(["keys", "prune", table, *kms, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert (printed["removed"], printed["committed"], printed["kept_keks"]) == (0, False, [story["new_kek"]])
    assert metadata_location(spark, table) == before
    spark.sql(f"INSERT INTO {table} VALUES (200)")  # the next commit after a prune keeps it pruned
    location = metadata_location(spark, table)
    assert story["old_kek"] not in entries(location) and len(entries(location)) == 4
    inventory = key_inventory(spark, table)
    assert [k.key_id for k in inventory.keks] == [story["new_kek"]] and inventory.unused_entries == []
    fresh = f"{table.split('.')[0]}_fresh"
    with register_kms(spark, KeystoreKms(keystore), name=fresh):
        add_catalog(spark, fresh, warehouse=story["work"] / "wh", kms_name=fresh)
        reread = table.replace(table.split(".")[0], fresh, 1)
        assert spark.table(reread).count() == 12
        for snapshot_id in snapshot_ids(spark, table):
            assert spark.sql(f"SELECT count(*) FROM {reread} VERSION AS OF {snapshot_id}").first()[0] > 0
    report = verify_metadata(location, KeystoreKms(keystore), all_snapshots=True)
    assert report.ok, (report.failed_checks(), report.not_ok())


def test_cli_errors_are_one_line(capsys, story):
    kms = ["--kms", "keystore", "--kms-property", f"keystore.path={story['keystore']}"]
    assert main(["keys", "prune", "nosuch_catalog.db.t", *kms, "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pyiceberg-crypto keys: cannot load nosuch_catalog.db.t") and err.count("\n") == 1


def _meta(keks: dict[str, int], snapshots: dict[int, str], sealed: dict[str, str]) -> TableMetadata:
    """Table metadata with KEKs (id -> KEY_TIMESTAMP), snapshots (id -> key-id) and sealed entries."""
    keys = [{"key-id": k, "encrypted-key-metadata": "AA==", "encrypted-by-id": MASTER,
             "properties": {"KEY_TIMESTAMP": str(ts)}} for k, ts in keks.items()]
    keys += [{"key-id": k, "encrypted-key-metadata": "AA==", "encrypted-by-id": by} for k, by in sealed.items()]
    doc = {"format-version": 3, "properties": {"encryption.key-id": MASTER}, "encryption-keys": keys,
           "snapshots": [{"snapshot-id": s, "manifest-list": f"ml-{s}", "key-id": k} for s, k in snapshots.items()]}
    return TableMetadata.from_document(doc, "mem")


def test_the_kek_iceberg_uses_next_is_kept_even_unused():
    now = 1_000 * DAY_MS
    day = DAY_MS
    # Nothing sealed at all: the fresh KEK stays (Iceberg's next commit takes it), the old ones go.
    removed, entries_gone, kept = prune_module.plan_prune(_meta({"a": now - 900 * day, "b": now - 800 * day,
                                                                 "c": now - day}, {}, {}), now)
    assert (removed, entries_gone, kept) == (["a", "b"], [], ["c"])
    # Every KEK expired: the newest stays; one within the day of clock margin stays too.
    removed, _, kept = prune_module.plan_prune(_meta({"a": now - 900 * day, "b": now - 800 * day}, {}, {}), now)
    assert (removed, kept) == (["a"], ["b"])
    removed, _, kept = prune_module.plan_prune(_meta({"a": now - 730 * day - 5, "b": now - 600 * day}, {}, {}), now)
    assert (removed, kept) == ([], ["a", "b"])
    # Sealed entries: those of live snapshots and their KEKs stay, the rest go.
    removed, gone, kept = prune_module.plan_prune(
        _meta({"a": now - 900 * day, "b": now - 800 * day, "c": now - day}, {1: "m1"},
              {"m1": "a", "m2": "b", "m3": "c"}), now)
    assert (removed, gone, kept) == (["b"], ["m2", "m3"], ["a", "c"])
    with pytest.raises(OperationError, match="names key-id 'mX'.*nothing pruned"):
        prune_module.plan_prune(_meta({"a": now}, {1: "mX"}, {}), now)


def test_a_table_that_is_not_encrypted_is_told_apart_by_the_error_type():
    plain = TableMetadata.from_document({"format-version": 3, "properties": {}, "snapshots": []}, "mem")
    with pytest.raises(OperationError, match=r"^the table has no encryption.key-id: it is not encrypted$"):
        prune_module.plan_prune(plain)
    # Any other unusable metadata says that nothing was pruned.
    with pytest.raises(OperationError, match=r"snapshot 1 names key-id 'nope'.*, nothing pruned$"):
        prune_module.plan_prune(_meta({"a": 0}, {1: "nope"}, {}))
