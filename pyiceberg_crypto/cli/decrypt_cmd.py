"""``pyiceberg-crypto decrypt FILE OUT``: write the plaintext Parquet version of an encrypted
Parquet file (a thin layer over :func:`pyiceberg_crypto.formats.parquet.decrypt.decrypt_parquet`).

Same key options as ``inspect``. The output is written to a temporary file next to OUT and
renamed only when every module authenticated, so a failure never leaves partial plaintext.
Exit status: 0 written, 1 integrity failure, 2 usage error / unreadable input / missing key.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os

from pyiceberg_crypto._atomic import PRIVATE, atomic_writer
from pyiceberg_crypto.cli.inspect_parquet import keys_from_args
from pyiceberg_crypto.exit_status import ExitStatus
from pyiceberg_crypto.cli.options import UsageError, add_key_options, file_error_document
from pyiceberg_crypto.errors import TableInputError
from pyiceberg_crypto.formats.parquet.decrypt import decrypt_parquet


def add_parser(sub) -> None:
    decrypt = sub.add_parser("decrypt", help="decrypt an encrypted Parquet file to plaintext Parquet")
    decrypt.add_argument("file", metavar="FILE", help="the encrypted Parquet file (PARE)")
    decrypt.add_argument("out", metavar="OUT", help="where to write the plaintext Parquet file (PAR1)")
    add_key_options(decrypt)
    decrypt.add_argument("--json", action="store_true", help="print a JSON report")
    decrypt.set_defaults(run=run_decrypt, error_document=file_error_document)


def run_decrypt(args: argparse.Namespace) -> int:
    """Run ``decrypt``; returns the exit status (failures raise, for the error boundary)."""
    keys, expected_size = keys_from_args(args)
    try:
        with open(args.file, "rb") as handle:
            magic = handle.read(4)
    except OSError as exc:
        raise TableInputError(f"cannot read {args.file}: {exc.strerror or exc}") from None
    if magic not in (b"PAR1", b"PARE"):
        raise UsageError(f"{args.file}: decrypt supports Parquet files only (starts with {magic!r})")
    if os.path.exists(args.out) and os.path.samefile(args.file, args.out):
        raise UsageError("OUT must differ from FILE")
    # Plaintext of encrypted data: private to its owner (0600), and renamed into place only
    # when every module authenticated (an error removes the temporary file).
    with open(args.file, "rb") as handle, atomic_writer(args.out, mode=PRIVATE) as out:
        result = decrypt_parquet(handle, out, keys, name=args.file, expected_size=expected_size)
    if args.json:
        print(json.dumps({"ok": True, "out": args.out, **dataclasses.asdict(result)}))
    else:
        note = "" if result.was_encrypted else " (input was not encrypted)"
        modules = sum(result.authenticated.values())
        print(
            f"{args.file} -> {args.out}: {result.output_size} bytes, {result.row_groups} row groups, "
            f"{result.column_chunks} column chunks, {modules} modules authenticated{note}"
        )
        if result.unauthenticated:
            print(f"  note: {sum(result.unauthenticated.values())} AES_GCM_CTR_V1 pages were decrypted without authentication")
    return ExitStatus.OK
