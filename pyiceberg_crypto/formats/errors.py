"""The format errors, defined in :mod:`pyiceberg_crypto.errors` and re-exported here.

Each integrity error names *where* (file, and block or module) and *why*, never key material::

    try:
        data = reader.read()
    except IntegrityError as err:
        print(err.file, err.location, err.reason)

Subclasses narrow the reason so callers and tests can match precisely: :class:`BadMagicError`,
:class:`TagMismatchError`, :class:`TruncatedError`, :class:`ExtraDataError`,
:class:`MalformedError`, :class:`~pyiceberg_crypto.errors.AadPrefixMismatchError`.
"""

from __future__ import annotations

from pyiceberg_crypto._deprecated import renamed_classes
from pyiceberg_crypto.errors import (
    BadMagicError,
    ExtraDataError,
    FormatError,
    IntegrityError,
    LocatedError,
    MalformedError,
    TagMismatchError,
    TruncatedError,
)

__all__ = ["BadMagicError", "ExtraDataError", "FormatError", "IntegrityError", "LocatedError", "MalformedError",
           "TagMismatchError", "TruncatedError"]

#: Old names, kept for one release. IntegrityError marked the errors against a trusted length,
#: which are TruncatedError and ExtraDataError (their reasons say "trusted length").
__getattr__ = renamed_classes(__name__, {"BadBlockLengthError": MalformedError, "InvalidKeyError": FormatError,
                                         "LengthMismatchError": IntegrityError})
