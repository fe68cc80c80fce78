"""``pyiceberg-crypto inspect FILE``: dispatch on the file's magic to the AGS1 or Parquet inspector."""

from __future__ import annotations

import argparse

from pyiceberg_crypto.cli.options import UsageError, add_key_options, file_error_document
from pyiceberg_crypto.errors import TableInputError
from pyiceberg_crypto.formats.errors import BadMagicError


def add_parser(sub) -> None:
    inspect = sub.add_parser(
        "inspect",
        help="describe an encrypted file (AGS1 or Parquet) and authenticate it when keys are given",
    )
    inspect.add_argument("file", metavar="FILE", help="the file: a manifest or manifest list (AGS1) or a Parquet data file")
    add_key_options(inspect)
    inspect.add_argument("--length", type=int, metavar="N", help="trusted plaintext length (AGS1)")
    inspect.add_argument("--json", action="store_true", help="print a JSON report")
    inspect.set_defaults(run=run_inspect, error_document=file_error_document)


def sniff_magic(path: str) -> bytes:
    """The first four bytes of ``path``; TableInputError when it cannot be read."""
    try:
        with open(path, "rb") as handle:
            return handle.read(4)
    except OSError as exc:
        raise TableInputError(f"cannot read {path}: {exc.strerror or exc}") from None


def run_inspect(args: argparse.Namespace) -> int:
    magic = sniff_magic(args.file)
    if magic == b"AGS1":
        from pyiceberg_crypto.cli.inspect_ags1 import inspect_ags1

        return inspect_ags1(args)
    if magic in (b"PAR1", b"PARE"):
        from pyiceberg_crypto.cli.inspect_parquet import inspect_parquet

        return inspect_parquet(args)
    reason = f"not an AGS1 or Parquet file (starts with {magic!r})"
    if args.key or args.key_metadata:  # a key was given: the file is expected to be encrypted
        raise BadMagicError(reason, file=args.file, location="header")
    raise UsageError(f"{args.file}: {reason}")
