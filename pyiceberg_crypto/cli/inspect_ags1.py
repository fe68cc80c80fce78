"""``pyiceberg-crypto inspect FILE`` for AGS1 files: a thin printing layer over
:mod:`pyiceberg_crypto.formats.ags1`.

Without a key it prints the header facts (block size, block count, plaintext length derived from
the stored length); with ``--key`` (+ ``--aad-prefix``) or ``--key-metadata`` it authenticates
every block. ``--length`` is a trusted plaintext length; the key metadata's ``file_length`` is a
trusted stored length. Exit status: 0 ok, 1 integrity failure, 2 usage error / unreadable input.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

from pyiceberg_crypto.exit_status import ExitStatus
from pyiceberg_crypto.cli.options import UsageError, parse_hex, parse_key_metadata
from pyiceberg_crypto.errors import TableInputError
from pyiceberg_crypto.formats.ags1 import (
    Ags1Report,
    check_key,
    check_trusted_lengths,
    read_layout,
    verify_ags1,
)


@dataclasses.dataclass(frozen=True)
class Ags1Keys:
    key: bytes | None
    aad_prefix: bytes
    length: int | None  # trusted plaintext length
    file_length: int | None  # trusted stored length (from key metadata)


def keys_from_args(args: argparse.Namespace) -> Ags1Keys:
    """Collect key, AAD prefix and trusted lengths from the options; UsageError when inconsistent."""
    if getattr(args, "column_key", None):
        raise UsageError("--column-key applies to Parquet files, not AGS1")
    if args.length is not None and args.length < 0:
        raise UsageError("--length must be >= 0")
    file_length = None
    if args.key_metadata:
        if args.key or args.aad_prefix:
            raise UsageError("give either --key-metadata or --key/--aad-prefix, not both")
        metadata = parse_key_metadata(args.key_metadata)
        key, aad, file_length = metadata.encryption_key, metadata.aad_prefix or b"", metadata.file_length
    else:
        key = parse_hex(args.key, "--key") if args.key else None
        aad = parse_hex(args.aad_prefix, "--aad-prefix") if args.aad_prefix else b""
        if aad and key is None:
            raise UsageError("--aad-prefix needs --key")
    if key is not None:
        check_key(key)  # a FormatError naming the length: exit 2
    return Ags1Keys(key, aad, args.length, file_length)


def examine(path: str, keys: Ags1Keys) -> Ags1Report:
    """Verify (with a key) or describe (without) one AGS1 file; raises IntegrityError / OSError."""
    if keys.key is not None:
        return verify_ags1(
            path, keys.key, keys.aad_prefix, keys.length, path, file_length=keys.file_length
        )
    with open(path, "rb") as handle:
        geometry = read_layout(handle, name=path)
    check_trusted_lengths(geometry, length=keys.length, file_length=keys.file_length, file=path)
    return Ags1Report(
        file=path,
        block_size=geometry.block_size,
        block_count=geometry.block_count,
        plaintext_length=geometry.plaintext_length,
        encrypted_length=geometry.encrypted_length,
        authenticated=False,
    )


def format_report(report: Ags1Report, keys: Ags1Keys) -> str:
    if report.authenticated:
        status = f"yes, all {report.block_count} blocks (AES-{len(keys.key) * 8}-GCM)"
        if report.block_count == 0:
            status = "nothing to authenticate (header only, no block)"
    else:
        status = "no (no key given; sizes derived from the stored length)"
    return "\n".join(
        [
            f"{report.file}: AGS1 (AES GCM Stream)",
            f"  block size:       {report.block_size} bytes",
            f"  blocks:           {report.block_count}",
            f"  plaintext length: {report.plaintext_length} bytes",
            f"  stored length:    {report.encrypted_length} bytes",
            f"  authenticated:    {status}",
        ]
    )


def inspect_ags1(args: argparse.Namespace) -> int:
    """Run ``inspect`` on an AGS1 file; returns the exit status (failures raise, for the error boundary)."""
    args.file_format = "AGS1"
    keys = keys_from_args(args)
    try:
        report = examine(args.file, keys)
    except OSError as exc:
        raise TableInputError(f"cannot read {args.file}: {exc.strerror or exc}") from None
    if args.json:
        print(json.dumps({"format": "AGS1", "ok": True, **dataclasses.asdict(report)}))
    else:
        print(format_report(report, keys))
    return ExitStatus.OK
