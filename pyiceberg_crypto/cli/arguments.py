"""Command-line options shared by ``pyiceberg-crypto verify`` and the Spark job
(:mod:`pyiceberg_crypto.cli.verify_job`): one definition, the same flags and defaults in both.

    parser = argparse.ArgumentParser()
    add_kms_arguments(parser); add_scope_arguments(parser); add_limit_arguments(parser)
    options = verification_options(parser.parse_args())   # keyword arguments of verify_metadata / verify_table
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from pyiceberg_crypto.cli.options import UsageError
from pyiceberg_crypto.io import DEFAULT_MAX_METADATA_BYTES
from pyiceberg_crypto.kms.bounded import DEFAULT_KMS_TIMEOUT_SECONDS


def kms_from_arguments(args: argparse.Namespace, *, required: bool = False, timeout: float | None = None):
    """The KMS ``--kms`` and ``--kms-property`` name (None without ``--kms`` unless ``required``),
    built within ``timeout`` seconds (None: no limit). UsageError for a bad name or property; a
    factory that fails or does not return in time is a KmsError (``error.type`` "kms")::

        kms = kms_from_arguments(args, timeout=args.kms_timeout)"""
    from pyiceberg_crypto.kms.base import KmsError
    from pyiceberg_crypto.kms.bounded import KmsTimeoutError, call_with_timeout
    from pyiceberg_crypto.kms.loader import KmsLoadError, load_kms
    from pyiceberg_crypto.safe_text import exception_line

    if not args.kms and not required:
        return None
    properties = parse_properties(args.kms_property)
    try:
        return call_with_timeout(load_kms, args.kms, properties, timeout=timeout,
                                 what=f"the KMS factory {args.kms!r}")
    except KmsLoadError as exc:
        raise UsageError(str(exc)) from None
    except (KmsError, KmsTimeoutError):
        raise
    except Exception as exc:  # the user's factory failed: one line, never its traceback
        raise KmsError(f"the KMS factory {args.kms!r} failed: {exception_line(exc)}") from None


def positive_int(value: str) -> int:
    """argparse type: an integer > 0 (``--max-metadata-bytes``)."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {value!r}") from None
    if number <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {number}")
    return number


def positive_seconds(value: str) -> float:
    """argparse type: a finite number of seconds > 0 (``--kms-timeout``)."""
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {value!r}") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {value!r}")
    return seconds


def parse_properties(pairs: list[str], option: str = "--kms-property") -> dict[str, str]:
    """``["k=v", ...]`` -> ``{"k": "v"}``; ValueError naming ``option`` for a pair without ``=``."""
    props = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"{option} must be KEY=VALUE, got {pair!r}")
        props[key] = value
    return props


def add_kms_arguments(parser: argparse.ArgumentParser, required: bool = True) -> None:
    parser.add_argument("--kms", required=required, metavar="MODULE:FACTORY",
                        help="the Python KMS: an importable factory, or a shipped KMS by short name")
    parser.add_argument("--kms-property", action="append", default=[], metavar="KEY=VALUE",
                        help="a property for the KMS's initialize() (repeatable)")


def add_scope_arguments(parser: argparse.ArgumentParser) -> None:
    """Which snapshots: current (default), ``--snapshot``, ``--all-snapshots``, ``--since``, or a ledger."""
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--snapshot", type=int, metavar="ID", help="verify this snapshot (default: the current one)")
    which.add_argument("--all-snapshots", action="store_true", help="verify every snapshot in the metadata")
    which.add_argument("--since", type=int, metavar="ID",
                       help="verify only what the table gained after snapshot ID (an ancestor of the current one)")
    which.add_argument("--state", metavar="FILE",
                       help="a ledger file: the first run verifies the current snapshot in full, each OK run "
                            "records it, the next verifies only what is newer and checks the table's history")
    parser.add_argument("--accept-history", action="store_true",
                        help="with --state: accept a rollback or replacement the ledger reports, verify the "
                             "current snapshot in full and reset the ledger")


def add_limit_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--allow-location", action="append", default=[], metavar="URI",
                        help="also read files under this location (for a table that really spans several); "
                             "by default only the table's location, write.data.path and write.metadata.path "
                             "(repeatable)")
    parser.add_argument("--max-metadata-bytes", type=positive_int, default=DEFAULT_MAX_METADATA_BYTES, metavar="N",
                        help="refuse a metadata.json larger than this (default: %(default)s, 64 MiB)")
    parser.add_argument("--kms-timeout", type=positive_seconds, default=DEFAULT_KMS_TIMEOUT_SECONDS,
                        metavar="SECONDS", help="give up on a KMS call after this long (default: %(default)g)")


def verification_options(args: argparse.Namespace, io_properties: dict[str, str] | None = None) -> dict[str, Any]:
    """The keyword arguments these options mean for ``verify_metadata`` / ``verify_table`` (the
    bounds in one ``limits=``; ``io_properties``: how files are read, ``--io-property``)."""
    from pyiceberg_crypto.table.limits import Limits

    if args.accept_history and not args.state:
        raise UsageError("--accept-history needs --state FILE (it resets that ledger)")
    return {"snapshot_id": args.snapshot, "all_snapshots": args.all_snapshots, "since_snapshot_id": args.since,
            "state": args.state, "accept_history": args.accept_history,
            "limits": Limits(allowed_locations=tuple(args.allow_location), max_metadata_bytes=args.max_metadata_bytes,
                             kms_timeout=args.kms_timeout, properties=io_properties)}
