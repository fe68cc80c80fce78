"""``encrypt_table`` / ``pyiceberg-crypto encrypt`` (issue 51) on real Spark: a plaintext table with
an evolved schema and partition spec, a sort order, properties, comments, v2 position deletes,
becomes an encrypted table under its own name with the same rows, checked before the swap."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyiceberg_crypto.errors import OperationError
from pyiceberg_crypto.adopt import PHASES, encrypt_table
from pyiceberg_crypto.cli.main import main
from pyiceberg_crypto.verify import verify_table
from pyiceberg_crypto.testing import pytest_plugin
from tests.adopt.conftest import MASTER

#: make test runs the adopt tests in the cluster lane, which ends first (the marker `balance`, pyproject.toml).
pytestmark = pytest.mark.balance

rest_catalog_server = pytest_plugin.rest_catalog_server  # the session's REST catalog server (a fixture)


def proof(spark):
    def prove(table):
        report = verify_table(spark, table)
        return report.ok, f"verify_table: {'OK' if report.ok else 'NOT OK'} ({len(report.files)} files)"
    return prove


def rows(spark, table):
    return sorted(tuple(r) for r in spark.table(table).collect())


def plaintext_files(location: str) -> list[Path]:
    root = Path(location.removeprefix("file:"))
    found = []
    for path in root.rglob("*"):
        if path.is_file() and not path.name.endswith((".json", ".crc")):
            with path.open("rb") as handle:
                head = handle.read(4)
            if head in (b"PAR1", b"Obj\x01"):
                found.append(path)
    return found


def evolved_table(spark, table):
    spark.sql(f"CREATE TABLE {table} (id bigint COMMENT 'order id', region string, ts timestamp, note string) "
              "USING iceberg PARTITIONED BY (region) COMMENT 'orders of the shop' "
              "TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='merge-on-read', 'team'='payments')")
    spark.sql(f"INSERT INTO {table} VALUES (1, 'eu', timestamp'2026-01-01 10:00:00', 'a'), "
              "(2, 'us', timestamp'2026-01-02 10:00:00', 'b'), (3, 'eu', timestamp'2026-01-03 10:00:00', null)")
    spark.sql(f"ALTER TABLE {table} DROP COLUMN note")
    spark.sql(f"ALTER TABLE {table} ADD COLUMN amount double COMMENT 'in EUR'")
    spark.sql(f"ALTER TABLE {table} ADD PARTITION FIELD days(ts)")
    spark.sql(f"ALTER TABLE {table} WRITE ORDERED BY id")
    spark.sql(f"INSERT INTO {table} VALUES (4, 'eu', timestamp'2026-02-01 10:00:00', 1.5), "
              "(5, 'asia', timestamp'2026-02-02 10:00:00', 2.5), (6, 'us', timestamp'2026-02-03 10:00:00', null)")
    spark.sql(f"DELETE FROM {table} WHERE id IN (2, 5)")  # v2 position deletes


def java_table(spark, table):
    return spark.sparkContext._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)


@pytest.mark.slow
def test_adopt_evolved_partitioned_table_keeps_schema_spec_order_properties_rows(spark, lake, capsys):
    table = f"{lake['schema']}.orders"
    evolved_table(spark, table)
    before_rows = rows(spark, table)
    before = java_table(spark, table)
    schema, spec, order = before.schema().toString(), before.spec().toString(), before.sortOrder().toString()
    ids = sorted((f.name(), f.fieldId()) for f in before.schema().columns())
    comment = spark.sql(f"DESCRIBE TABLE EXTENDED {table}").where("col_name = 'Comment'").collect()
    result = encrypt_table(spark, table, MASTER, prove=proof(spark))
    assert result.swapped and result.compared["equal"] and result.compared["rows"] == 4
    assert result.proof.startswith("verify_table: OK")
    after = java_table(spark, table)
    assert after.properties().get("encryption.key-id") == MASTER
    assert after.schema().toString() == schema and after.spec().toString() == spec
    assert after.sortOrder().toString() == order
    assert sorted((f.name(), f.fieldId()) for f in after.schema().columns()) == ids
    assert after.properties().get("team") == "payments" and after.properties().get("comment") == "orders of the shop"
    assert spark.sql(f"DESCRIBE TABLE EXTENDED {table}").where("col_name = 'Comment'").collect() == comment
    assert rows(spark, table) == before_rows
    assert plaintext_files(after.location()) == []
    assert result.plaintext_table and spark.catalog.tableExists(result.plaintext_table)
    assert result.purge_command == f"DROP TABLE {result.plaintext_table} PURGE"
    assert any("older partition spec" in n for n in result.not_kept)
    assert any("time travel" in n for n in result.not_kept)
    # the command again (the swap was done): it purges the original
    assert main(["encrypt", table, "--key-id", MASTER, "--purge-now", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["purged"] and again["swapped"] and not spark.catalog.tableExists(result.plaintext_table)
    assert encrypt_table(spark, table, MASTER).purged  # and then there is nothing left to do
    with pytest.raises(OperationError, match="no table"):
        encrypt_table(spark, f"{lake['schema']}.nosuch", MASTER)


def small_table(spark, table, *, version=3):
    spark.sql(f"CREATE TABLE {table} (id bigint, part string) USING iceberg PARTITIONED BY (part) "
              f"TBLPROPERTIES ('format-version'='{version}', 'write.delete.mode'='merge-on-read')")
    spark.sql(f"INSERT INTO {table} VALUES (1, 'a'), (2, 'b'), (3, 'a')")


@pytest.mark.slow
def test_adopt_v3_deletion_vectors_concurrent_writer_and_refs(spark, lake):
    table = f"{lake['schema']}.dv"
    small_table(spark, table)
    spark.sql(f"DELETE FROM {table} WHERE id = 2")  # a deletion vector
    spark.sql(f"ALTER TABLE {table} CREATE TAG before_writer")
    spark.sql(f"ALTER TABLE {table} CREATE BRANCH audit")

    def writer(message):  # another application appends while the copy runs, and once more before the swap
        if message.startswith("copy "):
            spark.sql(f"INSERT INTO {table} VALUES (10, 'a'), (11, 'c')")
        elif message == "verify":
            spark.sql(f"INSERT INTO {table} VALUES (12, 'b')")

    old_location = java_table(spark, table).location()
    assert plaintext_files(old_location)
    result = encrypt_table(spark, table, MASTER, prove=proof(spark), progress=writer, purge_now=True)
    assert rows(spark, table) == [(1, "a"), (3, "a"), (10, "a"), (11, "c"), (12, "b")]
    assert len(result.carried_snapshots) == 2 and result.redone_from == []
    assert result.compared["rows"] == 5 and result.compared["partitioned_by"] == ["part"]
    assert result.refs == ["branch audit", "tag before_writer"]
    assert any("refs branch audit, tag before_writer" in n for n in result.not_kept)
    assert result.purged and not spark.catalog.tableExists(result.plaintext_table)
    assert plaintext_files(old_location) == []  # DROP TABLE ... PURGE removed the original's files
    location = java_table(spark, table).location()
    assert plaintext_files(location) == [] and list(Path(location.removeprefix("file:")).rglob("*.parquet"))


@pytest.mark.slow
def test_adopt_delete_during_copy_is_detected_refused_then_redone(spark, lake):
    table = f"{lake['schema']}.deleted"
    small_table(spark, table, version=2)
    deleted = []

    def deleter(message):
        if message.startswith("copy ") and not deleted:
            deleted.append(True)
            spark.sql(f"DELETE FROM {table} WHERE id = 1")  # v2 position delete: an overwrite snapshot

    with pytest.raises(OperationError, match="changed during the copy"):
        encrypt_table(spark, table, MASTER, on_change="refuse", progress=deleter)
    assert java_table(spark, table).properties().get("encryption.key-id") is None  # nothing swapped
    result = encrypt_table(spark, table, MASTER, purge_after=0.5)  # the default: redo from the new snapshot
    assert len(result.redone_from) == 1 and result.swapped and result.purged
    assert rows(spark, table) == [(2, "b"), (3, "a")]


@pytest.mark.slow
def test_adopt_schema_change_during_copy_is_refused_until_the_staging_table_is_dropped(spark, lake):
    table = f"{lake['schema']}.altered"
    small_table(spark, table)

    def alter(message):
        if message.startswith("copy "):
            spark.sql(f"ALTER TABLE {table} ADD COLUMN extra string")
            spark.sql(f"INSERT INTO {table} VALUES (4, 'b', 'x')")

    with pytest.raises(OperationError, match="changed its schema, partition spec or sort order during the copy"):
        encrypt_table(spark, table, MASTER, progress=alter)
    with pytest.raises(OperationError, match="changed its schema"):  # the staging table was made from the old schema
        encrypt_table(spark, table, MASTER)
    spark.sql(f"DROP TABLE {table}__encrypting PURGE")
    result = encrypt_table(spark, table, MASTER, purge_now=True)
    assert result.swapped and rows(spark, table) == [(1, "a", None), (2, "b", None), (3, "a", None), (4, "b", "x")]
    assert any(n.startswith("location: ") for n in result.not_kept)


@pytest.mark.slow
def test_adopt_crash_before_each_phase_then_rerun_goes_on(spark, lake):
    """A crash just before each phase in turn (``fail_at``), on one table: after each crash exactly
    one table holds the name with all its rows (between the two renames: the staging table, the
    original renamed), and a re-run carries on from what the crash left, through that phase, to the
    next crash; the last re-run finishes (swapped, purged, one table, the rows, encrypted)."""
    name = "crash"
    table = f"{lake['schema']}.{name}"
    small_table(spark, table)
    expected = rows(spark, table)

    def names():
        return {r.tableName for r in spark.sql(f"SHOW TABLES IN {lake['schema']}").collect()
                if r.tableName.startswith(name)}

    for phase in PHASES:  # each run but the first is a re-run after the previous phase's crash
        with pytest.raises(OperationError, match=f"before the {phase} phase"):
            encrypt_table(spark, table, MASTER, fail_at=phase, purge_now=True)
        if phase == "swap-staging":  # between the two renames: the original renamed, the copy not yet
            assert name not in names() and f"{name}__encrypting" in names()
        else:
            assert name in names() and rows(spark, table) == expected
        encrypted = java_table(spark, table).properties().get("encryption.key-id") if name in names() else None
        assert encrypted == (MASTER if phase == "purge" else None)  # swapped only once past swap-staging
    result = encrypt_table(spark, table, MASTER, purge_now=True)
    assert result.swapped and result.purged
    assert names() == {name}
    assert rows(spark, table) == expected
    assert java_table(spark, table).properties().get("encryption.key-id") == MASTER


@pytest.mark.slow
def test_adopt_cli_keep_original_under_a_name(spark, lake, capsys):
    table = f"{lake['schema']}.kept"
    small_table(spark, table)
    code = main(["encrypt", table, "--key-id", MASTER, "--keep-original", "kept_plain"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "compared: 3 row(s) in 2 partition(s)" in out and "proof: verify_table" in out and ": OK" in out
    assert "not kept: time travel" in out and "DROP TABLE" in out
    kept = java_table(spark, f"{lake['schema']}.kept_plain")
    assert kept.properties().get("encryption.key-id") is None and plaintext_files(kept.location())
    assert plaintext_files(java_table(spark, table).location()) == []
    assert rows(spark, table) == rows(spark, f"{lake['schema']}.kept_plain")
    assert main(["encrypt", table, "--key-id", MASTER, "--purge-now", "--keep-original", "x"]) == 2


@pytest.mark.slow
def test_adopt_rest_catalog_rename_swap_and_purge(spark, lake, rest_catalog_server):
    from tests.rest.tables import new_namespace, new_rest_catalog

    catalog = new_rest_catalog(spark, rest_catalog_server.uri, lake["work"] / "rest-wh", prefix="adoptrest",
                               kms_name=lake["kms_name"])
    namespace = new_namespace(spark, catalog, "adopt")
    table = f"{catalog}.{namespace}.events"
    small_table(spark, table)
    spark.sql(f"INSERT INTO {table} VALUES (4, 'c')")
    expected = rows(spark, table)
    old_location = java_table(spark, table).location()
    assert plaintext_files(old_location)
    result = encrypt_table(spark, table, MASTER, prove=proof(spark), purge_now=True)
    assert result.swapped and result.purged and result.proof.startswith("verify_table: OK")
    assert rows(spark, table) == expected
    new = java_table(spark, table)
    assert new.properties().get("encryption.key-id") == MASTER and plaintext_files(new.location()) == []
    assert plaintext_files(old_location) == []  # the original's files are gone
    shown = {r.tableName for r in spark.sql(f"SHOW TABLES IN {catalog}.{namespace}").collect()}
    assert shown == {"events"}


@pytest.mark.slow
def test_adopt_stream_runs_through_the_swap_exactly_once(spark, lake, tmp_path):
    """A file stream (availableNow triggers, one checkpoint) appends before, during the copy, just
    before the swap and after it: every record is in the table once."""
    table = f"{lake['schema']}.stream"
    spark.sql(f"CREATE TABLE {table} (id bigint, part string) USING iceberg PARTITIONED BY (part)")
    inbox, checkpoint = tmp_path / "inbox", tmp_path / "checkpoint"
    inbox.mkdir()
    sent = []

    def stream(first: int, count: int) -> None:
        (inbox / f"batch-{first}.json").write_text("".join(f'{{"id": {i}, "part": "p{i % 2}"}}\n'
                                                          for i in range(first, first + count)))
        sent.extend(range(first, first + count))
        query = (spark.readStream.schema("id bigint, part string").json(str(inbox)).writeStream
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).toTable(table))
        query.awaitTermination()

    stream(0, 5)

    def during(message):
        if message.startswith("copy "):
            stream(100, 3)  # lands after S0: carried over in a round
        elif message == "verify":
            stream(200, 2)  # lands after the rounds: caught up and verified again before the swap

    result = encrypt_table(spark, table, MASTER, progress=during, purge_now=True)
    assert len(result.carried_snapshots) == 2
    stream(300, 4)  # the same query after the swap: into the encrypted table under the name
    assert sorted(r.id for r in spark.table(table).collect()) == sorted(sent)
    assert java_table(spark, table).properties().get("encryption.key-id") == MASTER
    assert plaintext_files(java_table(spark, table).location()) == []


@pytest.mark.slow
def test_adopt_an_unknown_key_id_fails_before_any_table_is_made(spark, lake):
    """issue 61: a typo in the key id failed only after DB.T__encrypting was created, and the re-run
    with the right key was then refused. The key is now checked with the KMS (a wrap) first."""
    from pyiceberg_crypto.errors import InvalidArgumentError

    name = "typo"
    table = f"{lake['schema']}.{name}"
    small_table(spark, table)
    with pytest.raises(InvalidArgumentError, match="cannot wrap with master key 'no-such-key'"):
        encrypt_table(spark, table, "no-such-key")
    tables = {r.tableName for r in spark.sql(f"SHOW TABLES IN {lake['schema']}").collect()}
    assert f"{name}__encrypting" not in tables and name in tables


@pytest.mark.slow
def test_adopt_a_staging_table_of_an_earlier_run_under_another_key_is_dropped_and_made_again(spark, lake):
    """issue 61: the staging table an earlier run left under another (existing) master key is
    recognised, dropped with a message, and the copy made again under the key asked for."""
    other = "adopt-other-key"
    assert main(["keystore", "add", str(lake["keystore"]), other]) == 0
    table = f"{lake['schema']}.rekeyed"
    small_table(spark, table)
    expected = rows(spark, table)
    with pytest.raises(OperationError, match="before the copy phase"):
        encrypt_table(spark, table, other, fail_at="copy")
    said: list[str] = []
    result = encrypt_table(spark, table, MASTER, purge_now=True, progress=said.append)
    assert "dropped the staging table of an earlier run (another master key)" in result.steps_done
    assert any(f"it is encrypted with master key '{other}', not '{MASTER}'" in line for line in said)
    assert result.swapped and rows(spark, table) == expected
    assert java_table(spark, table).properties().get("encryption.key-id") == MASTER


@pytest.mark.slow
def test_adopt_purge_leaves_no_plaintext_file_under_the_original_location(spark, lake):
    """issue 61: DROP TABLE ... PURGE removes the files the original's metadata names; a plaintext
    file a failed (or late) writer left under its location stayed. The purge now removes those too,
    lists the location again, and the result no longer says the snapshots stay "until it is purged"."""
    import shutil

    table = f"{lake['schema']}.leftover"
    small_table(spark, table)
    location = str(java_table(spark, table).location())
    [one, *_] = plaintext_files(location)
    orphan = one.with_name("00000-0-a-failed-writer-00001.parquet")
    shutil.copyfile(one, orphan)  # a writer's file that no commit ever named
    result = encrypt_table(spark, table, MASTER, purge_now=True)
    assert result.purged and any(path.endswith(orphan.name) for path in result.swept)
    assert not orphan.exists() and plaintext_files(location) == []
    assert not any("until it is purged" in item for item in result.not_kept)
    assert rows(spark, table) == [(1, "a"), (2, "b"), (3, "a")]


@pytest.mark.slow
def test_adopt_one_rule_for_a_table_already_encrypted(spark, lake, capsys):
    """issue 61: a table this command encrypted earlier exited 0 on a re-run, one encrypted at its
    creation exited 2. One rule now: under the key asked for, nothing to do (exit 0); under another
    master key, refused (exit 2), nothing changed."""
    table = f"{lake['schema']}.born_encrypted"
    spark.sql(f"CREATE TABLE {table} (id bigint) USING iceberg "
              f"TBLPROPERTIES ('format-version'='3', 'encryption.key-id'='{MASTER}')")
    spark.sql(f"INSERT INTO {table} VALUES (1), (2)")
    result = encrypt_table(spark, table, MASTER)
    assert result.already_encrypted and not result.swapped and result.steps_done == ["already encrypted"]
    with pytest.raises(OperationError, match=f"already encrypted, under master key '{MASTER}', not 'other-key'"):
        encrypt_table(spark, table, "other-key")
    capsys.readouterr()
    assert main(["encrypt", table, "--key-id", MASTER]) == 0
    assert "already encrypted (master key adopt-key): nothing to do" in capsys.readouterr().out
    assert rows(spark, table) == [(1,), (2,)]


def writer_catalog(spark, lake, name="adopt_writer"):
    """A second catalog on the same metastore and warehouse: its own Iceberg catalog cache, as in
    another application that writes into the table (the swap's renames do not reach its cache)."""
    from tests.conftest import add_catalog

    add_catalog(spark, name, warehouse=lake["work"] / "wh", kms_name=lake["kms_name"])
    return name


def writer_table(lake, catalog, table):
    return f"{catalog}.{lake['schema'].split('.', 1)[1]}.{table}"


@pytest.mark.slow
def test_adopt_swap_with_an_active_writer_is_two_renames_and_loses_no_row(spark, lake):
    """issue 61: with a writer active, the name was missing for ~5 s (catch-up, fingerprints and the
    proof ran between the renames). Now the rounds run with the name live and the swap is two renames
    and a load: a writer (another catalog cache, committing every ~2 s, reloading after a failure)
    commits during the copy and during the first verification, then holds off until the run is done
    (a writer that commits faster than one verification round is refused: the next test), then goes
    on into the encrypted table; every row it committed is there, once."""
    import threading
    import time

    from pyiceberg_crypto.adopt import reload_table
    from tests.testkit import load_factor

    name = "busy"
    table = f"{lake['schema']}.{name}"
    small_table(spark, table)
    writes = writer_table(lake, writer_catalog(spark, lake), name)
    committed, failures, stop, quiet = [], [], threading.Event(), threading.Event()

    def writer():
        value = 1000
        while not stop.is_set():
            if quiet.is_set():
                stop.wait(0.1)
                continue
            try:
                spark.sql(f"INSERT INTO {writes} VALUES ({value}, 'w')")
                committed.append(value)
                value += 1
                stop.wait(2.0)
            except Exception as exc:  # the swap's window (or a commit that lost a race): reload, try again
                failures.append(str(exc).splitlines()[0][:160])
                reload_table(spark, writes)
                stop.wait(0.2)

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        while len(committed) < 2:
            time.sleep(0.2)

        def wait_for_a_commit(message):  # the writer commits during the copy, and after the first check
            if message.startswith("copy ") or message == "verify":
                seen = len(committed)
                deadline = time.monotonic() + 30 * load_factor()
                while len(committed) == seen and time.monotonic() < deadline:
                    time.sleep(0.05)
                if message == "verify":  # the rounds then converge, whatever one round takes here
                    quiet.set()

        started = time.monotonic()
        result = encrypt_table(spark, table, MASTER, prove=proof(spark), max_rounds=10, progress=wait_for_a_commit)
        took = time.monotonic() - started
        quiet.clear()
        while len(committed) < len(result.carried_snapshots) + 4:  # the writer goes on after the swap
            time.sleep(0.2)
    finally:
        stop.set()
        thread.join(timeout=60)
    print(f"swap gap {result.swap_gap_seconds:.3f} s, {result.swap_attempts} attempt(s), {result.rounds} round(s), "
          f"run {took:.1f} s; writer: {len(committed)} committed, {len(failures)} failed {failures[:3]}")
    assert result.swapped and result.swap_gap_seconds < 2.0 * load_factor()
    assert len(result.carried_snapshots) >= 2 and result.rounds >= 2  # caught up (and verified) before the swap
    spark.sql(f"REFRESH TABLE {table}")
    ids = [r.id for r in spark.table(table).collect()]
    assert sorted(i for i in ids if i >= 1000) == sorted(committed)  # every committed row, once
    new = java_table(spark, table)
    assert new.properties().get("encryption.key-id") == MASTER and plaintext_files(new.location()) == []


@pytest.mark.slow
def test_adopt_writer_that_hit_the_swap_recovers_with_reload_table(spark, lake):
    """issue 61: a writer session that hit the missing name twice (its cached table refreshed twice
    while the name was missing: current metadata null) failed every statement afterwards, REFRESH
    TABLE included. ``reload_table`` recovers it; its next INSERT lands, encrypted, in the new table."""
    from pyiceberg_crypto.adopt import reload_table

    name = "stuck"
    table = f"{lake['schema']}.{name}"
    small_table(spark, table)
    writes = writer_table(lake, writer_catalog(spark, lake), name)
    spark.sql(f"INSERT INTO {writes} VALUES (10, 'w')")  # the writer's catalog caches the table
    window = []

    def hit_the_window(message):
        if message == "swap-staging":  # between the two renames
            for value in (11, 12):
                with pytest.raises(Exception) as failed:
                    spark.sql(f"INSERT INTO {writes} VALUES ({value}, 'w')")
                window.append(str(failed.value))

    result = encrypt_table(spark, table, MASTER, progress=hit_the_window)
    assert result.swapped and "NoSuchTableException" in window[0]
    for statement in (f"INSERT INTO {writes} VALUES (13, 'w')", f"REFRESH TABLE {writes}"):
        with pytest.raises(Exception, match=r"TableOperations.current\(\)\" is null"):
            spark.sql(statement)  # stuck: every statement, REFRESH TABLE too
    reload_table(spark, writes)
    spark.sql(f"INSERT INTO {writes} VALUES (14, 'w')")
    spark.sql(f"REFRESH TABLE {table}")
    assert rows(spark, table) == [(1, "a"), (2, "b"), (3, "a"), (10, "w"), (14, "w")]
    new = java_table(spark, table)
    assert new.properties().get("encryption.key-id") == MASTER and plaintext_files(new.location()) == []


@pytest.mark.slow
def test_adopt_a_commit_just_before_the_swap_renames_back_and_goes_again_then_refuses(spark, lake):
    """issue 61: a writer's commit between the last check and the first rename is seen by the one
    load between the renames: the original is renamed back at once, caught up, verified, swapped.
    A writer that commits before every swap gets the run refused after ``max_rounds``, nothing swapped."""
    table = f"{lake['schema']}.racing"
    small_table(spark, table)
    inserted = []

    def commit_before_the_rename(times):
        def hook(message):
            if message == "swap-original" and len(inserted) < times:
                inserted.append(len(inserted))
                spark.sql(f"INSERT INTO {table} VALUES ({100 + len(inserted)}, 'r')")
        return hook

    with pytest.raises(OperationError, match="faster than the swap .*: pause them .*nothing was swapped"):
        encrypt_table(spark, table, MASTER, max_rounds=2, progress=commit_before_the_rename(99))
    assert java_table(spark, table).properties().get("encryption.key-id") is None  # the table is as it was
    assert len(rows(spark, table)) == 3 + len(inserted)
    inserted.clear()
    said: list[str] = []
    hook = commit_before_the_rename(1)
    result = encrypt_table(spark, table, MASTER, progress=lambda m: (said.append(m), hook(m)))
    assert result.swapped and result.swap_attempts == 2 and result.swap_gap_seconds is not None
    assert any("changed just before the swap: renamed back" in line for line in said)
    assert rows(spark, table) == sorted([(1, "a"), (2, "b"), (3, "a"), (101, "r"), (102, "r"), (101, "r")])
    assert java_table(spark, table).properties().get("encryption.key-id") == MASTER
