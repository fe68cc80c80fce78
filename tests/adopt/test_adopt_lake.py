"""``encrypt --all-tables`` (issue 51) on real Spark and the session's Hive metastore: every
plaintext table of several namespaces, two at a time, one that fails named while the others go
on, the report, the resume from it; the dry run; the audit's pointer at the command."""

from __future__ import annotations

import json
import uuid

import jsonschema
import pytest

from pyiceberg_crypto.adopt import unencrypted_tables
from pyiceberg_crypto.audit import audit_catalog, audit_schema
from pyiceberg_crypto.cli.audit_cmd import format_audit
from pyiceberg_crypto.cli.main import main
from tests.adopt.conftest import MASTER
from tests.adopt.test_adopt import java_table, rows
from tests.conftest import add_catalog

#: make test runs the adopt tests in the cluster lane, which ends first (the marker `balance`, pyproject.toml).
pytestmark = pytest.mark.balance


@pytest.fixture(scope="module")
def two_namespaces(spark, lake):
    """Two namespaces of the lake's catalog: three plaintext tables to encrypt, one already encrypted,
    and one that fails (a plaintext table already holds its staging table's name). ``fresh``: a
    second catalog on the same metastore, warehouse and KMS that nothing loads before ``--parallel``'s
    threads do (a catalog Spark has not loaded yet is resolved from the thread's active session)."""
    catalog = lake["catalog"]
    fresh = f"{catalog}_fresh"
    add_catalog(spark, fresh, warehouse=lake["work"] / "wh", kms_name=lake["kms_name"])
    suffix = uuid.uuid4().hex[:6]
    a, b = f"{catalog}.adopt_lake_a_{suffix}", f"{catalog}.adopt_lake_b_{suffix}"
    for namespace in (a, b):
        spark.sql(f"CREATE NAMESPACE {namespace}")
    spark.sql(f"CREATE TABLE {a}.orders (id bigint, part string) USING iceberg PARTITIONED BY (part) "
              "TBLPROPERTIES ('format-version'='2')")
    spark.sql(f"INSERT INTO {a}.orders VALUES (1, 'x'), (2, 'y'), (3, 'x')")
    spark.sql(f"CREATE TABLE {a}.sealed (id bigint) USING iceberg "
              f"TBLPROPERTIES ('format-version'='3', 'encryption.key-id'='{MASTER}')")
    spark.sql(f"INSERT INTO {a}.sealed VALUES (1)")
    spark.sql(f"CREATE TABLE {b}.events (id bigint, kind string) USING iceberg TBLPROPERTIES ('format-version'='3')")
    spark.sql(f"INSERT INTO {b}.events VALUES (10, 'click'), (11, 'view')")
    spark.sql(f"CREATE TABLE {b}.blocked (id bigint) USING iceberg TBLPROPERTIES ('format-version'='3')")
    spark.sql(f"INSERT INTO {b}.blocked VALUES (20), (21)")
    spark.sql(f"CREATE TABLE {b}.blocked__encrypting (id bigint) USING iceberg")  # not this package's staging table
    return {"catalog": catalog, "a": a, "b": b, "namespaces": [a.split(".", 1)[1], b.split(".", 1)[1]],
            "plaintext": sorted([f"{a}.orders", f"{b}.events", f"{b}.blocked"]), "fresh": fresh}


def in_fresh(ns):
    """The same namespaces through the catalog nothing has loaded yet."""
    fresh = ns["fresh"]
    a, b = (f"{fresh}.{name}" for name in ns["namespaces"])
    return {**ns, "catalog": fresh, "a": a, "b": b, "plaintext": sorted([f"{a}.orders", f"{b}.events", f"{b}.blocked"])}


def lake_command(ns, *more):
    return ["encrypt", ns["catalog"], "--all-tables", "--key-id", MASTER,
            *(arg for name in ns["namespaces"] for arg in ("--namespace", name)), *more]


def table_names(spark, namespace):
    return sorted(r.tableName for r in spark.sql(f"SHOW TABLES IN {namespace}").collect())


@pytest.mark.slow
def test_adopt_all_tables_dry_run_and_the_audit_pointer_change_nothing(spark, lake, two_namespaces, tmp_path, capsys):
    ns = two_namespaces
    before = {n: table_names(spark, ns[n]) for n in ("a", "b")}
    listing = unencrypted_tables(spark, ns["catalog"], namespaces=ns["namespaces"])
    assert listing.tables == ns["plaintext"]
    assert "named like a staging table" in listing.skipped[f"{ns['b']}.blocked__encrypting"]

    # the audit's UNENCRYPTED list is the same tables (and the odd staging-named one), each pointing at the command
    report = audit_catalog(spark, ns["catalog"], namespaces=ns["namespaces"])
    document = report.to_dict()
    jsonschema.Draft202012Validator(audit_schema()).validate(document)
    unencrypted = {f"{ns['catalog']}.{t['table']}": t for t in document["tables"] if t["state"] == "UNENCRYPTED"}
    assert set(unencrypted) == {*ns["plaintext"], f"{ns['b']}.blocked__encrypting"}
    for table, entry in unencrypted.items():
        assert entry["next_step"] == f"pyiceberg-crypto encrypt {table} --key-id KEY"
    assert [t["next_step"] for t in document["tables"] if t["state"] == "OK"] == [None]  # the sealed table
    assert f"next: pyiceberg-crypto encrypt {ns['a']}.orders --key-id KEY" in format_audit(report)
    html = tmp_path / "audit.html"
    report.write_html(str(html))
    assert f"Next step: <code>pyiceberg-crypto encrypt {ns['a']}.orders --key-id KEY</code>" in html.read_text()

    # the dry run lists what it would do, writes no report and changes nothing
    dry = tmp_path / "dry.json"
    capsys.readouterr()
    assert main(lake_command(ns, "--dry-run", "--report", str(dry))) == 0
    out = capsys.readouterr().out
    for table in ns["plaintext"]:
        assert f"WOULD ENCRYPT {table}: would encrypt under master key '{MASTER}'" in out
    assert f"SKIPPED  {ns['b']}.blocked__encrypting" in out and "nothing was changed" in out
    assert not dry.exists()
    assert {n: table_names(spark, ns[n]) for n in ("a", "b")} == before

    # a namespace or a catalog that does not exist: one line, exit 2, before anything changes
    assert main(lake_command(ns, "--namespace", "adopt_no_such_namespace")) == 2
    assert "'adopt_no_such_namespace' does not exist" in capsys.readouterr().err
    assert main(["encrypt", "adopt_no_such_catalog", "--all-tables", "--key-id", MASTER]) == 2
    assert "no Spark catalog named 'adopt_no_such_catalog'" in capsys.readouterr().err
    assert main(["encrypt", f"{ns['a']}.orders", "--key-id", MASTER, "--parallel", "2"]) == 2
    assert {n: table_names(spark, ns[n]) for n in ("a", "b")} == before


@pytest.mark.slow
def test_adopt_all_tables_two_namespaces_one_failure_then_resume(spark, lake, two_namespaces, tmp_path, capsys):
    ns = in_fresh(two_namespaces)
    expected = {t: rows(spark, t.replace(ns["catalog"], two_namespaces["catalog"], 1)) for t in ns["plaintext"]}
    report = tmp_path / "lake.json"
    capsys.readouterr()
    assert main(lake_command(ns, "--parallel", "2", "--report", str(report))) == 2
    captured = capsys.readouterr()
    document = json.loads(report.read_text())
    statuses = {t: e["status"] for t, e in document["tables"].items()}
    assert statuses == {f"{ns['a']}.orders": "done", f"{ns['b']}.events": "done", f"{ns['b']}.blocked": "failed",
                        f"{ns['b']}.blocked__encrypting": "skipped"}
    assert not document["ok"] and document["finished"] and document["counts"]["done"] == 2
    why = document["tables"][f"{ns['b']}.blocked"]["detail"]
    assert "blocked__encrypting exists and is not encrypted" in why
    lines = [line for line in captured.err.splitlines() if line.startswith("[")]
    assert len(lines) == 3 and any(line.startswith("[") and f"{ns['b']}.blocked: FAILED: " in line for line in lines)
    assert f"FAILED   {ns['b']}.blocked" in captured.out
    for table in (f"{ns['a']}.orders", f"{ns['b']}.events"):
        assert java_table(spark, table).properties().get("encryption.key-id") == MASTER
        assert rows(spark, table) == expected[table]
        assert document["tables"][table]["result"]["compared"]["equal"]
        assert document["tables"][table]["result"]["proof"].startswith("verify_table")
    blocked = java_table(spark, f"{ns['b']}.blocked")
    assert blocked.properties().get("encryption.key-id") is None and rows(spark, f"{ns['b']}.blocked") == expected[f"{ns['b']}.blocked"]

    # the cause removed, the same command again resumes from its report: what is done is skipped, said so
    spark.sql(f"DROP TABLE {ns['b']}.blocked__encrypting PURGE")
    assert main(lake_command(ns, "--parallel", "2", "--report", str(report), "--json")) == 0
    captured = capsys.readouterr()
    assert "resuming from the report" in captured.err and "2 table(s) done by an earlier run" in captured.err
    events = [json.loads(line) for line in captured.out.splitlines()]
    assert events[0]["event"] == "listed" and events[0]["tables"] == 1 and events[-1]["event"] == "summary"
    per_table = {e["table"]: e for e in events if "table" in e}
    assert per_table[f"{ns['a']}.orders"]["status"] == "skipped"
    assert per_table[f"{ns['a']}.orders"]["detail"] == "done by an earlier run (its report)"
    assert per_table[f"{ns['b']}.blocked"]["status"] == "done" and per_table[f"{ns['b']}.blocked"]["n"] == 1
    document = json.loads(report.read_text())
    assert document["ok"] and {t for t, e in document["tables"].items() if e["status"] == "done"} == set(ns["plaintext"])
    kept = [t for t, e in document["tables"].items() if e["status"] == "skipped"]
    assert len(kept) == 2 and all("__plaintext_" in t for t in kept)  # the originals kept, never encrypted again
    assert rows(spark, f"{ns['b']}.blocked") == expected[f"{ns['b']}.blocked"]
    assert unencrypted_tables(spark, ns["catalog"], namespaces=ns["namespaces"]).tables == []
