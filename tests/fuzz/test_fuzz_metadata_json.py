"""Fuzzing the plaintext metadata.json (property a): one mutation of a real table's document (any
JSON path: a value replaced by null / bool / huge or negative numbers / floats / unicode and
control-character strings / lists / objects, a key deleted, a list item duplicated, a list
shuffled, the text itself truncated or spliced).

Properties, for every mutation:
* ``verify_metadata`` returns a report or raises ``TableInputError``; the CLI exits 0/1/2 with
  one JSON document, no traceback, no key bytes, and agrees with the API
  (:func:`tests.fuzz.harness.run_verifier`); within the time and memory bounds;
* with ``--all-snapshots``, a change of a security-relevant field is never OK: a snapshot's
  manifest-list or key-id (also by removing the current snapshot), any encryption-keys entry's
  key-id / encrypted-key-metadata / encrypted-by-id / KEY_TIMESTAMP (also by removing or adding an
  entry), ``properties.encryption.key-id``, ``format-version`` lowered below 3 (or gone).

Deliberately outside the claim (no-crash only): removing a non-current snapshot (what
``expire_snapshots`` does), ``current-snapshot-id`` pointing at another listed snapshot (a
rollback: undetectable without the metastore, README "What it cannot detect"), snapshot ids,
summaries, schemas, and the current-snapshot-only mode, which does not read older snapshots.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
import math
import os
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from pyiceberg_crypto.io import local_path
from tests.fuzz.conftest import fuzz_settings
from tests.fuzz.harness import run_verifier

MISSING = ("<missing>",)

INTERESTING_INTS = [0, 1, -1, 2, 3, 4, 2**31 - 1, 2**31, -(2**31) - 1, 2**53 + 1, 2**63 - 1, 2**63, -(2**63),
                    -(2**63) - 1, 2**64, 10**30, -(10**30), 10**400]
INTERESTING_FLOATS = [0.0, -0.0, 2.5, 2.999, 3.0, 3.5, 1e308, math.inf, -math.inf, math.nan]
INTERESTING_STRINGS = ["", " ", "\x00", "a\x00b", "\x1b[2J\x1b]0;owned\x07", "\u202eevil", "\ud800", "\udcff",
                       "\U0001f4a3" * 3, "..", "../../../../etc/passwd", "file:/etc/passwd", "/dev/zero",
                       "file:///dev/zero", "s3://bucket/key", "hdfs://nn/x", "k1", "k2", "AAAA", "====", "3", "-1",
                       "1e309", "null"]

@st.composite
def _scalars(draw) -> Any:
    """A JSON scalar, biased to the values parsers get wrong (a named strategy: short reprs)."""
    return draw(st.one_of(st.none(), st.booleans(), st.sampled_from(INTERESTING_INTS), st.integers(),
                          st.sampled_from(INTERESTING_FLOATS), st.floats(), st.sampled_from(INTERESTING_STRINGS),
                          st.text(max_size=20), st.just("x" * 5000)))


@st.composite
def _json_values(draw) -> Any:
    """Any JSON value: a scalar, or a small list / object of them."""
    return draw(st.recursive(_scalars(), lambda inner: st.lists(inner, max_size=3)
                             | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=4))


json_values = _json_values()


# --- JSON paths ---------------------------------------------------------------------------------


def all_paths(value: Any, path: tuple = ()) -> list[tuple]:
    """Every path below ``value`` (containers and leaves), the root excluded."""
    out = [path] if path else []
    if isinstance(value, dict):
        for key, item in value.items():
            out += all_paths(item, path + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            out += all_paths(item, path + (index,))
    return out


def relevant_paths(doc: dict) -> list[tuple]:
    """The security-relevant fields of the original document (drawn more often)."""
    out = [("format-version",), ("properties", "encryption.key-id"), ("properties",), ("snapshots",),
           ("encryption-keys",), ("current-snapshot-id",)]
    for i, snapshot in enumerate(doc["snapshots"]):
        out += [("snapshots", i), ("snapshots", i, "manifest-list"), ("snapshots", i, "key-id")]
    for i, entry in enumerate(doc["encryption-keys"]):
        out += [("encryption-keys", i)] + [("encryption-keys", i, f) for f in entry]
        if "properties" in entry:
            out += [("encryption-keys", i, "properties", k) for k in entry["properties"]]
    return out


def get(doc: Any, path: tuple) -> Any:
    for part in path:
        doc = doc[part]
    return doc


def near_values(original: Any, doc: dict, table_paths: list[str]) -> list[Any]:
    """Values close to ``original``: the ones a forger would try (``table_paths``: every manifest,
    data and delete file of the table)."""
    out: list[Any] = []
    if isinstance(original, str):
        out += table_paths + [original + "\ud800"]
        out += [original + "x", original[:-1], original.upper(), original + "\x00", original[::-1],
                original.replace("/metadata/", "/metadata/../metadata/"), original.replace("/metadata/", "/data/")]
        if original:
            middle = len(original) // 2
            out.append(original[:middle] + chr((ord(original[middle]) + 1) % 0x110000 or 1) + original[middle + 1:])
        if original.startswith("file:"):
            out += [local_path(original), "file://" + local_path(original), "file:" + local_path(original) + "/"]
        out += [s["manifest-list"] for s in doc["snapshots"]] + [s.get("key-id") for s in doc["snapshots"]]
        out += [k["key-id"] for k in doc["encryption-keys"]]
        out += [k["encrypted-key-metadata"] for k in doc["encryption-keys"]]
    elif isinstance(original, bool):
        out += [not original]
    elif isinstance(original, int):
        out += [original + 1, original - 1, -original, str(original), float(original), original * 2**32,
                [s["snapshot-id"] for s in doc["snapshots"]][0]]
    elif isinstance(original, dict):
        out += [{}, [], {k: v for k, v in list(original.items())[1:]}]
    elif isinstance(original, list):
        out += [[], {}, original[:1], original[::-1], [None], [original[0]] * 2 if original else [{}]]
    return out


@st.composite
def mutations(draw, doc: dict, table_paths: list[str]) -> tuple[dict | None, str, str]:
    """``(mutated document or None, serialized text, description)``."""
    kind = draw(st.sampled_from(["relevant", "relevant", "any", "any", "text"]))
    if kind == "text":  # the bytes of the file: truncated or spliced
        text = json.dumps(doc)
        at = draw(st.integers(0, len(text)))
        how = draw(st.sampled_from(["truncate", "insert", "delete"]))
        junk = draw(st.sampled_from(['"', "{", "]", ",", "\\", "\x00", "\ud800", "NaN", "1e999", "[" * 200])
                    | st.text(max_size=5))
        changed = {"truncate": text[:at], "insert": text[:at] + junk + text[at:],
                   "delete": text[:at] + text[at + 1:]}[how]
        try:
            parsed = json.loads(changed)
        except ValueError:
            parsed = None
        return parsed, changed, f"text {how} at {at}: {junk!r}"
    path = draw(st.sampled_from(relevant_paths(doc) if kind == "relevant" else all_paths(doc)))
    mutated = copy.deepcopy(doc)
    parent, last = get(mutated, path[:-1]), path[-1]
    original = parent[last]
    ops = ["replace", "replace", "delete"]
    if isinstance(parent, list):
        ops.append("duplicate")
    if isinstance(original, list) and len(original) > 1:
        ops.append("shuffle")
    op = draw(st.sampled_from(ops))
    if op == "replace":
        near = near_values(original, doc, table_paths)
        value = draw(st.sampled_from(near) | json_values if near else json_values)
        parent[last] = value
        what = f"{value!r}"[:120]
    elif op == "delete":
        del parent[last]
        what = ""
    elif op == "duplicate":
        parent.insert(last, copy.deepcopy(original))
        what = ""
    else:
        parent[last] = draw(st.permutations(original))
        what = ""
    return mutated, json.dumps(mutated), f"{op} {list(path)} {what}"


# --- what is security-relevant -------------------------------------------------------------------


def _h(value: Any) -> Any:
    """A hashable, type-exact form of a JSON value (1, 1.0 and True differ; nan is itself)."""
    if isinstance(value, float) and math.isnan(value):
        return ("nan",)
    if value is MISSING or isinstance(value, (str, int, float, bool, type(None))):
        return (type(value).__name__, value)
    return ("json", json.dumps(value, sort_keys=True))


def _path(value: Any) -> Any:
    """A manifest-list location as the file it names (``file:/x`` and ``/x`` are one file)."""
    if isinstance(value, str):
        try:
            return ("file", os.path.realpath(local_path(value)))
        except ValueError:  # NUL
            pass
    return _h(value)


def _b64(value: Any) -> Any:
    """encrypted-key-metadata as the bytes it decodes to (non-canonical Base64 is the same key)."""
    if isinstance(value, str):
        try:
            return ("bytes", base64.b64decode(value, validate=True))
        except (binascii.Error, ValueError):
            pass
    return _h(value)


def _field(entry: dict, name: str) -> Any:
    return entry.get(name, MISSING)


def _snapshot_pairs(doc: dict) -> list:
    snapshots = doc.get("snapshots", MISSING)
    if not isinstance(snapshots, list):
        return [("broken", _h(snapshots))]
    return [(_path(_field(s, "manifest-list")), _h(_field(s, "key-id"))) if isinstance(s, dict) else ("broken", _h(s))
            for s in snapshots]


def _key_entries(doc: dict) -> set:
    entries = doc.get("encryption-keys", MISSING)
    if not isinstance(entries, list):
        return {("broken", _h(entries))}
    out = set()
    for e in entries:
        if not isinstance(e, dict):
            out.add(("broken", _h(e)))
            continue
        props = e.get("properties", {})
        stamp = _h(props.get("KEY_TIMESTAMP", MISSING)) if isinstance(props, dict) else ("broken", _h(props))
        out.add((_h(_field(e, "key-id")), _b64(_field(e, "encrypted-key-metadata")),
                 _h(_field(e, "encrypted-by-id")), stamp))
    return out


def _lowered(version: Any) -> bool:
    if isinstance(version, bool):
        return True
    if isinstance(version, (int, float)):
        return not version >= 3  # nan too
    if isinstance(version, str):
        try:
            return int(version) < 3
        except ValueError:
            return True
    return True


def security_change(old: dict, new: Any) -> str | None:
    """Why the mutation touched a security-relevant field (None: it did not)."""
    if not isinstance(new, dict):
        return "the document is not an object"
    if _lowered(new.get("format-version", MISSING)):
        return "format-version lowered"
    props = new.get("properties", MISSING)
    key_id = _h(old["properties"]["encryption.key-id"])
    if not isinstance(props, dict) or _h(props.get("encryption.key-id", MISSING)) != key_id:
        return "encryption.key-id changed"
    old_pairs, new_pairs = _snapshot_pairs(old), _snapshot_pairs(new)
    if set(new_pairs) - set(old_pairs):
        return "a snapshot's manifest-list or key-id changed"
    current = next(s for s in old["snapshots"] if s["snapshot-id"] == old["current-snapshot-id"])
    if (_path(current["manifest-list"]), _h(current["key-id"])) not in set(new_pairs):
        return "the current snapshot's manifest-list or key-id removed"
    if _key_entries(new) != _key_entries(old):
        return "an encryption-keys entry changed"
    return None


# --- the property -------------------------------------------------------------------------------


@fuzz_settings(1.0)
@given(data=st.data(), all_snapshots=st.sampled_from([True, True, True, False]))
def test_metadata_json_mutations(fuzz_table, data, all_snapshots):
    original = fuzz_table.doc
    table_paths = sorted([*fuzz_table.manifests, *fuzz_table.data_keys])
    mutated, text, description = data.draw(mutations(original, table_paths), label="mutation")
    reason = security_change(original, mutated) if mutated is not None else "unparseable"
    location = fuzz_table.write_metadata(text, "json")
    try:
        outcome = run_verifier(fuzz_table, location, all_snapshots=all_snapshots)
    finally:
        os.unlink(local_path(location))
    if reason and all_snapshots:
        assert not outcome.ok, f"{description}: {reason}, yet verified OK"
