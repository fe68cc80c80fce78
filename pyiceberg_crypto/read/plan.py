"""Which files a read of one snapshot opens, with the deletes that apply to each.

The snapshot's manifest list and manifests are read exactly as the verifier reads them
(:func:`pyiceberg_crypto.verify.plan.read_avro`: every AGS1 block authenticated, the file's own key,
its trusted length), and any that is not OK stops the read with :class:`ReadIntegrityError`.
Confinement is the verifier's: a file outside the table's locations is never opened.

Delete files are matched to data files with Iceberg's rules (spec "Scan Planning"):

* a deletion vector or position delete applies to a data file when its data sequence number is
  >= the data file's (a DV names its data file: ``referenced_data_file``);
* an equality delete applies when its data sequence number is > the data file's, and it is
  global (unpartitioned spec) or in the same spec and partition.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyiceberg_crypto._deprecated import renamed_classes
from pyiceberg_crypto.errors import ReadIntegrityError
from pyiceberg_crypto.io import FileIO
from pyiceberg_crypto.io.confinement import Confinement
from pyiceberg_crypto.table.keys import TableKeys
from pyiceberg_crypto.table.manifests import ENTRY_ADDED, ENTRY_DELETED, entry_kind
from pyiceberg_crypto.table.metadata import Snapshot
from pyiceberg_crypto.verify.checks import FileTask
from pyiceberg_crypto.verify.plan import read_avro  # the seam: manifests are read as the verifier checks them
from pyiceberg_crypto.verify.report import (
    DATA,
    DELETION_VECTOR,
    EQUALITY_DELETE,
    KEY_ERROR,
    MANIFEST,
    MANIFEST_LIST,
    OK,
    POSITION_DELETE,
)


@dataclass
class ContentFile:
    """A data or delete file of the scan, with everything reading it needs (its own key)."""

    path: str
    kind: str  # report.DATA, DELETION_VECTOR, POSITION_DELETE, EQUALITY_DELETE
    file_format: str  # PARQUET, AVRO, PUFFIN
    key_metadata: bytes | None = field(repr=False)
    size: int
    record_count: int
    sequence_number: int  # data sequence number
    spec_id: int
    partition: dict
    equality_ids: tuple[int, ...] = ()
    referenced_data_file: str | None = None
    content_offset: int | None = None  # DV: where its blob sits in the Puffin file
    content_size: int | None = None
    # Column bounds by field id, Iceberg's single-value serialization (row filters skip files by them).
    lower_bounds: dict = field(default_factory=dict, repr=False)
    upper_bounds: dict = field(default_factory=dict, repr=False)

    def task(self) -> FileTask:
        """The verifier's unit of work for this file (the checks the read relies on)."""
        return FileTask(self.path, self.kind, self.file_format, key_metadata=self.key_metadata,
                        expected_size=self.size, record_count=self.record_count if self.kind == DATA else None)


@dataclass
class ReadTask:
    """One data file and the delete files that apply to it."""

    data: ContentFile
    deletion_vectors: list[ContentFile] = field(default_factory=list)
    position_deletes: list[ContentFile] = field(default_factory=list)
    equality_deletes: list[ContentFile] = field(default_factory=list)


def plan_read(snapshot: Snapshot | None, keys: TableKeys, file_io: FileIO, confinement: Confinement,
              unpartitioned_specs: set[int]) -> list[ReadTask]:
    """The data files of ``snapshot`` (none for a table without one) with their deletes."""
    if snapshot is None:
        return []
    data_files: list[ContentFile] = []
    deletes = DeleteIndex(unpartitioned_specs)
    seen: set[str] = set()
    for content in _live_files(snapshot, keys, file_io, confinement):
        if content.kind != DELETION_VECTOR:  # DVs share their Puffin file; every other file is live once
            if content.path in seen:  # its rows would be returned twice (Iceberg never writes this)
                raise ReadIntegrityError("two live manifest entries name this file", file=content.path)
            seen.add(content.path)
        if content.kind == DATA:
            data_files.append(content)
        else:
            deletes.add(content)
    return [deletes.task_for(data) for data in data_files]


class DeleteIndex:
    """Delete files by what they can apply to: deletion vectors by data file, position deletes by
    data file (or for any file, when they name none), equality deletes by spec and partition (or
    global), so matching costs what the matches cost, not data files x delete files."""

    def __init__(self, unpartitioned_specs: set[int]):
        self.unpartitioned_specs = unpartitioned_specs
        self.by_data_file: dict[str, list[ContentFile]] = {}
        self.position_any: list[ContentFile] = []
        self.equality_global: list[ContentFile] = []
        self.equality_by_partition: dict[tuple, list[ContentFile]] = {}

    def add(self, delete: ContentFile) -> None:
        if delete.kind == EQUALITY_DELETE:
            if delete.spec_id in self.unpartitioned_specs:
                self.equality_global.append(delete)
            else:
                self.equality_by_partition.setdefault(_partition_key(delete), []).append(delete)
        elif delete.kind in (DELETION_VECTOR, POSITION_DELETE):
            if delete.referenced_data_file is not None:
                self.by_data_file.setdefault(delete.referenced_data_file, []).append(delete)
            elif delete.kind == POSITION_DELETE:  # a DV always names its data file
                self.position_any.append(delete)

    def task_for(self, data: ContentFile) -> ReadTask:
        """``data`` with the deletes that apply (spec "Scan Planning": positions and DVs at or
        after its data sequence number, equality deletes strictly after it)."""
        task = ReadTask(data)
        for delete in self.by_data_file.get(data.path, []) + self.position_any:
            if delete.sequence_number >= data.sequence_number:
                (task.deletion_vectors if delete.kind == DELETION_VECTOR else task.position_deletes).append(delete)
        for delete in self.equality_global + self.equality_by_partition.get(_partition_key(data), []):
            if delete.sequence_number > data.sequence_number:
                task.equality_deletes.append(delete)
        return task


def _partition_key(content: ContentFile) -> tuple:
    return content.spec_id, tuple(sorted((k, repr(v)) for k, v in content.partition.items()))


def _live_files(snapshot: Snapshot, keys: TableKeys, file_io: FileIO, confinement: Confinement):
    list_task = FileTask(snapshot.manifest_list, MANIFEST_LIST, "AVRO")
    _confine(confinement, list_task.path, MANIFEST_LIST)
    try:
        list_key = keys.manifest_list_key(snapshot)
    except ReadIntegrityError as exc:  # a key of the table's envelope: KEY_ERROR, or TAMPERED
        raise ReadIntegrityError(exc.reason, file=snapshot.manifest_list, status=exc.status) from None
    list_task.key_metadata, list_task.expected_size = list_key.serialize(), list_key.file_length
    for record in _records(list_task, file_io):
        path = record["manifest_path"]
        _confine(confinement, path, MANIFEST)
        task = FileTask(path, MANIFEST, "AVRO", key_metadata=_bytes(record.get("key_metadata")),
                        expected_size=record.get("manifest_length"))
        manifest_sequence_number = record.get("sequence_number") or 0
        spec_id = record.get("partition_spec_id") or 0
        for entry in _records(task, file_io):
            if entry.get("status") == ENTRY_DELETED:
                continue
            content = _content_file(entry, manifest_sequence_number, spec_id)
            _confine(confinement, content.path, content.kind)
            yield content


def _records(task: FileTask, file_io: FileIO) -> list[dict]:
    finding, records = read_avro(task, file_io)
    if finding.status != OK or records is None:
        raise ReadIntegrityError.from_finding(finding)
    return records


def _confine(confinement: Confinement, path: str, kind: str) -> None:
    try:
        reason = confinement.refusal(path)
    except ValueError:
        reason = "its path is not a valid file name"
    if reason is not None:
        raise ReadIntegrityError(f"OUTSIDE_TABLE: the {kind} is not read: {reason}", file=path, status="OUTSIDE_TABLE")


def _content_file(entry: dict, manifest_sequence_number: int, spec_id: int) -> ContentFile:
    data_file = entry["data_file"]
    sequence_number = entry.get("sequence_number")
    if sequence_number is None:  # spec "Sequence Number Inheritance": ADDED entries take the manifest's
        sequence_number = manifest_sequence_number if entry.get("status") == ENTRY_ADDED else 0
    return ContentFile(
        path=data_file["file_path"],
        kind=entry_kind(data_file),
        file_format=str(data_file["file_format"]).upper(),
        key_metadata=_bytes(data_file.get("key_metadata")),
        size=data_file["file_size_in_bytes"],
        record_count=data_file["record_count"],
        sequence_number=sequence_number,
        spec_id=spec_id,
        partition=dict(data_file.get("partition") or {}),
        equality_ids=tuple(data_file.get("equality_ids") or ()),
        referenced_data_file=data_file.get("referenced_data_file"),
        content_offset=data_file.get("content_offset"),
        content_size=data_file.get("content_size_in_bytes"),
        lower_bounds=_bound_map(data_file.get("lower_bounds")),
        upper_bounds=_bound_map(data_file.get("upper_bounds")),
    )


def _bound_map(value) -> dict[int, bytes]:
    """A manifest's ``map<int, binary>`` (Avro: an array of key/value records) as a dict."""
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = ((item.get("key"), item.get("value")) for item in value if isinstance(item, dict))
    else:
        return {}
    return {int(k): bytes(v) for k, v in items if isinstance(k, int) and isinstance(v, (bytes, bytearray))}


def unpartitioned_spec_ids(doc: dict) -> set[int]:
    """Ids of the metadata.json's partition specs without fields (their deletes are global)."""
    specs = doc.get("partition-specs") or []
    return {s.get("spec-id") for s in specs if isinstance(s, dict) and not s.get("fields")}


def _bytes(value) -> bytes | None:
    return bytes(value) if value is not None else None


__all__ = ["ContentFile", "DeleteIndex", "ReadIntegrityError", "ReadTask", "plan_read", "unpartitioned_spec_ids"]

#: Old names, kept for one release (CHANGELOG.md): a key a read cannot have is a ReadIntegrityError
#: whose ``status`` is KEY_ERROR.
__getattr__ = renamed_classes(__name__, {"ReadKeyError": ReadIntegrityError})
