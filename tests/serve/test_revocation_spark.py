"""Issue 50 item 4 with a real Spark writer: a revoked named Py4J token, and a retired key version,
take effect in a running ``kms serve`` within seconds and without a restart. Issue 61 item 4: what a
Spark session that already loaded the table does then.

The session's Spark application gets a catalog of its own whose KMS is ``kms serve`` over the Py4J
face, proven with the named token of ``py4j:spark-writers`` (granted wrap and unwrap on
``orders-key``). The writer inserts; the principal is removed from the policy and the service gets
SIGHUP (the documented revoke path of a named token); the next INSERT fails with one clear error
naming the refusal, holding no token and no key bytes, and the table stays at its snapshot. The
principal given back, the writer works again (a fresh token, read by the JVM client at reconnect),
still without a restart. Then a key version retired in the keystore stops unwrapping for Spark too.

The rule both tests pin (measured here, local Spark, Iceberg 1.12.0's ``SparkCatalog``, Hive
catalog): Iceberg keeps the unwrapped KEK in the table object its catalog caches. A statement on a
table the catalog still holds needs no KMS call, so SELECTs go on after a retire or a revoke; every
INSERT unwraps the KEK again and fails at once. The table object goes (and with it the KEK) on
``REFRESH TABLE``, on the catalog's cache expiry (``cache.expiration-interval-ms``, 30 s by default,
counted from the table's last use in that catalog), in a new catalog or session, and at every
statement of a catalog with ``cache-enabled=false``; the next statement then unwraps and fails.
docs/how-to/rotate-keys.md#what-a-running-session-does-after-a-retire-or-a-revoke states it for
operators."""

from __future__ import annotations

import json
import re
import signal
import time
import uuid

import pytest
from py4j.protocol import Py4JJavaError

from pyiceberg_crypto.kms.keystore import KeystoreKms
from tests.conftest import add_catalog
from tests.serve.test_governance import POLICY, _governed, _metrics, _named_token, _records, _sample, _trail
from tests.testkit import eventually, load_factor

pytestmark = [pytest.mark.loopback]

PRINCIPAL = "py4j:spark-writers"
#: Iceberg 1.12.0's defaults, read from the running catalog: a cached table stays 30 s after its
#: last use (``cache.expiration-interval-ms``), an unwrapped KEK an hour after its unwrap.
TABLE_CACHE_MS, KEK_CACHE_MS = 30_000, 3_600_000
#: The expiry of the catalog that shows a table leaving the cache (short: the test waits for it).
IDLE_MS = 2_000


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


def _ids(spark, table: str) -> list[int]:
    return sorted(row[0] for row in spark.sql(f"SELECT id FROM {table}").collect())


def _refused(spark, statement: str) -> str:
    """The error of a statement that must fail (the driver's, whatever wraps it)."""
    with pytest.raises(Exception) as excinfo:  # noqa: PT011 - the driver's error, whatever wraps it
        spark.sql(statement).collect()
    return _error_text(excinfo.value)


def _unwraps(face) -> float:
    """Unwrap calls of the Spark writers' principal the service counted so far (refused ones too)."""
    return _sample(_metrics(face), "pyiceberg_crypto_kms_calls_total", face="py4j", principal=PRINCIPAL,
                   operation="unwrap")


# What Iceberg keeps in the driver JVM, read from the running catalog by reflection (Iceberg has no
# getter for it): a change of these in a future Iceberg fails the test rather than the documentation.

def _field(obj, name: str):
    """A declared (private or protected) field of a JVM object, looked up along its superclasses."""
    cls = obj.getClass()
    while cls is not None:
        try:
            field = cls.getDeclaredField(name)
        except Py4JJavaError:  # NoSuchFieldException: a superclass declares it
            cls = cls.getSuperclass()
            continue
        field.setAccessible(True)
        return field.get(obj)
    raise AssertionError(f"{obj.getClass().getName()} has no field {name!r}: another Iceberg?")


def _table_cache(spark, catalog: str):
    """The Caffeine cache of tables of the Spark catalog ``catalog`` (Iceberg's ``CachingCatalog``)."""
    iceberg = spark._jsparkSession.sessionState().catalogManager().catalog(catalog).icebergCatalog()
    assert iceberg.getClass().getName() == "org.apache.iceberg.CachingCatalog"
    return _field(iceberg, "tableCache")


def _ident(spark, name: str):
    return spark._jvm.org.apache.iceberg.catalog.TableIdentifier.parse(name)


def _cached(spark, catalog: str, name: str) -> bool:
    """Whether ``catalog`` still holds the table ``name`` (``containsKey`` does not count as a use)."""
    return bool(_table_cache(spark, catalog).asMap().containsKey(_ident(spark, name)))


def _expiry_ms(spark, cache, kind: str) -> int | None:
    """``expireAfterAccess`` / ``expireAfterWrite`` of a Caffeine cache in milliseconds (None: not set)."""
    expiry = getattr(cache.policy(), kind)()
    return expiry.get().getExpiresAfter(spark._jvm.java.util.concurrent.TimeUnit.MILLISECONDS) \
        if expiry.isPresent() else None


def _kek_cache(spark, catalog: str, name: str):
    """The unwrapped KEKs of the table object ``catalog`` holds for ``name`` (its
    ``StandardEncryptionManager``'s cache; reading it counts as a use of the table)."""
    table = _table_cache(spark, catalog).asMap().get(_ident(spark, name))
    assert table is not None, f"{catalog} holds no table {name}"
    manager = table.encryption()
    assert manager.getClass().getName() == "org.apache.iceberg.encryption.StandardEncryptionManager"
    return _field(manager, "unwrappedKeyCache")


def _is_refusal(error: str, token: str) -> None:
    """One error naming the KMS service and its refusal, with no token and no key bytes."""
    # A connection that proved the revoked token gets the policy's refusal (the principal is not in
    # it any more); a new connection cannot prove it (its token file is gone). Either way one line
    # that names the KMS service and the refusal.
    assert "KMS service" in error, error
    assert re.search(r"this client may not (un)?wrap with it|token", error), error
    assert token not in error and token.split(":", 1)[1] not in error
    assert not re.search(r"[0-9a-fA-F]{32,}", error), error  # no key bytes, wrapped keys or tokens
    assert "Traceback" not in error


def test_revocation_of_a_spark_writers_named_token_stops_its_next_insert_within_seconds(spark, tmp_path):
    """Revoked: the next INSERT fails within seconds; the table the catalog already loaded still
    reads (its KEK is in the JVM: no KMS call) until REFRESH TABLE; a catalog that caches no table
    (``cache-enabled=false``) loads it for every statement and is refused at once."""
    face = _governed(tmp_path)
    catalog = f"revoke_{uuid.uuid4().hex[:6]}"
    name = f"revoke_{uuid.uuid4().hex[:6]}.orders"
    table, uncached = f"{catalog}.{name}", f"{catalog}_uncached.{name}"
    token_file = tmp_path / "config" / "tokens" / "spark-writers.token"
    try:
        add_catalog(spark, catalog, tmp_path / "warehouse", kms_service=face.service.address,
                    kms_token_file=str(token_file))
        add_catalog(spark, f"{catalog}_uncached", tmp_path / "warehouse", kms_service=face.service.address,
                    kms_token_file=str(token_file), extra_catalog_properties={"cache-enabled": "false"})
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {table.rsplit('.', 1)[0]}")
        spark.sql(f"CREATE TABLE {table} (id bigint, item string) USING iceberg "
                  "TBLPROPERTIES ('encryption.key-id'='orders-key', 'format-version'='3')")
        spark.sql(f"INSERT INTO {table} VALUES (1, 'apple'), (2, 'pear'), (3, 'plum')")
        before = _snapshot(spark, table)
        assert before[1] == 3
        assert _ids(spark, uncached) == [1, 2, 3]
        old_token = _named_token(tmp_path)

        # Revoke: the principal out of the policy, SIGHUP (no restart).
        revoked_policy = json.loads(json.dumps(POLICY))
        del revoked_policy["principals"][PRINCIPAL]
        _policy(tmp_path, revoked_policy)
        face.service.signal(signal.SIGHUP)
        revoked = time.monotonic()
        eventually(lambda: not token_file.exists(), 10, interval=0.05, message="the revoked token's file removed")

        # The table this catalog loaded before the revocation reads on: its cached table object holds
        # the unwrapped KEK, and a read asks the KMS nothing the revocation could refuse.
        assert spark.sql(f"SELECT count(*) FROM {table}").first()[0] == 3
        assert _ids(spark, table) == [1, 2, 3]
        # A catalog without the cache loads the table for each statement: refused at once.
        _is_refusal(_refused(spark, f"SELECT count(*) FROM {uncached}"), old_token)

        # Every INSERT unwraps the KEK again: the cached KEK does not carry a write.
        error = _refused(spark, f"INSERT INTO {table} VALUES (4, 'fig')")
        elapsed = time.monotonic() - revoked
        assert elapsed < 30 * load_factor(), elapsed  # Spark's own job start included
        _is_refusal(error, old_token)
        # The refused INSERT leaves the cached table as it was: reads still go on; REFRESH TABLE drops
        # it, and the reload has to unwrap: refused from then on.
        assert _ids(spark, table) == [1, 2, 3]
        spark.sql(f"REFRESH TABLE {table}")
        _is_refusal(_refused(spark, f"SELECT count(*) FROM {table}"), old_token)

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
        assert _ids(spark, uncached) == [1, 2, 3, 4]

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
    Spark fails clearly, without key bytes.

    The catalog that already read the table keeps reading it with no KMS call (Iceberg's cached
    table object holds the unwrapped KEK: 30 s after its last use, an hour after the unwrap, both
    read from the running catalog), while its next INSERT is refused at once (a write unwraps the
    KEK again); the table stops reading once the catalog lets it go: its cache expiry (a catalog
    with a 2 s expiry here), or REFRESH TABLE."""
    face = _governed(tmp_path, audit=False)
    catalog = f"retire_{uuid.uuid4().hex[:6]}"
    name = f"retire_{uuid.uuid4().hex[:6]}.orders"
    table, idle = f"{catalog}.{name}", f"{catalog}_idle"
    token_file = str(tmp_path / "config" / "tokens" / "spark-writers.token")
    try:
        add_catalog(spark, catalog, tmp_path / "warehouse", kms_service=face.service.address,
                    kms_token_file=token_file)
        add_catalog(spark, idle, tmp_path / "warehouse", kms_service=face.service.address,
                    kms_token_file=token_file, extra_catalog_properties={"cache.expiration-interval-ms": IDLE_MS})
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {table.rsplit('.', 1)[0]}")
        spark.sql(f"CREATE TABLE {table} (id bigint) USING iceberg "
                  "TBLPROPERTIES ('encryption.key-id'='orders-key', 'format-version'='3')")
        spark.sql(f"INSERT INTO {table} VALUES (1), (2)")
        assert spark.sql(f"SELECT count(*) FROM {table}").first()[0] == 2
        assert spark.sql(f"SELECT count(*) FROM {idle}.{name}").first()[0] == 2

        # What the running catalog keeps (the defaults: no cache setting in add_catalog's settings).
        tables = _table_cache(spark, catalog)
        assert _expiry_ms(spark, tables, "expireAfterAccess") == TABLE_CACHE_MS  # from the last use
        assert _expiry_ms(spark, tables, "expireAfterWrite") is None             # not from the load
        keks = _kek_cache(spark, catalog, name)
        assert keks.estimatedSize() >= 1  # the table's KEK, unwrapped
        assert _expiry_ms(spark, keks, "expireAfterWrite") == KEK_CACHE_MS

        store = KeystoreKms(tmp_path / "keys.json")
        store.rotate_key("orders-key")
        store.retire_version("orders-key", 1)  # what `pyiceberg-crypto keystore retire` does
        retired = time.monotonic()

        def is_refusal(error: str) -> None:
            assert "orders-key" in error and ("not known to this KMS service" in error or "version" in error), error
            assert not re.search(r"[0-9a-fA-F]{32,}", error), error

        # The same catalog reads on, without asking the KMS: the KEK comes from its cached table.
        unwraps = _unwraps(face)
        assert spark.sql(f"SELECT count(*) FROM {table}").first()[0] == 2
        assert _ids(spark, table) == [1, 2]
        assert _unwraps(face) == unwraps
        # Its INSERT asks the KMS to unwrap the KEK, and is refused at once; the table is unchanged.
        is_refusal(_refused(spark, f"INSERT INTO {table} VALUES (3)"))
        assert _unwraps(face) > unwraps
        assert _ids(spark, table) == [1, 2]

        # The catalog with a 2 s expiry: once it has let the table go (2 s after its last use), the
        # reload has to unwrap, and is refused.
        eventually(lambda: not _cached(spark, idle, name), 30, interval=0.2,
                   message=f"{idle} to let the table go after {IDLE_MS} ms unused")
        is_refusal(_refused(spark, f"SELECT count(*) FROM {idle}.{name}"))

        # REFRESH TABLE in the catalog that read on: refused from then on.
        spark.sql(f"REFRESH TABLE {table}")
        is_refusal(_refused(spark, f"SELECT count(*) FROM {table}"))

        second = f"{catalog}_again"  # a fresh load: no table (or key) cached by the first catalog
        add_catalog(spark, second, tmp_path / "warehouse", kms_service=face.service.address,
                    kms_token_file=token_file)
        error = _refused(spark, f"SELECT count(*) FROM {second}.{name}")
        assert time.monotonic() - retired < 30 * load_factor()
        is_refusal(error)
    finally:
        face.stop()
