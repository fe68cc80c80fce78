"""The table-level checks of a verification: what the metadata.json and the table's keys must
satisfy before any file is opened (each a :class:`~pyiceberg_crypto.verify.report.TableCheck`)::

    checks = catalog_checks(kind, name, uri, expected_hash)            # where the metadata.json came from
    checks += table_checks(meta, keys, digest, expected_hash, scope)  # format, key id, KEKs, snapshots, hash
    checks.append(served_metadata_check(raw, served))                 # REST: the file is what the catalog serves
    checks.append(kek_rotation_check(meta, kms, keys, kms_timeout))   # a warning, never a failure
"""

from __future__ import annotations

from collections.abc import Mapping

from pyiceberg_crypto.errors import ReadIntegrityError
from pyiceberg_crypto.io.confinement import Confinement, location_is_under
from pyiceberg_crypto.kms.base import KeyManagementClient
from pyiceberg_crypto.kms.bounded import KmsTimeoutError, call_with_timeout
from pyiceberg_crypto.config import REST
from pyiceberg_crypto.properties import KEY_ID
from pyiceberg_crypto.table.key_inventory import KEK_ROTATION_DAYS, build_inventory
from pyiceberg_crypto.table.keys import TableKeys
from pyiceberg_crypto.table.metadata import TableMetadata, fields_differing
from pyiceberg_crypto.verify.plan import Scope
from pyiceberg_crypto.verify.report import KEY_ERROR, OK, PLAINTEXT, TAMPERED, UNVERIFIABLE, WARN, TableCheck

__all__ = ["table_checks"]


def catalog_checks(kind: str, table: str, uri: str | None, expected_hash: str | None) -> list[TableCheck]:
    """Where a verification by table name took the metadata.json from (``kind``: a
    :func:`~pyiceberg_crypto.catalog.kinds.catalog_kind`): the Hive metastore (whose
    ``metadata_hash`` :func:`table_checks` then compares), or a REST catalog's ``loadTable`` (which
    keeps no hash: :func:`served_metadata_check` compares the file with what it serves)."""
    if kind == REST:
        return [TableCheck("catalog", OK, f"metadata-location of {table} read from the REST catalog at {uri}")]
    checks = [TableCheck("metastore", OK, f"metadata_location of {table} read from the metastore")]
    if expected_hash is None:
        checks.append(TableCheck("metadata-hash", UNVERIFIABLE, "the metastore records no metadata_hash for this table"))
    return checks


def served_metadata_check(raw: bytes, served: Mapping) -> TableCheck:
    """REST catalogs: the metadata.json is the table metadata the catalog serves. Every client of
    the catalog reads the served metadata, not the file; the verifier reads the file: they must be
    the same document."""
    fields = fields_differing(raw, served)
    if not fields:
        return TableCheck("catalog-metadata", OK, "metadata.json is the table metadata the REST catalog serves")
    shown = ", ".join(fields[:8]) + (f" and {len(fields) - 8} more" if len(fields) > 8 else "")
    return TableCheck("catalog-metadata", TAMPERED, f"metadata.json differs from the table metadata the REST catalog "
                      f"serves (in {shown}): modified or replaced after the catalog loaded it, or the catalog "
                      "serves other metadata than the file it names")


def table_checks(meta: TableMetadata, keys: TableKeys, digest: str, expected_hash: str | None,
                 scope: Scope | None = None) -> list[TableCheck]:
    """format-version >= 3, encryption.key-id set, KEKs wrapped by it (in ``since`` scope: the KEKs
    of the newer snapshots), one manifest list and key per snapshot, and the metastore's hash."""
    checks = []
    if expected_hash is not None:
        if digest == expected_hash:
            checks.append(TableCheck("metadata-hash", OK, "metadata.json matches the metastore's metadata_hash"))
        else:
            checks.append(TableCheck("metadata-hash", TAMPERED, "metadata.json differs from the file the metastore "
                                     "recorded (SHA-256 != metadata_hash): modified or replaced"))
    if meta.format_version >= 3:
        checks.append(TableCheck("format-version", OK, f"format-version {meta.format_version}"))
    else:
        checks.append(TableCheck("format-version", PLAINTEXT, f"format-version {meta.format_version}: "
                                 "Iceberg encrypts tables of format-version 3 and later only"))
    if meta.key_id:
        checks.append(TableCheck(KEY_ID, OK, f"master key id {meta.key_id!r}"))
    else:
        checks.append(TableCheck(KEY_ID, PLAINTEXT, "no encryption.key-id: the table is not encrypted"))
    only = None
    if scope is not None and scope.mode == "since":
        sealed = [meta.encryption_keys.get(s.key_id) for s in scope.snapshots if s.key_id]
        only = {entry.encrypted_by_id for entry in sealed if entry is not None}
    checks += kek_checks(keys, only)
    checks += snapshot_checks(meta)
    return checks


def snapshot_checks(meta: TableMetadata) -> list[TableCheck]:
    """Iceberg writes a new manifest list, with a new key, for every snapshot: two snapshots that
    share one are an edited metadata.json (e.g. the current snapshot pointed at an older state)."""
    checks = []
    for field_name, value_of in (("manifest-list", lambda s: s.manifest_list), ("key-id", lambda s: s.key_id)):
        owners: dict[str, list[int]] = {}
        for snapshot in meta.snapshots.values():
            if value_of(snapshot):
                owners.setdefault(value_of(snapshot), []).append(snapshot.snapshot_id)
        for value, ids in owners.items():
            if len(ids) > 1:
                checks.append(TableCheck("snapshot-keys", TAMPERED, f"snapshots {', '.join(map(str, sorted(ids)))} "
                                         f"share the {field_name} {value!r}: Iceberg writes one per snapshot"))
    return checks


def kek_checks(keys: TableKeys, only: set[str] | None = None) -> list[TableCheck]:
    """Each KEK (or each of ``only``) must be wrapped by the table's ``encryption.key-id`` and
    unwrap with the KMS."""
    checks = []
    for entry in keys.kek_entries():
        if only is not None and entry.key_id not in only:
            continue
        name, kek = "kek", f"KEK {entry.key_id}: "
        if keys.meta.key_id and entry.encrypted_by_id != keys.meta.key_id:
            checks.append(TableCheck(name, KEY_ERROR, kek + f"wrapped by master key {entry.encrypted_by_id!r}, "
                                                      f"not the table's encryption.key-id {keys.meta.key_id!r}"))
            continue
        try:
            keys.kek(entry.key_id)
        except ReadIntegrityError as exc:
            checks.append(TableCheck(name, exc.status, str(exc)))
            continue
        checks.append(TableCheck(name, OK, kek + f"wrapped by master key {entry.encrypted_by_id!r}, unwrapped by the KMS"))
    return checks


def kek_rotation_check(meta: TableMetadata, kms: KeyManagementClient | None, keys: TableKeys,
                       kms_timeout: float | None) -> TableCheck:
    """``kek-rotation`` (a warning, never a failure): KEKs past Iceberg's rotation age, or wrapped by
    an older master key version than the KMS's current one."""
    if kms is None or keys.kms_timed_out:
        return rotation_check(meta, None)  # ages only
    try:
        return call_with_timeout(rotation_check, meta, kms, timeout=kms_timeout,
                                 what="the KMS calls for master key versions")
    except KmsTimeoutError as exc:
        return TableCheck("kek-rotation", WARN, f"master key versions unknown: {exc}")


def rotation_check(meta: TableMetadata, kms: KeyManagementClient | None, now_ms: int | None = None) -> TableCheck:
    """The verifier's ``kek-rotation`` table check: WARN when a KEK is past Iceberg's rotation age
    or wrapped by an older master key version than the KMS's current one (re-wrap it), else OK."""
    inventory = build_inventory(meta, kms, now_ms)
    warnings = []
    for kek in inventory.keks:
        if kek.outdated:
            warnings.append(f"KEK {kek.key_id} is wrapped by version {kek.master_key_version} of master key "
                            f"{kek.master_key_id!r}, the KMS now uses {kek.current_master_key_version} "
                            "(re-wrap: pyiceberg-crypto keys rewrap)")
        if kek.rotation_due:
            warnings.append(f"KEK {kek.key_id} is {kek.age_days:.0f} days old, past Iceberg's "
                            f"{KEK_ROTATION_DAYS}-day rotation (the next commit makes a new one)")
    if warnings:
        return TableCheck("kek-rotation", WARN, "; ".join(warnings))
    known = [k for k in inventory.keks if k.master_key_version is not None]
    detail = (f"{len(inventory.keks)} KEK(s) younger than {KEK_ROTATION_DAYS} days"
              + (", wrapped by the master key's current version" if known and len(known) == len(inventory.keks)
                 else " (this KMS does not report master key versions)" if inventory.keks else ""))
    return TableCheck("kek-rotation", OK, detail)


def metadata_location_check(meta: TableMetadata, confinement: Confinement) -> TableCheck | None:
    """``metadata-location`` (a warning): the metadata.json sits outside the table location it
    describes, so every file it names is that other location's (a copied table directory keeps the
    original's absolute paths: verifying the copy would check the original's files). None when inside.
    Both sides are compared normalised (:func:`~pyiceberg_crypto.io.confinement.normalised_location`:
    a relative path, ``..``, ``file:`` or not, trailing slashes, symlinked directories), so the same
    file named another way is inside."""
    if not meta.table_location or location_is_under(meta.location, confinement.locations):
        return None
    return TableCheck("metadata-location", WARN, f"this metadata.json is outside the table location it describes "
                      f"({meta.table_location}): the files it names are that location's, not the ones beside it "
                      "(a copied table directory? Iceberg metadata holds absolute paths)")
