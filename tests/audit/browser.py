"""A real headless Chromium (Debian's ``chromium`` package), driven over the DevTools protocol on a
pipe (``--remote-debugging-pipe``: JSON messages separated by NUL bytes on file descriptors 3 and
4), with nothing but the standard library::

    with Chromium.start(tmp_path / "profile") as browser:
        page = browser.open(html_path.as_uri())          # waits for the load event
        page.evaluate("document.title")
        page.screenshot(tmp_path / "page.png")
        page.errors                                       # console errors and uncaught exceptions

``find_chromium()`` says where the browser is, or why there is none (the Makefile's
``system-packages`` target installs it from Debian when this is root with apt-get).
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
TIMEOUT = 60.0


def find_chromium() -> str | None:
    """The browser executable: ``$PYICEBERG_CRYPTO_CHROMIUM``, else the first of :data:`CANDIDATES` on the PATH."""
    explicit = os.environ.get("PYICEBERG_CRYPTO_CHROMIUM")
    if explicit:
        return explicit
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def installable_here() -> bool:
    """Root with apt-get: ``make system-packages`` would have installed Chromium, so its absence is a failure."""
    return os.geteuid() == 0 and shutil.which("apt-get") is not None


def _above_nine(fd: int) -> int:
    high = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.close(fd)
    return high


class BrowserError(Exception):
    pass


class Chromium:
    """One headless browser process; :meth:`open` gives a page (a target in a flat session)."""

    def __init__(self, process: subprocess.Popen, to_browser: int, from_browser: int):
        self.process = process
        self._out, self._in = to_browser, from_browser
        self._next_id = 0
        self._lock = threading.Lock()
        self._replies: dict[int, dict] = {}
        self._events: list[dict] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True, name="chromium-devtools")
        self._reader.start()

    @classmethod
    def start(cls, profile: Path, executable: str | None = None) -> Chromium:
        executable = executable or find_chromium()
        if executable is None:
            raise BrowserError("no Chromium found")
        to_read, to_browser = os.pipe()  # the browser reads commands on its fd 3
        from_browser, to_write = os.pipe()  # and writes replies and events on its fd 4
        # The browser's ends moved to fds >= 10, so that putting them on 3 and 4 cannot clobber one another.
        to_read, to_write = (_above_nine(fd) for fd in (to_read, to_write))
        args = [executable, "--headless=new", "--remote-debugging-pipe", "--disable-gpu", "--no-first-run",
                "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
                "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--window-size=1280,900", "about:blank"]
        if os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # Chromium refuses to run as root with its sandbox
        profile.mkdir(parents=True, exist_ok=True)
        log = open(profile / "chromium.log", "wb")
        # bash puts the two pipe ends on file descriptors 3 and 4, where the browser expects them
        # (dash's redirections take one-digit descriptors only).
        bash = shutil.which("bash") or "/bin/bash"
        process = subprocess.Popen([bash, "-c", f'exec "$0" "$@" 3<&{to_read} 4>&{to_write}', *args],
                                   pass_fds=(to_read, to_write),
                                   stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        log.close()
        os.close(to_read)
        os.close(to_write)
        return cls(process, to_browser, from_browser)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=10)
        except Exception:  # noqa: BLE001 - already gone
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for fd in (self._out, self._in):
            try:
                os.close(fd)
            except OSError:
                pass

    def _read(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = os.read(self._in, 1 << 20)
            except OSError:
                chunk = b""
            if not chunk:
                with self._changed:
                    self._events.append({"method": "__closed__"})
                    self._changed.notify_all()
                return
            buffer += chunk
            while b"\0" in buffer:
                raw, buffer = buffer.split(b"\0", 1)
                message = json.loads(raw)
                with self._changed:
                    if "id" in message:
                        self._replies[message["id"]] = message
                    else:
                        self._events.append(message)
                    self._changed.notify_all()

    def send(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = TIMEOUT) -> dict:
        with self._lock:
            self._next_id += 1
            ident = self._next_id
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        deadline = time.monotonic() + timeout
        try:
            os.write(self._out, json.dumps(message).encode() + b"\0")
        except BrokenPipeError:
            raise BrowserError(f"the browser exited before {method} (exit status {self.process.poll()})") from None
        with self._changed:
            while ident not in self._replies:
                if any(e.get("method") == "__closed__" for e in self._events):
                    raise BrowserError(f"the browser exited during {method}")
                if not self._changed.wait(max(0.0, deadline - time.monotonic())):
                    raise BrowserError(f"no reply to {method} within {timeout} s")
            reply = self._replies.pop(ident)
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def wait_event(self, method: str, session: str | None, timeout: float = TIMEOUT) -> dict:
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for event in self._events:
                    if event.get("method") == method and event.get("sessionId") == session:
                        self._events.remove(event)
                        return event
                if not self._changed.wait(max(0.0, deadline - time.monotonic())):
                    raise BrowserError(f"no {method} within {timeout} s")

    def events(self, session: str) -> list[dict]:
        with self._changed:
            return [e for e in self._events if e.get("sessionId") == session]

    def open(self, url: str, width: int = 1280, height: int = 900) -> Page:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for method in ("Runtime.enable", "Log.enable", "Page.enable"):
            self.send(method, session=session)
        self.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                         "mobile": False}, session=session)
        self.send("Page.navigate", {"url": url}, session=session)
        self.wait_event("Page.loadEventFired", session)
        return Page(self, session)


class Page:
    def __init__(self, browser: Chromium, session: str):
        self.browser, self.session = browser, session

    def evaluate(self, expression: str) -> Any:
        """The JSON value of ``expression`` in the page (exceptions raise BrowserError)."""
        result = self.browser.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                        "awaitPromise": True}, session=self.session)
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression!r} raised: {result['exceptionDetails']}")
        return result["result"].get("value")

    @property
    def errors(self) -> list[str]:
        """Console errors, failed loads (CSP refusals included) and uncaught exceptions so far."""
        out = []
        for event in self.browser.events(self.session):
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                out.append(f"exception: {params['exceptionDetails'].get('text')} "
                           f"{params['exceptionDetails'].get('exception', {}).get('description', '')}")
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                out.append("console: " + " ".join(str(a.get("value", a.get("description"))) for a in params["args"]))
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                out.append(f"log: {params['entry'].get('text')} {params['entry'].get('url', '')}")
        return out

    def screenshot(self, path: Path, full_page: bool = False) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = self.evaluate("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
            params["clip"] = {"x": 0, "y": 0, "width": size[0], "height": size[1], "scale": 1}
            params["captureBeyondViewport"] = True
        data = self.browser.send("Page.captureScreenshot", params, session=self.session)["data"]
        path.write_bytes(base64.b64decode(data))
        return path
