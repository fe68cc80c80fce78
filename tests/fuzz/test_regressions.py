"""Every failure the fuzzing harness found, replayed as a plain test (issue 15 item 5).

Each case is a file in ``tests/fuzz/regressions/``: what was found, where it was fixed, and the
minimal input, written against the session's fuzz table by role (the current / oldest / middle
snapshot, the delete manifest, ...) because the table's paths and keys are new in every run:

* ``metadata-json``: one edit of the metadata.json (``delete`` / ``replace`` at a path whose
  parts may be ``{"snapshot": ROLE}``; a value may be ``{"float": "inf"}`` or
  ``{"path-of": "list:ROLE" | "manifest:ROLE", "append": TEXT}``);
* ``manifest`` / ``manifest-list``: one field of one record, re-encrypted and re-chained
  (:meth:`tests.fuzz.harness.FuzzTable.variant`);
* ``schema``: a manifest or manifest list re-encoded with one field dropped or given another
  Avro type (values ``{"hex": ...}`` for bytes), re-encrypted and re-chained;
* ``bytes``: bytes patched into a copy of one file, checked with ``check_file`` and the swap
  detector's ``authenticates_as``.

``expect``: ``input-error`` (TableInputError, exit 2) or ``not-ok`` (exit 1; ``finding``: a
finding of that kind and status must be in the report). Every case also runs through
:func:`tests.fuzz.harness.run_verifier` (no exception, exit 0/1/2, one JSON document, bounds), and
through the JVM-free reader, which must refuse it too (``deletion-vector-size-of-second-entry``
was found again in the reader, #17).
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest

from pyiceberg_crypto.io import LocalFileIO, local_path
from pyiceberg_crypto.verify.checks import FileTask, check_file
from pyiceberg_crypto.verify._forensics import authenticates_as
from tests.fuzz.harness import FuzzTable, bounded, run_verifier

CASES = sorted((Path(__file__).parent / "regressions").glob("*.json"))


def _snapshots_by_age(table: FuzzTable) -> list[dict]:
    return sorted(table.doc["snapshots"], key=lambda s: s["sequence-number"])


def _snapshot(table: FuzzTable, role: str) -> dict:
    ordered = _snapshots_by_age(table)
    if role == "current":
        return next(s for s in ordered if s["snapshot-id"] == table.doc["current-snapshot-id"])
    return {"oldest": ordered[0], "middle": ordered[len(ordered) // 2]}[role]


def _manifest(table: FuzzTable, role: str) -> str:
    """``oldest``: the manifest the oldest snapshot added; ``deletes``: the delete manifest."""
    if role == "deletes":
        return next(p for p, m in table.manifests.items() if m.records[0]["data_file"]["content"] != 0)
    snapshot_id = _snapshot(table, role)["snapshot-id"]
    return table.lists[snapshot_id].records[0]["manifest_path"]


def _value(table: FuzzTable, value):
    if isinstance(value, dict) and "float" in value:
        return float(value["float"])
    if isinstance(value, dict) and "path-of" in value:
        what, role = value["path-of"].split(":")
        path = _snapshot(table, role)["manifest-list"] if what == "list" else _manifest(table, role)
        return path + value.get("append", "")
    return value


def _metadata_variant(table: FuzzTable, case: dict) -> str:
    doc = copy.deepcopy(table.doc)
    edit = case["edit"]
    path = []
    for part in edit["path"]:
        if isinstance(part, dict):
            wanted = _snapshot(table, part["snapshot"])["snapshot-id"]
            part = next(i for i, s in enumerate(doc["snapshots"]) if s["snapshot-id"] == wanted)
        path.append(part)
    parent = doc
    for part in path[:-1]:
        parent = parent[part]
    if edit["op"] == "delete":
        del parent[path[-1]]
    else:
        parent[path[-1]] = _value(table, edit["value"])
    return table.write_metadata(json.dumps(doc), "regression")


def _set(record: dict, field: list, value) -> None:
    for part in field[:-1]:
        record = record[part]
    record[field[-1]] = value


def _schema_variant(table: FuzzTable, case: dict) -> None:
    """The target file re-encoded with one field dropped or retyped, re-encrypted and re-chained."""
    from tests.fuzz.test_fuzz_avro import _edit_records, _record_schema

    if case["target"] == "manifest":
        key = _manifest(table, case["manifest"])
        avro, edits = table.manifests[key], "manifests"
    else:
        key = _snapshot(table, case["snapshot"])["snapshot-id"]
        avro, edits = table.lists[key], "lists"
    field = tuple(case["field"])
    schema = copy.deepcopy(avro.schema)
    holder = _record_schema(schema, field)
    index = next(i for i, f in enumerate(holder["fields"]) if f["name"] == field[-1])
    if case["op"] == "drop":
        del holder["fields"][index]
        records = _edit_records(avro.records, field, lambda r, k: r.pop(k, None))
    else:
        value = case["value"]
        value = bytes.fromhex(value["hex"]) if isinstance(value, dict) else value
        holder["fields"][index]["type"] = case["type"]
        holder["fields"][index].pop("default", None)
        records = _edit_records(avro.records, field, lambda r, k: r.__setitem__(k, value))
    original, avro.schema = avro.schema, schema
    try:
        with table.variant(**{edits: {key: records}}) as location:
            _check_both(table, location, case)
    finally:
        avro.schema = original


def _check(outcome, case: dict) -> None:
    if case["expect"] == "input-error":
        assert outcome.report is None and outcome.code == 2, outcome.describe()
        return
    assert outcome.code == 1 and not outcome.ok, outcome.describe()
    wanted = case.get("finding")
    if wanted:
        found = [(f.kind, f.status) for f in outcome.report.files]
        assert (wanted["kind"], wanted["status"]) in found, found


def _check_both(table: FuzzTable, location: str, case: dict) -> None:
    """The verifier's verdict, and the reader on the same input: it never returns rows the
    verifier would not find OK (:func:`tests.fuzz.test_fuzz_reader.read_and_verify`)."""
    from tests.fuzz.test_fuzz_reader import read_and_verify

    _check(run_verifier(table, location), case)
    read_and_verify(table, location)


@pytest.mark.parametrize("case_file", CASES, ids=[p.stem for p in CASES])
def test_regression(fuzz_table, case_file, tmp_path):
    case = json.loads(case_file.read_text())
    table = fuzz_table
    if case["kind"] == "metadata-json":
        location = _metadata_variant(table, case)
        try:
            _check_both(table, location, case)
        finally:
            os.unlink(local_path(location))
    elif case["kind"] == "manifest":
        path = _manifest(table, case["manifest"])
        records = copy.deepcopy(table.manifests[path].records)
        index = case["entry"]
        if index == "second-of-a-shared-file":
            seen: set[str] = set()
            index = next(i for i, r in enumerate(records)
                         if r["data_file"]["file_path"] in seen or seen.add(r["data_file"]["file_path"]))
        _set(records[index], case["field"], _value(table, case["value"]))
        with table.variant(manifests={path: records}) as location:
            _check_both(table, location, case)
    elif case["kind"] == "manifest-list":
        snapshot_id = _snapshot(table, case["snapshot"])["snapshot-id"]
        records = copy.deepcopy(table.lists[snapshot_id].records)
        wanted = _manifest(table, case["entry"]["manifest"].split(":")[1])
        index = next(i for i, r in enumerate(records) if r["manifest_path"] == wanted)
        _set(records[index], case["field"], _value(table, case["value"]))
        with table.variant(lists={snapshot_id: records}) as location:
            _check_both(table, location, case)
    elif case["kind"] == "schema":
        _schema_variant(table, case)
    else:  # bytes
        assert case["file"] == "manifest list"
        snapshot_id = _snapshot(table, "current")["snapshot-id"]
        source = table.lists[snapshot_id]
        data = bytearray(Path(local_path(source.path)).read_bytes())
        patch = bytes.fromhex(case["patch"]["hex"])
        data[case["patch"]["offset"]:case["patch"]["offset"] + len(patch)] = patch
        path = tmp_path / "changed.avro"
        path.write_bytes(bytes(data))
        task = FileTask(f"file:{path}", "manifest-list", "AVRO", key_metadata=source.key.serialize(),
                        expected_size=source.key.file_length)
        finding = bounded(lambda: check_file(task, LocalFileIO()))
        assert finding.status == case["finding"]["status"], finding
        original = FileTask(source.path, "manifest-list", "AVRO", key_metadata=source.key.serialize(),
                            expected_size=source.key.file_length)
        with open(path, "rb") as handle:
            assert bounded(lambda: authenticates_as(handle, len(data), original)) is False
