"""The package's exceptions share one root, so a caller can write one ``except``::

    from pyiceberg_crypto.errors import PyicebergCryptoError, TableInputError

    try:
        report = verify_metadata(location, kms)
    except TableInputError as exc:      # the input cannot be used at all: no verdict
        ...
    except PyicebergCryptoError as exc:  # anything else this package raises on purpose
        ...

Every exception class of the package derives from :class:`PyicebergCryptoError`; most also keep a
standard base where one fits (``ValueError`` for bad input, ``OSError`` for files, ``TimeoutError``
for a KMS call that does not return), so existing ``except ValueError`` code keeps working.

Problems found *inside* a table's files are never exceptions of the verifier: they are findings
in its report. The reader raises them as :class:`~pyiceberg_crypto.formats.errors.IntegrityError`.
"""

from __future__ import annotations


class PyicebergCryptoError(Exception):
    """The root of every exception this package defines."""


class TableInputError(PyicebergCryptoError, ValueError):
    """The input cannot be used at all: a metadata.json that is missing, unreadable, too large or
    not Iceberg table metadata, an unknown snapshot, catalog or table, conflicting options.

    Raised by the verifier, the reader and the key commands alike (no verdict, exit status 2)."""


class InvalidArgumentError(PyicebergCryptoError, ValueError):
    """An argument has a value the function cannot use (a timeout that is not positive, an empty
    name); the message names the argument and the value."""


class ArgumentTypeError(PyicebergCryptoError, TypeError):
    """An argument is not of a type the function can use (not a KMS, not a SparkSession)."""


class NotASparkSessionError(ArgumentTypeError):
    """A function that works through Spark got no classic SparkSession: another object, a Spark
    Connect session (it has no driver JVM here) or a stopped one."""


__all__ = ["ArgumentTypeError", "InvalidArgumentError", "NotASparkSessionError", "PyicebergCryptoError",
           "TableInputError"]
