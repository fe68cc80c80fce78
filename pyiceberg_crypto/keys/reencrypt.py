"""Re-encrypt a table under fresh keys after a master key (version) or KEK was compromised.

Re-wrapping (:mod:`.rewrap`) keeps the KEK bytes, so whoever holds the leaked material can still
open every file of every snapshot it sealed. ``reencrypt_table`` makes the table's live content new
under new keys, then drops the rest::

    result = reencrypt_table(spark, "lake.db.orders")        # every version the KMS marks compromised
    result = reencrypt_table(spark, "lake.db.orders", compromised_master_keys=[("orders-key", "1")])
    result = reencrypt_table(spark, "lake.db.orders", compromised_keks=["kek-id"], tags="drop", dry_run=True)
    result.fresh_kek, result.expired_snapshots, result.orphans, result.to_dict()

In :data:`PHASES`, each made of whole Iceberg commits and idempotent (a crash leaves a readable
table; running again finishes the job): a fresh KEK (wrapped by the master key's current version:
rotate first) becomes the table's only KEK and re-seals every snapshot's manifest-list key; every
file on ``main`` is rewritten, in rounds; each other branch is re-encrypted on its branch and each
tag moved to a re-encrypted copy (``tags="rewrite"``) or dropped (``tags="drop"``); every snapshot
no ref names is expired, the old KEKs removed, and the files the old material opens are deleted
from storage. Compromised are the versions named (checked by :func:`compromised_version_set`),
every version the KMS marks compromised, and any KEK ids named; nothing named or marked stops the
run before it changes anything.

Prove the outcome independently with :func:`pyiceberg_crypto.verify.compromise.compromise_report`
(``storage=True``). How it works (why the fresh KEK must be the only one, rounds, refs, the sweep):
docs/explanation/design.md#reencrypt; the runbook: docs/how-to/key-compromised.md.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from pyiceberg_crypto._deprecated import renamed_classes
from pyiceberg_crypto.spark.java import java_line, java_list, java_map
from pyiceberg_crypto.spark.session import activate_session
from pyiceberg_crypto.errors import OperationError, PyicebergCryptoError
from pyiceberg_crypto.formats.ags1 import NONCE_LENGTH, check_key
from pyiceberg_crypto.formats.manifest_list_key import decrypt_manifest_list_key_metadata
from pyiceberg_crypto.keys.commit import commit_with_retries, load_operations_and_kms, master_key_id
from pyiceberg_crypto.io import local_path
from pyiceberg_crypto.kms.base import KeyManagementClient
from pyiceberg_crypto.kms.key_ids import canonical_key_id, kms_key_id
from pyiceberg_crypto.properties import (DATA_KEY_LENGTH, FRESH_KEK_PROPERTY, KEY_ID, REENCRYPT_JOURNAL_PROPERTY,
                                         RESEALED_UP_TO_PROPERTY)
from pyiceberg_crypto.safe_text import exception_line

__all__ = ["PHASES", "TAGS_DROP", "TAGS_REWRITE", "ReencryptResult", "compromised_version_set",
           "reencrypt_table", "table_compromised_versions"]

#: Old names, kept for one release (CHANGELOG.md).
__getattr__ = renamed_classes(__name__, {"ReencryptError": OperationError})

DEFAULT_ORPHAN_WINDOW_SECONDS = 3 * 86_400  # Iceberg's own default for remove_orphan_files
#: How far storage's clock (a file's creation time) may run behind the driver's, which stamped the
#: journal: a leftover of a killed run is looked for from the journal's time minus this.
JOURNAL_CLOCK_MARGIN_MS = 10_000
#: ``tags=``: move each tag to a re-encrypted copy of its snapshot, or drop the tags.
TAGS_REWRITE, TAGS_DROP = "rewrite", "drop"
#: The run's phases, in order (each idempotent; ``fail_at`` stops before one, for crash tests).
PHASES = ("fresh-kek", "rewrite", "branches", "tags", "expire", "old-keys", "sweep")
#: The branch a tag's snapshot is re-encrypted on before the tag moves to its head (then dropped).
TAG_BRANCH_PREFIX = "pyiceberg_crypto_reencrypt_tag_"

Progress = Callable[[str], None]


@dataclass
class ReencryptResult:
    table: str
    dry_run: bool
    compromised_keks: list[str] = field(default_factory=list)  # KEK ids the input names or matches
    fresh_kek: str | None = None
    fresh_kek_master_version: str | None = None
    compromised_versions: list[str] = field(default_factory=list)  # of the table's master key: named + KMS-marked
    refs_dropped: list[str] = field(default_factory=list)  # "tag NAME" (tags="drop")
    branches_rewritten: list[str] = field(default_factory=list)  # heads re-encrypted on their branch (or would be)
    tags_rewritten: list[str] = field(default_factory=list)  # moved to a re-encrypted copy (or would be)
    tag_rows_nowhere_else: dict[str, int | None] = field(default_factory=dict)  # dry run, tags="drop"
    rounds: int = 0
    rewritten_snapshots: list[int] = field(default_factory=list)  # commits of the rewrites
    expired_snapshots: list[int] = field(default_factory=list)  # snapshots the table had before the run
    expired_own_snapshots: list[int] = field(default_factory=list)  # the run's own intermediate snapshots
    removed_key_entries: list[str] = field(default_factory=list)
    removed_metadata_files: list[str] = field(default_factory=list)  # old metadata.json with a compromised KEK
    removed_files: list[str] = field(default_factory=list)  # what the old snapshots reached, now unreachable
    orphans: list[str] = field(default_factory=list)  # removed (or, dry run, would be)
    # files an unfinished earlier run wrote that no commit reached, whatever their age (the journal:
    # REENCRYPT_JOURNAL_PROPERTY); removed (or, dry run, would be)
    leftovers: list[str] = field(default_factory=list)
    steps_done: list[str] = field(default_factory=list)
    metadata_location: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def reencrypt_table(spark, table: str, *, compromised_master_keys: Iterable[tuple[str, str]] = (),
                    compromised_keks: Iterable[str] = (), new_key_id: str | None = None, tags: str = TAGS_REWRITE,
                    drop_refs: bool = False, dry_run: bool = False, orphans_older_than: datetime | None = None,
                    remove_orphans: bool = True, kms: KeyManagementClient | None = None, max_rounds: int = 3,
                    max_attempts: int = 4, progress: Progress | None = None,
                    also_remove: Iterable[str] = (), fail_at: str | None = None) -> ReencryptResult:
    """Re-encrypt ``catalog.db.table`` under a fresh KEK and drop what the compromised material opens.

    Args:
        compromised_master_keys: ``(master key id, version)`` pairs that leaked, besides the versions
            the KMS itself marks compromised (``KeyManagementClient.compromised_versions``, always
            included). Each must be a version the KMS holds of the table's master key.
        compromised_keks: KEK ids (``encryption-keys`` entries) that leaked.
        new_key_id: must be None or the table's ``encryption.key-id`` (Iceberg 1.12.0 cannot move a
            Hive table to another master key: rotate the key instead).
        tags: ``"rewrite"`` (default): each tag moves to a re-encrypted copy of its snapshot (a new
            snapshot with the same rows, retention kept); ``"drop"``: the tags are dropped (a dry
            run counts the rows each holds that no branch head holds). Branches are always kept:
            each branch's head is re-encrypted on its branch.
        drop_refs: deprecated: ``tags="drop"`` (branches are kept).
        dry_run: plan only: no commit, no file removed; the counts are the run's.
        orphans_older_than: also remove orphan files older than this (default: 3 days ago).
        kms: the Python KMS of the table's master key (default: the one registered for the catalog).
        also_remove: files an earlier, unfinished run (or the storage proof) found that the
            compromised material opens: removed in the sweep unless the current metadata reaches them.
        fail_at: for crash tests: raise :class:`OperationError` just before this phase
            (one of :data:`PHASES`).

    Raises:
        OperationError: a step failed or the input is refused; what was committed so far stays
            (readable), and running again finishes the job. Refused before any change: a version
            that is not the table's master key's or that the KMS does not hold, nothing marked or
            named compromised, a current master key version that is compromised.
    """
    say = progress or (lambda _message: None)
    run_started_ms = int(time.time() * 1000)  # a leftover of an earlier run was written before this
    if drop_refs:
        tags = TAGS_DROP
    if tags not in (TAGS_REWRITE, TAGS_DROP):
        raise OperationError(f"tags must be {TAGS_REWRITE!r} or {TAGS_DROP!r}, got {tags!r}")
    if fail_at is not None and fail_at not in PHASES:
        raise OperationError(f"fail_at must be one of {', '.join(PHASES)}, got {fail_at!r}")
    named_versions = [(str(k), str(v)) for k, v in compromised_master_keys]
    also_remove = {str(path) for path in also_remove}
    compromised_ids = {str(k) for k in compromised_keks}
    activate_session(spark)  # run_each(parallel=N) runs this in worker threads
    full_name, ops, kms = load_operations_and_kms(spark, table, kms, OperationError)
    jvm = spark.sparkContext._jvm
    result = ReencryptResult(full_name, dry_run)
    base = ops.refresh()
    table_key_id = master_key_id(base, OperationError, full_name)
    if new_key_id not in (None, table_key_id):
        raise OperationError(f"cannot move {full_name} to master key {new_key_id!r}: Iceberg 1.12.0's Hive commit "
                             f"refuses a changed encryption.key-id; rotate {table_key_id!r} and name the old version "
                             "as compromised instead")
    keks = _keks(jvm, base, table_key_id)
    versions = compromised_version_set(kms, table_key_id, named_versions, full_name,
                                       {k: wrapped for k, (wrapped, _props) in keks.items()})
    if not versions and not compromised_ids:
        raise OperationError(f"nothing to re-encrypt {full_name} away from: the KMS marks no version of master key "
                             f"{table_key_id!r} compromised and none was named (mark it: pyiceberg-crypto keystore "
                             f"compromised KEYSTORE {table_key_id} VERSION; or name it: --compromised-version "
                             f"{table_key_id}:VERSION, or --compromised-kek KEK_ID); nothing changed")
    compromised_versions = {(table_key_id, v) for v in versions}
    result.compromised_versions = sorted(versions, key=_version_order)
    current = _ask(kms.current_key_version, kms_key_id(kms, table_key_id), what="current_key_version")
    if current is not None and str(current) in versions:
        raise OperationError(f"the current version ({current}) of master key {table_key_id!r} is compromised: "
                             f"rotate it first (pyiceberg-crypto keystore rotate KEYSTORE {table_key_id}), so the "
                             "fresh KEK is wrapped by a version that did not leak; nothing changed")
    if current is None and versions:
        raise OperationError(f"the KMS cannot tell which version of master key {table_key_id!r} it wraps with now, "
                             "so a fresh KEK might be wrapped by a compromised version: refused; nothing changed")
    compromised = [k for k, (wrapped, _props) in keks.items() if k in compromised_ids or
                   (table_key_id, str(_ask(kms.key_version, wrapped, kms_key_id(kms, table_key_id), what="key_version"))) in compromised_versions]
    result.compromised_keks = sorted(compromised)
    refs = _refs(base)
    if dry_run:
        return _plan(spark, ops, full_name, base, refs, tags, result, orphans_older_than, remove_orphans,
                     run_started_ms)

    def fresh(kek_id, wrapped, props) -> bool:
        return (props.get(FRESH_KEK_PROPERTY) is not None and kek_id not in compromised_ids and
                (table_key_id, str(_ask(kms.key_version, wrapped, kms_key_id(kms, table_key_id), what="key_version")))
                not in compromised_versions)

    def phase(name: str) -> None:
        if fail_at == name:
            raise OperationError(f"stopped before the {name} phase (fail_at, a crash test); the table stays readable")
        say(name)

    # 1. a fresh KEK, first in the list
    start_ids = set(_snapshot_ids(base))
    phase("fresh-kek")
    _attempts, committed, _location = _commit(
        spark, ops, full_name, lambda b: _fresh_kek_step(jvm, b, table_key_id, kms, fresh, result),
        what="fresh KEK commit", max_attempts=max_attempts)
    if result.fresh_kek_master_version is not None and str(result.fresh_kek_master_version) in versions:
        raise OperationError(f"the fresh KEK of {full_name} is wrapped by compromised version "
                             f"{result.fresh_kek_master_version}: rotate {table_key_id!r} and run again")
    result.steps_done.append("fresh-kek" if committed else "fresh-kek (already first)")
    # 2. main: rewrites, in rounds (each starts by re-sealing what a stale writer sealed with an old KEK)
    phase("rewrite")
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
            raise OperationError(f"{full_name}: after {max_rounds} rounds the current snapshot still holds files "
                                 f"written under older keys ({old}): other writers keep sealing with an older KEK (a session "
                                 "that loaded the table before the run); the table stays readable (every commit so far "
                                 "is whole): run again once they have reloaded it or paused")
    result.steps_done.append("rewrite")
    # 3. every other branch: its head re-encrypted on the branch (same rows)
    phase("branches")
    for name in _branches(ops.refresh()):
        if _head_is_old(spark, ops, full_name, fresh, name):
            say(f"branch {name}: rewrite its head under the fresh KEK")
            _overwrite_branch(spark, full_name, name)
            result.branches_rewritten.append(name)
    result.steps_done.append("branches")
    # 4. tags: moved to a re-encrypted copy of their snapshot, or dropped when asked
    phase("tags")
    _tags_step(spark, jvm, ops, full_name, fresh, tags, result, say)
    result.steps_done.append("tags")
    # 5. expire every snapshot no ref names; drop the key entries they alone needed
    phase("expire")
    base = ops.refresh()
    heads = _ref_heads(base)
    expired = [s for s in _snapshot_ids(base) if s not in heads]
    result.expired_snapshots = [s for s in expired if s in start_ids]
    result.expired_own_snapshots = [s for s in expired if s not in start_ids]
    known = _reachable_files(spark, ops, full_name)  # what the sweep deletes once unreachable
    if expired:
        # Iceberg's core ExpireSnapshots on the driver, without its file cleanup (1.12.0's opens the
        # expired manifest lists without the table's encryption: "Failed to open file"; the Spark
        # procedure's costs jobs): the sweep deletes what only they reached, from ``known``
        table_ops = jvm.org.apache.iceberg.BaseTable(ops, full_name)

        def expire_them() -> None:
            expire = table_ops.expireSnapshots().cleanExpiredFiles(False)
            for snapshot_id in expired:
                expire = expire.expireSnapshotId(snapshot_id)
            expire.commit()

        _manage(spark, full_name, expire_them, "expiry of the old snapshots")
    result.steps_done.append("expire")
    phase("old-keys")
    _commit(spark, ops, full_name, lambda b: _drop_old_keys_step(jvm, b, table_key_id, fresh, result),
            what="removal of old key entries", max_attempts=max_attempts)
    result.steps_done.append("old-keys-removed")
    # 6. what the old material opens, off storage: old metadata.json files, files made unreachable
    phase("sweep")
    result.removed_metadata_files = _remove_old_metadata(jvm, ops, table_key_id, kms, compromised_ids,
                                                         compromised_versions)
    reachable = _reachable_files(spark, ops, full_name)
    result.removed_files = _delete_files(ops, sorted((known | also_remove) - reachable))
    since = _journal_since(jvm, ops.refresh(), table_key_id, fresh)
    say("remove what unfinished earlier runs left")
    result.leftovers = _leftovers(spark, ops, reachable, since, run_started_ms, dry_run=False)
    if remove_orphans:
        say("remove orphan files")
        result.orphans = _remove_orphans(spark, ops, full_name, orphans_older_than, reachable | set(result.leftovers),
                                         dry_run=False)
    _commit(spark, ops, full_name, lambda b: _close_journal_step(jvm, b, table_key_id, fresh),
            what="closing of the run's journal", max_attempts=max_attempts)
    result.steps_done.append("sweep")
    result.metadata_location = ops.refresh().metadataFileLocation()
    spark.sql(f"REFRESH TABLE {full_name}")
    return result


def _commit(spark, ops, full_name: str, step, *, what: str, max_attempts: int) -> tuple[int, bool, str]:
    """:func:`~.commit.commit_with_retries`, its failure saying that the table stays readable and
    what to do (a writer committing faster than the run can retry stops it cleanly)."""
    try:
        return commit_with_retries(spark, ops, full_name, step, what=what, error=OperationError,
                                   max_attempts=max_attempts)
    except OperationError as exc:
        raise OperationError(f"{exc}; the table stays readable: run the re-encryption again to finish (writers "
                             "committing faster than it can retry: pause them, or raise max_attempts)") from None


def _keks(jvm, base, table_key_id: str) -> dict[str, tuple[bytes, dict[str, str]]]:
    """KEK id -> (wrapped bytes, properties), in the metadata's list order."""
    keks = {}
    for key in java_list(base.encryptionKeys()):
        if key.encryptedById() is not None and canonical_key_id(key.encryptedById()) == canonical_key_id(table_key_id):
            wrapped = bytes(jvm.org.apache.iceberg.util.ByteBuffers.toByteArray(key.encryptedKeyMetadata()))
            keks[key.keyId()] = (wrapped, {str(k): str(v) for k, v in java_map(key.properties()).items()})
    return keks


def _fresh_kek_step(jvm, base, table_key_id: str, kms: KeyManagementClient, fresh, result: ReencryptResult):
    """The fresh KEK as the table's only KEK: every snapshot's manifest-list key re-sealed with it,
    every other KEK (and entry sealed by one that no snapshot names) removed; None when so already."""
    keks = _keks(jvm, base, table_key_id)
    fresh_ids = [k for k, value in keks.items() if fresh(k, *value)]
    old = [k for k in keks if k not in fresh_ids]
    builder = jvm.org.apache.iceberg.TableMetadata.buildFrom(base)
    journal = str(int(time.time() * 1000))  # committed before the run writes a file
    if fresh_ids and not old:
        result.fresh_kek = fresh_ids[0]
        result.fresh_kek_master_version = _ask(kms.key_version, keks[fresh_ids[0]][0], kms_key_id(kms, table_key_id), what="key_version")
        wrapped, props = keks[fresh_ids[0]]
        if REENCRYPT_JOURNAL_PROPERTY in props:
            return None  # an unfinished run's journal: kept, with its time
        return _readd_kek(jvm, builder, fresh_ids[0], wrapped, table_key_id,
                          {**props, REENCRYPT_JOURNAL_PROPERTY: journal}).build()
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
            raise OperationError("the KMS did not give back the fresh KEK from its wrapping: nothing committed")
        kek_id = base64.b64encode(os.urandom(16)).decode()
        props = {"KEY_TIMESTAMP": str(int(time.time() * 1000)),
                 FRESH_KEK_PROPERTY: datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    props = {REENCRYPT_JOURNAL_PROPERTY: journal, **props, RESEALED_UP_TO_PROPERTY: now_sequence}
    _readd_kek(jvm, builder, kek_id, wrapped, table_key_id, props)
    entries = {key.keyId(): key for key in java_list(base.encryptionKeys())}
    named = {snapshot.keyId() for snapshot in java_list(base.snapshots()) if snapshot.keyId() is not None}
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
            raise OperationError(f"manifest-list key {key_id!r} does not open with its KEK {sealer!r} ({exc}): "
                                 "nothing committed") from None
        sealed = seal_manifest_list_key(kek, plain, props["KEY_TIMESTAMP"])
        builder.addEncryptionKey(jvm.org.apache.iceberg.encryption.BaseEncryptedKey(
            key_id, jvm.java.nio.ByteBuffer.wrap(bytearray(sealed)), kek_id, None))
    for kek_old in old:
        builder.removeEncryptionKey(kek_old)
    del kek, old_bytes
    result.fresh_kek = kek_id
    result.fresh_kek_master_version = _ask(kms.key_version, wrapped, kms_key_id(kms, table_key_id), what="key_version")
    return builder.build()


def _readd_kek(jvm, builder, kek_id: str, wrapped: bytes, table_key_id: str, props: dict[str, str]):
    """``builder`` with KEK ``kek_id`` (re)added with ``props``: the builder."""
    java_props = jvm.java.util.HashMap()
    for name, value in props.items():
        java_props.put(name, value)
    builder.removeEncryptionKey(kek_id)
    builder.addEncryptionKey(jvm.org.apache.iceberg.encryption.BaseEncryptedKey(
        kek_id, jvm.java.nio.ByteBuffer.wrap(bytearray(wrapped)), table_key_id, java_props))
    return builder


def _journal_since(jvm, base, table_key_id: str, fresh) -> int | None:
    """The time (ms) in the fresh KEK's journal: when the first unfinished run began to write."""
    for kek_id, (wrapped, props) in _keks(jvm, base, table_key_id).items():
        if fresh(kek_id, wrapped, props) and REENCRYPT_JOURNAL_PROPERTY in props:
            try:
                return int(props[REENCRYPT_JOURNAL_PROPERTY])
            except ValueError:
                raise OperationError(f"the re-encryption journal of KEK {kek_id!r} is not a time in ms: "
                                     f"{props[REENCRYPT_JOURNAL_PROPERTY][:40]!r}; nothing removed") from None
    return None


def _close_journal_step(jvm, base, table_key_id: str, fresh):
    """The fresh KEK without its journal (the run's sweep is done); None when it has none."""
    for kek_id, (wrapped, props) in _keks(jvm, base, table_key_id).items():
        if fresh(kek_id, wrapped, props) and REENCRYPT_JOURNAL_PROPERTY in props:
            rest = {k: v for k, v in props.items() if k != REENCRYPT_JOURNAL_PROPERTY}
            return _readd_kek(jvm, jvm.org.apache.iceberg.TableMetadata.buildFrom(base), kek_id, wrapped,
                              table_key_id, rest).build()
    return None


def _leftovers(spark, ops, reachable: set[str], since_ms: int | None, until_ms: int, *, dry_run: bool) -> list[str]:
    """The files under the table location written from the journal's time (``since_ms``, less
    :data:`JOURNAL_CLOCK_MARGIN_MS`) until this run began (``until_ms``, the same millisecond
    included: a file's time is in whole milliseconds) that the table does not
    reach: what unfinished earlier runs wrote and never committed, whatever their age (``since_ms``
    None: no journal, none of these). And a metadata.json that holds no JSON, is not the current one
    and was written before this run began, whatever the journal says: a commit killed while writing
    it (a run killed while committing its journal among them), since writing one takes a moment,
    not the minutes this run has taken; one that parses may be a version the metadata log names.
    Deleted unless ``dry_run``; a FileIO that cannot list finds none (the orphan window still
    applies)."""
    io = ops.io()
    base = ops.refresh()
    location = str(base.location()).rstrip("/") + "/"
    try:
        listed = _list_prefix(spark.sparkContext._jvm, io, location)
    except Exception:
        return []
    keep = {local_path(p) for p in reachable} | {local_path(str(base.metadataFileLocation()))}
    def left(path: str, created: int) -> bool:
        if created > until_ms or local_path(path) in keep or path.endswith("/version-hint.text"):
            return False
        if path.endswith(".metadata.json"):
            return _cut_short(io, path)
        return since_ms is not None and created >= since_ms - JOURNAL_CLOCK_MARGIN_MS

    found = sorted(path for path, created in listed if left(path, created))
    return found if dry_run else _delete_files(ops, found)


def seal_manifest_list_key(kek: bytes, key_metadata: bytes, kek_timestamp: str) -> bytes:
    """Seal a manifest list's key metadata with a KEK as Iceberg's ``encryptManifestListKeyMetadata``
    does: nonce(12) + AES-GCM ciphertext + tag, AAD = the KEK's ``KEY_TIMESTAMP`` (UTF-8). Here, not in
    :mod:`pyiceberg_crypto.formats`: the verifier imports no writer."""
    nonce = os.urandom(NONCE_LENGTH)
    return nonce + AESGCM(check_key(kek)).encrypt(nonce, bytes(key_metadata), kek_timestamp.encode("utf-8"))


def _drop_old_keys_step(jvm, base, table_key_id: str, fresh, result: ReencryptResult):
    """Remove every KEK that is not fresh and every sealed entry no remaining snapshot names."""
    entries = {key.keyId(): key for key in java_list(base.encryptionKeys())}
    needed = {snapshot.keyId() for snapshot in java_list(base.snapshots()) if snapshot.keyId() is not None}
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


def _old_content(spark, ops, full_name: str, fresh, *, ref: str | None = None) -> dict[str, int]:
    """Live files and manifests of the current snapshot (or of ``ref``'s head) added by a snapshot that is not new: new is
    committed after the last re-seal (sequence number above the fresh KEK's ``RESEALED_UP_TO``) and
    sealed by the fresh KEK.

    Read from the current manifest list on the driver (no Spark job): a manifest added by an old
    snapshot is old with every live file in it (its ADDED and EXISTING counts); a manifest added by a
    new snapshot holds old files only among its EXISTING entries (carried over from older manifests),
    and only then are the entries themselves read (the ``entries`` metadata table; for a ref's head,
    whose entries are not read, such a manifest counts as old: the head is rewritten)."""
    base = ops.refresh()
    snapshot = base.currentSnapshot() if ref is None else base.snapshot(base.ref(ref).snapshotId())
    if snapshot is None:
        return {"data": 0, "deletes": 0, "manifests": 0, "manifest_list": 0}
    jvm = spark.sparkContext._jvm
    keks = _keks(jvm, base, base.properties().get(KEY_ID))
    fresh_ids = {k: int(props.get(RESEALED_UP_TO_PROPERTY, "-1")) for k, (wrapped, props) in keks.items()
                 if fresh(k, wrapped, props)}
    entries = {key.keyId(): key.encryptedById() for key in java_list(base.encryptionKeys())}
    new_ids = {int(s.snapshotId()) for s in java_list(base.snapshots())
               if entries.get(s.keyId()) in fresh_ids and s.sequenceNumber() > fresh_ids[entries.get(s.keyId())]}
    head = int(snapshot.snapshotId())
    old = {"data": 0, "deletes": 0, "manifests": 0, "manifest_list": int(head not in new_ids)}
    read_entries = False
    for manifest in java_list(snapshot.allManifests(ops.io())):
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
    if read_entries and ref is not None:
        old["manifests"] += 1
    elif read_entries:
        spark.sql(f"REFRESH TABLE {full_name}")
        old["data"] = old["deletes"] = 0
        for row in spark.sql(f"SELECT snapshot_id, data_file.content FROM {full_name}.entries WHERE status < 2").collect():
            if row[0] not in new_ids:
                old["data" if row[1] == 0 else "deletes"] += 1
    return old


def _snapshot_ids(base) -> list[int]:
    """Every snapshot's id, oldest first."""
    return [int(s.snapshotId()) for s in sorted(java_list(base.snapshots()), key=lambda s: s.timestampMillis())]


def _current_id(base) -> int | None:
    current = base.currentSnapshot()
    return int(current.snapshotId()) if current is not None else None


def _remove_orphans(spark, ops, full_name: str, older_than: datetime | None, reachable: set[str], *,
                    dry_run: bool) -> list[str]:
    """Delete the files under the table location older than ``older_than`` (default: 3 days ago)
    that the table does not reach (``reachable``, from the run) and that are not its metadata.json
    files or the Hadoop catalog's pointer: one listing on the driver (the FileIO's prefix listing;
    a FileIO that cannot list: Iceberg's ``remove_orphan_files`` procedure). A metadata.json that is
    not the current one and holds no JSON at all (a writer killed while writing it: no commit ever
    pointed to it; the storage proof cannot say what it held) is an orphan too."""
    if older_than is None:
        older_than = datetime.fromtimestamp(time.time() - DEFAULT_ORPHAN_WINDOW_SECONDS, timezone.utc)
    cut_off = int(older_than.timestamp() * 1000)
    io = ops.io()
    location = str(ops.refresh().location()).rstrip("/") + "/"
    try:
        listed = _list_prefix(spark.sparkContext._jvm, io, location)
    except Exception:  # no prefix listing: the procedure lists storage itself
        stamp = older_than.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        rows = _call(spark, full_name, "remove_orphan_files",
                     f"older_than => TIMESTAMP '{stamp}', dry_run => {'true' if dry_run else 'false'}")
        return sorted(row[0] for row in rows)
    keep = {local_path(p) for p in reachable} | {local_path(str(ops.current().metadataFileLocation()))}
    orphans = sorted(path for path, created in listed
                     if created < cut_off and local_path(path) not in keep and not path.endswith("/version-hint.text")
                     and (not path.endswith(".metadata.json") or _cut_short(io, path)))
    return orphans if dry_run else _delete_files(ops, orphans)


def _cut_short(io, path: str) -> bool:
    """Whether the metadata.json at ``path`` holds no JSON document (empty, or cut off mid-write).
    A file that cannot be read now (gone, storage failing) is not judged: False, it is kept."""
    try:
        stream = io.newInputFile(path).newStream()
        try:
            data = bytes(stream.readAllBytes())
        finally:
            stream.close()
    except Exception:
        return False
    if path.endswith(".gz.metadata.json"):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError):
            return True
    try:
        json.loads(data)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError both are
        return True
    return False


def _list_prefix(jvm, io, prefix: str) -> list[tuple[str, int]]:
    """(location, created at in ms) of every file under ``prefix`` (the FileIO's
    ``SupportsPrefixOperations.listPrefix``; raises where the FileIO has none)."""
    return [(str(f.location()), int(f.createdAtMillis())) for f in java_list(io.listPrefix(prefix), jvm)]


def _call(spark, full_name: str, procedure: str, arguments: str) -> list:
    catalog, rest = full_name.split(".", 1)
    try:
        rows = spark.sql(f"CALL {catalog}.system.{procedure}(table => '{rest}', {arguments})").collect()
    except Exception as exc:
        raise OperationError(f"{procedure} of {full_name} failed: {java_line(exc)}; the table stays readable, "
                             "run the re-encryption again to finish") from None
    spark.sql(f"REFRESH TABLE {full_name}")
    return rows


def _ask(call, *args, what: str):
    try:
        return call(*args)
    except Exception as exc:
        raise OperationError(f"the KMS failed ({what}): {exception_line(exc)}") from None


def compromised_version_set(kms: KeyManagementClient, table_key_id: str, named: Iterable[tuple[str, str]],
                            table: str, keks: dict[str, bytes] | None = None) -> set[str]:
    """The compromised versions of ``table_key_id``: those named (each checked: the table's master
    key, a version the KMS holds) and those the KMS marks compromised.

        compromised_version_set(kms, "orders-key", [("orders-key", "1")], "lake.db.orders")  # {"1", ...}

    A KMS that cannot list its versions (``key_versions`` None) accepts a named version only when
    it wrapped one of ``keks`` (KEK id -> wrapped bytes). Raises OperationError, naming what is
    wrong, before anything changes."""
    versions: set[str] = set()
    known = _ask(kms.key_versions, kms_key_id(kms, table_key_id), what="key_versions")
    for key_id, version in named:
        if kms_key_id(kms, key_id) != kms_key_id(kms, table_key_id):
            raise OperationError(f"{key_id}:{version} is not a version of {table}'s master key {table_key_id!r}: "
                                 "name a version of the table's key (keys list shows it); nothing changed")
        if known is not None and version not in known:
            shown = ", ".join(sorted(known, key=_version_order)) or "none"
            raise OperationError(f"the KMS holds no version {version!r} of master key {table_key_id!r} (it holds: "
                                 f"{shown}); check the version; nothing changed")
        if known is None and not any(str(_ask(kms.key_version, wrapped, kms_key_id(kms, table_key_id), what="key_version")) == version
                                     for wrapped in (keks or {}).values()):
            raise OperationError(f"the KMS cannot list the versions of master key {table_key_id!r}, and no KEK of "
                                 f"{table} is wrapped by version {version!r}: check the version; nothing changed")
        versions.add(version)
    marked = _ask(kms.compromised_versions, kms_key_id(kms, table_key_id), what="compromised_versions")
    return versions | {str(v) for v in marked}


def table_compromised_versions(spark, table: str, kms: KeyManagementClient,
                               named: Iterable[tuple[str, str]] = ()) -> tuple[str, set[str]]:
    """(the table's master key id, :func:`compromised_version_set` for it): what a run of
    :func:`reencrypt_table` would treat as compromised, checked the same way, nothing changed.

        key_id, versions = table_compromised_versions(spark, "lake.db.orders", kms)   # "orders-key", {"1"}"""
    full_name, ops, kms = load_operations_and_kms(spark, table, kms, OperationError)
    base = ops.refresh()
    key_id = master_key_id(base, OperationError, full_name)
    keks = {k: wrapped for k, (wrapped, _props) in _keks(spark.sparkContext._jvm, base, key_id).items()}
    return key_id, compromised_version_set(kms, key_id, named, full_name, keks)


def _version_order(version: str) -> tuple[int, str]:
    return (int(version), "") if version.isdigit() else (1 << 62, version)


def _refs(base) -> dict[str, tuple[str, int]]:
    """Every ref but ``main``: name -> (``branch`` or ``tag``, snapshot id)."""
    return {str(name): ("branch" if ref.isBranch() else "tag", int(ref.snapshotId()))
            for name, ref in java_map(base.refs()).items() if name != "main"}


def _branches(base) -> list[str]:
    """The branches other than ``main`` (and the run's own tag branches), sorted."""
    return sorted(n for n, (kind, _id) in _refs(base).items() if kind == "branch" and not n.startswith(TAG_BRANCH_PREFIX))


def _ref_heads(base) -> set[int]:
    return {int(ref.snapshotId()) for ref in java_map(base.refs()).values()}


def _head_is_old(spark, ops, full_name: str, fresh, ref: str) -> bool:
    return any(_old_content(spark, ops, full_name, fresh, ref=ref).values())


def _overwrite_branch(spark, full_name: str, branch: str) -> None:
    """Replace every file of ``branch``'s head with new files holding the same rows: one overwrite
    commit on the branch, written (and its manifest list sealed) under the fresh KEK. The rows are
    read as the branch reads them (the table's current schema)."""
    from pyspark.sql.functions import lit

    try:
        rows = spark.table(f"{full_name}.branch_{branch}")
        rows.writeTo(f"{full_name}.branch_{branch}").overwrite(lit(True))
    except Exception as exc:
        raise OperationError(f"the rewrite of branch {branch!r} of {full_name} failed: {java_line(exc)}; the table "
                             "stays readable (the branch unchanged), run the re-encryption again to finish") from None
    spark.sql(f"REFRESH TABLE {full_name}")


def _tags_step(spark, jvm, ops, full_name: str, fresh, tags: str, result: ReencryptResult, say: Progress) -> None:
    """Each tag whose snapshot is old: dropped (``tags="drop"``), or re-encrypted on a branch of its
    own (``TAG_BRANCH_PREFIX`` + name, made from the tag's snapshot) and moved to that branch's head,
    its retention kept, the branch then removed. A crash leaves the branch: the next run goes on."""
    table = jvm.org.apache.iceberg.BaseTable(ops, full_name)
    base = ops.refresh()
    for name, (kind, snapshot_id) in sorted(_refs(base).items()):
        if kind != "tag":
            continue
        if not _head_is_old(spark, ops, full_name, fresh, name):
            continue
        if tags == TAGS_DROP:
            say(f"tag {name}: drop")
            _manage(spark, full_name, lambda: table.manageSnapshots().removeTag(name).commit(), f"drop of tag {name!r}")
            result.refs_dropped.append(f"tag {name}")
            continue
        say(f"tag {name}: re-encrypt its snapshot and move the tag there")
        branch = TAG_BRANCH_PREFIX + name
        if branch not in _refs(ops.refresh()):
            _manage(spark, full_name, lambda: table.manageSnapshots().createBranch(branch, snapshot_id).commit(),
                    f"branch for tag {name!r}")
        if _head_is_old(spark, ops, full_name, fresh, branch):
            _overwrite_branch(spark, full_name, branch)
        head = int(ops.refresh().ref(branch).snapshotId())
        _manage(spark, full_name, lambda: table.manageSnapshots().replaceTag(name, head).commit(), f"move of tag {name!r}")
        result.tags_rewritten.append(name)
    for name, (kind, _id) in _refs(ops.refresh()).items():  # the tag branches, this run's or a crashed one's
        if kind == "branch" and name.startswith(TAG_BRANCH_PREFIX):
            _manage(spark, full_name, lambda: table.manageSnapshots().removeBranch(name).commit(),
                    f"removal of branch {name!r}")


def _manage(spark, full_name: str, commit, what: str) -> None:
    try:
        commit()
    except Exception as exc:
        raise OperationError(f"the {what} of {full_name} failed: {java_line(exc)}; the table stays readable, run the "
                             "re-encryption again to finish") from None
    spark.sql(f"REFRESH TABLE {full_name}")


def _plan(spark, ops, full_name: str, base, refs: dict[str, tuple[str, int]], tags: str, result: ReencryptResult,
          orphans_older_than: datetime | None, remove_orphans: bool, run_started_ms: int) -> ReencryptResult:
    """The dry run: what the run would do, counted as the run counts it (every snapshot the table
    has that no ref head keeps once the old heads are replaced)."""
    jvm = spark.sparkContext._jvm
    keks = _keks(jvm, base, base.properties().get(KEY_ID))
    fresh_ids = {k for k, (_w, props) in keks.items()
                 if props.get(FRESH_KEK_PROPERTY) is not None and k not in result.compromised_keks}

    def fresh(kek_id, _wrapped, _props) -> bool:
        return kek_id in fresh_ids

    keep = set()
    if not any(_old_content(spark, ops, full_name, fresh).values()) and _current_id(base) is not None:
        keep.add(_current_id(base))
    for name, (kind, snapshot_id) in sorted(refs.items()):
        old = any(_old_content(spark, ops, full_name, fresh, ref=name).values())
        if not old:
            keep.add(snapshot_id)
        elif kind == "branch":
            result.branches_rewritten.append(name)
        elif tags == TAGS_DROP:
            result.refs_dropped.append(f"tag {name}")
            result.tag_rows_nowhere_else[name] = _rows_nowhere_else(spark, full_name, name, refs)
        else:
            result.tags_rewritten.append(name)
    result.expired_snapshots = [s for s in _snapshot_ids(base) if s not in keep]
    reachable = _reachable_files(spark, ops, full_name)
    since = _journal_since(jvm, base, base.properties().get(KEY_ID), fresh)
    result.leftovers = _leftovers(spark, ops, reachable, since, run_started_ms, dry_run=True)
    result.orphans = (_remove_orphans(spark, ops, full_name, orphans_older_than, reachable | set(result.leftovers),
                                      dry_run=True) if remove_orphans else [])
    result.metadata_location = base.metadataFileLocation()
    return result


def _rows_nowhere_else(spark, full_name: str, tag: str, refs: dict[str, tuple[str, int]]) -> int | None:
    """How many of the tag's rows no branch head holds (multiset difference; None: cannot tell,
    e.g. column types Spark cannot compare)."""
    try:
        rows = spark.read.option("versionAsOf", tag).table(full_name)
        for name in ["main", *(n for n, (kind, _id) in refs.items() if kind == "branch")]:
            rows = rows.exceptAll(spark.table(f"{full_name}.branch_{name}").select(*rows.columns))
        return int(rows.count())
    except Exception:
        return None


#: Up to this many file entries (the manifests' counts) the reachable files are read on the driver;
#: above, by one Spark query of the ``all_manifests`` and ``all_files`` metadata tables.
DRIVER_FILE_ENTRIES = 5_000


def _reachable_files(spark, ops, full_name: str) -> set[str]:
    """Every file a snapshot of the table reaches now: manifest lists, manifests, data, delete and
    statistics files (read from the manifests on the driver for a small table, else the
    ``all_manifests`` and ``all_files`` metadata tables in one query)."""
    base = ops.refresh()
    files = {str(s.manifestListLocation()) for s in java_list(base.snapshots()) if s.manifestListLocation() is not None}
    files |= {str(f.path()) for f in java_list(base.statisticsFiles())}
    files |= {str(f.path()) for f in java_list(base.partitionStatisticsFiles())}
    if not files:
        return files
    io = ops.io()
    manifests = {}
    for snapshot in java_list(base.snapshots()):
        for manifest in java_list(snapshot.allManifests(io)):
            manifests[str(manifest.path())] = manifest
    files |= set(manifests)
    entries = sum(int(m.addedFilesCount() or 0) + int(m.existingFilesCount() or 0) + int(m.deletedFilesCount() or 0)
                  for m in manifests.values())
    if entries > DRIVER_FILE_ENTRIES or any(m.addedFilesCount() is None for m in manifests.values()):
        spark.sql(f"REFRESH TABLE {full_name}")
        # all_files: the data and the delete files (deletion vectors too) of every snapshot
        query = f"SELECT path FROM {full_name}.all_manifests UNION SELECT file_path FROM {full_name}.all_files"
        return files | {str(row[0]) for row in spark.sql(query).collect()}
    jvm = spark.sparkContext._jvm
    specs = base.specsById()
    for manifest in manifests.values():
        read = (jvm.org.apache.iceberg.ManifestFiles.read(manifest, io, specs) if manifest.content().id() == 0 else
                jvm.org.apache.iceberg.ManifestFiles.readDeleteManifest(manifest, io, specs))
        try:
            files |= {str(f.location()) for f in java_list(read, jvm)}
        finally:
            read.close()
    return files


def _remove_old_metadata(jvm, ops, table_key_id: str, kms: KeyManagementClient, compromised_ids: set[str],
                         compromised_versions: set[tuple[str, str]]) -> list[str]:
    """Delete every metadata.json of the table but the current one that holds a compromised KEK
    (listed from storage where the FileIO can list, else from the metadata log)."""
    base = ops.refresh()
    current = str(base.metadataFileLocation())
    io = ops.io()
    location = str(base.location()).rstrip("/")
    try:
        candidates = [path for path, _created in _list_prefix(jvm, io, location + "/metadata/")]
    except Exception:  # a FileIO that cannot list: the metadata log
        candidates = [str(entry.file()) for entry in java_list(base.previousFiles())]
    removed = []
    for path in sorted(candidates):
        if path == current or not path.endswith(".metadata.json"):
            continue
        try:
            old = jvm.org.apache.iceberg.TableMetadataParser.read(io, path)
        except Exception:
            continue  # gone meanwhile, or not Iceberg's: the storage proof names it
        for key in java_list(old.encryptionKeys()):
            if key.encryptedById() is None or canonical_key_id(key.encryptedById()) != canonical_key_id(table_key_id):
                continue
            wrapped = bytes(jvm.org.apache.iceberg.util.ByteBuffers.toByteArray(key.encryptedKeyMetadata()))
            version = _ask(kms.key_version, wrapped, kms_key_id(kms, table_key_id), what="key_version")
            if key.keyId() in compromised_ids or (table_key_id, str(version)) in compromised_versions:
                io.deleteFile(path)
                removed.append(path)
                break
    return removed


def _delete_files(ops, paths: Iterable[str]) -> list[str]:
    """Delete each path that still exists; the ones deleted."""
    io = ops.io()
    removed = []
    for path in paths:
        try:
            if io.newInputFile(path).exists():
                io.deleteFile(path)
                removed.append(path)
        except Exception as exc:
            raise OperationError(f"cannot remove {path}: {java_line(exc)}; run the re-encryption again to "
                                 "finish") from None
    return removed
