"""A loopback HTTP proxy in front of a REST catalog server that changes what passes through: the
test double of REST servers that forget encryption metadata or vend storage credentials.

    with RestProxy(rest_catalog_server.uri, drop_key_updates=True) as proxy:
        add_catalog(spark, "forgetful", warehouse, catalog_type="rest", uri=proxy.uri, kms_name="test")
"""

from __future__ import annotations

import http.client
import json
import re
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

#: ``/v1/[prefix/]namespaces/NS/tables/T``: the load (GET) and commit (POST) route of one table.
TABLE_ROUTE = re.compile(r"^/v1/(?:.+/)?namespaces/[^/]+/tables/[^/?]+$")
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding"}


#: The request header with which a client asks for vended credentials, and the value it sends.
ACCESS_DELEGATION = ("X-Iceberg-Access-Delegation", "vended-credentials")


class RestProxy:
    """A loopback HTTP proxy in front of a REST catalog server.

    ``drop_key_updates``: commit requests lose their ``add-encryption-key`` updates (the server
    applies the rest). ``strip_keys_on_load``: table load responses lose ``encryption-keys``.
    ``vend_credentials``: a table load whose request carries ``X-Iceberg-Access-Delegation:
    vended-credentials`` gets these ``storage-credentials`` (``{"prefix": ..., "config": {...}}``
    each) in its response, as a credential-vending server sends them. Everything else passes
    through unchanged. ``dropped`` / ``stripped`` / ``vended`` count what it did.
    """

    def __init__(self, upstream: str, *, drop_key_updates: bool = False, strip_keys_on_load: bool = False,
                 vend_credentials: list[dict] | None = None):
        parsed = urllib.parse.urlsplit(upstream)
        self.upstream = (parsed.hostname, parsed.port)
        self.drop_key_updates = drop_key_updates
        self.strip_keys_on_load = strip_keys_on_load
        self.vend_credentials = vend_credentials
        self.dropped = 0
        self.stripped = 0
        self.vended = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> "RestProxy":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def _request_body(self, method: str, path: str, body: bytes) -> bytes:
        if not (self.drop_key_updates and method == "POST" and TABLE_ROUTE.match(path) and body):
            return body
        request = json.loads(body)
        updates = request.get("updates", [])
        kept = [u for u in updates if u.get("action") != "add-encryption-key"]
        self.dropped += len(updates) - len(kept)
        request["updates"] = kept
        return json.dumps(request).encode()

    def _response_body(self, method: str, path: str, status: int, body: bytes, delegation: str) -> bytes:
        if not (method == "GET" and TABLE_ROUTE.match(path) and status == 200):
            return body
        response = json.loads(body)
        if self.strip_keys_on_load and response.get("metadata", {}).pop("encryption-keys", None):
            self.stripped += 1
        if self.vend_credentials is not None and ACCESS_DELEGATION[1] in delegation.split(","):
            response["storage-credentials"] = self.vend_credentials
            self.vended += 1
        return json.dumps(response).encode()

    def _handler_class(self):
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def _forward(self) -> None:
                path = urllib.parse.urlsplit(self.path).path
                length = int(self.headers.get("Content-Length") or 0)
                body = proxy._request_body(self.command, path, self.rfile.read(length) if length else b"")
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in HOP_BY_HOP | {"host", "accept-encoding"}}
                connection = http.client.HTTPConnection(*proxy.upstream, timeout=60)
                try:
                    connection.request(self.command, self.path, body=body or None, headers=headers)
                    response = connection.getresponse()
                    payload = proxy._response_body(self.command, path, response.status, response.read(),
                                                   self.headers.get(ACCESS_DELEGATION[0], ""))
                    self.send_response(response.status)
                    for key, value in response.getheaders():
                        if key.lower() not in HOP_BY_HOP:
                            self.send_header(key, value)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(payload)
                finally:
                    connection.close()

            do_GET = do_POST = do_HEAD = do_DELETE = _forward

            def log_message(self, *args) -> None:  # quiet
                pass

        return Handler


