"""``pyiceberg-crypto demo``: run :mod:`pyiceberg_crypto.demo.local` and exit non-zero unless all is encrypted."""

from __future__ import annotations

import argparse

from pyiceberg_crypto.exit_status import ExitStatus


def add_parser(sub) -> None:
    demo = sub.add_parser("demo", help="run the end-to-end demo on local Spark")
    demo.add_argument("--workdir", default="demo-warehouse", help="where the demo writes (default: %(default)s)")
    demo.add_argument("--keep", action="store_true", help="keep the previous demo directory contents")
    demo.set_defaults(run=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    from pyiceberg_crypto import demo

    report = demo.run_demo(args.workdir, keep=args.keep)
    demo.print_report(report)
    return ExitStatus.OK if report.ok else ExitStatus.INTEGRITY
