"""A read-only view of an Iceberg ``metadata.json``: the table model every feature starts from.

Table metadata is plaintext by design (no data, no stats); it names the snapshots, their
manifest lists, the wrapped KEKs and sealed manifest-list key metadata (``encryption-keys``),
and the statistics files::

    raw = read_metadata(file_io, location, limit=DEFAULT_MAX_METADATA_BYTES)   # bounded, regular file
    meta = TableMetadata.parse(raw, location="file:/wh/db.db/t/metadata/00003-x.metadata.json")
    meta.key_id, meta.format_version, [s.snapshot_id for s in meta.select_snapshots()]
    metadata_hash(raw)      # what Iceberg's Hive catalog stores as metadata_hash
"""

from __future__ import annotations

import base64
import errno
import hashlib
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyiceberg_crypto.errors import FileAccessError, TableInputError
from pyiceberg_crypto.io import FileIO, read_bounded
from pyiceberg_crypto.properties import KEY_ID
from pyiceberg_crypto.table.file_kinds import PARTITION_STATISTICS, STATISTICS

# :class:`pyiceberg_crypto.errors.TableInputError` is what this module raises.
__all__ = ["EncryptionKey", "Snapshot", "StatisticsFile", "TableMetadata", "load_document",
           "metadata_hash", "read_metadata"]


@dataclass(frozen=True)
class Snapshot:
    snapshot_id: int
    manifest_list: str
    key_id: str | None  # encryption-keys entry holding the sealed manifest-list key metadata
    sequence_number: int | None = None
    parent_snapshot_id: int | None = None


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
    kind: str  # file_kinds.STATISTICS | file_kinds.PARTITION_STATISTICS
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
        return self.properties.get(KEY_ID)

    @property
    def encrypted(self) -> bool:
        """Configured for encryption: format-version 3 or later and an ``encryption.key-id`` (the
        audit's rule: a table that is not is ``UNENCRYPTED``)."""
        return self.format_version >= 3 and bool(self.key_id)

    @property
    def current_snapshot(self) -> Snapshot | None:
        """The snapshot ``current-snapshot-id`` names, None for a table without one."""
        return self.snapshots.get(self.current_snapshot_id) if self.current_snapshot_id not in (None, -1) else None

    def ancestors(self, snapshot: Snapshot | None) -> list[Snapshot]:
        """``snapshot`` and its ancestors still in the metadata, newest first (stops at an expired
        parent, and at a cycle, which only an edited metadata.json can hold)."""
        chain, seen = [], set()
        while snapshot is not None and snapshot.snapshot_id not in seen:
            chain.append(snapshot)
            seen.add(snapshot.snapshot_id)
            snapshot = self.snapshots.get(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id is not None else None
        return chain

    def descends_from(self, snapshot: Snapshot | None, ancestor_id: int, ancestor_sequence_number: int) -> bool | None:
        """Does ``snapshot`` descend from snapshot ``ancestor_id``? Parent ids name expired parents
        too, so the walk proves it (True) when it meets that id, disproves it (False) when it
        reaches a snapshot at or below the ancestor's sequence number, or the root, without meeting
        it, and cannot tell (None) when the chain leaves the metadata first (expired ancestors)."""
        node, seen = snapshot, set()
        while node is not None and node.snapshot_id not in seen:
            if node.snapshot_id == ancestor_id:
                return True
            if node.sequence_number is not None and node.sequence_number <= ancestor_sequence_number:
                return False
            seen.add(node.snapshot_id)
            if node.parent_snapshot_id is None:
                return False
            if node.parent_snapshot_id == ancestor_id:
                return True
            node = self.snapshots.get(node.parent_snapshot_id)
        return None

    def select_snapshots(self, snapshot_id: int | None = None, all_snapshots: bool = False) -> list[Snapshot]:
        """The current snapshot (default), one snapshot by id, or all of them (oldest first)."""
        if snapshot_id is not None and all_snapshots:
            raise TableInputError("choose one snapshot id or all snapshots, not both")
        if all_snapshots:
            return sorted(self.snapshots.values(), key=lambda s: (s.sequence_number or 0, s.snapshot_id))
        wanted = snapshot_id if snapshot_id is not None else self.current_snapshot_id
        if snapshot_id is None and (wanted is None or wanted == -1):
            return []  # a table without data (or, with snapshots, without a current one)
        if wanted not in self.snapshots:
            known = ", ".join(str(i) for i in sorted(self.snapshots)) or "none"
            raise TableInputError(f"snapshot {wanted} is not in the table metadata (snapshots: {known})")
        return [self.snapshots[wanted]]

    @classmethod
    def parse(cls, data: bytes | str, location: str) -> TableMetadata:
        return cls.from_document(load_document(data, location), location)

    @classmethod
    def from_document(cls, doc: Any, location: str) -> TableMetadata:
        """The metadata of an already decoded metadata.json (see :func:`load_document`)."""
        if not isinstance(doc, dict) or "format-version" not in doc:
            raise TableInputError(f"{location} is not Iceberg table metadata (no format-version)")
        try:
            properties = doc.get("properties") or {}
            if not isinstance(properties, dict):
                raise TypeError("properties is not an object")
            meta = cls(
                location=location,
                table_location=_optional(doc, "location", str),
                table_uuid=_optional(doc, "table-uuid", str),
                format_version=_required(doc, "format-version", int),
                properties={str(k): str(v) for k, v in properties.items()},
                current_snapshot_id=_optional(doc, "current-snapshot-id", int),
                snapshots={s.snapshot_id: s for s in map(_snapshot, _list(doc, "snapshots"))},
                encryption_keys={k.key_id: k for k in map(_encryption_key, _list(doc, "encryption-keys"))},
                statistics=_statistics(doc),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise TableInputError(f"{location}: malformed table metadata ({type(exc).__name__}: {exc})") from None
        if meta.current_snapshot_id not in (None, -1) and meta.current_snapshot_id not in meta.snapshots:
            # Iceberg never writes this; verifying the other snapshots would report an edited table
            # whose current snapshot was removed as OK (with --all-snapshots).
            known = ", ".join(str(i) for i in sorted(meta.snapshots)) or "none"
            raise TableInputError(f"{location}: current-snapshot-id {meta.current_snapshot_id} names no snapshot of the "
                                f"table metadata (snapshots: {known})")
        return meta


def load_document(data: bytes | str, location: str) -> Any:
    """The JSON document of a metadata.json: the one parser of the package's metadata.json files
    (the verifier, the reader, the key commands, the JVM-free commits). TableInputError naming
    ``location`` when it is not JSON, or nested deeper than the parser follows (Iceberg writes a
    few dozen levels at most; Python's parser stops near its recursion limit, about 1,000),
    never a RecursionError."""
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise TableInputError(f"{location} is not JSON table metadata: {exc}") from None
    except RecursionError:
        raise TableInputError(f"{location} is not usable table metadata: its JSON is nested too deeply to parse "
                              f"(more than about {sys.getrecursionlimit()} levels; Iceberg writes a few dozen at "
                              "most)") from None


def _list(doc: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """A list of JSON objects (absent or null: empty), else TypeError naming the field."""
    value = doc.get(name) or []
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise TypeError(f"{name} is not a list of objects")
    return value


def _required(entry: dict[str, Any], name: str, kind: type):
    if entry.get(name) is None:
        raise KeyError(name)
    return _optional(entry, name, kind)


def _optional(entry: dict[str, Any], name: str, kind: type):
    """``entry[name]`` if it is a ``kind`` (bool is not an int here), None when absent or null."""
    value = entry.get(name)
    if value is not None and (not isinstance(value, kind) or (kind is int and isinstance(value, bool))):
        raise TypeError(f"{name} is {type(value).__name__}, expected {kind.__name__}")
    return value


def _snapshot(entry: dict[str, Any]) -> Snapshot:
    return Snapshot(_required(entry, "snapshot-id", int), _required(entry, "manifest-list", str),
                    _optional(entry, "key-id", str), _optional(entry, "sequence-number", int),
                    _optional(entry, "parent-snapshot-id", int))


def _encryption_key(entry: dict[str, Any]) -> EncryptionKey:
    properties = _optional(entry, "properties", dict) or {}
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in properties.items()):
        raise TypeError(f"properties of encryption key {entry.get('key-id')!r} are not strings")
    return EncryptionKey(_required(entry, "key-id", str), _required(entry, "encrypted-key-metadata", str),
                         _optional(entry, "encrypted-by-id", str), dict(properties))


def _statistics(doc: dict[str, Any]) -> list[StatisticsFile]:
    out = []
    for kind, name in ((STATISTICS, "statistics"), (PARTITION_STATISTICS, "partition-statistics")):
        for entry in _list(doc, name):
            out.append(StatisticsFile(kind, _required(entry, "statistics-path", str),
                                      _required(entry, "snapshot-id", int),
                                      _optional(entry, "file-size-in-bytes", int), _optional(entry, "key-metadata", str)))
    return out


def read_metadata(file_io: FileIO, location: str, limit: int) -> bytes:
    """The metadata.json's bytes: a regular file of at most ``limit`` bytes, read without blocking
    (TableInputError when it is missing, too large, not a regular file or unreadable)."""
    try:
        return read_bounded(file_io, location, limit)
    except FileNotFoundError:
        raise TableInputError(f"table metadata not found: {location}") from None
    except FileAccessError as exc:  # too large (EFBIG), or not a regular file (EINVAL)
        if exc.errno == errno.EFBIG:
            raise TableInputError(f"table metadata {location} is too large: {exc} ({_mib(limit)}; the limit is "
                                  "max-metadata-bytes, --max-metadata-bytes where a command takes it)") from None
        raise TableInputError(f"cannot read table metadata {location}: {exc}") from None
    except OSError as exc:
        raise TableInputError(f"cannot read table metadata {location}: {exc.strerror or exc}") from None


def _mib(size: int) -> str:
    """A byte count in MiB, for a message: ``64 MiB``."""
    return f"{size / (1 << 20):g} MiB"


def metadata_hash(raw: bytes) -> str:
    """What Iceberg's Hive catalog stores as ``metadata_hash``: Base64 of SHA-256 over the file."""
    return base64.b64encode(hashlib.sha256(raw).digest()).decode("ascii")


def fields_differing(raw: bytes, served: Mapping[str, Any]) -> list[str]:
    """The top-level fields in which the metadata.json ``raw`` differs from the table metadata a
    REST catalog serves (compared as JSON documents: a server formats them its own way); ``[]``
    when they are the same document, ``["<not a JSON object>"]`` when ``raw`` is not one."""
    try:
        on_disk = json.loads(raw)
    except (ValueError, RecursionError):  # not JSON, or nested too deeply: load_document says which
        on_disk = None
    if not isinstance(on_disk, dict):
        return ["<not a JSON object>"]
    return sorted(key for key in set(on_disk) | set(served) if on_disk.get(key) != served.get(key))
