"""Re-wrap a table's KEKs under the master key's current version, as one Iceberg commit.

After a master key rotation Iceberg keeps using the KEKs it wrapped with the old version until they
are 730 days old, so the old version can never be retired. ``rewrap_keks`` unwraps each KEK with
the Python KMS and wraps the *same KEK bytes* again with the current version; the table's
``encryption-keys`` get the new wrapped blobs in one commit through the catalog::

    result = rewrap_keks(spark, "lake.db.orders")               # KEKs wrapped by an old version
    result = rewrap_keks(spark, "lake.db.orders", dry_run=True)  # what would change, no KMS wrap
    result.changes, result.committed, result.metadata_location
    result = rewrap_keks_in_catalog({"uri": "thrift://hms:9083"}, "lake.db.orders", kms)   # no JVM
    result = rewrap_keks_in_catalog({"type": "rest", "uri": "http://127.0.0.1:8181"}, "lake.db.orders", kms)

Without a JVM the commit goes to the Hive metastore or the REST catalog directly, as Iceberg's own
clients commit (:mod:`pyiceberg_crypto.catalog.commit`: the same result, the same retries).

The KEK id and bytes, its ``KEY_TIMESTAMP`` and ``encrypted-by-id`` stay equal, so every snapshot
keeps reading and time travel works; no data file, manifest or manifest list is rewritten. The
table's KEKs are matched in the KMS's notion of key ids (:mod:`pyiceberg_crypto.kms.key_ids`). All
KMS calls happen before anything is built (a KMS failure commits nothing), and a concurrent commit
makes ours re-read the table and redo the re-wrap (``max_attempts``).

The runbook, and how the commit stays safe: docs/how-to/rotate-keys.md.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import base64
import binascii

from pyiceberg_crypto.spark.java import java_list
from pyiceberg_crypto.errors import PyicebergCryptoError
from pyiceberg_crypto.catalog.commit import KeyChange, commit_key_change
from pyiceberg_crypto.keys.commit import commit_with_retries, load_operations_and_kms, master_key_id
from pyiceberg_crypto.kms.base import KeyManagementClient
from pyiceberg_crypto.kms.key_ids import kms_key_id
from pyiceberg_crypto.properties import CATALOG_TIMEOUT_SECONDS
from pyiceberg_crypto.safe_text import exception_line

__all__ = ["RewrapChange", "RewrapError", "RewrapResult", "rewrap_keks", "rewrap_keks_in_catalog"]


class RewrapError(PyicebergCryptoError):
    """The re-wrap did not commit (KMS failure, table not encrypted, too many concurrent commits)."""


@dataclass
class RewrapChange:
    key_id: str
    master_key_id: str
    old_version: str | None
    new_version: str | None


@dataclass
class RewrapResult:
    table: str
    dry_run: bool
    changes: list[RewrapChange] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)  # KEKs already under the current version
    committed: bool = False
    attempts: int = 0
    metadata_location: str | None = None  # after the commit (or the current one)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "changes": [asdict(c) for c in self.changes]}


def rewrap_keks(spark, table: str, *, kms: KeyManagementClient | None = None, dry_run: bool = False, all_keks: bool = False,
                max_attempts: int = 4) -> RewrapResult:
    """Re-wrap the KEKs of ``catalog.db.table`` that an older master key version wraps.

    Args:
        kms: the Python KMS holding the table's master key (default: the one registered for the catalog).
        dry_run: say what would change; no wrap, no commit.
        all_keks: re-wrap every KEK, also those the KMS reports as current (or cannot tell about).
        max_attempts: commits refused by a concurrent writer are redone this many times in all.

    Raises:
        RewrapError: nothing was committed (the message says why).
    """
    full_name, ops, kms = load_operations_and_kms(spark, table, kms, RewrapError)
    jvm = spark.sparkContext._jvm
    result = RewrapResult(full_name, dry_run)

    def step(base):
        plan, result.unchanged = _plan(jvm, base, kms, dry_run, all_keks)
        result.changes = [change for change, _ in plan]
        if dry_run or not plan:
            return None
        builder = jvm.org.apache.iceberg.TableMetadata.buildFrom(base)
        for change, new_key in plan:
            builder.removeEncryptionKey(change.key_id)
            builder.addEncryptionKey(new_key)
        return builder.build()

    result.attempts, result.committed, result.metadata_location = commit_with_retries(
        spark, ops, full_name, step, what="re-wrap", error=RewrapError, max_attempts=max_attempts)
    return result


def rewrap_keks_in_catalog(properties: dict[str, str], table: str, kms: KeyManagementClient, *,
                           dry_run: bool = False, all_keks: bool = False, max_attempts: int = 4,
                           timeout: float = CATALOG_TIMEOUT_SECONDS, catalog: str | None = None) -> RewrapResult:
    """:func:`rewrap_keks` without Spark or a JVM: the table (``catalog.db.table``, or ``db.table``
    with ``catalog``) read from and committed to the catalog with settings ``properties``
    directly (a Hive metastore's ``uri``, or ``type=rest`` and the REST catalog's settings;
    :func:`~pyiceberg_crypto.catalog.commit.commit_key_change`). Raises RewrapError;
    InvalidArgumentError for a ``db.table`` without ``catalog`` (no catalog name is made up)."""
    result = RewrapResult(table, dry_run)

    def step(meta, doc) -> KeyChange | None:
        if not meta.key_id:
            raise RewrapError("the table has no encryption.key-id: it is not encrypted")
        keks = []
        table_kms_id = _kms_id(kms, meta.key_id)
        for entry in meta.encryption_keys.values():
            if entry.encrypted_by_id and _kms_id(kms, entry.encrypted_by_id) == table_kms_id:
                try:
                    keks.append((entry.key_id, base64.b64decode(entry.encrypted_key_metadata, validate=True)))
                except (binascii.Error, ValueError):
                    raise RewrapError(f"KEK {entry.key_id!r} is not valid base64: nothing committed") from None
        plan, result.unchanged = plan_rewrap(keks, meta.key_id, kms, dry_run, all_keks)
        result.changes = [change for change, _ in plan]
        if dry_run or not plan:
            return None
        return KeyChange(rewrapped={change.key_id: base64.b64encode(wrapped).decode() for change, wrapped in plan})

    result.table, result.attempts, result.committed, result.metadata_location = commit_key_change(
        properties, table, step, what="re-wrap", error=RewrapError, max_attempts=max_attempts, timeout=timeout,
        catalog=catalog)
    return result


def _plan(jvm, base, kms: KeyManagementClient, dry_run: bool, all_keks: bool):
    """[(change, new BaseEncryptedKey)] for the KEKs to re-wrap (all KMS calls happen here)."""
    table_key_id = master_key_id(base, RewrapError)
    table_kms_id = _kms_id(kms, table_key_id)
    keys = {key.keyId(): key for key in java_list(base.encryptionKeys())
            if key.encryptedById() and _kms_id(kms, key.encryptedById()) == table_kms_id}
    keks = [(key_id, bytes(jvm.org.apache.iceberg.util.ByteBuffers.toByteArray(key.encryptedKeyMetadata())))
            for key_id, key in keys.items()]  # manifest-list key metadata (sealed by a KEK) stays as it is
    plan, unchanged = plan_rewrap(keks, table_key_id, kms, dry_run, all_keks)
    built = []
    for change, rewrapped in plan:
        new_key = None
        if rewrapped is not None:
            buffer = jvm.java.nio.ByteBuffer.wrap(bytearray(rewrapped))
            new_key = jvm.org.apache.iceberg.encryption.BaseEncryptedKey(  # encrypted-by-id kept as written
                change.key_id, buffer, keys[change.key_id].encryptedById(), keys[change.key_id].properties())
        built.append((change, new_key))
    return built, unchanged


def plan_rewrap(keks: list[tuple[str, bytes]], table_key_id: str, kms: KeyManagementClient, dry_run: bool,
                all_keks: bool) -> tuple[list[tuple[RewrapChange, bytes | None]], list[str]]:
    """([(change, the KEK wrapped again; None on a dry run)], KEK ids left as they are) for the
    table's KEKs ``(key id, wrapped blob)`` under master key ``table_key_id``. Every KMS call of a
    re-wrap happens here, before anything is built; each new wrapping is unwrapped again and
    compared (RewrapError: nothing committed). The KMS is asked with its own id of the key
    (:func:`~pyiceberg_crypto.kms.key_ids.kms_key_id`: ``alias/orders-key`` is the keystore's
    ``orders-key``)."""
    plan: list[tuple[RewrapChange, bytes | None]] = []
    unchanged: list[str] = []
    shown, table_key_id = table_key_id, _kms_id(kms, table_key_id)
    current = _ask(kms.current_key_version, table_key_id, what="current_key_version")
    for key_id, wrapped in keks:
        version = _ask(kms.key_version, wrapped, table_key_id, what=f"key_version of KEK {key_id!r}")
        if not all_keks and (version is None or current is None or version == current):
            unchanged.append(key_id)
            continue
        change = RewrapChange(key_id, shown, version, current)
        if dry_run:
            plan.append((change, None))
            continue
        kek = _ask(kms.unwrap_key_version, wrapped, table_key_id, version, what=f"unwrap of KEK {key_id!r}")
        rewrapped = bytes(_ask(kms.wrap_key, kek, table_key_id, what=f"wrap of KEK {key_id!r}"))
        if bytes(_ask(kms.unwrap_key, rewrapped, table_key_id, what=f"check of KEK {key_id!r}")) != bytes(kek):
            raise RewrapError(f"the KMS did not give back KEK {key_id!r} from its new wrapping: nothing committed")
        change.new_version = _ask(kms.key_version, rewrapped, table_key_id, what="key_version") or current
        plan.append((change, rewrapped))
    return plan, unchanged


def _kms_id(kms: KeyManagementClient | None, key_id: str) -> str:
    """The KMS's own id of ``key_id`` (:func:`~pyiceberg_crypto.kms.key_ids.kms_key_id`); RewrapError
    when it is no key id."""
    try:
        return kms_key_id(kms, key_id)
    except Exception as exc:
        raise RewrapError(f"master key id {key_id!r} cannot be mapped to the KMS's: {exception_line(exc)}; "
                          "nothing was committed") from None


def _ask(call, *args, what: str):
    try:
        return call(*args)
    except Exception as exc:
        raise RewrapError(f"the KMS failed ({what}): {exception_line(exc)}; nothing was committed") from None

