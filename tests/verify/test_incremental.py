"""``--since ID``: the report covers exactly what the table gained after snapshot ID, as Iceberg's own
``all_entries`` / ``all_manifests`` metadata tables (read by the JVM) say, through appends, a
merge-on-read DELETE (deletion vector), rewrite_data_files, rewrite_manifests and an overwrite."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyiceberg_crypto.cli.main import main
from pyiceberg_crypto.kms import InMemoryKms
from pyiceberg_crypto.verify import verify_metadata, verify_table
from pyiceberg_crypto.verify.report import DATA, DELETION_VECTOR, MANIFEST, MANIFEST_LIST, OK, TAMPERED
from tests.verify.conftest import create_table, local, metadata_location
from tests.verify.test_tamper import flipped, replaced


KMS = "tests.verify.kms_factory:session_kms"
FILE_KINDS = {DATA, DELETION_VECTOR, "position-delete", "equality-delete"}


def current_metadata(spark, table: str) -> dict:
    return json.loads(Path(local(metadata_location(spark, table))).read_text())


def current_snapshot_id(spark, table: str) -> int:
    return current_metadata(spark, table)["current-snapshot-id"]


@pytest.fixture(scope="module")
def history(spark, kms_registration):
    """A table and the snapshot id after each step of its history."""
    table = create_table(spark, "since", partitioned_by="p", properties={
        "write.delete.mode": "merge-on-read", "write.update.mode": "merge-on-read"})
    ident = table.split(".", 1)[1]
    steps = {}

    def step(name: str, sql: str) -> None:
        spark.sql(sql)
        steps[name] = current_snapshot_id(spark, table)

    insert = "INSERT INTO {t} SELECT id, cast(id AS string), cast(id % 2 AS int) FROM range({a}, {b})"
    step("append1", insert.format(t=table, a=0, b=20))
    step("append2", insert.format(t=table, a=20, b=40))
    step("append3", insert.format(t=table, a=40, b=60))
    step("delete", f"DELETE FROM {table} WHERE id % 7 = 0")
    step("rewrite_data", f"CALL local.system.rewrite_data_files(table => '{ident}', "
                         "where => 'p = 0', options => map('rewrite-all', 'true'))")
    step("rewrite_manifests", f"CALL local.system.rewrite_manifests('{ident}')")
    step("overwrite", f"INSERT OVERWRITE {table} SELECT id, 'o', 1 FROM range(100, 110)")
    return table, steps


def sequence_number(meta: dict, snapshot_id: int) -> int:
    return next(s["sequence-number"] for s in meta["snapshots"] if s["snapshot-id"] == snapshot_id)


def expected_since(spark, table: str, since: int) -> dict[str, set[str]]:
    """What Iceberg (the JVM) says the table gained after snapshot ``since``."""
    meta = current_metadata(spark, table)
    after = sequence_number(meta, since)
    newer = {s["snapshot-id"]: s for s in meta["snapshots"] if s["sequence-number"] > after}
    files = {r.path for r in spark.sql(f"SELECT data_file.file_path AS path FROM {table}.all_entries "
                                       f"WHERE status = 1 AND file_sequence_number > {after}").collect()}
    ids = ", ".join(map(str, newer)) or "NULL"
    manifests = {r.path for r in spark.sql(f"SELECT DISTINCT path FROM {table}.all_manifests "
                                           f"WHERE added_snapshot_id IN ({ids})").collect()}
    return {"files": files, MANIFEST: manifests, MANIFEST_LIST: {s["manifest-list"] for s in newer.values()}}


def reported(report) -> dict[str, set[str]]:
    out = {"files": set(), MANIFEST: set(), MANIFEST_LIST: set()}
    for finding in report.files:
        out["files" if finding.kind in FILE_KINDS else finding.kind].add(finding.path)
    return out


@pytest.mark.parametrize("since", ["append1", "append3", "delete", "rewrite_data", "rewrite_manifests"])
def test_since_covers_exactly_what_the_newer_snapshots_added(spark, history, master_keys, since):
    table, steps = history
    report = verify_metadata(metadata_location(spark, table), InMemoryKms(master_keys),
                             since_snapshot_id=steps[since])
    assert report.ok, (report.failed_checks(), report.not_ok())
    assert report.mode == "since"
    assert report.scope["since_snapshot_id"] == steps[since]
    assert reported(report) == expected_since(spark, table, steps[since])
    order = list(steps)
    assert report.snapshot_ids == [steps[name] for name in order[order.index(since) + 1:]]


def test_since_spans_a_deletion_vector_and_skips_what_was_verified(spark, history, master_keys):
    table, steps = history
    report = verify_metadata(metadata_location(spark, table), InMemoryKms(master_keys),
                             since_snapshot_id=steps["append3"])
    kinds = {f.kind for f in report.files}
    assert DELETION_VECTOR in kinds
    full = verify_metadata(metadata_location(spark, table), InMemoryKms(master_keys))
    # "since" reports the files of every snapshot after append3 (also those replaced since), the full
    # run the current snapshot's: the file counts do not compare; what was verified is skipped.
    assert report.scope["manifests_skipped"] > 0 and full.scope["manifests_skipped"] == 0, (report.scope, full.scope)


def test_since_the_current_snapshot_verifies_nothing_new(spark, history, master_keys):
    table, steps = history
    report = verify_metadata(metadata_location(spark, table), InMemoryKms(master_keys),
                             since_snapshot_id=steps["overwrite"])
    assert report.ok and report.files == [] and report.snapshot_ids == []


def test_a_file_tampered_before_since_is_outside_one_added_after_is_caught(spark, history, master_keys):
    table, steps = history
    location = metadata_location(spark, table)
    kms = InMemoryKms(master_keys)
    before = verify_metadata(location, kms, snapshot_id=steps["append1"])
    old_file = next(f.path for f in before.files if f.kind == DATA)
    since_append1 = reported(verify_metadata(location, kms, since_snapshot_id=steps["append1"]))["files"]
    since_delete = verify_metadata(location, kms, since_snapshot_id=steps["delete"])
    new_file = next(f.path for f in since_delete.files if f.kind == DATA)
    assert old_file not in since_append1
    with replaced(old_file, flipped(Path(local(old_file)).read_bytes(), 100)):
        assert verify_metadata(location, kms, since_snapshot_id=steps["append1"]).ok
        assert not verify_metadata(location, kms, snapshot_id=steps["append1"]).ok
    with replaced(new_file, flipped(Path(local(new_file)).read_bytes(), 100)):
        report = verify_metadata(location, kms, since_snapshot_id=steps["delete"])
        assert [(f.path, f.status) for f in report.not_ok()] == [(new_file, TAMPERED)]


def test_cli_since_and_verify_table_give_the_same_files(capsys, spark, history):
    table, steps = history
    code = main(["verify", metadata_location(spark, table), "--kms", KMS, "--since", str(steps["append2"]), "--json"])
    document = json.loads(capsys.readouterr().out)
    assert code == 0 and document["table"]["mode"] == "since"
    assert document["table"]["scope"]["since_snapshot_id"] == steps["append2"]
    cli = {(f["path"], f["status"]) for f in document["files"]}
    report = verify_table(spark, table, since_snapshot_id=steps["append2"])
    assert report.ok and {(f.path, f.status) for f in report.files} == cli
    assert all(status == OK for _, status in cli)


@pytest.mark.spine  # the verification's Spark tasks on Spark 3.5 too (make test's spine)
def test_a_small_since_scope_is_checked_on_the_driver_a_larger_one_in_spark_tasks(spark, history):
    """Scheduling a Spark job costs more than checking a few files: small task lists stay on the
    driver (same check_file), the rest go to Spark tasks; the findings are the same."""
    table, steps = history
    sc = spark.sparkContext

    def spark_jobs_of(group: str, **options) -> tuple[int, set]:
        sc.setJobGroup(group, "verify_table")
        try:
            report = verify_table(spark, table, since_snapshot_id=steps["append2"], **options)
        finally:
            sc.setJobGroup(None, None)
        assert report.ok
        return len(sc.statusTracker().getJobIdsForGroup(group)), {(f.path, f.status) for f in report.files}

    driver_jobs, on_driver = spark_jobs_of("since-small")
    task_jobs, in_tasks = spark_jobs_of("since-tasks", driver_max_files=0)
    assert (driver_jobs, task_jobs) == (0, 1) and on_driver == in_tasks and on_driver


def test_since_an_unknown_snapshot_is_a_usage_error(capsys, spark, history):
    table, _ = history
    code = main(["verify", metadata_location(spark, table), "--kms", KMS, "--since", "12345", "--json"])
    document = json.loads(capsys.readouterr().out)
    assert code == 2
    assert "snapshot 12345 is not in the table metadata" in document["error"]["message"]


def test_since_across_expired_snapshots_covers_what_is_still_reachable(spark, history, master_keys):
    """Runs last (it expires two snapshots of the shared table): with the snapshots between ID and
    the current one partly expired, sequence numbers still say what is new."""
    table, steps = history
    jtable = spark.sparkContext._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)
    expire = jtable.expireSnapshots()
    for name in ("delete", "rewrite_data"):
        expire = expire.expireSnapshotId(steps[name])
    # cleanExpiredFiles(false): core ExpireSnapshots' file cleanup in 1.12.0 reads manifest lists
    # without decrypting them ("Not an Avro data file"); the Spark procedure's does not.
    expire.cleanExpiredFiles(False).commit()
    spark.sql(f"REFRESH TABLE {table}")
    meta = current_metadata(spark, table)
    assert not {steps["delete"], steps["rewrite_data"]} & {s["snapshot-id"] for s in meta["snapshots"]}
    after = sequence_number(meta, steps["append2"])
    report = verify_metadata(metadata_location(spark, table), InMemoryKms(master_keys),
                             since_snapshot_id=steps["append2"])
    assert report.ok, (report.failed_checks(), report.not_ok())
    # The current line stops at the expired parent; append3, still listed and not disproved, is taken too.
    assert report.snapshot_ids == [steps["append3"], steps["rewrite_manifests"], steps["overwrite"]]
    live = {r.path for r in spark.sql(f"SELECT data_file.file_path AS path FROM {table}.all_entries "
                                      f"WHERE status != 2 AND file_sequence_number > {after}").collect()}
    assert reported(report)["files"] == live


def test_worker_processes_find_what_threads_find_on_a_tampered_table(spark, history, master_keys, monkeypatch):
    """Long task lists go to worker processes (one per core): same findings as the thread pool,
    a tampered file included."""
    from pyiceberg_crypto.io import LocalFileIO
    from pyiceberg_crypto.verify import runners as run

    table, _ = history
    location = metadata_location(spark, table)
    kms = InMemoryKms(master_keys)
    victim = next(f.path for f in verify_metadata(location, kms).files if f.kind == DATA)
    monkeypatch.setattr(run, "PROCESS_MIN_TASKS", 1)
    monkeypatch.setattr(run, "CHUNK_TASKS", 2)  # several chunks, on two processes
    with replaced(victim, flipped(Path(local(victim)).read_bytes(), 100)):
        in_processes = verify_metadata(location, kms, runner=run.local_runner(LocalFileIO(), processes=2))
        in_threads = verify_metadata(location, kms, runner=run.local_runner(LocalFileIO(), processes=1))
    assert len(in_processes.files) > 4
    assert sorted((f.path, f.status, f.detail) for f in in_processes.files) == \
        sorted((f.path, f.status, f.detail) for f in in_threads.files)
    assert [(f.path, f.status) for f in in_processes.not_ok()] == [(victim, TAMPERED)]
