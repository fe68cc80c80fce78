"""The docs walk's scheduling (tests/docs/test_docs_walk.py ``Walkers``), without running a page:
which chain starts when decides how long the newcomer lane takes, and a chain that continues
another must never start before that chain's first page is done."""

from __future__ import annotations

import threading

import pytest

from tests.docs.test_docs_walk import CHAINS, CONTINUES, WALKERS, Walkers, pages_of


def test_a_continuing_chain_starts_after_its_first_page_and_the_longest_ready_chain_first():
    assert WALKERS == 2
    seconds = {"lake": 500, "keys": 400, "short": 10, "long": 300}
    events: list[str] = []
    lock = threading.Lock()
    first_page_done, released = threading.Event(), threading.Event()

    def run(chain, release):
        with lock:
            events.append(f"start {chain}")
        if chain == "lake":
            assert first_page_done.wait(30)
            with lock:
                events.append("lake first page")
            release("lake")
            released.set()
        if chain == "long":           # the other walker: busy until lake's first page is done
            first_page_done.set()
            assert released.wait(30)
        return chain

    walkers = Walkers(["short", "lake", "keys", "long"], {"keys": "lake"}, run, seconds=seconds.__getitem__)
    try:
        assert {chain: future.result(timeout=30) for chain, future in walkers.futures.items()} == {
            "short": "short", "lake": "lake", "keys": "keys", "long": "long"}
    finally:
        walkers.stop()
    assert events[:2] == ["start lake", "start long"] or events[:2] == ["start long", "start lake"]
    assert events.index("lake first page") < events.index("start keys")
    assert events.index("start keys") < events.index("start short"), "keys (400 s) waits, then goes before short"


def test_a_chain_failing_before_its_first_page_fails_the_chains_that_continue_it():
    def run(chain, release):
        if chain == "lake":
            raise AssertionError("getting-started.md failed")
        return chain

    walkers = Walkers(["lake", "keys"], {"keys": "lake"}, run, seconds=lambda chain: 1)
    try:
        with pytest.raises(AssertionError, match="getting-started.md failed"):
            walkers.futures["lake"].result(timeout=30)
        with pytest.raises(RuntimeError, match="chain 'lake' failed before its first page.*'keys' continues"):
            walkers.futures["keys"].result(timeout=30)
    finally:
        walkers.stop()


def test_every_continuing_chain_continues_a_chain_whose_first_page_is_getting_started():
    for chain, parent in CONTINUES.items():
        assert chain in CHAINS and parent in CHAINS and parent not in CONTINUES
        assert pages_of(chain)[0] == "getting-started.md" and pages_of(chain)[1:] == CHAINS[chain]
