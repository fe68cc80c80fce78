"""Typed views of the few ``parquet.thrift`` structures the encryption spec needs.

Field ids follow parquet-format's ``parquet.thrift``; each class lists the ids we read or rewrite.
Decoding stays generic (:mod:`.thrift`): these views only *read* a :class:`TStruct`, and the
decryptor edits the generic struct by id so unknown fields survive.

Usage::

    algo = EncryptionAlgorithm.from_thrift(file_crypto.get(FileCryptoMetaDataF.ENCRYPTION_ALGORITHM))
    algo.name, algo.aad_prefix, algo.supply_aad_prefix
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from pyiceberg_crypto.formats.parquet.thrift import FieldSpec, StructSpec, TList, TStruct, TType


class FileCryptoMetaDataF(IntEnum):  # spec 5.4
    ENCRYPTION_ALGORITHM = 1
    KEY_METADATA = 2


class FileMetaDataF(IntEnum):
    VERSION = 1
    SCHEMA = 2
    NUM_ROWS = 3
    ROW_GROUPS = 4
    KEY_VALUE_METADATA = 5
    CREATED_BY = 6
    COLUMN_ORDERS = 7
    ENCRYPTION_ALGORITHM = 8  # spec 5.5, plaintext footer mode only
    FOOTER_SIGNING_KEY_METADATA = 9


class SchemaElementF(IntEnum):
    NAME = 4
    NUM_CHILDREN = 5
    FIELD_ID = 9


class RowGroupF(IntEnum):
    COLUMNS = 1
    TOTAL_BYTE_SIZE = 2
    NUM_ROWS = 3
    FILE_OFFSET = 5
    TOTAL_COMPRESSED_SIZE = 6
    ORDINAL = 7  # spec 5.2


class ColumnChunkF(IntEnum):
    FILE_PATH = 1
    FILE_OFFSET = 2
    META_DATA = 3
    OFFSET_INDEX_OFFSET = 4
    OFFSET_INDEX_LENGTH = 5
    COLUMN_INDEX_OFFSET = 6
    COLUMN_INDEX_LENGTH = 7
    CRYPTO_METADATA = 8  # spec 5.2
    ENCRYPTED_COLUMN_METADATA = 9  # spec 5.3


class ColumnMetaDataF(IntEnum):
    TYPE = 1
    ENCODINGS = 2
    PATH_IN_SCHEMA = 3
    CODEC = 4
    NUM_VALUES = 5
    TOTAL_UNCOMPRESSED_SIZE = 6
    TOTAL_COMPRESSED_SIZE = 7
    DATA_PAGE_OFFSET = 9
    INDEX_PAGE_OFFSET = 10
    DICTIONARY_PAGE_OFFSET = 11
    STATISTICS = 12
    BLOOM_FILTER_OFFSET = 14
    BLOOM_FILTER_LENGTH = 15


class PageHeaderF(IntEnum):
    TYPE = 1
    UNCOMPRESSED_PAGE_SIZE = 2
    COMPRESSED_PAGE_SIZE = 3
    CRC = 4
    DATA_PAGE_HEADER = 5
    INDEX_PAGE_HEADER = 6
    DICTIONARY_PAGE_HEADER = 7
    DATA_PAGE_HEADER_V2 = 8


class DataPageHeaderV2F(IntEnum):
    NUM_VALUES = 1
    DEFINITION_LEVELS_BYTE_LENGTH = 5
    REPETITION_LEVELS_BYTE_LENGTH = 6


class PageType(IntEnum):
    DATA_PAGE = 0
    INDEX_PAGE = 1
    DICTIONARY_PAGE = 2
    DATA_PAGE_V2 = 3


class OffsetIndexF(IntEnum):
    PAGE_LOCATIONS = 1


class PageLocationF(IntEnum):
    OFFSET = 1
    COMPRESSED_PAGE_SIZE = 2
    FIRST_ROW_INDEX = 3


class BloomFilterHeaderF(IntEnum):
    NUM_BYTES = 1


# --- the wire types of the fields read above (parquet.thrift), checked on every decoded struct ---


def _fields(struct_name: str, /, **types) -> StructSpec:
    """``_fields("RowGroup", num_rows=(RowGroupF.NUM_ROWS, I64), columns=(1, LIST, COLUMN_CHUNK, STRUCT))``:
    each field is (id, wire type[, struct it is or holds[, list element type]])."""
    return StructSpec(struct_name, {int(fid): FieldSpec(field, *rest) for field, (fid, *rest) in types.items()})


_B, _I16, _I32, _I64, _BOOL = TType.BINARY, TType.I16, TType.I32, TType.I64, TType.BOOL
_LIST, _STRUCT = TType.LIST, TType.STRUCT

AES_GCM_SPEC = _fields("AesGcmV1", aad_prefix=(1, _B), aad_file_unique=(2, _B), supply_aad_prefix=(3, _BOOL))
ENCRYPTION_ALGORITHM_SPEC = _fields(  # spec 5.2; AesGcmCtrV1 has AesGcmV1's fields
    "EncryptionAlgorithm", AES_GCM_V1=(1, _STRUCT, AES_GCM_SPEC), AES_GCM_CTR_V1=(2, _STRUCT, AES_GCM_SPEC))
FILE_CRYPTO_METADATA_SPEC = _fields(  # spec 5.4
    "FileCryptoMetaData",
    encryption_algorithm=(FileCryptoMetaDataF.ENCRYPTION_ALGORITHM, _STRUCT, ENCRYPTION_ALGORITHM_SPEC),
    key_metadata=(FileCryptoMetaDataF.KEY_METADATA, _B),
)
COLUMN_CRYPTO_SPEC = _fields(  # spec 5.2
    "ColumnCryptoMetaData",
    ENCRYPTION_WITH_FOOTER_KEY=(1, _STRUCT),
    ENCRYPTION_WITH_COLUMN_KEY=(2, _STRUCT, _fields(
        "EncryptionWithColumnKey", path_in_schema=(1, _LIST, None, _B), key_metadata=(2, _B))),
)
COLUMN_METADATA_SPEC = _fields(
    "ColumnMetaData",
    type=(ColumnMetaDataF.TYPE, _I32),
    path_in_schema=(ColumnMetaDataF.PATH_IN_SCHEMA, _LIST, None, _B),
    codec=(ColumnMetaDataF.CODEC, _I32),
    num_values=(ColumnMetaDataF.NUM_VALUES, _I64),
    total_uncompressed_size=(ColumnMetaDataF.TOTAL_UNCOMPRESSED_SIZE, _I64),
    total_compressed_size=(ColumnMetaDataF.TOTAL_COMPRESSED_SIZE, _I64),
    data_page_offset=(ColumnMetaDataF.DATA_PAGE_OFFSET, _I64),
    index_page_offset=(ColumnMetaDataF.INDEX_PAGE_OFFSET, _I64),
    dictionary_page_offset=(ColumnMetaDataF.DICTIONARY_PAGE_OFFSET, _I64),
    bloom_filter_offset=(ColumnMetaDataF.BLOOM_FILTER_OFFSET, _I64),
    bloom_filter_length=(ColumnMetaDataF.BLOOM_FILTER_LENGTH, _I32),
)
COLUMN_CHUNK_SPEC = _fields(
    "ColumnChunk",
    file_path=(ColumnChunkF.FILE_PATH, _B),
    file_offset=(ColumnChunkF.FILE_OFFSET, _I64),
    meta_data=(ColumnChunkF.META_DATA, _STRUCT, COLUMN_METADATA_SPEC),
    offset_index_offset=(ColumnChunkF.OFFSET_INDEX_OFFSET, _I64),
    offset_index_length=(ColumnChunkF.OFFSET_INDEX_LENGTH, _I32),
    column_index_offset=(ColumnChunkF.COLUMN_INDEX_OFFSET, _I64),
    column_index_length=(ColumnChunkF.COLUMN_INDEX_LENGTH, _I32),
    crypto_metadata=(ColumnChunkF.CRYPTO_METADATA, _STRUCT, COLUMN_CRYPTO_SPEC),
    encrypted_column_metadata=(ColumnChunkF.ENCRYPTED_COLUMN_METADATA, _B),
)
ROW_GROUP_SPEC = _fields(
    "RowGroup",
    columns=(RowGroupF.COLUMNS, _LIST, COLUMN_CHUNK_SPEC, _STRUCT),
    total_byte_size=(RowGroupF.TOTAL_BYTE_SIZE, _I64),
    num_rows=(RowGroupF.NUM_ROWS, _I64),
    file_offset=(RowGroupF.FILE_OFFSET, _I64),
    total_compressed_size=(RowGroupF.TOTAL_COMPRESSED_SIZE, _I64),
    ordinal=(RowGroupF.ORDINAL, _I16),
)
SCHEMA_ELEMENT_SPEC = _fields(
    "SchemaElement",
    name=(SchemaElementF.NAME, _B),
    num_children=(SchemaElementF.NUM_CHILDREN, _I32),
    field_id=(SchemaElementF.FIELD_ID, _I32),
)
FILE_METADATA_SPEC = _fields(
    "FileMetaData",
    version=(FileMetaDataF.VERSION, _I32),
    schema=(FileMetaDataF.SCHEMA, _LIST, SCHEMA_ELEMENT_SPEC, _STRUCT),
    num_rows=(FileMetaDataF.NUM_ROWS, _I64),
    row_groups=(FileMetaDataF.ROW_GROUPS, _LIST, ROW_GROUP_SPEC, _STRUCT),
    created_by=(FileMetaDataF.CREATED_BY, _B),
    encryption_algorithm=(FileMetaDataF.ENCRYPTION_ALGORITHM, _STRUCT, ENCRYPTION_ALGORITHM_SPEC),
    footer_signing_key_metadata=(FileMetaDataF.FOOTER_SIGNING_KEY_METADATA, _B),
)
PAGE_HEADER_SPEC = _fields(
    "PageHeader",
    type=(PageHeaderF.TYPE, _I32),
    uncompressed_page_size=(PageHeaderF.UNCOMPRESSED_PAGE_SIZE, _I32),
    compressed_page_size=(PageHeaderF.COMPRESSED_PAGE_SIZE, _I32),
    crc=(PageHeaderF.CRC, _I32),
    data_page_header=(PageHeaderF.DATA_PAGE_HEADER, _STRUCT),
    index_page_header=(PageHeaderF.INDEX_PAGE_HEADER, _STRUCT),
    dictionary_page_header=(PageHeaderF.DICTIONARY_PAGE_HEADER, _STRUCT),
    data_page_header_v2=(PageHeaderF.DATA_PAGE_HEADER_V2, _STRUCT, _fields(
        "DataPageHeaderV2",
        num_values=(DataPageHeaderV2F.NUM_VALUES, _I32),
        definition_levels_byte_length=(DataPageHeaderV2F.DEFINITION_LEVELS_BYTE_LENGTH, _I32),
        repetition_levels_byte_length=(DataPageHeaderV2F.REPETITION_LEVELS_BYTE_LENGTH, _I32),
    )),
)
OFFSET_INDEX_SPEC = _fields(
    "OffsetIndex",
    page_locations=(OffsetIndexF.PAGE_LOCATIONS, _LIST, _fields(
        "PageLocation",
        offset=(PageLocationF.OFFSET, _I64),
        compressed_page_size=(PageLocationF.COMPRESSED_PAGE_SIZE, _I32),
        first_row_index=(PageLocationF.FIRST_ROW_INDEX, _I64),
    ), _STRUCT),
)
BLOOM_FILTER_HEADER_SPEC = _fields("BloomFilterHeader", numBytes=(BloomFilterHeaderF.NUM_BYTES, _I32))

ALGORITHM_NAMES = {1: "AES_GCM_V1", 2: "AES_GCM_CTR_V1"}


@dataclass(frozen=True)
class EncryptionAlgorithm:
    """``union EncryptionAlgorithm { 1: AesGcmV1, 2: AesGcmCtrV1 }`` (spec 5.2)."""

    name: str
    aad_prefix: bytes | None
    aad_file_unique: bytes
    supply_aad_prefix: bool

    @classmethod
    def from_thrift(cls, union: TStruct) -> EncryptionAlgorithm:
        if len(union.fields) != 1:
            raise ValueError("EncryptionAlgorithm union must have exactly one member")
        (fid,) = union.fields
        if fid not in ALGORITHM_NAMES:
            raise ValueError(f"unknown encryption algorithm id {fid}")
        body: TStruct = union.get(fid)
        return cls(
            name=ALGORITHM_NAMES[fid],
            aad_prefix=body.get(1),
            aad_file_unique=body.get(2) or b"",
            supply_aad_prefix=bool(body.get(3, False)),
        )


@dataclass(frozen=True)
class ColumnCrypto:
    """``union ColumnCryptoMetaData`` (spec 5.2): footer key, or a column key with its path."""

    with_footer_key: bool
    path_in_schema: tuple[str, ...] | None = None
    key_metadata: bytes | None = None

    @classmethod
    def from_thrift(cls, union: TStruct) -> ColumnCrypto:
        if union.has(1):
            return cls(with_footer_key=True)
        if union.has(2):
            body: TStruct = union.get(2)
            path: TList | None = body.get(1)
            return cls(
                with_footer_key=False,
                path_in_schema=tuple(_text(p) for p in path.items) if path else None,
                key_metadata=body.get(2),
            )
        raise ValueError("ColumnCryptoMetaData union has no known member")


def path_of(column_meta: TStruct) -> tuple[str, ...]:
    """``ColumnMetaData.path_in_schema`` as a tuple of names."""
    path: TList | None = column_meta.get(ColumnMetaDataF.PATH_IN_SCHEMA)
    return tuple(_text(p) for p in path.items) if path else ()


def _text(value: bytes) -> str:
    return value.decode("utf-8", errors="replace")
