"""Which tables still need a master key, or one version of it: the check before a version is
retired (``pyiceberg-crypto keys where-used``, ``pyiceberg-crypto keystore retire``)::

    result = where_used_in_catalog(spark, "lake", "orders-key", "1", kms)     # every table of a catalog
    result = where_used_in_listing({"uri": "thrift://hms:9083"}, "orders-key", "1", kms, catalog="lake")  # no JVM
    result = where_used_in_listing({"type": "rest", "uri": "http://127.0.0.1:8181"}, "orders-key", "1", kms,
                                   catalog="lake")
    result = where_used_in_metadata(["/wh/shop.db/orders/metadata/00042-....metadata.json"], "orders-key", "1", kms)
    result.needed        # True: some table needs it, or a table could not be checked
    for use in result.uses:
        use.table, use.kek_ids, use.snapshot_ids, use.compromised_versions
    result = where_used_in_listing({"uri": "thrift://hms:9083"}, "orders-key", None, kms, catalog="lake",
                                   compromised_only=True)

A table needs a version when one of its KEKs is wrapped by it (read from the current metadata.json;
nothing is unwrapped). Key ids are compared as the KMS's own ids
(:func:`pyiceberg_crypto.kms.key_ids.kms_key_id`), so alias and ARN forms count; a table with a KEK
whose master key the KMS does not know is *unchecked*, never "another key". With
``compromised_only``, only the tables that still depend on a version the KMS marks compromised.

What counts as needing a version, and why: docs/explanation/design.md#where-used.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from pyiceberg_crypto.errors import InvalidArgumentError, TableInputError
from pyiceberg_crypto.keys.inventory import inventory_from_metadata, key_inventory
from pyiceberg_crypto.kms.base import KeyManagementClient
from pyiceberg_crypto.kms.key_ids import kms_key_id
from pyiceberg_crypto.properties import CATALOG_TIMEOUT_SECONDS
from pyiceberg_crypto.safe_text import exception_line
from pyiceberg_crypto.catalog.entry import list_tables
from pyiceberg_crypto.catalog.hive import MetastoreError
from pyiceberg_crypto.catalog.spark import catalog_properties
from pyiceberg_crypto.table.key_inventory import KeyInventory
from pyiceberg_crypto.table.limits import Limits

__all__ = ["KeyUse", "WhereUsed", "where_used_in_catalog", "where_used_in_listing", "where_used_in_metadata"]


@dataclass
class KeyUse:
    """One table that needs the key (version): which of its KEKs, and the snapshots they seal."""

    table: str  # catalog.db.table, or the metadata.json location when no name is known
    metadata_location: str
    kek_ids: list[str]
    snapshot_ids: list[int]
    versions: list[str | None]  # the master key versions of those KEKs (None: the KMS cannot tell)
    compromised_versions: list[str | None] = field(default_factory=list)  # those the KMS marks compromised


@dataclass
class WhereUsed:
    key_id: str
    version: str | None  # None: any version of the key
    compromised_only: bool = False  # only KEKs wrapped by a version the KMS marks compromised count
    uses: list[KeyUse] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)  # tables read
    unchecked: dict[str, str] = field(default_factory=dict)  # table -> why it could not be read
    kms_key_id: str | None = None  # key_id as the KMS's own id (alias and ARN forms mapped)

    @property
    def needed(self) -> bool:
        """Some table needs the key (version), or some table could not be checked (not provably unused)."""
        return bool(self.uses or self.unchecked)

    def what(self) -> str:
        return (("compromised versions of " if self.compromised_only else "") + f"master key {self.key_id!r}"
                + (f" (the KMS's {self.kms_key_id!r})" if self.kms_key_id not in (None, self.key_id) else "")
                + (f" version {self.version}" if self.version is not None else ""))

    @property
    def compromised_tables(self) -> list[str]:
        """The tables with a KEK wrapped by a version the KMS marks compromised."""
        return [u.table for u in self.uses if u.compromised_versions]

    def to_dict(self) -> dict[str, Any]:
        return {"key_id": self.key_id, "kms_key_id": self.kms_key_id, "version": self.version, "compromised_only": self.compromised_only,
                "needed": self.needed, "compromised_tables": self.compromised_tables,
                "uses": [asdict(u) for u in self.uses], "checked": list(self.checked),
                "unchecked": dict(self.unchecked)}


def key_use(inventory: KeyInventory, table: str, key_id: str, version: str | None, *,
            compromised_only: bool = False) -> KeyUse | None:
    """The KEKs of ``inventory`` that need ``key_id`` (the KMS's own id, as in
    :attr:`KekInfo.kms_key_id <pyiceberg_crypto.table.key_inventory.KekInfo>`; at ``version``; None:
    any; with ``compromised_only``, only those wrapped by a version the KMS marks compromised), or None.
    A KEK that re-sealed snapshots written before an unfinished re-encryption matches every version of
    its key: the old material opened those snapshots, so the table still depends on it."""
    keks = [k for k in inventory.keks if (k.kms_key_id or k.master_key_id) == key_id
            and (version is None or k.master_key_version is None or k.master_key_version == version
                 or k.resealed_snapshot_ids)
            and (k.compromised or not compromised_only)]
    if not keks:
        return None
    return KeyUse(table, inventory.metadata_location, sorted(k.key_id for k in keks),
                  sorted({s for k in keks for s in k.snapshot_ids}), [k.master_key_version for k in keks],
                  sorted({k.master_key_version for k in keks if k.compromised}, key=str))


def unknown_master_keys(inventory: KeyInventory, key_id: str) -> str | None:
    """Why ``inventory``'s table is not provably free of ``key_id`` (the KMS's own id) although no
    KEK names it: KEKs whose master key the KMS does not know (it may be another name of the key);
    None when there are none.

        unknown_master_keys(inventory, "orders-key")   # "KEK(s) k1 wrapped by master key 'x' ..."
    """
    unknown = [k for k in inventory.keks if k.master_key_known is False and (k.kms_key_id or k.master_key_id) != key_id]
    if not unknown:
        return None
    masters = sorted({str(k.master_key_id) for k in unknown})
    return (f"KEK(s) {', '.join(sorted(k.key_id for k in unknown))} wrapped by master key(s) "
            f"{', '.join(repr(m) for m in masters)}, which the KMS does not know: not provably another key than "
            f"{key_id!r} (use the KMS the table was written with)")


def where_used_in_metadata(locations: list[str], key_id: str, version: str | int | None,
                           kms: KeyManagementClient | None, *, limits: Limits | None = None,
                           compromised_only: bool = False) -> WhereUsed:
    """Check the tables whose current metadata.json files are ``locations`` (no JVM)."""
    result = _where_used(key_id, version, kms, compromised_only)
    for location in locations:
        _check(result, location, lambda loc=location: inventory_from_metadata(loc, kms, limits=limits))
    return result


def where_used_in_catalog(spark, catalog: str, key_id: str, version: str | int | None,
                          kms: KeyManagementClient | None, *, tables: list[str] | None = None,
                          compromised_only: bool = False) -> WhereUsed:
    """Check every Iceberg table of ``catalog`` (or only ``tables``, ``catalog.db.table`` names),
    each at the metadata.json its metastore entry names."""
    result = _where_used(key_id, version, kms, compromised_only)
    for table in (tables if tables else iceberg_tables(spark, catalog)):
        _check(result, table, lambda name=table: key_inventory(spark, name, kms))
    return result


def where_used_in_listing(properties: dict[str, str], key_id: str, version: str | int | None,
                          kms: KeyManagementClient | None, *, catalog: str, tables: list[str] | None = None,
                          timeout: float = CATALOG_TIMEOUT_SECONDS, limits: Limits | None = None, compromised_only: bool = False,
                          namespaces: list[str] | None = None) -> WhereUsed:
    """Check every Iceberg table of the catalog with these settings (a Hive metastore's ``uri``
    ``thrift://host:port``, or ``type=rest`` and its ``uri``: :func:`~pyiceberg_crypto.catalog.entry.list_tables`),
    without Spark or a JVM; or only ``tables`` (``catalog.db.table`` or ``db.table`` names), or only
    the tables of ``namespaces``. ``catalog`` is the catalog's name (required: the listing does not
    know it): tables are named ``catalog.db.table`` in the result. Raises TableInputError when the
    catalog cannot be listed (unreachable, unknown namespace); InvalidArgumentError for an empty
    ``catalog``."""
    if not isinstance(catalog, str) or not catalog or "." in catalog:
        raise InvalidArgumentError(f"catalog must be the catalog's name (tables are named CATALOG.DB.TABLE), "
                                   f"got {catalog!r}")
    result = _where_used(key_id, version, kms, compromised_only)
    wanted = {_without_catalog(name, catalog) for name in tables} if tables else None
    if wanted:
        namespaces = sorted({name.rsplit(".", 1)[0] for name in wanted})
    try:
        listing = list_tables(properties, namespaces, timeout=timeout)
    except MetastoreError as exc:
        raise TableInputError(f"cannot list the tables of catalog {catalog!r}: {exc}") from None
    listed = set()
    for entry in listing:
        if wanted is not None and entry.table not in wanted:
            continue
        name = f"{catalog}.{entry.table}"
        listed.add(entry.table)
        why = (entry.parameters or {}).get("load_error") or (entry.parameters or {}).get("list_error")
        if why:
            result.unchecked[name] = why
        elif entry.is_iceberg and entry.parameters.get("metadata_location"):
            location = entry.parameters["metadata_location"]
            _check(result, name, lambda loc=location: inventory_from_metadata(loc, kms, limits=limits))
    for missing in sorted((wanted or set()) - listed):
        result.unchecked[f"{catalog}.{missing}"] = "the catalog does not list this table"
    return result


def _without_catalog(name: str, catalog: str) -> str:
    """``db.table`` of ``catalog.db.table`` or ``db.table``; InvalidArgumentError otherwise."""
    parts = name.split(".")
    if len(parts) == 3 and parts[0] == catalog:
        parts = parts[1:]
    if len(parts) != 2 or not all(parts):
        raise InvalidArgumentError(f"table must be {catalog}.db.table or db.table, got {name!r}")
    return ".".join(parts)


def iceberg_tables(spark, catalog: str) -> list[str]:
    """Every Iceberg table of Spark catalog ``catalog`` as ``catalog.db.table`` (sorted);
    TableInputError when the catalog is unknown or cannot list its tables."""
    try:
        listing = list_tables(catalog_properties(spark, catalog), spark=spark)
    except MetastoreError as exc:
        raise TableInputError(f"cannot list the tables of catalog {catalog!r}: {exc}") from None
    return [f"{catalog}.{entry.table}" for entry in listing if entry.is_iceberg]


def _check(result: WhereUsed, table: str, inventory) -> None:
    try:
        found = inventory()
    except TableInputError as exc:
        result.unchecked[table] = str(exc)
        return
    except Exception as exc:  # a KMS or storage failure: the table is not provably free of the key
        result.unchecked[table] = exception_line(exc)
        return
    wanted = result.kms_key_id or result.key_id
    use = key_use(found, table, wanted, result.version, compromised_only=result.compromised_only)
    if use is not None:
        result.uses.append(use)
    why = unknown_master_keys(found, wanted)
    if why is not None:  # never "another key": the table is not provably free of this one
        result.unchecked[table] = why
    else:
        result.checked.append(table)


def _version(version: str | int | None) -> str | None:
    return None if version is None else str(version)


def _where_used(key_id: str, version: str | int | None, kms: KeyManagementClient | None,
                compromised_only: bool = False) -> WhereUsed:
    """An empty result for ``key_id`` (and its id in ``kms``); InvalidArgumentError for an empty key id."""
    if not key_id:
        raise InvalidArgumentError("key_id must be a master key id (encryption.key-id), got an empty one")
    return WhereUsed(key_id, _version(version), compromised_only, kms_key_id=kms_key_id(kms, key_id))
