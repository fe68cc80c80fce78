"""Step 2 of a verification: run the plan's file tasks. A *runner* is any
``runner(tasks) -> findings``; this module's runs in this machine's cores,
:func:`pyiceberg_crypto.verify.spark.spark_runner` in Spark tasks. Both call the same
:func:`~pyiceberg_crypto.verify.checks.check_file`::

    findings = local_runner(LocalFileIO())(plan.all_tasks())

With Spark, the verifier and the lake audit decide here, the same way, where a batch runs: a few
small files on the driver (a Spark job costs more than it saves), the rest in one Spark job::

    if on_the_driver(tasks, driver_max_files):
        findings = local_runner(file_io)(tasks)
    else:
        findings, slices = in_one_spark_job(spark, tasks, partial(verify_partition, file_io))

Checking a small Parquet file is ~1 ms of Python (Thrift footer, page headers) under the GIL, so
threads alone use one core: task lists of at least :data:`PROCESS_MIN_TASKS` files are split into
chunks checked by worker processes (``spawn``ed: forking a process that hosts a JVM gateway or
other threads is unsafe), one per core. Each worker receives only its chunk's tasks (the files'
own DEKs, as a Spark task does) over a local pipe, and threads inside it overlap the I/O.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor, as_completed

from pyiceberg_crypto.io import FileIO
from pyiceberg_crypto.verify.checks import FileTask, check_file
from pyiceberg_crypto.verify.plan import Progress
from pyiceberg_crypto.verify.report import FileFinding

#: Nothing here is public API: the package's own modules use these helpers (the verifier's runners).
__all__: list[str] = []

#: ``runner(tasks) -> findings``, one finding per task (any order; :func:`local_runner`'s: the tasks' order).
Runner = Callable[[list[FileTask]], list[FileFinding]]


#: With Spark: batches of at most this many files (and :data:`DRIVER_MAX_BYTES`) are checked on the driver.
DEFAULT_DRIVER_MAX_FILES = 32
#: With Spark: batches of more bytes in all than this are checked in Spark tasks, however few the files.
DRIVER_MAX_BYTES = 256 * 1024 * 1024
#: Task lists at least this long use worker processes (below, starting them costs more than it saves).
PROCESS_MIN_TASKS = 1000
#: Tasks per chunk sent to a worker process (amortizes the pipe; small enough to balance the load).
CHUNK_TASKS = 100


def local_runner(file_io: FileIO, threads: int | None = None, progress: Progress | None = None,
                 processes: int | None = None) -> Runner:
    """Verify tasks on this machine: worker processes (one per core, ``processes``) for long task
    lists, else a small thread pool in this process (AES-GCM releases the GIL)."""
    workers = threads or min(4, os.cpu_count() or 1)
    cores = processes if processes is not None else (os.cpu_count() or 1)

    def run(tasks: list[FileTask]) -> list[FileFinding]:
        if not tasks:
            return []
        if cores > 1 and len(tasks) >= PROCESS_MIN_TASKS:
            return _in_processes(tasks, file_io, cores, progress)
        return _in_threads(tasks, file_io, workers, progress)

    return run


def _in_threads(tasks: list[FileTask], file_io: FileIO, workers: int, progress: Progress | None) -> list[FileFinding]:
    results = []
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="verify") as pool:
        for done, finding in enumerate(pool.map(lambda task: check_file(task, file_io), tasks), 1):
            results.append(finding)
            if progress:
                progress("files", done, len(tasks))
    return results


def _in_processes(tasks: list[FileTask], file_io: FileIO, cores: int, progress: Progress | None) -> list[FileFinding]:
    chunks = [tasks[i:i + CHUNK_TASKS] for i in range(0, len(tasks), CHUNK_TASKS)]
    results: list[list[FileFinding] | None] = [None] * len(chunks)
    done = 0
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(cores, len(chunks)), mp_context=context) as pool:
        futures = {pool.submit(check_chunk, chunk, file_io): i for i, chunk in enumerate(chunks)}
        for future in as_completed(futures):
            results[futures[future]] = future.result()
            done += len(chunks[futures[future]])
            if progress:
                progress("files", done, len(tasks))
    return [finding for chunk in results for finding in chunk or []]


def check_chunk(tasks: list[FileTask], file_io: FileIO) -> list[FileFinding]:
    """In a worker process: check one chunk, with two threads to overlap reads and decryption."""
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="verify") as pool:
        return list(pool.map(lambda task: check_file(task, file_io), tasks))


def on_the_driver(tasks: Iterable[FileTask], driver_max_files: int) -> bool:
    """Check this batch on the driver rather than in Spark tasks? Yes for at most
    ``driver_max_files`` files of at most :data:`DRIVER_MAX_BYTES` in all (their expected sizes)."""
    count = size = 0
    for task in tasks:
        count += 1
        size += task.expected_size or 0
    return count <= driver_max_files and size <= DRIVER_MAX_BYTES


def in_one_spark_job(spark, items: list, partition: Callable[[Iterable], Iterable], *, parallelism: int | None = None,
                     description: str | None = None, job_group: str | None = None) -> tuple[list, int]:
    """``partition`` over ``items`` in one Spark job of ``parallelism`` tasks (default: up to four
    per core of the cluster); returns the collected results and the number of Spark tasks.

    ``description`` names the job in the Spark UI; ``job_group`` (with the description) makes it
    one job group, which the caller can report. Both are cleared afterwards."""
    sc = spark.sparkContext
    slices = parallelism or max(1, min(len(items), sc.defaultParallelism * 4))
    if job_group:
        sc.setJobGroup(job_group, description)
    elif description:
        sc.setJobDescription(description)
    try:
        return sc.parallelize(items, slices).mapPartitions(partition).collect(), slices
    finally:
        if job_group:
            sc.setLocalProperty("spark.jobGroup.id", None)
            sc.setLocalProperty("spark.job.description", None)
        elif description:
            sc.setJobDescription(None)
