"""The fuzzing harness (issue 15, item 5): one real encrypted table, a scratch copy that can be
re-encrypted and re-chained at will, and the bounds every case runs under.

    table = FuzzTable.build(source_metadata_location, master_keys, scratch_dir)
    with table.variant(manifests={path: records}) as metadata_json:   # re-encrypted, re-chained
        report = verify_metadata(metadata_json, table.kms(), all_snapshots=True)
    outcome = bounded(lambda: verify_metadata(...))                   # time + memory bound

The scratch copy is the Spark-written table copied into a temporary directory with every path
rewritten (manifest lists, manifests, metadata.json) and every manifest and manifest list
re-encrypted under its own key and AAD prefix, the manifest-list keys sealed again with the KEK
the KMS unwraps: it verifies OK like the original. A *variant* changes records of a manifest or
a manifest list, re-encrypts what changed into new files (new names) and re-chains what
authenticates them (the list entry's ``manifest_length`` and key metadata file length, the
sealed manifest-list key in ``encryption-keys``, a new metadata.json), so the crypto passes and
the parser and the checks are what is tested. The shared table is never modified.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import io
import json
import os
import shutil
import threading
import time
import tracemalloc
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fastavro

from pyiceberg_crypto.testing import decrypt_bytes, encrypt_bytes
from pyiceberg_crypto.testing import encrypt_manifest_list_key_metadata
from pyiceberg_crypto.testing._wait import load_factor
from pyiceberg_crypto.formats.key_metadata import StandardKeyMetadata
from pyiceberg_crypto.io import LocalFileIO, local_path
from pyiceberg_crypto.kms import InMemoryKms
from pyiceberg_crypto.verify.checks import FileTask
from pyiceberg_crypto.table.keys import TableKeys
from pyiceberg_crypto.table.metadata import TableMetadata
from pyiceberg_crypto.verify.plan import read_avro
from pyiceberg_crypto.verify.report import MANIFEST, MANIFEST_LIST

#: Every case must end within this many seconds of wall time, times the machine's load factor (a
#: hang detector, not a speed goal).
TIME_BOUND_SECONDS = float(os.environ.get("PYICEBERG_CRYPTO_FUZZ_SECONDS", "10"))
#: ... and allocate at most this much Python memory at its peak (tracemalloc).
MEMORY_BOUND_BYTES = int(os.environ.get("PYICEBERG_CRYPTO_FUZZ_MIB", "256")) * 1024 * 1024


# --- bounds -----------------------------------------------------------------------------------


class BoundExceeded(AssertionError):
    """A case ran longer than the time bound or allocated more than the memory bound."""


_TRACE_LOCK = threading.Lock()


def bounded(function: Callable[[], Any], *, seconds: float = TIME_BOUND_SECONDS,
            max_bytes: int = MEMORY_BOUND_BYTES) -> Any:
    """``function()`` in a watchdog thread under tracemalloc: its result, or its exception
    re-raised; BoundExceeded if it is still running after ``seconds`` times the load factor (the
    thread is left behind, a daemon) or its peak traced allocation exceeds ``max_bytes``."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = function()
        except BaseException as exc:  # re-raised in the caller's thread
            outcome["error"] = exc

    with _TRACE_LOCK:
        # Started once and left on: stopped by tests/fuzz/conftest.py after the fuzz tests. Stopping
        # it per case raced allocations in other threads (the KMS bridge's, py4j's): CPython 3.11
        # can crash in tracemalloc.stop() then (gh-128679, fixed in 3.12.9 / 3.13.2); a CI run did.
        if not tracemalloc.is_tracing():
            tracemalloc.start()
        tracemalloc.reset_peak()
        baseline, _ = tracemalloc.get_traced_memory()  # what earlier cases left alive is not this case's
        started = time.monotonic()
        thread = threading.Thread(target=run, name="fuzz-case", daemon=True)
        thread.start()
        seconds *= load_factor()
        thread.join(seconds)
        elapsed = time.monotonic() - started
        _, peak = tracemalloc.get_traced_memory()
        peak -= baseline
    if thread.is_alive():
        raise BoundExceeded(f"the case is still running after {seconds:.0f} s (a hang?)")
    if peak > max_bytes:
        raise BoundExceeded(f"the case allocated {peak / 2**20:.1f} MiB at its peak (bound {max_bytes / 2**20:g} MiB)")
    if "error" in outcome:
        raise outcome["error"]
    outcome["seconds"] = elapsed
    return outcome["value"]


# --- paths ------------------------------------------------------------------------------------


def same_file(a: Any, b: Any) -> bool:
    """Do two path strings name the same local file (``file:/x``, ``file:///x``, ``/x``, ``/x/./y``)?"""
    if not isinstance(a, str) or not isinstance(b, str):
        return a == b
    if a == b:
        return True
    try:
        return os.path.realpath(local_path(a)) == os.path.realpath(local_path(b))
    except (ValueError, OSError):  # NUL bytes, unencodable text
        return False


def same_key_metadata(before: Any, after: Any) -> bool:
    """Does ``after`` give the verifier what ``before`` gave: the same key and AAD prefix, and the
    same stored length or none (the trusted length is then the entry's own size field, as for
    Iceberg)? Equal bytes, or another encoding of that."""
    if before == after:
        return True
    if not isinstance(before, (bytes, bytearray)) or not isinstance(after, (bytes, bytearray)):
        return False
    try:
        old, new = StandardKeyMetadata.parse(before), StandardKeyMetadata.parse(after)
    except Exception:  # FormatError (a FormatError)
        return False
    return ((old.encryption_key, old.aad_prefix) == (new.encryption_key, new.aad_prefix)
            and new.file_length in (None, old.file_length))


def rewrite_strings(value: Any, old: str, new: str) -> Any:
    """``value`` with every string that starts with ``old`` re-rooted at ``new`` (dicts, lists)."""
    if isinstance(value, str):
        return new + value[len(old):] if value.startswith(old) else value
    if isinstance(value, dict):
        return {k: rewrite_strings(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [rewrite_strings(v, old, new) for v in value]
    return value


# --- Avro files of the table --------------------------------------------------------------------


@dataclass(repr=False)
class AvroFile:
    """A decrypted manifest or manifest list: what is needed to write it again."""

    path: str
    key: StandardKeyMetadata
    schema: dict
    codec: str
    metadata: dict[str, str]
    records: list[dict]

    def __repr__(self) -> str:  # never shows the key
        return f"AvroFile({self.path!r}, {len(self.records)} records)"

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(repr(self))

    @classmethod
    def read(cls, path: str, kind: str, key: StandardKeyMetadata) -> AvroFile:
        task = FileTask(path, kind, "AVRO", key_metadata=key.serialize(), expected_size=key.file_length)
        finding, _ = read_avro(task, LocalFileIO())
        assert finding.ok, finding
        plaintext = decrypt_bytes(Path(local_path(path)).read_bytes(), key.encryption_key,
                                       key.aad_prefix or b"", file_length=key.file_length)
        reader = fastavro.reader(io.BytesIO(plaintext))
        records = list(reader)
        header = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in reader.metadata.items()}
        schema = json.loads(header["avro.schema"])
        user = {k: v for k, v in header.items() if not k.startswith("avro.")}
        return cls(path, key, schema, header.get("avro.codec", "null"), user, records)

    def encode(self, records: list[dict]) -> bytes:
        """The Avro container bytes of ``records`` with this file's schema, codec and metadata."""
        out = io.BytesIO()
        fastavro.writer(out, fastavro.parse_schema(copy.deepcopy(self.schema)), records, codec=self.codec,
                        metadata=dict(self.metadata))
        return out.getvalue()

    def write_encrypted(self, path: str, records: list[dict]) -> StandardKeyMetadata:
        """Encrypt ``records`` under this file's key and AAD prefix to ``path``; its new key metadata."""
        data = encrypt_bytes(self.encode(records), self.key.encryption_key, self.key.aad_prefix or b"")
        Path(local_path(path)).write_bytes(data)
        return self.key.with_file_length(len(data))


@dataclass(repr=False)
class FuzzTable:
    """The scratch copy of a Spark-written table (see the module docstring)."""

    root: Path  # the scratch table directory
    location: str  # its location URI (the metadata.json's ``location``)
    master_keys: dict[str, bytes]
    doc: dict  # the scratch metadata.json
    metadata_location: str  # the scratch base metadata.json (verifies OK)
    lists: dict[int, AvroFile]  # snapshot id -> manifest list
    manifests: dict[str, AvroFile]  # path -> manifest
    data_keys: dict[str, StandardKeyMetadata]  # data / delete file path -> key metadata
    keks: dict[str, bytes] = field(repr=False, default_factory=dict)

    def __repr__(self) -> str:  # never shows keys (Hypothesis prints the arguments of a failure)
        return f"FuzzTable({self.location!r})"

    def _repr_pretty_(self, printer, cycle) -> None:  # Hypothesis's printer would list the fields
        printer.text(repr(self))

    def kms(self) -> InMemoryKms:
        return InMemoryKms(self.master_keys)

    def secrets(self) -> list[bytes]:
        """Key material that must never appear in any output: master keys, KEKs, file keys."""
        keys = [*self.master_keys.values(), *self.keks.values()]
        keys += [f.key.encryption_key for f in (*self.lists.values(), *self.manifests.values())]
        return keys + [k.encryption_key for k in self.data_keys.values()]

    # -- building the scratch copy ---------------------------------------------------------------

    @classmethod
    def build(cls, source_metadata_location: str, master_keys: dict[str, bytes], scratch: Path) -> FuzzTable:
        source_doc = json.loads(Path(local_path(source_metadata_location)).read_bytes())
        source_location = source_doc["location"]
        root = scratch / Path(local_path(source_location)).name
        shutil.copytree(local_path(source_location), root)
        location = f"file:{root}"
        meta = TableMetadata.parse(json.dumps(source_doc), source_metadata_location)
        keys = TableKeys(meta, InMemoryKms(master_keys))
        keks = {e.key_id: keys.kek(e.key_id) for e in keys.kek_entries()}
        doc = rewrite_strings(source_doc, source_location, location)
        table = cls(root, location, dict(master_keys), doc, "", {}, {}, {}, keks)
        for snapshot in meta.snapshots.values():
            source_list = AvroFile.read(snapshot.manifest_list, MANIFEST_LIST, keys.manifest_list_key(snapshot))
            for record in source_list.records:
                if record["manifest_path"] not in table.manifests:
                    manifest = AvroFile.read(record["manifest_path"], MANIFEST,
                                             StandardKeyMetadata.parse(record["key_metadata"]))
                    new_path = rewrite_strings(manifest.path, source_location, location)
                    manifest.records = rewrite_strings(manifest.records, source_location, location)
                    manifest.path = new_path
                    manifest.key = manifest.write_encrypted(new_path, manifest.records)
                    table.manifests[record["manifest_path"]] = manifest
                    for entry in manifest.records:
                        data_file = entry["data_file"]
                        table.data_keys[data_file["file_path"]] = StandardKeyMetadata.parse(data_file["key_metadata"])
            records = rewrite_strings(source_list.records, source_location, location)
            for record, source_record in zip(records, source_list.records):
                manifest = table.manifests[source_record["manifest_path"]]
                record["manifest_length"] = manifest.key.file_length
                record["key_metadata"] = manifest.key.serialize()
            source_list.path = rewrite_strings(source_list.path, source_location, location)
            source_list.records = records
            source_list.key = source_list.write_encrypted(source_list.path, records)
            table._seal(doc, snapshot.snapshot_id, source_list.path, source_list.key)
            table.lists[snapshot.snapshot_id] = source_list
        table.manifests = {m.path: m for m in table.manifests.values()}
        table.doc = doc
        table.metadata_location = table.write_metadata(doc, "base")
        return table

    def _seal(self, doc: dict, snapshot_id: int, list_path: str, list_key: StandardKeyMetadata) -> None:
        """Point ``snapshot_id`` at ``list_path`` and seal ``list_key`` into its encryption-keys entry."""
        snapshot = next(s for s in doc["snapshots"] if s["snapshot-id"] == snapshot_id)
        snapshot["manifest-list"] = list_path
        sealed = next(k for k in doc["encryption-keys"] if k["key-id"] == snapshot["key-id"])
        kek_entry = next(k for k in doc["encryption-keys"] if k["key-id"] == sealed["encrypted-by-id"])
        envelope = encrypt_manifest_list_key_metadata(self.keks[kek_entry["key-id"]], list_key.serialize(),
                                                      kek_entry["properties"]["KEY_TIMESTAMP"])
        sealed["encrypted-key-metadata"] = base64.b64encode(envelope).decode("ascii")

    def write_metadata(self, doc: dict | str | bytes, tag: str) -> str:
        """A metadata.json (a document, or raw text) under the scratch table's metadata/ directory."""
        path = self.root / "metadata" / f"99999-fuzz-{tag}-{uuid.uuid4().hex[:12]}.metadata.json"
        raw = doc if isinstance(doc, (str, bytes)) else json.dumps(doc)
        path.write_bytes(raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw)
        return f"file:{path}"

    def new_path(self, stem: str) -> str:
        return f"{self.location}/metadata/{stem}-fuzz-{uuid.uuid4().hex[:12]}.avro"

    # -- variants --------------------------------------------------------------------------------

    @contextlib.contextmanager
    def variant(self, *, manifests: dict[str, list[dict]] | None = None,
                lists: dict[int, list[dict]] | None = None) -> Iterator[str]:
        """A metadata.json whose chain holds ``manifests`` (path -> new records) and ``lists``
        (snapshot id -> new manifest-list records), each re-encrypted into a new file and re-chained;
        every file it created is removed afterwards."""
        created: list[str] = []
        doc = copy.deepcopy(self.doc)
        try:
            replaced: dict[str, tuple[str, StandardKeyMetadata]] = {}
            for path, records in (manifests or {}).items():
                new = self.new_path("m")
                created.append(new)
                replaced[path] = (new, self.manifests[path].write_encrypted(new, records))
            for snapshot_id, manifest_list in self.lists.items():
                records = copy.deepcopy(lists[snapshot_id]) if lists and snapshot_id in lists else None
                if records is None:
                    if not any(r["manifest_path"] in replaced for r in manifest_list.records):
                        continue
                    records = copy.deepcopy(manifest_list.records)
                    for record in records:
                        if record["manifest_path"] in replaced:
                            new, key = replaced[record["manifest_path"]]
                            record["manifest_path"], record["manifest_length"] = new, key.file_length
                            record["key_metadata"] = key.serialize()
                new = self.new_path("snap")
                created.append(new)
                self._seal(doc, snapshot_id, new, manifest_list.write_encrypted(new, records))
            location = self.write_metadata(doc, "variant")
            created.append(location)
            yield location
        finally:
            for path in created:
                with contextlib.suppress(OSError):
                    os.unlink(local_path(path))


# --- running the verifier both ways -----------------------------------------------------------

#: The CLI's KMS factory: the session's master keys (filled by the ``fuzz_table`` fixture).
KMS = "tests.verify.kms_factory:session_kms"


@dataclass
class Outcome:
    """What ``verify_metadata`` and ``pyiceberg-crypto verify --json`` made of one metadata.json."""

    report: Any  # TableReport, or None when verify_metadata raised TableInputError
    error: Exception | None
    code: int
    document: dict
    stderr: str

    @property
    def ok(self) -> bool:
        return self.report is not None and self.report.ok

    def describe(self) -> str:
        if self.report is None:
            return f"TableInputError: {self.error}"
        bad = [(c.name, c.status) for c in self.report.failed_checks()]
        bad += [(f.kind, f.status, f.detail[:80]) for f in self.report.not_ok()]
        return f"ok={self.report.ok} {bad[:6]}"


def run_verifier(table: FuzzTable, metadata_location: str, *, all_snapshots: bool = True) -> Outcome:
    """Both entry points on one metadata.json, each within the bounds; asserts what holds for every
    input: no exception past the boundary (TableInputError is the API's usage error), exit 0/1/2,
    exactly one JSON document on stdout, no traceback, no key bytes, and the two agree."""
    import contextlib as _contextlib

    from pyiceberg_crypto.cli.main import main
    from pyiceberg_crypto.verify import TableInputError, verify_metadata

    def api():
        try:
            return verify_metadata(metadata_location, table.kms(), all_snapshots=all_snapshots), None
        except TableInputError as exc:
            return None, exc

    report, error = bounded(api)
    if report is not None:
        json.dumps(report.to_dict())  # the report serializes

    def cli():
        out, err = io.StringIO(), io.StringIO()
        args = ["verify", metadata_location, "--kms", KMS, "--json"] + (["--all-snapshots"] if all_snapshots else [])
        with _contextlib.redirect_stdout(out), _contextlib.redirect_stderr(err):
            code = main(args)
        return code, out.getvalue(), err.getvalue()

    code, out, err = bounded(cli)
    assert code in (0, 1, 2), code
    assert "Traceback" not in out + err
    document = json.loads(out)  # exactly one JSON document (raises on trailing data)
    assert isinstance(document, dict) and document["ok"] is (code == 0)
    for secret in table.secrets():
        assert secret.hex() not in out + err and base64.b64encode(secret).decode() not in out + err
    expected = 2 if report is None else (0 if report.ok else 1)
    assert code == expected, (code, expected, error, err[-300:])
    return Outcome(report, error, code, document, err)
