"""The HTTP(S) server scaffolding of the KMS stand-ins (Vault Transit, Cloud KMS, Key Vault).

A stand-in subclasses :class:`HttpStandIn` and implements ``_handle(request, method)``; the server
listens on 127.0.0.1 on an ephemeral port, in daemon threads::

    class MyStandIn(HttpStandIn):
        def __init__(self):
            self.start()                                  # or self.start(tls_context)
        def _handle(self, request, method): ...

    standin = MyStandIn(); standin.base_url              # "http://127.0.0.1:PORT"
    standin.close()
"""

from __future__ import annotations

import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class HttpStandIn:
    """A loopback HTTP(S) server handing every GET / POST / PUT / DELETE to ``self._handle``."""

    server: ThreadingHTTPServer
    base_url: str

    def _handle(self, request: BaseHTTPRequestHandler, method: str) -> None:
        raise NotImplementedError

    def start(self, tls_context: ssl.SSLContext | None = None) -> None:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                standin._handle(self, "GET")

            def do_POST(self):
                standin._handle(self, "POST")

            def do_PUT(self):
                standin._handle(self, "POST")

            def do_DELETE(self):
                standin._handle(self, "DELETE")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        if tls_context is not None:
            self.server.socket = tls_context.wrap_socket(self.server.socket, server_side=True)
        scheme = "https" if tls_context is not None else "http"
        self.base_url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
