"""KmsCallPool: call_with_timeout's deadline on persistent threads (the AWS KMS face's KMS calls)."""

from __future__ import annotations

import threading
import time

import pytest

from pyiceberg_crypto.errors import InvalidArgumentError
from pyiceberg_crypto.kms.bounded import KmsCallPool, KmsTimeoutError
from tests.testkit import load_factor


def test_a_call_returns_its_value_and_raises_its_own_error():
    pool = KmsCallPool(max_workers=2)
    assert pool(lambda a, b: a + b, 2, 3, timeout=5, what="add") == 5

    def fail():
        raise KeyError("k1")

    with pytest.raises(KeyError):
        pool(fail, timeout=5, what="fail")


def test_calls_reuse_the_same_threads():
    pool = KmsCallPool(max_workers=4)
    names = {pool(lambda: threading.get_ident(), timeout=5, what="ident") for _ in range(50)}
    assert pool.workers == 1 and len(names) == 1  # one caller at a time: one worker, reused
    assert threading.get_ident() not in names  # and never the caller's own thread


def test_a_hung_call_times_out_and_the_thread_count_stays_bounded():
    pool = KmsCallPool(max_workers=2)
    release = threading.Event()
    try:
        for _ in range(2):  # both workers hang
            with pytest.raises(KmsTimeoutError, match=r"the KMS call unwrap_key did not return within 0\.2 s"):
                pool(release.wait, 30, timeout=0.2, what="the KMS call unwrap_key")
        started = time.monotonic()
        with pytest.raises(KmsTimeoutError):  # waits in line, bounded by its own deadline
            pool(lambda: "late", timeout=0.3, what="queued")
        assert 0.25 < time.monotonic() - started < 5 * load_factor()  # the workers hang for 30 s
        assert pool.workers == 2
    finally:
        release.set()
    # The hung calls return; the abandoned queued call is dropped unrun; the pool serves again.
    assert pool(lambda: "ok", timeout=5, what="after") == "ok"
    assert pool.workers == 2


def test_concurrent_callers_get_their_own_answers():
    pool = KmsCallPool(max_workers=8)
    results: dict[int, int] = {}

    def caller(i: int) -> None:
        for j in range(50):
            assert pool(lambda x: x * 2, i * 100 + j, timeout=10, what="double") == 2 * (i * 100 + j)
        results[i] = 1

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(results) == 8
    assert 1 <= pool.workers <= 8


def test_bad_arguments():
    with pytest.raises(InvalidArgumentError):
        KmsCallPool(max_workers=0)
    with pytest.raises(InvalidArgumentError):
        KmsCallPool()(lambda: 1, timeout=0, what="x")
    assert KmsCallPool()(lambda: threading.get_ident(), timeout=None, what="x") == threading.get_ident()
