"""Waiting for a condition with a deadline that stretches on a loaded machine: :func:`eventually`.

The test kit's clusters (:mod:`.netns`, :mod:`.yarn`) and the tests wait with it, never with a fixed
``time.sleep`` before a check (too short on a loaded machine, wasted on an idle one)::

    eventually(lambda: cluster.running_nodemanagers() == 2, 90, message="two NodeManagers")
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

from pyiceberg_crypto.testing.errors import TestKitError


class WaitTimeoutError(TestKitError, AssertionError):
    """The condition did not hold before the deadline (an ``AssertionError``: tests fail on it)."""


#: The most a deadline of :func:`eventually` stretches on a loaded machine (CI runs three pytest
#: lanes on 2 cores, load ~20: the factor would be 10; a wait that needs more is a bug, not load).
MAX_LOAD_FACTOR = 4.0

T = TypeVar("T")


def load_factor() -> float:
    """How much slower than on an idle machine things may run now: the 1-minute load average per
    core, at least 1 and at most :data:`MAX_LOAD_FACTOR`.

        >>> 1.0 <= load_factor() <= MAX_LOAD_FACTOR
        True
    """
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average on this platform
        return 1.0
    return min(MAX_LOAD_FACTOR, max(1.0, load / (os.cpu_count() or 1)))


def eventually(condition: Callable[[], T], timeout: float = 30.0, *, interval: float = 0.1,
               message: str | Callable[[], str] = "the condition",
               retry_on: tuple[type[Exception], ...] = (Exception,)) -> T:
    """Call ``condition()`` until it returns a truthy value, and return that value.

    An exception of a type in ``retry_on`` counts as "not yet" (a server not up, a file half
    written). Anything else ends the wait at once: to give up early (the process died), raise from
    the condition, e.g. ``pytest.fail(...)``. When the deadline passes, a :class:`WaitTimeoutError` (an ``AssertionError``) names
    ``message`` (a string, or a function called then, e.g. for a log tail), the seconds waited and
    the last value; the last exception is its cause.

    The deadline scales with the machine's load: ``timeout * load_factor()``, i.e. times the
    1-minute load average per core, between 1 and :data:`MAX_LOAD_FACTOR`; the highest factor seen
    during the wait counts (load that rises mid-wait stretches it). Calls are ``interval`` seconds
    apart (less the time the call took).

        status = eventually(lambda: service.status().get("running"), 60, message="the service to start")
        eventually(lambda: "reloaded" in log_file.read_text(), message=lambda: f"a reload in\n{log_file.read_text()}")
    """
    started = time.monotonic()
    factor = load_factor()
    last_value: object = None
    last_error: Exception | None = None
    while True:
        attempt = time.monotonic()
        try:
            value = condition()
        except retry_on as exc:
            last_value, last_error = None, exc
        else:
            if value:
                return value
            last_value, last_error = value, None
        factor = max(factor, load_factor())
        waited = time.monotonic() - started
        if waited >= timeout * factor:
            what = message() if callable(message) else message
            last = f"last error: {type(last_error).__name__}: {last_error}" if last_error is not None \
                else f"last value: {last_value!r}"
            raise WaitTimeoutError(f"timed out after {waited:.1f} s waiting for {what} (timeout {timeout:g} s "
                                 f"x load factor {factor:.1f}); {last}") from last_error
        time.sleep(max(0.0, min(interval - (time.monotonic() - attempt), timeout * factor - waited)))
