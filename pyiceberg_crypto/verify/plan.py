"""Step 1 of a verification: from the table metadata to one task per file.

    scope = select_scope(meta)                                   # the current snapshot
    scope = select_scope(meta, since_snapshot_id=4239490924)     # only what came after it
    plan = plan_verification(meta, keys, scope, file_io)
    plan.findings      # manifest lists and manifests, verified here (their content names the files)
    plan.tasks         # data files, delete files, deletion vectors, statistics files: for a runner

Manifest lists and manifests are read where the plan is made, each decrypted once: the same pass
authenticates every block and yields the Avro records (:func:`read_avro`). Records of a file that
is not OK are never trusted.

Incremental scope (``since``): Iceberg gives every commit a sequence number, stored in each
manifest list entry (the manifest's) and inherited by the manifest's ADDED entries
(``file_sequence_number``). Everything at or below the cut-off sequence number was verified by an
earlier run; the plan reads only the manifest lists of the newer snapshots, the manifests with a
higher sequence number, and the files inside them with a higher file sequence number. This holds
when intermediate snapshots were expired, and after ``rewrite_manifests`` (its manifests are new,
their EXISTING entries are not).
"""

from __future__ import annotations

import base64
import binascii
import io
from collections.abc import Callable
from dataclasses import dataclass, field

import fastavro

from pyiceberg_crypto.errors import ReadIntegrityError, TableInputError
from pyiceberg_crypto.io import FileIO
from pyiceberg_crypto.io.confinement import Confinement
from pyiceberg_crypto.table.keys import TableKeys
from pyiceberg_crypto.table.manifests import ENTRY_ADDED, ENTRY_DELETED, checked_records, entry_kind
from pyiceberg_crypto.table.metadata import Snapshot, StatisticsFile, TableMetadata
from pyiceberg_crypto.verify.checks import NO_KEY_METADATA_REASON, FileTask, check_and_decrypt, finding_for
from pyiceberg_crypto.verify.report import (
    MANIFEST,
    MANIFEST_LIST,
    OK,
    OUTSIDE_TABLE,
    PLAINTEXT,
    STATISTICS,
    TAMPERED,
    UNVERIFIABLE,
    FileFinding,
)

__all__ = ["Plan", "Scope"]

#: ``progress(stage, done, total)``: called as the verification advances (the CLI draws a bar with it).
Progress = Callable[[str, int, int], None]


@dataclass
class Scope:
    """Which part of the table a verification covers.

    ``mode``: ``current`` | ``snapshot`` | ``all`` | ``since``. In ``since`` mode,
    ``after_sequence_number`` is the cut-off: manifests and files at or below it are not read.
    """

    mode: str
    snapshots: list[Snapshot]
    since_snapshot_id: int | None = None
    after_sequence_number: int | None = None

    def covers(self, sequence_number: int | None) -> bool:
        """Is something with this sequence number inside the scope? (None: written before
        sequence numbers existed, so at or below any cut-off.)"""
        if self.after_sequence_number is None:
            return True
        return sequence_number is not None and sequence_number > self.after_sequence_number

    def to_dict(self) -> dict:
        out: dict = {"mode": self.mode, "snapshot_ids": [s.snapshot_id for s in self.snapshots]}
        sequence_numbers = [s.sequence_number for s in self.snapshots if s.sequence_number is not None]
        if sequence_numbers:
            out["sequence_numbers"] = [min(sequence_numbers), max(sequence_numbers)]
        if self.mode == "since":
            out["since_snapshot_id"] = self.since_snapshot_id
            out["after_sequence_number"] = self.after_sequence_number
        return out


def select_scope(meta: TableMetadata, *, snapshot_id: int | None = None, all_snapshots: bool = False,
                 since_snapshot_id: int | None = None, after_sequence_number: int | None = None) -> Scope:
    """The snapshots to verify: the current one (default), one by id, all of them, or those that
    came after ``since_snapshot_id`` in the current snapshot's history.

    ``after_sequence_number`` gives the cut-off when ``since_snapshot_id`` was expired from the
    metadata (the ledger records it). Raises TableInputError for an unknown snapshot or a
    ``since`` snapshot that is not an ancestor of the current one.
    """
    if since_snapshot_id is None and after_sequence_number is None:
        mode = "all" if all_snapshots else ("snapshot" if snapshot_id is not None else "current")
        return Scope(mode, meta.select_snapshots(snapshot_id, all_snapshots))
    if snapshot_id is not None or all_snapshots:
        raise TableInputError("choose --since or --snapshot / --all-snapshots, not both")
    current = meta.current_snapshot
    chain = meta.ancestors(current)
    since = meta.snapshots.get(since_snapshot_id) if since_snapshot_id is not None else None
    descent = (meta.descends_from(current, since.snapshot_id, since.sequence_number or 0)
               if since is not None else None)
    if since is not None and (since in chain or (descent is None and after_sequence_number is None)):
        after_sequence_number = since.sequence_number  # on the line, or expired snapshots hide the link
    elif since is not None and after_sequence_number is None:
        raise TableInputError(f"snapshot {since_snapshot_id} is not an ancestor of the current snapshot "
                            f"{meta.current_snapshot_id}: the table was rolled back or moved to another branch "
                            "since; verify the current snapshot in full")
    elif after_sequence_number is None:
        known = ", ".join(str(i) for i in sorted(meta.snapshots)) or "none"
        raise TableInputError(f"snapshot {since_snapshot_id} is not in the table metadata (expired?; snapshots: {known}); "
                            "a ledger (--state) remembers the sequence number of an expired snapshot")
    if after_sequence_number is None:
        raise TableInputError(f"snapshot {since_snapshot_id} has no sequence number (format-version 1): "
                            "incremental verification needs format-version 2 or later")
    newer = [s for s in chain if s.sequence_number is not None and s.sequence_number > after_sequence_number]
    if chain and chain[-1].parent_snapshot_id is not None and chain[-1].parent_snapshot_id not in meta.snapshots:
        # Expired snapshots break the line: also take the listed newer snapshots that may still be
        # on it (neither disproved as an ancestor of the current one nor as a descendant of ``since``).
        top = current.sequence_number if current is not None and current.sequence_number is not None else 0
        for snapshot in meta.snapshots.values():
            sequence_number = snapshot.sequence_number
            if (snapshot in newer or sequence_number is None or not after_sequence_number < sequence_number <= top
                    or meta.descends_from(current, snapshot.snapshot_id, sequence_number) is False
                    or (since_snapshot_id is not None
                        and meta.descends_from(snapshot, since_snapshot_id, after_sequence_number) is False)):
                continue
            newer.append(snapshot)
        newer.sort(key=lambda s: s.sequence_number, reverse=True)
    if current is not None and (current.sequence_number or 0) < after_sequence_number:
        raise TableInputError(f"the current snapshot's sequence number {current.sequence_number} is below "
                            f"{after_sequence_number}: the table went backwards")
    return Scope("since", list(reversed(newer)), since_snapshot_id, after_sequence_number)


@dataclass
class Plan:
    """What reading the metadata, manifest lists and manifests found, and what is left to run."""

    scope: Scope
    confinement: Confinement = field(default_factory=Confinement.unconfined)
    findings: dict[str, FileFinding] = field(default_factory=dict)  # manifest lists, manifests, refused files
    tasks: dict[str, FileTask] = field(default_factory=dict)  # data + delete files, by path
    statistics_tasks: list[FileTask] = field(default_factory=list)  # Puffin / partition stats
    manifest_tasks: dict[str, FileTask] = field(default_factory=dict)  # to recognise swapped manifests
    files_by_manifest: dict[str, list[str]] = field(default_factory=dict)  # live file paths per manifest
    manifests_skipped: int = 0  # listed, but verified by an earlier run (since mode)
    entries_skipped: int = 0  # entries of read manifests that were verified by an earlier run

    def all_tasks(self) -> list[FileTask]:
        """Every file a runner verifies: data and delete files, then statistics files."""
        return list(self.tasks.values()) + self.statistics_tasks


def plan_verification(meta: TableMetadata, keys: TableKeys, scope: Scope, file_io: FileIO,
                      progress: Progress | None = None, confinement: Confinement | None = None) -> Plan:
    """Read the scope's manifest lists and manifests (verifying each once) into a :class:`Plan`.

    A file outside ``confinement`` (default: the table's own locations) is never opened and never
    becomes a task: it is an ``OUTSIDE_TABLE`` finding, and nothing below it is trusted.
    """
    if confinement is None:
        confinement = Confinement.for_table(meta.table_location, meta.properties)
    plan = Plan(scope, confinement)
    for done, snapshot in enumerate(scope.snapshots):
        if progress:
            progress("manifests", done, len(scope.snapshots))
        _plan_snapshot(snapshot, keys, file_io, plan)
    snapshot_ids = {s.snapshot_id for s in scope.snapshots}
    for stats in meta.statistics:
        if scope.mode != "since" or stats.snapshot_id in snapshot_ids:
            task = statistics_task(stats)
            if not _refused(plan, task):
                plan.statistics_tasks.append(task)
    return plan


def _refused(plan: Plan, task: FileTask) -> bool:
    """Record an OUTSIDE_TABLE finding for a task the confinement rule refuses (UNVERIFIABLE for a
    path no file system can hold: a NUL byte, a lone surrogate; never opened either)."""
    try:
        reason = plan.confinement.refusal(task.path)
    except ValueError as exc:  # os.path raises ValueError / UnicodeEncodeError for such a path
        _add_finding(plan.findings, finding_for(task, UNVERIFIABLE, f"its path is not a valid file name "
                                                f"({type(exc).__name__}): not read"))
        return True
    if reason is None:
        return False
    _add_finding(plan.findings, finding_for(task, OUTSIDE_TABLE, reason))
    return True


def _plan_snapshot(snapshot: Snapshot, keys: TableKeys, file_io: FileIO, plan: Plan) -> None:
    list_task = FileTask(snapshot.manifest_list, MANIFEST_LIST, "AVRO", snapshot_ids={snapshot.snapshot_id})
    if _refused(plan, list_task):
        return
    try:
        list_key = keys.manifest_list_key(snapshot)
        list_task.key_metadata = list_key.serialize()
        list_task.expected_size = list_key.file_length
    except ReadIntegrityError as exc:
        if snapshot.key_id:  # the key exists but cannot be opened: nothing below can be checked
            plan.findings[list_task.path] = finding_for(list_task, exc.status, str(exc))
            return
    finding, records = read_avro(list_task, file_io)
    if finding.reason == NO_KEY_METADATA_REASON:
        finding.detail = (f"encrypted, but snapshot {snapshot.snapshot_id} has no key-id in the table metadata "
                          "(no key to open its manifest list)")
    _add_finding(plan.findings, finding)
    for record in records or []:
        path = record["manifest_path"]
        manifest_sequence_number = record.get("sequence_number")
        if not plan.scope.covers(manifest_sequence_number):
            plan.manifests_skipped += 1
            continue
        if path in plan.findings:  # verified for an earlier snapshot: record this one too
            _also_in(plan.findings[path], snapshot.snapshot_id)
            for file_path in plan.files_by_manifest.get(path, []):
                plan.tasks[file_path].snapshot_ids.add(snapshot.snapshot_id)
            _check_same_manifest(plan, path, record)
            continue
        task = FileTask(path, MANIFEST, "AVRO", key_metadata=_bytes(record.get("key_metadata")),
                        expected_size=record.get("manifest_length"), snapshot_ids={snapshot.snapshot_id})
        if _refused(plan, task):
            continue
        plan.manifest_tasks[path] = task
        finding, entries = read_avro(task, file_io)
        plan.findings[path] = finding
        live = []
        for entry in entries or []:
            if not plan.scope.covers(file_sequence_number(entry, manifest_sequence_number)):
                plan.entries_skipped += 1
                continue
            file_path = _add_entry(plan, entry, snapshot.snapshot_id)
            if file_path is not None:
                live.append(file_path)
        plan.files_by_manifest[path] = live


def file_sequence_number(entry: dict, manifest_sequence_number: int | None) -> int | None:
    """The sequence number of the commit that wrote the entry's file: explicit, or (ADDED entries,
    spec "Sequence Number Inheritance") the manifest's."""
    explicit = entry.get("file_sequence_number")
    if explicit is not None:
        return explicit
    return manifest_sequence_number if entry.get("status") == ENTRY_ADDED else None


def _add_entry(plan: Plan, entry: dict, snapshot_id: int) -> str | None:
    """Record a live manifest entry's file as a task (once per path); returns its path."""
    if entry.get("status") == ENTRY_DELETED:
        return None
    data_file = entry["data_file"]
    path = data_file["file_path"]
    key_metadata = _bytes(data_file.get("key_metadata"))
    if path in plan.findings:  # refused (outside the table) for an earlier entry, or not a data file
        finding = plan.findings[path]
        _also_in(finding, snapshot_id)
        if finding.kind in (MANIFEST, MANIFEST_LIST):  # its bytes were checked as that, never as this entry's file
            _conflict(finding, f"a manifest entry also names it as a {entry_kind(data_file)} file")
        return None
    existing = plan.tasks.get(path)
    if existing is not None:
        existing.entries += 1
        existing.snapshot_ids.add(snapshot_id)
        existing.partitions.add(partition_text(data_file.get("partition")))
        record_count = data_file.get("record_count") if data_file.get("content", 0) == 0 else None
        if existing.conflict is None:
            if existing.key_metadata != key_metadata:
                existing.conflict = "two manifest entries give this file different key metadata"
            elif existing.expected_size != data_file.get("file_size_in_bytes"):
                existing.conflict = (f"two manifest entries give this file different sizes ({existing.expected_size} "
                                     f"and {data_file.get('file_size_in_bytes')} bytes)")
            elif (existing.kind, existing.file_format, existing.record_count) != (
                    entry_kind(data_file), str(data_file.get("file_format", "")).upper(), record_count):
                existing.conflict = "two manifest entries describe this file differently (content, format or record count)"
        return path
    task = FileTask(
        path,
        entry_kind(data_file),
        str(data_file.get("file_format", "")).upper(),
        key_metadata=key_metadata,
        expected_size=data_file.get("file_size_in_bytes"),
        record_count=data_file.get("record_count") if data_file.get("content", 0) == 0 else None,
        snapshot_ids={snapshot_id},
        partitions={partition_text(data_file.get("partition"))},
    )
    if _refused(plan, task):
        return None
    plan.tasks[path] = task
    return path


def partition_text(partition) -> str | None:
    """A manifest entry's partition tuple as Iceberg's paths show it (``grp=1/day=2``; a null value
    is ``null``); None for an unpartitioned table (an empty tuple) or an entry without one."""
    if not isinstance(partition, dict) or not partition:
        return None
    return "/".join(f"{name}={'null' if value is None else value}" for name, value in partition.items())


def read_avro(task: FileTask, file_io: FileIO) -> tuple[FileFinding, list[dict] | None]:
    """Verify an AGS1-encrypted Avro file (manifest list, manifest) and return its records.

    One pass: every block is decrypted and authenticated once, and the plaintext of that pass is
    what fastavro parses. Records of a file that is not OK are not trusted, so not returned, except
    for a plaintext file the writer itself recorded no key for (a writer bug worth seeing through:
    its files are walked).
    """
    finding, plaintext = check_and_decrypt(task, file_io)
    try:
        if finding.status == OK and plaintext is not None:
            return finding, checked_records(task.kind, list(fastavro.reader(io.BytesIO(plaintext))))
        if finding.status == PLAINTEXT and task.key_metadata is None:
            finding.detail += "; the table records no key for it (written unencrypted)"
            with file_io.open(task.path) as handle:
                return finding, checked_records(task.kind, list(fastavro.reader(handle)))
    except Exception as exc:  # authentic bytes that are not the Avro Iceberg wrote
        finding.status = UNVERIFIABLE
        finding.detail = f"authenticated, but not a readable Iceberg {task.kind}: {type(exc).__name__}: {exc}"
    return finding, None


def statistics_task(stats: StatisticsFile) -> FileTask:
    """A statistics (Puffin) or partition statistics (Parquet) file: it must be encrypted too."""
    file_format = "PUFFIN" if stats.kind == STATISTICS else "PARQUET"
    task = FileTask(stats.path, stats.kind, file_format, expected_size=stats.size, snapshot_ids={stats.snapshot_id})
    if stats.key_metadata:
        try:
            task.key_metadata = base64.b64decode(stats.key_metadata, validate=True)
        except (binascii.Error, ValueError):
            task.conflict = "its key-metadata in the table metadata is not valid base64"
    return task


def _add_finding(findings: dict[str, FileFinding], finding: FileFinding) -> None:
    """Record ``finding``; a file already found keeps one finding, the worse of the two (a path the
    table uses twice, e.g. as two snapshots' manifest list, is OK only if it is OK both times)."""
    known = findings.get(finding.path)
    if known is None:
        findings[finding.path] = finding
        return
    _also_in(known, *finding.snapshot_ids)
    if known.status == OK and finding.status != OK:
        known.status, known.detail, known.location = finding.status, finding.detail, finding.location
        if known.kind != finding.kind:
            known.detail += f" (read as the {finding.kind} it is also named as)"


def _also_in(finding: FileFinding, *snapshot_ids: int) -> None:
    """Record that ``finding``'s file belongs to these snapshots too (ids kept sorted, unique)."""
    finding.snapshot_ids = sorted({*finding.snapshot_ids, *snapshot_ids})


def _conflict(finding: FileFinding, reason: str) -> None:
    """Two references to one file disagree about it: TAMPERED (a finding already not OK keeps its status)."""
    if finding.status == OK:
        finding.status, finding.detail, finding.location = TAMPERED, reason, None
    elif reason not in finding.detail:
        finding.detail += f"; {reason}"


def _check_same_manifest(plan: Plan, path: str, record: dict) -> None:
    """A manifest list entry naming a file already read: it must be the same manifest, with the same
    key metadata and length (else the entry's own manifest would go unread)."""
    known = plan.manifest_tasks.get(path)
    finding = plan.findings[path]
    if known is None:
        if finding.kind != MANIFEST:
            _conflict(finding, f"a manifest list entry also names it as a manifest (it is a {finding.kind})")
        return
    if known.key_metadata != _bytes(record.get("key_metadata")) or known.expected_size != record.get("manifest_length"):
        _conflict(finding, "two manifest list entries give this manifest different key metadata or lengths")


def _bytes(value) -> bytes | None:
    return bytes(value) if value is not None else None
