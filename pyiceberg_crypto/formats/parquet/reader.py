"""Read an (encrypted) Parquet file module by module, from any seekable binary file object.

Both layouts of the spec are handled:

* encrypted footer (5.4): ``PARE ... FileCryptoMetaData | footer module | length | PARE``
* plaintext footer (5.5): ``PAR1 ... FileMetaData | nonce+tag (28) | length | PAR1``
  (and ordinary unencrypted ``PAR1`` files, reported as not encrypted).

Usage::

    keys = ParquetKeys(footer_key=dek, aad_prefix=prefix, column_keys={"a.b": key})
    with open(path, "rb") as f:
        pf = ParquetFileReader(f, keys, name=path)
        for chunk in pf.column_chunks():
            for page in pf.pages(chunk):
                ...
    pf.authenticated   # Counter of ModuleType -> modules authenticated so far

Every read authenticates what it decrypts; failures raise :class:`IntegrityError` subclasses whose
``module`` attribute (:class:`ModuleRef`) says row group, column, page ordinal and module type.
Policy (what counts as verified, what to report) lives in :mod:`.verify`, not here.
"""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import BinaryIO

from cryptography.exceptions import InvalidTag

from pyiceberg_crypto.errors import ExtraDataError, FormatError, IntegrityError, MalformedError, TruncatedError
from pyiceberg_crypto.formats.errors import BadMagicError, TagMismatchError
from pyiceberg_crypto.formats.parquet.aad import MAX_ORDINAL, ModuleType, module_aad
from pyiceberg_crypto.formats.parquet.errors import AadPrefixMismatchError, ModuleRef, module_error
from pyiceberg_crypto.formats.parquet.modules import (
    GCM_OVERHEAD,
    HAS_DECRYPT_INTO,
    LENGTH_PREFIX,
    NONCE_LENGTH,
    SIGNATURE_LENGTH,
    ModuleCipher,
    module_length,
)
from pyiceberg_crypto.formats.parquet.structs import (
    BLOOM_FILTER_HEADER_SPEC,
    COLUMN_METADATA_SPEC,
    FILE_CRYPTO_METADATA_SPEC,
    FILE_METADATA_SPEC,
    OFFSET_INDEX_SPEC,
    PAGE_HEADER_SPEC,
    BloomFilterHeaderF,
    ColumnChunkF,
    ColumnCrypto,
    ColumnMetaDataF,
    DataPageHeaderV2F,
    EncryptionAlgorithm,
    FileCryptoMetaDataF,
    FileMetaDataF,
    PageHeaderF,
    PageType,
    RowGroupF,
    path_of,
)
from pyiceberg_crypto.formats.parquet.thrift import StructSpec, TStruct, decode_struct

__all__ = ["ColumnChunkInfo", "Footer", "Page", "ParquetFileReader", "ParquetKeys"]

MAGIC_PLAIN = b"PAR1"
MAGIC_ENCRYPTED = b"PARE"
_FOOTER = ModuleRef(ModuleType.FOOTER)
_AUTH_FAILED = "authentication failed (tampered or moved module, wrong key, or wrong AAD prefix)"
_PAGE_TYPES = {int(t): t for t in PageType}  # a dict lookup is cheaper than PageType(x), per page
READ_WINDOW = 2 << 20  # reuse_buffers mode: one read serves the page modules of 2 MiB of the file
_LENGTH = struct.Struct("<I")  # spec 5.1: a module's 4-byte little-endian length


@dataclass(frozen=True, repr=False)
class ParquetKeys:
    """Keys a reader was given. ``column_keys`` maps dotted column paths (``"a.b.c"``) to keys."""

    footer_key: bytes | None = None
    column_keys: Mapping[str, bytes] = field(default_factory=dict)
    aad_prefix: bytes | None = None

    def __repr__(self) -> str:  # key bytes never appear, only which keys exist
        footer = f"AES-{len(self.footer_key) * 8}" if self.footer_key else None
        return (
            f"ParquetKeys(footer_key={footer}, column_keys={sorted(self.column_keys)}, "
            f"aad_prefix={'set' if self.aad_prefix is not None else None})"
        )


@dataclass
class Footer:
    """What the file's tail says: layout, algorithm, and the (decrypted) FileMetaData."""

    file_size: int
    magic: bytes
    encrypted_footer: bool
    algorithm: EncryptionAlgorithm | None  # None: an unencrypted Parquet file
    footer_key_metadata: bytes | None
    metadata: TStruct
    file_aad: bytes | None  # None when not encrypted, or the AAD prefix is unavailable
    signature_verified: bool | None = None  # plaintext-footer mode: None = not checked (no key)

    @property
    def encrypted(self) -> bool:
        return self.algorithm is not None


@dataclass
class ColumnChunkInfo:
    """One column chunk, with the key that opens it (if we have it) and its ColumnMetaData."""

    row_group: int  # index of the row group in the footer
    row_group_ordinal: int  # the ordinal used in AADs (RowGroup.ordinal, else the index)
    column: int  # column ordinal inside the row group (used in AADs)
    path: str  # dotted path in schema
    chunk: TStruct  # the ColumnChunk as stored in the footer
    meta: TStruct | None  # full ColumnMetaData (decrypted when needed); None if unreadable
    crypto: ColumnCrypto | None  # None: plaintext column
    cipher: ModuleCipher | None = None

    @property
    def encrypted(self) -> bool:
        return self.crypto is not None

    @property
    def verifiable(self) -> bool:
        """Plaintext columns and encrypted columns whose key we have."""
        return not self.encrypted or self.cipher is not None

    def ref(self, module_type: ModuleType, page: int | None = None) -> ModuleRef:
        return ModuleRef(module_type, self.row_group, self.column, self.path, page)


@dataclass
class Page:
    """One page, decrypted: its header struct and its (still compressed) page bytes."""

    page_type: PageType
    ordinal: int | None  # data page ordinal; None for the dictionary page
    header: TStruct
    # For DATA_PAGE_V2: levels + values, as an unencrypted file would hold them. With
    # ``pages(..., reuse_buffers=True)`` a memoryview that the next page overwrites.
    data: bytes | memoryview
    offset: int  # where the page header starts in the file
    plaintext_levels: int = 0  # v2 level bytes stored unencrypted (parquet-java's layout)


class ParquetFileReader:
    """Module-level access to one Parquet file; see the module docstring."""

    def __init__(
        self,
        fileobj: BinaryIO,
        keys: ParquetKeys | None = None,
        name: str | None = None,
        expected_size: int | None = None,
    ):
        """``expected_size``: the trusted file size (e.g. Iceberg's key metadata ``file_length``)."""
        self._f = fileobj
        self.expected_size = expected_size
        self.keys = keys or ParquetKeys()
        self.name = name or getattr(fileobj, "name", None)
        self.authenticated: Counter[ModuleType] = Counter()  # GCM modules whose tag matched
        self.unauthenticated: Counter[ModuleType] = Counter()  # CTR pages: decrypted, no tag
        self._ciphers: dict[bytes, ModuleCipher] = {}
        self._aad_bases: dict[tuple[ModuleType, int, int], bytes] = {}
        self._scratch_in = bytearray()  # read-ahead window of page modules (reuse_buffers mode)
        self._window_start = self._window_length = 0
        self._scratch_out = bytearray()  # decrypted page bytes (reuse_buffers mode)
        self.footer = self._read_footer()
        self._ctr_pages = bool(self.footer.algorithm and self.footer.algorithm.name == "AES_GCM_CTR_V1")

    # -- small helpers -------------------------------------------------------------------------

    def _fail(self, cls: type[IntegrityError], reason: str, ref: ModuleRef) -> IntegrityError:
        return module_error(cls, reason, self.name, ref)

    def _read(self, offset: int, length: int, ref: ModuleRef) -> bytes:
        if offset < 0 or length < 0 or offset + length > self.file_size:
            raise self._fail(
                TruncatedError, f"{length} bytes at offset {offset} lie outside the file", ref
            )
        self._f.seek(offset)
        data = self._f.read(length)
        if len(data) != length:
            raise self._fail(TruncatedError, f"short read at offset {offset}", ref)
        return data

    def _read_view(self, offset: int, length: int, ref: ModuleRef) -> memoryview:
        """Like :meth:`_read`, as a view into a read-ahead window of at least ``READ_WINDOW``
        bytes (one read serves many page modules); valid until a read outside the window."""
        start = self._window_start
        if offset < start or offset + length > start + self._window_length:
            if offset < 0 or length < 0 or offset + length > self.file_size:
                raise self._fail(
                    TruncatedError, f"{length} bytes at offset {offset} lie outside the file", ref
                )
            size = min(max(length, READ_WINDOW), self.file_size - offset)
            # The part of the window at and after ``offset`` (a module that crosses the window's
            # end) moves to the front instead of being read again.
            kept = start + self._window_length - offset if start <= offset < start + self._window_length else 0
            previous = memoryview(self._scratch_in)
            if len(self._scratch_in) < size:
                self._scratch_in = bytearray(size)  # a new object: earlier views stay valid
            window = memoryview(self._scratch_in)[:size]
            if kept:
                window[:kept] = previous[offset - start : offset - start + kept]  # memmove
            self._f.seek(offset + kept)
            readinto = getattr(self._f, "readinto", None) or self._readinto_by_read
            got = kept
            while got < size:
                n = readinto(window[got:])
                if not n:
                    self._window_length = 0
                    raise self._fail(TruncatedError, f"short read at offset {offset + got}", ref)
                got += n
            self._window_start = start = offset
            self._window_length = size
        relative = offset - start
        return memoryview(self._scratch_in)[relative : relative + length]

    def _readinto_by_read(self, view: memoryview) -> int:
        """``readinto`` for file objects that only have ``read`` (some object-store streams)."""
        data = self._f.read(len(view))
        view[: len(data)] = data
        return len(data)

    def _out_view(self, length: int) -> memoryview:
        """The reused output buffer, ``length`` bytes long (valid until the next page)."""
        if len(self._scratch_out) < length:
            self._scratch_out = bytearray(length)
        return memoryview(self._scratch_out)[:length]

    def _cipher(self, key: bytes) -> ModuleCipher:
        cipher = self._ciphers.get(key)
        if cipher is None:
            cipher = self._ciphers[key] = ModuleCipher(key)
        return cipher

    def _decode(
        self, data: bytes, what: str, ref: ModuleRef, *, exact: bool = False, spec: StructSpec | None = None
    ) -> TStruct:
        try:
            value, end = decode_struct(data, 0, spec)
        except FormatError as exc:
            raise self._fail(MalformedError, f"{what} does not parse: {exc}", ref) from None
        if exact and end != len(data):
            raise self._fail(MalformedError, f"{len(data) - end} stray bytes after {what}", ref)
        return value

    def _open_gcm(self, cipher: ModuleCipher, body: bytes, aad: bytes, ref: ModuleRef) -> bytes:
        try:
            plain = cipher.decrypt_gcm(body, aad)
        except (InvalidTag, ValueError):
            raise self._fail(TagMismatchError, _AUTH_FAILED, ref) from None
        self.authenticated[ref.module_type] += 1
        return plain

    def _open_gcm_into(self, cipher: ModuleCipher, body, aad: bytes, ref: ModuleRef, out: memoryview) -> None:
        try:
            cipher.decrypt_gcm_into(body, aad, out)
        except (InvalidTag, ValueError):
            raise self._fail(TagMismatchError, _AUTH_FAILED, ref) from None
        self.authenticated[ref.module_type] += 1

    def _module_at(self, offset: int, ref: ModuleRef, limit: int | None = None, *, reuse: bool = False
                   ) -> bytes | memoryview:
        """The body of the length-prefixed module at ``offset`` (spec 5.1); with ``reuse`` a view
        into the read-ahead window (see :meth:`_read_view`)."""
        read = self._read_view if reuse else self._read
        length = module_length(read(offset, LENGTH_PREFIX, ref))
        if limit is not None and LENGTH_PREFIX + length > limit:
            raise self._fail(
                MalformedError, f"module length {length} exceeds its {limit}-byte slot", ref
            )
        return read(offset + LENGTH_PREFIX, length, ref)

    # -- footer --------------------------------------------------------------------------------

    def _read_footer(self) -> Footer:
        f = self._f
        f.seek(0, 2)
        size = self.file_size = f.tell()
        if self.expected_size is not None and size != self.expected_size:
            cls = TruncatedError if size < self.expected_size else ExtraDataError
            raise self._fail(cls, f"file has {size} bytes, the trusted length is {self.expected_size}", _FOOTER)
        if size < 12:
            raise self._fail(TruncatedError, f"{size} bytes is too short for a Parquet file", _FOOTER)
        head = self._read(0, 4, _FOOTER)
        tail = self._read(size - 8, 8, _FOOTER)
        footer_len, magic = struct.unpack("<I", tail[:4])[0], tail[4:]
        if head not in (MAGIC_PLAIN, MAGIC_ENCRYPTED) or magic != head:
            raise self._fail(BadMagicError, f"magic {head!r} at start and {magic!r} at end", _FOOTER)
        if footer_len > size - 12:
            raise self._fail(TruncatedError, f"footer length {footer_len} exceeds the file", _FOOTER)
        block = self._read(size - 8 - footer_len, footer_len, _FOOTER)
        if magic == MAGIC_ENCRYPTED:
            return self._encrypted_footer(size, block)
        return self._plaintext_footer(size, block)

    def _file_aad(self, algorithm: EncryptionAlgorithm) -> bytes:
        """aad_prefix || aad_file_unique, with the prefix rules of spec 4.4.1 / 5.2."""
        stored, supplied = algorithm.aad_prefix, self.keys.aad_prefix
        if supplied is not None:
            if stored is not None and stored != supplied:
                raise self._fail(
                    AadPrefixMismatchError, "the AAD prefix stored in the file differs from the one given", _FOOTER
                )
            if stored is None and not algorithm.supply_aad_prefix:
                raise self._fail(
                    AadPrefixMismatchError, "an AAD prefix was given, but the file was written without one", _FOOTER
                )
            prefix = supplied
        elif stored is not None:
            prefix = stored
        elif algorithm.supply_aad_prefix:
            raise FormatError(
                f"{self.name or 'file'}: the file was written with an AAD prefix that is not stored in "
                "it (supply_aad_prefix); give it with --aad-prefix or --key-metadata"
            )
        else:
            prefix = b""
        return prefix + algorithm.aad_file_unique

    def _algorithm(self, union: TStruct | None) -> EncryptionAlgorithm:
        try:
            return EncryptionAlgorithm.from_thrift(union)  # type: ignore[arg-type]
        except (ValueError, AttributeError) as exc:
            raise self._fail(MalformedError, f"bad encryption algorithm: {exc}", _FOOTER) from None

    def _encrypted_footer(self, size: int, block: bytes) -> Footer:
        try:
            crypto, end = decode_struct(block, 0, FILE_CRYPTO_METADATA_SPEC)
        except FormatError as exc:
            raise self._fail(MalformedError, f"FileCryptoMetaData does not parse: {exc}", _FOOTER) from None
        algorithm = self._algorithm(crypto.get(FileCryptoMetaDataF.ENCRYPTION_ALGORITHM))
        module = block[end:]
        if len(module) < LENGTH_PREFIX or module_length(module[:LENGTH_PREFIX]) != len(module) - LENGTH_PREFIX:
            raise self._fail(MalformedError, "footer module length does not match the footer", _FOOTER)
        if self.keys.footer_key is None:
            prefix = "stored" if algorithm.aad_prefix is not None else (
                "required, not stored" if algorithm.supply_aad_prefix else "none")
            raise FormatError(
                f"{self.name or 'file'}: the footer is encrypted (PARE, {algorithm.name}, AAD prefix: {prefix}); "
                "a footer key is required (--key or --key-metadata)"
            )
        file_aad = self._file_aad(algorithm)
        plain = self._open_gcm(
            self._cipher(self.keys.footer_key),
            module[LENGTH_PREFIX:],
            module_aad(file_aad, ModuleType.FOOTER),
            _FOOTER,
        )
        metadata = self._decode(plain, "FileMetaData", _FOOTER, spec=FILE_METADATA_SPEC)
        return Footer(size, MAGIC_ENCRYPTED, True, algorithm, crypto.get(FileCryptoMetaDataF.KEY_METADATA), metadata, file_aad)

    def _plaintext_footer(self, size: int, block: bytes) -> Footer:
        try:
            metadata, end = decode_struct(block, 0, FILE_METADATA_SPEC)
        except FormatError as exc:
            raise self._fail(MalformedError, f"FileMetaData does not parse: {exc}", _FOOTER) from None
        union = metadata.get(FileMetaDataF.ENCRYPTION_ALGORITHM)
        if union is None:  # an ordinary Parquet file
            if end != len(block):
                raise self._fail(MalformedError, "stray bytes after FileMetaData", _FOOTER)
            return Footer(size, MAGIC_PLAIN, False, None, None, metadata, None)
        algorithm = self._algorithm(union)
        if len(block) - end != SIGNATURE_LENGTH:
            raise self._fail(
                MalformedError,
                f"expected a {SIGNATURE_LENGTH}-byte footer signature, found {len(block) - end} bytes",
                _FOOTER,
            )
        footer = Footer(
            size,
            MAGIC_PLAIN,
            False,
            algorithm,
            metadata.get(FileMetaDataF.FOOTER_SIGNING_KEY_METADATA),
            metadata,
            None,
        )
        if self.keys.footer_key is None:
            # Without the footer key nothing can be signed-checked; column keys still need the AAD.
            try:
                footer.file_aad = self._file_aad(algorithm)
            except FormatError:
                footer.file_aad = None
            return footer
        footer.file_aad = self._file_aad(algorithm)
        cipher = self._cipher(self.keys.footer_key)
        if not cipher.footer_signature_valid(block[:end], block[end:], module_aad(footer.file_aad, ModuleType.FOOTER)):
            raise self._fail(
                TagMismatchError,
                "footer signature does not match (tampered footer, wrong footer key, or wrong AAD prefix)",
                _FOOTER,
            )
        self.authenticated[ModuleType.FOOTER] += 1
        footer.signature_verified = True
        return footer

    # -- column chunks -------------------------------------------------------------------------

    def chunk_positions(self) -> list[tuple[int, int]]:
        """``(row group index, column ordinal)`` of every column chunk, in footer order."""
        row_groups = self.footer.metadata.get(FileMetaDataF.ROW_GROUPS)
        out = []
        for rg_index, rg in enumerate(row_groups.items if row_groups else []):
            columns = rg.get(RowGroupF.COLUMNS)
            out += [(rg_index, col) for col in range(len(columns.items) if columns else 0)]
        return out

    def column_chunk(self, rg_index: int, col_ordinal: int) -> ColumnChunkInfo:
        """One column chunk, with its ColumnMetaData decrypted (and authenticated) if needed."""
        rg = self.footer.metadata.get(FileMetaDataF.ROW_GROUPS).items[rg_index]
        chunk = rg.get(RowGroupF.COLUMNS).items[col_ordinal]
        return self._chunk_info(rg_index, rg.get(RowGroupF.ORDINAL, rg_index), col_ordinal, chunk)

    def column_chunks(self) -> Iterator[ColumnChunkInfo]:
        """Every column chunk of every row group (stops at the first failing ColumnMetaData)."""
        for rg_index, col in self.chunk_positions():
            yield self.column_chunk(rg_index, col)

    def _chunk_info(self, rg_index: int, rg_ordinal: int, col_ordinal: int, chunk: TStruct) -> ColumnChunkInfo:
        plain_meta: TStruct | None = chunk.get(ColumnChunkF.META_DATA)
        crypto_union = chunk.get(ColumnChunkF.CRYPTO_METADATA)
        ref = ModuleRef(ModuleType.COLUMN_META_DATA, rg_index, col_ordinal)
        if crypto_union is None:
            if plain_meta is None:
                raise self._fail(MalformedError, "plaintext column chunk without ColumnMetaData", ref)
            return ColumnChunkInfo(rg_index, rg_ordinal, col_ordinal, ".".join(path_of(plain_meta)), chunk, plain_meta, None)
        try:
            crypto = ColumnCrypto.from_thrift(crypto_union)
        except (ValueError, AttributeError) as exc:
            raise self._fail(MalformedError, f"bad ColumnCryptoMetaData: {exc}", ref) from None
        if crypto.with_footer_key:
            if plain_meta is None:
                raise self._fail(MalformedError, "footer-key column without ColumnMetaData", ref)
            path = ".".join(path_of(plain_meta))
            key = self.keys.footer_key
        else:
            path = ".".join(crypto.path_in_schema or (path_of(plain_meta) if plain_meta else ()))
            key = self.keys.column_keys.get(path)
        info = ColumnChunkInfo(rg_index, rg_ordinal, col_ordinal, path, chunk, None, crypto)
        if key is None or self.footer.file_aad is None:
            info.meta = plain_meta  # redacted (plaintext footer) or None; not verifiable
            return info
        info.cipher = self._cipher(key)
        sealed: bytes | None = chunk.get(ColumnChunkF.ENCRYPTED_COLUMN_METADATA)
        if sealed is None:
            if not crypto.with_footer_key or not self.footer.encrypted_footer:
                raise self._fail(MalformedError, "encrypted column without encrypted_column_metadata", info.ref(ModuleType.COLUMN_META_DATA))
            info.meta = plain_meta  # protected by the encrypted footer
            return info
        # parquet-java stores the module with its 4-byte length; accept a bare nonce|ct|tag too.
        if len(sealed) >= LENGTH_PREFIX and module_length(sealed[:LENGTH_PREFIX]) == len(sealed) - LENGTH_PREFIX:
            sealed = sealed[LENGTH_PREFIX:]
        cmd_ref = info.ref(ModuleType.COLUMN_META_DATA)
        aad = module_aad(self.footer.file_aad, ModuleType.COLUMN_META_DATA, rg_ordinal, col_ordinal)
        info.meta = self._decode(self._open_gcm(info.cipher, sealed, aad, cmd_ref), "ColumnMetaData", cmd_ref, spec=COLUMN_METADATA_SPEC)
        return info

    def _aad(self, info: ColumnChunkInfo, module_type: ModuleType, page: int | None = None) -> bytes:
        assert self.footer.file_aad is not None
        if page is None or not 0 <= page <= MAX_ORDINAL:  # (module_aad reports bad ordinals)
            return module_aad(self.footer.file_aad, module_type, info.row_group_ordinal, info.column, page)
        # Page modules: the AAD without its page ordinal is the same for every page of a chunk.
        key = (module_type, info.row_group_ordinal, info.column)
        base = self._aad_bases.get(key)
        if base is None:
            base = self._aad_bases[key] = module_aad(
                self.footer.file_aad, module_type, info.row_group_ordinal, info.column, 0)[:-2]
        return base + page.to_bytes(2, "little")

    # -- pages ---------------------------------------------------------------------------------

    def chunk_range(self, info: ColumnChunkInfo) -> tuple[int, int]:
        """``(start, end)`` file offsets of the chunk's pages (dictionary page first if any)."""
        meta = info.meta
        ref = info.ref(ModuleType.COLUMN_META_DATA)
        if meta is None:
            raise self._fail(MalformedError, "no ColumnMetaData to locate the pages", ref)
        data_offset = meta.get(ColumnMetaDataF.DATA_PAGE_OFFSET)
        dict_offset = meta.get(ColumnMetaDataF.DICTIONARY_PAGE_OFFSET)
        size = meta.get(ColumnMetaDataF.TOTAL_COMPRESSED_SIZE)
        if data_offset is None or size is None:
            raise self._fail(MalformedError, "ColumnMetaData lacks page offsets or size", ref)
        start = dict_offset if has_dictionary_page(meta) else data_offset
        if size == 0 and meta.get(ColumnMetaDataF.NUM_VALUES) == 0:
            return start, start  # no pages at all: Arrow's chunks of a 0-row row group
        if start < 4 or size < 0 or start + size > self.file_size:
            raise self._fail(MalformedError, f"pages at {start}+{size} lie outside the file", ref)
        return start, start + size

    def pages(self, info: ColumnChunkInfo, *, reuse_buffers: bool = False) -> Iterator[Page]:
        """Every page of the chunk, decrypted and authenticated (GCM) in file order.

        ``reuse_buffers=True`` reads and decrypts every page into the same two buffers (no
        allocation per page: the verifier's fast path); each ``Page.data`` is then a memoryview
        that is only valid until the iteration advances.
        """
        if not info.verifiable:
            raise FormatError(f"{self.name or 'file'}: no key for column '{info.path}'")
        start, end = self.chunk_range(info)
        expect_dictionary = has_dictionary_page(info.meta)  # type: ignore[arg-type]
        if reuse_buffers and info.encrypted and not self._ctr_pages:
            yield from self._gcm_pages(info, start, end, expect_dictionary)
            return
        pos, ordinal = start, 0
        while pos < end:
            if info.encrypted:
                page, pos = self._encrypted_page(info, pos, end, ordinal, expect_dictionary, reuse_buffers)
            else:
                page, pos = self._plaintext_page(info, pos, end, ordinal, reuse_buffers)
            expect_dictionary = False
            if page.ordinal is not None:
                ordinal += 1
            yield page
        if pos != end:
            raise self._fail(
                MalformedError,
                f"last page ends at {pos}, past the column chunk end {end}",
                info.ref(ModuleType.DATA_PAGE, ordinal - 1),
            )

    def _encrypted_page(
        self, info: ColumnChunkInfo, pos: int, end: int, ordinal: int, dictionary: bool, reuse: bool = False
    ) -> tuple[Page, int]:
        cipher = info.cipher
        assert cipher is not None
        if dictionary:
            header_type, page_type_, page_no = ModuleType.DICTIONARY_PAGE_HEADER, ModuleType.DICTIONARY_PAGE, None
        else:
            header_type, page_type_, page_no = ModuleType.DATA_PAGE_HEADER, ModuleType.DATA_PAGE, ordinal
        header_ref = info.ref(header_type, page_no)
        body = self._module_at(pos, header_ref, end - pos, reuse=reuse)
        plain = self._open_gcm(cipher, body, self._aad(info, header_type, page_no), header_ref)
        header = self._decode(plain, "PageHeader", header_ref, spec=PAGE_HEADER_SPEC)
        pos += LENGTH_PREFIX + len(body)
        kind = self._page_type(header, header_ref)
        if (kind == PageType.DICTIONARY_PAGE) != dictionary:
            raise self._fail(MalformedError, f"unexpected {kind.name} here", header_ref)
        page_ref = info.ref(page_type_, page_no)
        stated = header.get(PageHeaderF.COMPRESSED_PAGE_SIZE, -1)
        levels = self._plaintext_levels(header, pos, end, stated, page_ref)
        level_bytes = self._read(pos, levels, page_ref) if levels else b""
        page_body = self._module_at(pos + levels, page_ref, end - pos - levels, reuse=reuse)
        if stated != levels + LENGTH_PREFIX + len(page_body):
            raise self._fail(
                MalformedError,
                f"page header says {stated} bytes, the encrypted page has {levels + LENGTH_PREFIX + len(page_body)}",
                page_ref,
            )
        data: bytes | memoryview
        if self._ctr_pages:
            try:
                data = level_bytes + cipher.decrypt_ctr(page_body)
            except ValueError as exc:
                raise self._fail(MalformedError, str(exc), page_ref) from None
            self.unauthenticated[page_type_] += 1
        elif reuse and len(page_body) >= GCM_OVERHEAD:  # shorter: let _open_gcm report it
            data = self._out_view(levels + len(page_body) - GCM_OVERHEAD)
            data[:levels] = level_bytes
            self._open_gcm_into(cipher, page_body, self._aad(info, page_type_, page_no), page_ref, data[levels:])
        else:
            data = level_bytes + self._open_gcm(cipher, page_body, self._aad(info, page_type_, page_no), page_ref)
        page = Page(kind, page_no, header, data, pos - LENGTH_PREFIX - len(body), levels)
        return page, pos + stated

    def _gcm_pages(self, info: ColumnChunkInfo, start: int, end: int, dictionary: bool) -> Iterator[Page]:
        """:meth:`pages` of a GCM chunk with ``reuse_buffers``: the checks of :meth:`_encrypted_page`
        (same errors, in the same order) with the per-page work inlined. This is the verifier's hot
        loop: a 253 MiB file has ~1,600 pages, and each microsecond per page costs ~2 % against
        raw AES-GCM of the same modules.

        Module bodies are views into the read-ahead window (a module the window does not hold,
        or one that fails a bound, takes the general :meth:`_module_at` path, which reports it);
        page bodies are decrypted into one reused buffer; page AADs are the chunk's constant part
        plus the page ordinal (spec 4.4.2); :class:`ModuleRef` objects are built only for errors.
        """
        cipher = info.cipher
        assert cipher is not None
        aead = cipher.aead
        decrypt = aead.decrypt
        decrypt_into = aead.decrypt_into if HAS_DECRYPT_INTO else None
        unpack_from = _LENGTH.unpack_from
        authenticated = self.authenticated
        page_types = _PAGE_TYPES
        header_base = page_base = b""  # the AADs less the page ordinal, made at the first data page
        scratch = self._scratch_in
        window, window_start, window_length = memoryview(scratch), self._window_start, self._window_length
        out = memoryview(self._scratch_out)
        pos, ordinal = start, 0
        while pos < end:
            if dictionary:
                header_type, page_type_, page_no = ModuleType.DICTIONARY_PAGE_HEADER, ModuleType.DICTIONARY_PAGE, None
                header_aad = self._aad(info, header_type)
                page_aad = self._aad(info, page_type_)
            else:
                header_type, page_type_, page_no = ModuleType.DATA_PAGE_HEADER, ModuleType.DATA_PAGE, ordinal
                if not header_base:
                    header_base = self._aad(info, header_type, 0)[:-2]
                    page_base = self._aad(info, page_type_, 0)[:-2]
                if ordinal <= MAX_ORDINAL:
                    suffix = ordinal.to_bytes(2, "little")
                    header_aad, page_aad = header_base + suffix, page_base + suffix
                else:  # module_aad reports the ordinal that does not fit
                    header_aad = self._aad(info, header_type, ordinal)
                    page_aad = self._aad(info, page_type_, ordinal)
            # -- page header module (spec 5.1 framing; _module_at inlined for a window hit) --
            at = pos - window_start
            if at >= 0 and at + LENGTH_PREFIX <= window_length:
                size = unpack_from(scratch, at)[0]
                at += LENGTH_PREFIX
                hit = LENGTH_PREFIX + size <= end - pos and at + size <= window_length
            else:
                hit = False
            if hit:
                body = window[at : at + size]
            else:
                body = self._module_at(pos, info.ref(header_type, page_no), end - pos, reuse=True)
                size = len(body)
                scratch = self._scratch_in
                window, window_start, window_length = memoryview(scratch), self._window_start, self._window_length
            try:
                if size < GCM_OVERHEAD:  # ModuleCipher.decrypt_gcm's check
                    raise ValueError("GCM module shorter than nonce + tag")
                plain = decrypt(body[:NONCE_LENGTH], body[NONCE_LENGTH:], header_aad)
            except (InvalidTag, ValueError):
                raise self._fail(TagMismatchError, _AUTH_FAILED, info.ref(header_type, page_no)) from None
            authenticated[header_type] += 1
            try:
                header = decode_struct(plain, 0, PAGE_HEADER_SPEC)[0]
            except FormatError as exc:
                raise self._fail(
                    MalformedError, f"PageHeader does not parse: {exc}", info.ref(header_type, page_no)
                ) from None
            header_start = pos
            pos += LENGTH_PREFIX + size
            kind = page_types.get(header.get(PageHeaderF.TYPE))
            if kind is None or kind == PageType.INDEX_PAGE:
                self._page_type(header, info.ref(header_type, page_no))  # raises
            if (kind == PageType.DICTIONARY_PAGE) != dictionary:
                raise self._fail(MalformedError, f"unexpected {kind.name} here", info.ref(header_type, page_no))
            stated = header.get(PageHeaderF.COMPRESSED_PAGE_SIZE, -1)
            levels, level_bytes = 0, b""
            if kind == PageType.DATA_PAGE_V2:
                page_ref = info.ref(page_type_, page_no)
                levels = self._plaintext_levels(header, pos, end, stated, page_ref)
                if levels:
                    level_bytes = self._read(pos, levels, page_ref)
            # -- page module --
            start_of_module = pos + levels
            at = start_of_module - window_start
            if at >= 0 and at + LENGTH_PREFIX <= window_length:
                size = unpack_from(scratch, at)[0]
                at += LENGTH_PREFIX
                hit = LENGTH_PREFIX + size <= end - start_of_module and at + size <= window_length
            else:
                hit = False
            if hit:
                page_body = window[at : at + size]
            else:
                page_body = self._module_at(start_of_module, info.ref(page_type_, page_no), end - start_of_module, reuse=True)
                size = len(page_body)
                scratch = self._scratch_in
                window, window_start, window_length = memoryview(scratch), self._window_start, self._window_length
            if stated != levels + LENGTH_PREFIX + size:
                raise self._fail(
                    MalformedError,
                    f"page header says {stated} bytes, the encrypted page has {levels + LENGTH_PREFIX + size}",
                    info.ref(page_type_, page_no),
                )
            try:
                if size < GCM_OVERHEAD:
                    raise ValueError("GCM module shorter than nonce + tag")
                length = levels + size - GCM_OVERHEAD
                if len(out) < length:
                    self._scratch_out = bytearray(length)
                    out = memoryview(self._scratch_out)
                data = out[:length]
                if levels:
                    data[:levels] = level_bytes
                if decrypt_into is not None:
                    decrypt_into(page_body[:NONCE_LENGTH], page_body[NONCE_LENGTH:], page_aad, data[levels:])
                else:  # cryptography < 45
                    cipher.decrypt_gcm_into(page_body, page_aad, data[levels:])
            except (InvalidTag, ValueError):
                raise self._fail(TagMismatchError, _AUTH_FAILED, info.ref(page_type_, page_no)) from None
            authenticated[page_type_] += 1
            pos += stated
            if dictionary:
                dictionary = False
            else:
                ordinal += 1
            yield Page(kind, page_no, header, data, header_start, levels)
            if (self._scratch_in is not scratch or self._window_start != window_start
                    or self._window_length != window_length):  # the caller read elsewhere meanwhile
                scratch = self._scratch_in
                window, window_start, window_length = memoryview(scratch), self._window_start, self._window_length
        if pos != end:
            raise self._fail(
                MalformedError,
                f"last page ends at {pos}, past the column chunk end {end}",
                info.ref(ModuleType.DATA_PAGE, ordinal - 1),
            )

    def _plaintext_levels(self, header: TStruct, pos: int, end: int, stated: int, ref: ModuleRef) -> int:
        """Bytes of plaintext levels before the encrypted part of a DATA_PAGE_V2.

        parquet-java encrypts only the values section of v2 pages (repetition and definition
        levels stay in plaintext before the page module); Arrow C++ encrypts the whole page.
        The spec does not say; we accept both: levels are plaintext iff the module length found
        right after them makes the page exactly ``compressed_page_size`` long.
        """
        v2 = header.get(PageHeaderF.DATA_PAGE_HEADER_V2)
        if header.get(PageHeaderF.TYPE) != PageType.DATA_PAGE_V2 or v2 is None:
            return 0
        levels = (v2.get(DataPageHeaderV2F.DEFINITION_LEVELS_BYTE_LENGTH) or 0) + (
            v2.get(DataPageHeaderV2F.REPETITION_LEVELS_BYTE_LENGTH) or 0
        )
        if levels <= 0 or pos + levels + LENGTH_PREFIX > end:
            return 0
        length = module_length(self._read(pos + levels, LENGTH_PREFIX, ref))
        return levels if levels + LENGTH_PREFIX + length == stated else 0

    def _plaintext_page(
        self, info: ColumnChunkInfo, pos: int, end: int, ordinal: int, reuse: bool = False
    ) -> tuple[Page, int]:
        ref = info.ref(ModuleType.DATA_PAGE_HEADER, ordinal)
        window = min(end - pos, 1 << 14)
        while True:
            buf = self._read(pos, window, ref)
            try:
                header, used = decode_struct(buf, 0, PAGE_HEADER_SPEC)
                break
            except FormatError as exc:
                if window >= end - pos:
                    raise self._fail(MalformedError, f"PageHeader does not parse: {exc}", ref) from None
                window = min(end - pos, window * 4)
        kind = self._page_type(header, ref)
        size = header.get(PageHeaderF.COMPRESSED_PAGE_SIZE, -1)
        if size < 0 or pos + used + size > end:
            raise self._fail(MalformedError, f"page of {size} bytes overruns the column chunk", ref)
        data = self._read_view(pos + used, size, ref) if reuse else self._read(pos + used, size, ref)
        page_no = None if kind == PageType.DICTIONARY_PAGE else ordinal
        return Page(kind, page_no, header, data, pos), pos + used + size

    def _page_type(self, header: TStruct, ref: ModuleRef) -> PageType:
        kind = _PAGE_TYPES.get(header.get(PageHeaderF.TYPE))
        if kind is None:
            raise self._fail(MalformedError, f"unknown page type {header.get(PageHeaderF.TYPE)}", ref)
        if kind == PageType.INDEX_PAGE:
            raise self._fail(MalformedError, "INDEX_PAGE pages are not supported", ref)
        return kind

    # -- indexes and bloom filters ---------------------------------------------------------------

    def _index(self, info: ColumnChunkInfo, offset_f: int, length_f: int, module_type: ModuleType) -> bytes | None:
        offset, length = info.chunk.get(offset_f), info.chunk.get(length_f)
        if offset is None:
            return None
        ref = info.ref(module_type)
        if length is None or length < 0:
            raise self._fail(MalformedError, "index offset without a valid length", ref)
        if not info.encrypted:
            return self._read(offset, length, ref)
        body = self._module_at(offset, ref, length)
        if LENGTH_PREFIX + len(body) != length:
            raise self._fail(MalformedError, f"index length {length} does not match its module", ref)
        return self._open_gcm(info.cipher, body, self._aad(info, module_type), ref)  # type: ignore[arg-type]

    def column_index(self, info: ColumnChunkInfo) -> bytes | None:
        """The serialised (plaintext) ColumnIndex, or None when the chunk has none."""
        data = self._index(info, ColumnChunkF.COLUMN_INDEX_OFFSET, ColumnChunkF.COLUMN_INDEX_LENGTH, ModuleType.COLUMN_INDEX)
        if data is not None:
            self._decode(data, "ColumnIndex", info.ref(ModuleType.COLUMN_INDEX))
        return data

    def offset_index(self, info: ColumnChunkInfo) -> TStruct | None:
        """The OffsetIndex struct, or None when the chunk has none."""
        data = self._index(info, ColumnChunkF.OFFSET_INDEX_OFFSET, ColumnChunkF.OFFSET_INDEX_LENGTH, ModuleType.OFFSET_INDEX)
        return None if data is None else self._decode(data, "OffsetIndex", info.ref(ModuleType.OFFSET_INDEX), spec=OFFSET_INDEX_SPEC)

    def bloom_filter(self, info: ColumnChunkInfo) -> tuple[TStruct, bytes] | None:
        """``(BloomFilterHeader, bitset)``, or None when the chunk has no bloom filter."""
        meta = info.meta
        offset = meta.get(ColumnMetaDataF.BLOOM_FILTER_OFFSET) if meta is not None else None
        if offset is None:
            return None
        header_ref = info.ref(ModuleType.BLOOM_FILTER_HEADER)
        bitset_ref = info.ref(ModuleType.BLOOM_FILTER_BITSET)
        if info.encrypted:
            body = self._module_at(offset, header_ref)
            plain = self._open_gcm(info.cipher, body, self._aad(info, ModuleType.BLOOM_FILTER_HEADER), header_ref)  # type: ignore[arg-type]
            header = self._decode(plain, "BloomFilterHeader", header_ref, spec=BLOOM_FILTER_HEADER_SPEC)
            bitset_body = self._module_at(offset + LENGTH_PREFIX + len(body), bitset_ref)
            bitset = self._open_gcm(info.cipher, bitset_body, self._aad(info, ModuleType.BLOOM_FILTER_BITSET), bitset_ref)  # type: ignore[arg-type]
        else:
            window = self._read(offset, min(256, self.file_size - offset), header_ref)
            try:
                header, used = decode_struct(window, 0, BLOOM_FILTER_HEADER_SPEC)
            except FormatError as exc:
                raise self._fail(MalformedError, f"BloomFilterHeader does not parse: {exc}", header_ref) from None
            bitset = self._read(offset + used, header.get(BloomFilterHeaderF.NUM_BYTES, -1), bitset_ref)
        if header.get(BloomFilterHeaderF.NUM_BYTES) != len(bitset):
            raise self._fail(MalformedError, "bitset length differs from BloomFilterHeader.numBytes", bitset_ref)
        return header, bitset


def has_dictionary_page(meta: TStruct) -> bool:
    """Whether the chunk starts with a dictionary page (parquet-java: dictionary_page_offset > 0)."""
    offset = meta.get(ColumnMetaDataF.DICTIONARY_PAGE_OFFSET)
    return offset is not None and offset > 0
