"""One exception family for every integrity failure found while reading encrypted files.

Each error names *where* (file, and block or module) and *why*, never key material::

    try:
        data = reader.read()
    except IntegrityError as err:
        print(err.file, err.location, err.reason)

Subclasses narrow the reason so callers and tests can match precisely.
"""

from __future__ import annotations

from pyiceberg_crypto.errors import PyicebergCryptoError

__all__ = ["BadBlockLengthError", "BadMagicError", "ExtraDataError", "FormatError", "IntegrityError",
           "InvalidKeyError", "LengthMismatchError", "LocatedError", "TagMismatchError", "TruncatedError"]


class FormatError(PyicebergCryptoError):
    """The input is not a file of the expected format (or the caller's arguments are wrong)."""


class InvalidKeyError(FormatError, ValueError):
    """A key that is not an AES key (16, 24 or 32 bytes): the one error every codec raises for it."""


class LocatedError:
    """Mixin of errors that say where: ``file``, ``location`` in it, and ``reason``; the message
    is ``"file: location: reason"`` (the parts that are known)."""

    def __init__(self, reason: str, *, file: str | None = None, location: str | None = None):
        self.file = file
        self.location = location
        self.reason = reason
        parts = [p for p in (file, location) if p]
        super().__init__(f"{': '.join(parts)}: {reason}" if parts else reason)


class IntegrityError(LocatedError, PyicebergCryptoError):
    """An encrypted file failed authentication or structural checks.

    Attributes:
        file: a name for the file (path or caller-supplied label), or None.
        location: where in the file, e.g. ``"block 3"`` or ``"row group 0, column 'a', data page 2"``.
        reason: a short human-readable reason.
    """


class BadMagicError(IntegrityError):
    """The file does not start (or end) with the expected magic bytes."""


class BadBlockLengthError(IntegrityError):
    """The declared block length is invalid (zero, negative or inconsistent)."""


class TagMismatchError(IntegrityError):
    """AES-GCM authentication failed: tampered bytes, wrong key, wrong AAD, or a moved block/module."""


class TruncatedError(IntegrityError):
    """The file is shorter than its trusted length, or ends inside a block or structure."""


class ExtraDataError(IntegrityError):
    """The file has bytes after its last block or past its trusted length."""


class LengthMismatchError(IntegrityError):
    """The plaintext length differs from the trusted length recorded in key metadata."""
