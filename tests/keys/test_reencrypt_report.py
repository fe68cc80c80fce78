"""What ``keys reencrypt --report`` reads back from an earlier run's report (no JVM;
:mod:`pyiceberg_crypto.keys.reencrypt_all`): the dependent files an unfinished run of the same table
carried, the tables an unfinished ``--all-tables`` run of the same catalog proved, and a report that
cannot be read refused, naming it."""

from __future__ import annotations

import json
import re

import pytest

from pyiceberg_crypto.errors import ReportError
from pyiceberg_crypto.keys import carried_dependent, earlier_proofs

TABLE = "lake.db.orders"


def write(path, doc) -> str:
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return str(path)


def test_an_unfinished_run_of_the_table_carries_its_dependent_and_exposed_files(tmp_path):
    report = write(tmp_path / "run.json", {
        "table": TABLE, "finished": False, "carried_dependent": ["s3://b/old.parquet"],
        "before": {"dependent": ["s3://b/a.parquet"],
                   "storage": {"findings": [{"finding": "EXPOSED_FILE", "path": "s3://b/x.parquet"},
                                            {"finding": "UNACCOUNTED", "path": "s3://b/y.parquet"}]}}})
    assert carried_dependent(report, TABLE) == ["s3://b/a.parquet", "s3://b/old.parquet", "s3://b/x.parquet"]
    assert carried_dependent(report, "lake.db.other") == []  # another table's report
    assert carried_dependent(write(tmp_path / "done.json", {"table": TABLE, "finished": True,
                                                             "before": {"dependent": ["a"]}}), TABLE) == []
    assert carried_dependent(str(tmp_path / "absent.json"), TABLE) == []


def test_an_unfinished_all_tables_run_of_the_catalog_gives_back_what_it_proved(tmp_path):
    done = {"lake.db.a": {"ok": True}, "lake.db.b": "not a table's entry"}
    report = write(tmp_path / "all.json", {"catalog": "lake", "ok": False, "done": done})
    assert earlier_proofs(report, "lake") == {"lake.db.a": {"ok": True}}
    assert earlier_proofs(report, "prod") == {}  # another catalog's run
    assert earlier_proofs(write(tmp_path / "ok.json", {"catalog": "lake", "ok": True, "done": done}), "lake") == {}
    assert earlier_proofs(str(tmp_path / "absent.json"), "lake") == {}


@pytest.mark.parametrize("content", ["{not json", "\udcff"], ids=["not-json", "not-utf8"])
def test_an_unreadable_report_is_refused_naming_it(tmp_path, content):
    path = tmp_path / "run.json"
    if content == "\udcff":
        path.write_bytes(b"\xff\xfe{")
    else:
        path.write_text(content)
    for read in (lambda: carried_dependent(str(path), TABLE), lambda: earlier_proofs(str(path), "lake")):
        with pytest.raises(ReportError, match=re.escape(f"cannot read the earlier run's report {path}")):
            read()


def test_the_old_name_of_the_error_still_imports_with_a_warning():
    from pyiceberg_crypto.cli import reencrypt_cmd

    with pytest.warns(DeprecationWarning, match="ReportError is deprecated: use pyiceberg_crypto.errors.ReportError"):
        assert reencrypt_cmd.ReportError is ReportError


def test_reencrypt_each_is_the_engine_under_its_old_name():
    from pyiceberg_crypto.keys import reencrypt_each

    lines = []

    def one(table: str) -> str:
        if table.endswith("b"):
            raise RuntimeError("no")
        return table

    with pytest.warns(DeprecationWarning, match="reencrypt_each is pyiceberg_crypto.each_table.run_each"):
        outcome = reencrypt_each(["lake.db.a", "lake.db.b"], one, progress=lines.append)
    assert outcome.done == {"lake.db.a": "lake.db.a"} and outcome.failed == {"lake.db.b": "RuntimeError: no"}
    assert lines == ["[1/2] lake.db.a", "[2/2] lake.db.b", "[2/2] lake.db.b: FAILED: RuntimeError: no"]


def test_reencrypt_catalog_carries_what_an_unfinished_run_proved_and_reruns_the_rest(tmp_path):
    from pyiceberg_crypto.keys import DependentTables, reencrypt_catalog

    report = str(tmp_path / "all.json")

    def first(table: str) -> dict:
        if table == "lake.db.b":
            raise RuntimeError("a file moved away")
        return {"table": table, "proof": {"ok": table != "lake.db.c"}}

    lines = []
    run = reencrypt_catalog(DependentTables(["lake.db.a", "lake.db.b", "lake.db.c"]), "lake", first, report=report,
                            progress=lines.append)
    saved = json.loads(open(report).read())
    assert saved == run.to_dict() and not saved["ok"] and saved["finished"]
    assert list(saved["done"]) == ["lake.db.a"] and list(saved["not_proven"]) == ["lake.db.c"]
    assert saved["failed"] == {"lake.db.b": "RuntimeError: a file moved away"}
    assert "[2/3] lake.db.b: FAILED: RuntimeError: a file moved away" in lines

    # the re-run: a no longer depends (carried), b still does (run again)
    ran = []
    run = reencrypt_catalog(DependentTables(["lake.db.b"]), "lake",
                            lambda table: ran.append(table) or {"table": table, "proof": {"ok": True}},
                            report=report, progress=lines.append)
    assert ran == ["lake.db.b"] and run.ok
    assert run.to_dict()["resumed"] == ["lake.db.a"] and list(run.done) == ["lake.db.a", "lake.db.b"]
    assert f"resumed from {report}: 1 table(s) proven by an earlier run (lake.db.a)" in lines
    assert earlier_proofs(report, "lake") == {}  # that run ended with every table proven: nothing to carry
