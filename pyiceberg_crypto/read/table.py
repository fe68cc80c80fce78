"""Read an encrypted Iceberg table into Arrow, without Spark or a JVM.

    from pyiceberg_crypto.read import read_table, scan
    table = read_table("file:/wh/db.db/orders/metadata/00007-....metadata.json", kms)   # pyarrow.Table
    table = read_table("db.orders", kms, catalog="thrift://127.0.0.1:9083")             # via Hive
    table = read_table("db.orders", kms, catalog="http://127.0.0.1:8181")               # via a REST catalog
    old = read_table(location, kms, snapshot_id=4239490924)        # time travel: that snapshot's schema
    for batch in scan(location, kms, columns=["id", "amount"]):    # streaming, bounded memory
        ...

Steps: metadata.json (bounded read; with a Hive ``metastore``, its SHA-256 must equal the
metastore's ``metadata_hash``; with a REST catalog, it must be the metadata the catalog serves)
-> KEK unwrapped by the KMS -> manifest list and manifests (authenticated)
-> per data file, in parallel threads: decrypt and authenticate the column chunks needed, apply
its deletion vectors / position deletes / equality deletes, map columns to the read schema by
field id. Every byte returned was authenticated; any failure raises
:class:`~pyiceberg_crypto.read.plan.ReadIntegrityError` (a :class:`~pyiceberg_crypto.formats.errors.IntegrityError`).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone

import pyarrow as pa

from pyiceberg_crypto.errors import CatalogError, InvalidArgumentError, ReadIntegrityError, TableInputError
from pyiceberg_crypto.io import FileIO
from pyiceberg_crypto.io.confinement import Confinement
from pyiceberg_crypto.catalog.hive import table_parameters
from pyiceberg_crypto.catalog.rest import RestCatalog
from pyiceberg_crypto.kms.base import KeyManagementClient
from pyiceberg_crypto.kms.loader import load_kms
from pyiceberg_crypto.read._deletes import DeleteCaches, apply_deletes, equality_field_ids
from pyiceberg_crypto.read._files import read_data_file
from pyiceberg_crypto.read.filter import RowFilter
from pyiceberg_crypto.read.plan import ReadTask, plan_read, unpartitioned_spec_ids
from pyiceberg_crypto.read.schema import IcebergSchema, project
from pyiceberg_crypto.table.keys import TableKeys
from pyiceberg_crypto.table.limits import Limits
from pyiceberg_crypto.table.metadata import TableMetadata, fields_differing, load_document, metadata_hash, read_metadata

DEFAULT_BATCH_ROWS = 131_072
#: How far a scan reads ahead, in stored bytes of data files (decoded, a file takes a few times that).
DEFAULT_MAX_BUFFERED_BYTES = 256 * 1024 * 1024


# :class:`pyiceberg_crypto.errors.TableInputError`: the read cannot start (metadata.json missing or
# not table metadata, unknown snapshot or column, bad KMS spec, unreachable catalog). Problems with
# table files are integrity errors.
__all__ = ["DEFAULT_BATCH_ROWS", "DEFAULT_MAX_BUFFERED_BYTES", "PreparedRead", "read_table", "scan"]


def scan(
    source: str,
    kms: KeyManagementClient | str | None,
    *,
    snapshot_id: int | None = None,
    as_of: datetime | None = None,
    columns: list[str] | None = None,
    row_filter=None,
    catalog: str | RestCatalog | None = None,
    max_workers: int | None = None,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES,
    limits: Limits | None = None,
) -> pa.RecordBatchReader:
    """A streaming reader of the table's rows: files read in parallel threads, batches in file
    order. Memory is bounded by how far it reads ahead: at most ``2 * max_workers`` files whose
    stored sizes add up to ``max_buffered_bytes`` (one file at a time when a file is larger); each
    file is decoded whole, so peak memory is about the decoded size of the files ahead.

    Args:
        source: a metadata.json location (local path, ``file:``, ``s3://``), or ``db.table`` with ``catalog``.
        kms: a KeyManagementClient, or a KMS spec for :func:`pyiceberg_crypto.kms.loader.load_kms`
            (``"keystore"``, ``"module:factory"``) initialized with ``limits.properties``.
        snapshot_id: read this snapshot, with the schema it was written with (default: the current
            snapshot, with the current schema).
        as_of: read the snapshot that was current at this time (Spark's ``TIMESTAMP AS OF``: the
            table's snapshot log), with its schema; a naive datetime is taken as UTC.
        columns: top-level columns to read, by their current names (default: all); only their
            column chunks are read and decrypted.
        row_filter: rows to return, ``[(column, op, value), ...]`` ANDed (``op``: ``== != < <= > >=
            in``, ``not in``); files whose manifest column bounds rule the filter out are not read,
            nor row groups whose Parquet statistics do (:mod:`pyiceberg_crypto.read.filter`). The filter's columns need not be in ``columns``.
        catalog: the catalog that names the table: ``thrift://host:port`` of a Hive metastore, or
            ``http(s)://...`` of a REST catalog (or a :class:`~pyiceberg_crypto.catalog.rest.RestCatalog`
            built with its credentials, e.g. ``RestCatalog(uri, token=...)``).
        max_workers: reading threads (default: CPUs + 2, at most 8).
        batch_rows: rows per record batch at most.
        max_buffered_bytes: stored bytes of data files read ahead at most (default 256 MiB).
        limits: a :class:`~pyiceberg_crypto.table.Limits` (default ``Limits()``): how files are read
            (``file_io``, ``properties``), the locations the table spans besides its own
            (``allowed_locations``, confinement as the verifier's), the largest metadata.json
            (``max_metadata_bytes``) and the seconds per KMS call (``kms_timeout``).

    Raises:
        TableInputError: before any file is read (see the class).
        ReadIntegrityError: while reading, for the first file that is not authentic.
    """
    prepared = _prepare(source, kms, snapshot_id=snapshot_id, as_of=as_of, columns=columns, row_filter=row_filter,
                        catalog=catalog, limits=limits or Limits())
    workers = max_workers or min(8, (os.cpu_count() or 2) + 2)
    batches = _batches(prepared, workers, batch_rows, max_buffered_bytes)
    return pa.RecordBatchReader.from_batches(prepared.output.arrow_schema, batches)


def read_table(
    source: str,
    kms: KeyManagementClient | str | None,
    *,
    snapshot_id: int | None = None,
    as_of: datetime | None = None,
    columns: list[str] | None = None,
    row_filter=None,
    catalog: str | RestCatalog | None = None,
    max_workers: int | None = None,
    limits: Limits | None = None,
) -> pa.Table:
    """The table (or ``columns`` of it) as one ``pyarrow.Table``; the arguments are :func:`scan`'s.

    Nothing is returned unless every file read was authentic."""
    return scan(source, kms, snapshot_id=snapshot_id, as_of=as_of, columns=columns, row_filter=row_filter,
                catalog=catalog, max_workers=max_workers, limits=limits).read_all()


@dataclass(frozen=True)
class PreparedRead:
    """What a read needs once the metadata is read: the schemas, the files left after the row
    filter's pruning (and how many it skipped), the FileIO."""

    output: IcebergSchema  # the columns returned
    read: IcebergSchema  # the columns read: output + the filter's own
    tasks: list[ReadTask]
    file_io: FileIO
    row_filter: RowFilter | None = None
    skipped_files: int = 0
    row_groups: Callable[[bytes], list[int]] | None = None  # the filter's row group selector


def _prepare(source: str, kms: KeyManagementClient | str | None, *, snapshot_id, as_of, columns, catalog, limits: Limits,
             row_filter=None) -> PreparedRead:
    if snapshot_id is not None and as_of is not None:
        raise TableInputError("choose snapshot_id or as_of, not both")
    expected_hash = served = None
    location = source
    if isinstance(catalog, RestCatalog) or (catalog or "").startswith(("http://", "https://")):
        location, served = _from_rest_catalog(catalog, source)
    elif catalog is not None:
        location, expected_hash = _from_metastore(catalog, source)
    kms = _kms(kms, limits.properties)
    file_io = limits.file_io_for(location)
    raw = read_metadata(file_io, location, limits.max_metadata_bytes)
    if expected_hash is not None and metadata_hash(raw) != expected_hash:
        raise ReadIntegrityError("the metadata.json differs from the file the metastore recorded (SHA-256 != "
                                 "metadata_hash): modified or replaced", file=location, status="TAMPERED")
    differing = fields_differing(raw, served) if served is not None else []
    if differing:
        raise ReadIntegrityError("the metadata.json differs from the table metadata the REST catalog serves (in "
                                 f"{', '.join(differing[:8])}): modified or replaced", file=location, status="TAMPERED")
    try:
        doc = load_document(raw, location)  # decoded once: the metadata and the schemas both read it
        meta = TableMetadata.from_document(doc, location)
        if as_of is not None:
            snapshot_id = _snapshot_as_of(doc, as_of)
        snapshot = meta.select_snapshots(snapshot_id)[0] if snapshot_id is not None else meta.current_snapshot
        schema_id = _snapshot_schema_id(doc, snapshot_id) if snapshot_id is not None else None
        full = IcebergSchema.from_metadata(doc, schema_id)
        schema = full.select(columns)
        row_filter = RowFilter.of(row_filter)
        read_schema = schema
        if row_filter is not None:
            full.select(row_filter.columns)  # unknown filter columns: InvalidArgumentError, before any file is read
            extra = [c for c in row_filter.columns if c not in {f.name for f in schema.fields}]
            read_schema = IcebergSchema(schema.schema_id, schema.fields + full.select(extra).fields)
            row_filter = row_filter.bind({f.name: f.type for f in read_schema.fields})  # decimal literals
    except InvalidArgumentError as exc:
        raise TableInputError(str(exc)) from None
    if not meta.key_id:
        raise ReadIntegrityError("the table has no encryption.key-id: it is not encrypted (this reader reads "
                                 "encrypted tables only)", file=location, status="PLAINTEXT")
    keys = TableKeys(meta, kms, limits.kms_timeout)
    confinement = Confinement.for_table(meta.table_location, meta.properties, limits.allowed_locations)
    tasks = plan_read(snapshot, keys, file_io, confinement, unpartitioned_spec_ids(doc))
    skipped, row_groups = 0, None
    if row_filter is not None:
        fields = {f.name: (f.field_id, f.type) for f in read_schema.fields}
        kept = [t for t in tasks if row_filter.may_match(t.data.lower_bounds, t.data.upper_bounds, fields)]
        skipped, tasks = len(tasks) - len(kept), kept
        row_groups = row_filter.row_groups(fields)
    return PreparedRead(schema, read_schema, tasks, file_io, row_filter, skipped, row_groups)


def _snapshot_as_of(doc: dict, as_of: datetime) -> int:
    """The snapshot id the table's ``snapshot-log`` names as current at ``as_of``."""
    moment = as_of if as_of.tzinfo else as_of.replace(tzinfo=timezone.utc)
    millis = int(moment.timestamp() * 1000)
    log = [e for e in doc.get("snapshot-log") or [] if isinstance(e, dict)]
    earlier = [e for e in log if isinstance(e.get("timestamp-ms"), int) and e["timestamp-ms"] <= millis]
    if not earlier:
        first = min((e.get("timestamp-ms") for e in log if isinstance(e.get("timestamp-ms"), int)), default=None)
        since = f"; its first snapshot is from {datetime.fromtimestamp(first / 1000, timezone.utc).isoformat()}" if first else ""
        raise TableInputError(f"the table had no snapshot at {moment.isoformat()}{since}")
    return max(earlier, key=lambda e: e["timestamp-ms"])["snapshot-id"]


def _snapshot_schema_id(doc: dict, snapshot_id: int) -> int | None:
    for entry in doc.get("snapshots") or []:
        if isinstance(entry, dict) and entry.get("snapshot-id") == snapshot_id:
            return entry.get("schema-id")
    return None


def _kms(kms: KeyManagementClient | str | None, properties: Mapping[str, str] | None) -> KeyManagementClient | None:
    if isinstance(kms, str):
        try:
            return load_kms(kms, properties)
        except InvalidArgumentError as exc:
            raise TableInputError(str(exc)) from None
    return kms


def _from_rest_catalog(catalog: str | RestCatalog, name: str) -> tuple[str, dict]:
    namespace, _, table = name.rpartition(".")
    if not namespace:
        raise TableInputError(f"with a REST catalog, name the table as NAMESPACE.TABLE, got {name!r}")
    try:
        client = catalog if isinstance(catalog, RestCatalog) else RestCatalog(catalog)
        loaded = client.load_table(tuple(namespace.split(".")), table)  # a SQL-style name: dots part levels
    except CatalogError as exc:
        raise TableInputError(str(exc) + _catalog_prefix_hint(exc, namespace, table)) from None
    return loaded.metadata_location, loaded.metadata


def _catalog_prefix_hint(exc: CatalogError, namespace: str, table: str) -> str:
    """For a table the REST catalog does not know under a nested namespace: the hint that its first
    level may be a Spark catalog's name (``lake.shop.orders``), which the REST catalog never sees."""
    first, _, rest = namespace.partition(".")
    if exc.status != 404 or not rest:
        return ""
    return (f" (if {first!r} is the name of your Spark catalog, leave it out: the REST catalog knows the table as "
            f"{rest}.{table}, e.g. `pyiceberg-crypto head {rest}.{table} --metastore URI ...`)")


def _from_metastore(uri: str, name: str) -> tuple[str, str | None]:
    database, _, table = name.rpartition(".")
    if not database:
        raise TableInputError(f"with a metastore, name the table as DATABASE.TABLE, got {name!r}")
    try:
        params = table_parameters(uri, database.split(".")[-1], table)
    except CatalogError as exc:
        raise TableInputError(str(exc)) from None
    return params["metadata_location"], params.get("metadata_hash")


def _read_one(task: ReadTask, prepared: PreparedRead, caches: DeleteCaches) -> pa.Table:
    schema = prepared.read
    wanted = {f.field_id for f in schema.fields}
    try:
        table, row_ranges = read_data_file(task.data, prepared.file_io, schema.fields,
                                           wanted | equality_field_ids(task), prepared.row_groups)
        table = apply_deletes(task, table, prepared.file_io, caches, row_ranges)
        table = project(table, schema.fields)
    except (pa.ArrowException, InvalidArgumentError, KeyError, IndexError, TypeError, ValueError) as exc:
        # Authentic bytes that do not decode as the schema says (PyArrow's decoding, a column of
        # another type): the file is named, never a stack trace from inside PyArrow.
        raise ReadIntegrityError(f"authenticated, but not readable as this table's data file: "
                                 f"{type(exc).__name__}: {exc}", file=task.data.path, status="UNVERIFIABLE") from None
    if prepared.row_filter is None:
        return table
    try:
        table = prepared.row_filter.apply(table)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise TableInputError(f"the row filter cannot apply to this table's columns: {type(exc).__name__}: "
                             f"{exc}") from None
    return table.select([f.name for f in prepared.output.fields])


def _batches(prepared: PreparedRead, workers: int, batch_rows: int,
             max_buffered_bytes: int) -> Iterator[pa.RecordBatch]:
    """Files read by ``workers`` threads ahead of the consumer, yielded in order. Files are taken
    ahead while at most ``2 * workers`` are pending and their stored sizes stay within
    ``max_buffered_bytes`` (one file is always allowed, however large)."""
    caches = DeleteCaches()
    tasks = prepared.tasks
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pyiceberg-crypto-read") as pool:
        pending: deque = deque()  # (future, stored bytes)
        buffered, next_task = 0, 0

        def refill() -> None:
            nonlocal buffered, next_task
            while next_task < len(tasks) and len(pending) < 2 * workers:
                size = max(tasks[next_task].data.size, 0)
                if pending and buffered + size > max_buffered_bytes:
                    return
                pending.append((pool.submit(_read_one, tasks[next_task], prepared, caches), size))
                buffered += size
                next_task += 1

        try:
            refill()
            while pending:
                future, size = pending.popleft()
                table = future.result()
                buffered -= size
                refill()
                yield from table.to_batches(max_chunksize=batch_rows)
        finally:
            for future, _ in pending:  # the consumer stopped early, or a file failed: read no more
                future.cancel()
