"""One way to run a service as a child process: start, wait until ready, stop, kill, log to a file.

Subclasses say how to build the command line and how to tell the service is ready; everything
else (log file, timeouts, clean shutdown, errors that quote the log) lives here::

    with SomeService(directory) as service:   # start() + wait_ready(); stop() on exit
        ...
"""

from __future__ import annotations

import atexit
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from pyiceberg_crypto.testing.errors import TestKitError
from pyiceberg_crypto.testing.ports import reserve_port

LOOPBACK = "127.0.0.1"
#: The line the bridge jar's launchers print once their socket is bound (LoopbackMetastore, LoopbackRestCatalog).
_LISTENING = re.compile(rb"^LISTENING (\S+):(\d+)$", re.M)
#: What a server logs when its port is taken (Java's BindException, Go's and Python's EADDRINUSE).
_ADDRESS_IN_USE = re.compile(rb"address already in use", re.I)
#: Starts tried when the ports a service picked itself turn out to be taken.
_START_ATTEMPTS = 3

#: Services started by this interpreter and not yet stopped: killed at exit so none outlives it.
_RUNNING: set["ServiceProcess"] = set()


class ServiceError(TestKitError, RuntimeError):
    """A service did not start, died, or did not become ready; the message quotes its log's tail."""


class ServiceProcess:
    """A child process whose standard output and error go to ``log_path``."""

    #: Short name used in messages ("Hive metastore", "S3 server").
    name = "service"

    def __init__(self, directory: str | Path, *, startup_timeout: float = 120.0) -> None:
        self.directory = Path(directory).absolute()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.startup_timeout = startup_timeout
        self.log_path = self.directory / f"{self._log_stem()}.log"
        self._process: subprocess.Popen | None = None
        self._log_offset = 0  # where this start's output begins in log_path

    # --- to be provided by subclasses ---------------------------------------------------------

    def _command(self) -> Sequence[str]:
        raise NotImplementedError

    def _environment(self) -> Mapping[str, str]:
        return os.environ

    def _is_ready(self) -> bool:
        raise NotImplementedError

    def _log_stem(self) -> str:
        return self.name.lower().replace(" ", "-")

    def _log_since_start(self) -> bytes:
        """What the process logged since this start (not an earlier start's lines)."""
        with open(self.log_path, "rb") as log:
            log.seek(self._log_offset)
            return log.read()

    def _listening_and_open(self, host: str) -> bool:
        """This start's ``LISTENING host:port`` line is in the log (its port becomes ``self.port``) and
        the port accepts connections on ``host``."""
        match = _LISTENING.search(self._log_since_start())
        if not match:
            return False
        self.port = int(match.group(2))
        return port_open(host, self.port)

    # --- lifecycle ----------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """Process id of the running service, None when not started."""
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    #: True while ``self.port`` is a port this object reserved itself (port 0 asked for one) and no
    #: start has succeeded on it yet: a start that finds it taken tries another. A port the caller
    #: named, or one a start got (a restart takes it again: clients know it), is kept.
    _port_picked = False

    def _pick_other_ports(self) -> bool:
        """Called when a start failed on a taken address: pick other ports for the ones this object
        picked itself (:func:`~pyiceberg_crypto.testing.ports.reserve_port`) and say whether it did."""
        if not self._port_picked:
            return False
        self.port = reserve_port(self.host)
        return True

    def start(self) -> "ServiceProcess":
        """Start the process and wait until it is ready (at most ``startup_timeout`` seconds). A
        start that failed because a port it picked itself was taken is tried again on other ports."""
        for attempt in range(_START_ATTEMPTS):
            try:
                self._start_once()
                self._port_picked = False
                return self
            except ServiceError:
                if attempt + 1 == _START_ATTEMPTS or not self._address_was_taken() or not self._pick_other_ports():
                    raise
        raise AssertionError("unreachable")

    def _address_was_taken(self) -> bool:
        try:
            return bool(_ADDRESS_IN_USE.search(self._log_since_start()))
        except OSError:
            return False

    def _start_once(self) -> "ServiceProcess":
        if self.running:
            raise ServiceError(f"{self.name} is already running (pid {self.pid})")
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            log.write(f"--- starting {self.name} at {time.strftime('%Y-%m-%dT%H:%M:%S')}\n".encode())
            log.flush()
            self._process = subprocess.Popen(
                list(self._command()),
                cwd=self.directory,
                env=dict(self._environment()),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C in the parent does not reach it half-way
            )
        _RUNNING.add(self)
        self.wait_ready(self.startup_timeout)
        return self

    def wait_ready(self, timeout: float) -> None:
        """Block until the service is ready; raise :class:`ServiceError` on death or timeout."""
        deadline = time.monotonic() + timeout
        while True:
            if self._process is None:
                raise ServiceError(f"{self.name} was not started")
            if self._process.poll() is not None:
                code = self._process.returncode
                raise ServiceError(f"{self.name} exited with status {code} while starting; {self._log_tail()}")
            if self._is_ready():
                return
            if time.monotonic() > deadline:
                self.kill()
                raise ServiceError(f"{self.name} was not ready after {timeout:.0f} s; {self._log_tail()}")
            time.sleep(0.1)

    def stop(self, timeout: float = 15.0) -> None:
        """Ask the process to end (SIGTERM), then SIGKILL it after ``timeout`` seconds."""
        _RUNNING.discard(self)
        if not self.running:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """End the process at once (SIGKILL), as a crash would: for fault-injection tests."""
        _RUNNING.discard(self)
        if self._process is None or self._process.poll() is not None:
            return
        try:
            os.kill(self._process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._process.wait()

    def __enter__(self) -> "ServiceProcess":
        if not self.running:
            self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def _log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return f"no log at {self.log_path}"
        return f"last lines of {self.log_path}:\n" + "\n".join(text)


@atexit.register
def _kill_leftovers() -> None:
    for service in list(_RUNNING):
        service.kill()


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """True when something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
