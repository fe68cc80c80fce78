"""Old names kept for one release: a module's ``__getattr__`` that answers a renamed or folded
class, or a name whose module moved, with a ``DeprecationWarning`` naming the new import path::

    __getattr__ = renamed_classes(__name__, {"PruneError": OperationError})
    __getattr__ = moved_names(__name__, "pyiceberg_crypto.listener.files", ["read_operator_file"])

(CHANGELOG.md lists the renames; the old names go in the release after the next.)
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Iterable, Mapping

__all__ = ["deprecated_alias", "moved_names", "renamed_classes"]


def deprecated_alias(module: str, name: str, renamed: Mapping[str, type]) -> type:
    """The class ``module.name`` now is, with a DeprecationWarning; ``AttributeError`` for a name
    that is not an old one."""
    try:
        new = renamed[name]
    except KeyError:
        raise AttributeError(f"module {module!r} has no attribute {name!r}") from None
    warnings.warn(f"{module}.{name} is deprecated: use {new.__module__}.{new.__qualname__} "
                  "(the old name goes in the next release)", DeprecationWarning, stacklevel=3)
    return new


def renamed_classes(module: str, renamed: Mapping[str, type]) -> Callable[[str], type]:
    """A module ``__getattr__`` answering the old names in ``renamed`` (old name -> class)."""

    def __getattr__(name: str) -> type:
        return deprecated_alias(module, name, renamed)

    return __getattr__


def moved_names(module: str, new_module: str, names: Iterable[str],
                renamed: Mapping[str, type] | None = None) -> Callable[[str], object]:
    """A module ``__getattr__`` for a module that moved: each of ``names`` is ``new_module``'s (the
    same object), with a DeprecationWarning naming it there; ``renamed``: old class names, as
    :func:`renamed_classes` answers them."""
    moved = frozenset(names)

    def __getattr__(name: str) -> object:
        if name not in moved:
            return deprecated_alias(module, name, renamed or {})
        warnings.warn(f"{module}.{name} is deprecated: use {new_module}.{name} (the old path goes in the next "
                      "release)", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(new_module), name)

    return __getattr__
