"""``pyiceberg-crypto inspect FILE``: dispatch on the file's magic to the AGS1 or Parquet inspector."""

from __future__ import annotations

import argparse

from pyiceberg_crypto.cli.options import integrity_failure, unreadable_failure, usage_failure


def sniff_magic(path: str) -> bytes:
    """The first four bytes of ``path`` (raises OSError when unreadable)."""
    with open(path, "rb") as handle:
        return handle.read(4)


def run_inspect(args: argparse.Namespace) -> int:
    try:
        magic = sniff_magic(args.file)
    except OSError as exc:
        return unreadable_failure(args.file, exc, args)
    if magic == b"AGS1":
        from pyiceberg_crypto.cli.inspect_ags1 import inspect_ags1

        return inspect_ags1(args)
    if magic in (b"PAR1", b"PARE"):
        from pyiceberg_crypto.cli.inspect_parquet import inspect_parquet

        return inspect_parquet(args)
    reason = f"not an AGS1 or Parquet file (starts with {magic!r})"
    if args.key or args.key_metadata:  # a key was given: the file is expected to be encrypted
        error = {"type": "BadMagicError", "location": "header", "reason": reason}
        return integrity_failure(f"{args.file}: header: {reason}", args, error)
    return usage_failure(f"{args.file}: {reason}", args)
