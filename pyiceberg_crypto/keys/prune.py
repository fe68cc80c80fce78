"""Remove the ``encryption-keys`` entries of a table that no snapshot needs any more, as one commit.

Iceberg 1.12.0's ``expire_snapshots`` leaves every entry in place (apache/iceberg#16352): the
sealed manifest-list key of each expired snapshot, and the KEKs that sealed only those, stay in
every later metadata.json (``keys list`` shows them as unused). ``prune_keys`` removes them::

    result = prune_keys(spark, "lake.db.orders")                # one Iceberg commit (or none)
    result = prune_keys(spark, "lake.db.orders", dry_run=True)  # what would go, no commit
    result = prune_keys_in_catalog({"uri": "thrift://hms:9083"}, "lake.db.orders")   # no JVM (Hive or REST)
    result.removed_keks, result.removed_entries, result.committed

Never removed: the key of any snapshot in the metadata and the KEK that seals it, the KEK Iceberg's
next commit may use (every KEK of the table's master key younger than 731 days, and the newest),
and a KEK whose ``KEY_TIMESTAMP`` cannot be read or that names no master key. No KMS call, no data
file or manifest touched. A concurrent commit makes ours re-read the table and plan again
(``max_attempts``), so a snapshot committed meanwhile keeps its keys.

What is kept and why, and what a concurrent writer does: docs/how-to/rotate-keys.md#prune-keys-no-snapshot-needs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from pyiceberg_crypto.errors import PyicebergCryptoError, TableInputError
from pyiceberg_crypto.catalog.commit import KeyChange, commit_key_change, current_metadata
from pyiceberg_crypto.keys.commit import commit_with_retries, load_operations
from pyiceberg_crypto.properties import CATALOG_TIMEOUT_SECONDS
from pyiceberg_crypto.table.key_inventory import NotEncryptedError, prunable_keys
from pyiceberg_crypto.table.metadata import TableMetadata, load_document

__all__ = ["PruneError", "PruneResult", "prune_keys", "prune_keys_in_catalog"]


class PruneError(PyicebergCryptoError):
    """The prune did not commit (table not encrypted, inconsistent metadata, too many concurrent commits)."""


@dataclass
class PruneResult:
    table: str
    dry_run: bool
    removed_keks: list[str] = field(default_factory=list)  # KEKs no snapshot needs (removed, or would be)
    removed_entries: list[str] = field(default_factory=list)  # manifest-list keys of no snapshot
    kept_keks: list[str] = field(default_factory=list)
    not_removed: list[str] = field(default_factory=list)  # planned, yet still in the committed metadata
    committed: bool = False
    attempts: int = 0
    metadata_location: str | None = None  # after the commit (or the current one)

    @property
    def removed(self) -> int:
        return len(self.removed_keks) + len(self.removed_entries)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "removed": self.removed}


def prune_keys(spark, table: str, *, dry_run: bool = False, max_attempts: int = 4) -> PruneResult:
    """Remove the ``encryption-keys`` entries of ``catalog.db.table`` that no snapshot needs.

    Args:
        dry_run: say what would be removed; no commit.
        max_attempts: commits refused by a concurrent writer are redone this many times in all.

    Raises:
        PruneError: nothing was committed (the message says why).
    """
    full_name, ops = load_operations(spark, table, PruneError)
    jvm = spark.sparkContext._jvm
    result = PruneResult(full_name, dry_run)

    def step(base):
        result.removed_keks, result.removed_entries, result.kept_keks = plan_prune(_parse(jvm, base))
        removed = {*result.removed_keks, *result.removed_entries}
        if dry_run or not removed:
            return None
        builder = jvm.org.apache.iceberg.TableMetadata.buildFrom(base)
        for key_id in removed:
            builder.removeEncryptionKey(key_id)
        return builder.build()

    result.attempts, result.committed, result.metadata_location = commit_with_retries(
        spark, ops, full_name, step, what="prune", error=PruneError, max_attempts=max_attempts)
    if result.committed:  # what the committed metadata still lists (a catalog that writes keys back)
        present = {key.keyId() for key in ops.current().encryptionKeys()}
        result.not_removed = sorted(present & {*result.removed_keks, *result.removed_entries})
    return result


def prune_keys_in_catalog(properties: dict[str, str], table: str, *, dry_run: bool = False, max_attempts: int = 4,
                          timeout: float = CATALOG_TIMEOUT_SECONDS, catalog: str | None = None) -> PruneResult:
    """:func:`prune_keys` without Spark or a JVM: the table (``catalog.db.table``, or ``db.table``
    with ``catalog``) read from and committed to the catalog with settings ``properties``
    directly (a Hive metastore's ``uri``, or ``type=rest`` and the REST catalog's settings;
    :func:`~pyiceberg_crypto.catalog.commit.commit_key_change`). Raises PruneError;
    InvalidArgumentError for a ``db.table`` without ``catalog`` (no catalog name is made up)."""
    result = PruneResult(table, dry_run)

    def step(meta, doc) -> KeyChange | None:
        _check_refs(meta, doc)
        result.removed_keks, result.removed_entries, result.kept_keks = plan_prune(meta)
        removed = [*result.removed_keks, *result.removed_entries]
        return None if dry_run or not removed else KeyChange(removed=removed)

    result.table, result.attempts, result.committed, result.metadata_location = commit_key_change(
        properties, table, step, what="prune", error=PruneError, max_attempts=max_attempts, timeout=timeout,
        catalog=catalog)
    if result.committed:  # what the committed metadata still lists (a catalog that writes keys back)
        try:
            present = set(current_metadata(properties, result.table, timeout).encryption_keys)
        except TableInputError as exc:
            raise PruneError(f"the prune of {result.table} was committed ({result.metadata_location}), but the "
                             f"table cannot be read back: {exc}") from None
        result.not_removed = sorted(present & {*result.removed_keks, *result.removed_entries})
    return result


def plan_prune(meta, now_ms: int | None = None) -> tuple[list[str], list[str], list[str]]:
    """(KEKs to remove, other entries to remove, KEKs kept) of parsed table metadata."""
    try:
        return prunable_keys(meta, now_ms)
    except NotEncryptedError as exc:
        raise PruneError(str(exc)) from None
    except TableInputError as exc:
        raise PruneError(f"{exc}, nothing pruned") from None


def _parse(jvm, base):
    """The table metadata as read, parsed like a metadata.json (refs checked: each names a snapshot)."""
    location = base.metadataFileLocation()
    try:
        doc = load_document(jvm.org.apache.iceberg.TableMetadataParser.toJson(base), location)
        meta = TableMetadata.from_document(doc, location)
    except TableInputError as exc:
        raise PruneError(f"the table metadata cannot be used: {exc}") from None
    _check_refs(meta, doc)
    return meta


def _check_refs(meta: TableMetadata, doc: dict) -> None:
    """PruneError unless every ref names a snapshot of the metadata (branches and tags keep their keys)."""
    for name, ref in (doc.get("refs") or {}).items():
        if ref.get("snapshot-id") not in meta.snapshots:
            raise PruneError(f"ref {name!r} names snapshot {ref.get('snapshot-id')}, which is not in the table "
                             "metadata: nothing pruned")

