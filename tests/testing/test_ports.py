"""The test ports (pyiceberg_crypto.testing.ports): below the kernel's ephemeral range, never handed
to two processes, skipping a port that is in use, and closed ports that refuse connections."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from pyiceberg_crypto.testing import ports
from pyiceberg_crypto.testing.ports import closed_port, ephemeral_low, port_range, reserve_port

HAND_OUT = """
import json, sys
from pyiceberg_crypto.testing.ports import reserve_port
print(json.dumps([reserve_port() for _ in range(int(sys.argv[1]))]), flush=True)
sys.stdin.read()   # holds its block until the test closes standard input
"""


def test_reserved_ports_are_below_the_ephemeral_range_and_differ():
    handed = [reserve_port() for _ in range(20)]
    assert len(set(handed)) == 20
    assert all(port in port_range() and port < ephemeral_low() for port in handed), handed


def test_two_processes_never_get_the_same_port():
    children = [subprocess.Popen([sys.executable, "-c", HAND_OUT, "40"], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True) for _ in range(3)]
    try:
        handed = [json.loads(child.stdout.readline()) for child in children]
    finally:
        for child in children:
            child.stdin.close()
            child.wait(30)
    mine = {reserve_port() for _ in range(40)}
    every = [port for ports_of_one in handed for port in ports_of_one] + sorted(mine)
    assert len(every) == len(set(every)) == 160, "each process holds a block of its own"


def test_a_port_in_use_is_skipped():
    reserve_port()  # this process's block claimed
    busy = ports._block[0] + ports._handed % ports.BLOCK_SIZE  # the port it would hand out next
    with socket.socket() as holder:
        try:
            holder.bind(("127.0.0.1", busy))
        except OSError:
            pytest.skip(f"port {busy} is in use by something else")
        holder.listen(1)
        skipped_to = reserve_port()
    assert skipped_to != busy and skipped_to in port_range()


def test_a_closed_port_refuses_connections_while_held():
    with closed_port() as port:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5)
        with socket.socket() as other, pytest.raises(OSError):
            other.bind(("127.0.0.1", port))  # no other socket can take it meanwhile


HOLD_FIXED = """
import sys, time
from pyiceberg_crypto.testing.ports import fixed_port
with fixed_port(int(sys.argv[1]), timeout=float(sys.argv[2])):
    print("held", time.monotonic(), flush=True)
    sys.stdin.read()   # holds it until the test closes standard input
"""


def test_a_fixed_port_has_one_holder_at_a_time(tmp_path):
    """Two processes asking for the same fixed port (Spark Connect's, which spark-pipelines always
    binds): the second waits until the first lets go, and one that cannot wait long enough says so."""
    port = 65000  # any number: only the lock is taken, nothing binds it here
    first = subprocess.Popen([sys.executable, "-c", HOLD_FIXED, str(port), "5"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    processes = [first]
    try:
        assert first.stdout.readline().startswith("held")
        impatient = subprocess.run([sys.executable, "-c", HOLD_FIXED, str(port), "1"], input="",
                                   capture_output=True, text=True, timeout=60)
        assert impatient.returncode != 0 and f"port {port} stayed held by another test process" in impatient.stderr
        second = subprocess.Popen([sys.executable, "-c", HOLD_FIXED, str(port), "60"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        processes.append(second)
        first.stdin.close()  # the first lets go: the second gets it
        assert first.wait(30) == 0
        assert second.stdout.readline().startswith("held")
        second.stdin.close()
        assert second.wait(30) == 0
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
