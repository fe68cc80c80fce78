"""Decrypt an encrypted Parquet file into an ordinary plaintext ``PAR1`` file.

Every module is authenticated on the way (GCM), then written in plaintext with every offset, size
and page CRC rewritten and the crypto metadata dropped; the footer is re-encoded, keeping every
field not touched (Parquet Modular Encryption, ``parquet-format``'s ``Encryption.md``)::

    with open(src, "rb") as f, open(dst, "wb") as out:
        result = decrypt_parquet(f, out, ParquetKeys(footer_key=dek, aad_prefix=prefix), name=src)

All keys must be available; a missing key raises :class:`KeyRequiredError` before anything
unauthenticated is written (the output is only valid once the function returns). ``leaf_columns``
copies only some column chunks and ``row_groups`` only some row groups (each a list, or a function
of the authenticated footer); the others keep their metadata but no pages, and their modules are
neither read nor decrypted.

What is rewritten, the output layout, and how projection keeps row positions:
docs/explanation/formats.md#parquet-decrypt.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from collections.abc import Callable, Collection
from typing import BinaryIO, Union

from pyiceberg_crypto.formats.parquet.errors import KeyRequiredError, MalformedStructureError, module_error
from pyiceberg_crypto.formats.parquet.aad import ModuleType
from pyiceberg_crypto.formats.parquet.reader import (
    MAGIC_PLAIN,
    ColumnChunkInfo,
    ParquetFileReader,
    ParquetKeys,
    has_dictionary_page,
)
from pyiceberg_crypto.formats.parquet.structs import (
    ColumnChunkF,
    ColumnMetaDataF,
    FileMetaDataF,
    OffsetIndexF,
    PageHeaderF,
    PageLocationF,
    PageType,
    RowGroupF,
)
from pyiceberg_crypto.formats.parquet.thrift import TList, TStruct, TType, encode_struct

__all__ = ["DecryptResult", "decrypt_parquet"]

try:  # the same CRC-32 (IEEE 802.3, as zlib), ~20x faster than zlib 1.2's: extra [speed]
    from zlib_ng.zlib_ng import crc32
except ImportError:  # pragma: no cover - exercised where zlib-ng is not installed
    from zlib import crc32


#: Which leaf columns to copy: ordinals, or a function of the footer's SchemaElement list.
LeafColumns = Union[Collection[int], Callable[[list[TStruct]], Collection[int]]]
#: Which row groups to copy: indexes, or a function of the footer as a page-less PAR1 file.
RowGroups = Union[Collection[int], Callable[[bytes], Collection[int]]]


@dataclass
class DecryptResult:
    """What :func:`decrypt_parquet` did."""

    file: str | None
    output_size: int
    was_encrypted: bool
    algorithm: str | None
    authenticated: dict[str, int] = field(default_factory=dict)
    unauthenticated: dict[str, int] = field(default_factory=dict)  # CTR pages
    row_groups: int = 0
    column_chunks: int = 0
    skipped_chunks: int = 0  # not selected by ``leaf_columns`` or ``row_groups``: not read
    skipped_row_groups: int = 0  # not selected by ``row_groups``: not read
    selected_row_groups: list[int] | None = None  # the row groups copied, when ``row_groups`` was given
    num_rows: int | None = None  # what the authenticated footer says


@dataclass
class _PendingChunk:
    """A rewritten chunk whose indexes and bloom filter are written after all row groups."""

    info: ColumnChunkInfo
    chunk: TStruct  # the output ColumnChunk
    meta: TStruct  # the output ColumnMetaData
    page_locations: list[tuple[int, int]]  # new (offset, header+page size) of each data page


class _Out:
    """An output stream that knows its position (works on non-seekable sinks too)."""

    def __init__(self, sink: BinaryIO):
        self.sink, self.pos = sink, 0

    def write(self, data: bytes) -> int:
        start = self.pos
        self.sink.write(data)
        self.pos += len(data)
        return start


def decrypt_parquet(
    fileobj: BinaryIO,
    out: BinaryIO,
    keys: ParquetKeys | None = None,
    name: str | None = None,
    expected_size: int | None = None,
    leaf_columns: LeafColumns | None = None,
    row_groups: RowGroups | None = None,
) -> DecryptResult:
    """Write the plaintext Parquet version of ``fileobj`` to ``out``; see the module docstring."""
    reader = ParquetFileReader(fileobj, keys, name, expected_size)
    footer = reader.footer
    if footer.encrypted and not footer.encrypted_footer and footer.signature_verified is None:
        raise KeyRequiredError(f"{reader.name or 'file'}: the footer key is needed to check the footer signature")
    metadata = _output_footer(footer.metadata)
    metadata.remove(FileMetaDataF.ENCRYPTION_ALGORITHM)
    metadata.remove(FileMetaDataF.FOOTER_SIGNING_KEY_METADATA)
    groups = metadata.get(FileMetaDataF.ROW_GROUPS)
    selected = _selected(leaf_columns, metadata)
    kept_groups = _kept_row_groups(row_groups, reader, metadata)
    skipped = skipped_groups = 0
    sink = _Out(out)
    sink.write(MAGIC_PLAIN)
    pending: list[_PendingChunk] = []
    for rg_index, rg in enumerate(groups.items if groups else []):
        columns = rg.get(RowGroupF.COLUMNS)
        if kept_groups is not None and rg_index not in kept_groups:
            _without_pages_row_group(reader, rg_index, rg)
            skipped += len(columns.items) if columns else 0
            skipped_groups += 1
            continue
        rg_start, compressed, uncompressed = sink.pos, 0, 0
        for col in range(len(columns.items) if columns else 0):
            info = reader.column_chunk(rg_index, col)
            if selected is not None and col not in selected:
                columns.items[col] = _without_pages(info)
                skipped += 1
                continue
            if not info.verifiable:
                raise KeyRequiredError(f"{reader.name or 'file'}: no key for column '{info.path}'")
            done = _copy_chunk(reader, info, sink)
            columns.items[col] = done.chunk
            pending.append(done)
            compressed += done.meta.get(ColumnMetaDataF.TOTAL_COMPRESSED_SIZE)
            uncompressed += done.meta.get(ColumnMetaDataF.TOTAL_UNCOMPRESSED_SIZE)
        if rg.has(RowGroupF.FILE_OFFSET):
            rg.set(RowGroupF.FILE_OFFSET, TType.I64, rg_start)
        if rg.has(RowGroupF.TOTAL_COMPRESSED_SIZE):
            rg.set(RowGroupF.TOTAL_COMPRESSED_SIZE, TType.I64, compressed)
    for item in pending:
        _write_column_index(reader, item, sink)
    for item in pending:
        _write_offset_index(reader, item, sink)
    for item in pending:
        _write_bloom_filter(reader, item, sink)
    serialized = encode_struct(metadata)
    sink.write(serialized)
    sink.write(struct.pack("<I", len(serialized)) + MAGIC_PLAIN)
    return DecryptResult(
        file=reader.name,
        output_size=sink.pos,
        was_encrypted=footer.encrypted,
        algorithm=footer.algorithm.name if footer.algorithm else None,
        authenticated={t.label: n for t, n in sorted(reader.authenticated.items())},
        unauthenticated={t.label: n for t, n in sorted(reader.unauthenticated.items())},
        row_groups=len(groups.items) if groups else 0,
        column_chunks=len(pending),
        skipped_chunks=skipped,
        skipped_row_groups=skipped_groups,
        selected_row_groups=None if kept_groups is None else sorted(i for i in kept_groups
                                                                      if 0 <= i < len(groups.items if groups else [])),
        num_rows=metadata.get(FileMetaDataF.NUM_ROWS),
    )


def _selected(leaf_columns: LeafColumns | None, metadata: TStruct) -> set[int] | None:
    if leaf_columns is None:
        return None
    if callable(leaf_columns):
        schema = metadata.get(FileMetaDataF.SCHEMA)
        leaf_columns = leaf_columns(list(schema.items) if schema else [])
    return set(leaf_columns)


def _kept_row_groups(row_groups: RowGroups | None, reader: ParquetFileReader, metadata: TStruct) -> set[int] | None:
    if row_groups is None:
        return None
    if callable(row_groups):
        groups = metadata.get(FileMetaDataF.ROW_GROUPS)
        if groups is None or len(groups.items) <= 1:
            return None  # nothing to choose between: the file as a whole was already chosen
        row_groups = row_groups(page_less_file(reader, metadata))
    return set(row_groups)


def page_less_file(reader: ParquetFileReader, metadata: TStruct) -> bytes:
    """The authenticated footer as a plaintext Parquet file without pages (every chunk as
    :func:`_without_pages` leaves it): enough for a Parquet library to read the schema, row counts
    and statistics."""
    footer = _output_footer(metadata)
    groups = footer.get(FileMetaDataF.ROW_GROUPS)
    for rg_index, rg in enumerate(groups.items if groups else []):
        _without_pages_row_group(reader, rg_index, rg)
    serialized = encode_struct(footer)
    return MAGIC_PLAIN + serialized + struct.pack("<I", len(serialized)) + MAGIC_PLAIN


def _output_footer(metadata: TStruct) -> TStruct:
    """A copy of the footer to rewrite: the FileMetaData, its row groups and their column lists are
    new objects; everything below them is shared, because column chunks are replaced (by
    :func:`_copy_chunk` / :func:`_without_pages`, from shallow copies), never changed in place.
    (A deep copy of a footer of many row groups cost more than decrypting their pages.)"""
    out = metadata.shallow_copy()
    groups = out.get(FileMetaDataF.ROW_GROUPS)
    if groups is not None:
        copied = []
        for rg in groups.items:
            rg = rg.shallow_copy()
            columns = rg.get(RowGroupF.COLUMNS)
            if columns is not None:
                rg.set(RowGroupF.COLUMNS, TType.LIST, TList(columns.elem_type, list(columns.items), columns.is_set))
            copied.append(rg)
        out.set(FileMetaDataF.ROW_GROUPS, TType.LIST, TList(groups.elem_type, copied, groups.is_set))
    return out


def _without_pages_row_group(reader: ParquetFileReader, rg_index: int, rg: TStruct) -> None:
    """A row group not copied: every chunk without pages, the group at offset 4 with size 0."""
    columns = rg.get(RowGroupF.COLUMNS)
    for col in range(len(columns.items) if columns else 0):
        columns.items[col] = _without_pages(reader.column_chunk(rg_index, col))
    if rg.has(RowGroupF.FILE_OFFSET):
        rg.set(RowGroupF.FILE_OFFSET, TType.I64, len(MAGIC_PLAIN))
    if rg.has(RowGroupF.TOTAL_COMPRESSED_SIZE):
        rg.set(RowGroupF.TOTAL_COMPRESSED_SIZE, TType.I64, 0)


def _without_pages(info: ColumnChunkInfo) -> TStruct:
    """A column chunk not copied: its ColumnMetaData (types, counts, statistics) with no pages."""
    if info.meta is None:
        raise KeyRequiredError(f"no ColumnMetaData for column '{info.path}'")
    meta = info.meta.shallow_copy()
    for f in (ColumnMetaDataF.DICTIONARY_PAGE_OFFSET, ColumnMetaDataF.INDEX_PAGE_OFFSET,
              ColumnMetaDataF.BLOOM_FILTER_OFFSET, ColumnMetaDataF.BLOOM_FILTER_LENGTH):
        meta.remove(f)
    meta.set(ColumnMetaDataF.DATA_PAGE_OFFSET, TType.I64, len(MAGIC_PLAIN))
    meta.set(ColumnMetaDataF.TOTAL_COMPRESSED_SIZE, TType.I64, 0)
    meta.set(ColumnMetaDataF.TOTAL_UNCOMPRESSED_SIZE, TType.I64, 0)
    chunk = info.chunk.shallow_copy()
    for f in (ColumnChunkF.CRYPTO_METADATA, ColumnChunkF.ENCRYPTED_COLUMN_METADATA, ColumnChunkF.OFFSET_INDEX_OFFSET,
              ColumnChunkF.OFFSET_INDEX_LENGTH, ColumnChunkF.COLUMN_INDEX_OFFSET, ColumnChunkF.COLUMN_INDEX_LENGTH):
        chunk.remove(f)
    chunk.set(ColumnChunkF.META_DATA, TType.STRUCT, meta)
    chunk.set(ColumnChunkF.FILE_OFFSET, TType.I64, len(MAGIC_PLAIN))
    return chunk


def _signed32(value: int) -> int:
    return value - (1 << 32) if value >= 1 << 31 else value


def _copy_chunk(reader: ParquetFileReader, info: ColumnChunkInfo, sink: _Out) -> _PendingChunk:
    meta = info.meta.shallow_copy()  # type: ignore[union-attr]
    chunk = info.chunk.shallow_copy()
    start = sink.pos
    uncompressed = 0
    locations: list[tuple[int, int]] = []
    first_data: int | None = None
    for page in reader.pages(info, reuse_buffers=True):  # page.data is written before the next page
        # A new top level only: the nested structs are written unchanged (the page's header is
        # decoded afresh for every page, nothing else holds it).
        header = TStruct(dict(page.header.fields))
        header.set(PageHeaderF.COMPRESSED_PAGE_SIZE, TType.I32, len(page.data))
        if header.has(PageHeaderF.CRC):  # CRC-32 of the page bytes as stored (now plaintext)
            header.set(PageHeaderF.CRC, TType.I32, _signed32(crc32(page.data)))
        encoded = encode_struct(header)
        offset = sink.write(encoded)
        sink.write(page.data)
        uncompressed += len(encoded) + header.get(PageHeaderF.UNCOMPRESSED_PAGE_SIZE, 0)
        if page.page_type == PageType.DICTIONARY_PAGE:
            meta.set(ColumnMetaDataF.DICTIONARY_PAGE_OFFSET, TType.I64, offset)
        else:
            if first_data is None:
                first_data = offset
            locations.append((offset, len(encoded) + len(page.data)))
    if first_data is None:  # only valid for an empty chunk (Arrow writes 0-row row groups so)
        if meta.get(ColumnMetaDataF.NUM_VALUES) != 0:
            raise module_error(MalformedStructureError, "column chunk has no data page", reader.name, info.ref(ModuleType.DATA_PAGE, 0))
        first_data = sink.pos  # past the dictionary page, if any: readers start the chunk there
    if not has_dictionary_page(info.meta):  # type: ignore[arg-type]
        meta.remove(ColumnMetaDataF.DICTIONARY_PAGE_OFFSET)
    meta.set(ColumnMetaDataF.DATA_PAGE_OFFSET, TType.I64, first_data)
    meta.set(ColumnMetaDataF.TOTAL_COMPRESSED_SIZE, TType.I64, sink.pos - start)
    meta.set(ColumnMetaDataF.TOTAL_UNCOMPRESSED_SIZE, TType.I64, uncompressed)
    chunk.remove(ColumnChunkF.CRYPTO_METADATA)
    chunk.remove(ColumnChunkF.ENCRYPTED_COLUMN_METADATA)
    chunk.set(ColumnChunkF.META_DATA, TType.STRUCT, meta)
    chunk.set(ColumnChunkF.FILE_OFFSET, TType.I64, start)
    return _PendingChunk(info, chunk, meta, locations)


def _write_column_index(reader: ParquetFileReader, item: _PendingChunk, sink: _Out) -> None:
    data = reader.column_index(item.info)
    if data is None:
        return
    item.chunk.set(ColumnChunkF.COLUMN_INDEX_OFFSET, TType.I64, sink.write(data))
    item.chunk.set(ColumnChunkF.COLUMN_INDEX_LENGTH, TType.I32, len(data))


def _write_offset_index(reader: ParquetFileReader, item: _PendingChunk, sink: _Out) -> None:
    index = reader.offset_index(item.info)
    if index is None:
        return
    locations = index.get(OffsetIndexF.PAGE_LOCATIONS)
    if locations is None or len(locations.items) != len(item.page_locations):
        raise module_error(
            MalformedStructureError,
            f"offset index lists {len(locations.items) if locations else 0} pages, the chunk has {len(item.page_locations)}",
            reader.name,
            item.info.ref(ModuleType.OFFSET_INDEX),
        )
    for location, (offset, size) in zip(locations.items, item.page_locations):
        location.set(PageLocationF.OFFSET, TType.I64, offset)
        location.set(PageLocationF.COMPRESSED_PAGE_SIZE, TType.I32, size)
    data = encode_struct(index)
    item.chunk.set(ColumnChunkF.OFFSET_INDEX_OFFSET, TType.I64, sink.write(data))
    item.chunk.set(ColumnChunkF.OFFSET_INDEX_LENGTH, TType.I32, len(data))


def _write_bloom_filter(reader: ParquetFileReader, item: _PendingChunk, sink: _Out) -> None:
    found = reader.bloom_filter(item.info)
    if found is None:
        return
    header, bitset = found
    offset = sink.write(encode_struct(header))
    sink.write(bitset)
    item.meta.set(ColumnMetaDataF.BLOOM_FILTER_OFFSET, TType.I64, offset)
    item.meta.set(ColumnMetaDataF.BLOOM_FILTER_LENGTH, TType.I32, sink.pos - offset)
