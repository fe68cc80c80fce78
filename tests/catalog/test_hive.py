"""The pure-Python Thrift client against a real Hive metastore (tables made by the JVM's own
HiveMetaStoreClient, the reference) and against small hostile servers on 127.0.0.1."""

from __future__ import annotations

import socketserver
import struct
import threading
import time
import tracemalloc
import uuid

import pytest

from pyiceberg_crypto.errors import CatalogError
from pyiceberg_crypto.catalog import hive as hms
from pyiceberg_crypto.catalog.hive import table_parameters
from pyiceberg_crypto.catalog import entry as verify_metastore
from pyiceberg_crypto.testing.ports import closed_port
from tests.testkit import load_factor

pytestmark = [pytest.mark.loopback]

ICEBERG_PARAMS = {
    "table_type": "ICEBERG",
    "metadata_location": "file:/x/00001-abc.metadata.json",
    "metadata_hash": "n4bQgYhMfWWaL+qgxVrQFaO/TxsrC4Is0V1sFbDwCgg=",
    "comment": "café ☕ 東京 𝄞 Ωmega",
    "EXTERNAL": "TRUE",
}


# --- a real metastore, tables made through the JVM client ---------------------------------------

@pytest.fixture(scope="module")
def hive_tables(spark, hive_metastore, tmp_path_factory):
    """A database with an Iceberg-looking table and a plain Hive table; yields (db, iceberg, plain,
    the JVM client's parameters of the Iceberg table)."""
    jvm = spark.sparkContext._jvm
    api = jvm.org.apache.hadoop.hive.metastore.api
    hive_conf = jvm.org.apache.hadoop.hive.conf.HiveConf
    conf = hive_conf(spark.sparkContext._jsc.hadoopConfiguration(), hive_conf._java_lang_class)
    conf.set("hive.metastore.uris", hive_metastore.uri)
    root = tmp_path_factory.mktemp("hms-tables")
    database = f"hmsread_{uuid.uuid4().hex[:8]}"
    client = jvm.org.apache.hadoop.hive.metastore.HiveMetaStoreClient(conf)
    try:
        client.createDatabase(api.Database(database, "", (root / "db").as_uri(), jvm.java.util.HashMap()))

        def create(name: str, params: dict[str, str]) -> None:
            cols = jvm.java.util.ArrayList()
            cols.add(api.FieldSchema("id", "bigint", None))
            serde = api.SerDeInfo(name, "org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe", jvm.java.util.HashMap())
            sd = api.StorageDescriptor()
            sd.setCols(cols)
            sd.setLocation((root / name).as_uri())
            sd.setInputFormat("org.apache.hadoop.mapred.FileInputFormat")
            sd.setOutputFormat("org.apache.hadoop.mapred.FileOutputFormat")
            sd.setSerdeInfo(serde)
            table = api.Table()
            table.setDbName(database)
            table.setTableName(name)
            table.setOwner("tester")
            table.setTableType("EXTERNAL_TABLE")
            table.setSd(sd)
            table.setPartitionKeys(jvm.java.util.ArrayList())
            java_params = jvm.java.util.HashMap()
            for key, value in params.items():
                java_params.put(key, value)
            table.setParameters(java_params)
            client.createTable(table)

        create("iceberg_t", ICEBERG_PARAMS)
        create("plain_t", {"EXTERNAL": "TRUE", "comment": "just Hive"})
        reference = dict(client.getTable(database, "iceberg_t").getParameters())
    finally:
        client.close()
    yield database, "iceberg_t", "plain_t", reference


def test_reads_the_same_parameters_as_the_jvm_client(hive_tables, hive_metastore):
    database, iceberg, _, reference = hive_tables
    params = table_parameters(hive_metastore.uri, database, iceberg, timeout=10)
    assert params == reference
    assert {k: params[k] for k in ICEBERG_PARAMS} == ICEBERG_PARAMS  # incl. the non-ASCII value
    assert set(params) - set(ICEBERG_PARAMS) == {"transient_lastDdlTime"}  # what Hive adds itself


def test_one_exception_type_with_the_spark_verifier():
    assert CatalogError is CatalogError


def test_plain_hive_table_is_not_an_iceberg_table(hive_tables, hive_metastore):
    database, _, plain, _ = hive_tables
    with pytest.raises(CatalogError) as excinfo:
        table_parameters(hive_metastore.uri, database, plain)
    assert str(excinfo.value) == (
        f"{database}.{plain} is not an Iceberg table in the Hive metastore at 127.0.0.1:{hive_metastore.port}")


def test_unknown_table_and_database_do_not_exist(hive_tables, hive_metastore):
    database = hive_tables[0]
    where = f"127.0.0.1:{hive_metastore.port}"
    with pytest.raises(CatalogError) as excinfo:
        table_parameters(hive_metastore.uri, database, "nope")
    assert str(excinfo.value).startswith(f"table {database}.nope does not exist in the Hive metastore at {where}: ")
    assert "nope table not found" in str(excinfo.value)  # Hive's own message, passed through
    with pytest.raises(CatalogError) as excinfo:
        table_parameters(hive_metastore.uri, "no_such_db", "t")
    assert str(excinfo.value) == f"table no_such_db.t does not exist in the Hive metastore at {where}: no_such_db.t table not found"


def test_unreachable_metastore_fails_fast_naming_host_and_port():
    with closed_port() as port, pytest.raises(CatalogError) as excinfo:
        start = time.monotonic()
        table_parameters(f"thrift://127.0.0.1:{port}", "db", "t", timeout=60)
    assert time.monotonic() - start < 2 * load_factor()  # refused at once: far short of the 60 s timeout
    assert str(excinfo.value) == (
        f"cannot reach the Hive metastore to read table db.t: 127.0.0.1:{port} (Connection refused)")


def test_next_uri_is_tried_when_the_first_is_unreachable(hive_tables, hive_metastore):
    database, iceberg, _, reference = hive_tables
    with closed_port() as port:
        uris = f"thrift://127.0.0.1:{port}, {hive_metastore.uri}"
        assert table_parameters(uris, database, iceberg, timeout=10) == reference


@pytest.mark.parametrize("uri, shown", [
    ("http://127.0.0.1:9083", "invalid Hive metastore URI 'http://127.0.0.1:9083': expected thrift://host:port"),
    ("thrift://127.0.0.1:notaport", "invalid Hive metastore URI 'thrift://127.0.0.1:notaport': Port could not"),
    (" , ", "no Hive metastore URI in ' , '"),
])
def test_invalid_uris(uri, shown):
    with pytest.raises(CatalogError) as excinfo:
        table_parameters(uri, "db", "t")
    assert str(excinfo.value).startswith(shown)


def test_a_bare_host_port_names_both_ways_to_write_it():
    """`--metastore 127.0.0.1:8181` (issue 41): the message says what to type for Hive and for REST."""
    with pytest.raises(CatalogError) as excinfo:
        table_parameters("127.0.0.1:8181", "db", "t")
    message = str(excinfo.value)
    assert "thrift://127.0.0.1:8181 for a Hive metastore" in message
    assert "http://127.0.0.1:8181 for a REST catalog" in message and "--rest-uri" in message


# --- hand-made servers: what a broken or hostile metastore could send ----------------------------

def string(value: str | bytes) -> bytes:
    data = value.encode() if isinstance(value, str) else value
    return struct.pack(">i", len(data)) + data


def field(ttype: int, fid: int, payload: bytes) -> bytes:
    return struct.pack(">bh", ttype, fid) + payload


def message(kind: int, body: bytes, name: str = "get_table", seqid: int = 1) -> bytes:
    return struct.pack(">I", 0x80010000 | kind) + string(name) + struct.pack(">i", seqid) + body


def string_map(entries: dict[str, str]) -> bytes:
    return bytes([11, 11]) + struct.pack(">i", len(entries)) + b"".join(string(k) + string(v) for k, v in entries.items())


def table_reply(table_struct: bytes) -> bytes:
    return message(2, field(12, 0, table_struct) + b"\x00")


# The call get_table("db", "t"), byte by byte as the Thrift spec writes it.
EXPECTED_CALL = (b"\x80\x01\x00\x01" + b"\x00\x00\x00\x09get_table" + b"\x00\x00\x00\x01"
                 + b"\x0b\x00\x01\x00\x00\x00\x02db" + b"\x0b\x00\x02\x00\x00\x00\x01t" + b"\x00")


@pytest.fixture
def fake_metastore():
    """start(reply, close=True) -> uri of a server that reads the call, sends ``reply`` (None: never
    answers) and closes. ``calls`` holds the calls received."""
    stop = threading.Event()
    servers = []
    calls: list[bytes] = []

    def start(reply: bytes | None) -> str:
        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                self.request.settimeout(5)
                data = b""
                while len(data) < len(EXPECTED_CALL) and (chunk := self.request.recv(4096)):
                    data += chunk
                calls.append(data)
                if reply is None:
                    stop.wait(10)
                else:
                    self.request.sendall(reply)

        server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        servers.append(server)
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        return f"thrift://127.0.0.1:{server.server_address[1]}"

    start.calls = calls
    yield start
    stop.set()
    for server in servers:
        server.shutdown()
        server.server_close()


def ask(uri: str, **kwargs) -> str:
    with pytest.raises(CatalogError) as excinfo:
        table_parameters(uri, "db", "t", timeout=kwargs.pop("timeout", 5))
    return str(excinfo.value)


def test_sends_the_exact_call_and_skips_fields_of_every_type(fake_metastore):
    every_type = (
        field(2, 20, b"\x01")                                    # bool
        + field(3, 21, b"\x7f")                                  # byte
        + field(6, 22, struct.pack(">h", -2))                    # i16
        + field(8, 4, struct.pack(">i", 1700000000))             # i32 createTime
        + field(10, 23, struct.pack(">q", -1))                   # i64
        + field(4, 24, struct.pack(">d", 1.5))                   # double
        + field(11, 1, string("t")) + field(11, 2, string(b"\xff\x00binary"))
        + field(12, 7, field(15, 1, bytes([12]) + struct.pack(">i", 2) + (field(11, 1, string("id")) + b"\x00") * 2)
                + field(13, 2, bytes([8, 15]) + struct.pack(">i", 1) + struct.pack(">i", 5)
                        + bytes([6]) + struct.pack(">i", 2) + b"\x00\x01\x00\x02") + b"\x00")  # struct/list/map
        + field(14, 25, bytes([10]) + struct.pack(">i", 3) + b"\x00" * 24)  # set<i64>
        + field(15, 26, bytes([14]) + struct.pack(">i", 1) + bytes([11]) + struct.pack(">i", 1) + string("x"))
        + field(13, 9, string_map({"table_type": "iceberg", "metadata_location": "s3://b/m.json", "é": "ü"}))
        + field(11, 12, string("EXTERNAL_TABLE"))
        + field(13, 27, bytes([11, 11]) + struct.pack(">i", 0))  # empty map after the parameters
    )
    uri = fake_metastore(table_reply(every_type + b"\x00") + b"trailing bytes are never read")
    assert table_parameters(uri, "db", "t") == {"table_type": "iceberg", "metadata_location": "s3://b/m.json", "é": "ü"}
    assert fake_metastore.calls == [EXPECTED_CALL]


def test_silent_server_times_out(fake_metastore):
    uri = fake_metastore(None)
    start = time.monotonic()
    shown = ask(uri, timeout=0.5)
    assert time.monotonic() - start < 2 * load_factor()  # the server stays silent for 10 s
    assert shown == f"timed out after 0.5 s asking table db.t from the Hive metastore at {uri[9:]}"


def test_huge_string_length_is_refused_without_allocating(fake_metastore):
    uri = fake_metastore(struct.pack(">I", 0x80010002) + struct.pack(">i", 2**31 - 1) + b"get_table")
    tracemalloc.start()
    try:
        shown = ask(uri)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024
    assert shown == (f"invalid reply asking table db.t from the Hive metastore at {uri[9:]}: "
                     "string of 2147483647 bytes is more than the limit of 16777216 bytes")


@pytest.mark.parametrize("table_struct, limit", [
    (field(13, 9, bytes([11, 11]) + struct.pack(">i", 2**31 - 1)), "container of 2147483647 entries is more than the limit of 1000000 entries"),
    (field(15, 30, bytes([8]) + struct.pack(">i", 1_000_001)), "container of 1000001 entries is more than the limit of 1000000 entries"),
    (field(15, 30, (bytes([15]) + struct.pack(">i", 1)) * 100), "values nested deeper than the limit of 64"),
    (field(13, 9, bytes([11, 11]) + struct.pack(">i", -1)), "negative length -1"),
    (field(7, 30, b""), "unknown Thrift type 7"),
    (field(8, 9, b"\x00\x00\x00\x01"), "Table.parameters has Thrift type 8, not a map"),
    (field(13, 9, string_map({"k": "v"}).replace(b"v", b"\xe9")), "a string is not valid UTF-8"),
], ids=["map-size", "list-size", "depth", "negative", "unknown-type", "parameters-type", "utf8"])
def test_hostile_replies_name_the_limit(fake_metastore, table_struct, limit):
    uri = fake_metastore(table_reply(table_struct))
    assert ask(uri) == f"invalid reply asking table db.t from the Hive metastore at {uri[9:]}: {limit}"


def test_reply_size_is_bounded(fake_metastore, monkeypatch):
    monkeypatch.setattr(hms, "MAX_REPLY_BYTES", 1024 * 1024)
    uri = fake_metastore(table_reply(field(11, 10, string("x" * (1024 * 1024 + 1)))))
    assert ask(uri).endswith(": the reply is longer than the limit of 1048576 bytes")


def test_connection_closed_mid_reply(fake_metastore):
    uri = fake_metastore(table_reply(field(13, 9, string_map({"metadata_location": "s3://b/m.json"})))[:40])
    assert ask(uri) == f"the Hive metastore at {uri[9:]} closed the connection before answering for table db.t"


@pytest.mark.parametrize("reply, shown", [
    (message(2, b"\x00", seqid=7), "answer to 'get_table' #7, not to 'get_table' #1"),
    (message(2, b"\x00", name="get_database"), "answer to 'get_database' #1, not to 'get_table' #1"),
    (message(2, b"\x00"), "get_table returned neither a table nor an exception"),
    (message(4, b"\x00"), "message type 4, not a reply"),
    (b"HTTP/1.1 400 Bad Request\r\n\r\n", "not a Thrift binary message (header 0x48545450)"),
], ids=["seqid", "method", "empty-result", "oneway", "http"])
def test_replies_to_something_else_are_invalid(fake_metastore, reply, shown):
    uri = fake_metastore(reply)
    assert ask(uri) == f"invalid reply asking table db.t from the Hive metastore at {uri[9:]}: {shown}"


def test_application_exception_message_is_passed_through(fake_metastore):
    body = field(11, 1, string("Invalid method name: 'get_table'\nsecond line")) + field(8, 2, struct.pack(">i", 1))
    uri = fake_metastore(message(3, body + b"\x00"))
    assert ask(uri) == (f"the Hive metastore at {uri[9:]} failed to give table db.t: "
                        "TApplicationException: Invalid method name: 'get_table' second line")


def test_meta_exception_message_is_passed_through(fake_metastore):
    uri = fake_metastore(message(2, field(12, 1, field(11, 1, string("\x1b[31mdb lock\x1b[0m")) + b"\x00") + b"\x00"))
    assert ask(uri) == (f"the Hive metastore at {uri[9:]} failed to give table db.t: "
                        "MetaException:  [31mdb lock [0m")


# --- the audit's listing goes on past one bad database or table (issue 39, item 4) -------------

def serve_calls(answer) -> tuple[str, list, callable]:
    """A metastore that answers each call on a connection with ``answer(method, [string args])``
    (the reply body; None closes the connection mid-reply). Returns (uri, calls, stop)."""
    calls: list[tuple[str, list[bytes]]] = []

    class Handler(socketserver.BaseRequestHandler):
        def handle(self):
            self.request.settimeout(5)
            stream = self.request.makefile("rb")
            for _ in range(100):  # bounded: at most 100 calls per connection
                header = stream.read(4)
                if len(header) < 4:
                    return
                name = stream.read(struct.unpack(">i", stream.read(4))[0]).decode()
                seqid = struct.unpack(">i", stream.read(4))[0]
                args = []
                while (ftype := stream.read(1)[0]) != 0:
                    stream.read(2)
                    args.append(stream.read(struct.unpack(">i", stream.read(4))[0]))  # every arg is a string
                calls.append((name, args))
                body = answer(name, args)
                if body is None:
                    self.request.sendall(message(2, b"")[:6])  # half a reply, then gone
                    return
                self.request.sendall(message(2, body, name, seqid))

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()

    def stop():
        server.shutdown()
        server.server_close()

    return f"thrift://127.0.0.1:{server.server_address[1]}", calls, stop


def string_list(values) -> bytes:
    return field(15, 0, bytes([11]) + struct.pack(">i", len(values)) + b"".join(string(v) for v in values)) + b"\x00"


def test_one_bad_database_or_table_is_a_row_and_a_name_that_is_not_utf8_is_asked_byte_for_byte():
    """Before, a database whose tables could not be listed, or a name that is not UTF-8, stopped
    the whole listing (exit 2, nothing audited)."""
    iceberg = table_reply(field(13, 9, string_map({"table_type": "ICEBERG", "metadata_location": "s3://b/m.json"}))
                          + b"\x00")[len(message(2, b"")):]

    def answer(name, args):
        if name == "get_all_databases":
            return string_list(["bad", "db", "gone"])
        if name == "get_all_tables":
            return {b"db": string_list(["t", b"\xff\xfe-name", "broken"]),
                    b"bad": field(12, 1, field(11, 1, string("no listing for you")) + b"\x00") + b"\x00"}.get(
                        args[0], None)
        if name == "get_table" and args[1] == b"broken":
            return None  # the connection dies mid-reply: a new one serves the rest
        return iceberg

    uri, calls, stop = serve_calls(answer)
    try:
        rows = verify_metastore.list_tables({"uri": uri}, timeout=5)  # the one listing, over Thrift
    finally:
        stop()
    assert [(row.namespace, row.name) for row in rows] == [  # sorted; the one that broke the connection first
        ("bad", "*"), ("db", "broken"), ("db", "t"), ("db", "\udcff\udcfe-name"), ("gone", "*")]
    params = {(row.namespace, row.name): row.parameters for row in rows}
    assert "MetaException: no listing for you" in params[("bad", "*")]["list_error"]
    assert params[("db", "t")]["metadata_location"] == "s3://b/m.json"
    assert params[("db", "\udcff\udcfe-name")]["table_type"] == "ICEBERG"
    assert "table db.broken" in params[("db", "broken")]["load_error"]
    assert "list_error" in params[("gone", "*")]
    assert ("get_table", [b"db", b"\xff\xfe-name"]) in calls  # the name went back byte for byte
