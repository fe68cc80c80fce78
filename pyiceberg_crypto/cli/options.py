"""What ``inspect`` and ``decrypt`` share: the key options and their parsing (hex keys, key
metadata), and their ``--json`` error document; and :class:`UsageError`, the commands' bad-input error."""

from __future__ import annotations

import argparse
import base64
import binascii
from typing import Any

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


def add_key_options(parser: argparse.ArgumentParser) -> None:
    """The key options of ``inspect`` and ``decrypt``."""
    parser.add_argument("--key", metavar="HEX", help="AGS1 file key, or Parquet footer key")
    parser.add_argument(
        "--column-key",
        action="append",
        default=[],
        metavar="PATH=HEX",
        help="Parquet column key by dotted column path (repeatable)",
    )
    parser.add_argument("--aad-prefix", metavar="HEX", help="AAD prefix (when not stored in the file)")
    parser.add_argument(
        "--key-metadata",
        metavar="BASE64",
        help="Iceberg StandardKeyMetadata (base64): supplies key, AAD prefix and length",
    )


def file_error_document(args: Any, kind: str, message: str, exc: BaseException) -> dict[str, Any]:
    """The ``--json`` document of ``inspect`` and ``decrypt`` when they fail (the error boundary's
    ``error_document``): an integrity failure as the file format's report shapes it (AGS1: one
    ``error``; Parquet and ``decrypt``: ``failures``), anything else as ``{"type", "reason"}``."""
    out: dict[str, Any] = {"file": getattr(args, "file", None)}
    file_format = getattr(args, "file_format", None)
    if kind == "integrity" and isinstance(exc, IntegrityError):
        if file_format:
            out["format"] = file_format
        out["ok"] = False
        if file_format == "Parquet" or getattr(args, "command", None) == "decrypt":
            out["failures"] = [error_dict(exc)]
        else:  # AGS1, or neither format although a key was given (BadMagicError)
            out["error"] = error_dict(exc)
        return out
    return {**out, "ok": False, "error": {"type": kind, "reason": message}}
