"""From the master key to each snapshot's manifest-list key: the top of the envelope.

    master key (KMS) --wraps--> KEK (encryption-keys, KEY_TIMESTAMP)
    KEK --seals (AES-GCM, AAD = KEY_TIMESTAMP)--> manifest list key metadata (encryption-keys)
    snapshot.key-id names the sealed entry; its encrypted-by-id names the KEK.

Usage::

    keys = TableKeys(meta, kms)
    list_key = keys.manifest_list_key(snapshot)      # StandardKeyMetadata, or raises ReadIntegrityError
    keys.kek(kek_id)                                 # an unwrapped KEK (bytes), or raises ReadIntegrityError

KEKs are unwrapped once each (the KMS sees one call per KEK), each call bounded by ``kms_timeout``
seconds; after a call that timed out, the KMS is not asked again (every further KEK is a KEY_ERROR
naming the timeout), so a hanging KMS costs one timeout per run. Key bytes stay in this object;
the errors it raises name key ids and the KMS's one-line ``Type: message`` only.
"""

from __future__ import annotations

import base64
import binascii

from pyiceberg_crypto._deprecated import renamed_classes
from pyiceberg_crypto.errors import IntegrityError, ReadIntegrityError
from pyiceberg_crypto.formats.key_metadata import StandardKeyMetadata
from pyiceberg_crypto.formats.manifest_list_key import decrypt_manifest_list_key_metadata
from pyiceberg_crypto.kms.base import KeyManagementClient
from pyiceberg_crypto.kms.bounded import DEFAULT_KMS_TIMEOUT_SECONDS, KmsTimeoutError, call_with_timeout
from pyiceberg_crypto.properties import AES_KEY_LENGTHS
from pyiceberg_crypto.safe_text import exception_line
from pyiceberg_crypto.table.metadata import EncryptionKey, Snapshot, TableMetadata
from pyiceberg_crypto.table.statuses import KEY_ERROR, TAMPERED

__all__ = ["TableKeys"]

#: Old names, kept for one release (CHANGELOG.md): a key the walk cannot have is a ReadIntegrityError
#: (``status`` KEY_ERROR, or TAMPERED).
__getattr__ = renamed_classes(__name__, {"KeyLookupError": ReadIntegrityError})


def _lookup_error(message: str, status: str = KEY_ERROR) -> ReadIntegrityError:
    """A key needed for the walk cannot be obtained; ``status`` is the report status to use."""
    return ReadIntegrityError(message, status=status)


class TableKeys:
    """The keys of one table's envelope, unwrapped on demand with ``kms`` (see the module docstring)."""

    def __init__(self, meta: TableMetadata, kms: KeyManagementClient | None, kms_timeout: float | None = DEFAULT_KMS_TIMEOUT_SECONDS):
        self.meta = meta
        self.kms = kms
        self.kms_timeout = kms_timeout  # seconds per KMS call; None: no limit
        self._keks: dict[str, bytes | ReadIntegrityError] = {}
        self._kms_timed_out: str | None = None  # the first timeout's message: the KMS is not asked again

    @property
    def kms_timed_out(self) -> bool:
        """A KMS call of this run timed out: the KMS is not asked again."""
        return self._kms_timed_out is not None

    def kek_entries(self) -> list[EncryptionKey]:
        """Entries wrapped by the KMS: not sealed by another entry of the table, or named as the
        sealer of a snapshot's key (whatever their own ``encrypted-by-id`` says)."""
        entries = self.meta.encryption_keys
        sealers = {entries[s.key_id].encrypted_by_id for s in self.meta.snapshots.values() if s.key_id in entries}
        return [e for e in entries.values() if e.encrypted_by_id not in entries or e.key_id in sealers]

    def kek(self, kek_id: str) -> bytes:
        """The unwrapped KEK ``kek_id`` (cached), or ReadIntegrityError."""
        if kek_id not in self._keks:
            self._keks[kek_id] = self._unwrap(kek_id)
        result = self._keks[kek_id]
        if isinstance(result, ReadIntegrityError):
            raise result
        return result

    def _unwrap(self, kek_id: str) -> bytes | ReadIntegrityError:
        entry = self.meta.encryption_keys.get(kek_id)
        if entry is None:
            return _lookup_error(f"KEK {kek_id!r} is not in the table's encryption-keys")
        master = entry.encrypted_by_id
        if not master:
            return _lookup_error(f"KEK {kek_id!r} names no master key (encrypted-by-id)")
        if self.kms is None:
            return _lookup_error(f"no KMS given to unwrap KEK {kek_id!r} (master key {master!r})")
        try:
            wrapped = base64.b64decode(entry.encrypted_key_metadata, validate=True)
        except (binascii.Error, ValueError):
            return _lookup_error(f"KEK {kek_id!r} is not valid base64", TAMPERED)
        if self._kms_timed_out is not None:
            return _lookup_error(f"KEK {kek_id!r} not unwrapped: an earlier KMS call timed out "
                                 f"({self._kms_timed_out})")
        try:
            key = call_with_timeout(self.kms.unwrap_key, wrapped, master, timeout=self.kms_timeout,
                                    what="the KMS call unwrap_key")
        except KmsTimeoutError as exc:
            self._kms_timed_out = str(exc)
            return _lookup_error(f"the KMS did not unwrap KEK {kek_id!r} with master key {master!r}: {exc}")
        except Exception as exc:  # any KMS refusal: the message names the key id, never bytes
            return _lookup_error(f"the KMS refused to unwrap KEK {kek_id!r} with master key {master!r}: "
                                 f"{exception_line(exc)}")
        if not isinstance(key, (bytes, bytearray)) or len(key) not in AES_KEY_LENGTHS:
            return _lookup_error(f"the KMS returned no valid AES key for KEK {kek_id!r}")
        return bytes(key)

    def manifest_list_key(self, snapshot: Snapshot) -> StandardKeyMetadata:
        """Open the sealed key metadata of ``snapshot``'s manifest list with its KEK."""
        if not snapshot.key_id:
            raise _lookup_error(f"snapshot {snapshot.snapshot_id} has no key-id: its manifest list is not encrypted")
        sealed = self.meta.encryption_keys.get(snapshot.key_id)
        if sealed is None:
            raise _lookup_error(f"snapshot {snapshot.snapshot_id} names key {snapshot.key_id!r}, "
                                "which is not in encryption-keys")
        kek_id = sealed.encrypted_by_id or ""
        kek_entry = self.meta.encryption_keys.get(kek_id)
        if kek_entry is None:
            raise _lookup_error(f"manifest list key {snapshot.key_id!r} is sealed by {kek_id!r}, not a KEK of the table")
        if kek_entry.timestamp is None:
            raise _lookup_error(f"KEK {kek_id!r} has no KEY_TIMESTAMP", TAMPERED)
        kek = self.kek(kek_id)
        try:
            envelope = base64.b64decode(sealed.encrypted_key_metadata, validate=True)
            plain = decrypt_manifest_list_key_metadata(kek, envelope, kek_entry.timestamp,
                                                       file=f"encryption-keys[{snapshot.key_id}]")
            return StandardKeyMetadata.parse(plain)
        except (binascii.Error, ValueError, IntegrityError) as exc:
            raise _lookup_error(f"manifest list key metadata {snapshot.key_id!r} does not open with KEK "
                                f"{kek_id!r}: {exc}", TAMPERED) from None
