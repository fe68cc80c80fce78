"""The key inventory of a table: every KEK, how old it is, which master key (and version) wraps it,
which snapshots' manifest-list keys it seals, and the entries no live snapshot uses any more.

    inventory = build_inventory(meta, kms)       # meta: a parsed TableMetadata
    inventory.master_key_versions()              # {("orders-key", "1"), ("orders-key", "2")}
    inventory.to_dict()                          # what ``pyiceberg-crypto keys list --json`` prints
    prunable_keys(meta)                          # (KEKs, entries, kept KEKs): what ``keys prune`` removes

It reads only the plaintext metadata.json and asks the KMS, where it can tell, which master key
version wrapped each KEK (:meth:`~pyiceberg_crypto.kms.KeyManagementClient.key_version`: the
keystore reads its blob header, AWS KMS reports the key ARN) and which version it uses now. It
never unwraps for the caller and never holds or prints key bytes. The verifier's ``kek-rotation``
check (:mod:`pyiceberg_crypto.verify.table_checks`) and the key commands
(:mod:`pyiceberg_crypto.keys`) are built on it.
"""

from __future__ import annotations

import base64
import binascii
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

from pyiceberg_crypto._deprecated import renamed_classes
from pyiceberg_crypto.errors import TableInputError, UnknownKeyError
from pyiceberg_crypto.kms.base import KeyManagementClient
from pyiceberg_crypto.kms.key_ids import kms_key_id
from pyiceberg_crypto.properties import RESEALED_UP_TO_PROPERTY
from pyiceberg_crypto.safe_text import exception_line
from pyiceberg_crypto.table.keys import TableKeys
from pyiceberg_crypto.table.metadata import EncryptionKey, TableMetadata

__all__ = ["KekInfo", "KeyInventory", "build_inventory", "kek_entries"]

#: Old names, kept for one release (CHANGELOG.md).
__getattr__ = renamed_classes(__name__, {"NotEncryptedError": TableInputError})

#: Iceberg rotates a table's KEK when it is older than this (StandardEncryptionManager: 730 days).
KEK_ROTATION_DAYS = 730
DAY_MS = 86_400_000


@dataclass
class KekInfo:
    """One key-encryption key of a table (no key bytes)."""

    key_id: str
    master_key_id: str | None
    created: str | None  # ISO 8601 from KEY_TIMESTAMP
    age_days: float | None
    rotation_due: bool  # older than Iceberg's 730 days: Iceberg makes a new KEK at the next commit
    master_key_version: str | None = None  # as the KMS reports it (None: it cannot tell)
    current_master_key_version: str | None = None
    snapshot_ids: list[int] = field(default_factory=list)  # live snapshots whose manifest-list keys it seals
    sealed_keys: int = 0  # encryption-keys entries it seals
    note: str | None = None  # why a version is unknown (KMS error, no KMS)
    compromised: bool = False  # wrapped by a master key version the KMS marks compromised (or unknown under such a key)
    kms_key_id: str | None = None  # the KMS's own id of master_key_id (alias/ARN forms mapped: kms.key_ids)
    master_key_known: bool | None = None  # False: the KMS does not know the master key; None: it cannot tell
    resealed_snapshot_ids: list[int] = field(default_factory=list)  # written before an unfinished re-encryption

    @property
    def outdated(self) -> bool | None:
        """Wrapped by another master key version than the KMS's current one (None: unknown)."""
        if self.master_key_version is None or self.current_master_key_version is None:
            return None
        return self.master_key_version != self.current_master_key_version

    @property
    def in_use(self) -> bool:
        return bool(self.snapshot_ids)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "outdated": self.outdated, "in_use": self.in_use}


@dataclass
class KeyInventory:
    metadata_location: str
    table_location: str | None
    table_uuid: str | None
    master_key_id: str | None  # the table's encryption.key-id
    keks: list[KekInfo] = field(default_factory=list)
    kms_key_id: str | None = None  # the KMS's own id of master_key_id (alias/ARN forms mapped: kms.key_ids)
    unused_entries: list[str] = field(default_factory=list)  # sealed manifest-list keys of no live snapshot

    def master_key_versions(self) -> set[tuple[str | None, str | None]]:
        """(master key id, version) pairs the table still needs."""
        return {(k.master_key_id, k.master_key_version) for k in self.keks}

    def compromised_keks(self) -> list[KekInfo]:
        """The KEKs wrapped by a master key version the KMS marks compromised: the table still
        depends on leaked material until ``keys reencrypt`` replaces them."""
        return [k for k in self.keks if k.compromised]

    def to_dict(self) -> dict[str, Any]:
        return {"metadata_location": self.metadata_location, "table_location": self.table_location,
                "table_uuid": self.table_uuid, "master_key_id": self.master_key_id,
                "rotation_days": KEK_ROTATION_DAYS, "keks": [k.to_dict() for k in self.keks],
                "unused_entries": list(self.unused_entries)}


def kek_entries(meta: TableMetadata) -> list[EncryptionKey]:
    """Entries wrapped by the KMS (not sealed by another entry of the table), as the verifier sees them."""
    return TableKeys(meta, None).kek_entries()


def build_inventory(meta: TableMetadata, kms: KeyManagementClient | None = None, now_ms: int | None = None) -> KeyInventory:
    """The inventory of parsed table metadata (``kms`` optional: without it, no versions).

    Master key ids are also given as the KMS's own ids (``kms_key_id``:
    :func:`pyiceberg_crypto.kms.key_ids.kms_key_id`, so ``alias/orders-key`` and ``orders-key`` are
    one key for the keystore KMS), and those are what the KMS is asked about. A KEK whose master key
    the KMS says it does not know has ``master_key_known=False``."""
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    inventory = KeyInventory(meta.location, meta.table_location, meta.table_uuid, meta.key_id,
                             kms_key_id=_kms_id(kms, meta.key_id))
    keks = kek_entries(meta)
    kek_ids = {k.key_id for k in keks}
    live = {s.key_id: s.snapshot_id for s in meta.snapshots.values() if s.key_id}
    current_versions: dict[str, str | None] = {}
    compromised: dict[str, frozenset[str]] = {}
    for entry in keks:
        info = KekInfo(entry.key_id, entry.encrypted_by_id, *_age(entry.timestamp, now_ms))
        info.kms_key_id = _kms_id(kms, entry.encrypted_by_id)
        sealed = [e for e in meta.encryption_keys.values() if e.encrypted_by_id == entry.key_id]
        info.sealed_keys = len(sealed)
        info.snapshot_ids = sorted(live[e.key_id] for e in sealed if e.key_id in live)
        _versions(info, entry, kms, current_versions)
        _compromised(info, kms, compromised)
        info.resealed_snapshot_ids = _resealed(meta, entry, sealed)
        if info.resealed_snapshot_ids:  # the leaked material opened them before they were re-sealed
            info.compromised = True
            info.note = (f"re-encryption unfinished: {len(info.resealed_snapshot_ids)} live snapshot(s) written "
                         "before it (run keys reencrypt again)")
        inventory.keks.append(info)
    inventory.unused_entries = sorted(e.key_id for e in meta.encryption_keys.values()
                                      if e.key_id not in kek_ids and e.key_id not in live)
    return inventory


def _kms_id(kms: KeyManagementClient | None, key_id: str | None) -> str | None:
    """The KMS's own id of ``key_id`` (None for none); a KMS whose mapping fails keeps it as written."""
    if not key_id:
        return None
    try:
        return kms_key_id(kms, key_id)
    except Exception:  # a KMS's own canonical_key_id failing: compare the id as written
        return key_id


def _age(timestamp: str | None, now_ms: int) -> tuple[str | None, float | None, bool]:
    try:
        created_ms = int(timestamp) if timestamp is not None else None
    except ValueError:
        created_ms = None
    if created_ms is None:
        return None, None, False
    age = (now_ms - created_ms) / DAY_MS
    created = datetime.fromtimestamp(created_ms / 1000, timezone.utc).isoformat(timespec="seconds")
    return created, round(age, 2), age >= KEK_ROTATION_DAYS


def _versions(info: KekInfo, entry: EncryptionKey, kms: KeyManagementClient | None, current: dict[str, str | None]) -> None:
    if kms is None or not entry.encrypted_by_id:
        info.note = "no KMS given: master key versions unknown" if kms is None else None
        return
    try:
        wrapped = base64.b64decode(entry.encrypted_key_metadata, validate=True)
    except (binascii.Error, ValueError):
        info.note = "the wrapped KEK is not valid base64"
        return
    master = info.kms_key_id or entry.encrypted_by_id
    try:
        info.master_key_version = kms.key_version(wrapped, master)
        if master not in current:
            current[master] = kms.current_key_version(master)
        info.current_master_key_version = current[master]
        info.master_key_known = True if info.current_master_key_version is not None else None
    except UnknownKeyError as exc:  # never "another key": the checks count it as unchecked
        info.master_key_known = False
        info.note = f"the KMS does not know master key {entry.encrypted_by_id!r}: {exception_line(exc)}"
    except Exception as exc:  # a KMS that cannot tell: the inventory still lists the KEK
        info.note = f"the KMS could not tell the master key version: {exception_line(exc)}"
    if info.master_key_version is None and info.note is None:
        info.note = "this KMS does not report master key versions"


def _resealed(meta: TableMetadata, kek: EncryptionKey, sealed: list[EncryptionKey]) -> list[int]:
    """The live snapshots ``kek`` re-sealed that were written before a re-encryption (sequence number
    at or below its ``RESEALED_UP_TO_SEQUENCE``; an unreadable mark counts every one)."""
    mark = (kek.properties or {}).get(RESEALED_UP_TO_PROPERTY)
    if mark is None:
        return []
    try:
        cut_off = int(mark)
    except ValueError:
        cut_off = None
    keys = {e.key_id for e in sealed}
    return sorted(s.snapshot_id for s in meta.snapshots.values() if s.key_id in keys and
                  (cut_off is None or s.sequence_number is None or s.sequence_number <= cut_off))


def compromised_versions(kms: KeyManagementClient | None, master_key_id: str) -> frozenset[str]:
    """What the KMS marks compromised for ``master_key_id`` (asked as the KMS's own id,
    :func:`~pyiceberg_crypto.kms.key_ids.kms_key_id`; none without a KMS, or from a KMS object that
    predates :meth:`~pyiceberg_crypto.kms.KeyManagementClient.compromised_versions`)."""
    return _flagged(kms, _kms_id(kms, master_key_id))


def _flagged(kms: KeyManagementClient | None, kms_id: str | None) -> frozenset[str]:
    ask = getattr(kms, "compromised_versions", None)
    return frozenset(str(v) for v in ask(kms_id)) if ask is not None and kms_id else frozenset()


def _compromised(info: KekInfo, kms: KeyManagementClient | None, known: dict[str, frozenset[str]]) -> None:
    """Mark ``info`` compromised when its master key version is flagged, or unknown under a key with
    flagged versions (not provably clean)."""
    if kms is None or not info.master_key_id:
        return
    master = info.kms_key_id or info.master_key_id
    if master not in known:
        try:
            known[master] = _flagged(kms, master)
        except Exception as exc:  # a KMS that cannot tell: nothing flagged, the note says why
            known[master] = frozenset()
            info.note = f"the KMS could not tell its compromised versions: {exception_line(exc)}"
    flagged = known[master]
    info.compromised = bool(flagged) and (info.master_key_version is None or info.master_key_version in flagged)


def prunable_keys(meta: TableMetadata, now_ms: int | None = None) -> tuple[list[str], list[str], list[str]]:
    """(KEKs no snapshot needs, other entries no snapshot needs, KEKs kept) of parsed table metadata:
    what ``pyiceberg-crypto keys prune`` removes (:mod:`pyiceberg_crypto.keys.prune` says what is
    always kept and why). No KMS call. TableInputError: not encrypted, or a snapshot names a key
    the metadata does not hold."""
    if not meta.key_id:
        raise TableInputError("the table has no encryption.key-id: it is not encrypted")
    for snapshot in meta.snapshots.values():
        if snapshot.key_id and snapshot.key_id not in meta.encryption_keys:
            raise TableInputError(f"snapshot {snapshot.snapshot_id} names key-id {snapshot.key_id!r}, which is not "
                                  "in the table's encryption-keys: the metadata is inconsistent")
    inventory = build_inventory(meta, None, now_ms)  # no KMS: ids compared as the face maps them (keeps more)
    own = [k for k in inventory.keks if k.kms_key_id == inventory.kms_key_id]
    current = {k.key_id for k in own if k.age_days is None or k.age_days < KEK_ROTATION_DAYS + 1}
    if own:
        current.add(min(own, key=lambda k: k.age_days if k.age_days is not None else float("-inf")).key_id)
    removed = [k.key_id for k in inventory.keks if not k.in_use and k.master_key_id and k.key_id not in current]
    kept = [k.key_id for k in inventory.keks if k.key_id not in removed]
    return removed, list(inventory.unused_entries), kept
