"""A REST catalog server that does not keep encryption metadata (issue 33, Known limits).

Real REST servers may not implement the spec's ``add-encryption-key`` update, or may drop
``encryption-keys`` from the metadata they store or serve. The test double is a loopback HTTP proxy
in front of the real test server (``rest_catalog_server``) that drops ``add-encryption-key`` updates
from commit requests, or strips ``encryption-keys`` from table load responses. What the
EncryptingRestCatalog must do then: fail the write naming the server's fault and leave nothing
unreadable current (the commit is rolled back), and refuse a table served without its keys with a
message that names the server, never plaintext and never a silently unreadable snapshot.
"""

from __future__ import annotations

import glob
import http.client
import json
import re
import threading
import urllib.parse
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from pyiceberg_crypto import config
from pyiceberg_crypto.kms import InMemoryKms
from pyiceberg_crypto.read import read_table
from pyiceberg_crypto.services.pytest_plugin import rest_catalog_server  # noqa: F401
from pyiceberg_crypto.verify.pipeline import verify_metadata
from tests.conftest import add_catalog

#: ``/v1/[prefix/]namespaces/NS/tables/T``: the load (GET) and commit (POST) route of one table.
TABLE_ROUTE = re.compile(r"^/v1/(?:.+/)?namespaces/[^/]+/tables/[^/?]+$")
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding"}


class ForgetfulRestProxy:
    """A loopback HTTP proxy in front of a REST catalog server that forgets encryption metadata.

    ``drop_key_updates``: commit requests lose their ``add-encryption-key`` updates (the server
    applies the rest). ``strip_keys_on_load``: table load responses lose ``encryption-keys``.
    Everything else passes through unchanged. ``dropped`` / ``stripped`` count what it did.
    """

    def __init__(self, upstream: str, *, drop_key_updates: bool = False, strip_keys_on_load: bool = False):
        parsed = urllib.parse.urlsplit(upstream)
        self.upstream = (parsed.hostname, parsed.port)
        self.drop_key_updates = drop_key_updates
        self.strip_keys_on_load = strip_keys_on_load
        self.dropped = 0
        self.stripped = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> "ForgetfulRestProxy":
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

    def _response_body(self, method: str, path: str, status: int, body: bytes) -> bytes:
        if not (self.strip_keys_on_load and method == "GET" and TABLE_ROUTE.match(path) and status == 200):
            return body
        response = json.loads(body)
        if response.get("metadata", {}).pop("encryption-keys", None):
            self.stripped += 1
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
                    payload = proxy._response_body(self.command, path, response.status, response.read())
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


def load(uri: str, namespace: str, table: str) -> dict:
    with urllib.request.urlopen(f"{uri}/v1/namespaces/{namespace}/tables/{table}", timeout=30) as response:
        return json.loads(response.read())


def magics(metadata: dict) -> tuple[set[bytes], set[bytes]]:
    """First four bytes of the table's data files and of its Avro metadata files (what is on disk)."""
    table_dir = Path(metadata["location"].removeprefix("file:"))
    data = glob.glob(str(table_dir / "data" / "**" / "*.parquet"), recursive=True)
    avro = glob.glob(str(table_dir / "metadata" / "*.avro"))
    return {Path(f).read_bytes()[:4] for f in data}, {Path(f).read_bytes()[:4] for f in avro}


def rows(spark, table: str) -> list[tuple]:
    return sorted(tuple(r) for r in spark.table(table).collect())


def new_catalog(spark, tmp_path, uri: str) -> str:
    name = f"restlost_{uuid.uuid4().hex[:8]}"
    add_catalog(spark, name, tmp_path / "warehouse", catalog_type="rest", uri=uri, kms_name="test")
    return name


@pytest.mark.slow
def test_rest_catalog_server_dropping_add_encryption_key_fails_the_write_and_rolls_it_back(
        spark, kms_registration, master_keys, rest_catalog_server, tmp_path):  # noqa: F811
    """A server that drops ``add-encryption-key``: the INSERT fails naming the server's fault, the
    commit is rolled back (the first one to no snapshot, a later one to the previous snapshot), and
    the table reads back its previous rows everywhere, every file on disk PARE/AGS1."""
    server = rest_catalog_server.uri
    direct = new_catalog(spark, tmp_path, server)
    namespace = f"lost_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE NAMESPACE {direct}.{namespace}")
    with ForgetfulRestProxy(server, drop_key_updates=True) as proxy:
        forgetful = new_catalog(spark, tmp_path, proxy.uri)
        table = f"{namespace}.orders"
        # CREATE TABLE commits no key yet: it passes through the proxy
        spark.sql(f"CREATE TABLE {forgetful}.{table} (id BIGINT, note STRING) USING iceberg "
                  + config.tblproperties_sql(config.table_properties(key_id="k1")))
        error = re.escape(f"the REST catalog at {proxy.uri} did not keep the table's encryption keys "
                          "(add-encryption-key)") + ".*cannot store encrypted tables"

        with pytest.raises(Exception, match=error + ".*rolled back.*'main' is removed again"):
            spark.sql(f"INSERT INTO {forgetful}.{table} VALUES (9, 'lost')")
        assert proxy.dropped >= 1
        metadata = load(server, namespace, "orders")["metadata"]
        assert metadata.get("current-snapshot-id") in (None, -1) and not metadata.get("snapshots")
        assert rows(spark, f"{direct}.{table}") == []

        spark.sql(f"INSERT INTO {direct}.{table} VALUES (1, 'a'), (2, 'b')")
        kept = load(server, namespace, "orders")["metadata"]["current-snapshot-id"]
        with pytest.raises(Exception, match=error + f".*rolled back.*'main' is back at snapshot {kept}"):
            spark.sql(f"INSERT INTO {forgetful}.{table} VALUES (3, 'c')")
        assert proxy.dropped >= 2

        loaded = load(server, namespace, "orders")
        metadata = loaded["metadata"]
        assert metadata["current-snapshot-id"] == kept
        assert [s["snapshot-id"] for s in metadata["snapshots"]] == [kept]  # the lost one is gone
        spark.sql(f"REFRESH TABLE {direct}.{table}")
        assert rows(spark, f"{direct}.{table}") == [(1, "a"), (2, "b")]
        assert rows(spark, f"{forgetful}.{table}") == [(1, "a"), (2, "b")]  # the failed writer too
        assert rows(spark, f"{new_catalog(spark, tmp_path, server)}.{table}") == [(1, "a"), (2, "b")]

    data, avro = magics(metadata)
    assert data == {b"PARE"} and avro == {b"AGS1"}  # never plaintext, whatever was left behind
    kms = InMemoryKms(master_keys)
    report = verify_metadata(loaded["metadata-location"], kms)
    assert report.ok, report
    assert read_table(loaded["metadata-location"], kms).sort_by("id").to_pylist() == [
        {"id": 1, "note": "a"}, {"id": 2, "note": "b"}]


@pytest.mark.slow
def test_rest_catalog_server_serving_no_encryption_keys_is_refused_clearly_on_read_and_write(
        spark, kms_registration, master_keys, rest_catalog_server, tmp_path):  # noqa: F811
    """A server that stores the keys but strips ``encryption-keys`` from load responses: reading or
    appending through it fails with a message naming the server and the missing key (not Iceberg's
    "Cannot find manifest list key metadata"), and the table is unchanged."""
    server = rest_catalog_server.uri
    direct = new_catalog(spark, tmp_path, server)
    namespace = f"strip_{uuid.uuid4().hex[:8]}"
    table = f"{namespace}.events"
    spark.sql(f"CREATE NAMESPACE {direct}.{namespace}")
    spark.sql(f"CREATE TABLE {direct}.{table} (id BIGINT) USING iceberg "
              + config.tblproperties_sql(config.table_properties(key_id="k1")))
    spark.sql(f"INSERT INTO {direct}.{table} VALUES (1), (2)")
    before = load(server, namespace, "events")["metadata"]
    key_id = next(s["key-id"] for s in before["snapshots"] if s["snapshot-id"] == before["current-snapshot-id"])

    with ForgetfulRestProxy(server, strip_keys_on_load=True) as proxy:
        stripping = new_catalog(spark, tmp_path, proxy.uri)
        error = re.escape(f"the REST catalog at {proxy.uri} served table {namespace}.events without the "
                          f"encryption key '{key_id}' of its current snapshot {before['current-snapshot-id']}")
        for statement in (f"SELECT * FROM {stripping}.{table}", f"INSERT INTO {stripping}.{table} VALUES (3)"):
            with pytest.raises(Exception, match=error) as failure:
                spark.sql(statement).collect()
            assert "Cannot find manifest list key metadata" not in str(failure.value)
        assert proxy.stripped >= 2

    after = load(server, namespace, "events")["metadata"]
    assert after["current-snapshot-id"] == before["current-snapshot-id"] and after["encryption-keys"]
    assert rows(spark, f"{direct}.{table}") == [(1,), (2,)]
