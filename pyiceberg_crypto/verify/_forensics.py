"""Step 3 of a verification: explain failures. A file that fails but whose bytes authenticate as
another file of the table was swapped or replayed (``WRONG_FILE``), not edited; a manifest list
that opens only with another snapshot's key had its snapshot's ``key-id`` changed::

    findings = identify_swaps(file_findings, plan, meta, keys, file_io)

Only failing files are examined, against candidates of the same kind and format, through the
cheap :func:`authenticates_as` (footer or first block).
"""

from __future__ import annotations

from typing import BinaryIO

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from pyiceberg_crypto.errors import FormatError, IntegrityError, ReadIntegrityError
from pyiceberg_crypto.formats import ags1
from pyiceberg_crypto.formats.key_metadata import StandardKeyMetadata
from pyiceberg_crypto.formats.parquet.reader import ParquetFileReader, ParquetKeys
from pyiceberg_crypto.io import FileIO
from pyiceberg_crypto.table.keys import TableKeys
from pyiceberg_crypto.table.metadata import TableMetadata
from pyiceberg_crypto.verify.checks import AGS1_MAGIC, NO_KEY_METADATA_REASON, FileTask
from pyiceberg_crypto.verify.plan import Plan
from pyiceberg_crypto.verify.report import (
    LENGTH_MISMATCH,
    MANIFEST_LIST,
    PLAINTEXT,
    STATISTICS,
    TAMPERED,
    TRUNCATED,
    WRONG_FILE,
    FileFinding,
)

SWAP_SUSPECTS = (TAMPERED, TRUNCATED, LENGTH_MISMATCH)


def identify_swaps(findings: list[FileFinding], plan: Plan, meta: TableMetadata, keys: TableKeys,
                   file_io: FileIO) -> list[FileFinding]:
    """Turn each failing file whose bytes authenticate as another file of the table into WRONG_FILE
    (manifest lists against every snapshot's, manifests against the plan's, data files against
    data files of the same format). Returns ``findings`` (changed in place)."""
    _match_pool(plan.manifest_tasks, plan, file_io)
    if any(f.kind == MANIFEST_LIST and f.status in SWAP_SUSPECTS for f in plan.findings.values()):
        lists = manifest_list_tasks(meta, keys)
        _match_pool(lists, plan, file_io)
        for path, task in lists.items():
            finding = plan.findings.get(path)
            if finding is not None and finding.status in SWAP_SUSPECTS:
                _mark_borrowed_key(finding, task, list(lists.values()), file_io)
    by_format: dict[str, list[FileTask]] = {}
    for task in plan.tasks.values():
        by_format.setdefault(task.file_format, []).append(task)
    for finding in findings:
        if finding.status in SWAP_SUSPECTS and finding.path in plan.tasks:
            task = plan.tasks[finding.path]
            _mark_swap(finding, task, by_format.get(task.file_format, []), file_io)
    return findings


def manifest_list_tasks(meta: TableMetadata, keys: TableKeys) -> dict[str, FileTask]:
    """Every snapshot's manifest list with its key, where the key opens (candidates for a replay)."""
    tasks = {}
    for snapshot in meta.snapshots.values():
        try:
            key = keys.manifest_list_key(snapshot)
        except ReadIntegrityError:
            continue
        tasks[snapshot.manifest_list] = FileTask(snapshot.manifest_list, MANIFEST_LIST, "AVRO",
                                                 key_metadata=key.serialize(), expected_size=key.file_length,
                                                 snapshot_ids={snapshot.snapshot_id})
    return tasks


def explain_statistics(finding: FileFinding) -> FileFinding:
    """Say what a plaintext statistics file exposes, or that its key is missing."""
    if finding.status == PLAINTEXT:
        leak = ("column NDV sketches (apache/iceberg#17995: compute_table_stats writes them unencrypted)"
                if finding.kind == STATISTICS else "partition values and per-partition counts")
        finding.detail += f": it exposes {leak}"
    elif finding.reason == NO_KEY_METADATA_REASON:
        finding.detail = "encrypted, but the table metadata records no key for it"
    return finding


def _match_pool(pool: dict[str, FileTask], plan: Plan, file_io: FileIO) -> None:
    for path, task in pool.items():
        finding = plan.findings.get(path)
        if finding is not None and finding.status in SWAP_SUSPECTS:
            _mark_swap(finding, task, list(pool.values()), file_io)


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


# --- does a file authenticate as another one? --------------------------------------------------


def authenticates_as(handle: BinaryIO, size: int, other: FileTask) -> bool:
    """Do these bytes authenticate as ``other`` (its key, its AAD prefix, its trusted length)?

    Cheap: the Parquet footer module, or the first AGS1 block, under ``other``'s key metadata.
    """
    if other.key_metadata is None:
        return False
    try:
        key = StandardKeyMetadata.parse(other.key_metadata)
    except FormatError:
        return False
    trusted = key.file_length if key.file_length is not None else other.expected_size
    if trusted is not None and trusted != size:
        return False
    handle.seek(0)
    try:
        if other.file_format == "PARQUET":
            ParquetFileReader(handle, ParquetKeys(footer_key=key.encryption_key, aad_prefix=key.aad_prefix),
                              name=other.path, expected_size=trusted)
            return True
        return _first_block_authenticates(handle, key, size)
    except (IntegrityError, FormatError):
        return False


def _first_block_authenticates(handle: BinaryIO, key: StandardKeyMetadata, size: int) -> bool:
    header = handle.read(ags1.HEADER_LENGTH)
    if len(header) < ags1.HEADER_LENGTH or header[:4] != AGS1_MAGIC:
        return False
    block_size = ags1.parse_header(header)
    if block_size != ags1.DEFAULT_BLOCK_SIZE:  # not a file Iceberg wrote (checks.py reports it TAMPERED)
        return False
    # never more than the file holds: the header's block length is not authenticated
    block = handle.read(min(block_size + ags1.BLOCK_OVERHEAD, max(size - ags1.HEADER_LENGTH, 0)))
    if len(block) < ags1.BLOCK_OVERHEAD:
        return False
    aad = ags1.block_aad(key.aad_prefix or b"", 0)
    try:
        AESGCM(key.encryption_key).decrypt(block[: ags1.NONCE_LENGTH], block[ags1.NONCE_LENGTH:], aad)
        return True
    except InvalidTag:
        return False


def find_origin(task: FileTask, file_io: FileIO, candidates: list[FileTask]) -> str | None:
    """The path of the file among ``candidates`` whose content is stored at ``task.path``, if any."""
    candidates = [c for c in candidates if c.path != task.path]
    if not candidates:
        return None
    try:
        size = file_io.size(task.path)
        with file_io.open(task.path) as handle:
            for other in candidates:
                if authenticates_as(handle, size, other):
                    return other.path
    except (OSError, ValueError):  # ValueError: a path no file system can hold
        return None
    return None
