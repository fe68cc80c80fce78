"""``pyiceberg-crypto demo``: run :mod:`pyiceberg_crypto.demo` and exit non-zero unless all is encrypted."""

from __future__ import annotations

import argparse
import sys

from pyiceberg_crypto.cli.exit_codes import EXIT_INTEGRITY, EXIT_OK, EXIT_USAGE


def run_demo(args: argparse.Namespace) -> int:
    from pyiceberg_crypto import demo
    from pyiceberg_crypto.jars import JarNotFoundError

    try:
        report = demo.run_demo(args.workdir, keep=args.keep)
    except JarNotFoundError as exc:
        print(f"pyiceberg-crypto demo: {exc}", file=sys.stderr)
        return EXIT_USAGE
    demo.print_report(report)
    return EXIT_OK if report.ok else EXIT_INTEGRITY
