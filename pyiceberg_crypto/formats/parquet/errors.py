"""Parquet-specific members of the shared error family, and where in a file an error happened.

Every module failure carries a :class:`ModuleRef` in ``err.module`` so callers and tests can
match on row group, column, page ordinal and module type, not on message text::

    except IntegrityError as err:
        err.module.module_type is ModuleType.DATA_PAGE, err.module.page
"""

from __future__ import annotations

from typing import NamedTuple

from pyiceberg_crypto.formats.errors import FormatError, IntegrityError
from pyiceberg_crypto.formats.parquet.aad import ModuleType

__all__ = ["AadPrefixMismatchError", "KeyRequiredError", "MalformedStructureError", "ModuleRef"]


class MalformedStructureError(IntegrityError):
    """Bytes that should be a Parquet structure (footer, page header, index...) do not parse,
    or offsets/lengths in the metadata are inconsistent."""


class AadPrefixMismatchError(IntegrityError):
    """The caller's AAD prefix differs from the one stored in the file (the file identity)."""


class KeyRequiredError(FormatError):
    """A key or the AAD prefix needed to read the file was not supplied (a usage error)."""


class ModuleRef(NamedTuple):
    """Where a module lives: row group index, column ordinal and dotted path, page ordinal.

    (An immutable named tuple: the reader makes two per page, so it must be cheap to build.)
    """

    module_type: ModuleType
    row_group: int | None = None
    column: int | None = None
    column_path: str | None = None
    page: int | None = None

    def __str__(self) -> str:
        parts = []
        if self.row_group is not None:
            parts.append(f"row group {self.row_group}")
        if self.column_path is not None:
            parts.append(f"column '{self.column_path}'")
        elif self.column is not None:
            parts.append(f"column {self.column}")
        if self.page is not None:
            parts.append(f"page {self.page}")
        parts.append(self.module_type.label)
        return ", ".join(parts)


def module_error(cls: type[IntegrityError], reason: str, file: str | None, ref: ModuleRef) -> IntegrityError:
    """An ``cls`` error whose location is ``ref`` (also kept as ``err.module``)."""
    err = cls(reason, file=file, location=str(ref))
    err.module = ref  # type: ignore[attr-defined]
    return err
