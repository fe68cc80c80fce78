"""``pyiceberg-crypto demo``: run :mod:`pyiceberg_crypto.demo.local` and exit non-zero unless all is encrypted."""

from __future__ import annotations

import argparse
import sys

from pyiceberg_crypto.exit_status import ExitStatus


def run_demo(args: argparse.Namespace) -> int:
    from pyiceberg_crypto import demo
    from pyiceberg_crypto.demo.local import DemoWorkdirError
    from pyiceberg_crypto.jars import JarNotFoundError

    try:
        report = demo.run_demo(args.workdir, keep=args.keep)
    except (JarNotFoundError, DemoWorkdirError) as exc:
        print(f"pyiceberg-crypto demo: {exc}", file=sys.stderr)
        return ExitStatus.USAGE
    demo.print_report(report)
    return ExitStatus.OK if report.ok else ExitStatus.INTEGRITY
