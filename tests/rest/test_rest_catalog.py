"""The test REST catalog server (``python -m pyiceberg_crypto.testing rest``), and what Iceberg 1.12.0
does with ``encryption.key-id`` behind a REST catalog today (issue 33; apache/iceberg#13225, #16672)."""

from __future__ import annotations

import base64
import glob
import json
import socket
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from pyiceberg_crypto import config
from pyiceberg_crypto.errors import InvalidArgumentError
from pyiceberg_crypto.kms import InMemoryKms
from pyiceberg_crypto.read import read_table
from pyiceberg_crypto.testing._process import ServiceError
from pyiceberg_crypto.testing.pytest_plugin import rest_catalog_server  # noqa: F401
from pyiceberg_crypto.testing.rest import RestCatalogServer
from pyiceberg_crypto.verify.pipeline import verify_metadata
from pyiceberg_crypto.verify.report import DATA, DELETION_VECTOR, MANIFEST, MANIFEST_LIST, PLAINTEXT
from tests.rest.tables import create_encrypted_table, new_namespace, new_rest_catalog

SCHEMA = {"type": "struct", "schema-id": 0,
          "fields": [{"id": 1, "name": "id", "required": False, "type": "long"}]}


def call(server: RestCatalogServer, method: str, path: str, body: dict | None = None) -> tuple[int, dict | None]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(server.uri + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return exc.code, json.loads(raw) if raw else None


@pytest.mark.jvm  # starts and restarts the REST catalog server (a JVM) itself
def test_rest_catalog_keeps_namespaces_tables_and_encryption_keys_across_restarts_on_loopback(tmp_path):
    server = RestCatalogServer(tmp_path / "rest")
    with server:
        port = server.port
        assert server.uri == f"http://127.0.0.1:{port}"
        # bound to 127.0.0.1 itself, not every interface: another loopback address is refused
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.2", port), timeout=2).close()
        assert call(server, "POST", "/v1/namespaces", {"namespace": ["sales"], "properties": {"owner": "ops"}})[0] == 200
        status, created = call(server, "POST", "/v1/namespaces/sales/tables", {"name": "orders", "schema": SCHEMA})
        assert status == 200 and f"{server.warehouse}/sales/orders/metadata/" in created["metadata-location"]
        assert call(server, "POST", "/v1/namespaces", {"namespace": ["sales"]})[0] == 409
        # encryption-keys, as an encrypting client would commit them (add-encryption-key), then a
        # later commit that does not mention them: the server keeps them in table metadata
        wrapped = base64.b64encode(b"not a real wrapped key").decode()
        key = {"key-id": "kek-1", "encrypted-key-metadata": wrapped, "encrypted-by-id": "k1",
               "properties": {"kek-created-at": "1"}}
        status, _ = call(server, "POST", "/v1/namespaces/sales/tables/orders",
                         {"requirements": [], "updates": [{"action": "add-encryption-key", "encryption-key": key}]})
        assert status == 200
        status, committed = call(server, "POST", "/v1/namespaces/sales/tables/orders",
                                 {"requirements": [], "updates": [{"action": "set-properties",
                                                                   "updates": {"later": "commit"}}]})
        assert status == 200 and committed["metadata"]["encryption-keys"] == [key]
        status, error = call(server, "GET", "/v1/namespaces/sales/tables/nope")
        assert status == 404 and error["error"]["type"] == "NoSuchTableException"
    assert not server.running

    with server:  # same directory, same port
        assert server.port == port
        status, namespaces = call(server, "GET", "/v1/namespaces")
        assert status == 200 and namespaces["namespaces"] == [["sales"]]
        status, namespace = call(server, "GET", "/v1/namespaces/sales")
        assert status == 200 and namespace["properties"]["owner"] == "ops"
        status, tables = call(server, "GET", "/v1/namespaces/sales/tables")
        assert tables["identifiers"] == [{"namespace": ["sales"], "name": "orders"}]
        status, loaded = call(server, "GET", "/v1/namespaces/sales/tables/orders")
        assert status == 200 and loaded["metadata-location"] == committed["metadata-location"]
        assert loaded["metadata"]["encryption-keys"] == [key] and loaded["metadata"]["properties"]["later"] == "commit"
        assert json.loads(Path(loaded["metadata-location"].removeprefix("file:")).read_text())["encryption-keys"] == [key]
        assert call(server, "HEAD", "/v1/namespaces/sales/tables/orders") == (204, None)
        assert call(server, "DELETE", "/v1/namespaces/sales/tables/orders") == (204, None)
        assert call(server, "HEAD", "/v1/namespaces/sales/tables/orders")[0] == 404

        # a second server on the same port: a clear error, not a stack trace
        with pytest.raises(ServiceError, match=f"port {port} .* already in use"):
            RestCatalogServer(tmp_path / "other", port=port).start()


@pytest.mark.slow
def test_rest_catalog_type_rest_with_a_kms_is_refused_by_the_builders_and_named_by_register_kms(
        spark, kms_registration, master_keys, rest_catalog_server, tmp_path):  # noqa: F811
    """The trap of apache/iceberg#16672 as a user meets it, closed where the package can see it.
    Iceberg 1.12.0's ``type=rest`` catalog with ``encryption.kms-impl`` accepts ``encryption.key-id``
    and ``format-version`` 3 and then writes every file in plaintext with no error. The builders
    now refuse those settings, naming ``catalog-impl=...EncryptingRestCatalog``; a session that sets
    them by hand gets a warning from ``register_kms`` naming the catalog. What remains is Iceberg's
    (the KMS is never called for such a catalog, so nothing of the package runs at write time): the
    files are ``PAR1`` / plain Avro, and the verifier reports every file PLAINTEXT.
    (Before issue 39 this test was ``..._is_written_in_plaintext_without_warning``: it documented the
    silence, which is now a refusal and a warning.)"""
    from pyiceberg_crypto.bridge import PlaintextCatalogWarning, register_kms

    name = f"rest_{uuid.uuid4().hex[:8]}"
    # 1. the builders, given the settings the test server used to print: refused
    with pytest.raises(InvalidArgumentError, match=rf"catalog '{name}'.*plaintext.*"
                                                 r"catalog-impl=io\.pyicebergcrypto\.rest\.EncryptingRestCatalog"):
        config.catalog_settings(name, warehouse=tmp_path / "warehouse", kms_name="test",
                                extra_catalog_properties={"type": "rest", "uri": rest_catalog_server.uri})
    settings = config.catalog_settings(name, warehouse=tmp_path / "warehouse", kms_name="test")
    prefix = f"spark.sql.catalog.{name}"
    settings[f"{prefix}.type"] = "rest"
    settings[f"{prefix}.uri"] = rest_catalog_server.uri
    with pytest.raises(InvalidArgumentError, match=rf"catalog '{name}'.*type=rest"):
        config.configure_spark_with_encryption(SparkSession.builder, settings)

    # 2. the same settings set by hand on the running session: register_kms names the catalog
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        with pytest.warns(PlaintextCatalogWarning, match=rf"Spark catalog '{name}' has a KMS but Iceberg will "
                                                         r"write its tables in plaintext.*catalog-impl="):
            registration = register_kms(spark, InMemoryKms(master_keys), name=f"check_{name}")
        registration.close()

        # 3. what the warning is about (Iceberg's, unchanged): plaintext files, no keys, found by the verifier
        spark.sql(f"CREATE NAMESPACE {name}.hazard")
        spark.sql(f"CREATE TABLE {name}.hazard.orders (id BIGINT, note STRING) USING iceberg "
                  "TBLPROPERTIES ('format-version'='3', 'encryption.key-id'='k1')")
        spark.sql(f"INSERT INTO {name}.hazard.orders VALUES (1, 'a'), (2, 'b')")
    finally:
        for key in settings:
            spark.conf.unset(key)

    status, loaded = call(rest_catalog_server, "GET", "/v1/namespaces/hazard/tables/orders")
    assert status == 200
    metadata = loaded["metadata"]
    assert metadata["format-version"] == 3 and metadata["properties"]["encryption.key-id"] == "k1"
    assert not metadata.get("encryption-keys")  # no key was ever generated
    data_files, avro_files = table_files(metadata)
    assert data_files and avro_files
    assert {Path(f).read_bytes()[:4] for f in data_files} == {b"PAR1"}  # not PARE
    assert {Path(f).read_bytes()[:4] for f in avro_files} == {b"Obj\x01"}  # not AGS1
    report = verify_metadata(loaded["metadata-location"], InMemoryKms(master_keys))
    assert not report.ok
    assert {f.status for f in report.files} == {PLAINTEXT}


def table_files(metadata: dict) -> tuple[list[str], list[str]]:
    table_dir = Path(metadata["location"].removeprefix("file:"))
    return (glob.glob(str(table_dir / "data" / "**" / "*.parquet"), recursive=True),
            glob.glob(str(table_dir / "metadata" / "*.avro")))


@pytest.mark.slow
def test_rest_catalog_encrypting_client_writes_pare_ags1_and_commits_its_keys(
        spark, kms_registration, master_keys, rest_catalog_server, tmp_path):  # noqa: F811
    """``config.catalog_settings(catalog_type="rest")`` (the bridge's EncryptingRestCatalog) over the
    loopback REST server: an ``encryption.key-id`` table is written PARE/AGS1, its keys reach the
    server as ``add-encryption-key`` updates (they are in the metadata.json the server wrote), the
    verifier and the JVM-free reader work from the REST load response, and the key id cannot be
    removed or changed."""

    name = new_rest_catalog(spark, rest_catalog_server.uri, tmp_path / "warehouse", prefix="restenc")
    namespace = new_namespace(spark, name, "enc")
    table = create_encrypted_table(spark, f"{name}.{namespace}.orders", key_id="k1")
    spark.sql(f"INSERT INTO {table} VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    assert sorted(tuple(r) for r in spark.table(table).collect()) == [(1, "a"), (2, "b"), (3, "c")]

    status, loaded = call(rest_catalog_server, "GET", f"/v1/namespaces/{namespace}/tables/orders")
    assert status == 200
    metadata = loaded["metadata"]
    data_files, avro_files = table_files(metadata)
    assert data_files and avro_files
    assert {Path(f).read_bytes()[:4] for f in data_files} == {b"PARE"}
    assert {Path(f).read_bytes()[:4] for f in avro_files} == {b"AGS1"}
    on_disk = json.loads(Path(loaded["metadata-location"].removeprefix("file:")).read_text())
    assert on_disk["encryption-keys"] and on_disk["encryption-keys"] == metadata["encryption-keys"]
    assert {k["encrypted-by-id"] for k in on_disk["encryption-keys"]} >= {"k1"}

    kms = InMemoryKms(master_keys)
    report = verify_metadata(loaded["metadata-location"], kms)
    assert report.ok, report
    assert {f.kind for f in report.files} >= {DATA, MANIFEST, MANIFEST_LIST}
    rows = read_table(loaded["metadata-location"], kms).sort_by("id").to_pylist()
    assert rows == [{"id": 1, "note": "a"}, {"id": 2, "note": "b"}, {"id": 3, "note": "c"}]

    with pytest.raises(Exception, match="Cannot remove key ID from an encrypted table"):
        spark.sql(f"ALTER TABLE {table} UNSET TBLPROPERTIES ('encryption.key-id')")
    with pytest.raises(Exception, match="Cannot modify key ID of an encrypted table"):
        spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('encryption.key-id'='k2')")
    assert call(rest_catalog_server, "GET", f"/v1/namespaces/{namespace}/tables/orders")[1][
        "metadata"]["properties"]["encryption.key-id"] == "k1"
    spark.sql(f"CREATE TABLE {name}.{namespace}.plain (id BIGINT) USING iceberg TBLPROPERTIES ('format-version'='3')")
    with pytest.raises(Exception, match="Cannot set 'encryption.key-id' on an existing plaintext table"):
        spark.sql(f"ALTER TABLE {name}.{namespace}.plain SET TBLPROPERTIES ('encryption.key-id'='k1')")

    # the same catalog without a KMS: a clear error naming the missing property, never plaintext
    bare = f"restbare_{uuid.uuid4().hex[:8]}"
    for key, value in config.catalog_settings(bare, warehouse=tmp_path / "warehouse", catalog_type="rest",
                                              uri=rest_catalog_server.uri, kms_name="test").items():
        if not key.endswith(("encryption.kms-impl", config.KMS_NAME_PROPERTY)):
            spark.conf.set(key, value)
    with pytest.raises(Exception, match="without a key management client.*encryption.kms-impl"):
        spark.table(f"{bare}.{namespace}.orders").collect()
    with pytest.raises(Exception, match="without a key management client.*encryption.kms-impl"):
        spark.sql(f"INSERT INTO {bare}.{namespace}.orders VALUES (4, 'd')")
    assert spark.table(table).count() == 3


@pytest.mark.slow
def test_rest_catalog_encrypting_client_ctas_merge_delete_deletion_vectors_and_time_travel(
        spark, kms_registration, master_keys, rest_catalog_server, tmp_path):  # noqa: F811
    """A create transaction (CTAS: the REST ``CREATE`` commit with the staged changes), merge-on-read
    DELETE and MERGE writing deletion vectors, and time travel, through the EncryptingRestCatalog;
    a second catalog on the same server (fresh table operations) reads the same rows; every file of
    every snapshot verifies and the JVM-free reader returns Spark's rows."""
    name = new_rest_catalog(spark, rest_catalog_server.uri, tmp_path / "warehouse", prefix="restenc")
    namespace = new_namespace(spark, name, "dv")
    table = f"{name}.{namespace}.events"
    props = config.table_properties(key_id="k2", extra={"write.delete.mode": "merge-on-read",
                                                        "write.update.mode": "merge-on-read",
                                                        "write.merge.mode": "merge-on-read"})
    tblprops = ", ".join(f"'{k}'='{v}'" for k, v in props.items())
    spark.sql(f"CREATE TABLE {table} USING iceberg TBLPROPERTIES ({tblprops}) AS "
              "SELECT id, CAST(id * 10 AS BIGINT) AS amount FROM range(0, 20)")
    first = spark.sql(f"SELECT snapshot_id FROM {table}.snapshots").first()[0]
    spark.sql(f"DELETE FROM {table} WHERE id % 5 = 0")
    spark.createDataFrame([(1, -1), (100, 1000)], "id BIGINT, amount BIGINT").createOrReplaceTempView("upd")
    spark.sql(f"""MERGE INTO {table} t USING upd u ON t.id = u.id
                  WHEN MATCHED THEN UPDATE SET amount = u.amount WHEN NOT MATCHED THEN INSERT *""")

    expected = sorted([(i, -1 if i == 1 else i * 10) for i in range(20) if i % 5] + [(100, 1000)])
    assert sorted(tuple(r) for r in spark.table(table).collect()) == expected
    assert spark.sql(f"SELECT count(*) FROM {table} VERSION AS OF {first}").first()[0] == 20
    assert spark.sql(f"SELECT count(*) FROM {table}.delete_files WHERE file_format = 'PUFFIN'").first()[0] > 0

    other = new_rest_catalog(spark, rest_catalog_server.uri, tmp_path / "warehouse", prefix="restenc")
    assert sorted(tuple(r) for r in spark.table(f"{other}.{namespace}.events").collect()) == expected

    status, loaded = call(rest_catalog_server, "GET", f"/v1/namespaces/{namespace}/tables/events")
    assert status == 200 and loaded["metadata"]["encryption-keys"]
    data_files, avro_files = table_files(loaded["metadata"])
    assert {Path(f).read_bytes()[:4] for f in data_files} == {b"PARE"}
    assert {Path(f).read_bytes()[:4] for f in avro_files} == {b"AGS1"}
    kms = InMemoryKms(master_keys)
    report = verify_metadata(loaded["metadata-location"], kms, all_snapshots=True)
    assert report.ok, report
    assert {f.kind for f in report.files} >= {DATA, DELETION_VECTOR, MANIFEST, MANIFEST_LIST}
    rows = read_table(loaded["metadata-location"], kms).sort_by("id").to_pylist()
    assert [(r["id"], r["amount"]) for r in rows] == expected


def _code_source(jvm, loader, class_name: str):
    return jvm.java.lang.Class.forName(class_name, False, loader).getProtectionDomain().getCodeSource().getLocation()


def test_rest_catalog_encrypting_catalog_refuses_a_bridge_jar_on_another_class_loader(spark):
    """The table operations subclass Iceberg's package-private ``RESTTableOperations``, which the JVM
    allows only within one class loader: the bridge jar in a child loader of the Iceberg runtime's
    (e.g. runtime on extraClassPath, bridge in spark.jars) gets a message that says what to do, not
    an IllegalAccessError in the middle of a query."""
    jvm = spark.sparkContext._jvm
    gateway = spark.sparkContext._gateway
    session_loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    runtime = gateway.new_array(jvm.java.net.URL, 1)
    runtime[0] = _code_source(jvm, session_loader, "org.apache.iceberg.rest.RESTCatalog")
    bridge = gateway.new_array(jvm.java.net.URL, 1)
    bridge[0] = _code_source(jvm, session_loader, "io.pyicebergcrypto.rest.EncryptingRestCatalog")
    assert runtime[0].toString() != bridge[0].toString()
    runtime_loader = jvm.java.net.URLClassLoader(runtime, jvm.java.lang.ClassLoader.getPlatformClassLoader())
    bridge_loader = jvm.java.net.URLClassLoader(bridge, runtime_loader)
    try:
        catalog_class = jvm.java.lang.Class.forName("io.pyicebergcrypto.rest.EncryptingRestCatalog", True,
                                                    bridge_loader)
        with pytest.raises(Exception, match="bridge jar and the Iceberg runtime jar on the same classpath channel"):
            catalog_class.getConstructor(gateway.new_array(jvm.java.lang.Class, 0)).newInstance(
                gateway.new_array(jvm.java.lang.Object, 0))
    finally:
        bridge_loader.close()
        runtime_loader.close()
