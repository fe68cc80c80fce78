"""Exit statuses of the CLI: names for :class:`pyiceberg_crypto.exit_status.ExitStatus` (``cli.main`` re-exports).

    0  success: every block/module that could be checked authenticated
    1  integrity failure: the message names the file, the block/module and the reason
    2  usage error or unreadable input
"""

from pyiceberg_crypto.exit_status import ExitStatus

EXIT_OK = ExitStatus.OK
EXIT_INTEGRITY = ExitStatus.INTEGRITY
EXIT_USAGE = ExitStatus.USAGE
