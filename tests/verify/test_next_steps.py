"""Every mistake names the next step (issue 41, item 3): a table name without its catalog, a Spark
catalog prefix sent to a REST catalog, a Spark Connect session."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pyiceberg_crypto.errors import ArgumentTypeError, TableInputError
from pyiceberg_crypto.kms import InMemoryKms


def test_a_name_without_its_catalog_says_which_to_write(spark):
    from pyiceberg_crypto.verify import verify_table

    current = spark.catalog.currentCatalog()
    with pytest.raises(TableInputError) as excinfo:
        verify_table(spark, "shop.orders")
    message = str(excinfo.value)
    assert f"current catalog {current!r} is not one it configures" in message
    assert "write '" in message and ".shop.orders'" in message
    assert "the session's catalogs: " in message and "local" in message.split("the session's catalogs: ")[1]


class _NotFound(BaseHTTPRequestHandler):
    """A REST catalog that knows no table (Iceberg's error body, HTTP 404)."""

    def do_GET(self):  # noqa: N802 - http.server's name
        body = json.dumps({"error": {"message": "Table does not exist", "type": "NoSuchTableException",
                                     "code": 404}}).encode()
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def empty_rest_catalog():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NotFound)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_spark_catalog_prefix_sent_to_a_rest_catalog_says_drop_it(empty_rest_catalog):
    pytest.importorskip("pyarrow")
    from pyiceberg_crypto.read import read_table

    with pytest.raises(TableInputError) as excinfo:
        read_table("lake.shop.orders", InMemoryKms({}), catalog=empty_rest_catalog)
    message = str(excinfo.value)
    assert "HTTP 404" in message and "if 'lake' is the name of your Spark catalog, leave it out" in message
    assert "shop.orders" in message
    with pytest.raises(TableInputError) as excinfo:  # one level: no prefix to drop, no such hint
        read_table("shop.orders", InMemoryKms({}), catalog=empty_rest_catalog)
    assert "HTTP 404" in str(excinfo.value) and "leave it out" not in str(excinfo.value)


def test_a_spark_connect_session_is_told_what_to_use_instead():
    pytest.importorskip("grpc")
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    from pyiceberg_crypto.bridge import SetupError, register_kms
    from pyiceberg_crypto.keys import key_inventory
    from pyiceberg_crypto.verify import verify_table

    session = ConnectSession.builder.remote("sc://127.0.0.1:1").create()  # no call is made: no server needed
    try:
        for call in (lambda: verify_table(session, "lake.shop.orders"), lambda: key_inventory(session, "lake.a.b")):
            with pytest.raises(ArgumentTypeError) as excinfo:
                call()
            assert "pyiceberg-crypto kms serve" in str(excinfo.value)
            assert "pyiceberg-crypto verify METADATA_JSON" in str(excinfo.value)
        with pytest.raises(SetupError, match="pyiceberg-crypto kms serve"):
            register_kms(session, InMemoryKms({"k": b"\0" * 16}))
    finally:
        session.client.close()  # the channel only: stop() would ask the absent server to release the session
