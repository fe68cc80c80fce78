"""KMS calls with a deadline: a KMS that never answers must not hang the verifier.

    key = call_with_timeout(kms.unwrap_key, wrapped, "k1", timeout=60.0, what="the KMS call unwrap_key")

The call runs in a daemon thread and the caller stops waiting after ``timeout`` seconds
(:class:`KmsTimeoutError`). The abandoned thread cannot be killed; being a daemon thread, it
never keeps the process alive at exit. Exceptions of the call are re-raised unchanged.

A server answering many calls uses a :class:`KmsCallPool` instead: the same deadline, on
persistent daemon threads (no thread started per call)::

    pool = KmsCallPool(max_workers=256)
    key = pool(kms.unwrap_key, wrapped, "k1", timeout=60.0, what="the KMS call unwrap_key")
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from pyiceberg_crypto.errors import InvalidArgumentError, KmsTimeoutError

__all__ = ["DEFAULT_KMS_TIMEOUT_SECONDS", "KmsCallPool", "KmsTimeoutError", "call_with_timeout",
           "kms_timeout_millis"]

#: Default seconds to wait for one KMS call: the package's one KMS timeout, ``kms_timeout`` wherever
#: it is a parameter (the verifier, the reader, ``register_kms``, ``kms_service_properties``).
DEFAULT_KMS_TIMEOUT_SECONDS = 60.0

T = TypeVar("T")


def kms_timeout_millis(kms_timeout: float) -> int:
    """``kms_timeout`` (seconds) as the JVM's milliseconds: the one conversion, where a timeout
    leaves Python for the bridge (``register_kms``) or a catalog property (``...timeout-ms``).

    >>> kms_timeout_millis(0.5), kms_timeout_millis(60.0), kms_timeout_millis(0.0001)
    (500, 60000, 1)

    Raises InvalidArgumentError for a timeout that is not positive.
    """
    if not kms_timeout > 0:
        raise InvalidArgumentError(f"kms_timeout must be positive (seconds), got {kms_timeout!r}")
    return max(1, round(kms_timeout * 1000))


def call_with_timeout(function: Callable[..., T], *args: Any, timeout: float | None, what: str) -> T:
    """``function(*args)``, waiting at most ``timeout`` seconds (None: no limit, in this thread).

    ``what`` names the call in the timeout's message (``"the KMS call unwrap_key"``).

    Raises:
        KmsTimeoutError: the call had not returned after ``timeout`` seconds.
    """
    if timeout is None:
        return function(*args)
    if timeout <= 0:
        raise InvalidArgumentError(f"the KMS timeout must be positive (seconds), got {timeout!r}")
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = function(*args)
        except BaseException as exc:  # handed to the caller
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="kms-call", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise KmsTimeoutError(f"{what} did not return within {timeout:g} s (kms timeout)")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


class _Task:
    __slots__ = ("function", "args", "done", "value", "error", "abandoned")

    def __init__(self, function: Callable[..., Any], args: tuple):
        self.function, self.args = function, args
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None
        self.abandoned = False


class KmsCallPool:
    """:func:`call_with_timeout` on persistent daemon threads: a call is handed to an idle worker
    (a new one is started while fewer than ``max_workers`` exist and none is idle) and its caller
    waits at most ``timeout`` seconds, as with :func:`call_with_timeout`. Starting a thread per call
    was the largest single cost of a busy KMS server (the AWS KMS face: ``bench/trino_face.py``).

    Bounds: at most ``max_workers`` threads, ever. A KMS that hangs holds its workers; once all
    ``max_workers`` hang, further calls wait in line and time out at their own deadline (then they
    are dropped unrun), so callers are bounded exactly as with :func:`call_with_timeout`, and the
    thread count is too (a thread per call was not). Workers are daemon threads: a hung KMS never
    keeps the process alive at exit.
    """

    def __init__(self, max_workers: int = 64, name: str = "kms-call"):
        if max_workers < 1:
            raise InvalidArgumentError(f"max_workers must be at least 1, got {max_workers!r}")
        self.max_workers, self.name = max_workers, name
        self._tasks: queue.SimpleQueue[_Task] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._workers = 0
        self._idle = 0

    @property
    def workers(self) -> int:
        """Worker threads started so far (never more than ``max_workers``)."""
        with self._lock:
            return self._workers

    def __call__(self, function: Callable[..., T], *args: Any, timeout: float | None, what: str) -> T:
        """``function(*args)`` on a worker, waiting at most ``timeout`` seconds (None: no limit,
        in this thread). Raises :class:`KmsTimeoutError` like :func:`call_with_timeout`."""
        if timeout is None:
            return function(*args)
        if timeout <= 0:
            raise InvalidArgumentError(f"the KMS timeout must be positive (seconds), got {timeout!r}")
        task = _Task(function, args)
        with self._lock:
            start = self._idle <= 0 and self._workers < self.max_workers
            if start:
                self._workers += 1
            else:
                self._idle -= 1  # this task claims an idle worker (or waits in line for one)
        self._tasks.put(task)
        if start:
            threading.Thread(target=self._work, name=self.name, daemon=True).start()
        if not task.done.wait(timeout):
            task.abandoned = True
            raise KmsTimeoutError(f"{what} did not return within {timeout:g} s (kms timeout)")
        if task.error is not None:
            raise task.error
        return task.value

    def _work(self) -> None:
        while True:
            task = self._tasks.get()
            if not task.abandoned:
                try:
                    task.value = task.function(*task.args)
                except BaseException as exc:  # handed to the caller
                    task.error = exc
                task.done.set()
            with self._lock:
                self._idle += 1
