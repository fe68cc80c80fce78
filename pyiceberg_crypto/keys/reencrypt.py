"""Re-encrypt a table under fresh keys after a master key (version) or KEK was compromised (issue 42).

Re-wrapping (:mod:`.rewrap`) keeps the KEK bytes, so whoever holds the leaked master key version
(or a KEK itself) can still open every manifest list, manifest and data file of every snapshot it
sealed. ``reencrypt_table`` makes the table's live content new under new keys, then drops the rest::

    result = reencrypt_table(spark, "lake.db.orders", compromised_master_keys=[("orders-key", "1")])
    result = reencrypt_table(spark, "lake.db.orders", compromised_keks=["kek-id"], dry_run=True)
    result.fresh_kek, result.expired_snapshots, result.orphans, result.to_dict()

How Iceberg 1.12.0 is made to use a fresh KEK (its public API has no call for it):
``StandardEncryptionManager.keyEncryptionKeyID()`` takes the first KEK (``encrypted-by-id`` = the
table's ``encryption.key-id``) younger than 730 days in its key map, a ``SerializableMap`` (a hash
map: the metadata's list order is lost), and makes a new one only when there is none. So the fresh
KEK must be the table's only KEK. One metadata commit (``TableMetadata.buildFrom(base)``,
``removeEncryptionKey`` / ``addEncryptionKey``, the catalog's compare-and-swap as :mod:`.commit`
does; Hive and REST alike) adds a KEK with NEW random bytes, wrapped by the KMS under the master
key's current version (``KEY_TIMESTAMP`` = now, property ``REENCRYPTED_AFTER_COMPROMISE``),
re-seals the manifest-list key of every snapshot with it (unwrapped with the old KEK in Python,
sealed again: AES-GCM, AAD = the fresh KEK's ``KEY_TIMESTAMP``, as Iceberg seals), and removes every
other KEK. Every snapshot keeps reading, and every write from then on, starting with the rewrites
below, seals its manifest list with the fresh KEK. The re-sealed snapshots still reach files whose
keys the leaked material opens (their manifest lists are unchanged): ``RESEALED_UP_TO_SEQUENCE``
on the fresh KEK records the sequence number up to which snapshots are old. The table's
``encryption.key-id`` cannot change (Hive's commit refuses it, docs/explanation/facts.md#kek-choice): the replacement is the
master key's current version, so rotate first (``pyiceberg-crypto keystore rotate``); a current
version that is itself compromised stops the run.

Then, in rounds until the current snapshot holds nothing older (``max_rounds``):
``rewrite_data_files`` (``rewrite-all``, ``remove-dangling-deletes``) rewrites every data file with
its deletes applied, ``rewrite_position_delete_files`` (``rewrite-all``) whatever delete files are
left, ``rewrite_manifests`` the manifests the rewrites carried over unchanged (they write the others
anew). A file counts as new when the snapshot that added it (read from the current manifest list on
the driver, no Spark job) is newer than the re-seal and sealed by the fresh KEK;
a concurrent writer whose snapshot was sealed by an older KEK (its encryption manager was made
before the KEK commit; Iceberg writes that KEK back) makes another round, which re-seals first.
Then ``expire_snapshots`` of every snapshot but the current one (they are exactly what the leaked
material opens, or share files with it; Iceberg deletes the files only they reach), the KEK entries
no remaining snapshot needs are removed in one commit, and ``remove_orphan_files`` runs with a
safety window (``orphans_older_than``; a dry run lists what would go).

Refs: a branch or tag other than ``main`` pins snapshots the run must expire; it blocks the run
(listed in the error) unless ``drop_refs``. Every step is idempotent: a crash leaves a readable
table (each step is one Iceberg commit) and running again finishes the job (a fresh KEK already
the only one is kept, files already new are not rewritten again). Prove the outcome
independently with :func:`pyiceberg_crypto.verify.compromise.compromise_report`.
"""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from pyiceberg_crypto.errors import PyicebergCryptoError
from pyiceberg_crypto.formats.ags1 import NONCE_LENGTH, check_key
from pyiceberg_crypto.formats.manifest_list_key import decrypt_manifest_list_key_metadata
from pyiceberg_crypto.keys.commit import commit_with_retries, java_line, load_operations_and_kms, master_key_id
from pyiceberg_crypto.kms.base import KeyManagementClient
from pyiceberg_crypto.properties import DATA_KEY_LENGTH, KEY_ID
from pyiceberg_crypto.safe_text import exception_line

__all__ = ["ReencryptError", "ReencryptResult", "reencrypt_table"]

#: The property a KEK made by ``reencrypt_table`` carries (Iceberg reads only ``KEY_TIMESTAMP``).
FRESH_KEK_PROPERTY = "REENCRYPTED_AFTER_COMPROMISE"
#: The table's last sequence number when the fresh KEK last re-sealed older snapshots' keys.
RESEALED_UP_TO_PROPERTY = "RESEALED_UP_TO_SEQUENCE"
DEFAULT_ORPHAN_WINDOW_SECONDS = 3 * 86_400  # Iceberg's own default for remove_orphan_files

Progress = Callable[[str], None]


class ReencryptError(PyicebergCryptoError):
    """The re-encryption stopped (the message says at which step and why; the table stays readable)."""


@dataclass
class ReencryptResult:
    table: str
    dry_run: bool
    compromised_keks: list[str] = field(default_factory=list)  # KEK ids the input names or matches
    fresh_kek: str | None = None
    fresh_kek_master_version: str | None = None
    refs_dropped: list[str] = field(default_factory=list)
    rounds: int = 0
    rewritten_snapshots: list[int] = field(default_factory=list)  # commits of the rewrites
    expired_snapshots: list[int] = field(default_factory=list)
    removed_key_entries: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)  # removed (or, dry run, would be)
    steps_done: list[str] = field(default_factory=list)
    metadata_location: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def reencrypt_table(spark, table: str, *, compromised_master_keys: Iterable[tuple[str, str]] = (),
                    compromised_keks: Iterable[str] = (), new_key_id: str | None = None, drop_refs: bool = False,
                    dry_run: bool = False, orphans_older_than: datetime | None = None, remove_orphans: bool = True,
                    kms: KeyManagementClient | None = None, max_rounds: int = 3, max_attempts: int = 4,
                    progress: Progress | None = None) -> ReencryptResult:
    """Re-encrypt ``catalog.db.table`` under a fresh KEK and drop what the compromised material opens.

    Args:
        compromised_master_keys: ``(master key id, version)`` pairs that leaked.
        compromised_keks: KEK ids (``encryption-keys`` entries) that leaked.
        new_key_id: must be None or the table's ``encryption.key-id`` (Iceberg 1.12.0 cannot move a
            Hive table to another master key: rotate the key instead).
        drop_refs: drop the branches and tags (other than ``main``) that pin old snapshots.
        dry_run: plan only: no commit, no file removed (``orphans`` lists what would go).
        orphans_older_than: remove orphan files older than this (default: 3 days ago).
        kms: the Python KMS of the table's master key (default: the one registered for the catalog).

    Raises:
        ReencryptError: a step failed or the input is refused; what was committed so far stays
            (readable), and running again finishes the job.
    """
    say = progress or (lambda _message: None)
    compromised_versions = {(str(k), str(v)) for k, v in compromised_master_keys}
    compromised_ids = {str(k) for k in compromised_keks}
    if not compromised_versions and not compromised_ids:
        raise ReencryptError("name the compromised material: a master key version or a KEK id")
    full_name, ops, kms = load_operations_and_kms(spark, table, kms, ReencryptError)
    jvm = spark.sparkContext._jvm
    result = ReencryptResult(full_name, dry_run)
    base = ops.refresh()
    table_key_id = master_key_id(base, ReencryptError, full_name)
    if new_key_id not in (None, table_key_id):
        raise ReencryptError(f"cannot move {full_name} to master key {new_key_id!r}: Iceberg 1.12.0's Hive commit "
                             f"refuses a changed encryption.key-id; rotate {table_key_id!r} and name the old version "
                             "as compromised instead")
    current = _ask(kms.current_key_version, table_key_id, what="current_key_version")
    if (table_key_id, str(current)) in compromised_versions:
        raise ReencryptError(f"the current version ({current}) of master key {table_key_id!r} is the compromised one: "
                             f"rotate it first (pyiceberg-crypto keystore rotate ... {table_key_id}); nothing changed")
    keks = _keks(jvm, base, table_key_id)
    compromised = [k for k, (wrapped, _props) in keks.items() if k in compromised_ids or
                   (table_key_id, str(_ask(kms.key_version, wrapped, table_key_id, what="key_version"))) in compromised_versions]
    result.compromised_keks = sorted(compromised)
    blocking = _blocking_refs(base)
    if blocking and not drop_refs:
        raise ReencryptError(f"{full_name} has refs that pin snapshots the re-encryption must expire: "
                             f"{', '.join(blocking)}; drop them or pass drop_refs (--drop-refs); nothing changed")
    if dry_run:
        result.refs_dropped = blocking
        result.expired_snapshots = [s for s in _snapshot_ids(base) if s != _current_id(base)]
        result.orphans = _remove_orphans(spark, full_name, orphans_older_than, dry_run=True) if remove_orphans else []
        result.metadata_location = base.metadataFileLocation()
        return result

    def fresh(kek_id, wrapped, props) -> bool:
        return (props.get(FRESH_KEK_PROPERTY) is not None and kek_id not in compromised_ids and
                (table_key_id, str(_ask(kms.key_version, wrapped, table_key_id, what="key_version")))
                not in compromised_versions)

    # 1. a fresh KEK, first in the list
    say("fresh KEK")
    _attempts, committed, _location = _commit(
        spark, ops, full_name, lambda b: _fresh_kek_step(jvm, b, table_key_id, kms, fresh, result),
        what="fresh KEK commit", max_attempts=max_attempts)
    result.steps_done.append("fresh-kek" if committed else "fresh-kek (already first)")
    # 2. refs
    for ref in blocking:
        kind, name = ref.split(" ", 1)
        spark.sql(f"ALTER TABLE {full_name} DROP {kind.upper()} IF EXISTS `{name}`")
        result.refs_dropped.append(ref)
    # 3. rewrites, in rounds (each starts by re-sealing what a stale writer sealed with an old KEK)
    for round_number in range(1, max_rounds + 1):
        if round_number > 1:
            _commit(spark, ops, full_name, lambda b: _fresh_kek_step(jvm, b, table_key_id, kms, fresh, result),
                    what="re-seal", max_attempts=max_attempts)
        old = _old_content(spark, ops, full_name, fresh)
        if not any(old.values()):
            break
        result.rounds = round_number
        say(f"round {round_number}: {old['data']} data, {old['deletes']} delete file(s), {old['manifests']} manifest(s) "
            "not yet under the fresh KEK")
        before = _current_id(ops.refresh())
        if old["data"]:
            _call(spark, full_name, "rewrite_data_files",
                  "options => map('rewrite-all', 'true', 'remove-dangling-deletes', 'true')")
            old = _old_content(spark, ops, full_name, fresh)
        if old["deletes"]:
            _call(spark, full_name, "rewrite_position_delete_files", "options => map('rewrite-all', 'true')")
            old = _old_content(spark, ops, full_name, fresh)
        # rewrite_data_files commits new manifests (its own, and the old ones filtered of the replaced
        # files, written anew); rewrite_manifests only for what it carried over unchanged
        if _current_id(ops.refresh()) == before or old["manifests"]:
            _call(spark, full_name, "rewrite_manifests", "use_caching => false")
        after = _current_id(ops.refresh())
        if after != before:
            result.rewritten_snapshots.append(after)
    else:
        old = _old_content(spark, ops, full_name, fresh)
        if any(old.values()):
            raise ReencryptError(f"{full_name}: after {max_rounds} rounds the current snapshot still holds files "
                                 f"written under older keys ({old}): other writers keep sealing with an older KEK (a session "
                                 "that loaded the table before the run); the table stays readable (every commit so far "
                                 "is whole): run again once they have reloaded it or paused")
    result.steps_done.append("rewrite")
    # 4. expire everything but the current snapshot; drop the key entries they alone needed
    say("expire snapshots")
    base = ops.refresh()
    result.expired_snapshots = [s for s in _snapshot_ids(base) if s != _current_id(base)]
    if result.expired_snapshots:
        # the procedure, not Iceberg's core ExpireSnapshots: 1.12.0's core file cleanup opens the
        # expired snapshots' manifest lists without the table's encryption ("Failed to open file")
        ids = ", ".join(str(s) for s in result.expired_snapshots)
        _call(spark, full_name, "expire_snapshots", f"snapshot_ids => array({ids})")
    result.steps_done.append("expire")
    _commit(spark, ops, full_name, lambda b: _drop_old_keys_step(jvm, b, table_key_id, fresh, result),
            what="removal of old key entries", max_attempts=max_attempts)
    result.steps_done.append("old-keys-removed")
    # 5. orphans
    if remove_orphans:
        say("remove orphan files")
        result.orphans = _remove_orphans(spark, full_name, orphans_older_than, dry_run=False)
        result.steps_done.append("orphans")
    result.metadata_location = ops.refresh().metadataFileLocation()
    spark.sql(f"REFRESH TABLE {full_name}")
    return result


def _commit(spark, ops, full_name: str, step, *, what: str, max_attempts: int) -> tuple[int, bool, str]:
    """:func:`~.commit.commit_with_retries`, its failure saying that the table stays readable and
    what to do (a writer committing faster than the run can retry stops it cleanly)."""
    try:
        return commit_with_retries(spark, ops, full_name, step, what=what, error=ReencryptError,
                                   max_attempts=max_attempts)
    except ReencryptError as exc:
        raise ReencryptError(f"{exc}; the table stays readable: run the re-encryption again to finish (writers "
                             "committing faster than it can retry: pause them, or raise max_attempts)") from None


def _keks(jvm, base, table_key_id: str) -> dict[str, tuple[bytes, dict[str, str]]]:
    """KEK id -> (wrapped bytes, properties), in the metadata's list order."""
    keks = {}
    for key in list(base.encryptionKeys()):
        if key.encryptedById() == table_key_id:
            wrapped = bytes(jvm.org.apache.iceberg.util.ByteBuffers.toByteArray(key.encryptedKeyMetadata()))
            keks[key.keyId()] = (wrapped, dict(key.properties() or {}))
    return keks


def _fresh_kek_step(jvm, base, table_key_id: str, kms: KeyManagementClient, fresh, result: ReencryptResult):
    """The fresh KEK as the table's only KEK: every snapshot's manifest-list key re-sealed with it,
    every other KEK (and entry sealed by one that no snapshot names) removed; None when so already."""
    keks = _keks(jvm, base, table_key_id)
    fresh_ids = [k for k, value in keks.items() if fresh(k, *value)]
    old = [k for k in keks if k not in fresh_ids]
    if fresh_ids and not old:
        result.fresh_kek = fresh_ids[0]
        result.fresh_kek_master_version = _ask(kms.key_version, keks[fresh_ids[0]][0], table_key_id, what="key_version")
        return None
    builder = jvm.org.apache.iceberg.TableMetadata.buildFrom(base)
    now_sequence = str(base.lastSequenceNumber())
    if fresh_ids:  # a round after a stale writer: reuse the fresh KEK, move its cut-off
        kek_id = fresh_ids[0]
        wrapped, props = keks[kek_id]
        kek = bytes(_ask(kms.unwrap_key, wrapped, table_key_id, what=f"unwrap of the fresh KEK {kek_id!r}"))
    else:
        length = int(base.properties().get(DATA_KEY_LENGTH) or 16)
        kek = os.urandom(length)
        wrapped = bytes(_ask(kms.wrap_key, kek, table_key_id, what="wrap of the fresh KEK"))
        if bytes(_ask(kms.unwrap_key, wrapped, table_key_id, what="check of the fresh KEK")) != kek:
            raise ReencryptError("the KMS did not give back the fresh KEK from its wrapping: nothing committed")
        kek_id = base64.b64encode(os.urandom(16)).decode()
        props = {"KEY_TIMESTAMP": str(int(time.time() * 1000)),
                 FRESH_KEK_PROPERTY: datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    props = {**props, RESEALED_UP_TO_PROPERTY: now_sequence}
    java_props = jvm.java.util.HashMap()
    for name, value in props.items():
        java_props.put(name, value)
    builder.removeEncryptionKey(kek_id)
    builder.addEncryptionKey(jvm.org.apache.iceberg.encryption.BaseEncryptedKey(
        kek_id, jvm.java.nio.ByteBuffer.wrap(bytearray(wrapped)), table_key_id, java_props))
    entries = {key.keyId(): key for key in list(base.encryptionKeys())}
    named = {snapshot.keyId() for snapshot in list(base.snapshots()) if snapshot.keyId() is not None}
    old_bytes: dict[str, bytes] = {}
    for key_id, entry in entries.items():
        sealer = entry.encryptedById()
        if sealer not in old:
            continue
        builder.removeEncryptionKey(key_id)
        if key_id not in named:
            continue  # the manifest-list key of an expired snapshot: dropped
        if sealer not in old_bytes:
            old_bytes[sealer] = bytes(_ask(kms.unwrap_key, keks[sealer][0], table_key_id, what=f"unwrap of KEK {sealer!r}"))
        envelope = bytes(jvm.org.apache.iceberg.util.ByteBuffers.toByteArray(entry.encryptedKeyMetadata()))
        try:
            plain = decrypt_manifest_list_key_metadata(old_bytes[sealer], envelope, keks[sealer][1]["KEY_TIMESTAMP"],
                                                       file=f"encryption-keys[{key_id}]")
        except (PyicebergCryptoError, KeyError) as exc:
            raise ReencryptError(f"manifest-list key {key_id!r} does not open with its KEK {sealer!r} ({exc}): "
                                 "nothing committed") from None
        sealed = seal_manifest_list_key(kek, plain, props["KEY_TIMESTAMP"])
        builder.addEncryptionKey(jvm.org.apache.iceberg.encryption.BaseEncryptedKey(
            key_id, jvm.java.nio.ByteBuffer.wrap(bytearray(sealed)), kek_id, None))
    for kek_old in old:
        builder.removeEncryptionKey(kek_old)
    del kek, old_bytes
    result.fresh_kek = kek_id
    result.fresh_kek_master_version = _ask(kms.key_version, wrapped, table_key_id, what="key_version")
    return builder.build()


def seal_manifest_list_key(kek: bytes, key_metadata: bytes, kek_timestamp: str) -> bytes:
    """Seal a manifest list's key metadata with a KEK as Iceberg's ``encryptManifestListKeyMetadata``
    does: nonce(12) + AES-GCM ciphertext + tag, AAD = the KEK's ``KEY_TIMESTAMP`` (UTF-8). Here, not in
    :mod:`pyiceberg_crypto.formats`: the verifier imports no writer."""
    nonce = os.urandom(NONCE_LENGTH)
    return nonce + AESGCM(check_key(kek)).encrypt(nonce, bytes(key_metadata), kek_timestamp.encode("utf-8"))


def _drop_old_keys_step(jvm, base, table_key_id: str, fresh, result: ReencryptResult):
    """Remove every KEK that is not fresh and every sealed entry no remaining snapshot names."""
    entries = {key.keyId(): key for key in list(base.encryptionKeys())}
    needed = {snapshot.keyId() for snapshot in list(base.snapshots()) if snapshot.keyId() is not None}
    needed |= {entries[k].encryptedById() for k in list(needed) if k in entries}
    keks = _keks(jvm, base, table_key_id)
    remove = [k for k, key in entries.items() if k not in needed and
              (k not in keks or not fresh(k, *keks[k]))]
    result.removed_key_entries = sorted(set(result.removed_key_entries) | set(remove))
    if not remove:
        return None
    builder = jvm.org.apache.iceberg.TableMetadata.buildFrom(base)
    for key_id in remove:
        builder.removeEncryptionKey(key_id)
    return builder.build()


def _old_content(spark, ops, full_name: str, fresh) -> dict[str, int]:
    """Live files and manifests of the current snapshot added by a snapshot that is not new: new is
    committed after the last re-seal (sequence number above the fresh KEK's ``RESEALED_UP_TO``) and
    sealed by the fresh KEK.

    Read from the current manifest list on the driver (no Spark job): a manifest added by an old
    snapshot is old with every live file in it (its ADDED and EXISTING counts); a manifest added by a
    new snapshot holds old files only among its EXISTING entries (carried over from older manifests),
    and only then are the entries themselves read (the ``entries`` metadata table)."""
    base = ops.refresh()
    if base.currentSnapshot() is None:
        return {"data": 0, "deletes": 0, "manifests": 0, "manifest_list": 0}
    jvm = spark.sparkContext._jvm
    keks = _keks(jvm, base, base.properties().get(KEY_ID))
    fresh_ids = {k: int(props.get(RESEALED_UP_TO_PROPERTY, "-1")) for k, (wrapped, props) in keks.items()
                 if fresh(k, wrapped, props)}
    entries = {key.keyId(): key.encryptedById() for key in list(base.encryptionKeys())}
    new_ids = {int(s.snapshotId()) for s in list(base.snapshots())
               if entries.get(s.keyId()) in fresh_ids and s.sequenceNumber() > fresh_ids[entries.get(s.keyId())]}
    current = _current_id(base)
    old = {"data": 0, "deletes": 0, "manifests": 0, "manifest_list": int(current not in new_ids)}
    read_entries = False
    for manifest in list(base.currentSnapshot().allManifests(ops.io())):
        added_by = manifest.snapshotId()
        added, existing = manifest.addedFilesCount(), manifest.existingFilesCount()
        if added_by is None or added is None or existing is None:
            read_entries = True  # counts or the adding snapshot not recorded: ask the entries
            continue
        kind = "data" if manifest.content().id() == 0 else "deletes"
        if int(added_by) not in new_ids:
            old["manifests"] += 1
            old[kind] += int(added) + int(existing)
        elif int(existing):
            read_entries = True
    if read_entries:
        spark.sql(f"REFRESH TABLE {full_name}")
        old["data"] = old["deletes"] = 0
        for row in spark.sql(f"SELECT snapshot_id, data_file.content FROM {full_name}.entries WHERE status < 2").collect():
            if row[0] not in new_ids:
                old["data" if row[1] == 0 else "deletes"] += 1
    return old


def _blocking_refs(base) -> list[str]:
    """The branches and tags other than ``main``, as ``branch NAME`` / ``tag NAME``."""
    refs = dict(base.refs())
    return sorted(f"{'branch' if ref.isBranch() else 'tag'} {name}" for name, ref in refs.items() if name != "main")


def _snapshot_ids(base) -> list[int]:
    """Every snapshot's id, oldest first."""
    return [int(s.snapshotId()) for s in sorted(list(base.snapshots()), key=lambda s: s.timestampMillis())]


def _current_id(base) -> int | None:
    current = base.currentSnapshot()
    return int(current.snapshotId()) if current is not None else None


def _remove_orphans(spark, full_name: str, older_than: datetime | None, *, dry_run: bool) -> list[str]:
    if older_than is None:
        older_than = datetime.fromtimestamp(time.time() - DEFAULT_ORPHAN_WINDOW_SECONDS, timezone.utc)
    stamp = older_than.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    rows = _call(spark, full_name, "remove_orphan_files",
                 f"older_than => TIMESTAMP '{stamp}', dry_run => {'true' if dry_run else 'false'}")
    return sorted(row[0] for row in rows)


def _call(spark, full_name: str, procedure: str, arguments: str) -> list:
    catalog, rest = full_name.split(".", 1)
    try:
        rows = spark.sql(f"CALL {catalog}.system.{procedure}(table => '{rest}', {arguments})").collect()
    except Exception as exc:
        raise ReencryptError(f"{procedure} of {full_name} failed: {java_line(exc)}; the table stays readable, "
                             "run the re-encryption again to finish") from None
    spark.sql(f"REFRESH TABLE {full_name}")
    return rows


def _ask(call, *args, what: str):
    try:
        return call(*args)
    except Exception as exc:
        raise ReencryptError(f"the KMS failed ({what}): {exception_line(exc)}") from None
