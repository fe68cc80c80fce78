"""Old names kept for one release: a module's ``__getattr__`` that answers a renamed or folded
class with a ``DeprecationWarning`` naming the new import path::

    __getattr__ = renamed_classes(__name__, {"PruneError": OperationError})

(CHANGELOG.md lists the renames; the old names go in the release after the next.)
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping

__all__ = ["deprecated_alias", "renamed_classes"]


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
