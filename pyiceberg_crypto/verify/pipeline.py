"""A verification, top-down, pure Python (no JVM)::

    metadata.json (:mod:`pyiceberg_crypto.table`) -> ledger/history -> scope -> keys -> table checks (:mod:`.table_checks`)
        -> plan (manifest lists, manifests: one task per file)   :mod:`.plan`
        -> runners (threads here, Spark tasks in :mod:`.spark`)   :mod:`.runners`
        -> forensics (swaps, replays)                            :mod:`._forensics`
        -> report (+ the ledger advanced when OK)                :mod:`.report`, :mod:`.ledger`

Usage::

    from pyiceberg_crypto.verify import verify_metadata
    report = verify_metadata("file:/wh/db.db/t/metadata/00007-....metadata.json", kms)
    report = verify_metadata(path, kms, all_snapshots=True)          # every snapshot still in metadata
    report = verify_metadata(path, kms, snapshot_id=4239490924)      # one snapshot
    report = verify_metadata(path, kms, since_snapshot_id=4239490924)  # only what came after it
    report = verify_metadata(path, kms, state="orders.ledger.json")  # full once, then incremental
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from pyiceberg_crypto.engines import readable_by, readers_check
from pyiceberg_crypto.errors import TableInputError
from pyiceberg_crypto.io import FileIO
from pyiceberg_crypto.io.confinement import Confinement
from pyiceberg_crypto.kms.base import KeyManagementClient
from pyiceberg_crypto.properties import CATALOG_TIMEOUT_SECONDS, DATA_KEY_LENGTH
from pyiceberg_crypto.catalog.entry import ListedTable, catalog_entry, split_catalog_name
from pyiceberg_crypto.catalog.spark import CatalogTable
from pyiceberg_crypto.table.keys import TableKeys
from pyiceberg_crypto.table.limits import Limits
from pyiceberg_crypto.table.metadata import TableMetadata, metadata_hash, read_metadata
from pyiceberg_crypto.verify._forensics import explain_statistics, identify_swaps
from pyiceberg_crypto.verify.ledger import Ledger, LedgerEntry, divergence, history_check
from pyiceberg_crypto.verify.plan import Plan, Progress, plan_verification, select_scope
from pyiceberg_crypto.verify.report import (
    DATA,
    DELETION_VECTOR,
    EQUALITY_DELETE,
    KINDS,
    OK,
    POSITION_DELETE,
    WARN,
    PARTITION_STATISTICS,
    STATISTICS,
    UNVERIFIABLE,
    FileFinding,
    TableCheck,
    TableReport,
)
from pyiceberg_crypto.verify.runners import Runner, local_runner
from pyiceberg_crypto.verify.table_checks import (
    catalog_checks,
    kek_rotation_check,
    metadata_location_check,
    served_metadata_check,
    table_checks,
)

__all__ = ["PreparedVerification", "metadata_hash", "prepare_catalog_verification", "prepare_verification",
           "read_metadata", "table_checks", "verify_catalog_table", "verify_metadata"]


def verify_metadata(
    metadata_location: str,
    kms: KeyManagementClient | None,
    *,
    snapshot_id: int | None = None,
    all_snapshots: bool = False,
    since_snapshot_id: int | None = None,
    state: str | None = None,
    accept_history: bool = False,
    table_name: str | None = None,
    expected_metadata_hash: str | None = None,
    catalog_metadata: dict | None = None,
    source_checks: list[TableCheck] | None = None,
    runner: Runner | None = None,
    progress: Progress | None = None,
    limits: Limits | None = None,
) -> TableReport:
    """Verify the table whose ``metadata.json`` is at ``metadata_location`` with ``kms``.

    Args:
        metadata_location: a ``file:`` URI, a local path or an object-store URI of a metadata.json.
        kms: a :class:`~pyiceberg_crypto.kms.KeyManagementClient` holding the table's master key.
        snapshot_id / all_snapshots: which snapshots to walk (default: the current one).
        since_snapshot_id: verify only what the table gained after this snapshot (an ancestor of
            the current one): its newer manifest lists, the manifests and files they added.
        state: a ledger file (see :mod:`pyiceberg_crypto.verify.ledger`): the first run verifies the
            current snapshot in full, every OK run records it, later runs verify only what is newer
            and report a ``history`` check that is not OK when the table went backwards or sideways.
        accept_history: with ``state``: accept such a change, verify in full, reset the ledger.
        table_name: ``catalog.db.table`` recorded in the ledger (``verify_table`` passes it).
        expected_metadata_hash: the metastore's ``metadata_hash`` (Base64 SHA-256 of the file), if known.
        catalog_metadata: the table metadata a REST catalog serves for this table (its ``loadTable``
            answer's ``metadata``): the file must be the same document (check ``catalog-metadata``).
        source_checks: checks made before (e.g. ``verify_table``'s metastore checks), listed first.
        runner: verifies data/delete/statistics files (default: a small thread pool in this process).
        limits: a :class:`~pyiceberg_crypto.table.Limits` (default ``Limits()``):
            ``allowed_locations`` (locations the table really spans besides its own ``location``,
            ``write.data.path`` and ``write.metadata.path``; any other file it names is
            ``OUTSIDE_TABLE`` and never opened, :mod:`pyiceberg_crypto.io.confinement`),
            ``file_io`` / ``properties`` (how files are read; default: chosen from the location's
            scheme), ``max_metadata_bytes`` (a larger metadata.json is refused before it is read)
            and ``kms_timeout`` (seconds to wait for one KMS call, None: no limit; a call that does
            not return in time is a KEY_ERROR and the KMS is not asked again).

    Raises:
        TableInputError: the metadata.json is missing, unreadable, not a regular file, larger
            than ``limits.max_metadata_bytes`` or not table metadata, a snapshot id is unknown, or the
            options conflict. Problems with any other file are findings, never exceptions.
        pyiceberg_crypto.verify.ledger.LedgerError: the ledger is unreadable, corrupt or another
            table's (it is never replaced then).
    """
    prepared = prepare_verification(
        metadata_location, kms, snapshot_id=snapshot_id, all_snapshots=all_snapshots,
        since_snapshot_id=since_snapshot_id, state=state, accept_history=accept_history, table_name=table_name,
        expected_metadata_hash=expected_metadata_hash, catalog_metadata=catalog_metadata,
        source_checks=source_checks, progress=progress,
        limits=limits)
    return prepared.run(runner)


@dataclass
class PreparedVerification:
    """A verification whose plan is made (metadata, keys, table checks, manifest lists and
    manifests read) and whose file tasks are still to run: :func:`verify_metadata` runs them at
    once; the catalog audit (:mod:`pyiceberg_crypto.audit`) runs the tasks of every table in one batch, then
    calls :meth:`finish` for each table."""

    report: TableReport
    plan: Plan
    meta: TableMetadata
    keys: TableKeys
    file_io: FileIO
    digest: str
    ledger: Ledger | None
    table_name: str | None
    progress: Progress | None
    started: float
    planned: float

    def run(self, runner: Runner | None = None) -> TableReport:
        """The report: :attr:`plan`'s file tasks checked by ``runner`` (default: a small thread pool
        in this process), then :meth:`finish`."""
        run_tasks = runner or local_runner(self.file_io, progress=self.progress)
        return self.finish(run_tasks(self.plan.all_tasks()))

    def finish(self, file_findings: list[FileFinding]) -> TableReport:
        """The report, from the findings of :attr:`plan`'s tasks (any order); advances the ledger when OK."""
        report, plan = self.report, self.plan
        ran = time.perf_counter()
        for finding in file_findings:
            if finding.kind in (STATISTICS, PARTITION_STATISTICS):
                explain_statistics(finding)
        findings = list(plan.findings.values()) + identify_swaps(file_findings, plan, self.meta, self.keys,
                                                                 self.file_io)
        report.timings = {"plan": round(self.planned - self.started, 4), "run": round(ran - self.planned, 4),
                          "forensics": round(time.perf_counter() - ran, 4)}
        order = {kind: i for i, kind in enumerate(KINDS)}
        report.files = sorted(findings, key=lambda f: (order.get(f.kind, len(order)), f.path))
        report.scope = {**plan.scope.to_dict(), "manifests_skipped": plan.manifests_skipped,
                        "entries_skipped": plan.entries_skipped}
        if self.ledger is not None:
            _advance(self.ledger, report, self.meta, self.digest, self.table_name)
        if self.progress:
            self.progress("done", len(report.files), len(report.files))
        return report


def prepare_verification(
    metadata_location: str,
    kms: KeyManagementClient | None,
    *,
    snapshot_id: int | None = None,
    all_snapshots: bool = False,
    since_snapshot_id: int | None = None,
    state: str | None = None,
    accept_history: bool = False,
    full: bool = False,
    table_name: str | None = None,
    expected_metadata_hash: str | None = None,
    catalog_metadata: dict | None = None,
    source_checks: list[TableCheck] | None = None,
    progress: Progress | None = None,
    limits: Limits | None = None,
) -> PreparedVerification:
    """Everything of :func:`verify_metadata` before the file tasks run (same arguments; ``limits``
    holds the file IO, properties and bounds). ``full``: every snapshot in the metadata, and with a
    ledger its history check without its cut-off (the ledger still advances when OK).

    Raises what :func:`verify_metadata` raises."""
    if state is None and accept_history:
        raise TableInputError("accept_history needs a ledger (state=PATH)")
    if state is not None and (snapshot_id is not None or all_snapshots or since_snapshot_id is not None):
        raise TableInputError("a ledger (state) chooses the snapshots itself: do not combine it with a snapshot "
                              "id, all snapshots or since")
    limits = limits or Limits()
    file_io = limits.file_io_for(metadata_location)
    raw = read_metadata(file_io, metadata_location, limits.max_metadata_bytes)
    digest = metadata_hash(raw)
    meta = TableMetadata.parse(raw, metadata_location)
    ledger = Ledger.load(state) if state is not None else None
    history = None
    if ledger is not None:
        ledger.check_identity(meta, table_name)
        history = _history(meta, digest, ledger, accept_history)
        incremental = ledger.last is not None and history.ok and not accept_history and not full
        scope = (select_scope(meta, since_snapshot_id=ledger.last.snapshot_id,
                              after_sequence_number=ledger.last.sequence_number)
                 if incremental else select_scope(meta, all_snapshots=full))
    else:
        scope = select_scope(meta, snapshot_id=snapshot_id, all_snapshots=all_snapshots or full,
                             since_snapshot_id=since_snapshot_id)

    report = TableReport(metadata_location=metadata_location, table_location=meta.table_location,
                         table_uuid=meta.table_uuid, format_version=meta.format_version, key_id=meta.key_id,
                         snapshot_ids=[s.snapshot_id for s in scope.snapshots], mode=scope.mode)
    keys = TableKeys(meta, kms, limits.kms_timeout)
    report.checks = list(source_checks or [])
    report.checks += table_checks(meta, keys, digest, expected_metadata_hash, scope)
    if catalog_metadata is not None:
        report.checks.append(served_metadata_check(raw, catalog_metadata))
    report.checks.append(kek_rotation_check(meta, kms, keys, limits.kms_timeout))
    if history is not None:
        report.checks.append(history)
    if scope.mode == "current" and not scope.snapshots and meta.snapshots:  # nothing would be checked
        report.checks.append(TableCheck("current-snapshot", UNVERIFIABLE, f"the table metadata lists "
                                        f"{len(meta.snapshots)} snapshot(s) but no current one: nothing verified "
                                        "(choose --snapshot ID or --all-snapshots)"))

    started = time.perf_counter()
    confinement = Confinement.for_table(meta.table_location, meta.properties, limits.allowed_locations)
    location_check = metadata_location_check(meta, confinement)
    if location_check is not None:
        report.checks.append(location_check)
    plan = plan_verification(meta, keys, scope, file_io, progress, confinement)
    _readers(report, meta, plan)
    return PreparedVerification(report, plan, meta, keys, file_io, digest, ledger, table_name, progress,
                                started, time.perf_counter())


def prepare_catalog_verification(
    entry: CatalogTable | ListedTable,
    kms: KeyManagementClient | None,
    *,
    table_name: str,
    catalog_uri: str | None,
    **options,
) -> PreparedVerification:
    """:func:`prepare_verification` of the metadata.json a catalog entry names, anchored by its
    catalog: the checks of where the file came from (:func:`~.table_checks.catalog_checks`), a Hive
    metastore's ``metadata_hash`` compared with the file, a REST catalog's served metadata with it.
    The one way from a catalog entry to a verification, for ``verify_table`` (Spark), the JVM-free
    ``pyiceberg-crypto verify TABLE`` and the lake audit::

        entry = catalog_entry({"uri": "thrift://hms:9083"}, "lake.db.orders")
        report = prepare_catalog_verification(entry, kms, table_name="lake.db.orders",
                                              catalog_uri="thrift://hms:9083").run()

    Args:
        entry: the table as its catalog gives it (:func:`~pyiceberg_crypto.catalog.spark.catalog_table`,
            :func:`~pyiceberg_crypto.catalog.entry.catalog_entry` or a
            :func:`~pyiceberg_crypto.catalog.entry.list_tables` row with a ``metadata_location``).
        table_name: the name the checks show and the ledger records.
        catalog_uri: the catalog's ``uri``, shown in the checks.
        options: :func:`prepare_verification`'s other keywords (``state``, ``limits``...).

    Raises what :func:`prepare_verification` raises."""
    expected_hash = entry.parameters.get("metadata_hash")
    return prepare_verification(
        entry.parameters["metadata_location"], kms, table_name=table_name, expected_metadata_hash=expected_hash,
        catalog_metadata=entry.served_metadata,
        source_checks=catalog_checks(entry.kind, table_name, catalog_uri, expected_hash), **options)


#: The kinds of manifest entries an engine must read to read a snapshot (statistics files are optional to a reader).
_CONTENT_KINDS = (DATA, POSITION_DELETE, EQUALITY_DELETE, DELETION_VECTOR)


def verify_catalog_table(properties: dict[str, str], table: str, kms, *, timeout: float = CATALOG_TIMEOUT_SECONDS,
                         catalog: str | None = None, **options):
    """Verify ``table`` (``catalog.db.table``, or ``db.table`` with ``catalog``: no catalog name is
    made up) at the metadata.json its catalog names, asking the Hive metastore or REST catalog with
    settings ``properties`` directly (no Spark)::

        report = verify_catalog_table({"uri": "thrift://hms:9083"}, "lake.db.orders", kms)
        report = verify_catalog_table({"type": "rest", "uri": "http://127.0.0.1:8181"}, "db.orders", kms,
                                      catalog="lake")

    :func:`~pyiceberg_crypto.catalog.entry.catalog_entry`, then
    :func:`prepare_catalog_verification` (Hive's
    ``metadata_hash``, REST's served metadata), the ledger recording ``catalog.db.table`` as
    ``verify_table`` does. ``options``: ``verify_metadata``'s keywords but ``runner``. Raises
    TableInputError; InvalidArgumentError for a name that is neither form."""
    catalog = split_catalog_name(table, catalog)[0]
    entry = catalog_entry(properties, table, catalog=catalog, timeout=timeout)
    prepared = prepare_catalog_verification(entry, kms, table_name=f"{catalog}.{entry.table}",
                                            catalog_uri=properties.get("uri"), **options)
    return prepared.run()


def _readers(report: TableReport, meta: TableMetadata, plan: Plan) -> None:
    """Which known engines read the current snapshot (``report.readable_by``), from the live files the
    plan listed for it: no second walk. A declared reader (``pyiceberg-crypto.readers``) that cannot
    read it, or modes that will write what it cannot read, is the WARN check ``readers``: the files
    are authentic, so the verdict stays OK, and ``verify``'s text, the audit and its gauges show it."""
    current = meta.current_snapshot
    walked = {s.snapshot_id for s in plan.scope.snapshots}
    if current is not None and current.snapshot_id not in walked:
        return  # another snapshot was asked for: no answer about the current one
    census: dict[tuple[str, str, bool], int] = {}
    partitions: dict[tuple[str, str, bool], list[str | None]] = {}
    for task in plan.tasks.values():
        if task.kind in _CONTENT_KINDS and (current is None or current.snapshot_id in task.snapshot_ids):
            key = (task.kind, task.file_format, task.key_metadata is not None)
            # A Puffin file holds one deletion vector per entry naming it: count those.
            census[key] = census.get(key, 0) + (task.entries if task.kind == DELETION_VECTOR else 1)
            partitions.setdefault(key, []).extend(task.partitions or {None})
    answers = readable_by(census, encrypted_table=bool(meta.key_id), complete=plan.scope.mode != "since",
                          data_key_length=_data_key_length(meta.properties), format_version=meta.format_version,
                          partitions=partitions)
    report.readable_by = [a.to_dict() for a in answers]
    problem = readers_check(meta.properties, answers)
    if problem is not None:
        report.checks.append(TableCheck("readers", WARN, problem[1]))


def _data_key_length(properties: Mapping[str, str]) -> int | None:
    """The table's ``encryption.data-key-length`` in bytes (None: unset, Iceberg's 16, or not a number)."""
    value = (properties or {}).get(DATA_KEY_LENGTH)
    return int(value) if value is not None and str(value).strip().isdigit() else None


def _history(meta: TableMetadata, digest: str, ledger: Ledger, accept_history: bool) -> TableCheck:
    if not accept_history:
        return history_check(meta, digest, ledger.last)
    reason = divergence(meta, digest, ledger.last) if ledger.last is not None else None
    return TableCheck("history", OK, f"accepted by the operator (--accept-history): {reason or 'no divergence found'};"
                                     " the current snapshot is verified in full and the ledger reset")


def _advance(ledger: Ledger, report: TableReport, meta: TableMetadata, digest: str, table_name: str | None) -> None:
    """Record an OK run in the ledger; a run that is not OK leaves it where it was."""
    previous = asdict(ledger.last) if ledger.last is not None else None
    report.ledger = {"path": ledger.path, "previous": previous, "advanced": False}
    if not report.ok:
        return
    current = meta.current_snapshot
    ledger.record(LedgerEntry(
        table_uuid=meta.table_uuid, table_location=meta.table_location,
        snapshot_id=current.snapshot_id if current is not None else None,
        sequence_number=(current.sequence_number or 0) if current is not None else 0,
        metadata_location=meta.location, metadata_hash=digest, verified_at=LedgerEntry.now(),
        mode=report.mode, table_name=table_name,
        files_verified=files_verified_so_far(len(report.files), report.mode, ledger.last)))
    report.ledger["advanced"] = True


def files_verified_so_far(this_run: int, mode: str, last: LedgerEntry | None) -> int | None:
    """The files verified OK up to now: this run's, plus the ledger's count when this run went on from it
    (mode ``since``); None when that count is unknown (an entry written before it was kept)::

        files_verified_so_far(3, "since", last)  # last.files_verified + 3
    """
    if mode != "since":
        return this_run
    if last is None or last.files_verified is None:
        return None
    return last.files_verified + this_run
