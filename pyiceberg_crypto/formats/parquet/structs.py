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

from pyiceberg_crypto.formats.parquet.thrift import TList, TStruct


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
