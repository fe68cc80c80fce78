"""Fuzzing manifests and manifest lists at the Avro level (property b): one field of one record
changed with fastavro, the file re-encoded with its own schema, re-encrypted under its own key
and AAD prefix, and everything that authenticates it re-chained (the list entry's length and key
metadata, the sealed manifest-list key, a new metadata.json: :meth:`FuzzTable.variant`). The
crypto passes, so what is tested is the parser and the checks behind it.

Properties, for every mutation: no exception past ``verify_metadata`` / the CLI, exit 0/1/2 with
one JSON document (:func:`tests.fuzz.harness.run_verifier`), within the bounds; and a change of a
field the verifier binds is never OK:

* manifest list entry: ``manifest_path``, ``manifest_length``, ``key_metadata``;
* manifest entry of a live file (status not DELETED): ``data_file.file_path``,
  ``data_file.file_size_in_bytes``, ``data_file.key_metadata``, and ``data_file.record_count`` of
  a data file (content 0: compared with the Parquet row count).

A value that names the same thing is not a change: ``file:/x`` for ``/x``, another encoding of
the same key metadata, or key metadata without its stored length (the trusted length is then the
entry's own ``file_size_in_bytes`` / ``manifest_length``, stated by the same authenticated record).

Deliberately outside the verifier's claims (no-crash only): what the writer states in an
authenticated file and the verifier does not cross-check against the bytes: ``status`` (an entry
marked DELETED is not a file of the snapshot), ``content``, ``file_format`` (a wrong one shows up
anyway, as the wrong decoder fails), partition values and bounds, sequence numbers and snapshot
ids (they only choose what ``--since`` reads), counts and metrics, ``referenced_data_file`` and
the deletion vector's ``content_offset`` / ``content_size_in_bytes`` (the Puffin file is
authenticated as a whole, its blobs are not parsed), and the record count of a delete file.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from pyiceberg_crypto.formats.key_metadata import StandardKeyMetadata
from tests.fuzz.conftest import fuzz_settings
from tests.fuzz.harness import FuzzTable, run_verifier, same_file, same_key_metadata

PRIMITIVES = ("long", "int", "string", "bytes", "boolean")
ENTRY_DELETED = 2

LIST_BOUND = {("manifest_path",), ("manifest_length",), ("key_metadata",)}
MANIFEST_BOUND = {("data_file", "file_path"), ("data_file", "file_size_in_bytes"), ("data_file", "key_metadata")}
RECORD_COUNT = ("data_file", "record_count")


def leaves(schema: dict, record: dict, path: tuple = ()) -> list[tuple[tuple, str, bool]]:
    """``(path, primitive type, nullable)`` of every primitive field under ``record`` (records are
    followed; arrays and maps are offered as ``null`` when nullable)."""
    out = []
    for field in schema["fields"]:
        declared = field["type"]
        nullable = isinstance(declared, list) and "null" in declared
        branch = next((b for b in declared if b != "null"), "null") if isinstance(declared, list) else declared
        kind = branch if isinstance(branch, str) else branch.get("type")
        if isinstance(branch, dict) and kind in PRIMITIVES:  # {"type": "long", "logicalType": ...}
            kind = branch["type"]
        value = record.get(field["name"])
        here = path + (field["name"],)
        if kind == "record" and isinstance(value, dict):
            out += leaves(branch, value, here)
        elif kind in PRIMITIVES:
            out.append((here, kind, nullable))
        elif nullable:
            out.append((here, "null", True))
    return out


def _get(record: dict, path: tuple) -> Any:
    for part in path:
        record = record[part]
    return record


def _set(record: dict, path: tuple, value: Any) -> None:
    for part in path[:-1]:
        record = record[part]
    record[path[-1]] = value


def _key_variants(original: Any, table: FuzzTable) -> list[bytes]:
    out = [k.serialize() for k in table.data_keys.values()]
    out += [m.key.serialize() for m in table.manifests.values()]
    if isinstance(original, bytes) and original:
        out += [original[:-1], original + b"\x00", original[:1] + bytes([original[1] ^ 1]) + original[2:],
                b"\x02" + original[1:]]
        try:
            key = StandardKeyMetadata.parse(original)
        except ValueError:
            key = None
        if key is not None:
            length = key.file_length or 0
            out += [key.with_file_length(length + 1).serialize(), key.with_file_length(max(length - 1, 0)).serialize(),
                    key.with_file_length(2**62).serialize(),
                    StandardKeyMetadata(key.encryption_key, key.aad_prefix, None).serialize(),
                    StandardKeyMetadata(key.encryption_key, None, key.file_length).serialize(),
                    StandardKeyMetadata(key.encryption_key, (key.aad_prefix or b"") + b"x",
                                        key.file_length).serialize(),
                    StandardKeyMetadata(bytes(16), key.aad_prefix, key.file_length).serialize()]
    return out


def _path_variants(original: Any, table: FuzzTable) -> list[str]:
    out = [*table.data_keys, *table.manifests, *(l.path for l in table.lists.values())]
    if isinstance(original, str):
        local = original.removeprefix("file:")
        out += [original + "x", original[:-1], original + "\x00", original + "\ud800"[:0] + "\U0001f4a3",
                original.replace("/data/", "/data/../data/").replace("/metadata/", "/metadata/../metadata/"),
                original.replace("/data/", "/metadata/"), local, "file://" + local, "file:/etc/passwd",
                "file:/dev/zero", "s3://bucket/x.parquet", "", "\x1b[2J"]
    return out


def values(kind: str, nullable: bool, original: Any, table: FuzzTable) -> st.SearchStrategy:
    if kind == "long":
        near = [0, 1, -1, 2**31 - 1, 2**31, 2**63 - 1, -(2**63)]
        if isinstance(original, int):
            near += [v for v in (original + 1, original - 1, -original, original * 2) if -(2**63) <= v < 2**63]
        strategy = st.sampled_from(near) | st.integers(-(2**63), 2**63 - 1)
    elif kind == "int":
        near = [0, 1, -1, 2, 2**31 - 1, -(2**31)]
        if isinstance(original, int):
            near += [v for v in (original + 1, original - 1, -original) if -(2**31) <= v < 2**31]
        strategy = st.sampled_from(near) | st.integers(-(2**31), 2**31 - 1)
    elif kind == "string":
        strategy = st.sampled_from(_path_variants(original, table)) | st.text(max_size=40)
    elif kind == "bytes":
        strategy = st.sampled_from(_key_variants(original, table)) | st.binary(max_size=64)
    elif kind == "boolean":
        strategy = st.booleans()
    else:
        strategy = st.nothing()
    return st.none() | strategy if nullable else strategy


def changed(path: tuple, before: Any, after: Any) -> bool:
    """Did the value change in a way the verifier can see (not ``file:/x`` -> ``/x``, not another
    encoding of the same key metadata, not key metadata that only lost its stored length: the
    entry's size field is then the trusted length)?"""
    if path[-1] in ("file_path", "manifest_path"):
        return not same_file(before, after)
    if path[-1] == "key_metadata":
        return not same_key_metadata(before, after)
    return before != after


def mutate_one_field(data, table, avro_file):
    """Draw one record of ``avro_file`` and one of its leaf fields, and a new value for it:
    (record index, field path, value before, value after, a copy of the records with the change)."""
    index = data.draw(st.integers(0, len(avro_file.records) - 1), label="entry")
    record = avro_file.records[index]
    field, kind, nullable = data.draw(st.sampled_from(leaves(avro_file.schema, record)), label="field")
    before = _get(record, field)
    after = data.draw(values(kind, nullable, before, table), label="value")
    records = copy.deepcopy(avro_file.records)
    _set(records[index], field, after)
    return index, field, before, after, records


@fuzz_settings(1.0)
@given(data=st.data())
def test_manifest_field_mutations(fuzz_table, data):
    table = fuzz_table
    path_of = data.draw(st.sampled_from(sorted(table.manifests)), label="manifest")
    index, field, before, after, records = mutate_one_field(data, table, table.manifests[path_of])
    entry = table.manifests[path_of].records[index]
    with table.variant(manifests={path_of: records}) as location:
        outcome = run_verifier(table, location)
    bound = field in MANIFEST_BOUND or (field == RECORD_COUNT and entry["data_file"]["content"] == 0)
    if bound and entry["status"] != ENTRY_DELETED and changed(field, before, after):
        assert not outcome.ok, f"manifest entry {index} {'.'.join(field)}: {before!r} -> {after!r} verified OK"


@fuzz_settings(1.0)
@given(data=st.data())
def test_manifest_list_field_mutations(fuzz_table, data):
    table = fuzz_table
    snapshot_id = data.draw(st.sampled_from(sorted(table.lists)), label="snapshot")
    index, field, before, after, records = mutate_one_field(data, table, table.lists[snapshot_id])
    with table.variant(lists={snapshot_id: records}) as location:
        outcome = run_verifier(table, location)
    if field in LIST_BOUND and changed(field, before, after):
        assert not outcome.ok, f"manifest list entry {index} {'.'.join(field)}: {before!r} -> {after!r} verified OK"


def test_an_unchanged_rechained_variant_verifies_ok(fuzz_table):
    """The harness itself: re-encrypting and re-chaining without a change keeps every file OK, so a
    verdict above is about the mutated field, not about the re-chaining."""
    table = fuzz_table
    for path, manifest in table.manifests.items():
        with table.variant(manifests={path: copy.deepcopy(manifest.records)}) as location:
            outcome = run_verifier(table, location)
        assert outcome.ok, outcome.describe()
        assert path not in {f["path"] for f in outcome.document["files"]}  # the re-encrypted copy was read
    for snapshot_id, manifest_list in table.lists.items():
        with table.variant(lists={snapshot_id: copy.deepcopy(manifest_list.records)}) as location:
            outcome = run_verifier(table, location)
        assert outcome.ok, outcome.describe()


# --- the schema itself: authentic files that are not the Avro Iceberg writes --------------------

RETYPES = {"string": "x", "long": 7, "int": 7, "bytes": b"\x01", "boolean": True, "double": 1.5, "null": None}


def _fields(schema: dict, path: tuple = ()) -> list[tuple]:
    """Paths of every field of the record schema, nested records included."""
    out = []
    for field in schema["fields"]:
        here = path + (field["name"],)
        out.append(here)
        declared = field["type"]
        branch = next((b for b in declared if b != "null"), None) if isinstance(declared, list) else declared
        if isinstance(branch, dict) and branch.get("type") == "record":
            out += _fields(branch, here)
    return out


def _record_schema(schema: dict, path: tuple) -> dict:
    """The record schema holding the field at ``path``."""
    for name in path[:-1]:
        declared = next(f for f in schema["fields"] if f["name"] == name)["type"]
        schema = next(b for b in declared if b != "null") if isinstance(declared, list) else declared
    return schema


def _edit_records(records: list[dict], path: tuple, edit) -> list[dict]:
    out = copy.deepcopy(records)
    for record in out:
        holder = record
        for name in path[:-1]:
            holder = holder.get(name) if isinstance(holder, dict) else None
        if isinstance(holder, dict):
            edit(holder, path[-1])
    return out


@fuzz_settings(0.5)
@given(data=st.data())
def test_schema_mutations(fuzz_table, data):
    """A manifest or manifest list re-encoded with one field dropped, renamed or given another type
    (authentic: re-encrypted with the right keys): no crash, and never OK when a field the verifier
    binds is gone or has the wrong type."""
    table = fuzz_table
    target = data.draw(st.sampled_from(["manifest", "list"]), label="target")
    if target == "manifest":
        path_of = data.draw(st.sampled_from(sorted(table.manifests)), label="manifest")
        avro = table.manifests[path_of]
    else:
        snapshot_id = data.draw(st.sampled_from(sorted(table.lists)), label="snapshot")
        avro = table.lists[snapshot_id]
    field = data.draw(st.sampled_from(_fields(avro.schema)), label="field")
    op = data.draw(st.sampled_from(["drop", "rename", "retype"]), label="op")
    schema = copy.deepcopy(avro.schema)
    holder = _record_schema(schema, field)
    index = next(i for i, f in enumerate(holder["fields"]) if f["name"] == field[-1])
    if op == "drop":
        del holder["fields"][index]
        records = _edit_records(avro.records, field, lambda r, k: r.pop(k, None))
    elif op == "rename":
        holder["fields"][index]["name"] = field[-1] + "_x"
        records = _edit_records(avro.records, field, lambda r, k: r.__setitem__(k + "_x", r.pop(k, None)))
    else:
        new_type = data.draw(st.sampled_from(sorted(RETYPES)), label="type")
        nullable = data.draw(st.booleans(), label="nullable")
        holder["fields"][index]["type"] = ["null", new_type] if nullable and new_type != "null" else new_type
        if not nullable:
            holder["fields"][index].pop("default", None)  # a null default needs a nullable type
        choices = [RETYPES[new_type], None] if nullable else [RETYPES[new_type]]
        value = data.draw(st.sampled_from(choices), label="value")
        records = _edit_records(avro.records, field, lambda r, k: r.__setitem__(k, value))
    original_schema, avro.schema = avro.schema, schema
    try:
        edits = {"manifests": {path_of: records}} if target == "manifest" else {"lists": {snapshot_id: records}}
        with table.variant(**edits) as location:
            outcome = run_verifier(table, location)
    finally:
        avro.schema = original_schema
    bound = LIST_BOUND
    if target == "manifest":  # a record count is compared for data files only
        data_files = any(r["data_file"]["content"] == 0 for r in avro.records)
        bound = MANIFEST_BOUND | {("data_file",)} | ({RECORD_COUNT} if data_files else set())
    if field in bound:
        assert not outcome.ok, f"{target} field {'.'.join(field)} {op}: verified OK"
