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

__all__ = ["ColumnCrypto", "EncryptionAlgorithm"]


class FileCryptoMetaDataF(IntEnum):  # spec 5.4
    ENCRYPTION_ALGORITHM = 1
    KEY_METADATA = 2


class EncryptionAlgorithmF(IntEnum):  # spec 5.2: the union's members (their names are the algorithms')
    AES_GCM_V1 = 1
    AES_GCM_CTR_V1 = 2


class AesGcmF(IntEnum):  # spec 5.2: AesGcmV1 and AesGcmCtrV1 have the same fields
    AAD_PREFIX = 1
    AAD_FILE_UNIQUE = 2
    SUPPLY_AAD_PREFIX = 3


class ColumnCryptoMetaDataF(IntEnum):  # spec 5.2: the union's members
    ENCRYPTION_WITH_FOOTER_KEY = 1
    ENCRYPTION_WITH_COLUMN_KEY = 2


class EncryptionWithColumnKeyF(IntEnum):  # spec 5.2
    PATH_IN_SCHEMA = 1
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


def _fields(struct_name: str, /, *fields: tuple) -> StructSpec:
    """``_fields("RowGroup", (RowGroupF.NUM_ROWS, I64), (RowGroupF.COLUMNS, LIST, COLUMN_CHUNK_SPEC, STRUCT))``:
    each field is (its id, wire type[, the struct it is or holds[, a list's element type]]); the
    id's enum name, in lower case, names it in errors."""
    return StructSpec(struct_name, {int(fid): FieldSpec(fid.name.lower(), *rest) for fid, *rest in fields})


_B, _I16, _I32, _I64, _BOOL = TType.BINARY, TType.I16, TType.I32, TType.I64, TType.BOOL
_LIST, _STRUCT = TType.LIST, TType.STRUCT

AES_GCM_SPEC = _fields(
    "AesGcmV1", (AesGcmF.AAD_PREFIX, _B), (AesGcmF.AAD_FILE_UNIQUE, _B), (AesGcmF.SUPPLY_AAD_PREFIX, _BOOL))
ENCRYPTION_ALGORITHM_SPEC = _fields(  # spec 5.2
    "EncryptionAlgorithm",
    (EncryptionAlgorithmF.AES_GCM_V1, _STRUCT, AES_GCM_SPEC),
    (EncryptionAlgorithmF.AES_GCM_CTR_V1, _STRUCT, AES_GCM_SPEC),
)
FILE_CRYPTO_METADATA_SPEC = _fields(  # spec 5.4
    "FileCryptoMetaData",
    (FileCryptoMetaDataF.ENCRYPTION_ALGORITHM, _STRUCT, ENCRYPTION_ALGORITHM_SPEC),
    (FileCryptoMetaDataF.KEY_METADATA, _B),
)
COLUMN_CRYPTO_SPEC = _fields(  # spec 5.2
    "ColumnCryptoMetaData",
    (ColumnCryptoMetaDataF.ENCRYPTION_WITH_FOOTER_KEY, _STRUCT),
    (ColumnCryptoMetaDataF.ENCRYPTION_WITH_COLUMN_KEY, _STRUCT, _fields(
        "EncryptionWithColumnKey",
        (EncryptionWithColumnKeyF.PATH_IN_SCHEMA, _LIST, None, _B),
        (EncryptionWithColumnKeyF.KEY_METADATA, _B),
    )),
)
COLUMN_METADATA_SPEC = _fields(
    "ColumnMetaData",
    (ColumnMetaDataF.TYPE, _I32),
    (ColumnMetaDataF.PATH_IN_SCHEMA, _LIST, None, _B),
    (ColumnMetaDataF.CODEC, _I32),
    (ColumnMetaDataF.NUM_VALUES, _I64),
    (ColumnMetaDataF.TOTAL_UNCOMPRESSED_SIZE, _I64),
    (ColumnMetaDataF.TOTAL_COMPRESSED_SIZE, _I64),
    (ColumnMetaDataF.DATA_PAGE_OFFSET, _I64),
    (ColumnMetaDataF.INDEX_PAGE_OFFSET, _I64),
    (ColumnMetaDataF.DICTIONARY_PAGE_OFFSET, _I64),
    (ColumnMetaDataF.BLOOM_FILTER_OFFSET, _I64),
    (ColumnMetaDataF.BLOOM_FILTER_LENGTH, _I32),
)
COLUMN_CHUNK_SPEC = _fields(
    "ColumnChunk",
    (ColumnChunkF.FILE_PATH, _B),
    (ColumnChunkF.FILE_OFFSET, _I64),
    (ColumnChunkF.META_DATA, _STRUCT, COLUMN_METADATA_SPEC),
    (ColumnChunkF.OFFSET_INDEX_OFFSET, _I64),
    (ColumnChunkF.OFFSET_INDEX_LENGTH, _I32),
    (ColumnChunkF.COLUMN_INDEX_OFFSET, _I64),
    (ColumnChunkF.COLUMN_INDEX_LENGTH, _I32),
    (ColumnChunkF.CRYPTO_METADATA, _STRUCT, COLUMN_CRYPTO_SPEC),
    (ColumnChunkF.ENCRYPTED_COLUMN_METADATA, _B),
)
ROW_GROUP_SPEC = _fields(
    "RowGroup",
    (RowGroupF.COLUMNS, _LIST, COLUMN_CHUNK_SPEC, _STRUCT),
    (RowGroupF.TOTAL_BYTE_SIZE, _I64),
    (RowGroupF.NUM_ROWS, _I64),
    (RowGroupF.FILE_OFFSET, _I64),
    (RowGroupF.TOTAL_COMPRESSED_SIZE, _I64),
    (RowGroupF.ORDINAL, _I16),
)
SCHEMA_ELEMENT_SPEC = _fields(
    "SchemaElement", (SchemaElementF.NAME, _B), (SchemaElementF.NUM_CHILDREN, _I32), (SchemaElementF.FIELD_ID, _I32))
FILE_METADATA_SPEC = _fields(
    "FileMetaData",
    (FileMetaDataF.VERSION, _I32),
    (FileMetaDataF.SCHEMA, _LIST, SCHEMA_ELEMENT_SPEC, _STRUCT),
    (FileMetaDataF.NUM_ROWS, _I64),
    (FileMetaDataF.ROW_GROUPS, _LIST, ROW_GROUP_SPEC, _STRUCT),
    (FileMetaDataF.CREATED_BY, _B),
    (FileMetaDataF.ENCRYPTION_ALGORITHM, _STRUCT, ENCRYPTION_ALGORITHM_SPEC),
    (FileMetaDataF.FOOTER_SIGNING_KEY_METADATA, _B),
)
PAGE_HEADER_SPEC = _fields(
    "PageHeader",
    (PageHeaderF.TYPE, _I32),
    (PageHeaderF.UNCOMPRESSED_PAGE_SIZE, _I32),
    (PageHeaderF.COMPRESSED_PAGE_SIZE, _I32),
    (PageHeaderF.CRC, _I32),
    (PageHeaderF.DATA_PAGE_HEADER, _STRUCT),
    (PageHeaderF.INDEX_PAGE_HEADER, _STRUCT),
    (PageHeaderF.DICTIONARY_PAGE_HEADER, _STRUCT),
    (PageHeaderF.DATA_PAGE_HEADER_V2, _STRUCT, _fields(
        "DataPageHeaderV2",
        (DataPageHeaderV2F.NUM_VALUES, _I32),
        (DataPageHeaderV2F.DEFINITION_LEVELS_BYTE_LENGTH, _I32),
        (DataPageHeaderV2F.REPETITION_LEVELS_BYTE_LENGTH, _I32),
    )),
)
OFFSET_INDEX_SPEC = _fields(
    "OffsetIndex",
    (OffsetIndexF.PAGE_LOCATIONS, _LIST, _fields(
        "PageLocation",
        (PageLocationF.OFFSET, _I64),
        (PageLocationF.COMPRESSED_PAGE_SIZE, _I32),
        (PageLocationF.FIRST_ROW_INDEX, _I64),
    ), _STRUCT),
)
BLOOM_FILTER_HEADER_SPEC = _fields("BloomFilterHeader", (BloomFilterHeaderF.NUM_BYTES, _I32))

ALGORITHM_NAMES = {member.value: member.name for member in EncryptionAlgorithmF}


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
            aad_prefix=body.get(AesGcmF.AAD_PREFIX),
            aad_file_unique=body.get(AesGcmF.AAD_FILE_UNIQUE) or b"",
            supply_aad_prefix=bool(body.get(AesGcmF.SUPPLY_AAD_PREFIX, False)),
        )


@dataclass(frozen=True)
class ColumnCrypto:
    """``union ColumnCryptoMetaData`` (spec 5.2): footer key, or a column key with its path."""

    with_footer_key: bool
    path_in_schema: tuple[str, ...] | None = None
    key_metadata: bytes | None = None

    @classmethod
    def from_thrift(cls, union: TStruct) -> ColumnCrypto:
        if union.has(ColumnCryptoMetaDataF.ENCRYPTION_WITH_FOOTER_KEY):
            return cls(with_footer_key=True)
        if union.has(ColumnCryptoMetaDataF.ENCRYPTION_WITH_COLUMN_KEY):
            body: TStruct = union.get(ColumnCryptoMetaDataF.ENCRYPTION_WITH_COLUMN_KEY)
            path: TList | None = body.get(EncryptionWithColumnKeyF.PATH_IN_SCHEMA)
            return cls(
                with_footer_key=False,
                path_in_schema=tuple(_text(p) for p in path.items) if path else None,
                key_metadata=body.get(EncryptionWithColumnKeyF.KEY_METADATA),
            )
        raise ValueError("ColumnCryptoMetaData union has no known member")


def path_of(column_meta: TStruct) -> tuple[str, ...]:
    """``ColumnMetaData.path_in_schema`` as a tuple of names."""
    path: TList | None = column_meta.get(ColumnMetaDataF.PATH_IN_SCHEMA)
    return tuple(_text(p) for p in path.items) if path else ()


def _text(value: bytes) -> str:
    return value.decode("utf-8", errors="replace")
