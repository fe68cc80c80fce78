"""Verify one file against what the table says about it: the unit of work of the verifier.

A :class:`FileTask` carries only what one file needs (its path, kind, format, trusted length and
its *own* key metadata: DEK + AAD prefix); :func:`check_file` turns it into a
:class:`~pyiceberg_crypto.verify.report.FileFinding`. The same function runs in the local walk and
inside Spark tasks, so both give the same findings::

    task = FileTask(path, DATA, "PARQUET", key_metadata=entry_key_metadata, expected_size=2628)
    finding = check_file(task, LocalFileIO())
    finding.status        # "OK", "TAMPERED", "PLAINTEXT", ...

Order of checks: present -> plaintext magic -> trusted length -> every block/module
authenticated under the file's own key and AAD prefix -> the decrypted content is what the
entry says (Avro / Puffin magic, Parquet row count).
"""

from __future__ import annotations

import errno
from dataclasses import dataclass, field
from typing import BinaryIO

from pyiceberg_crypto.errors import ExtraDataError, FileAccessError, FormatError, IntegrityError, TruncatedError
from pyiceberg_crypto.formats import ags1
from pyiceberg_crypto.formats.key_metadata import StandardKeyMetadata
from pyiceberg_crypto.formats.magics import AVRO_MAGIC, PUFFIN_MAGIC, plaintext_format
from pyiceberg_crypto.formats.parquet.reader import MAGIC_ENCRYPTED, ParquetKeys
from pyiceberg_crypto.formats.parquet.verify import verify_parquet
from pyiceberg_crypto.io import FileIO
from pyiceberg_crypto.safe_text import quote_bytes
from pyiceberg_crypto.verify.report import (
    LENGTH_MISMATCH,
    MISSING,
    OK,
    PLAINTEXT,
    TAMPERED,
    TRUNCATED,
    UNVERIFIABLE,
    FileFinding,
)

__all__ = ["FileTask"]

AGS1_MAGIC = ags1.MAGIC
PARQUET_ENCRYPTED_MAGIC = MAGIC_ENCRYPTED
#: The detail (and ``reason`` code) of an encrypted-looking file the table records no key for
#: (the plan and forensics reword it for manifest lists and statistics files).
NO_KEY_METADATA = "the table records no key metadata for this file"
NO_KEY_METADATA_REASON = "no-key-metadata"


@dataclass
class FileTask:
    """One file to verify. ``key_metadata`` is the file's serialized StandardKeyMetadata (its own
    DEK and AAD prefix, nothing else); ``file_format`` is ``PARQUET``, ``AVRO`` or ``PUFFIN``."""

    path: str
    kind: str
    file_format: str
    key_metadata: bytes | None = field(default=None, repr=False)
    expected_size: int | None = None
    record_count: int | None = None
    snapshot_ids: set[int] = field(default_factory=set)
    entries: int = 1
    conflict: str | None = None  # set when two entries disagree about this file
    # the partitions of a data or delete file's entries (``grp=1/day=2``; None: unpartitioned); a
    # Puffin file can hold the deletion vectors of data files in several
    partitions: set[str | None] = field(default_factory=set)

    def __repr__(self) -> str:  # never shows key material
        return (f"FileTask(path={self.path!r}, kind={self.kind!r}, format={self.file_format!r}, "
                f"key_metadata={'set' if self.key_metadata else None}, expected_size={self.expected_size})")


def finding_for(task: FileTask, status: str, detail: str = "", **extra) -> FileFinding:
    return FileFinding(task.path, task.kind, status, detail, snapshot_ids=sorted(task.snapshot_ids),
                       entries=task.entries, expected_size=task.expected_size, **extra)


def status_of(error: IntegrityError, length_verified: bool = False) -> str:
    """The report status of an integrity failure (truncation first: some errors are both).

    Once the stored length equals the trusted length, a structure that ends too early or too late
    is a corrupt structure inside the file (e.g. a changed footer length), not a truncation.
    """
    if length_verified:
        return TAMPERED
    if isinstance(error, TruncatedError):
        return TRUNCATED
    if isinstance(error, ExtraDataError):  # bytes past the trusted length, or after the last block
        return LENGTH_MISMATCH
    return TAMPERED


def check_file(task: FileTask, file_io: FileIO) -> FileFinding:
    """Verify ``task`` through ``file_io``; never raises for a problem with the file itself.

    A FIFO, device, socket or directory in place of the file is UNVERIFIABLE ("not a regular
    file (FIFO)"): refused by the FileIO without being opened or waited for.
    """
    return _verify(task, file_io, keep_plaintext=False)[0]


def check_and_decrypt(task: FileTask, file_io: FileIO) -> tuple[FileFinding, bytes | None]:
    """Verify an AGS1 file and return its plaintext from the same pass (each block decrypted and
    authenticated once): how the plan reads manifest lists and manifests. The plaintext is None
    unless the finding is OK."""
    return _verify(task, file_io, keep_plaintext=True)


def _verify(task: FileTask, file_io: FileIO, keep_plaintext: bool) -> tuple[FileFinding, bytes | None]:
    size = stored_size(task, file_io)
    if isinstance(size, FileFinding):
        return size, None
    try:
        with file_io.open(task.path) as handle:
            finding, plaintext = _check_open_file(task, handle, size, keep_plaintext)
    except OSError as exc:
        return _storage_failure(task, exc, "read", size), None
    finding.size = size
    return finding, plaintext


def stored_size(task: FileTask, file_io: FileIO) -> int | FileFinding:
    """The file's length in storage, or the finding for a file storage would not ``stat``."""
    try:
        return file_io.size(task.path)
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte or unencodable text in the path
        return _storage_failure(task, exc, "stat")


def _storage_failure(task: FileTask, exc: OSError | ValueError, action: str, size: int | None = None) -> FileFinding:
    """The finding for a file storage would not ``stat`` / ``read``: MISSING, or UNVERIFIABLE."""
    if isinstance(exc, FileNotFoundError):
        return finding_for(task, MISSING, "referenced by the table but not found in storage")
    if isinstance(exc, FileAccessError) and exc.errno == errno.EINVAL:  # not a regular file
        return finding_for(task, UNVERIFIABLE, f"{exc}: refused, not read")
    return finding_for(task, UNVERIFIABLE, f"cannot {action} the file: {exc}", size=size)


def preflight(task: FileTask, handle: BinaryIO, size: int) -> FileFinding | tuple[StandardKeyMetadata, int | None, bytes]:
    """The checks before any decryption (the verifier's, and the reader's): not a plaintext file,
    no conflicting entries, key metadata present and parsing, the entry's length and the key
    metadata's agree, the stored ``size`` is the trusted length. Returns the file's key, trusted
    length and first four bytes, or the finding that ends the check."""
    magic = handle.read(4)
    handle.seek(0)
    plain_format = plaintext_format(magic)
    if plain_format:
        return finding_for(task, PLAINTEXT, f"a plaintext {plain_format} file (starts with {quote_bytes(magic)}), "
                                            "expected an encrypted one")
    if task.conflict:
        return finding_for(task, TAMPERED, task.conflict)
    if task.key_metadata is None:
        return finding_for(task, UNVERIFIABLE, NO_KEY_METADATA, reason=NO_KEY_METADATA_REASON)
    try:
        key = StandardKeyMetadata.parse(task.key_metadata)
    except FormatError as exc:
        return finding_for(task, TAMPERED, f"its key metadata does not parse: {exc}")
    trusted = key.file_length if key.file_length is not None else task.expected_size
    if task.expected_size is not None and key.file_length is not None and key.file_length != task.expected_size:
        return finding_for(task, LENGTH_MISMATCH, f"the entry says {task.expected_size} bytes, its key "
                                                  f"metadata says {key.file_length}")
    if trusted is not None and size != trusted:
        status = TRUNCATED if size < trusted else LENGTH_MISMATCH
        return finding_for(task, status, f"{size} bytes in storage, the trusted length is {trusted}")
    return key, trusted, magic


def _check_open_file(task: FileTask, handle: BinaryIO, size: int,
                     keep_plaintext: bool = False) -> tuple[FileFinding, bytes | None]:
    checked = preflight(task, handle, size)
    if isinstance(checked, FileFinding):
        return checked, None
    key, trusted, magic = checked
    if task.file_format == "PARQUET":
        return _check_parquet(task, handle, key, magic, trusted), None
    if task.file_format in ("AVRO", "PUFFIN"):
        return _check_ags1(task, handle, key, magic, trusted, keep_plaintext)
    return finding_for(task, UNVERIFIABLE, f"{task.file_format} files are not encrypted by Iceberg"), None


def _check_ags1(task: FileTask, handle: BinaryIO, key: StandardKeyMetadata, magic: bytes, trusted: int | None,
                keep_plaintext: bool = False) -> tuple[FileFinding, bytes | None]:
    """One pass over an AGS1 file (spec: AGS1 format): header, trusted length, then every block
    decrypted and authenticated once as it is read; the plaintext is kept only when asked."""
    if magic != AGS1_MAGIC:
        return finding_for(task, TAMPERED, f"bad magic {quote_bytes(magic)}, expected {AGS1_MAGIC!r}",
                           location="header"), None
    header = handle.read(ags1.HEADER_LENGTH)
    handle.seek(0)
    block_size = int.from_bytes(header[4:8], "little", signed=True)
    if len(header) == ags1.HEADER_LENGTH and block_size != ags1.DEFAULT_BLOCK_SIZE:  # not authenticated: check it
        return finding_for(task, TAMPERED, f"block length {block_size} in the header; Iceberg writes and reads "
                                           f"only {ags1.DEFAULT_BLOCK_SIZE}-byte blocks", location="header"), None
    expected = PUFFIN_MAGIC if task.file_format == "PUFFIN" else AVRO_MAGIC
    chunks: list[bytes] = []
    try:
        with ags1.Ags1Reader(handle, key.encryption_key, key.aad_prefix or b"", file_length=trusted,
                             name=task.path) as plain:
            blocks = plain.layout.block_count
            head = b""
            while True:
                chunk = plain.read(ags1.DEFAULT_BLOCK_SIZE)
                if not chunk:
                    break
                if len(head) < 4:
                    head = (head + chunk)[:4]
                if keep_plaintext:
                    chunks.append(chunk)
            if blocks and not plain.layout.plaintext_length:  # header + one empty block: no read touches it
                plain.authenticate_block(0)
    except IntegrityError as err:
        return finding_for(task, status_of(err, trusted is not None), err.reason, location=err.location), None
    except FormatError as exc:
        return finding_for(task, TAMPERED, str(exc), location="header"), None
    if head != expected:
        return finding_for(task, TAMPERED, f"authenticated, but the plaintext starts with {quote_bytes(head)}, not "
                                           f"{expected!r}", authenticated=blocks), None
    finding = finding_for(task, OK, f"AGS1, {blocks} block(s) authenticated", authenticated=blocks)
    return finding, (b"".join(chunks) if keep_plaintext else None)


def _check_parquet(task: FileTask, handle: BinaryIO, key: StandardKeyMetadata, magic: bytes, trusted: int | None) -> FileFinding:
    if magic != PARQUET_ENCRYPTED_MAGIC:
        return finding_for(task, TAMPERED, f"bad magic {quote_bytes(magic)}, expected {PARQUET_ENCRYPTED_MAGIC!r}",
                           location="header")
    keys = ParquetKeys(footer_key=key.encryption_key, aad_prefix=key.aad_prefix)
    try:
        report = verify_parquet(handle, keys, name=task.path, expected_size=trusted)
    except IntegrityError as err:
        return finding_for(task, status_of(err, trusted is not None), err.reason, location=err.location)
    except FormatError as exc:
        return finding_for(task, UNVERIFIABLE, str(exc))
    modules = sum(report.authenticated.values())
    if report.failures:
        err = report.failures[0]
        more = f" (+{len(report.failures) - 1} more)" if len(report.failures) > 1 else ""
        return finding_for(task, status_of(err, trusted is not None), err.reason + more, location=err.location,
                           authenticated=modules)
    if report.not_verifiable:
        return finding_for(task, UNVERIFIABLE, "not verifiable: " + "; ".join(report.not_verifiable),
                           authenticated=modules)
    if report.unauthenticated:
        return finding_for(task, UNVERIFIABLE, f"pages without authentication tags (AES_GCM_CTR_V1): "
                                               f"{report.unauthenticated}", authenticated=modules)
    if task.record_count is not None and report.num_rows is not None and report.num_rows != task.record_count:
        return finding_for(task, TAMPERED, f"authenticated, but it holds {report.num_rows} rows and the "
                                           f"entry says {task.record_count}", authenticated=modules)
    detail = f"Parquet modular encryption, {modules} module(s) authenticated"
    if report.v2_pages_with_plaintext_levels:
        detail += (f"; {report.v2_pages_with_plaintext_levels} v2 page(s) keep their repetition/definition "
                   "levels in plaintext (parquet-java layout)")
    return finding_for(task, OK, detail, authenticated=modules)
