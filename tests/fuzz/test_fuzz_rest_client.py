"""Fuzz targets for the JVM-free REST catalog client (issue 39, items 3 and 6): its reply parser and
its namespace names. A real HTTP server on 127.0.0.1 (the peer) answers whatever the case says;
same profiles as the rest of tests/fuzz (``make test``: short and fixed; ``make fuzz``: long and
random), each case within the harness's bounds (10 s, 256 MiB). No Spark, no table.

Properties, for every case:
* replies (any status, any bytes, any JSON, any ``next-page-token``, any ``Location``): every call
  returns well-typed values (``list_namespaces``: sorted tuples of non-empty strings;
  ``list_tables``: sorted strings; ``load_table``: a string location and a dict) or raises
  ``CatalogError``, whose message never holds the token; nothing ever reaches the other
  origin the redirects point at;
* namespace names (any levels: dots, ``%1F``, ``/``, ``..``, controls, lone surrogates): the server
  receives exactly the levels asked for, as one path segment, or the client refuses the name with
  ``CatalogError`` (a lone surrogate), never anything else; ``namespace_name`` always renders.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyiceberg_crypto.errors import CatalogError
from pyiceberg_crypto.catalog.rest import NAMESPACE_SEPARATOR, RestCatalog, namespace_name
from tests.fuzz.conftest import fuzz_settings
from tests.fuzz.harness import bounded

TOKEN = "fuzz-token-5e5e5e5e"


class Peer:
    """A server whose answers come from ``self.answer(path) -> (status, body bytes, headers)``."""

    def __init__(self):
        self.answer = lambda path: (200, b"{}", {})
        self.paths: list[str] = []
        self.auth: list[str | None] = []
        peer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):  # noqa: N802
                peer.paths.append(self.path)
                peer.auth.append(self.headers.get("Authorization"))
                status, body, headers = peer.answer(self.path)
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.uri = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def peers():
    catalog, elsewhere = Peer(), Peer()
    yield catalog, elsewhere
    catalog.close()
    elsewhere.close()


json_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                         st.text(max_size=12), st.sampled_from(["", ".", "x.y", "\ud800", "\x1f", "a/b", "..", "%1F"]))
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.sampled_from(["namespaces", "identifiers", "name", "namespace",
                                                              "next-page-token", "metadata-location", "metadata",
                                                              "config", "defaults", "overrides", "prefix", "error",
                                                              "message", "type", "code"]), inner, max_size=4),
                           max_leaves=12)


@st.composite
def replies(draw, elsewhere_uri: str = ""):
    """One answer: a status, a body (JSON of any shape, or bytes), and maybe a Location."""
    status = draw(st.sampled_from([200, 200, 200, 204, 301, 302, 307, 400, 401, 404, 500, 503]))
    body = draw(st.one_of(json_values.map(lambda v: json.dumps(v).encode()), st.binary(max_size=64),
                          st.just(b'{"namespaces": [["a"], ["a", "b"]], "next-page-token": "p"}'),
                          st.just(b'{"identifiers": [{"namespace": ["a"], "name": "t"}], "next-page-token": "q"}')))
    headers = {}
    if 300 <= status < 400:
        headers["Location"] = draw(st.sampled_from(["/v1/namespaces", "ELSEWHERE/v1/namespaces", "https://[::1]:1/x",
                                                    "//127.0.0.2:9/x", "", "http://user:pw@127.0.0.1:1/"]))
    return status, body, headers


@given(st.lists(replies(), min_size=1, max_size=6), st.sampled_from(["namespaces", "tables", "load"]))
@fuzz_settings()
def test_any_reply_is_a_typed_answer_or_a_clear_error(peers, answers, call):
    catalog, elsewhere = peers
    before = len(elsewhere.paths)
    queue = list(answers)

    def answer(path):
        if path.startswith("/v1/config"):
            return 200, b'{"defaults": {}, "overrides": {}}', {}
        status, body, headers = queue[0] if len(queue) == 1 else queue.pop(0)
        if "Location" in headers:
            headers = {"Location": headers["Location"].replace("ELSEWHERE", elsewhere.uri)}
        return status, body, headers

    catalog.answer = answer
    client = RestCatalog(catalog.uri, token=TOKEN, timeout=3, max_pages=20, max_namespaces=50, max_depth=4)

    def run():
        try:
            if call == "namespaces":
                found = client.list_namespaces()
                assert found == sorted(found)
                assert all(isinstance(ns, tuple) and ns and all(isinstance(l, str) and l for l in ns) for ns in found)
            elif call == "tables":
                names = client.list_tables(("a", "b.c"))
                assert names == sorted(names) and all(isinstance(n, str) and n for n in names)
            else:
                loaded = client.load_table(("a",), "t")
                assert isinstance(loaded.metadata_location, str) and isinstance(loaded.metadata, dict)
        except CatalogError as exc:
            assert TOKEN not in str(exc)
            assert "\n" not in str(exc)

    bounded(run)
    assert len(elsewhere.paths) == before  # a redirect never took the token to another origin


namespace_levels = st.lists(st.one_of(st.text(min_size=1, max_size=8),
                                      st.sampled_from(["x.y", ".", "..", "a/b", "%1F", "\x1f", "\ud800", "é", " ", "?#"])),
                            min_size=1, max_size=4)


@given(namespace_levels, st.text(min_size=1, max_size=8))
@fuzz_settings(weight=2)
def test_namespace_levels_reach_the_server_exactly_or_are_refused(peers, levels, table):
    catalog, _ = peers

    def answer(path):
        if path.startswith("/v1/config"):
            return 200, b'{"defaults": {}, "overrides": {}}', {}
        return 200, json.dumps({"metadata-location": "file:/x", "metadata": {}}).encode(), {}

    catalog.answer = answer
    client = RestCatalog(catalog.uri, timeout=3, prefix="")
    shown = namespace_name(levels)
    assert isinstance(shown, str)
    before = len(catalog.paths)

    def run():
        try:
            client.load_table(levels, table)
        except CatalogError as exc:
            assert "lone surrogate" in str(exc)
            return None
        return catalog.paths[before]

    path = bounded(run)
    if path is None:
        assert any(0xD800 <= ord(c) <= 0xDFFF for c in "".join(levels) + table)
        return
    parts = path.split("?")[0].split("/")
    assert parts[:3] == ["", "v1", "namespaces"] and parts[4] == "tables" and len(parts) == 6
    assert urllib.parse.unquote(parts[3], errors="strict").split(NAMESPACE_SEPARATOR) == list(levels) or \
        NAMESPACE_SEPARATOR in "".join(levels)  # a level holding 0x1F itself cannot round-trip (the spec's limit)
    assert urllib.parse.unquote(parts[5]) == table
