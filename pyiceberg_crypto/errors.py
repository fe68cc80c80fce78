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


class ReportError(TableInputError):
    """An earlier run's report cannot be used: unreadable, too large, not a report of this command,
    another catalog."""


class InvalidArgumentError(PyicebergCryptoError, ValueError):
    """An argument has a value the function cannot use (a timeout that is not positive, an empty
    name); the message names the argument and the value."""


class ArgumentTypeError(PyicebergCryptoError, TypeError):
    """An argument is not of a type the function can use (not a KMS, not a SparkSession)."""


class NotASparkSessionError(ArgumentTypeError):
    """A function that works through Spark got no classic SparkSession: another object, a Spark
    Connect session (it has no driver JVM here) or a stopped one."""


class ConfigError(PyicebergCryptoError, ValueError):
    """Invalid configuration input (:mod:`pyiceberg_crypto.config`); the message says which argument and why."""


class MetastoreError(PyicebergCryptoError):
    """A Hive metastore cannot be asked, or does not know the table as an Iceberg table
    (:mod:`pyiceberg_crypto.catalog.hive`; also a catalog of a kind that cannot be asked)."""


class ConcurrentCommitError(MetastoreError):
    """The metastore refused a compare-and-swap: the parameter no longer has the expected value."""


class RestCatalogError(PyicebergCryptoError):
    """A REST catalog cannot be asked, refused the request, or does not know the table
    (:mod:`pyiceberg_crypto.catalog.rest`); ``status`` is the HTTP status when the server answered."""

    def __init__(self, message: str, *, status: int | None = None):
        super().__init__(message)
        self.status = status


class CommitOutcomeUnknownError(RestCatalogError, RuntimeError):
    """A commit was sent to a catalog, but whether it landed is unknown (Iceberg's
    CommitStateUnknownException): the catalog answered with a redirect (3xx, never followed for a
    commit), a server error (5xx), or not at all. Reload the table to see whether it landed before
    retrying; ``status`` is the HTTP status when the server answered."""


#: What a Spark Connect user does instead (no driver JVM in the client): appended to the errors.
CONNECT_NEXT_STEP = (
    ". With Spark Connect, serve the KMS to the Connect server with `pyiceberg-crypto kms serve` (its catalog "
    "takes `kms_service=`), and check tables without a JVM from this client: `pyiceberg-crypto verify "
    "METADATA_JSON`, `pyiceberg-crypto audit --metastore-uri thrift://... | --rest-uri http://...`, "
    "`pyiceberg-crypto keys where-used KEY_ID --metastore-uri ... | --rest-uri ...`, or "
    "verify_metadata(metadata_location, kms) in Python"
)


__all__ = ["CONNECT_NEXT_STEP", "ArgumentTypeError", "CommitOutcomeUnknownError", "ConcurrentCommitError", "ConfigError", "InvalidArgumentError",
           "MetastoreError", "NotASparkSessionError", "PyicebergCryptoError", "ReportError", "RestCatalogError",
           "TableInputError"]
