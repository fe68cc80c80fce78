"""A verification, top-down, pure Python (no JVM)::

    metadata.json -> ledger/history -> scope -> keys -> table checks
        -> plan (manifest lists, manifests: one task per file)   :mod:`.plan`
        -> run (threads here, Spark tasks in :mod:`.spark_job`)  :mod:`.run`
        -> forensics (swaps, replays)                            :mod:`.forensics`
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

import base64
import hashlib
import time
from dataclasses import asdict

from pyiceberg_crypto.io import DEFAULT_MAX_METADATA_BYTES, FileIO, FileTooLargeError, NotRegularFileError, file_io_for, read_bounded
from pyiceberg_crypto.io.confinement import Confinement
from pyiceberg_crypto.kms.bounded import DEFAULT_KMS_TIMEOUT_SECONDS
from pyiceberg_crypto.verify.forensics import explain_statistics, identify_swaps
from pyiceberg_crypto.verify.keys import TableKeys
from pyiceberg_crypto.verify.ledger import Ledger, LedgerEntry, divergence, history_check
from pyiceberg_crypto.verify.metadata import MetadataError, TableMetadata
from pyiceberg_crypto.verify.plan import Progress, Scope, plan_verification, select_scope
from pyiceberg_crypto.verify.report import (
    KINDS,
    OK,
    PLAINTEXT,
    STATISTICS,
    PARTITION_STATISTICS,
    TAMPERED,
    UNVERIFIABLE,
    WARN,
    TableCheck,
    TableReport,
)
from pyiceberg_crypto.verify.run import Runner, local_runner


class VerifyInputError(Exception):
    """The table metadata cannot be read or used at all (usage error / unreadable input)."""


def verify_metadata(
    metadata_location: str,
    kms,
    *,
    snapshot_id: int | None = None,
    all_snapshots: bool = False,
    since_snapshot_id: int | None = None,
    state: str | None = None,
    accept_history: bool = False,
    table_name: str | None = None,
    allowed_locations: list[str] | tuple[str, ...] = (),
    file_io: FileIO | None = None,
    properties: dict[str, str] | None = None,
    expected_metadata_hash: str | None = None,
    source_checks: list[TableCheck] | None = None,
    runner: Runner | None = None,
    progress: Progress | None = None,
    max_metadata_bytes: int = DEFAULT_MAX_METADATA_BYTES,
    kms_timeout: float | None = DEFAULT_KMS_TIMEOUT_SECONDS,
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
        allowed_locations: locations the table really spans besides its own ``location``,
            ``write.data.path`` and ``write.metadata.path``; any other file it names is
            ``OUTSIDE_TABLE`` and never opened (:mod:`pyiceberg_crypto.io.confinement`).
        file_io: how to read files (default: chosen from the location's scheme and ``properties``).
        expected_metadata_hash: the metastore's ``metadata_hash`` (Base64 SHA-256 of the file), if known.
        source_checks: checks made before (e.g. ``verify_table``'s metastore checks), listed first.
        runner: verifies data/delete/statistics files (default: a small thread pool in this process).
        max_metadata_bytes: a larger metadata.json is refused before it is read.
        kms_timeout: seconds to wait for one KMS call (None: no limit); a call that does not
            return in time is a KEY_ERROR and the KMS is not asked again.

    Raises:
        VerifyInputError: the metadata.json is missing, unreadable, not a regular file, larger
            than ``max_metadata_bytes`` or not table metadata, a snapshot id is unknown, or the
            options conflict. Problems with any other file are findings, never exceptions.
        pyiceberg_crypto.verify.ledger.LedgerError: the ledger is unreadable, corrupt or another
            table's (it is never replaced then).
    """
    if state is None and accept_history:
        raise VerifyInputError("accept_history needs a ledger (state=PATH)")
    if state is not None and (snapshot_id is not None or all_snapshots or since_snapshot_id is not None):
        raise VerifyInputError("a ledger (state) chooses the snapshots itself: do not combine it with a snapshot "
                               "id, all snapshots or since")
    file_io = file_io or file_io_for(metadata_location, properties)
    raw = read_metadata(file_io, metadata_location, max_metadata_bytes)
    digest = metadata_hash(raw)
    try:
        meta = TableMetadata.parse(raw, metadata_location)
    except MetadataError as exc:
        raise VerifyInputError(str(exc)) from None
    ledger = Ledger.load(state) if state is not None else None
    history = None
    try:
        if ledger is not None:
            ledger.check_identity(meta, table_name)
            history = _history(meta, digest, ledger, accept_history)
            incremental = ledger.last is not None and history.ok and not accept_history
            scope = (select_scope(meta, since_snapshot_id=ledger.last.snapshot_id,
                                  after_sequence_number=ledger.last.sequence_number)
                     if incremental else select_scope(meta))
        else:
            scope = select_scope(meta, snapshot_id=snapshot_id, all_snapshots=all_snapshots,
                                 since_snapshot_id=since_snapshot_id)
    except MetadataError as exc:
        raise VerifyInputError(str(exc)) from None

    report = TableReport(metadata_location=metadata_location, table_location=meta.table_location,
                         table_uuid=meta.table_uuid, format_version=meta.format_version, key_id=meta.key_id,
                         snapshot_ids=[s.snapshot_id for s in scope.snapshots], mode=scope.mode)
    keys = TableKeys(meta, kms, kms_timeout)
    report.checks = list(source_checks or [])
    report.checks += table_checks(meta, keys, digest, expected_metadata_hash, scope)
    report.checks.append(_rotation_check(meta, kms, keys, kms_timeout))
    if history is not None:
        report.checks.append(history)
    if scope.mode == "current" and not scope.snapshots and meta.snapshots:  # nothing would be checked
        report.checks.append(TableCheck("current-snapshot", UNVERIFIABLE, f"the table metadata lists "
                                        f"{len(meta.snapshots)} snapshot(s) but no current one: nothing verified "
                                        "(choose --snapshot ID or --all-snapshots)"))

    started = time.perf_counter()
    confinement = Confinement.for_table(meta.table_location, meta.properties, allowed_locations)
    plan = plan_verification(meta, keys, scope, file_io, progress, confinement)
    planned = time.perf_counter()
    file_findings = (runner or local_runner(file_io, progress=progress))(plan.all_tasks())
    ran = time.perf_counter()
    for finding in file_findings:
        if finding.kind in (STATISTICS, PARTITION_STATISTICS):
            explain_statistics(finding)
    findings = list(plan.findings.values()) + identify_swaps(file_findings, plan, meta, keys, file_io)
    report.timings = {"plan": round(planned - started, 4), "run": round(ran - planned, 4),
                      "forensics": round(time.perf_counter() - ran, 4)}
    order = {kind: i for i, kind in enumerate(KINDS)}
    report.files = sorted(findings, key=lambda f: (order.get(f.kind, len(order)), f.path))
    report.scope = {**scope.to_dict(), "manifests_skipped": plan.manifests_skipped,
                    "entries_skipped": plan.entries_skipped}
    if ledger is not None:
        _advance(ledger, report, meta, digest, table_name)
    if progress:
        progress("done", len(report.files), len(report.files))
    return report


def _rotation_check(meta: TableMetadata, kms, keys: TableKeys, kms_timeout: float | None) -> TableCheck:
    """``kek-rotation`` (a warning, never a failure): KEKs past Iceberg's rotation age, or wrapped by
    an older master key version than the KMS's current one."""
    from pyiceberg_crypto.keys.inventory import rotation_check
    from pyiceberg_crypto.kms.bounded import KmsTimeoutError, call_with_timeout

    if kms is None or keys.kms_timed_out:
        return rotation_check(meta, None)  # ages only
    try:
        return call_with_timeout(rotation_check, meta, kms, timeout=kms_timeout,
                                 what="the KMS calls for master key versions")
    except KmsTimeoutError as exc:
        return TableCheck("kek-rotation", WARN, f"master key versions unknown: {exc}")


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
        mode=report.mode, table_name=table_name))
    report.ledger["advanced"] = True


def read_metadata(file_io: FileIO, location: str, limit: int) -> bytes:
    """The metadata.json's bytes: a regular file of at most ``limit`` bytes, read without blocking."""
    try:
        return read_bounded(file_io, location, limit)
    except FileNotFoundError:
        raise VerifyInputError(f"table metadata not found: {location}") from None
    except FileTooLargeError as exc:
        raise VerifyInputError(f"table metadata {location} is too large: {exc} (max-metadata-bytes)") from None
    except NotRegularFileError as exc:
        raise VerifyInputError(f"cannot read table metadata {location}: {exc}") from None
    except OSError as exc:
        raise VerifyInputError(f"cannot read table metadata {location}: {exc.strerror or exc}") from None


def metadata_hash(raw: bytes) -> str:
    """What Iceberg's Hive catalog stores as ``metadata_hash``: Base64 of SHA-256 over the file."""
    return base64.b64encode(hashlib.sha256(raw).digest()).decode("ascii")


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
        checks.append(TableCheck("encryption.key-id", OK, f"master key id {meta.key_id!r}"))
    else:
        checks.append(TableCheck("encryption.key-id", PLAINTEXT, "no encryption.key-id: the table is not encrypted"))
    only = None
    if scope is not None and scope.mode == "since":
        sealed = [meta.encryption_keys.get(s.key_id) for s in scope.snapshots if s.key_id]
        only = {entry.encrypted_by_id for entry in sealed if entry is not None}
    checks += keys.kek_checks(only)
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
