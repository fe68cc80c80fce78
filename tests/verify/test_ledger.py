"""The verification ledger (``--state FILE``): full once, then incremental; it never advances on a run
that is not OK; rollbacks, restored metadata and replaced tables are a not-OK ``history`` check;
``--accept-history`` resets it; a corrupt ledger or another table's is exit 2, never replaced.

One table lives through the whole module (tests run in file order, each continues its history)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyiceberg_crypto.cli.main import main
from pyiceberg_crypto.verify import LedgerError, verify_metadata, verify_table
from pyiceberg_crypto.table.metadata import metadata_hash
from pyiceberg_crypto.verify.report import DATA, DIVERGED, OK, TAMPERED
from tests.verify.conftest import create_table, local, metadata_location
from tests.verify.test_tamper import flipped, replaced

KMS = "tests.verify.kms_factory:session_kms"


def insert(spark, table: str, start: int, count: int = 10) -> None:
    spark.sql(f"INSERT INTO {table} SELECT id, cast(id AS string), cast(id % 2 AS int) FROM range({start}, {start + count})")


def current_snapshot_id(spark, table: str) -> int:
    return json.loads(Path(local(metadata_location(spark, table))).read_text())["current-snapshot-id"]


def verify(capsys, location: str, ledger: Path, *extra: str) -> tuple[int, dict]:
    code = main(["verify", location, "--kms", KMS, "--state", str(ledger), "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


def checks(document: dict) -> dict[str, dict]:
    return {c["name"]: c for c in document["table"]["checks"]}


def data_files(document: dict) -> set[str]:
    return {f["path"] for f in document["files"] if f["kind"] == DATA}


@pytest.fixture(scope="module")
def table(spark, kms_registration):
    name = create_table(spark, "ledger", partitioned_by="p")
    insert(spark, name, 0)
    insert(spark, name, 10)
    return name


@pytest.fixture(scope="module")
def ledger(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("ledger") / "table.ledger.json"


def test_first_run_is_full_and_records_the_current_snapshot(capsys, spark, table, ledger):
    code, document = verify(capsys, metadata_location(spark, table), ledger)
    assert code == 0 and document["table"]["mode"] == "current"
    assert len(data_files(document)) >= 2
    assert document["ledger"]["advanced"] is True and document["ledger"]["previous"] is None
    last = json.loads(ledger.read_text())["last"]
    assert last["snapshot_id"] == current_snapshot_id(spark, table)
    assert last["metadata_location"] == metadata_location(spark, table)
    assert last["metadata_hash"] == metadata_hash(Path(local(metadata_location(spark, table))).read_bytes())


def test_second_run_verifies_only_what_is_newer(capsys, spark, table, ledger):
    code, document = verify(capsys, metadata_location(spark, table), ledger)
    assert code == 0 and document["table"]["mode"] == "since" and document["files"] == []
    assert checks(document)["history"]["status"] == OK
    before = {f["path"] for f in verify_metadata_doc(spark, table)}
    insert(spark, table, 20)
    code, document = verify(capsys, metadata_location(spark, table), ledger)
    assert code == 0 and document["table"]["mode"] == "since"
    assert data_files(document) and not data_files(document) & before
    assert {f["kind"] for f in document["files"]} == {DATA, "manifest", "manifest-list"}


def verify_metadata_doc(spark, table: str) -> list[dict]:
    from tests.verify.kms_factory import session_kms

    return [f.to_dict() for f in verify_metadata(metadata_location(spark, table), session_kms()).files]


def test_a_tampered_new_file_keeps_the_ledger_where_it_was(capsys, spark, table, ledger):
    before = {f["path"] for f in verify_metadata_doc(spark, table)}
    insert(spark, table, 30)
    location = metadata_location(spark, table)
    new_file = sorted({f["path"] for f in verify_metadata_doc(spark, table) if f["kind"] == DATA} - before)[0]
    recorded = ledger.read_bytes()
    with replaced(new_file, flipped(Path(local(new_file)).read_bytes(), 100)):
        code, document = verify(capsys, location, ledger)
    assert code == 1 and document["ledger"]["advanced"] is False
    assert [(f["path"], f["status"]) for f in document["files"] if f["status"] != OK] == [(new_file, TAMPERED)]
    assert ledger.read_bytes() == recorded
    code, document = verify(capsys, location, ledger)  # restored: the same new files, now OK
    assert code == 0 and new_file in data_files(document) and document["ledger"]["advanced"] is True


def test_an_older_metadata_json_restored_is_a_history_failure(capsys, spark, table, ledger):
    location = metadata_location(spark, table)
    older = sorted(Path(local(location)).parent.glob("*.metadata.json"))[-3]
    recorded = ledger.read_bytes()
    code, document = verify(capsys, f"file:{older}", ledger)
    assert code == 1
    history = checks(document)["history"]
    assert history["status"] == DIVERGED and "went backwards" in history["detail"]
    assert document["table"]["mode"] == "current"  # what can be trusted is verified in full
    assert ledger.read_bytes() == recorded


def test_metadata_restored_with_its_metastore_entry_through_verify_table(spark, table, tmp_path):
    state = tmp_path / "spark.ledger.json"
    assert verify_table(spark, table, state=str(state)).ok
    current = metadata_location(spark, table)
    older = "file:" + str(sorted(Path(local(current)).parent.glob("*.metadata.json"))[-2])
    with metastore_points_at(spark, table, older):
        report = verify_table(spark, table, state=str(state))
    names = {c.name: c for c in report.checks}
    assert names["metadata-hash"].status == OK  # the restored pair is consistent...
    assert names["history"].status == DIVERGED  # ...but older than what the ledger proved
    assert report.ok is False and report.ledger["advanced"] is False
    assert verify_table(spark, table, state=str(state)).ok  # back to the real current state


class metastore_points_at:
    """Rewrite the metastore's metadata_location / metadata_hash of ``table`` (and restore them)."""

    def __init__(self, spark, table: str, location: str):
        self.spark, self.table, self.location = spark, table, location

    def _set(self, location: str) -> None:
        from pyiceberg_crypto.catalog.spark import catalog_properties

        catalog, database, name = self.table.split(".")
        jvm = self.spark.sparkContext._jvm
        hive_conf = jvm.org.apache.hadoop.hive.conf.HiveConf
        conf = hive_conf(self.spark.sparkContext._jsc.hadoopConfiguration(), hive_conf._java_lang_class)
        props = catalog_properties(self.spark, catalog)
        if props.get("uri"):
            conf.set("hive.metastore.uris", props["uri"])
        client = jvm.org.apache.hadoop.hive.metastore.HiveMetaStoreClient(conf)
        try:
            hive_table = client.getTable(database, name)
            params = hive_table.getParameters()
            params.put("metadata_location", location)
            params.put("metadata_hash", metadata_hash(Path(local(location)).read_bytes()))
            client.alter_table(database, name, hive_table)
        finally:
            client.close()

    def __enter__(self):
        self.original = metadata_location(self.spark, self.table)
        self._set(self.location)
        return self

    def __exit__(self, *exc):
        self._set(self.original)


def test_rollback_then_a_new_commit_is_a_history_failure_until_accepted(capsys, spark, table, ledger):
    ident = table.split(".", 1)[1]
    snapshots = spark.sql(f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at").collect()
    spark.sql(f"CALL local.system.rollback_to_snapshot('{ident}', {snapshots[1].snapshot_id})")
    code, document = verify(capsys, metadata_location(spark, table), ledger)
    assert code == 1 and "went backwards" in checks(document)["history"]["detail"]
    insert(spark, table, 40)  # a new branch of history from the rolled-back state
    recorded = ledger.read_bytes()
    code, document = verify(capsys, metadata_location(spark, table), ledger)
    history = checks(document)["history"]
    assert code == 1 and history["status"] == DIVERGED and "no longer an ancestor" in history["detail"]
    assert ledger.read_bytes() == recorded
    code, document = verify(capsys, metadata_location(spark, table), ledger, "--accept-history")
    assert code == 0 and document["table"]["mode"] == "current"
    assert "accepted by the operator" in checks(document)["history"]["detail"]
    assert json.loads(ledger.read_text())["last"]["snapshot_id"] == current_snapshot_id(spark, table)
    code, document = verify(capsys, metadata_location(spark, table), ledger)
    assert code == 0 and document["table"]["mode"] == "since" and document["files"] == []


def test_the_ledgers_snapshot_expired_its_sequence_number_is_the_cut_off(capsys, spark, table, ledger):
    insert(spark, table, 50)
    assert verify(capsys, metadata_location(spark, table), ledger)[0] == 0
    recorded = json.loads(ledger.read_text())["last"]["snapshot_id"]
    insert(spark, table, 60)
    insert(spark, table, 70)
    spark.sql(f"CALL local.system.expire_snapshots(table => '{table.split('.', 1)[1]}', "
              "older_than => TIMESTAMP '2999-01-01 00:00:00', retain_last => 1)")
    location = metadata_location(spark, table)
    assert recorded not in {s["snapshot-id"] for s in json.loads(Path(local(location)).read_text())["snapshots"]}
    code, document = verify(capsys, location, ledger)
    assert code == 0 and document["table"]["mode"] == "since"
    assert "expired" in checks(document)["history"]["detail"]
    full = {f["path"] for f in verify_metadata_doc(spark, table) if f["kind"] == DATA}
    assert data_files(document) and data_files(document) < full  # only the two newer appends' files


def test_a_corrupt_ledger_is_exit_2_and_is_not_replaced(capsys, spark, table, tmp_path):
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text('{"format": "pyiceberg-crypto-ledger", "version": 1, "last": {"snapshot_id": "x"')
    code, document = verify(capsys, metadata_location(spark, table), corrupt)
    assert code == 2 and document["error"]["type"] == "ledger" and "corrupt" in document["error"]["message"]
    assert corrupt.read_text().endswith('"x"')
    with pytest.raises(LedgerError):
        verify_metadata(metadata_location(spark, table), None, state=str(corrupt))


def test_another_tables_ledger_is_exit_2(capsys, spark, table, ledger, kms_registration, tmp_path):
    other = create_table(spark, "other")
    insert(spark, other, 0, 5)
    state = tmp_path / "other.json"
    assert verify(capsys, metadata_location(spark, other), state)[0] == 0
    recorded = state.read_bytes()
    code, document = verify(capsys, metadata_location(spark, table), state)
    assert code == 2 and "use one ledger file per table" in document["error"]["message"]
    assert state.read_bytes() == recorded


def test_state_with_a_snapshot_option_is_a_usage_error(capsys, spark, table, ledger):
    code = main(["verify", metadata_location(spark, table), "--kms", KMS, "--accept-history", "--json"])
    assert code == 2 and "needs --state" in json.loads(capsys.readouterr().out)["error"]["message"]


def test_a_ledger_that_is_not_a_regular_file_is_refused_at_once(tmp_path):
    import os

    from pyiceberg_crypto.verify.ledger import Ledger

    fifo = tmp_path / "ledger.fifo"
    os.mkfifo(fifo)
    with pytest.raises(LedgerError, match="not a regular file"):
        Ledger.load(fifo)  # never waits for a writer
    with pytest.raises(LedgerError, match="missing-dir does not exist; create it \\(mkdir -p -m 700 .*missing-dir\\)"):
        Ledger.load(tmp_path / "missing-dir" / "ledger.json")  # the message says what to do


def test_the_ledger_counts_the_files_verified_so_far_and_reads_an_entry_without_the_count(tmp_path):
    """Issue 41: the audit's incremental rows say how many files are verified so far; the ledger keeps
    the count (this run's, plus the earlier ones' when the run went on from the ledger)."""
    from pyiceberg_crypto.verify.ledger import LEDGER_FORMAT, LEDGER_VERSION, Ledger, LedgerEntry
    from pyiceberg_crypto.verify.pipeline import files_verified_so_far

    older = {"table_uuid": "u", "table_location": "file:/t", "snapshot_id": 1, "sequence_number": 1,
             "metadata_location": "file:/t/metadata/1.metadata.json", "metadata_hash": "h",
             "verified_at": "2026-11-26T02:00:00+00:00", "mode": "current"}
    path = tmp_path / "t.ledger.json"
    path.write_text(json.dumps({"format": LEDGER_FORMAT, "version": LEDGER_VERSION, "last": older, "history": []}))
    last = Ledger.load(path).last
    assert last is not None and last.files_verified is None  # recorded before the count was kept
    assert files_verified_so_far(4, "since", last) is None  # unknown, not a wrong number
    assert files_verified_so_far(7, "current", last) == 7  # a run in full counts its own files
    ledger = Ledger.load(path)
    ledger.record(LedgerEntry(**{**older, "snapshot_id": 2, "files_verified": 7}))
    counted = Ledger.load(path).last
    assert counted.files_verified == 7 and files_verified_so_far(3, "since", counted) == 10
    for bad in (-1, "7", True):
        with pytest.raises(ValueError, match="files_verified"):
            LedgerEntry.from_dict({**older, "files_verified": bad})
