"""A ``pyiceberg-crypto kms serve`` process for the tests: started as users start it (the console
script's module, its own process), read through its status file, stopped by signal.

    service = ServiceProcess.start(tmp_path, keystore)       # loopback, a reserved port
    settings = config.spark_settings("lake", warehouse=..., **service.client_settings())
    service.status()["clients"]                               # calls per peer
    service.wait_for_status(lambda s: s["reloads"] == 1, 30, "the reload")
    service.stop()                                            # SIGTERM, waits, token file gone
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pyiceberg_crypto.kms.keystore import Keystore
from pyiceberg_crypto.testing.ports import reserve_port
from tests.testkit import eventually

ROOT = Path(__file__).resolve().parents[2]


def make_keystore(path: Path, *key_ids: str) -> Path:
    """A keystore file with one random master key per id (mode 0600)."""
    store = Keystore(path)
    store.create()
    for key_id in key_ids:
        store.add_key(key_id)
    return path


@dataclass
class ServiceProcess:
    workdir: Path
    process: subprocess.Popen | None
    token_file: Path
    status_file: Path
    log_file: Path
    args: list[str] = field(default_factory=list)
    _log_offset: int = 0  # where the last launch's lines begin in log_file

    @classmethod
    def start(cls, workdir: Path, keystore: Path | None = None, *, listen: str | None = None,
              kms: str = "keystore", properties: dict[str, str] | None = None, extra: list[str] = (),
              token_file: Path | None = None, name: str = "kms", timeout: float = 60.0) -> ServiceProcess:
        """Start and wait for its status. ``listen``: default, a port of this process's reserved
        block (:func:`~pyiceberg_crypto.testing.ports.reserve_port`: a restart takes it again and no
        other process is handed it), another one when it turns out taken; a given one is kept."""
        workdir.mkdir(parents=True, exist_ok=True)
        props = dict(properties or {})
        if keystore is not None:
            props.setdefault("keystore.path", str(keystore))
        token_file = token_file or workdir / f"{name}.token"
        status_file = workdir / f"{name}.status.json"
        args = [sys.executable, "-m", "pyiceberg_crypto.cli.main", "kms", "serve", "--kms", kms,
                *[f"--kms-property={k}={v}" for k, v in props.items()], "--listen", listen or "",
                "--token-file", str(token_file), "--status-file", str(status_file), *extra]
        for attempt in range(3):
            if listen is None:
                args[args.index("--listen") + 1] = f"127.0.0.1:{reserve_port()}"
            service = cls(workdir, None, token_file, status_file, workdir / f"{name}.log", args)
            try:
                service._launch()
                service.wait_for_status(lambda s: s.get("running"), timeout, "the service to start")
                return service
            except BaseException:
                exited = service.process is not None and service.process.poll() is not None
                taken = exited and "Address already in use" in service.log(since_launch=True)
                if listen is not None or not taken or attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _launch(self) -> None:
        self.status_file.unlink(missing_ok=True)
        self._log_offset = self.log_file.stat().st_size if self.log_file.exists() else 0
        with open(self.log_file, "ab") as log:
            self.process = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir,
                                            env=dict(os.environ, PYTHONPATH=str(ROOT)))

    def restart(self, timeout: float = 60.0, *, listen: str | None = None) -> None:
        """Stop (SIGTERM) and start again with the same arguments (same port: a new token).

        ``listen``: the address to take again, for a service stopped before (its status is gone)."""
        listen = listen or self.status()["listen"]
        self.stop()
        self.args = list(self.args)
        self.args[self.args.index("--listen") + 1] = listen
        self._launch()
        self.wait_for_status(lambda s: s.get("running"), timeout, "the service to restart")

    def status(self) -> dict:
        try:
            return json.loads(self.status_file.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    def wait_for_status(self, predicate, timeout: float, what: str) -> dict:
        """The first status (polled from the status file) that ``predicate`` accepts; fails at once
        with the log when the process exits, and with the log after ``timeout`` (load-scaled)."""
        def accepted() -> dict | None:
            self._fail_if_exited(what)
            status = self.status()
            return status if status and predicate(status) else None

        return eventually(accepted, timeout, message=lambda: f"{what}:\n{self.log()}")

    def wait_for_fresh_status(self, predicate, timeout: float, what: str) -> dict:
        """As :meth:`wait_for_status`, asking for each status (:meth:`refresh_status`, SIGUSR1)
        instead of waiting for the service's own rewrite (every 2 s). For a running service only."""
        def accepted() -> dict | None:
            status = self.refresh_status()
            return status if predicate(status) else None

        return eventually(accepted, timeout, message=lambda: f"{what}:\n{self.log()}")

    def _fail_if_exited(self, what: str) -> None:
        if self.process.poll() is not None:
            pytest.fail(f"kms serve exited ({self.process.returncode}) waiting for {what}:\n{self.log()}")

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def _status_file_version(self) -> tuple[int, int] | None:
        """Which status file is there (replaced atomically: a new inode each write)."""
        try:
            stat = self.status_file.stat()
        except FileNotFoundError:
            return None
        return stat.st_ino, stat.st_mtime_ns

    def refresh_status(self, timeout: float = 30.0) -> dict:
        """Ask for a fresh status (SIGUSR1) and return it once written (counts as of the signal or later)."""
        before = self._status_file_version()
        self.signal(signal.SIGUSR1)

        def rewritten() -> dict | None:
            self._fail_if_exited("a status after SIGUSR1")
            return self.status() if self._status_file_version() != before else None

        return eventually(rewritten, timeout, interval=0.05, message=lambda: f"a status after SIGUSR1:\n{self.log()}")

    @property
    def address(self) -> str:
        return self.status()["listen"]

    @property
    def metrics_port(self) -> int:
        """The port ``--metrics 127.0.0.1:0`` got, as the last start logged it."""
        found = re.search(r"metrics: http://127\.0\.0\.1:(\d+)/metrics", self.log(since_launch=True))
        assert found, f"no metrics address in the service's log:\n{self.log()}"
        return int(found.group(1))

    @property
    def certificate_sha256(self) -> str | None:
        return self.status().get("certificate_sha256")

    def client_settings(self) -> dict[str, str]:
        """The keyword arguments of config.spark_settings / catalog_settings for this service."""
        settings = {"kms_service": self.address, "kms_token_file": str(self.token_file)}
        if self.certificate_sha256:
            settings["kms_certificate_sha256"] = self.certificate_sha256
        return settings

    def log(self, *, since_launch: bool = False) -> str:
        """The service's log (all its starts; ``since_launch``: the last start's lines only)."""
        if not self.log_file.exists():
            return ""
        with open(self.log_file, "rb") as log:
            log.seek(self._log_offset if since_launch else 0)
            return log.read().decode(errors="replace")

    def stop(self, timeout: float = 30.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        return self.process.returncode
