"""A read-only view of an Iceberg ``metadata.json``: the parts the verifier needs.

Table metadata is plaintext by design (no data, no stats); it names the snapshots, their
manifest lists, the wrapped KEKs and sealed manifest-list key metadata (``encryption-keys``),
and the statistics files::

    meta = TableMetadata.parse(json_bytes, location="file:/wh/db.db/t/metadata/00003-x.metadata.json")
    meta.key_id, meta.format_version, [s.snapshot_id for s in meta.select_snapshots()]
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


class MetadataError(ValueError):
    """The metadata.json cannot be used: not JSON, missing fields, unknown snapshot."""


@dataclass(frozen=True)
class Snapshot:
    snapshot_id: int
    manifest_list: str
    key_id: str | None  # encryption-keys entry holding the sealed manifest-list key metadata
    sequence_number: int | None = None


@dataclass(frozen=True)
class EncryptionKey:
    """One ``encryption-keys`` entry: a KEK wrapped by the KMS, or key metadata sealed by a KEK."""

    key_id: str
    encrypted_key_metadata: str  # base64
    encrypted_by_id: str | None
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def timestamp(self) -> str | None:
        """``KEY_TIMESTAMP``: set on KEKs, authenticated as the AAD of what they seal."""
        return self.properties.get("KEY_TIMESTAMP")


@dataclass(frozen=True)
class StatisticsFile:
    kind: str  # report.STATISTICS | report.PARTITION_STATISTICS
    path: str
    snapshot_id: int
    size: int | None
    key_metadata: str | None  # base64, when the writer recorded one


@dataclass
class TableMetadata:
    location: str  # where this metadata.json was read from
    table_location: str | None
    table_uuid: str | None
    format_version: int
    properties: dict[str, str]
    current_snapshot_id: int | None
    snapshots: dict[int, Snapshot]
    encryption_keys: dict[str, EncryptionKey]
    statistics: list[StatisticsFile]

    @property
    def key_id(self) -> str | None:
        """The table's master key id (``encryption.key-id``), None for an unencrypted table."""
        return self.properties.get("encryption.key-id")

    def select_snapshots(self, snapshot_id: int | None = None, all_snapshots: bool = False) -> list[Snapshot]:
        """The current snapshot (default), one snapshot by id, or all of them (oldest first)."""
        if snapshot_id is not None and all_snapshots:
            raise MetadataError("choose one snapshot id or all snapshots, not both")
        if all_snapshots:
            return sorted(self.snapshots.values(), key=lambda s: (s.sequence_number or 0, s.snapshot_id))
        wanted = snapshot_id if snapshot_id is not None else self.current_snapshot_id
        if wanted is None or wanted == -1:
            return []  # a table without data
        if wanted not in self.snapshots:
            known = ", ".join(str(i) for i in sorted(self.snapshots)) or "none"
            raise MetadataError(f"snapshot {wanted} is not in the table metadata (snapshots: {known})")
        return [self.snapshots[wanted]]

    @classmethod
    def parse(cls, data: bytes | str, location: str) -> TableMetadata:
        try:
            doc = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise MetadataError(f"{location} is not JSON table metadata: {exc}") from None
        if not isinstance(doc, dict) or "format-version" not in doc:
            raise MetadataError(f"{location} is not Iceberg table metadata (no format-version)")
        try:
            return cls(
                location=location,
                table_location=doc.get("location"),
                table_uuid=doc.get("table-uuid"),
                format_version=int(doc["format-version"]),
                properties={str(k): str(v) for k, v in (doc.get("properties") or {}).items()},
                current_snapshot_id=doc.get("current-snapshot-id"),
                snapshots={s["snapshot-id"]: _snapshot(s) for s in doc.get("snapshots") or []},
                encryption_keys={k["key-id"]: _encryption_key(k) for k in doc.get("encryption-keys") or []},
                statistics=_statistics(doc),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise MetadataError(f"{location}: malformed table metadata ({type(exc).__name__}: {exc})") from None


def _snapshot(entry: dict[str, Any]) -> Snapshot:
    return Snapshot(int(entry["snapshot-id"]), entry["manifest-list"], entry.get("key-id"),
                    entry.get("sequence-number"))


def _encryption_key(entry: dict[str, Any]) -> EncryptionKey:
    return EncryptionKey(entry["key-id"], entry["encrypted-key-metadata"], entry.get("encrypted-by-id"),
                         dict(entry.get("properties") or {}))


def _statistics(doc: dict[str, Any]) -> list[StatisticsFile]:
    from pyiceberg_crypto.verify.report import PARTITION_STATISTICS, STATISTICS

    out = []
    for kind, name in ((STATISTICS, "statistics"), (PARTITION_STATISTICS, "partition-statistics")):
        for entry in doc.get(name) or []:
            out.append(StatisticsFile(kind, entry["statistics-path"], int(entry["snapshot-id"]),
                                      entry.get("file-size-in-bytes"), entry.get("key-metadata")))
    return out
