"""The JVM-free REST catalog client against hostile or broken catalogs (issue 39, item 3): real HTTP
servers on 127.0.0.1 in threads (the peer, not the thing under test), every loop bounded.

- no ``Authorization`` or ``header.*`` value ever reaches another origin (a cross-origin
  redirect is refused; https -> http is another origin);
- a deadline for the whole call: a server that trickles bytes fails at the deadline;
- listings are bounded: pages, namespaces, depth, and a page token that repeats;
- namespaces stay levels: a level may hold a dot and is sent as one level;
- a ``credential``'s token is exchanged again before ``expires_in`` runs out;
- a token over plain http to a host that is not loopback is refused unless allowed.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import ssl
import threading
import time
import urllib.parse
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pyiceberg_crypto.errors import CatalogError
from pyiceberg_crypto.catalog.rest import ALLOW_PLAIN_HTTP_PROPERTY, RestCatalog
from pyiceberg_crypto.catalog.entry import list_tables
from pyiceberg_crypto.catalog.kinds import REST
from tests.testkit import load_factor

TOKEN = "tok-abcdef123456"
SECRET_HEADER = "tenant-secret-987"


class Recorder:
    """What one server saw: (method, path, Authorization, X-Secret) per request."""

    def __init__(self):
        self.requests: list[tuple[str, str, str | None, str | None]] = []
        self.lock = threading.Lock()

    def add(self, handler: BaseHTTPRequestHandler) -> None:
        with self.lock:
            self.requests.append((handler.command, handler.path, handler.headers.get("Authorization"),
                                  handler.headers.get("X-Secret")))


@contextmanager
def serving(route, *, tls: ssl.SSLContext | None = None):
    """A threaded HTTP(S) server on 127.0.0.1 whose answers come from ``route(handler) -> (status,
    body dict | bytes, headers)``; yields (base uri, recorder)."""
    recorder = Recorder()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self):
            recorder.add(self)
            length = int(self.headers.get("Content-Length") or 0)
            self.body = self.rfile.read(length) if length else b""
            answer = route(self)
            if answer is None:
                return  # the route wrote the answer itself
            status, body, headers = answer
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            for key, value in {"Content-Type": "application/json", **headers}.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _serve  # noqa: N815

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{server.server_port}", recorder
    finally:
        server.shutdown()
        server.server_close()


def ok(body: dict, **headers):
    return 200, body, headers


CONFIG = {"defaults": {}, "overrides": {}}


def test_a_cross_origin_redirect_is_refused_and_the_other_origin_sees_no_secret():
    """The catalog answers 302 to another port: the client refuses with a clear error, and the other
    server never receives the token nor the ``header.*`` value (urllib's default handler forwarded both)."""
    with serving(lambda h: ok({"metadata-location": "x", "metadata": {}})) as (elsewhere, seen_elsewhere):
        def route(handler):
            if handler.path.startswith("/v1/config"):
                return ok(CONFIG)
            return 302, b"", {"Location": elsewhere + handler.path}

        with serving(route) as (uri, seen):
            client = RestCatalog.from_properties({"uri": uri, "token": TOKEN, "header.X-Secret": SECRET_HEADER},
                                                 timeout=10)
            with pytest.raises(CatalogError, match=r"redirected table db\.orders to another origin .*"
                                                       r"refused, so its token and headers") as caught:
                client.load_table("db", "orders")
            assert TOKEN not in str(caught.value) and SECRET_HEADER not in str(caught.value)
    assert seen_elsewhere.requests == []
    assert [r[2] for r in seen.requests] == [f"Bearer {TOKEN}"] * 2


def test_a_same_origin_redirect_is_followed_with_the_credentials():
    def route(handler):
        if handler.path.startswith("/v1/config"):
            return ok(CONFIG)
        if handler.path == "/v1/namespaces/db/tables/orders":
            return 307, b"", {"Location": "/v1/namespaces/db/tables/orders-moved"}
        return ok({"metadata-location": "file:/wh/db/orders/metadata/v1.metadata.json", "metadata": {"x": 1}})

    with serving(route) as (uri, seen):
        loaded = RestCatalog(uri, token=TOKEN, headers={"X-Secret": SECRET_HEADER}, timeout=10).load_table("db", "orders")
    assert loaded.metadata == {"x": 1}
    assert seen.requests[-1] == ("GET", "/v1/namespaces/db/tables/orders-moved", f"Bearer {TOKEN}", SECRET_HEADER)


def self_signed_context(directory) -> ssl.SSLContext:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = directory / "cert.pem", directory / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert_file, key_file)
    return server, cert_file


def test_https_to_http_is_never_followed_even_on_the_same_host_and_port(tmp_path):
    server_context, cert_file = self_signed_context(tmp_path)
    client_context = ssl.create_default_context(cafile=str(cert_file))
    with serving(lambda h: ok({"metadata-location": "x", "metadata": {}})) as (plain, seen_plain):
        port = urllib.parse.urlsplit(plain).port

        def route(handler):
            if handler.path.startswith("/v1/config"):
                return ok(CONFIG)
            return 301, b"", {"Location": f"http://127.0.0.1:{port}{handler.path}"}

        with serving(route, tls=server_context) as (uri, seen):
            client = RestCatalog(uri, token=TOKEN, ssl_context=client_context, timeout=10)
            with pytest.raises(CatalogError, match=r"another origin \(HTTP 301 from https://127\.0\.0\.1:\d+ "
                                                       r"to http://127\.0\.0\.1:\d+\)"):
                client.load_table("db", "orders")
            assert seen.requests  # TLS worked: the catalog was asked
    assert seen_plain.requests == []


def test_a_server_that_trickles_its_answer_fails_at_the_deadline_of_the_whole_call():
    """One byte every 0.2 s never trips a per-read timeout; the whole call ends at its deadline
    (1.5 s), far before the 100 s the whole answer takes, however loaded the machine."""
    stop = threading.Event()

    def route(handler):
        body = json.dumps({"defaults": {}, "overrides": {}, "pad": "x" * 500}).encode()
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        for i in range(len(body)):  # bounded: 500 bytes, or until the test ends
            if stop.is_set():
                return None
            try:
                handler.wfile.write(body[i:i + 1])
                handler.wfile.flush()
            except OSError:
                return None
            time.sleep(0.2)
        return None

    with serving(route) as (uri, _):
        started = time.monotonic()
        try:
            with pytest.raises(CatalogError, match=r"did not answer its configuration within 1\.5 s "
                                                       r"\(the whole call\)"):
                RestCatalog(uri, timeout=1.5).list_namespaces()
        finally:
            stop.set()
        assert time.monotonic() - started < 5 * load_factor()  # at most 20 s: the answer takes 100 s


def test_a_server_that_trickles_its_headers_fails_at_the_deadline_too():
    stop = threading.Event()

    def route(handler):
        handler.wfile.write(b"HTTP/1.1 200 OK\r\nX-Pad: ")
        for _ in range(600):  # bounded: 60 s at most (longer than the scaled bound below)
            if stop.is_set():
                return None
            try:
                handler.wfile.write(b"X")
                handler.wfile.flush()
            except OSError:
                return None
            time.sleep(0.1)
        return None

    with serving(route) as (uri, _):
        started = time.monotonic()
        try:
            with pytest.raises(CatalogError, match=r"within 1 s \(the whole call\)"):
                RestCatalog(uri, timeout=1).list_namespaces()
        finally:
            stop.set()
        assert time.monotonic() - started < 4 * load_factor()  # at most 16 s: the headers take 60 s


def test_an_endless_listing_is_cut_at_max_pages_and_a_repeated_page_token_at_once():
    def route(handler):
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(handler.path).query)
        if handler.path.startswith("/v1/config"):
            return ok(CONFIG)
        if "/tables" in handler.path:  # the same token again and again
            return ok({"identifiers": [{"namespace": ["db"], "name": "t"}], "next-page-token": "again"})
        page = int(query.get("pageToken", ["0"])[0])
        return ok({"namespaces": [[f"n{page}"]], "next-page-token": str(page + 1)})

    with serving(route) as (uri, seen):
        client = RestCatalog(uri, timeout=10, max_pages=25)
        with pytest.raises(CatalogError, match=r"more than 25 pages of the namespaces \(max_pages\)"):
            client.list_namespaces()
        assert len(seen.requests) == 1 + 25
        with pytest.raises(CatalogError, match=r"listing of the tables of namespace db does not end"):
            client.list_tables("db")
        assert len(seen.requests) == 1 + 25 + 2


def test_endless_namespaces_are_cut_at_max_depth_and_max_namespaces():
    def deep(handler):
        if handler.path.startswith("/v1/config"):
            return ok(CONFIG)
        parent = urllib.parse.parse_qs(urllib.parse.urlsplit(handler.path).query).get("parent", [""])[0]
        levels = parent.split("\x1f") if parent else []
        return ok({"namespaces": [levels + [f"l{len(levels)}"]]})

    with serving(deep) as (uri, seen):
        with pytest.raises(CatalogError, match=r"namespace l0\.l1\.l2\..*l8 is deeper than 8 levels \(max_depth\)"):
            RestCatalog(uri, timeout=10, max_depth=8).list_namespaces()
        assert len(seen.requests) == 1 + 9

    def wide(handler):
        if handler.path.startswith("/v1/config"):
            return ok(CONFIG)
        parent = urllib.parse.parse_qs(urllib.parse.urlsplit(handler.path).query).get("parent", [""])[0]
        prefix = parent.split("\x1f") if parent else []
        return ok({"namespaces": [prefix + [f"c{i}"] for i in range(40)]})

    with serving(wide) as (uri, _):
        with pytest.raises(CatalogError, match=r"more than 100 namespaces \(max_namespaces\)"):
            RestCatalog(uri, timeout=10, max_namespaces=100).list_namespaces()


def test_a_level_that_holds_a_dot_stays_one_level_end_to_end():
    """``["x.y"]`` is one level: listed as such, asked as ``x.y`` (not ``x%1Fy``), and audited; the
    two-level ``["x", "y"]`` beside it is asked as ``x%1Fy``. Before, ``x.y`` was split into two
    levels, the catalog answered 404, and the whole audit stopped (exit 2)."""
    def route(handler):
        path = urllib.parse.urlsplit(handler.path).path
        if path == "/v1/config":
            return ok(CONFIG)
        if path == "/v1/namespaces":
            parent = urllib.parse.parse_qs(urllib.parse.urlsplit(handler.path).query).get("parent", [""])[0]
            return ok({"namespaces": {"": [["x.y"], ["x"]], "x": [["x", "y"]]}.get(parent, [])})
        tables = {"/v1/namespaces/x.y/tables": "dotted", "/v1/namespaces/x%1Fy/tables": "nested",
                  "/v1/namespaces/x/tables": None}
        if path in tables:
            names = [tables[path]] if tables[path] else []
            return ok({"identifiers": [{"namespace": [], "name": n} for n in names]})
        for loaded in ("/v1/namespaces/x.y/tables/dotted", "/v1/namespaces/x%1Fy/tables/nested"):
            if path == loaded:
                return ok({"metadata-location": f"file:/wh{path}/v1.metadata.json", "metadata": {}})
        return 404, {"error": {"message": f"no {path}", "type": "NoSuchNamespaceException", "code": 404}}, {}

    with serving(route) as (uri, seen):
        client = RestCatalog(uri, timeout=10)
        assert client.list_namespaces() == [("x",), ("x", "y"), ("x.y",)]
        assert client.list_tables(("x.y",)) == ["dotted"] == client.list_tables("x.y")  # a string is one level
        assert client.list_tables(("x", "y")) == ["nested"]
        assert client.load_table("x.y", "dotted").name == "`x.y`.dotted"
        rows = list_tables({"type": REST, "uri": uri})
    assert [(row.namespace, row.name, row.parameters.get("metadata_location")) for row in rows] == [
        ("`x.y`", "dotted", "file:/wh/v1/namespaces/x.y/tables/dotted/v1.metadata.json"),
        ("x.y", "nested", "file:/wh/v1/namespaces/x%1Fy/tables/nested/v1.metadata.json")]
    assert not [r for r in seen.requests if r[1].split("?")[0] not in (
        "/v1/config", "/v1/namespaces", "/v1/namespaces/x.y/tables", "/v1/namespaces/x%1Fy/tables",
        "/v1/namespaces/x/tables", "/v1/namespaces/x.y/tables/dotted", "/v1/namespaces/x%1Fy/tables/nested")]


def test_a_credential_token_is_exchanged_again_before_it_expires_and_after_a_401():
    issued: list[str] = []
    accepted: set[str] = set()

    def route(handler):
        if handler.path == "/v1/oauth/tokens":
            token = f"tok-{len(issued)}"
            issued.append(token)
            accepted.add(token)
            return ok({"access_token": token, "token_type": "bearer", "expires_in": 3})
        auth = handler.headers.get("Authorization", "")
        if auth.removeprefix("Bearer ") not in accepted:
            return 401, {"error": {"message": "expired", "type": "NotAuthorizedException", "code": 401}}, {}
        if handler.path.startswith("/v1/config"):
            return ok(CONFIG)
        return ok({"namespaces": []})

    now = [1000.0]  # the client's clock: time passes when the test says so, however loaded the machine
    with serving(route) as (uri, seen):
        client = RestCatalog(uri, credential="reader:s3cret", timeout=10, clock=lambda: now[0])
        assert client.list_namespaces() == []
        assert issued == ["tok-0"]
        now[0] += 2.3  # short of 80 % of expires_in: the token is still used
        assert client.list_namespaces() == []
        assert issued == ["tok-0"]
        now[0] += 0.2  # 80 % of expires_in has passed: the next call exchanges the credential first
        assert client.list_namespaces() == []
        assert issued == ["tok-0", "tok-1"]
        assert seen.requests[-1][2] == "Bearer tok-1"
        accepted.clear()  # the server revokes every token: one new exchange, then the call succeeds
        assert client.list_namespaces() == []
        assert issued[-1] == "tok-2" and seen.requests[-1][2] == "Bearer tok-2"
        assert not [r for r in seen.requests if r[1] != "/v1/oauth/tokens" and r[2] is None]


@pytest.mark.parametrize("uri", ["http://10.1.2.3:8181", "http://catalog.example:8181", "http://[2001:db8::1]:8181"])
def test_a_token_over_plain_http_to_a_host_that_is_not_loopback_is_refused_unless_allowed(uri):
    for secret in ({"token": TOKEN}, {"credential": "reader:s3cret"}):
        with pytest.raises(CatalogError, match=rf"clear text over http:// .*{ALLOW_PLAIN_HTTP_PROPERTY}=true") as caught:
            RestCatalog.from_properties({"uri": uri, **secret})
        assert TOKEN not in str(caught.value) and "s3cret" not in str(caught.value)
        RestCatalog.from_properties({"uri": uri, **secret, ALLOW_PLAIN_HTTP_PROPERTY: "true"})  # allowed: built
    RestCatalog.from_properties({"uri": uri})  # no secret to protect
    RestCatalog.from_properties({"uri": uri.replace("http://", "https://"), "token": TOKEN})
    for loopback in ("http://127.0.0.1:8181", "http://127.9.9.9:1", "http://localhost:8181", "http://[::1]:8181"):
        RestCatalog.from_properties({"uri": loopback, "token": TOKEN})
    with pytest.raises(CatalogError, match="oauth2-server-uri|clear text"):  # the token endpoint counts too
        RestCatalog.from_properties({"uri": "https://catalog.example", "credential": "a:b",
                                     "oauth2-server-uri": "http://auth.example/token"})


def test_a_server_that_trickles_its_tls_handshake_fails_at_the_deadline_too():
    """The socket is watched from the moment it exists, before the handshake: a peer that sends a
    TLS record header and then one byte every 0.1 s ends at the deadline."""
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def trickle():
        connection, _ = listener.accept()
        with connection:
            connection.recv(4096)  # the ClientHello
            connection.sendall(b"\x16\x03\x03\x40\x00")  # a handshake record of 16 KiB follows...
            for _ in range(600):  # bounded: 60 s at most (longer than the scaled bound below)
                if stop.is_set():
                    return
                try:
                    connection.sendall(b"\x02")
                except OSError:
                    return
                time.sleep(0.1)

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    started = time.monotonic()
    try:
        with pytest.raises(CatalogError, match=r"within 1 s \(the whole call\)"):
            RestCatalog(f"https://127.0.0.1:{listener.getsockname()[1]}", timeout=1).list_namespaces()
    finally:
        stop.set()
        listener.close()
    assert time.monotonic() - started < 4 * load_factor()  # at most 16 s: the trickle lasts 60 s
