"""The whole-table walk, pure Python (no JVM): table metadata -> keys -> manifest lists ->
manifests -> data and delete files -> statistics files -> report.

    from pyiceberg_crypto.verify import verify_metadata
    report = verify_metadata("file:/wh/db.db/t/metadata/00007-....metadata.json", kms)
    report = verify_metadata(path, kms, all_snapshots=True)      # every snapshot still in metadata
    report = verify_metadata(path, kms, snapshot_id=4239490924)  # one snapshot

Manifest lists and manifests are verified where the walk runs (their content is needed to find
the data files); data and delete files become :class:`~pyiceberg_crypto.verify.checks.FileTask`
units that a *runner* verifies: threads here, Spark tasks in :mod:`pyiceberg_crypto.verify.spark_job`.
A file shared by several snapshots is verified once. Failing files are then matched against the
other files of the same kind to tell a swapped or replayed file (``WRONG_FILE``) from a tampered one.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import fastavro

from pyiceberg_crypto.formats import ags1
from pyiceberg_crypto.formats.key_metadata import StandardKeyMetadata
from pyiceberg_crypto.io import DEFAULT_MAX_METADATA_BYTES, FileIO, FileTooLargeError, NotRegularFileError, file_io_for, read_bounded
from pyiceberg_crypto.kms.bounded import DEFAULT_KMS_TIMEOUT_SECONDS
from pyiceberg_crypto.verify.checks import (
    NO_KEY_METADATA,
    FileTask,
    check_file,
    find_origin,
    finding_for,
)
from pyiceberg_crypto.verify.keys import KeyLookupError, TableKeys
from pyiceberg_crypto.verify.metadata import MetadataError, Snapshot, StatisticsFile, TableMetadata
from pyiceberg_crypto.verify.report import (
    DATA,
    DELETION_VECTOR,
    EQUALITY_DELETE,
    KINDS,
    LENGTH_MISMATCH,
    MANIFEST,
    MANIFEST_LIST,
    OK,
    PLAINTEXT,
    POSITION_DELETE,
    STATISTICS,
    TAMPERED,
    TRUNCATED,
    UNVERIFIABLE,
    WRONG_FILE,
    FileFinding,
    TableCheck,
    TableReport,
)

#: ``runner(tasks) -> findings``: verifies data/delete files (threads by default, Spark tasks in the job).
Runner = Callable[[list[FileTask]], list[FileFinding]]
#: ``progress(stage, done, total)``: called as the walk advances (the CLI draws a bar with it).
Progress = Callable[[str, int, int], None]

ENTRY_DELETED = 2  # manifest entry status: the file left the table in that snapshot
_SWAP_SUSPECTS = (TAMPERED, TRUNCATED, LENGTH_MISMATCH)


class VerifyInputError(Exception):
    """The table metadata cannot be read or used at all (usage error / unreadable input)."""


@dataclass
class WalkPlan:
    """What the driver found while reading metadata, manifest lists and manifests."""

    findings: dict[str, FileFinding] = field(default_factory=dict)  # manifest lists + manifests
    tasks: dict[str, FileTask] = field(default_factory=dict)  # data + delete files, by path
    manifest_tasks: dict[str, FileTask] = field(default_factory=dict)  # to recognise swapped manifests
    files_by_manifest: dict[str, list[str]] = field(default_factory=dict)  # live file paths per manifest
    manifest_list_tasks: dict[str, FileTask] = field(default_factory=dict)  # every snapshot's, to spot a replay


def verify_metadata(
    metadata_location: str,
    kms,
    *,
    snapshot_id: int | None = None,
    all_snapshots: bool = False,
    file_io: FileIO | None = None,
    properties: dict[str, str] | None = None,
    expected_metadata_hash: str | None = None,
    runner: Runner | None = None,
    progress: Progress | None = None,
    max_metadata_bytes: int = DEFAULT_MAX_METADATA_BYTES,
    kms_timeout: float | None = DEFAULT_KMS_TIMEOUT_SECONDS,
) -> TableReport:
    """Verify the table whose ``metadata.json`` is at ``metadata_location`` with ``kms``.

    Args:
        metadata_location: a ``file:`` URI, a local path or an object-store URI of a metadata.json.
        kms: a :class:`~pyiceberg_crypto.kms.KeyManagementClient` holding the table's master key.
        snapshot_id / all_snapshots: which snapshots to walk (default: the current one).
        file_io: how to read files (default: chosen from the location's scheme and ``properties``).
        expected_metadata_hash: the metastore's ``metadata_hash`` (Base64 SHA-256 of the file), if known.
        runner: verifies data/delete files (default: a small thread pool in this process).
        max_metadata_bytes: a larger metadata.json is refused before it is read.
        kms_timeout: seconds to wait for one KMS call (None: no limit); a call that does not
            return in time is a KEY_ERROR and the KMS is not asked again.

    Raises:
        VerifyInputError: the metadata.json is missing, unreadable, not a regular file, larger
            than ``max_metadata_bytes`` or not table metadata, or the snapshot id is unknown.
            Problems with any other file are findings, never exceptions.
    """
    file_io = file_io or file_io_for(metadata_location, properties)
    raw = _read_metadata(file_io, metadata_location, max_metadata_bytes)
    try:
        meta = TableMetadata.parse(raw, metadata_location)
        snapshots = meta.select_snapshots(snapshot_id, all_snapshots)
    except MetadataError as exc:
        raise VerifyInputError(str(exc)) from None
    report = TableReport(
        metadata_location=metadata_location,
        table_location=meta.table_location,
        table_uuid=meta.table_uuid,
        format_version=meta.format_version,
        key_id=meta.key_id,
        snapshot_ids=[s.snapshot_id for s in snapshots],
        mode="all" if all_snapshots else ("snapshot" if snapshot_id is not None else "current"),
    )
    keys = TableKeys(meta, kms, kms_timeout)
    report.checks = table_checks(meta, keys, raw, expected_metadata_hash)
    if not snapshots and meta.snapshots:  # e.g. current-snapshot-id removed: nothing would be checked
        report.checks.append(TableCheck("current-snapshot", UNVERIFIABLE, f"the table metadata lists "
                                        f"{len(meta.snapshots)} snapshot(s) but no current one: nothing verified "
                                        "(choose --snapshot ID or --all-snapshots)"))
    plan = plan_walk(meta, keys, snapshots, file_io, progress)
    tasks = list(plan.tasks.values())
    file_findings = (runner or local_runner(file_io, progress=progress))(tasks)
    if any(f.kind == MANIFEST_LIST and f.status in _SWAP_SUSPECTS for f in plan.findings.values()):
        plan.manifest_list_tasks = manifest_list_tasks(meta, keys)
    findings = list(plan.findings.values()) + identify_swaps(file_findings, plan, file_io)
    findings += [check_statistics_file(stats, file_io) for stats in meta.statistics]
    order = {kind: i for i, kind in enumerate(KINDS)}
    report.files = sorted(findings, key=lambda f: (order.get(f.kind, len(order)), f.path))
    if progress:
        progress("done", len(report.files), len(report.files))
    return report


def _read_metadata(file_io: FileIO, location: str, limit: int) -> bytes:
    """The metadata.json's bytes: a regular file of at most ``limit`` bytes, read without blocking."""
    try:
        return read_bounded(file_io, location, limit)
    except FileNotFoundError:
        raise VerifyInputError(f"table metadata not found: {location}") from None
    except FileTooLargeError as exc:
        raise VerifyInputError(f"table metadata {location} is too large: {exc} (max-metadata-bytes)") from None
    except NotRegularFileError as exc:
        raise VerifyInputError(f"cannot read table metadata {location}: {exc}") from None
    except OSError as exc:
        raise VerifyInputError(f"cannot read table metadata {location}: {exc.strerror or exc}") from None


def metadata_hash(raw: bytes) -> str:
    """What Iceberg's Hive catalog stores as ``metadata_hash``: Base64 of SHA-256 over the file."""
    return base64.b64encode(hashlib.sha256(raw).digest()).decode("ascii")


def table_checks(meta: TableMetadata, keys: TableKeys, raw: bytes, expected_hash: str | None) -> list[TableCheck]:
    """format-version >= 3, encryption.key-id set, KEKs wrapped by it, and the metastore's hash."""
    checks = []
    if expected_hash is not None:
        actual = metadata_hash(raw)
        if actual == expected_hash:
            checks.append(TableCheck("metadata-hash", OK, "metadata.json matches the metastore's metadata_hash"))
        else:
            checks.append(TableCheck("metadata-hash", TAMPERED, "metadata.json differs from the file the metastore "
                                     "recorded (SHA-256 != metadata_hash): modified or replaced"))
    if meta.format_version >= 3:
        checks.append(TableCheck("format-version", OK, f"format-version {meta.format_version}"))
    else:
        checks.append(TableCheck("format-version", PLAINTEXT, f"format-version {meta.format_version}: "
                                 "Iceberg encrypts tables of format-version 3 and later only"))
    if meta.key_id:
        checks.append(TableCheck("encryption.key-id", OK, f"master key id {meta.key_id!r}"))
    else:
        checks.append(TableCheck("encryption.key-id", PLAINTEXT, "no encryption.key-id: the table is not encrypted"))
    checks += keys.kek_checks()
    checks += snapshot_checks(meta)
    return checks


def snapshot_checks(meta: TableMetadata) -> list[TableCheck]:
    """Iceberg writes a new manifest list, with a new key, for every snapshot: two snapshots that
    share one are an edited metadata.json (e.g. the current snapshot pointed at an older state)."""
    checks = []
    for field_name, value_of in (("manifest-list", lambda s: s.manifest_list), ("key-id", lambda s: s.key_id)):
        owners: dict[str, list[int]] = {}
        for snapshot in meta.snapshots.values():
            if value_of(snapshot):
                owners.setdefault(value_of(snapshot), []).append(snapshot.snapshot_id)
        for value, ids in owners.items():
            if len(ids) > 1:
                checks.append(TableCheck("snapshot-keys", TAMPERED, f"snapshots {', '.join(map(str, sorted(ids)))} "
                                         f"share the {field_name} {value!r}: Iceberg writes one per snapshot"))
    return checks


# --- planning: manifest lists and manifests ------------------------------------------------------


def plan_walk(meta: TableMetadata, keys: TableKeys, snapshots: Iterable[Snapshot], file_io: FileIO,
              progress: Progress | None = None) -> WalkPlan:
    plan = WalkPlan()
    snapshots = list(snapshots)
    for done, snapshot in enumerate(snapshots):
        if progress:
            progress("manifests", done, len(snapshots))
        _walk_snapshot(snapshot, keys, file_io, plan)
    return plan


def _walk_snapshot(snapshot: Snapshot, keys: TableKeys, file_io: FileIO, plan: WalkPlan) -> None:
    list_task = FileTask(snapshot.manifest_list, MANIFEST_LIST, "AVRO", snapshot_ids={snapshot.snapshot_id})
    try:
        list_key = keys.manifest_list_key(snapshot)
        list_task.key_metadata = list_key.serialize()
        list_task.expected_size = list_key.file_length
    except KeyLookupError as exc:
        if snapshot.key_id:  # the key exists but cannot be opened: nothing below can be checked
            plan.findings[list_task.path] = finding_for(list_task, exc.status, str(exc))
            return
    finding, records = read_avro(list_task, file_io)
    if finding.detail == NO_KEY_METADATA:
        finding.detail = (f"encrypted, but snapshot {snapshot.snapshot_id} has no key-id in the table metadata "
                          "(no key to open its manifest list)")
    _add_finding(plan.findings, finding)
    for record in records or []:
        path = record["manifest_path"]
        if path in plan.findings:  # verified for an earlier snapshot: record this one too
            plan.findings[path].snapshot_ids = sorted({*plan.findings[path].snapshot_ids, snapshot.snapshot_id})
            for file_path in plan.files_by_manifest.get(path, []):
                plan.tasks[file_path].snapshot_ids.add(snapshot.snapshot_id)
            continue
        task = FileTask(path, MANIFEST, "AVRO", key_metadata=_bytes(record.get("key_metadata")),
                        expected_size=record.get("manifest_length"), snapshot_ids={snapshot.snapshot_id})
        plan.manifest_tasks[path] = task
        finding, entries = read_avro(task, file_io)
        plan.findings[path] = finding
        plan.files_by_manifest[path] = [p for p in (_add_entry(plan, e, snapshot.snapshot_id) for e in entries or [])
                                        if p is not None]


def _add_entry(plan: WalkPlan, entry: dict, snapshot_id: int) -> str | None:
    """Record a live manifest entry's file as a task (once per path); returns its path."""
    if entry.get("status") == ENTRY_DELETED:
        return None
    data_file = entry["data_file"]
    path = data_file["file_path"]
    key_metadata = _bytes(data_file.get("key_metadata"))
    existing = plan.tasks.get(path)
    if existing is not None:
        existing.entries += 1
        existing.snapshot_ids.add(snapshot_id)
        if existing.key_metadata != key_metadata and existing.conflict is None:
            existing.conflict = "two manifest entries give this file different key metadata"
        return path
    plan.tasks[path] = FileTask(
        path,
        entry_kind(data_file),
        str(data_file.get("file_format", "")).upper(),
        key_metadata=key_metadata,
        expected_size=data_file.get("file_size_in_bytes"),
        record_count=data_file.get("record_count") if data_file.get("content", 0) == 0 else None,
        snapshot_ids={snapshot_id},
    )
    return path


def entry_kind(data_file: dict) -> str:
    """Report kind of a manifest entry's file (content 0 data, 1 position deletes, 2 equality deletes)."""
    content = data_file.get("content", 0)
    if content == 0:
        return DATA
    if content == 2:
        return EQUALITY_DELETE
    return DELETION_VECTOR if str(data_file.get("file_format", "")).upper() == "PUFFIN" else POSITION_DELETE


def read_avro(task: FileTask, file_io: FileIO) -> tuple[FileFinding, list[dict] | None]:
    """Verify an AGS1-encrypted Avro file (manifest list, manifest) and return its records.

    Records of a file that is not OK are not trusted, so not returned, except for a plaintext file
    the writer itself recorded no key for (a writer bug worth seeing through: its files are walked).
    """
    finding = check_file(task, file_io)
    try:
        if finding.status == OK:
            key = StandardKeyMetadata.parse(task.key_metadata)
            with file_io.open(task.path) as handle:
                reader = ags1.Ags1Reader(handle, key.encryption_key, key.aad_prefix or b"",
                                         file_length=key.file_length, name=task.path)
                with io.BufferedReader(reader) as plain:
                    return finding, list(fastavro.reader(plain))
        if finding.status == PLAINTEXT and task.key_metadata is None:
            finding.detail += "; the table records no key for it (written unencrypted)"
            with file_io.open(task.path) as handle:
                return finding, list(fastavro.reader(handle))
    except Exception as exc:  # authentic bytes that are not the Avro Iceberg wrote
        finding.status = UNVERIFIABLE
        finding.detail = f"authenticated, but not a readable Iceberg {task.kind}: {type(exc).__name__}: {exc}"
    return finding, None


def _add_finding(findings: dict[str, FileFinding], finding: FileFinding) -> None:
    if finding.path in findings:
        findings[finding.path].snapshot_ids = sorted({*findings[finding.path].snapshot_ids, *finding.snapshot_ids})
    else:
        findings[finding.path] = finding


def _bytes(value) -> bytes | None:
    return bytes(value) if value is not None else None


# --- running the file checks --------------------------------------------------------------------


def local_runner(file_io: FileIO, threads: int | None = None, progress: Progress | None = None) -> Runner:
    """Verify tasks in this process with a small thread pool (AES-GCM releases the GIL)."""
    workers = threads or min(4, os.cpu_count() or 1)

    def run(tasks: list[FileTask]) -> list[FileFinding]:
        results = []
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="verify") as pool:
            for done, finding in enumerate(pool.map(lambda task: check_file(task, file_io), tasks), 1):
                results.append(finding)
                if progress:
                    progress("files", done, len(tasks))
        return results

    return run


def manifest_list_tasks(meta: TableMetadata, keys: TableKeys) -> dict[str, FileTask]:
    """Every snapshot's manifest list with its key, where the key opens (candidates for a replay)."""
    tasks = {}
    for snapshot in meta.snapshots.values():
        try:
            key = keys.manifest_list_key(snapshot)
        except KeyLookupError:
            continue
        tasks[snapshot.manifest_list] = FileTask(snapshot.manifest_list, MANIFEST_LIST, "AVRO",
                                                 key_metadata=key.serialize(), expected_size=key.file_length,
                                                 snapshot_ids={snapshot.snapshot_id})
    return tasks


def identify_swaps(findings: list[FileFinding], plan: WalkPlan, file_io: FileIO) -> list[FileFinding]:
    """Turn a failing file whose bytes authenticate as another file of the table into WRONG_FILE."""
    for pool in (plan.manifest_tasks, plan.manifest_list_tasks):
        for path, task in pool.items():
            finding = plan.findings.get(path)
            if finding is not None and finding.status in _SWAP_SUSPECTS:
                _mark_swap(finding, task, list(pool.values()), file_io)
    for path, task in plan.manifest_list_tasks.items():
        finding = plan.findings.get(path)
        if finding is not None and finding.status in _SWAP_SUSPECTS:
            _mark_borrowed_key(finding, task, list(plan.manifest_list_tasks.values()), file_io)
    by_format: dict[str, list[FileTask]] = {}
    for task in plan.tasks.values():
        by_format.setdefault(task.file_format, []).append(task)
    for finding in findings:
        if finding.status in _SWAP_SUSPECTS and finding.path in plan.tasks:
            task = plan.tasks[finding.path]
            _mark_swap(finding, task, by_format.get(task.file_format, []), file_io)
    return findings


def _mark_swap(finding: FileFinding, task: FileTask, candidates: list[FileTask], file_io: FileIO) -> None:
    origin = find_origin(task, file_io, candidates)
    if origin is not None:
        finding.status = WRONG_FILE
        finding.same_as = origin
        owner = next(c for c in candidates if c.path == origin)
        what = (f"the manifest list of snapshot {', '.join(map(str, sorted(owner.snapshot_ids)))}, "
                if task.kind == MANIFEST_LIST and owner.snapshot_ids else "another file of the table: ")
        finding.detail = f"its content authenticates as {what}{origin} ({finding.detail})"


def _mark_borrowed_key(finding: FileFinding, task: FileTask, candidates: list[FileTask], file_io: FileIO) -> None:
    """A manifest list whose snapshot names another manifest list's key (an edited metadata.json)."""
    for other in candidates:
        if other.path != task.path and find_origin(other, file_io, [task]) is not None:
            finding.status = TAMPERED
            finding.detail = (f"the key its snapshot names (key-id in the table metadata) is the key of another "
                              f"manifest list, {other.path}: the snapshot's key-id was changed ({finding.detail})")
            return


# --- statistics files ----------------------------------------------------------------------------


def check_statistics_file(stats: StatisticsFile, file_io: FileIO) -> FileFinding:
    """Statistics (Puffin) and partition statistics (Parquet) files must be encrypted too."""
    file_format = "PUFFIN" if stats.kind == STATISTICS else "PARQUET"
    task = FileTask(stats.path, stats.kind, file_format, expected_size=stats.size, snapshot_ids={stats.snapshot_id})
    if stats.key_metadata:
        try:
            task.key_metadata = base64.b64decode(stats.key_metadata, validate=True)
        except (binascii.Error, ValueError):
            task.conflict = "its key-metadata in the table metadata is not valid base64"
    finding = check_file(task, file_io)
    if finding.status == PLAINTEXT:
        leak = ("column NDV sketches (apache/iceberg#17995: compute_table_stats writes them unencrypted)"
                if stats.kind == STATISTICS else "partition values and per-partition counts")
        finding.detail += f": it exposes {leak}"
    elif finding.detail == NO_KEY_METADATA:
        finding.detail = "encrypted, but the table metadata records no key for it"
    return finding

