"""Entry point of the ``pyiceberg-crypto`` console script.

Exit status contract (all subcommands):
    0  success: every block/module that could be checked authenticated
    1  integrity failure: the message names the file, the block/module and the reason
    2  usage error or unreadable input
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import traceback
from collections.abc import Sequence

from pyiceberg_crypto.errors import PyicebergCryptoError
from pyiceberg_crypto.exit_status import ExitStatus
from pyiceberg_crypto.formats.errors import IntegrityError
from pyiceberg_crypto.safe_text import escape_text, exception_line


def build_parser() -> argparse.ArgumentParser:
    """The ``pyiceberg-crypto`` parser: every command of :data:`COMMANDS`, siblings that each
    register their own sub-parser (``pyiceberg_crypto.cli.<name>_cmd.add_parser``)."""
    parser = argparse.ArgumentParser(
        prog="pyiceberg-crypto",
        description="Encrypted Iceberg tables from PySpark, and an independent verifier.",
    )
    parser.add_argument("--debug", action="store_true",
                        help="print the traceback of an internal error (a bug), not only its one line")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        module = importlib.import_module(f"pyiceberg_crypto.cli.{name}_cmd")
        added = module.add_parser(sub)
        if name == "keys":  # `keys reencrypt` has a module of its own, under `keys`
            from pyiceberg_crypto.cli import reencrypt_cmd

            reencrypt_cmd.add_parser(added)
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


#: The command modules, in the order ``--help`` lists them: each registers its parser with
#: ``add_parser(sub)`` and sets ``run`` (and, for ``--json``, ``error_document``) as defaults.
COMMANDS = ("inspect", "decrypt", "verify", "audit", "demo", "keystore", "jars", "keys", "head", "kms", "encrypt")


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns its exit status (:class:`~pyiceberg_crypto.exit_status.ExitStatus`)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code or 0)
    if args.command is None:
        parser.print_help(sys.stderr)
        return ExitStatus.USAGE
    return run_command(args)


def run_command(args: argparse.Namespace, name: str | None = None) -> int:
    """The command line's one error boundary: runs ``args.run(args)`` and turns what it raises into
    one line on stderr and an exit status (and, with ``--json``, the command's error document on
    stdout)::

        integrity failure (IntegrityError)         1  "pyiceberg-crypto verify: integrity failure: ..."
        any other package error, a file or OS error 2  "pyiceberg-crypto keys: cannot load ..."
        anything else: a bug                         2  "pyiceberg-crypto keys: internal error (a bug) ..."

    The traceback of a bug is printed only with ``--debug``. ``name`` (default: the command's
    ``command_name``) starts the line; the verification job passes its own."""
    name = name or getattr(args, "command_name", None) or args.command
    try:
        return int(args.run(args))
    except IntegrityError as exc:
        return _report(args, name, "integrity", f"integrity failure: {exc}", exc, ExitStatus.INTEGRITY)
    except PyicebergCryptoError as exc:
        return _report(args, name, error_kind(exc), str(exc), exc, ExitStatus.USAGE)
    except OSError as exc:  # a file or socket of the user's that cannot be used: not a bug
        where = f"{exc.filename}: " if exc.filename else ""
        return _report(args, name, "unreadable", f"{where}{exc.strerror or exc}", exc, ExitStatus.USAGE)
    except KeyboardInterrupt:
        print(f"pyiceberg-crypto {name}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if getattr(args, "debug", False):
            traceback.print_exc()
        message = (f"internal error (a bug: please report it; --debug prints the traceback): "
                   f"{exception_line(exc)}")
        return _report(args, name, "internal", message, exc, ExitStatus.USAGE)


def error_kind(exc: BaseException) -> str:
    """The ``error.type`` of a ``--json`` error document for a package error: ``unreadable`` for an
    input that cannot be used, ``ledger``, ``kms``, ``output`` for a file that could not be
    written, else ``usage``."""
    from pyiceberg_crypto.errors import TableInputError
    from pyiceberg_crypto.kms.base import KmsError
    from pyiceberg_crypto.kms.bounded import KmsTimeoutError
    from pyiceberg_crypto.verify.ledger import LedgerError

    if isinstance(exc, LedgerError):
        return "ledger"
    if isinstance(exc, TableInputError):
        return "unreadable"
    if isinstance(exc, (KmsError, KmsTimeoutError)):
        return "kms"
    if isinstance(exc, OSError):
        return "output"
    return "usage"


def _report(args: argparse.Namespace, name: str, kind: str, message: str, exc: BaseException, status: int) -> int:
    document = getattr(args, "error_document", None)
    if document is not None and getattr(args, "json", False):
        body = document(args, kind, message, exc)
        if body is not None:
            print(json.dumps(body, indent=2))
    print(f"pyiceberg-crypto {name}: {escape_text(message)}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
