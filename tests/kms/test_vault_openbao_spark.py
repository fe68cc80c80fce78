"""The Vault Transit KMS on a real OpenBao server, end to end through Spark:

1. PySpark with ``register_kms(spark, load_kms("vault", ...))``: create, write, rotate the Transit
   key, re-wrap the KEKs, retire the old version (``min_decryption_version``); the table verifies
   (``verify_table``, a Spark job) and reads back without a JVM (``pyiceberg_crypto.read``).
2. The OpenBao server restarted during an INSERT: the INSERT fails, nothing is committed, the
   retry succeeds (a persistent server: its keys survive the restart).
3. ``pyiceberg-crypto kms serve --kms vault`` driving ``spark-sql`` (no Python in the Spark app).
"""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path

import pytest

pytest.importorskip("hvac")

from pyiceberg_crypto import config  # noqa: E402
from pyiceberg_crypto.bridge import register_kms  # noqa: E402
from pyiceberg_crypto.keys.rewrap import rewrap_keks  # noqa: E402
from pyiceberg_crypto.kms.base import KeyManagementClient  # noqa: E402
from pyiceberg_crypto.kms.loader import load_kms  # noqa: E402
from pyiceberg_crypto.read import read_table  # noqa: E402
from pyiceberg_crypto.testing.openbao import OpenBaoServer  # noqa: E402
from pyiceberg_crypto.verify import verify_metadata, verify_table  # noqa: E402
from tests.conftest import add_catalog  # noqa: E402
from tests.testkit import metadata_location  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.loopback]


def _kek_versions(metadata: str, key_id: str) -> set[bytes]:
    document = json.loads(Path(metadata.removeprefix("file:")).read_text())
    return {base64.b64decode(k["encrypted-key-metadata"])[:9]
            for k in document["encryption-keys"] if k.get("encrypted-by-id") == key_id}


def _rows(arrow) -> list[tuple]:
    return sorted(zip(arrow.column("id").to_pylist(), arrow.column("v").to_pylist()))


def _catalog(spark, tmp_path, kms_name: str) -> tuple[str, str]:
    """A catalog of its own (one metastore serves the session: a namespace of its own too)."""
    suffix = uuid.uuid4().hex[:6]
    catalog = f"bao_{suffix}"
    add_catalog(spark, catalog, warehouse=tmp_path / "wh", kms_name=kms_name)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.bao_{suffix}")
    return catalog, f"{catalog}.bao_{suffix}"


def test_openbao_pyspark_write_rotate_rewrap_verify_and_read(spark, tmp_path, openbao_server):
    bao = openbao_server
    key = f"orders-{uuid.uuid4().hex[:6]}"
    bao.create_transit_key(key)
    props = {**bao.kms_properties(), "vault.timeout": "5"}
    name = f"bao-{uuid.uuid4().hex[:6]}"
    with register_kms(spark, load_kms("vault", props), name=name) as registration:
        _, namespace = _catalog(spark, tmp_path, name)
        table = f"{namespace}.orders"
        spark.sql(f"CREATE TABLE {table} (id bigint, v string) USING iceberg "
                  f"{config.tblproperties_sql(config.table_properties(key))}")
        spark.sql(f"INSERT INTO {table} VALUES (1, 'a'), (2, 'b')")
        assert registration.stats.wrap >= 1 and registration.stats.errors == 0
        before = metadata_location(spark, table)
        assert _kek_versions(before, key) == {b"vault:v1:"}

        bao.rotate_transit_key(key)
        result = rewrap_keks(spark, table)
        assert result.committed and result.changes
        assert all(c.old_version == "v1" and c.new_version == "v2" for c in result.changes)
        spark.sql(f"INSERT INTO {table} VALUES (3, 'c')")
        after = metadata_location(spark, table)
        assert _kek_versions(after, key) == {b"vault:v2:"}

        # v1 no longer needed: retire it; the table still verifies (a Spark job) and reads.
        bao.configure_transit_key(key, min_decryption_version=2)
        spark.sql(f"REFRESH TABLE {table}")
        assert sorted(tuple(r) for r in spark.table(table).collect()) == [(1, "a"), (2, "b"), (3, "c")]
        report = verify_table(spark, table)
        assert report.ok, report
    kms = load_kms("vault", props)
    assert _rows(read_table(after, kms)) == [(1, "a"), (2, "b"), (3, "c")]
    # The metadata before the re-wrap has v1-wrapped KEKs only, which the retirement made unreadable.
    assert verify_metadata(before, kms).ok is False


class _KillOnCall(KeyManagementClient):
    """The Vault KMS, and a trap: once armed, the next KMS call kills the OpenBao server first."""

    def __init__(self, kms, server: OpenBaoServer):
        self.kms, self.server, self.armed, self.sprung = kms, server, False, 0

    def _trap(self):
        if self.armed:
            self.armed = False
            self.sprung += 1
            self.server.kill()

    def wrap_key(self, key, wrapping_key_id):
        self._trap()
        return self.kms.wrap_key(key, wrapping_key_id)

    def unwrap_key(self, wrapped_key, wrapping_key_id):
        self._trap()
        return self.kms.unwrap_key(wrapped_key, wrapping_key_id)


def test_openbao_restarted_during_an_insert_commits_nothing_and_the_retry_succeeds(spark, tmp_path):
    with OpenBaoServer(tmp_path / "bao", persistent=True) as bao:  # raft storage: keys survive a restart
        bao.create_transit_key("orders")
        trap = _KillOnCall(load_kms("vault", {**bao.kms_properties(), "vault.timeout": "3"}), bao)
        name = f"bao-restart-{uuid.uuid4().hex[:6]}"
        with register_kms(spark, trap, name=name):
            _, namespace = _catalog(spark, tmp_path, name)
            table = f"{namespace}.orders"
            spark.sql(f"CREATE TABLE {table} (id bigint, v string) USING iceberg "
                      f"{config.tblproperties_sql(config.table_properties('orders'))}")
            spark.sql(f"INSERT INTO {table} VALUES (1, 'a')")
            snapshots = spark.sql(f"SELECT count(*) FROM {table}.snapshots").first()[0]

            trap.armed = True
            spark.sql(f"REFRESH TABLE {table}")  # a fresh encryption manager: the INSERT must call the KMS
            with pytest.raises(Exception, match=r"(?s)Vault Transit .* with key id 'orders'.*cannot reach") as e:
                spark.sql(f"INSERT INTO {table} VALUES (2, 'lost')")
            assert trap.sprung == 1 and bao.root_token not in str(e.value)
            spark.sql(f"REFRESH TABLE {table}")
            bao.start()  # the same port, unsealed again, the same keys
            assert spark.sql(f"SELECT count(*) FROM {table}.snapshots").first()[0] == snapshots
            spark.sql(f"INSERT INTO {table} VALUES (2, 'b')")  # the retry
            assert sorted(tuple(r) for r in spark.table(table).collect()) == [(1, "a"), (2, "b")]
            metadata = metadata_location(spark, table)
        kms = load_kms("vault", bao.kms_properties())
        assert verify_metadata(metadata, kms).ok
        assert _rows(read_table(metadata, kms)) == [(1, "a"), (2, "b")]


@pytest.mark.apps
def test_openbao_kms_serve_vault_drives_spark_sql(tmp_path, openbao_server):
    from tests.serve.service_process import ServiceProcess
    from tests.serve.test_entry_points import finish, spark_sql

    bao = openbao_server
    key = f"sql-{uuid.uuid4().hex[:6]}"
    bao.create_transit_key(key)
    service = ServiceProcess.start(tmp_path / "service", kms="vault", properties=bao.kms_properties())
    try:
        settings = config.spark_settings("lake", warehouse=tmp_path / "wh", metastore_dir=tmp_path / "ms",
                                         **service.client_settings())
        (tmp_path / "app").mkdir()
        tbl = config.tblproperties_sql(config.table_properties(key))
        done = finish(spark_sql(settings, (
            "CREATE NAMESPACE IF NOT EXISTS lake.db; "
            f"CREATE TABLE lake.db.t (id bigint, v string) USING iceberg {tbl}; "
            "INSERT INTO lake.db.t VALUES (1, 'one'), (2, 'two'); "
            "SELECT count(*), sum(id) FROM lake.db.t;"), cwd=tmp_path / "app"), log=tmp_path / "spark-sql.log")
        assert done.returncode == 0, (tmp_path / "spark-sql.log").read_text()[-3000:]
        assert "2\t3" in done.stdout
        calls = service.refresh_status()["operations"]
        assert calls["wrap"]["calls"] >= 1 and calls["unwrap"]["calls"] >= 1
    finally:
        service.stop()
    for text in (done.stdout, done.stderr, service.log()):
        assert bao.root_token not in text
    metadata = sorted((tmp_path / "wh" / "db.db" / "t" / "metadata").glob("*.metadata.json"))[-1]
    kms = load_kms("vault", bao.kms_properties())
    assert _kek_versions(str(metadata), key) == {b"vault:v1:"}
    assert verify_metadata(str(metadata), kms).ok
    assert _rows(read_table(str(metadata), kms)) == [(1, "one"), (2, "two")]
