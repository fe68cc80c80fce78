"""Issue 50 item 4 with a real Spark writer: a revoked named Py4J token, and a retired key version,
take effect in a running ``kms serve`` within seconds and without a restart.

The session's Spark application gets a catalog of its own whose KMS is ``kms serve`` over the Py4J
face, proven with the named token of ``py4j:spark-writers`` (granted wrap and unwrap on
``orders-key``). The writer inserts; the principal is removed from the policy and the service gets
SIGHUP (the documented revoke path of a named token); the next INSERT fails with one clear error
naming the refusal, holding no token and no key bytes, and the table stays at its snapshot. The
principal given back, the writer works again (a fresh token, read by the JVM client at reconnect),
still without a restart. Then a key version retired in the keystore stops unwrapping for Spark too."""

from __future__ import annotations

import json
import re
import signal
import time
import uuid

import pytest

from pyiceberg_crypto.kms.keystore import KeystoreKms
from tests.conftest import add_catalog
from tests.serve.test_governance import POLICY, _governed, _named_token, _records, _trail
from tests.testkit import eventually, load_factor

pytestmark = [pytest.mark.loopback]

PRINCIPAL = "py4j:spark-writers"


def _error_text(exc: BaseException) -> str:
    """The whole error chain the driver gets (Py4J / Spark wrap the bridge's exception)."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        parts = []
        while java is not None:
            parts.append(f"{java.getClass().getName()}: {java.getMessage()}")
            java = java.getCause()
        return "\n".join(parts)
    return str(exc)


def _snapshot(spark, table: str) -> tuple[int, int]:
    """(current snapshot id, rows) of ``table`` as the catalog has it now."""
    spark.sql(f"REFRESH TABLE {table}")
    snapshot = spark.sql(f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at DESC LIMIT 1").first()[0]
    return snapshot, spark.sql(f"SELECT count(*) FROM {table}").first()[0]


def _policy(tmp_path, policy: dict) -> None:
    path = tmp_path / "config" / "policy.json"
    path.write_text(json.dumps(policy))
    path.chmod(0o600)


def test_revocation_of_a_spark_writers_named_token_stops_its_next_insert_within_seconds(spark, tmp_path):
    face = _governed(tmp_path)
    catalog = f"revoke_{uuid.uuid4().hex[:6]}"
    namespace = f"{catalog}.revoke_{uuid.uuid4().hex[:6]}"
    table = f"{namespace}.orders"
    token_file = tmp_path / "config" / "tokens" / "spark-writers.token"
    try:
        add_catalog(spark, catalog, tmp_path / "warehouse", kms_service=face.service.address,
                    kms_token_file=str(token_file))
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {namespace}")
        spark.sql(f"CREATE TABLE {table} (id bigint, item string) USING iceberg "
                  "TBLPROPERTIES ('encryption.key-id'='orders-key', 'format-version'='3')")
        spark.sql(f"INSERT INTO {table} VALUES (1, 'apple'), (2, 'pear'), (3, 'plum')")
        before = _snapshot(spark, table)
        assert before[1] == 3
        old_token = _named_token(tmp_path)

        # Revoke: the principal out of the policy, SIGHUP (no restart).
        revoked_policy = json.loads(json.dumps(POLICY))
        del revoked_policy["principals"][PRINCIPAL]
        _policy(tmp_path, revoked_policy)
        face.service.signal(signal.SIGHUP)
        revoked = time.monotonic()
        eventually(lambda: not token_file.exists(), 10, interval=0.05, message="the revoked token's file removed")

        def insert_refused() -> str | None:
            try:
                spark.sql(f"INSERT INTO {table} VALUES (4, 'fig')")
            except Exception as exc:  # noqa: BLE001 - the driver's error, whatever wraps it
                return _error_text(exc)
            pytest.fail("an INSERT after the revocation was committed")

        error = insert_refused()
        elapsed = time.monotonic() - revoked
        assert elapsed < 30 * load_factor(), elapsed  # Spark's own job start included
        # A connection that proved the revoked token gets the policy's refusal (the principal is not in
        # it any more); a new connection cannot prove it (its token file is gone). Either way one line
        # that names the KMS service and the refusal.
        assert "KMS service" in error, error
        assert re.search(r"this client may not (un)?wrap with it|token", error), error
        assert old_token not in error and old_token.split(":", 1)[1] not in error
        assert not re.search(r"[0-9a-fA-F]{32,}", error), error  # no key bytes, wrapped keys or tokens
        assert "Traceback" not in error

        # The principal given back: a fresh token file, the writer works again (still no restart),
        # and the table is where it was before the refused INSERT.
        _policy(tmp_path, POLICY)
        face.service.signal(signal.SIGHUP)
        eventually(lambda: token_file.exists() and _named_token(tmp_path) != old_token and True, 10,
                   interval=0.05, message="a fresh token for the principal given back")
        assert eventually(lambda: _snapshot(spark, table), 30, interval=0.5,
                          message="the table readable again") == before
        spark.sql(f"INSERT INTO {table} VALUES (4, 'fig')")
        after = _snapshot(spark, table)
        assert after[1] == 4 and after[0] != before[0]

        # The trail says who was refused (the connection that proved the old token), with no token.
        trail = _trail(tmp_path).read_text()
        assert old_token not in trail
        assert any(r.get("principal") == PRINCIPAL and r.get("result") == "ok" for r in _records(tmp_path))
        assert "the token of py4j:spark-writers is revoked" in face.service.log()
    finally:
        face.stop()


def test_revocation_a_retired_key_version_stops_a_spark_read_at_once(spark, tmp_path):
    """The table's key is wrapped under version 1 of ``orders-key``; version 2 made current and
    version 1 retired in the keystore file (no SIGHUP, no restart): a fresh load of the table in
    Spark fails clearly, without key bytes."""
    face = _governed(tmp_path, audit=False)
    catalog = f"retire_{uuid.uuid4().hex[:6]}"
    namespace = f"{catalog}.retire_{uuid.uuid4().hex[:6]}"
    table = f"{namespace}.orders"
    try:
        add_catalog(spark, catalog, tmp_path / "warehouse", kms_service=face.service.address,
                    kms_token_file=str(tmp_path / "config" / "tokens" / "spark-writers.token"))
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {namespace}")
        spark.sql(f"CREATE TABLE {table} (id bigint) USING iceberg "
                  "TBLPROPERTIES ('encryption.key-id'='orders-key', 'format-version'='3')")
        spark.sql(f"INSERT INTO {table} VALUES (1), (2)")
        assert spark.sql(f"SELECT count(*) FROM {table}").first()[0] == 2

        store = KeystoreKms(tmp_path / "keys.json")
        store.rotate_key("orders-key")
        store.retire_version("orders-key", 1)  # what `pyiceberg-crypto keystore retire` does
        retired = time.monotonic()

        second = f"{catalog}_again"  # a fresh load: no table (or key) cached by the first catalog
        add_catalog(spark, second, tmp_path / "warehouse", kms_service=face.service.address,
                    kms_token_file=str(tmp_path / "config" / "tokens" / "spark-writers.token"))
        with pytest.raises(Exception) as excinfo:  # noqa: PT011 - the driver's error, whatever wraps it
            spark.sql(f"SELECT count(*) FROM {second}.{table.split('.', 1)[1]}").collect()
        error = _error_text(excinfo.value)
        assert time.monotonic() - retired < 30 * load_factor()
        assert "orders-key" in error and ("not known to this KMS service" in error or "version" in error), error
        assert not re.search(r"[0-9a-fA-F]{32,}", error), error
    finally:
        face.stop()
