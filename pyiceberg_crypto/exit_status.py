"""The exit status contract of every ``pyiceberg-crypto`` command and of the verification job
(:mod:`pyiceberg_crypto.cli.verify_job`), in one place::

    sys.exit(ExitStatus.of(report))
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["ExitStatus"]


class ExitStatus(IntEnum):
    OK = 0  # every file and check OK (other commands: every block/module authenticated)
    INTEGRITY = 1  # a finding is not OK: the report / message names the file, block/module and reason
    USAGE = 2  # usage error, unreadable input or an unusable ledger: no verdict
    UNVERIFIED = 3  # nothing wrong found, but not everything was checked (kms audit-log verify without a key)

    @classmethod
    def of(cls, report) -> ExitStatus:
        """OK for a report whose every file and check is OK, else INTEGRITY."""
        return cls.OK if report.ok else cls.INTEGRITY
