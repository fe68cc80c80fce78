"""``pyiceberg-crypto inspect FILE`` for Parquet files: a thin printing layer over
:func:`pyiceberg_crypto.formats.parquet.verify.verify_parquet`.

Keys: ``--key HEX`` (footer key), ``--column-key PATH=HEX`` (repeatable, dotted column path),
``--aad-prefix HEX``, or ``--key-metadata BASE64`` (Iceberg StandardKeyMetadata: DEK = footer key,
AAD prefix, and the trusted file length when recorded).

Exit status:
    0  every encrypted module authenticated (or the file is not encrypted: reported as such)
    1  an integrity failure (message names file, row group, column, page and module type)
    2  usage error, unreadable input, or a key/AAD prefix missing so that some part of the file
       could not be verified (the report lists what was not verifiable; never a silent pass)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from pyiceberg_crypto.exit_status import ExitStatus
from pyiceberg_crypto.properties import AES_KEY_LENGTHS
from pyiceberg_crypto.cli.options import UsageError, error_dict, parse_aes_key, parse_hex, parse_key_metadata
from pyiceberg_crypto.errors import TableInputError
from pyiceberg_crypto.formats.parquet.reader import ParquetKeys
from pyiceberg_crypto.formats.parquet.verify import VerificationReport, verify_parquet



def keys_from_args(args: argparse.Namespace) -> tuple[ParquetKeys, int | None]:
    """``(keys, trusted file size)`` from the command-line options; UsageError when inconsistent."""
    if getattr(args, "length", None) is not None:
        raise UsageError("--length applies to AGS1 files; a Parquet file's trusted size comes from --key-metadata")
    footer_key = parse_aes_key(args.key, "--key") if args.key else None
    aad_prefix = parse_hex(args.aad_prefix, "--aad-prefix") if args.aad_prefix is not None else None
    expected_size = None
    if args.key_metadata:
        if args.key or args.aad_prefix is not None:
            raise UsageError("give either --key-metadata or --key/--aad-prefix, not both")
        metadata = parse_key_metadata(args.key_metadata)
        footer_key, aad_prefix, expected_size = metadata.encryption_key, metadata.aad_prefix, metadata.file_length
        if len(footer_key) not in AES_KEY_LENGTHS:
            raise UsageError(f"--key-metadata: AES key must be 16, 24 or 32 bytes, got {len(footer_key)}")
    column_keys: dict[str, bytes] = {}
    for item in args.column_key or []:
        path, sep, value = item.partition("=")
        if not sep or not path:
            raise UsageError(f"--column-key expects PATH=HEX, got {item.split('=')[0]!r}...")
        if path in column_keys:
            raise UsageError(f"--column-key given twice for {path!r}")
        column_keys[path] = parse_aes_key(value, f"--column-key {path}")
    return ParquetKeys(footer_key, column_keys, aad_prefix), expected_size


def report_dict(report: VerificationReport) -> dict[str, Any]:
    data = dataclasses.asdict(dataclasses.replace(report, failures=[]))
    data["failures"] = [error_dict(err) for err in report.failures]
    data.update(format="Parquet", ok=report.ok)
    return data


def format_report(report: VerificationReport) -> str:
    if not report.encrypted:
        return f"{report.file}: Parquet, not encrypted (plain PAR1; nothing to authenticate)"
    layout = "encrypted footer (PARE)" if report.encrypted_footer else "plaintext footer (PAR1, signed)"
    prefix = "stored in file" if report.aad_prefix_stored else ("required, not stored" if report.supply_aad_prefix else "none")
    footer = {True: "authenticated", None: "NOT VERIFIED (no footer key)", False: "FAILED"}[report.footer_verified]
    lines = [
        f"{report.file}: Parquet, encrypted",
        f"  layout:        {layout}",
        f"  algorithm:     {report.algorithm}",
        f"  AAD prefix:    {prefix}",
        f"  footer:        {footer}",
        f"  rows:          {report.num_rows}, row groups: {report.row_groups}",
        "  authenticated modules:",
    ]
    lines += [f"    {name:<24}{count}" for name, count in report.authenticated.items()] or ["    (none)"]
    if report.unauthenticated:
        lines.append("  decrypted but not authenticated (AES_GCM_CTR_V1 pages have no tag):")
        lines += [f"    {name:<24}{count}" for name, count in report.unauthenticated.items()]
    if report.plaintext_pages:
        lines.append(f"  plaintext pages (unencrypted columns): {report.plaintext_pages}")
    if report.v2_pages_with_plaintext_levels:
        lines.append(
            f"  v2 data pages with plaintext, unauthenticated levels (parquet-java layout): "
            f"{report.v2_pages_with_plaintext_levels} ({report.v2_plaintext_level_bytes} level bytes)"
        )
    columns: dict[str, str] = {}
    for column in report.columns:
        columns.setdefault(column.path, column.encryption)
    lines.append("  columns:")
    lines += [f"    {path}: {kind}" for path, kind in columns.items()]
    for item in report.not_verifiable:
        lines.append(f"  NOT VERIFIABLE: {item}")
    for err in report.failures:
        lines.append(f"  FAILED: {err.location}: {err.reason}")
    return "\n".join(lines)


def inspect_parquet(args: argparse.Namespace) -> int:
    """Run ``inspect`` on a Parquet file; returns the exit status (failures raise, for the error boundary)."""
    args.file_format = "Parquet"
    keys, expected_size = keys_from_args(args)
    try:
        with open(args.file, "rb") as handle:
            report = verify_parquet(handle, keys, name=args.file, expected_size=expected_size)
    except OSError as exc:
        raise TableInputError(f"cannot read {args.file}: {exc.strerror or exc}") from None
    print(json.dumps(report_dict(report)) if args.json else format_report(report))
    if report.failures:  # the report (JSON or text) is printed: the verdict's one line on stderr
        print(f"pyiceberg-crypto inspect: integrity failure: {report.failures[0]}", file=sys.stderr)
        return ExitStatus.INTEGRITY
    if report.not_verifiable:
        print(f"pyiceberg-crypto inspect: {args.file}: not verifiable without more keys: "
              + "; ".join(report.not_verifiable), file=sys.stderr)
        return ExitStatus.USAGE
    return ExitStatus.OK
