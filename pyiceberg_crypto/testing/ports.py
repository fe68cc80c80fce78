"""Ports for test servers that no other process is handed, and ports that refuse every connection.

A port found by binding port 0 and closing the socket is free only for a moment: the kernel hands
just-freed ports of its ephemeral range (``/proc/sys/net/ipv4/ip_local_port_range``) to the next
outgoing connection of any process, so a server started a moment later can lose it ("Address
already in use"). The ports here come from below that range, where the kernel hands out nothing,
from a block of :data:`BLOCK_SIZE` ports this process holds alone (an ``flock`` on a file that
ends with the process; its forked children claim blocks of their own)::

    from pyiceberg_crypto.testing.ports import closed_port, reserve_port

    port = reserve_port()            # give it to a server that cannot bind port 0 itself
    with closed_port() as port:      # a port where every connection is refused, while the block runs
        ...

A server that can bind port 0 and report what it got should do that instead. Servers started with
a reserved port still retry on EADDRINUSE (another program of the machine may use a fixed port in
the range): :class:`~pyiceberg_crypto.testing._process.ServiceProcess` does.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

LOOPBACK = "127.0.0.1"
#: Ports per block: one process's servers over a test session (a port is handed out again only
#: after the whole block went round, and only when it is free then).
BLOCK_SIZE = 128
#: How far below the ephemeral range the blocks go.
RANGE_SIZE = 16384
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")

_lock = threading.Lock()
_block: tuple[int, int] | None = None   # (first port, the open lock file's descriptor)
_handed = 0                             # ports handed out of the block so far


def ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (32768 where it cannot be read)."""
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def port_range() -> range:
    """The ports the blocks are taken from: :data:`RANGE_SIZE` ports below the ephemeral range."""
    high = ephemeral_low()
    return range(max(1024, high - RANGE_SIZE), high)


def _lock_directory() -> Path:
    directory = Path(tempfile.gettempdir()) / f"pyiceberg-crypto-ports-{os.getuid()}"
    directory.mkdir(mode=0o700, exist_ok=True)
    return directory


def _claim_block() -> tuple[int, int]:
    """Lock the first block no other process holds, starting at one picked by the process id."""
    ports = port_range()
    count = len(ports) // BLOCK_SIZE
    if count == 0:
        raise OSError(f"no room for a block of {BLOCK_SIZE} test ports below the ephemeral range ({ports})")
    directory = _lock_directory()
    for step in range(count):
        index = (os.getpid() + step) % count
        descriptor = os.open(directory / f"block-{index}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(descriptor)
            continue
        return ports.start + index * BLOCK_SIZE, descriptor
    raise OSError(f"all {count} blocks of test ports in {directory} are held by other processes")


def _forget_block_in_child() -> None:
    """A forked child shares its parent's lock: it claims a block of its own when it needs one."""
    global _block, _handed
    _block, _handed = None, 0


os.register_at_fork(after_in_child=_forget_block_in_child)


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _bindable(host: str, port: int) -> bool:
    with socket.socket(_family(host), socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def reserve_port(host: str = LOOPBACK) -> int:
    """A TCP port on ``host`` from this process's block, free now, that no other process that uses
    this module is handed and the kernel never picks for a connection or a port-0 bind."""
    global _block, _handed
    with _lock:
        for _ in range(2):
            if _block is None:
                _block, _handed = _claim_block(), 0
            first, _descriptor = _block
            for _ in range(BLOCK_SIZE):
                port = first + _handed % BLOCK_SIZE
                _handed += 1
                if _bindable(host, port):
                    return port
            _block = None  # every port of the block is busy (servers still up): the next block
        raise OSError(f"no free test port on {host} in two blocks of {BLOCK_SIZE}")


@contextlib.contextmanager
def closed_port(host: str = LOOPBACK) -> Iterator[int]:
    """A port on ``host`` where every TCP connection is refused while the block runs: bound by this
    process and never listened on, so no one else can take it."""
    with socket.socket(_family(host), socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        yield sock.getsockname()[1]


#: Spark Connect's default port: ``spark-pipelines run`` starts its local server there, and its
#: client looks for it there, whatever the configuration says (pyspark 4.1 asks the server for its
#: real port only under ``SPARK_TESTING``, which changes Spark's behaviour).
SPARK_CONNECT_PORT = 15002


@contextlib.contextmanager
def fixed_port(port: int, timeout: float = 1800.0) -> Iterator[int]:
    """Hold ``port``, one a program always binds (:data:`SPARK_CONNECT_PORT`), against every other
    process of this user that asks for it here: one holder at a time (an ``flock`` that ends with
    the block or the process), waiting up to ``timeout`` seconds for the holder before it. Two
    ``spark-pipelines run`` of two test lanes would otherwise take turns failing to bind it::

        with fixed_port(SPARK_CONNECT_PORT):
            subprocess.run(["spark-pipelines", "run", ...])
    """
    descriptor = os.open(_lock_directory() / f"fixed-{port}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                if time.monotonic() >= deadline:
                    raise OSError(f"port {port} stayed held by another test process for {timeout:g} s") from None
                time.sleep(0.5)
        yield port
    finally:
        os.close(descriptor)  # releases the lock
