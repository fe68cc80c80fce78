"""Step 2 of a verification: run the plan's file tasks. A *runner* is any
``runner(tasks) -> findings``; this module's runs in threads, :func:`pyiceberg_crypto.verify.spark_job.spark_runner`
in Spark tasks. Both call the same :func:`~pyiceberg_crypto.verify.checks.check_file`::

    findings = local_runner(LocalFileIO(), threads=4)(plan.all_tasks())
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from pyiceberg_crypto.io import FileIO
from pyiceberg_crypto.verify.checks import FileTask, check_file
from pyiceberg_crypto.verify.plan import Progress
from pyiceberg_crypto.verify.report import FileFinding

#: ``runner(tasks) -> findings``, one finding per task (any order).
Runner = Callable[[list[FileTask]], list[FileFinding]]


def local_runner(file_io: FileIO, threads: int | None = None, progress: Progress | None = None) -> Runner:
    """Verify tasks in this process with a small thread pool (AES-GCM releases the GIL)."""
    workers = threads or min(4, os.cpu_count() or 1)

    def run(tasks: list[FileTask]) -> list[FileFinding]:
        results = []
        if not tasks:
            return results
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="verify") as pool:
            for done, finding in enumerate(pool.map(lambda task: check_file(task, file_io), tasks), 1):
                results.append(finding)
                if progress:
                    progress("files", done, len(tasks))
        return results

    return run
