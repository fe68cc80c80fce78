"""``pyiceberg-crypto verify METADATA_JSON --kms SPEC``: verify a whole table without a JVM.

Human output: the table checks, counts by kind and status, then every file that is not OK with
its reason; a progress bar on a terminal (none when piped). ``--json`` prints the report document
(also on errors). Exit status: 0 every file and check OK, 1 any finding not OK, 2 usage error or
unreadable table metadata.

Hostile input is bounded: the metadata.json must be a regular file of at most
``--max-metadata-bytes`` (checked before reading), every KMS call (the factory included) is given
``--kms-timeout`` seconds, and the human report escapes control characters and terminal escapes in
paths and reasons (``--json`` escapes them as JSON does).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from pyiceberg_crypto.cli.exit_codes import EXIT_INTEGRITY, EXIT_OK, EXIT_USAGE
from pyiceberg_crypto.cli.options import positive_int, positive_seconds
from pyiceberg_crypto.io import DEFAULT_MAX_METADATA_BYTES
from pyiceberg_crypto.kms.bounded import DEFAULT_KMS_TIMEOUT_SECONDS
from pyiceberg_crypto.verify.report import KINDS, STATUSES, TableReport, error_document
from pyiceberg_crypto.verify.text import escape_text, exception_line



def add_verify_parser(sub) -> None:
    verify = sub.add_parser("verify", help="verify every file of an encrypted table (no JVM)")
    verify.add_argument("metadata", metavar="METADATA_JSON", help="the table's current metadata.json (path or URI)")
    verify.add_argument("--kms", required=True, metavar="MODULE:FACTORY",
                        help="the Python KMS: an importable factory, or a shipped KMS by short name")
    verify.add_argument("--kms-property", action="append", default=[], metavar="KEY=VALUE",
                        help="a property for the KMS's initialize() (repeatable)")
    verify.add_argument("--io-property", action="append", default=[], metavar="KEY=VALUE",
                        help="a storage property, as in the catalog (s3.endpoint=http://127.0.0.1:9000, "
                             "s3.path-style-access=true, client.region=...); credentials come from the "
                             "environment (repeatable)")
    which = verify.add_mutually_exclusive_group()
    which.add_argument("--snapshot", type=int, metavar="ID", help="verify this snapshot (default: the current one)")
    which.add_argument("--all-snapshots", action="store_true", help="verify every snapshot in the metadata")
    verify.add_argument("--metadata-hash", metavar="BASE64",
                        help="the metastore's metadata_hash for this metadata.json, to check it too")
    verify.add_argument("--max-metadata-bytes", type=positive_int, default=DEFAULT_MAX_METADATA_BYTES, metavar="N",
                        help="refuse a metadata.json larger than this (default: %(default)s, 64 MiB)")
    verify.add_argument("--kms-timeout", type=positive_seconds, default=DEFAULT_KMS_TIMEOUT_SECONDS,
                        metavar="SECONDS", help="give up on a KMS call after this long (default: %(default)g)")
    verify.add_argument("--json", action="store_true", help="print the report as JSON")


def run_verify(args: argparse.Namespace) -> int:
    from pyiceberg_crypto.kms.bounded import KmsTimeoutError, call_with_timeout
    from pyiceberg_crypto.kms.loader import KmsLoadError, load_kms
    from pyiceberg_crypto.verify.walk import VerifyInputError, verify_metadata

    try:
        properties = _parse_properties(args.kms_property)
        io_properties = _parse_properties(args.io_property, "--io-property")
        kms = call_with_timeout(load_kms, args.kms, properties, timeout=args.kms_timeout,
                                what=f"the KMS factory {args.kms!r}")
    except (KmsLoadError, ValueError) as exc:
        return _fail(args, "usage", str(exc))
    except KmsTimeoutError as exc:
        return _fail(args, "kms", str(exc))
    except Exception as exc:  # the user's factory failed
        return _fail(args, "kms", f"the KMS factory {args.kms!r} failed: {exception_line(exc)}")
    try:
        with _progress(enabled=not args.json and sys.stderr.isatty()) as progress:
            report = verify_metadata(args.metadata, kms, snapshot_id=args.snapshot,
                                     all_snapshots=args.all_snapshots,
                                     expected_metadata_hash=args.metadata_hash, progress=progress,
                                     properties=io_properties, max_metadata_bytes=args.max_metadata_bytes,
                                     kms_timeout=args.kms_timeout)
    except VerifyInputError as exc:
        return _fail(args, "unreadable", str(exc))
    except ValueError as exc:  # e.g. an unsupported URI scheme
        return _fail(args, "usage", str(exc))
    print_report(report, as_json=args.json)
    return EXIT_OK if report.ok else EXIT_INTEGRITY


def print_report(report: TableReport, *, as_json: bool, out=None) -> None:
    out = out or sys.stdout
    if as_json:
        json.dump(report.to_dict(), out, indent=2)
        out.write("\n")
    else:
        out.write(format_report(report))


def format_report(report: TableReport) -> str:
    """The human summary: table, checks, counts by kind and status, then each file not OK.

    Paths, key ids and reasons can come from a hostile table: they are escaped (control
    characters and terminal escapes shown as ``\\xNN``), never written raw to a terminal.
    """
    esc = escape_text
    lines = [f"table     {esc(report.table_location or '?')}",
             f"metadata  {esc(report.metadata_location)}",
             f"key id    {report.key_id!r}   format-version {report.format_version}   "
             f"snapshots ({report.mode}) {', '.join(map(str, report.snapshot_ids)) or 'none'}",
             "", "table checks"]
    lines += [f"  {esc(c.status):<15} {esc(c.name):<20} {esc(c.detail)}" for c in report.checks]
    summary = report.summary()
    statuses = [s for s in STATUSES if s in summary["by_status"]]
    lines += ["", f"files ({summary['files']})"]
    lines.append("  " + f"{'kind':<22}" + "".join(f"{s:>16}" for s in statuses))
    for kind in KINDS:
        counts = summary["by_kind"].get(kind)
        if counts:
            lines.append("  " + f"{kind:<22}" + "".join(f"{counts.get(s, 0) or '':>16}" for s in statuses))
    bad = report.not_ok()
    if bad:
        lines += ["", f"not OK ({len(bad)})"]
        for f in bad:
            where = f" [{esc(f.location)}]" if f.location else ""
            lines.append(f"  {esc(f.status):<15} {esc(f.kind):<20} {esc(f.path)}{where}\n  {'':<15} {esc(f.detail)}")
    failed = report.failed_checks()
    verdict = "OK: every file is encrypted, authentic and in its place" if report.ok else (
        f"FAILED: {len(bad)} file(s) and {len(failed)} table check(s) not OK")
    lines += ["", verdict, ""]
    return "\n".join(lines)


def _parse_properties(pairs: list[str], option: str = "--kms-property") -> dict[str, str]:
    props = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"{option} must be KEY=VALUE, got {pair!r}")
        props[key] = value
    return props


def _fail(args: argparse.Namespace, kind: str, message: str) -> int:
    if args.json:
        json.dump(error_document(kind, message), sys.stdout, indent=2)
        sys.stdout.write("\n")
    print(f"pyiceberg-crypto: {escape_text(message)}", file=sys.stderr)
    return EXIT_USAGE


class _progress:
    """A rich progress bar on stderr when it is a terminal; a no-op callback otherwise."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self._bar = None

    def __enter__(self) -> Callable[[str, int, int], None] | None:
        if not self.enabled:
            return None
        from rich.console import Console
        from rich.progress import Progress

        self._bar = Progress(console=Console(stderr=True), transient=True)
        self._bar.start()
        task = self._bar.add_task("verifying", total=None)

        def update(stage: str, done: int, total: int) -> None:
            self._bar.update(task, description=f"verifying {stage}", completed=done, total=total or None)

        return update

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()
