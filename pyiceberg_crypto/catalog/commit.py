"""One change of a table's ``encryption-keys``, committed through its catalog without a JVM (the
``--metastore-uri`` / ``--rest-uri`` forms of ``keys rewrap`` and ``keys prune``)::

    attempts, committed, location = commit_key_change({"uri": "thrift://hms:9083"}, "lake.db.orders", step,
                                                      what="re-wrap", error=RewrapError, max_attempts=4)

``step(meta, doc)`` gets the table's current metadata (parsed, and its JSON document) and returns
a :class:`KeyChange`, or None for nothing to commit. The change is committed as Iceberg 1.12.0's
own clients commit, so a concurrent Spark writer never loses a commit (ours is refused and redone
on the metadata as it then is, up to ``max_attempts`` times): on REST an ``updateTable`` with
``remove-encryption-key`` / ``add-encryption-key`` updates and the table's uuid and refs as
requirements; on Hive a new metadata.json written as ``TableMetadata.buildFrom(base)`` would, then
the metastore's HIVE-26882 compare-and-swap of ``metadata_location``. An unsure outcome is
:class:`~pyiceberg_crypto.errors.CommitOutcomeUnknownError`, never success; what cannot be
committed this way is refused before anything is written.

Both paths in detail, and what is refused: docs/explanation/design.md#catalog-commit.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyiceberg_crypto.errors import CommitOutcomeUnknownError, TableInputError
from pyiceberg_crypto.io import file_io_for, local_path
from pyiceberg_crypto.catalog.hive import ConcurrentCommitError, MetastoreConnection, MetastoreError
from pyiceberg_crypto.catalog.rest import RestCatalogError
from pyiceberg_crypto.catalog.entry import split_catalog_name
from pyiceberg_crypto.catalog.kinds import catalog_kind, REST
from pyiceberg_crypto.catalog.rest import rest_catalog
from pyiceberg_crypto.properties import CATALOG_TIMEOUT_SECONDS
from pyiceberg_crypto.table.limits import Limits
from pyiceberg_crypto.table.metadata import TableMetadata, load_document, read_metadata

__all__ = ["KeyChange", "commit_key_change", "current_metadata"]

METADATA_LOCATION, PREVIOUS_METADATA_LOCATION, METADATA_HASH = (
    "metadata_location", "previous_metadata_location", "metadata_hash")
PREVIOUS_VERSIONS_MAX, PREVIOUS_VERSIONS_MAX_DEFAULT = "write.metadata.previous-versions-max", 100


@dataclass
class KeyChange:
    """What a commit changes in ``encryption-keys``: entries removed, and entries re-wrapped in place
    (key id -> the new ``encrypted-key-metadata``, base64; every other field of the entry kept)."""

    removed: list[str] = field(default_factory=list)
    rewrapped: dict[str, str] = field(default_factory=dict)


@dataclass
class _Base:
    """The table as read before a commit."""

    location: str
    raw: bytes
    doc: dict[str, Any]
    meta: TableMetadata


Step = Callable[[TableMetadata, dict], "KeyChange | None"]


def commit_key_change(properties: dict[str, str], table: str, step: Step, *, what: str, error: type[Exception],
                      max_attempts: int = 4, timeout: float = CATALOG_TIMEOUT_SECONDS,
                      catalog: str | None = None) -> tuple[str, int, bool, str]:
    """(catalog.db.table, attempts, committed, the metadata location after the commit or of the
    last table read). ``table``: ``catalog.db.table``, or ``db.table`` with ``catalog``
    (InvalidArgumentError otherwise: no catalog name is made up). ``properties``: a Hive metastore's
    ``uri`` (thrift://...), or ``type=rest`` and the REST catalog's settings. Raises ``error``
    (nothing committed, or the outcome unknown: the message says which)."""
    catalog, levels, name = split_catalog_name(table, catalog)
    full_name = f"{catalog}.{'.'.join(levels)}.{name}"
    try:
        committer = (_RestCommitter(properties, levels, name, full_name, timeout) if catalog_kind(properties) == REST
                     else _HiveCommitter(properties, levels, name, full_name, timeout))
    except (MetastoreError, RestCatalogError) as exc:
        raise error(f"cannot commit to {full_name}: {exc}") from None
    for attempt in range(1, max_attempts + 1):
        try:
            base = committer.read()
        except (TableInputError, MetastoreError, RestCatalogError) as exc:
            raise error(f"cannot read {full_name}: {exc}") from None
        change = step(base.meta, base.doc)
        if change is None or not (change.removed or change.rewrapped):
            return full_name, attempt, False, base.location
        try:
            return full_name, attempt, True, committer.commit(base, change, error, what)
        except ConcurrentCommitError:
            continue  # a concurrent commit won: read the table again and redo
    raise error(f"the {what} of {full_name} was refused {max_attempts} times by concurrent commits")


def current_metadata(properties: dict[str, str], table: str, timeout: float = CATALOG_TIMEOUT_SECONDS, *,
                     catalog: str | None = None) -> TableMetadata:
    """The table's current metadata, read from its catalog (TableInputError): ``table`` as
    ``catalog.db.table``, or ``db.table`` with ``catalog`` (InvalidArgumentError otherwise)::

        meta = current_metadata({"uri": "thrift://hms:9083"}, "lake.db.orders")
        meta = current_metadata({"type": "rest", "uri": "http://127.0.0.1:8181"}, "db.orders", catalog="lake")
    """
    catalog, levels, name = split_catalog_name(table, catalog)
    full_name = f"{catalog}.{'.'.join(levels)}.{name}"
    try:
        committer = (_RestCommitter(properties, levels, name, full_name, timeout) if catalog_kind(properties) == REST
                     else _HiveCommitter(properties, levels, name, full_name, timeout))
        return committer.read().meta
    except (MetastoreError, RestCatalogError) as exc:
        raise TableInputError(f"cannot read {full_name}: {exc}") from None


class _RestCommitter:
    def __init__(self, properties: dict[str, str], levels: tuple[str, ...], name: str, full_name: str, timeout: float):
        self.client = rest_catalog(properties, timeout=timeout)  # every call (load, commit) within ``timeout``
        self.levels, self.name, self.full_name = levels, name, full_name

    def read(self) -> _Base:
        loaded = self.client.load_table(self.levels, self.name)
        doc = loaded.metadata
        return _Base(loaded.metadata_location, b"", doc, TableMetadata.from_document(doc, loaded.metadata_location))

    def commit(self, base: _Base, change: KeyChange, error: type[Exception], what: str) -> str:
        requirements: list[dict[str, Any]] = [{"type": "assert-table-uuid", "uuid": base.doc.get("table-uuid")}]
        refs = base.doc.get("refs") or {}
        for ref, target in sorted(refs.items()):
            requirements.append({"type": "assert-ref-snapshot-id", "ref": ref, "snapshot-id": target.get("snapshot-id")})
        if not refs:  # no snapshot yet: none may appear meanwhile
            requirements.append({"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": None})
        entries = {entry.get("key-id"): entry for entry in base.doc.get("encryption-keys") or []}
        updates: list[dict[str, Any]] = [{"action": "remove-encryption-key", "key-id": key_id}
                                         for key_id in [*change.removed, *change.rewrapped]]
        for key_id, wrapped in change.rewrapped.items():
            updates.append({"action": "add-encryption-key",
                            "encryption-key": {**entries[key_id], "encrypted-key-metadata": wrapped}})
        try:
            return self.client.commit_table(self.levels, self.name, requirements, updates).metadata_location
        except CommitOutcomeUnknownError as exc:  # a 3xx, a 5xx or no answer: never success
            raise error(f"the {what} of {self.full_name}: {exc} (`pyiceberg-crypto keys list {self.full_name} "
                        "...` shows the table as it is)") from None
        except RestCatalogError as exc:
            if exc.status == 409:
                raise ConcurrentCommitError(str(exc)) from None
            raise error(f"the {what} of {self.full_name} was not committed: {exc}") from None


class _HiveCommitter:
    def __init__(self, properties: dict[str, str], levels: tuple[str, ...], name: str, full_name: str, timeout: float):
        if len(levels) != 1:
            raise MetastoreError(f"a Hive metastore has one level of databases: {full_name} is not CATALOG.DB.TABLE")
        if not properties.get("uri"):
            raise MetastoreError("committing to a Hive metastore without Spark needs its uri (thrift://host:port)")
        self.uri, self.timeout = properties["uri"], timeout
        self.database, self.name, self.full_name = levels[0], name, full_name
        self.parameters: dict[str, str] = {}

    def _connection(self, purpose: str) -> MetastoreConnection:
        return MetastoreConnection(self.uri, timeout=self.timeout, purpose=purpose)

    def read(self) -> _Base:
        with self._connection(f"read table {self.database}.{self.name}") as connection:
            params = connection.parameters(self.database, self.name)
        if params.get("table_type", "").upper() != "ICEBERG" or METADATA_LOCATION not in params:
            raise MetastoreError(f"{self.database}.{self.name} is not an Iceberg table in the Hive metastore")
        location = params[METADATA_LOCATION]
        raw = read_metadata(file_io_for(location), location, Limits().max_metadata_bytes)
        doc = load_document(raw, location)
        self.parameters = params
        return _Base(location, raw, doc, TableMetadata.from_document(doc, location))

    def commit(self, base: _Base, change: KeyChange, error: type[Exception], what: str) -> str:
        self._refuse_unsafe(base, error, what)
        new_doc = apply_key_change(base.doc, change, base.location)
        data = metadata_bytes(new_doc)
        location = new_metadata_location(base.doc, base.location)
        path = local_path(location)
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            with os.fdopen(descriptor, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
        except OSError as exc:
            raise error(f"the {what} of {self.full_name} was not committed: cannot write {location}: "
                        f"{exc.strerror or exc}") from None
        updates = {METADATA_LOCATION: location, PREVIOUS_METADATA_LOCATION: base.location,
                   METADATA_HASH: base64.b64encode(hashlib.sha256(data).digest()).decode()}
        try:
            with self._connection(f"commit to {self.database}.{self.name}") as connection:
                connection.swap_parameters(self.database, self.name, METADATA_LOCATION, base.location, updates)
        except ConcurrentCommitError:
            if self._current_location() == location:  # a retried call that had succeeded (as Iceberg checks)
                return location
            _remove(path)
            raise
        except MetastoreError as exc:
            if self._current_location() == location:
                return location
            raise error(_unknown_outcome(what, self.full_name, exc) + f"; {location} was written") from None
        return location

    def _current_location(self) -> str | None:
        try:
            with self._connection(f"read table {self.database}.{self.name}") as connection:
                return connection.parameters(self.database, self.name).get(METADATA_LOCATION)
        except MetastoreError:
            return None

    def _refuse_unsafe(self, base: _Base, error: type[Exception], what: str) -> None:
        """Refuse, before anything is written, what this commit cannot do as Iceberg would."""
        properties = base.meta.properties
        why = None
        if properties.get("engine.hive.lock-enabled", "").lower() == "true":
            why = ("the table's writers take the metastore lock (engine.hive.lock-enabled=true), which this "
                   "commit does not")
        elif properties.get("write.metadata.compression-codec", "none").lower() not in ("none", ""):
            why = "its metadata.json files are compressed"
        elif "://" in base.location and not base.location.startswith("file:"):
            why = f"{base.location} is not on the local file system"
        elif self.parameters.get(METADATA_HASH) and self.parameters[METADATA_HASH] != base64.b64encode(
                hashlib.sha256(base.raw).digest()).decode():
            why = (f"{base.location} is not the file the metastore's metadata_hash names: verify the table "
                   "(pyiceberg-crypto verify) before changing its keys")
        elif metadata_bytes(base.doc) != base.raw:
            why = (f"{base.location} is not written as Iceberg's Java writer writes it, so the metadata_hash of "
                   "a new file could not be Iceberg's")
        if why:
            raise error(f"the {what} of {self.full_name} cannot be committed without Spark: {why}; nothing was "
                        "committed (run it under spark-submit, without --metastore-uri, instead)")


def _unknown_outcome(what: str, full_name: str, exc: Exception) -> str:
    """The message of a commit whose outcome is unknown: what happened, and what to do."""
    return (f"the outcome of the {what} of {full_name} is unknown ({exc}): it may or may not have been "
            f"committed; reload the table (`pyiceberg-crypto keys list {full_name} ...`) to see whether it landed "
            "before retrying")


def apply_key_change(doc: dict[str, Any], change: KeyChange, location: str,
                     now_ms: int | None = None) -> dict[str, Any]:
    """The new metadata document: ``doc`` with ``change`` applied to its ``encryption-keys`` (a
    re-wrapped entry stays where it was), ``last-updated-ms`` now, and ``location`` (the current
    file) appended to ``metadata-log``, oldest entries dropped beyond
    ``write.metadata.previous-versions-max``. ``doc`` is not modified."""
    new = copy.deepcopy(doc)
    removed = set(change.removed)
    keys = []
    for entry in new.get("encryption-keys") or []:
        key_id = entry.get("key-id")
        if key_id in removed:
            continue
        if key_id in change.rewrapped:
            entry["encrypted-key-metadata"] = change.rewrapped[key_id]
        keys.append(entry)
    new["encryption-keys"] = keys
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    new["last-updated-ms"] = max(now_ms, int(doc.get("last-updated-ms") or 0))
    log = list(new.get("metadata-log") or [])
    log.append({"timestamp-ms": doc.get("last-updated-ms"), "metadata-file": location})
    try:
        kept = max(1, int((doc.get("properties") or {}).get(PREVIOUS_VERSIONS_MAX, PREVIOUS_VERSIONS_MAX_DEFAULT)))
    except ValueError:
        kept = PREVIOUS_VERSIONS_MAX_DEFAULT
    new["metadata-log"] = log[-kept:]
    return new


def metadata_bytes(doc: dict[str, Any]) -> bytes:
    """A metadata document as Iceberg's Java writer (Jackson, compact) writes it."""
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def new_metadata_location(doc: dict[str, Any], current: str) -> str:
    """Where Iceberg writes the next metadata.json: ``write.metadata.path`` or the table's
    ``metadata`` directory, ``<version + 1, five digits>-<uuid>.metadata.json``."""
    file_name = current.rsplit("/", 1)[-1]
    try:
        version = int(file_name.split("-", 1)[0])
    except ValueError:
        version = -1
    directory = (doc.get("properties") or {}).get("write.metadata.path")
    directory = directory.rstrip("/") if directory else f"{str(doc.get('location', '')).rstrip('/')}/metadata"
    return f"{directory}/{version + 1:05d}-{uuid.uuid4()}.metadata.json"


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass  # an orphan metadata.json: harmless, never referenced
