"""Parquet-specific members of the shared error family, and where in a file an error happened.

Every module failure carries a :class:`ModuleRef` in ``err.module`` so callers and tests can
match on row group, column, page ordinal and module type, not on message text::

    except IntegrityError as err:
        err.module.module_type is ModuleType.DATA_PAGE, err.module.page
"""

from __future__ import annotations

from typing import NamedTuple

from pyiceberg_crypto._deprecated import renamed_classes
from pyiceberg_crypto.errors import AadPrefixMismatchError, FormatError, IntegrityError, MalformedError
from pyiceberg_crypto.formats.parquet.aad import ModuleType

__all__ = ["AadPrefixMismatchError", "ModuleRef"]

#: Old names, kept for one release (CHANGELOG.md).
__getattr__ = renamed_classes(__name__, {"MalformedStructureError": MalformedError, "KeyRequiredError": FormatError})


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
