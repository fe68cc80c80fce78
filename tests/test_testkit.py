"""``tests.testkit.eventually``: the one way the tests wait (no JVM, well under a second each).

Counts of calls and gaps between them are asserted on a virtual clock (:class:`VirtualClock`):
on the real one, a loaded machine fits fewer calls into a deadline and the counts would flake."""

from __future__ import annotations

import itertools
import os
import time

import pytest

from pyiceberg_crypto.testing import _wait
from tests.testkit import MAX_LOAD_FACTOR, eventually, load_factor


@pytest.fixture
def idle(monkeypatch):
    """A machine with no load: deadlines are the timeouts as written."""
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))


class VirtualClock:
    """``time.monotonic`` and ``time.sleep`` for :mod:`._wait`: a sleep moves the clock on at once."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0, seconds
        self.now += seconds


@pytest.fixture
def clock(monkeypatch, idle) -> VirtualClock:
    """An idle machine whose clock :func:`eventually` reads (and sleeps on) is virtual."""
    virtual = VirtualClock()
    monkeypatch.setattr(_wait, "time", virtual)
    return virtual


def test_returns_the_first_truthy_value(idle):
    answers = iter([None, 0, "", [], {"running": True}, "never asked"])
    assert eventually(lambda: next(answers), 5, interval=0.001) == {"running": True}
    assert next(answers) == "never asked"


def test_an_exception_is_not_yet_and_the_last_one_is_the_cause(idle):
    calls = itertools.count(1)

    def connect():
        if next(calls) < 3:
            raise ConnectionRefusedError("not up yet")
        return "connected"

    assert eventually(connect, 5, interval=0.001) == "connected"
    with pytest.raises(AssertionError, match=r"waiting for the port.*ConnectionRefusedError: down") as failure:
        eventually(lambda: (_ for _ in ()).throw(ConnectionRefusedError("down")), 0.05, interval=0.01,
                   message="the port")
    assert isinstance(failure.value.__cause__, ConnectionRefusedError)


def test_the_failure_names_the_message_the_wait_and_the_last_value(clock):
    calls = itertools.count(1)
    with pytest.raises(AssertionError) as failure:
        eventually(lambda: next(calls) and {}, 0.2, interval=0.02, message=lambda: "open < 2")
    text = str(failure.value)
    assert text.startswith("timed out after 0.2 s ")
    assert "waiting for open < 2 (timeout 0.2 s x load factor 1.0)" in text
    assert text.endswith("last value: {}") and failure.value.__cause__ is None
    assert clock.now == pytest.approx(0.2)  # waited the timeout, no more
    # Polled every 0.02 s: at 0, 0.02, ... 0.18 and a last look at 0.2 s (float sums may land a hair
    # short of 0.2: then one more look, at the deadline).
    assert next(calls) - 1 in (11, 12)


def test_exceptions_outside_retry_on_end_the_wait_at_once(clock):
    calls = itertools.count(1)

    def died():
        next(calls)
        pytest.fail("the server exited (1)")

    with pytest.raises(pytest.fail.Exception, match="the server exited"):
        eventually(died, 30)
    assert next(calls) == 2 and clock.now == 0  # called once, never slept

    def broken():
        raise TypeError("a bug in the condition")

    with pytest.raises(TypeError, match="a bug in the condition"):
        eventually(broken, 30, retry_on=(OSError,))


def test_the_deadline_scales_with_the_load_per_core_and_is_capped(monkeypatch):
    cores = os.cpu_count() or 1
    monkeypatch.setattr(os, "getloadavg", lambda: (3.0 * cores, 0.0, 0.0))
    assert load_factor() == 3.0
    started = time.monotonic()
    with pytest.raises(AssertionError, match=r"x load factor 3\.0"):
        eventually(lambda: False, 0.1, interval=0.01)
    assert time.monotonic() - started >= 0.3
    monkeypatch.setattr(os, "getloadavg", lambda: (100.0 * cores, 0.0, 0.0))
    assert load_factor() == MAX_LOAD_FACTOR
    monkeypatch.setattr(os, "getloadavg", lambda: (0.1, 0.0, 0.0))
    assert load_factor() == 1.0  # never shorter than written


def test_load_that_rises_during_the_wait_stretches_the_deadline(monkeypatch):
    cores = os.cpu_count() or 1
    loads = itertools.chain([0.0, 0.0], itertools.repeat(2.0 * cores))
    monkeypatch.setattr(os, "getloadavg", lambda: (next(loads), 0.0, 0.0))
    started = time.monotonic()
    with pytest.raises(AssertionError, match=r"x load factor 2\.0"):
        eventually(lambda: False, 0.1, interval=0.01)
    assert time.monotonic() - started >= 0.2


def test_calls_are_interval_apart(clock):
    stamps: list[float] = []

    def slow_check():
        stamps.append(clock.now)
        clock.now += 0.03  # the check itself takes 30 ms: the sleep after it is the rest of the interval

    with pytest.raises(AssertionError):
        eventually(slow_check, 0.35, interval=0.1)
    # At 0, 0.1, 0.2, 0.3 s and a last look at the deadline (0.35 s).
    assert stamps == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.35])
    assert clock.now == pytest.approx(0.38)  # the last look, then the timeout: no sleep past the deadline
