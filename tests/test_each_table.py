"""The one engine for "every table" (pyiceberg_crypto.each_table; no JVM): every table run, a
failure its entry while the others go on; the report saved atomically after each table (a crash
while saving leaves the previous report); a resume skips what an earlier run did; an earlier
report that is too large, not JSON, another command's or another catalog's is refused before
anything runs, with the one ReportError."""

from __future__ import annotations

import json
import os
import threading

import pytest

from pyiceberg_crypto import _atomic, adopt, each_table, errors
from pyiceberg_crypto.each_table import MAX_REPORT_BYTES, RunReport, read_document, run_each
from pyiceberg_crypto.errors import InvalidArgumentError, ReportError, TableInputError

TABLES = ["lake.db.a", "lake.db.b", "lake.db.c"]


def work(table: str) -> str:
    if table.endswith(".b"):
        raise RuntimeError("b is broken")
    return table.upper()


def test_report_error_is_one_class_of_bad_input():
    assert issubclass(ReportError, TableInputError) and issubclass(ReportError, ValueError)
    assert errors.ReportError is each_table.ReportError


@pytest.mark.parametrize("parallel", [1, 2])
def test_each_table_runs_every_table_and_a_failure_is_its_entry(tmp_path, parallel):
    events = []
    report = run_each(TABLES, work, parallel=parallel, report=RunReport(str(tmp_path / "r.json"), kind="test"),
                      progress=events.append)
    assert report.done == {"lake.db.a": "LAKE.DB.A", "lake.db.c": "LAKE.DB.C"}
    assert report.failed == {"lake.db.b": "RuntimeError: b is broken"} and not report.ok
    assert set(report.seconds) == set(TABLES)
    assert sorted((e.table, e.status) for e in events if e.status != "started") == [
        ("lake.db.a", "done"), ("lake.db.b", "failed"), ("lake.db.c", "done")]
    assert {e.index for e in events if e.status == "started"} == {1, 2, 3}
    assert sorted(e.finished for e in events if e.status != "started") == [1, 2, 3]
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved["kind"] == "test" and saved["done"] == report.done and saved["failed"] == report.failed


def test_each_table_checks_its_arguments_before_running_anything():
    ran = []
    with pytest.raises(InvalidArgumentError, match="parallel"):
        run_each(TABLES, ran.append, parallel=0)
    with pytest.raises(InvalidArgumentError, match="parallel"):
        run_each(TABLES, ran.append, parallel=True)
    with pytest.raises(InvalidArgumentError, match="function"):
        run_each(TABLES, "not a function")
    assert ran == []
    assert run_each([], ran.append).done == {}


def test_each_table_resume_skips_the_tables_an_earlier_run_did(tmp_path):
    path = str(tmp_path / "run.json")
    first = run_each(TABLES, work, report=RunReport(path, kind="test", catalog="lake"))
    assert list(first.failed) == ["lake.db.b"]

    again = RunReport(path, kind="test", catalog="lake")
    earlier = again.resume()
    assert earlier is not None and set(earlier.done) == {"lake.db.a", "lake.db.c"}
    assert earlier.failed == {"lake.db.b": "RuntimeError: b is broken"}
    assert again.carry(earlier) == ["lake.db.a", "lake.db.c"]
    ran = []
    run_each(TABLES, lambda table: ran.append(table) or "fixed", report=again)
    assert ran == ["lake.db.b"]  # only what the earlier run did not do
    assert again.done == {"lake.db.a": "LAKE.DB.A", "lake.db.c": "LAKE.DB.C", "lake.db.b": "fixed"}
    assert again.ok and again.carried == ["lake.db.a", "lake.db.c"]
    assert json.loads(open(path).read())["done"] == again.done

    rerun = RunReport(path, kind="test", catalog="lake")  # a table to run again although it was done
    rerun.carry(rerun.resume(), rerun=["lake.db.a"])
    assert sorted(rerun.done) == ["lake.db.b", "lake.db.c"]
    assert RunReport(str(tmp_path / "absent.json"), kind="test").resume() is None
    with pytest.raises(ReportError, match="no report .*absent.json to resume from"):
        RunReport(str(tmp_path / "absent.json"), kind="test").resume(required=True)


def test_each_table_refuses_a_report_of_another_command_or_catalog(tmp_path):
    path = str(tmp_path / "run.json")
    RunReport(path, kind="test", catalog="lake").save()
    with pytest.raises(ReportError, match="is not the report of other"):
        RunReport(path, kind="other", catalog="lake").resume()
    with pytest.raises(ReportError, match="is the report of catalog 'lake', not 'prod'"):
        RunReport(path, kind="test", catalog="prod").resume()
    # the encrypt --all-tables report reader refuses it too (it is not its kind), as a ReportError
    with pytest.raises(ReportError, match="not the report of pyiceberg-crypto encrypt --all-tables"):
        adopt.read_report(path, "lake")
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(ReportError, match="not the report"):
        RunReport(str(tmp_path / "list.json"), kind="test").resume()


def test_each_table_refuses_a_report_over_the_size_limit_before_anything_runs(tmp_path):
    assert MAX_REPORT_BYTES == 256 * 1024 * 1024
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as handle:  # sparse: nothing is written, nothing is read
        handle.truncate(MAX_REPORT_BYTES + 1)
    with pytest.raises(ReportError, match=f"larger than {MAX_REPORT_BYTES} bytes"):
        read_document(str(huge))
    # encrypt --all-tables reads it before it looks at the session (nothing has run)
    with pytest.raises(ReportError, match="larger than"):
        adopt.encrypt_tables(object(), "lake", "lake-key", resume=str(huge))
    small = tmp_path / "small.json"
    small.write_text(json.dumps({"kind": "test", "done": {"t": 1}}))
    with pytest.raises(ReportError, match="larger than 10 bytes"):
        RunReport(str(small), kind="test", max_bytes=10).resume()


@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe{"], ids=["not-json", "not-utf8"])
def test_each_table_refuses_an_unreadable_report_naming_it(tmp_path, content):
    path = tmp_path / "run.json"
    path.write_bytes(content)
    with pytest.raises(ReportError, match=f"cannot read the earlier run's report {path}"):
        RunReport(str(path), kind="test").resume()


def test_each_table_refuses_a_fifo_without_waiting(tmp_path):
    fifo = tmp_path / "run.json"
    os.mkfifo(fifo)
    with pytest.raises(ReportError, match="not a regular file"):
        read_document(str(fifo))


def test_each_table_save_is_atomic_a_crash_while_saving_leaves_the_previous_report(tmp_path, monkeypatch):
    path = tmp_path / "run.json"
    report = run_each(["lake.db.a"], work, report=RunReport(str(path), kind="test"))
    before = path.read_text()
    assert json.loads(before)["done"] == {"lake.db.a": "LAKE.DB.A"}

    class Crash(BaseException):
        """The process dies between writing the new report and renaming it into place."""

    def crash(*_args):
        raise Crash

    monkeypatch.setattr(_atomic.os, "replace", crash)
    with pytest.raises(Crash):
        run_each(["lake.db.c"], work, report=report)
    monkeypatch.undo()
    assert path.read_text() == before  # the previous report, whole
    assert os.listdir(tmp_path) == ["run.json"]  # and no temporary file
    assert RunReport(str(path), kind="test").resume().done == {"lake.db.a": "LAKE.DB.A"}


def test_each_table_a_report_that_cannot_be_written(tmp_path):
    missing = str(tmp_path / "no-such-dir" / "run.json")
    with pytest.raises(ReportError, match="cannot write the report"):
        RunReport(missing).save()  # before a run: the run does not start
    report = run_each(["lake.db.a"], work, report=RunReport(missing))  # during it: kept, the run goes on
    assert report.done == {"lake.db.a": "LAKE.DB.A"} and "cannot write the report" in report.report_error
    assert not report.ok


def test_each_table_runs_tables_side_by_side():
    both = threading.Barrier(2, timeout=10)
    report = run_each(["lake.db.a", "lake.db.c"], lambda table: both.wait() >= 0, parallel=2)
    assert report.done == {"lake.db.a": True, "lake.db.c": True}


def test_the_old_name_of_the_error_still_imports_with_a_warning():
    with pytest.warns(DeprecationWarning, match="ReportFileError is deprecated: use pyiceberg_crypto.errors.ReportError"):
        assert adopt.ReportFileError is ReportError
    from pyiceberg_crypto.adopt import lake

    with pytest.warns(DeprecationWarning, match="ReportFileError is deprecated: use pyiceberg_crypto.errors.ReportError"):
        assert lake.ReportFileError is ReportError
