"""`keys reencrypt --report`: what an unfinished run recorded is carried into the re-run's proof
(issue 42, proof after a crash); another table's or a finished report carries nothing; an
unreadable one stops the run with the file named. No Spark: the report file only."""

from __future__ import annotations

import json

import pytest

from pyiceberg_crypto.errors import ReportError
from pyiceberg_crypto.keys import carried_dependent


def write(path, **document) -> str:
    path.write_text(json.dumps(document))
    return str(path)


def test_reencrypt_report_of_an_unfinished_run_is_carried_into_the_rerun(tmp_path):
    report = write(tmp_path / "r.json", table="lake.db.t", finished=False, before={"dependent": ["b", "a"]},
                   carried_dependent=["c"])
    assert carried_dependent(report, "lake.db.t") == ["a", "b", "c"]
    assert carried_dependent(report, "lake.db.other") == []
    finished = write(tmp_path / "f.json", table="lake.db.t", finished=True, before={"dependent": ["a"]})
    assert carried_dependent(finished, "lake.db.t") == []
    assert carried_dependent(str(tmp_path / "absent.json"), "lake.db.t") == []


def test_reencrypt_report_that_cannot_be_read_stops_with_its_name(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(ReportError, match="broken.json"):
        carried_dependent(str(broken), "lake.db.t")
