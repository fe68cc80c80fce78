"""Exit status contract of every ``pyiceberg-crypto`` subcommand (one place; ``cli.main`` re-exports).

    0  success: every block/module that could be checked authenticated
    1  integrity failure: the message names the file, the block/module and the reason
    2  usage error or unreadable input
"""

EXIT_OK = 0
EXIT_INTEGRITY = 1
EXIT_USAGE = 2
