"""Encrypted REST tables by name (issue 33): the Python REST client, and everything that looks a
table up by ``catalog.db.table`` — ``verify_table``, the key inventory, ``keys rewrap`` and ``keys
prune`` (committed as REST updates), the JVM-free reader and the lake audit — on tables written by
the bridge's ``EncryptingRestCatalog`` to the loopback REST server (Iceberg's CatalogHandlers)."""

from __future__ import annotations

import base64
import json
import threading
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from pyiceberg_crypto.errors import CatalogError, ReadIntegrityError
from pyiceberg_crypto import config
from pyiceberg_crypto.bridge import register_kms
from pyiceberg_crypto.cli.main import main
from pyiceberg_crypto.catalog.rest import RestCatalog
from pyiceberg_crypto.keys import key_inventory, prune_keys, rewrap_keks
from pyiceberg_crypto.kms import KeystoreKms
from pyiceberg_crypto.read import read_table
from pyiceberg_crypto.testing.pytest_plugin import rest_catalog_server  # noqa: F401
from pyiceberg_crypto.table.metadata import fields_differing
from pyiceberg_crypto.audit import audit_catalog
from pyiceberg_crypto.verify import verify_table
from pyiceberg_crypto.verify.report import OK, TAMPERED
from pyiceberg_crypto.verify.table_checks import served_metadata_check
from tests.conftest import add_catalog
from tests.testkit import metadata_location

MASTER = "restkey"


def kek_versions(location: str) -> dict[str, int]:
    """KEK id -> the keystore version in its PKW1 blob, read straight from the metadata.json."""
    doc = json.loads(Path(location.removeprefix("file:")).read_text())
    return {k["key-id"]: int.from_bytes(base64.b64decode(k["encrypted-key-metadata"])[4:8], "big")
            for k in doc["encryption-keys"] if k.get("encrypted-by-id") == MASTER}


@pytest.fixture(scope="module")
def rest_table(spark, rest_catalog_server, tmp_path_factory):  # noqa: F811
    """A keystore KMS registered for a REST catalog, and an encrypted table with three snapshots."""
    work = tmp_path_factory.mktemp("rest-by-name")
    keystore = work / "keys.json"
    assert main(["keystore", "create", str(keystore)]) == 0
    assert main(["keystore", "add", str(keystore), MASTER]) == 0
    suffix = uuid.uuid4().hex[:6]
    catalog, kms_name, namespace = f"restname_{suffix}", f"restname-{suffix}", f"ns_{suffix}"
    registration = register_kms(spark, KeystoreKms(keystore), name=kms_name)
    add_catalog(spark, catalog, work / "wh", catalog_type="rest", uri=rest_catalog_server.uri, kms_name=kms_name)
    spark.sql(f"CREATE NAMESPACE {catalog}.{namespace}")
    table = f"{catalog}.{namespace}.orders"
    spark.sql(f"CREATE TABLE {table} (id BIGINT, note STRING) USING iceberg "
              f"{config.tblproperties_sql(config.table_properties(MASTER))}")
    for start in (1, 10, 20):
        spark.sql(f"INSERT INTO {table} SELECT id, CAST(id AS STRING) FROM range({start}, {start + 3})")
    yield {"catalog": catalog, "namespace": namespace, "table": table, "keystore": keystore,
           "server": rest_catalog_server, "kms_name": kms_name}
    registration.close()


def loaded(story) -> dict:
    return RestCatalog(story["server"].uri).load_table(story["namespace"], "orders")


def rows_of(spark, table: str) -> list[tuple]:
    spark.sql(f"REFRESH TABLE {table}")
    return sorted(tuple(r) for r in spark.table(table).collect())


EXPECTED = sorted((i, str(i)) for start in (1, 10, 20) for i in range(start, start + 3))


@pytest.mark.slow
def test_rest_catalog_verify_table_and_inventory_by_name_anchor_on_the_served_metadata(spark, rest_table):
    table = rest_table["table"]
    report = verify_table(spark, table)
    assert report.ok, report
    checks = {c.name: c for c in report.checks}
    assert checks["catalog"].status == OK and rest_table["server"].uri in checks["catalog"].detail
    assert checks["catalog-metadata"].status == OK
    assert "metastore" not in checks and "metadata-hash" not in checks  # no metastore words for a REST table
    assert report.metadata_location == loaded(rest_table).metadata_location
    inventory = key_inventory(spark, table)
    assert inventory.master_key_id == MASTER and inventory.keks
    assert {k.master_key_version for k in inventory.keks} == {"1"}


@pytest.mark.slow
def test_rest_catalog_rewrap_and_prune_commit_through_rest_updates(spark, rest_table):
    table, keystore = rest_table["table"], rest_table["keystore"]
    before = loaded(rest_table).metadata_location
    assert set(kek_versions(before).values()) == {1}
    assert main(["keystore", "rotate", str(keystore), MASTER]) == 0
    result = rewrap_keks(spark, table, kms=KeystoreKms(keystore))
    assert result.committed and result.changes
    after = loaded(rest_table)  # the server's answer: the re-wrap went through REST updates
    assert after.metadata_location == result.metadata_location != before
    assert set(kek_versions(after.metadata_location).values()) == {2}
    assert {k["encrypted-by-id"] for k in after.metadata["encryption-keys"]} >= {MASTER}
    assert rows_of(spark, table) == EXPECTED
    assert verify_table(spark, table, kms=KeystoreKms(keystore)).ok

    # expire the two older snapshots: their manifest-list keys are no longer needed, and prune
    # removes them with a remove-encryption-key update the server applies
    newest = spark.sql(f"SELECT max(committed_at) FROM {table}.snapshots").first()[0]
    spark.sql(f"CALL {rest_table['catalog']}.system.expire_snapshots(table => '{rest_table['namespace']}.orders', "
              f"older_than => TIMESTAMP '{newest}', retain_last => 1)")
    entries_before = {k["key-id"] for k in loaded(rest_table).metadata["encryption-keys"]}
    pruned = prune_keys(spark, table)
    assert pruned.committed and pruned.removed_entries and not pruned.not_removed
    entries_after = {k["key-id"] for k in loaded(rest_table).metadata["encryption-keys"]}
    assert entries_after == entries_before - {*pruned.removed_keks, *pruned.removed_entries}
    assert rows_of(spark, table) == EXPECTED
    assert verify_table(spark, table, kms=KeystoreKms(keystore)).ok


@pytest.mark.slow
def test_rest_catalog_jvm_free_reader_and_head_by_name(spark, rest_table, capsys):
    name = f"{rest_table['namespace']}.orders"
    uri = rest_table["server"].uri
    rows = read_table(name, KeystoreKms(rest_table["keystore"]), catalog=uri).sort_by("id").to_pylist()
    assert [(r["id"], r["note"]) for r in rows] == EXPECTED
    same = read_table(name, KeystoreKms(rest_table["keystore"]), catalog=RestCatalog(uri))
    assert same.num_rows == len(EXPECTED)
    assert main(["head", name, "--metastore", uri, "--kms", "keystore", "--kms-property",
                 f"keystore.path={rest_table['keystore']}", "-n", "2", "--json"]) == 0
    assert len([line for line in capsys.readouterr().out.splitlines() if line.startswith("{")]) == 2
    # an unknown table: the catalog's own answer, exit 2, no stack trace
    assert main(["head", f"{rest_table['namespace']}.nope", "--metastore", uri, "--kms", "keystore",
                 "--kms-property", f"keystore.path={rest_table['keystore']}"]) == 2
    assert "HTTP 404" in capsys.readouterr().err


@pytest.mark.slow
def test_rest_catalog_audit_lists_and_verifies_every_table(spark, rest_table):
    spark.sql(f"CREATE TABLE {rest_table['catalog']}.{rest_table['namespace']}.plain (id BIGINT) USING iceberg "
              "TBLPROPERTIES ('format-version'='3')")
    spark.sql(f"INSERT INTO {rest_table['catalog']}.{rest_table['namespace']}.plain VALUES (1)")
    report = audit_catalog(spark, rest_table["catalog"], kms=KeystoreKms(rest_table["keystore"]))
    states = {t.table: t.state for t in report.tables}
    namespace = rest_table["namespace"]
    assert states[f"{namespace}.orders"] == "OK"
    assert states[f"{namespace}.plain"] == "UNENCRYPTED"
    audited = next(t for t in report.tables if t.table == f"{namespace}.orders")
    assert {c.name for c in audited.report.checks} >= {"catalog", "catalog-metadata"}
    with pytest.raises(Exception, match="namespace 'missing' does not exist in the REST catalog"):
        audit_catalog(spark, rest_table["catalog"], namespaces=["missing"], kms=KeystoreKms(rest_table["keystore"]))


@pytest.mark.slow
def test_rest_catalog_audit_cli_lists_over_http_and_keeps_secrets_off_the_command_line(
        spark, rest_table, capsys, monkeypatch):
    namespace, uri = rest_table["namespace"], rest_table["server"].uri
    kms = ["--kms", "keystore", "--kms-property", f"keystore.path={rest_table['keystore']}"]
    monkeypatch.setenv("PYICEBERG_CRYPTO_REST_TOKEN", "not-checked-by-the-loopback-server")
    status = main(["audit", "--rest-uri", uri, "--namespace", namespace, *kms, "--json"])
    document = json.loads(capsys.readouterr().out)
    states = {t["table"]: t["state"] for t in document["tables"]}
    assert states[f"{namespace}.orders"] == "OK"
    assert status == (1 if f"{namespace}.plain" in states else 0)  # the plain table of the test above
    assert document["metastore"] == uri
    assert main(["audit", "--rest-uri", uri, "--rest-property", "token=abc", *kms]) == 2
    assert "secrets go in $PYICEBERG_CRYPTO_REST_TOKEN" in capsys.readouterr().err
    assert main(["audit", "--rest-uri", uri, "--namespace", "missing", *kms]) == 2
    assert "namespace 'missing' does not exist in the REST catalog" in capsys.readouterr().err


@pytest.mark.slow
def test_rest_catalog_a_file_other_than_the_served_metadata_is_tampered(spark, rest_table, tmp_path):
    """What a server that serves metadata from its own store would show when the file was rewritten
    (the loopback server re-reads the file, so the served side is changed here instead)."""
    table = loaded(rest_table)
    raw = Path(table.metadata_location.removeprefix("file:")).read_bytes()
    assert fields_differing(raw, table.metadata) == []
    assert served_metadata_check(raw, table.metadata).status == OK
    edited = dict(table.metadata, properties={**table.metadata["properties"], "encryption.key-id": "other"})
    check = served_metadata_check(raw, edited)
    assert check.status == TAMPERED and "in properties" in check.detail
    rolled_back = dict(table.metadata, **{"current-snapshot-id": table.metadata["current-snapshot-id"] - 1})
    assert fields_differing(raw, rolled_back) == ["current-snapshot-id"]
    assert fields_differing(b"[1, 2]", table.metadata) == ["<not a JSON object>"]

    class Serving(BaseHTTPRequestHandler):
        """The loaded table's answer with one property changed (what the catalog would serve)."""

        def do_GET(self):  # noqa: N802
            body = {"overrides": {}, "defaults": {}} if self.path.startswith("/v1/config") else {
                "metadata-location": table.metadata_location, "metadata": edited}
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Serving)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        with pytest.raises(ReadIntegrityError, match="differs from the table metadata the REST catalog serves"):
            read_table(f"{rest_table['namespace']}.orders", KeystoreKms(rest_table["keystore"]),
                       catalog=f"http://127.0.0.1:{server.server_port}")
    finally:
        server.shutdown()
        server.server_close()


def test_rest_catalog_client_lists_nested_namespaces_and_pages_and_names_the_failure(rest_catalog_server):  # noqa: F811
    client = RestCatalog(rest_catalog_server.uri)
    top = f"client_{uuid.uuid4().hex[:6]}"
    for levels in ([top], [top, "eu"], [top, "eu", "fr"]):
        request = json.dumps({"namespace": levels}).encode()
        urllib.request.urlopen(urllib.request.Request(rest_catalog_server.uri + "/v1/namespaces", data=request,
                                                      method="POST", headers={"Content-Type": "application/json"}),
                               timeout=30).close()
    assert {(top,), (top, "eu"), (top, "eu", "fr")} <= set(client.list_namespaces())
    assert client.list_tables((top, "eu")) == []
    with pytest.raises(CatalogError, match=r"refused table .*\.nope: HTTP 404") as caught:
        client.load_table(top, "nope")
    assert caught.value.status == 404
    with pytest.raises(CatalogError, match="cannot be reached"):
        RestCatalog("http://127.0.0.1:9", timeout=5).load_table("a", "b")
    with pytest.raises(CatalogError, match="starts with http"):
        RestCatalog("thrift://127.0.0.1:9083")


def test_rest_catalog_client_exchanges_its_credential_and_sends_the_token_never_in_errors():
    """``credential`` (client_id:secret) is exchanged at the token endpoint, then sent as a bearer
    token; pages are followed; a refusal names the status, not the token."""
    seen: list[tuple[str, str | None, bytes]] = []
    tenants: list[str | None] = []

    class Catalog(BaseHTTPRequestHandler):
        def _answer(self, status: int, body: dict):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):  # noqa: N802
            form = self.rfile.read(int(self.headers["Content-Length"]))
            seen.append((self.path, self.headers.get("Authorization"), form))
            self._answer(200, {"access_token": "tok-123456", "token_type": "bearer"})

        def do_GET(self):  # noqa: N802
            seen.append((self.path, self.headers.get("Authorization"), b""))
            tenants.append(self.headers.get("X-Tenant"))
            if self.path.startswith("/v1/config"):
                return self._answer(200, {"defaults": {}, "overrides": {"prefix": "wh1"}})
            if self.path == "/v1/wh1/namespaces/db/tables":
                return self._answer(200, {"identifiers": [{"namespace": ["db"], "name": "b"}], "next-page-token": "p2"})
            if self.path == "/v1/wh1/namespaces/db/tables?pageToken=p2":
                return self._answer(200, {"identifiers": [{"namespace": ["db"], "name": "a"}]})
            return self._answer(403, {"error": {"message": "not allowed", "type": "ForbiddenException", "code": 403}})

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Catalog)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        client = RestCatalog.from_properties({"uri": f"http://127.0.0.1:{server.server_port}",
                                              "credential": "reader:s3cret", "warehouse": "lake",
                                              "header.X-Tenant": "t1"})
        assert client.list_tables("db") == ["a", "b"]
        token_path, _, form = seen[0]
        assert token_path == "/v1/oauth/tokens"
        assert b"grant_type=client_credentials" in form and b"client_id=reader" in form and b"client_secret=s3cret" in form
        assert seen[1][0] == "/v1/config?warehouse=lake"
        assert all(auth == "Bearer tok-123456" for path, auth, _ in seen[1:])
        assert tenants and set(tenants) == {"t1"}
        with pytest.raises(CatalogError, match="HTTP 403 ForbiddenException: not allowed") as caught:
            client.load_table("db", "a")
        assert "tok-123456" not in str(caught.value) and "s3cret" not in str(caught.value)
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow
def test_rest_catalog_takes_over_an_encrypted_hive_table_by_registering_it(spark, rest_table, tmp_path):
    """Moving a lake from a Hive metastore to a REST catalog: register the table's current
    metadata.json in the REST catalog (Iceberg's ``register_table``), drop the Hive entry without
    purging, and the table goes on, encrypted, through the REST catalog: same rows, same keys,
    new commits PARE/AGS1, every snapshot verifies by name."""
    suffix = uuid.uuid4().hex[:6]
    hive_catalog = f"hivemove_{suffix}"
    add_catalog(spark, hive_catalog, tmp_path / "hive-wh", kms_name=rest_table["kms_name"])  # the same KMS as the REST catalog
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {hive_catalog}.moving")
    hive_table = f"{hive_catalog}.moving.events_{suffix}"
    spark.sql(f"CREATE TABLE {hive_table} (id BIGINT) USING iceberg "
              f"{config.tblproperties_sql(config.table_properties(MASTER))}")
    spark.sql(f"INSERT INTO {hive_table} SELECT id FROM range(0, 5)")
    spark.sql(f"INSERT INTO {hive_table} SELECT id FROM range(5, 8)")
    location = metadata_location(spark, hive_table)
    keys_before = {k["key-id"] for k in json.loads(Path(location.removeprefix("file:")).read_text())["encryption-keys"]}

    namespace, catalog = rest_table["namespace"], rest_table["catalog"]
    spark.sql(f"CALL {catalog}.system.register_table(table => '{namespace}.moved', metadata_file => '{location}')")
    spark.sql(f"DROP TABLE {hive_table}")  # the metastore entry only: no PURGE, the files stay
    assert Path(location.removeprefix("file:")).exists()

    moved = f"{catalog}.{namespace}.moved"
    assert sorted(r[0] for r in spark.table(moved).collect()) == list(range(8))
    spark.sql(f"INSERT INTO {moved} SELECT id FROM range(8, 10)")
    served = RestCatalog(rest_table["server"].uri).load_table(namespace, "moved")
    assert keys_before <= {k["key-id"] for k in served.metadata["encryption-keys"]}  # the Hive era's keys kept
    table_dir = Path(served.metadata["location"].removeprefix("file:"))
    assert {p.read_bytes()[:4] for p in table_dir.glob("data/*.parquet")} == {b"PARE"}
    assert {p.read_bytes()[:4] for p in table_dir.glob("metadata/*.avro")} == {b"AGS1"}
    report = verify_table(spark, moved, all_snapshots=True)
    assert report.ok, report
    assert len(report.snapshot_ids) == 3
    rows = read_table(f"{namespace}.moved", KeystoreKms(rest_table["keystore"]), catalog=rest_table["server"].uri)
    assert sorted(rows.column("id").to_pylist()) == list(range(10))
