"""Authenticate every module of a Parquet file and report what was checked, as data.

Usage::

    with open(path, "rb") as f:
        report = verify_parquet(f, ParquetKeys(footer_key=dek, aad_prefix=prefix), name=path)
    report.ok                  # True when nothing failed and nothing was left unverified
    report.authenticated       # {"data page": 12, "data page header": 12, "footer": 1, ...}
    report.not_verifiable      # ["column 'ssn' (no column key)"]
    report.failures            # [IntegrityError, ...] each with .file, .location, .module

A failure inside a column chunk stops the walk of that chunk (later pages cannot be located
reliably) but the other chunks are still checked. A footer failure raises at once: without an
authentic footer nothing else can be located. Missing keys never count as success: the
column is listed in ``not_verifiable`` and ``ok`` is False.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from pyiceberg_crypto.formats.errors import IntegrityError
from pyiceberg_crypto.formats.parquet.structs import FileMetaDataF
from pyiceberg_crypto.formats.parquet.thrift import TList
from pyiceberg_crypto.formats.parquet.reader import ColumnChunkInfo, ParquetFileReader, ParquetKeys

__all__ = ["ColumnReport", "VerificationReport", "verify_parquet"]


@dataclass
class ColumnReport:
    """One column chunk: how it is protected and whether we could check it."""

    row_group: int
    column: int
    path: str
    encryption: str  # "plaintext" | "footer key" | "column key"
    verified: bool
    key_metadata: bool = False  # a key_metadata blob is stored for the column key


@dataclass
class VerificationReport:
    """The result of :func:`verify_parquet`; printing belongs to the CLI."""

    file: str | None
    file_size: int
    encrypted: bool
    encrypted_footer: bool
    algorithm: str | None
    aad_prefix_stored: bool
    supply_aad_prefix: bool
    footer_verified: bool | None  # None: plaintext footer whose signature could not be checked
    num_rows: int | None = None
    row_groups: int = 0
    authenticated: dict[str, int] = field(default_factory=dict)
    unauthenticated: dict[str, int] = field(default_factory=dict)  # CTR pages: no tag by design
    plaintext_pages: int = 0
    # DATA_PAGE_V2 pages whose repetition/definition levels are stored in plaintext, outside the
    # GCM module (parquet-java's layout): the values are authenticated, the level bytes are not.
    v2_pages_with_plaintext_levels: int = 0
    v2_plaintext_level_bytes: int = 0
    columns: list[ColumnReport] = field(default_factory=list)
    not_verifiable: list[str] = field(default_factory=list)
    failures: list[IntegrityError] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every encrypted module was authenticated (or the file is not encrypted at all)."""
        return not self.failures and not self.not_verifiable and self.footer_verified is not False

    def raise_first(self) -> None:
        """Raise the first failure, if any."""
        if self.failures:
            raise self.failures[0]


def verify_parquet(fileobj: BinaryIO, keys: ParquetKeys | None = None, name: str | None = None, expected_size: int | None = None
) -> VerificationReport:
    """Walk and authenticate every module; raises only for footer-level failures and usage errors."""
    reader = ParquetFileReader(fileobj, keys, name, expected_size)
    footer = reader.footer
    algo = footer.algorithm
    report = VerificationReport(
        file=reader.name,
        file_size=footer.file_size,
        encrypted=footer.encrypted,
        encrypted_footer=footer.encrypted_footer,
        algorithm=algo.name if algo else None,
        aad_prefix_stored=bool(algo and algo.aad_prefix is not None),
        supply_aad_prefix=bool(algo and algo.supply_aad_prefix),
        footer_verified=True if footer.encrypted_footer or footer.signature_verified else None,
        num_rows=footer.metadata.get(FileMetaDataF.NUM_ROWS),
    )
    if not footer.encrypted:
        report.footer_verified = None
    elif not footer.encrypted_footer and footer.signature_verified is None:
        report.not_verifiable.append("footer signature (no footer key)")
    for info in _chunks(reader, report):
        report.columns.append(_column_report(info))
        if not info.verifiable:
            reason = "no footer key" if info.crypto and info.crypto.with_footer_key else "no column key"
            if info.path in reader.keys.column_keys or (reason == "no footer key" and reader.keys.footer_key):
                reason = "AAD prefix not given"
            entry = f"column '{info.path}' ({reason})"
            if entry not in report.not_verifiable:
                report.not_verifiable.append(entry)
            continue
        try:
            _check_chunk(reader, info, report)
        except IntegrityError as err:
            report.failures.append(err)
    report.row_groups = len(footer.metadata.get(FileMetaDataF.ROW_GROUPS, TList(0)).items)
    report.authenticated = {t.label: n for t, n in sorted(reader.authenticated.items())}
    report.unauthenticated = {t.label: n for t, n in sorted(reader.unauthenticated.items())}
    return report


def _chunks(reader: ParquetFileReader, report: VerificationReport) -> Iterator[ColumnChunkInfo]:
    """Column chunks; a failing ColumnMetaData module is recorded and that chunk skipped."""
    for rg_index, col in reader.chunk_positions():
        try:
            yield reader.column_chunk(rg_index, col)
        except IntegrityError as err:
            report.failures.append(err)


def _column_report(info: ColumnChunkInfo) -> ColumnReport:
    if info.crypto is None:
        kind = "plaintext"
    elif info.crypto.with_footer_key:
        kind = "footer key"
    else:
        kind = "column key"
    return ColumnReport(
        info.row_group,
        info.column,
        info.path,
        kind,
        info.verifiable,
        bool(info.crypto and info.crypto.key_metadata),
    )


def _check_chunk(reader: ParquetFileReader, info: ColumnChunkInfo, report: VerificationReport) -> None:
    encrypted = info.encrypted
    for page in reader.pages(info, reuse_buffers=True):  # authenticate, keep nothing
        if not encrypted:
            report.plaintext_pages += 1
        elif page.plaintext_levels:
            report.v2_pages_with_plaintext_levels += 1
            report.v2_plaintext_level_bytes += page.plaintext_levels
    reader.column_index(info)
    reader.offset_index(info)
    reader.bloom_filter(info)
