"""Module AADs of Parquet Modular Encryption (spec section 4.4).

``module AAD = aad_prefix || aad_file_unique || module type (1 byte)
               [|| row group ordinal (int16 LE) || column ordinal (int16 LE)
               [|| page ordinal (int16 LE)]]``

Which parts each module carries (spec 4.4.2 table): the footer carries none of the ordinals;
data pages and data page headers carry all three; every other module carries row group and
column ordinals only.

Usage::

    file_aad = aad_prefix + aad_file_unique
    aad = module_aad(file_aad, ModuleType.DATA_PAGE, row_group=0, column=2, page=5)
"""

from __future__ import annotations

import struct
from enum import IntEnum

from pyiceberg_crypto.errors import InvalidArgumentError

__all__ = ["MAX_ORDINAL", "ModuleType", "module_aad"]

MAX_ORDINAL = 32767  # ordinals are signed 16-bit shorts on the wire (spec 4.4.2)


class ModuleType(IntEnum):
    """Module type byte (spec 4.4.2)."""

    FOOTER = 0
    COLUMN_META_DATA = 1
    DATA_PAGE = 2
    DICTIONARY_PAGE = 3
    DATA_PAGE_HEADER = 4
    DICTIONARY_PAGE_HEADER = 5
    COLUMN_INDEX = 6
    OFFSET_INDEX = 7
    BLOOM_FILTER_HEADER = 8
    BLOOM_FILTER_BITSET = 9

    @property
    def label(self) -> str:
        """Human-readable name, e.g. ``"data page header"``."""
        return self.name.lower().replace("_", " ").replace("meta data", "metadata")


_WITH_PAGE_ORDINAL = frozenset({ModuleType.DATA_PAGE, ModuleType.DATA_PAGE_HEADER})


def module_aad(
    file_aad: bytes,
    module_type: ModuleType,
    row_group: int | None = None,
    column: int | None = None,
    page: int | None = None,
) -> bytes:
    """The AAD of one module; raises InvalidArgumentError (a ValueError) when the ordinals do not fit the module type."""
    if module_type == ModuleType.FOOTER:
        if row_group is not None or column is not None or page is not None:
            raise InvalidArgumentError("the footer AAD has no ordinals")
        return file_aad + bytes([module_type])
    if row_group is None or column is None:
        raise InvalidArgumentError(f"{module_type.label} AAD needs row group and column ordinals")
    needs_page = module_type in _WITH_PAGE_ORDINAL
    if needs_page != (page is not None):
        raise InvalidArgumentError(f"{module_type.label} AAD {'needs' if needs_page else 'has no'} page ordinal")
    ordinals = (row_group, column) + ((page,) if needs_page else ())
    for value in ordinals:
        if not 0 <= value <= MAX_ORDINAL:
            raise InvalidArgumentError(f"ordinal {value} does not fit a 16-bit short")
    return file_aad + bytes([module_type]) + struct.pack(f"<{len(ordinals)}h", *ordinals)
