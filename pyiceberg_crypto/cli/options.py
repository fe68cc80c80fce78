"""What ``inspect`` and ``decrypt`` share: parsing of the key options (hex keys, key metadata) and
the one-line error reports with their exit statuses."""

from __future__ import annotations

import base64
import binascii
import json
import sys
from typing import Any

from pyiceberg_crypto.exit_status import ExitStatus
from pyiceberg_crypto.formats.errors import FormatError, IntegrityError
from pyiceberg_crypto.formats.key_metadata import StandardKeyMetadata
from pyiceberg_crypto.errors import PyicebergCryptoError
from pyiceberg_crypto.properties import AES_KEY_LENGTHS



class UsageError(PyicebergCryptoError, ValueError):
    """Bad or inconsistent command-line input (exit status 2): the one error the commands raise for
    it (a ``ValueError``, so every command's usage handling catches it)."""


def local_session_catalog(table: str, warehouse: object) -> str | None:
    """The name a command's own local session (``--warehouse``) gives its catalog: the first part of
    ``table`` as CATALOG.DB.TABLE. UsageError for a shorter name there, before Spark starts (a
    ``db.table`` would make a catalog called ``db``; no catalog name is made up). Without
    ``--warehouse`` the session spark-submit configured has catalogs of its own: None::

        local_session_catalog("lake.db.t", "wh")   # "lake"
        local_session_catalog("db.t", None)        # None: the spark-submit session resolves it
    """
    if not warehouse:
        return None
    parts = table.split(".")
    if len(parts) < 3 or not all(parts):
        raise UsageError(f"with --warehouse, give the table as CATALOG.DB.TABLE (the local session's catalog "
                         f"takes its first part's name), not {table!r}")
    return parts[0]


def parse_hex(value: str, option: str) -> bytes:
    """Bytes from a hex option value; UsageError naming the option otherwise."""
    try:
        return bytes.fromhex(value)
    except ValueError:
        raise UsageError(f"{option} is not valid hex") from None


def parse_aes_key(value: str, option: str) -> bytes:
    """An AES key (16, 24 or 32 bytes) from a hex option value."""
    key = parse_hex(value, option)
    if len(key) not in AES_KEY_LENGTHS:
        raise UsageError(f"{option}: AES key must be 16, 24 or 32 bytes, got {len(key)}")
    return key


def parse_key_metadata(value: str, option: str = "--key-metadata") -> StandardKeyMetadata:
    """Iceberg ``StandardKeyMetadata`` from a base64 option value."""
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise UsageError(f"{option} is not valid base64") from None
    try:
        return StandardKeyMetadata.parse(raw)
    except FormatError as exc:
        raise UsageError(f"{option}: {exc}") from None


def error_dict(err: IntegrityError) -> dict[str, Any]:
    """An integrity failure as JSON-ready data (Parquet failures add their module coordinates)."""
    module = getattr(err, "module", None)
    out: dict[str, Any] = {"type": type(err).__name__, "location": err.location, "reason": err.reason}
    if module is not None:
        out.update(
            module_type=module.module_type.label,
            row_group=module.row_group,
            column=module.column_path,
            page=module.page,
        )
    return out


def usage_failure(message: object, args: Any = None, kind: str = "usage") -> int:
    """Report a usage error or unusable input on stderr (and as JSON on stdout with ``--json``);
    returns exit status 2."""
    if getattr(args, "json", False):
        print(json.dumps({"file": getattr(args, "file", None), "ok": False,
                          "error": {"type": kind, "reason": str(message)}}))
    print(f"pyiceberg-crypto: {message}", file=sys.stderr)
    return ExitStatus.USAGE


def unreadable_failure(path: str, exc: OSError, args: Any = None) -> int:
    """Report an input file that cannot be read; returns exit status 2."""
    return usage_failure(f"cannot read {path}: {exc.strerror or exc}", args, kind="unreadable")


def integrity_failure(exc: object, args: Any = None, error: dict[str, Any] | None = None) -> int:
    """Report an integrity failure (file, block/module, reason) on stderr (and, with ``--json``
    and an ``error`` dict, as JSON on stdout); returns exit status 1."""
    if error is not None and getattr(args, "json", False):
        print(json.dumps({"file": getattr(args, "file", None), "ok": False, "error": error}))
    print(f"pyiceberg-crypto: integrity failure: {exc}", file=sys.stderr)
    return ExitStatus.INTEGRITY
