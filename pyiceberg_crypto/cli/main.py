"""Entry point of the ``pyiceberg-crypto`` console script.

Exit status contract (all subcommands):
    0  success: every block/module that could be checked authenticated
    1  integrity failure: the message names the file, the block/module and the reason
    2  usage error or unreadable input
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pyiceberg_crypto.exit_status import ExitStatus


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pyiceberg-crypto",
        description="Encrypted Iceberg tables from PySpark, and an independent verifier.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    inspect = sub.add_parser(
        "inspect",
        help="describe an encrypted file (AGS1 or Parquet) and authenticate it when keys are given",
    )
    inspect.add_argument("file", metavar="FILE", help="the file: a manifest or manifest list (AGS1) or a Parquet data file")
    _add_key_options(inspect)
    inspect.add_argument("--length", type=int, metavar="N", help="trusted plaintext length (AGS1)")
    inspect.add_argument("--json", action="store_true", help="print a JSON report")

    decrypt = sub.add_parser("decrypt", help="decrypt an encrypted Parquet file to plaintext Parquet")
    decrypt.add_argument("file", metavar="FILE", help="the encrypted Parquet file (PARE)")
    decrypt.add_argument("out", metavar="OUT", help="where to write the plaintext Parquet file (PAR1)")
    _add_key_options(decrypt)
    decrypt.add_argument("--json", action="store_true", help="print a JSON report")

    from pyiceberg_crypto.cli.verify_cmd import add_verify_parser

    add_verify_parser(sub)

    from pyiceberg_crypto.cli.audit_cmd import add_audit_parser

    add_audit_parser(sub)

    demo = sub.add_parser("demo", help="run the end-to-end demo on local Spark")
    demo.add_argument("--workdir", default="demo-warehouse", help="where the demo writes (default: %(default)s)")
    demo.add_argument("--keep", action="store_true", help="keep the previous demo directory contents")

    from pyiceberg_crypto.cli.keystore_cmd import add_keystore_parser

    add_keystore_parser(sub)

    from pyiceberg_crypto.cli.jars_cmd import add_jars_parser

    add_jars_parser(sub)

    from pyiceberg_crypto.cli.keys_cmd import add_keys_parser

    add_keys_parser(sub)

    from pyiceberg_crypto.cli.head_cmd import add_head_parser

    add_head_parser(sub)

    from pyiceberg_crypto.cli.kms_cmd import add_kms_parser

    add_kms_parser(sub)

    from pyiceberg_crypto.cli.encrypt_cmd import add_encrypt_parser

    add_encrypt_parser(sub)
    _describe(parser)
    return parser


#: Help for positional arguments a subcommand declares without one, by their name (dest).
POSITIONAL_HELP = {
    "path": "the keystore file (JSON, mode 0600)",
    "key_id": "the master key's id, as tables name it in encryption.key-id",
    "version": "the master key version (an integer; `keystore list` shows them)",
    "directory": "the directory to download into (created if missing)",
    "table": "the table, as CATALOG.DB.TABLE",
}


def _describe(parser: argparse.ArgumentParser) -> None:
    """Every subcommand's ``--help`` starts with its one-line description (the help its parent
    lists it with), and every positional argument has help text."""
    for action in parser._actions:  # argparse has no public API for this
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                if not sub.description and helps.get(name):
                    sub.description = helps[name][0].upper() + helps[name][1:] + "."
                _describe(sub)
        elif not action.option_strings and not action.help and action.dest in POSITIONAL_HELP:
            action.help = POSITIONAL_HELP[action.dest]


def _add_key_options(parser: argparse.ArgumentParser) -> None:
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code or 0)
    if args.command is None:
        parser.print_help(sys.stderr)
        return ExitStatus.USAGE
    if args.command == "inspect":
        from pyiceberg_crypto.cli.inspect_cmd import run_inspect

        return run_inspect(args)
    if args.command == "decrypt":
        from pyiceberg_crypto.cli.decrypt_cmd import run_decrypt

        return run_decrypt(args)
    if args.command == "verify":
        from pyiceberg_crypto.cli.verify_cmd import run_verify

        return run_verify(args)
    if args.command == "audit":
        from pyiceberg_crypto.cli.audit_cmd import run_audit

        return run_audit(args)
    if args.command == "demo":
        from pyiceberg_crypto.cli.demo_cmd import run_demo

        return run_demo(args)
    if args.command == "keystore":
        from pyiceberg_crypto.cli.keystore_cmd import run_keystore

        return run_keystore(args)
    if args.command == "keys":
        from pyiceberg_crypto.cli.keys_cmd import run_keys

        return run_keys(args)
    if args.command == "head":
        from pyiceberg_crypto.cli.head_cmd import run_head

        return run_head(args)
    if args.command == "kms":
        from pyiceberg_crypto.cli.kms_cmd import run_kms

        return run_kms(args)
    if args.command == "encrypt":
        from pyiceberg_crypto.cli.encrypt_cmd import run_encrypt

        return run_encrypt(args)
    if args.command == "jars":
        from pyiceberg_crypto.cli.jars_cmd import run_jars

        return run_jars(args)
    parser.error(f"unknown command {args.command!r}")
    return ExitStatus.USAGE


if __name__ == "__main__":
    sys.exit(main())
