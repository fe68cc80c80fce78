"""Every exception a caller of the package can receive, in one module and under one root::

    from pyiceberg_crypto.errors import IntegrityError, PyicebergCryptoError, TableInputError

    try:
        report = verify_metadata(location, kms)
    except TableInputError as exc:      # the input cannot be used at all: no verdict
        ...
    except PyicebergCryptoError as exc:  # anything else this package raises on purpose
        ...

Each class below derives from :class:`PyicebergCryptoError` and keeps a standard base where one
fits (``ValueError`` for bad input, ``OSError`` for files, ``TimeoutError`` for a KMS call that
does not return), so existing ``except ValueError`` code keeps working. The layers raise these
classes; none defines its own (a test counts them: at most 25). Old names of folded classes stay
importable from their old modules for one release, with a ``DeprecationWarning`` (CHANGELOG.md).

Problems found *inside* a table's files are never exceptions of the verifier: they are findings
in its report. The reader raises them as :class:`IntegrityError` (:class:`ReadIntegrityError`).
Warnings are not errors: :class:`PyicebergCryptoWarning` is their base.
"""

from __future__ import annotations

from pyiceberg_crypto._deprecated import renamed_classes

__all__ = ["CONNECT_NEXT_STEP", "AadPrefixMismatchError", "ApiError", "ArgumentTypeError", "BadMagicError",
           "CatalogError", "CommitOutcomeUnknownError", "ConcurrentCommitError", "ExtraDataError", "FileAccessError",
           "FormatError", "IntegrityError", "InvalidArgumentError", "KmsError", "KmsTimeoutError", "LedgerError",
           "LocatedError", "MalformedError", "OperationError", "PyicebergCryptoError", "PyicebergCryptoWarning",
           "ReadIntegrityError", "ReportError", "SetupError", "TableInputError", "TagMismatchError", "TruncatedError",
           "UnknownKeyError"]


class PyicebergCryptoError(Exception):
    """The root of every exception this package raises on purpose."""


# --- arguments and input ---------------------------------------------------------------------

class InvalidArgumentError(PyicebergCryptoError, ValueError):
    """An argument, setting or option has a value that cannot be used: a timeout that is not
    positive, an empty name, a key id of the wrong form, a policy, TLS files, a credentials file, a
    listen address, a row filter or schema, a KMS that does not load, a master key the KMS does not
    know. The message names the argument and the value."""


class ArgumentTypeError(PyicebergCryptoError, TypeError):
    """An argument is not of a type the function can use: not a KMS, not a classic SparkSession
    (another object, a Spark Connect session, which has no driver JVM here, or a stopped one)."""


class TableInputError(PyicebergCryptoError, ValueError):
    """The input cannot be used at all: a metadata.json that is missing, unreadable, too large or
    not Iceberg table metadata, a location no FileIO reads, a table that is not encrypted, a
    malformed manifest, an unknown snapshot, catalog or table, conflicting options.

    Raised by the verifier, the reader and the key commands alike (no verdict, exit status 2)."""


class ReportError(TableInputError):
    """An earlier run's report (``encrypt --all-tables``, ``keys reencrypt --all-tables``, the lake
    audit) cannot be used: missing, unreadable, too large, not JSON, or another run's."""


class LedgerError(PyicebergCryptoError):
    """The verifier's ledger cannot be used: unreadable, corrupt, or the memory of another table."""


# --- files and setup -------------------------------------------------------------------------

class FileAccessError(PyicebergCryptoError, OSError):
    """A file or directory cannot be used as needed: it cannot be written (its directory is
    missing, not writable, the disk is full), it is not a regular file, it is larger than its
    limit, or it is unsafe (an operator file or keystore another user may read or replace).

    An ``OSError``: ``errno`` and ``filename`` are set where the system gave them (``errno.EINVAL``
    for a file that is not a regular one, ``errno.EFBIG`` for one over its limit); the message is
    the one given."""

    def __init__(self, message: str, *, errno: int | None = None, filename: str | None = None,
                 strerror: str | None = None):
        super().__init__(message)
        self.errno, self.filename = errno, filename
        self.strerror = strerror if strerror is not None else message

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class SetupError(PyicebergCryptoError, RuntimeError):
    """What the package needs around it is missing or unusable: a jar (not downloaded, a bad
    checksum), an unsupported Java or Spark, the KMS bridge or ``kms serve`` that cannot start (an
    address in use, an unwritable token file, unreadable TLS files); the message says which."""


class OperationError(PyicebergCryptoError, RuntimeError):
    """A key or adoption operation (``encrypt``, ``keys rewrap``, ``prune``, ``reencrypt``) cannot
    proceed or stopped: the message says where, and the table is unchanged (or, for an adoption,
    keeps its name and rows: running again finishes the job)."""


# --- catalogs --------------------------------------------------------------------------------

class CatalogError(PyicebergCryptoError):
    """A catalog (a Hive metastore, a REST catalog) cannot be asked, refused the request, or does
    not know the table as an Iceberg table; also a catalog of a kind that cannot be asked.
    ``status`` is the HTTP status when a REST catalog answered."""

    def __init__(self, message: str, *, status: int | None = None):
        super().__init__(message)
        self.status = status


class ConcurrentCommitError(CatalogError):
    """The catalog refused a compare-and-swap: the table changed since it was read (retry)."""


class CommitOutcomeUnknownError(CatalogError, RuntimeError):
    """A commit was sent to a catalog, but whether it landed is unknown (Iceberg's
    CommitStateUnknownException): the catalog answered with a redirect (3xx, never followed for a
    commit), a server error (5xx), or not at all. Reload the table to see whether it landed before
    retrying; ``status`` is the HTTP status when the server answered."""


# --- key management --------------------------------------------------------------------------

class KmsError(PyicebergCryptoError):
    """A KMS (or the keystore file behind one) refused or failed an operation: access denied, a
    ciphertext that is not one of its blobs or was made with another key, a configuration it
    refuses, an audit trail that cannot record the call, a keystore that cannot be changed.

    ``code`` is the AWS KMS error type the AWS face answers with where the kind matters
    (``"IncorrectKeyException"``, ``"InvalidCiphertextException"``, ``"AccessDeniedException"``,
    ``"KMSInternalException"``), else None."""

    def __init__(self, message: str, *, code: str | None = None):
        super().__init__(message)
        self.code = code


class UnknownKeyError(KmsError):
    """The KMS does not know the key id (or the version a wrapped key names); with a policy in
    force, also a key this client may not use (one answer for both: no key-id enumeration)."""


class KmsTimeoutError(PyicebergCryptoError, TimeoutError):
    """A KMS call did not return within its timeout (the call may still be running)."""


class ApiError(PyicebergCryptoError):
    """An AWS JSON error answer of a KMS face: ``{"__type": code, "message": ...}`` with ``status``,
    including a request whose SigV4 signature is not believed. ``reason`` (a refusal label of
    :data:`~pyiceberg_crypto.serve.aws.http.REFUSAL_REASONS`) is set on refusals of requests not
    known to be signed: an error without one answers a validly signed request."""

    def __init__(self, code: str, message: str, status: int = 400, reason: str | None = None):
        super().__init__(message)
        self.code, self.message, self.status, self.reason = code, message, status, reason


# --- files' bytes: formats and integrity -----------------------------------------------------

class LocatedError:
    """Mixin of errors that say where: ``file``, ``location`` in it, and ``reason``; the message
    is ``"file: location: reason"`` (the parts that are known)."""

    def __init__(self, reason: str, *, file: str | None = None, location: str | None = None):
        self.file = file
        self.location = location
        self.reason = reason
        parts = [p for p in (file, location) if p]
        super().__init__(f"{': '.join(parts)}: {reason}" if parts else reason)


class FormatError(LocatedError, PyicebergCryptoError, ValueError):
    """The input is not a file or structure of the expected format (Thrift, Avro key metadata, a
    deletion vector), or what reading it needs is wrong: a key that is not an AES key (16, 24 or
    32 bytes), a key or AAD prefix that was not given. ``file``, ``location`` and ``reason`` say
    where, when known."""


class IntegrityError(LocatedError, PyicebergCryptoError):
    """A file failed authentication or structural checks: an encrypted data or metadata file, a
    keystore file that is not a valid keystore, a copy an adoption made (its rows or its proof).

    Attributes:
        file: a name for the file (path or caller-supplied label), or None.
        location: where in the file, e.g. ``"block 3"`` or ``"row group 0, column 'a', data page 2"``.
        reason: a short human-readable reason.
    """


class MalformedError(IntegrityError):
    """Bytes that should be a structure do not parse, or its lengths and offsets are inconsistent:
    an AGS1 header's block length, a Parquet footer, page header, index or column metadata."""


class BadMagicError(IntegrityError):
    """The file does not start (or end) with the expected magic bytes."""


class TagMismatchError(IntegrityError):
    """AES-GCM authentication failed: tampered bytes, wrong key, wrong AAD, or a moved block/module."""


class TruncatedError(IntegrityError):
    """The file is shorter than its trusted length, or ends inside a block or structure."""


class ExtraDataError(IntegrityError):
    """The file has bytes after its last block or past its trusted length."""


class AadPrefixMismatchError(IntegrityError):
    """The caller's AAD prefix differs from the one stored in the file (the file identity)."""


class ReadIntegrityError(IntegrityError):
    """A file or key a table's read (or a verification's walk) needs is not what the table says:
    tampered, truncated, replaced, in plaintext, outside the table, or its key cannot be had.
    ``status`` is the verifier's word for it (``TAMPERED``, ``TRUNCATED``, ``PLAINTEXT``,
    ``OUTSIDE_TABLE``, ``KEY_ERROR`` (the KMS refused, or the master key or its version is unknown
    to it: nothing is said about the files' authenticity), ...)."""

    def __init__(self, reason: str, *, file: str | None = None, location: str | None = None, status: str = "TAMPERED"):
        super().__init__(reason, file=file, location=location)
        self.status = status

    @classmethod
    def from_finding(cls, finding) -> ReadIntegrityError:
        """The error of a verifier's :class:`~pyiceberg_crypto.verify.report.FileFinding` that is not OK."""
        return cls(f"{finding.status}: {finding.detail}", file=finding.path, location=finding.location,
                   status=finding.status)


# --- warnings --------------------------------------------------------------------------------

class PyicebergCryptoWarning(UserWarning):
    """The base of the package's warnings (not errors: nothing stopped). Silence them all with
    ``warnings.filterwarnings("ignore", category=PyicebergCryptoWarning)``."""


#: What a Spark Connect user does instead (no driver JVM in the client): appended to the errors.
CONNECT_NEXT_STEP = (
    ". With Spark Connect, serve the KMS to the Connect server with `pyiceberg-crypto kms serve` (its catalog "
    "takes `kms_service=`), and check tables without a JVM from this client: `pyiceberg-crypto verify "
    "METADATA_JSON`, `pyiceberg-crypto audit --metastore-uri thrift://... | --rest-uri http://...`, "
    "`pyiceberg-crypto keys where-used KEY_ID --metastore-uri ... | --rest-uri ...`, or "
    "verify_metadata(metadata_location, kms) in Python"
)


#: Old names of classes that were defined here, kept for one release (CHANGELOG.md).
__getattr__ = renamed_classes(__name__, {"ConfigError": InvalidArgumentError, "NotASparkSessionError": ArgumentTypeError,
                                         "MetastoreError": CatalogError, "RestCatalogError": CatalogError})
