"""The whole lake at once: every table of a catalog, verified, with its keys, in one report::

    from pyiceberg_crypto.audit import audit_catalog

    report = audit_catalog(spark, "lake", state_dir="/var/lib/pyiceberg-crypto/ledgers")
    report.ok                           # every Iceberg table encrypted and verified OK
    [t.table for t in report.not_ok()]  # the tables to act on
    report.to_dict()                    # {"ok", "summary", "tables": [{"table", "encrypted", "ok", "key_id", ...}]}
    report.write_html("lake-audit.html")       # one self-contained page (:mod:`.html`)
    report.write_prometheus("/var/lib/node_exporter/lake.prom")   # per-table gauges (:mod:`.metrics`)

:func:`audit_tables` is shared by the Spark form above and the Spark-free ``pyiceberg-crypto
audit``: each table's metadata, keys and manifests are read on the driver (with ``state_dir``, its
ledger makes it incremental), then the files of **all** tables are checked in one batch (one Spark
job, or this machine's cores). A table that cannot be checked is an entry that is not OK with its
reason; the other tables are still audited. The audit reads only: it never commits, and writes
nothing but the ledgers in ``state_dir``.

The steps of a run: docs/explanation/design.md#audit; the how-to: docs/how-to/audit-lake.md.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from functools import partial
from typing import Any

from pyiceberg_crypto._deprecated import renamed_classes
from pyiceberg_crypto._atomic import PUBLIC, write_atomically
from pyiceberg_crypto.errors import (
    CatalogError,
    FileAccessError,
    InvalidArgumentError,
    PyicebergCryptoError,
    TableInputError,
)
from pyiceberg_crypto.io import FileIO, file_io_for
from pyiceberg_crypto.kms.base import KeyManagementClient
from pyiceberg_crypto.kms.bounded import KmsTimeoutError, call_with_timeout
from pyiceberg_crypto.safe_text import exception_line
from pyiceberg_crypto.adopt.encrypt import PLAINTEXT_SUFFIX
from pyiceberg_crypto.catalog.entry import list_tables, ListedTable
from pyiceberg_crypto.engines import declared_readers
from pyiceberg_crypto.catalog.spark import catalog_properties, registered_kms
from pyiceberg_crypto.table.key_inventory import KEK_ROTATION_DAYS, build_inventory, prunable_keys
from pyiceberg_crypto.table.limits import Limits
from pyiceberg_crypto.audit.html import render_html
from pyiceberg_crypto.audit.metrics import render_prometheus
from pyiceberg_crypto.verify.checks import FileTask, check_file
from pyiceberg_crypto.verify.ledger import LedgerError
from pyiceberg_crypto.verify.pipeline import PreparedVerification, prepare_catalog_verification
from pyiceberg_crypto.verify.report import (
    KEY_ERROR,
    OK,
    PARTITION_STATISTICS,
    PLAINTEXT,
    STATISTICS,
    STATUSES,
    WARN,
    FileFinding,
    TableCheck,
    TableReport,
)
from pyiceberg_crypto.verify.runners import DEFAULT_DRIVER_MAX_FILES, in_one_spark_job, local_runner, on_the_driver

__all__ = ["AUDIT_VERSION", "STATES", "CatalogReport", "ListedTable", "SparkBatchRunner", "TableAudit",
           "audit_catalog", "audit_schema", "audit_tables", "ledger_path", "local_batch_runner"]

#: Old names, kept for one release (CHANGELOG.md).
__getattr__ = renamed_classes(__name__, {"AuditOutputError": FileAccessError})

AUDIT_VERSION = 1
#: The JSON Schema (draft 2020-12) of :meth:`CatalogReport.to_dict`, package data beside this module.
AUDIT_SCHEMA = "audit.schema.json"

# --- the verdict on one table ------------------------------------------------------------------
#: Encrypted (format v3 + ``encryption.key-id``) and every check and file OK.
STATE_OK = "OK"
#: Checked, with findings that are not OK (files, table checks).
STATE_FAILED = "FAILED"
#: Not configured for encryption (format-version below 3 or no ``encryption.key-id``).
STATE_UNENCRYPTED = "UNENCRYPTED"
#: Could not be checked: ``reason`` says why (KEY_ERROR, UNREADABLE, LEDGER, METASTORE, INTERNAL).
STATE_UNCHECKED = "UNCHECKED"
#: Not an Iceberg table (a Hive or Spark table, a view): listed, not checked.
STATE_SKIPPED = "SKIPPED"
STATES = (STATE_OK, STATE_FAILED, STATE_UNENCRYPTED, STATE_UNCHECKED, STATE_SKIPPED)

#: Why a table could not be checked (``TableAudit.reason`` of an UNCHECKED table).
REASON_UNREADABLE = "UNREADABLE"  # metadata.json missing, unreadable, not table metadata
REASON_LEDGER = "LEDGER"  # the table's ledger is corrupt, another table's, or its directory is gone
REASON_METASTORE = "METASTORE"  # no metadata_location; a table the catalog cannot load, or a namespace it cannot list
REASON_INTERNAL = "INTERNAL"  # a verifier bug: still one entry, the other tables are audited
#: Why a checked table FAILED although its files are fine: a KEK is wrapped by a master key version
#: the KMS marks compromised (``pyiceberg-crypto keystore compromised``); ``keys reencrypt`` fixes it.
REASON_COMPROMISED = "COMPROMISED_KEY"

#: Findings listed per table in the document and the page (the counts always cover all of them).
MAX_LISTED_FINDINGS = 200

#: ``progress(stage, done, total)``: "tables" (planned), "files" (checked), "done".
Progress = Callable[[str, int, int], None]


def audit_schema() -> dict[str, Any]:
    """The JSON Schema of :meth:`CatalogReport.to_dict` (``jsonschema.validate(doc, audit_schema())``)."""
    from importlib.resources import files

    return json.loads(files(__package__).joinpath(AUDIT_SCHEMA).read_text(encoding="utf-8"))


@dataclass
class TableAudit:
    """One table of the audit: the verdict, its keys, and what was found (no key material)."""

    table: str  # namespace.name
    iceberg: bool = True
    state: str = STATE_UNCHECKED
    encrypted: bool = False  # configured: format-version >= 3 and an encryption.key-id
    key_id: str | None = None
    reason: str | None = None  # a status code: why it is not OK (KEY_ERROR, PLAINTEXT, UNREADABLE, ...)
    detail: str | None = None  # the reason in words
    format_version: int | None = None
    table_type: str | None = None  # the metastore's table_type (ICEBERG, or what a skipped table is)
    metadata_location: str | None = None
    table_location: str | None = None
    table_uuid: str | None = None
    mode: str | None = None  # current | since | all
    snapshot_ids: list[int] = field(default_factory=list)
    files: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    checks: list[dict[str, str]] = field(default_factory=list)  # the table checks that are not OK, and warnings
    findings: list[dict[str, Any]] = field(default_factory=list)  # files not OK (at most MAX_LISTED_FINDINGS)
    keks: list[dict[str, Any]] = field(default_factory=list)
    prunable_keks: list[str] = field(default_factory=list)
    prunable_entries: list[str] = field(default_factory=list)
    plaintext_statistics: list[str] = field(default_factory=list)
    last_verified: dict[str, Any] | None = None  # {"snapshot_id", "verified_at", "ledger"}
    readable_by: list[dict[str, Any]] | None = None  # the verification's answer (:mod:`pyiceberg_crypto.engines`)
    declared_readers: list[str] | None = None  # the table's pyiceberg-crypto.readers (None: not read)
    seconds: float = 0.0  # driver time for this table (plan, forensics, keys)
    report: TableReport | None = field(default=None, repr=False, compare=False)  # the full verification

    @property
    def ok(self) -> bool:
        return self.state == STATE_OK

    @property
    def counts(self) -> bool:
        """Whether the verdict counts: an Iceberg table, or an entry that could not even be checked
        (a table the catalog cannot give, a namespace it cannot list)."""
        return self.iceberg or self.state == STATE_UNCHECKED

    @property
    def declared_reader_blocked(self) -> bool:
        """The table's ``pyiceberg-crypto.readers`` names an engine that cannot read it (the WARN check
        ``readers``): a dashboard of that engine fails on it."""
        return any(c.get("name") == "readers" for c in self.checks)

    @property
    def oldest_kek_days(self) -> float | None:
        ages = [k["age_days"] for k in self.keks if k.get("age_days") is not None]
        return max(ages) if ages else None

    @property
    def rotation_due(self) -> bool:
        return any(k.get("rotation_due") for k in self.keks)

    @property
    def compromised(self) -> list[str]:
        """``master key id@version`` of every compromised master key version a KEK of it depends on."""
        return sorted({f"{k.get('master_key_id')}@{k.get('master_key_version') or '?'}" for k in self.keks
                       if k.get("compromised")})

    def next_step(self, catalog: str | None = None) -> str | None:
        """The command that acts on an ``UNENCRYPTED`` table: ``pyiceberg-crypto encrypt
        CATALOG.ns.name --key-id KEY`` (:mod:`pyiceberg_crypto.adopt`), or, for the plaintext original
        an earlier ``encrypt`` kept (``<name>__plaintext_<stamp>``), the ``DROP TABLE ... PURGE`` that
        removes it; None for any other state. ``catalog``: the catalog's name (else ``CATALOG``)."""
        if self.state != STATE_UNENCRYPTED:
            return None
        name = f"{catalog if catalog and re.fullmatch(r'[A-Za-z0-9_-]+', catalog) else 'CATALOG'}.{self.table}"
        if PLAINTEXT_SUFFIX in self.table.rsplit(".", 1)[-1]:
            return (f"DROP TABLE {name} PURGE (the plaintext original pyiceberg-crypto encrypt kept; once no one "
                    "needs its time travel)")
        return f"pyiceberg-crypto encrypt {name} --key-id KEY"

    def readers_hint(self, catalog: str | None = None) -> str | None:
        """For an encrypted table that declares no readers (``pyiceberg-crypto.readers``): the call
        that declares the engines that read it now, so that verify and the audit warn before a change
        stops one of them; None otherwise."""
        if not self.encrypted or self.declared_readers is None or self.declared_readers or not self.readable_by:
            return None
        readers = [a["engine"] for a in self.readable_by if a.get("readable") is True]
        if not readers:
            return None
        name = f"{catalog if catalog and re.fullmatch(r'[A-Za-z0-9_-]+', catalog) else 'CATALOG'}.{self.table}"
        return (f"no readers declared: config.declare_readers(spark, {name!r}, {readers!r}) (the engines that read it "
                "now; verify and the audit then warn when a change would stop one of them)")

    def to_dict(self, catalog: str | None = None) -> dict[str, Any]:
        return {
            "table": self.table, "iceberg": self.iceberg, "state": self.state, "encrypted": self.encrypted,
            "next_step": self.next_step(catalog),
            "ok": self.ok, "key_id": self.key_id, "reason": self.reason, "detail": self.detail,
            "format_version": self.format_version, "table_type": self.table_type,
            "metadata_location": self.metadata_location, "table_location": self.table_location,
            "table_uuid": self.table_uuid, "mode": self.mode, "snapshot_ids": list(self.snapshot_ids),
            "files": self.files, "by_status": dict(self.by_status), "checks": list(self.checks),
            "findings": list(self.findings), "findings_listed": len(self.findings),
            "findings_total": sum(n for s, n in self.by_status.items() if s != OK),
            "keks": list(self.keks), "oldest_kek_days": self.oldest_kek_days, "rotation_due": self.rotation_due,
            "compromised": self.compromised,
            "prunable_keks": list(self.prunable_keks), "prunable_entries": list(self.prunable_entries),
            "plaintext_statistics": list(self.plaintext_statistics), "last_verified": self.last_verified,
            "readable_by": self.readable_by, "declared_reader_blocked": self.declared_reader_blocked,
            "declared_readers": self.declared_readers, "readers_hint": self.readers_hint(catalog),
            "seconds": round(self.seconds, 4),
        }


@dataclass
class CatalogReport:
    """Every table of a catalog, audited. ``ok``: every Iceberg table is encrypted and OK."""

    catalog: str
    tables: list[TableAudit] = field(default_factory=list)
    metastore: str | None = None
    warehouse: str | None = None
    namespaces: list[str] | None = None  # None: every namespace
    full: bool = False
    state_dir: str | None = None
    started_at: str = ""
    finished_at: str = ""
    run: dict[str, Any] = field(default_factory=dict)  # where the file checks ran, how many, the Spark job group
    timings: dict[str, float] = field(default_factory=dict)  # seconds: list, plan, run, finish, total
    error: str | None = None  # why no audit could be made (the catalog could not be listed at all)

    @property
    def ok(self) -> bool:
        return self.error is None and all(t.ok for t in self.tables if t.counts)

    @property
    def nothing_audited(self) -> bool:
        """No audit could be made: the catalog could not be listed, or no namespace of it could."""
        return self.error is not None or (bool(self.tables) and all(t.table.endswith(".*") and
                                                                    t.state == STATE_UNCHECKED for t in self.tables))

    def no_audit(self, reason: str) -> "CatalogReport":
        """Record that no audit could be made (``reason``: the catalog could not be listed); the
        report still renders (JSON, HTML, Prometheus), not OK."""
        self.error, self.tables = reason, []
        self.started_at = self.started_at or _now()
        self.finished_at = _now()
        return self

    def not_ok(self) -> list[TableAudit]:
        """The Iceberg tables that are not encrypted and OK, and the entries that could not be checked."""
        return [t for t in self.tables if t.counts and not t.ok]

    def table(self, name: str) -> TableAudit:
        """The entry of ``namespace.name`` (KeyError if the audit did not list it)."""
        for entry in self.tables:
            if entry.table == name:
                return entry
        raise KeyError(name)

    def summary(self) -> dict[str, Any]:
        states = Counter(t.state for t in self.tables)
        files = Counter()
        for entry in self.tables:
            files.update(entry.by_status)
        iceberg = [t for t in self.tables if t.iceberg]
        return {
            "tables": len(self.tables),
            "iceberg_tables": len(iceberg),
            "encrypted": sum(1 for t in iceberg if t.encrypted),
            "ok": states[STATE_OK],
            "by_state": {s: states[s] for s in STATES if states[s]},
            "files": sum(files.values()),
            "files_by_status": {s: files[s] for s in STATUSES if files[s]},
            "keks": sum(len(t.keks) for t in iceberg),
            "keks_rotation_due": sum(1 for t in iceberg for k in t.keks if k.get("rotation_due")),
            "keks_outdated": sum(1 for t in iceberg for k in t.keks if k.get("outdated")),
            "prunable_keks": sum(len(t.prunable_keks) for t in iceberg),
            "compromised_tables": sum(1 for t in iceberg if t.compromised),
            "plaintext_statistics": sum(len(t.plaintext_statistics) for t in iceberg),
            "declared_reader_blocked": sum(1 for t in iceberg if t.declared_reader_blocked),
            "no_declared_readers": sum(1 for t in iceberg if t.encrypted and t.declared_readers == []),
            "unreadable_by": {name: n for name, n in _unreadable_by(iceberg).items() if n},
            "key_ids": sorted({t.key_id for t in iceberg if t.key_id}),
            "unlisted": sum(1 for t in self.tables if t.counts and not t.iceberg),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok, "version": AUDIT_VERSION, "catalog": self.catalog, "metastore": self.metastore,
            "warehouse": self.warehouse, "namespaces": self.namespaces, "full": self.full,
            "state_dir": self.state_dir, "started_at": self.started_at, "finished_at": self.finished_at,
            "kek_rotation_days": KEK_ROTATION_DAYS, "run": dict(self.run), "timings": dict(self.timings),
            "summary": self.summary(), "tables": [t.to_dict(self.catalog) for t in self.tables], "error": self.error,
        }

    def write_json(self, path: str) -> None:
        """The document of :meth:`to_dict`, written atomically (:class:`FileAccessError` naming the
        path when it cannot be, e.g. its directory does not exist; no temporary file is left)."""
        _write_atomically(path, json.dumps(self.to_dict(), indent=2) + "\n")

    def write_html(self, path: str) -> None:
        """One self-contained HTML page (no external assets): summary, charts, a sortable and
        filterable table of tables, each table's findings (:mod:`.html`). Written atomically."""
        _write_atomically(path, render_html(self.to_dict()))

    def write_prometheus(self, path: str) -> None:
        """A node-exporter textfile with per-table gauges (:mod:`.metrics`), written atomically
        (the collector never reads half a file)."""
        _write_atomically(path, render_prometheus(self.to_dict()))


def _unreadable_by(tables: list[TableAudit]) -> Counter:
    """How many tables each known engine cannot read (current snapshot)."""
    out: Counter = Counter()
    for table in tables:
        for answer in table.readable_by or []:
            out[answer["engine"]] += answer.get("readable") is False
    return out


def _write_atomically(path: str, text: str) -> None:
    """Reports are not secrets (verdicts, no key material): 0644, for the collector and the web server.
    A character UTF-8 cannot hold (a lone surrogate that slipped through) is written as a backslash
    escape, never a crash; the temporary file is removed whatever fails (:mod:`pyiceberg_crypto._atomic`)."""
    write_atomically(path, text.encode("utf-8", errors="backslashreplace"), mode=PUBLIC)


# --- what to audit -----------------------------------------------------------------------------

#: ``run_batch(jobs, file_ios) -> [(table index, finding)]``: check every job's file; ``jobs`` are
#: ``(table index, FileTask)``, ``file_ios[table index]`` reads that table's files.
BatchRunner = Callable[[list[tuple[int, FileTask]], dict[int, FileIO]], list[tuple[int, FileFinding]]]


def ledger_path(state_dir: str, table: str) -> str:
    """The ledger file of ``namespace.name`` in ``state_dir`` (the same file for the Spark and the CLI form)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", lambda m: f"%{ord(m.group()):02X}", table)
    return os.path.join(state_dir, f"{safe}.ledger.json")


def audit_catalog(
    spark,
    catalog: str,
    *,
    namespaces: Sequence[str] | None = None,
    full: bool = False,
    state_dir: str | None = None,
    kms: KeyManagementClient | None = None,
    limits: Limits | None = None,
    parallelism: int | None = None,
    driver_max_files: int = DEFAULT_DRIVER_MAX_FILES,
    progress: Progress | None = None,
) -> CatalogReport:
    """Audit every table of Spark catalog ``catalog`` (a Hive or a REST catalog): see the module's doc.

    Args:
        spark: a classic SparkSession with the catalog configured.
        namespaces: only these namespaces (default: every one).
        full: every snapshot of every table, ignoring the ledgers' cut-off (the ledgers still
            check the history and advance when OK).
        state_dir: a directory of ledgers, one per table (:func:`ledger_path`): the first audit
            verifies each table's current snapshot, later ones only what is newer.
        kms: the Python KMS with the tables' master keys (default: the one registered for the catalog).
        limits: ``allowed_locations``, ``max_metadata_bytes``, ``kms_timeout`` for every table.
        parallelism: Spark tasks of the one job checking the files (default: from the cluster).
        driver_max_files: at most this many files in all are checked on the driver instead
            (a Spark job costs more); 0: always a Spark job.
        progress: ``progress(stage, done, total)``.

    Raises:
        TableInputError: unknown catalog, no KMS, an unknown namespace, a missing ``state_dir``,
            a metastore that cannot list the tables. Problems of one table are its entry's reason.
    """
    started = time.perf_counter()
    try:
        properties = catalog_properties(spark, catalog)
    except CatalogError as exc:
        raise TableInputError(str(exc)) from None
    kms = kms if kms is not None else registered_kms(properties, catalog)
    _check_state_dir(state_dir)
    try:
        listing = list_tables(properties, namespaces, spark=spark)
    except CatalogError as exc:
        raise TableInputError(f"cannot list the tables of catalog {catalog!r}: {exc}") from None
    report = CatalogReport(catalog, metastore=properties.get("uri"), warehouse=properties.get("warehouse"),
                           namespaces=sorted(namespaces) if namespaces is not None else None, full=full,
                           state_dir=state_dir)
    runner = SparkBatchRunner(spark, parallelism, driver_max_files, f"pyiceberg-crypto audit {catalog}")
    return audit_tables(listing, kms, report, run_batch=runner, properties=properties, limits=limits,
                        progress=progress, listed_in=time.perf_counter() - started)


def _check_state_dir(state_dir: str | None) -> None:
    if state_dir is not None and not os.path.isdir(state_dir):
        raise TableInputError(f"the ledger directory {state_dir} does not exist: create it "
                              f"(mkdir -p -m 700 {state_dir}) where the tables' writers cannot write, then run again")


def audit_tables(
    listing: Sequence[ListedTable],
    kms: KeyManagementClient | None,
    report: CatalogReport,
    *,
    run_batch: BatchRunner,
    properties: dict[str, str] | None = None,
    limits: Limits | None = None,
    progress: Progress | None = None,
    listed_in: float = 0.0,
) -> CatalogReport:
    """Audit ``listing`` into ``report`` (its catalog, metastore... already set): plan every table,
    check all their files with one ``run_batch``, finish every table. Never raises for one table."""
    _check_state_dir(report.state_dir)
    limits = limits or Limits()
    report.started_at = _now()
    clock = time.perf_counter()
    entries: list[TableAudit] = []
    prepared: dict[int, PreparedVerification] = {}
    for listed in listing:
        if listed.parameters is None:
            continue  # dropped while the audit listed it
        entry = TableAudit(listed.table, iceberg=listed.is_iceberg,
                           table_type=(listed.parameters.get("table_type") or None))
        entries.append(entry)
        failure = listed.parameters.get("list_error") or listed.parameters.get("load_error")
        if failure and not entry.iceberg:  # a namespace that cannot be listed, a table that cannot be loaded
            _unchecked(entry, REASON_METASTORE, failure)
            continue
        if not entry.iceberg:
            entry.state, entry.detail = STATE_SKIPPED, "not an Iceberg table: not checked"
            continue
        began = time.perf_counter()
        plan = _prepare(entry, listed, kms, report, properties, limits)
        entry.seconds += time.perf_counter() - began
        if plan is not None:
            prepared[len(entries) - 1] = plan
        if progress:
            progress("tables", len(entries), len(listing))
    planned = time.perf_counter()

    jobs = [(index, task) for index, plan in prepared.items() for task in plan.plan.all_tasks()]
    file_ios = {index: plan.file_io for index, plan in prepared.items()}
    findings: dict[int, list[FileFinding]] = {index: [] for index in prepared}
    for index, finding in run_batch(jobs, file_ios) if jobs else []:
        findings[index].append(finding)
    ran = time.perf_counter()
    if progress:
        progress("files", len(jobs), len(jobs))

    for index, plan in prepared.items():
        entry = entries[index]
        began = time.perf_counter()
        try:
            table_report = plan.finish(findings[index])
        except Exception as exc:  # noqa: BLE001 - one table's failure is its entry, never the audit's
            _unchecked(entry, REASON_INTERNAL, f"internal error in the verifier: {exception_line(exc)}")
        else:
            _summarise(entry, table_report, plan, kms, limits)
        entry.seconds += time.perf_counter() - began
    report.tables = sorted(entries, key=lambda t: t.table)
    report.finished_at = _now()
    report.run = {**report.run, **getattr(run_batch, "where", {}), "tables_checked": len(prepared),
                  "files_checked": len(jobs)}
    report.timings = {"list": round(listed_in, 4), "plan": round(planned - clock, 4), "run": round(ran - planned, 4),
                      "finish": round(time.perf_counter() - ran, 4),
                      "total": round(listed_in + time.perf_counter() - clock, 4)}
    if progress:
        progress("done", len(entries), len(entries))
    return report


def _prepare(entry: TableAudit, listed: ListedTable, kms: KeyManagementClient | None, report: CatalogReport,
             properties: dict[str, str] | None, limits: Limits) -> PreparedVerification | None:
    params = listed.parameters or {}
    location = params.get("metadata_location")
    entry.metadata_location = location
    if not location:
        _unchecked(entry, REASON_METASTORE, params.get("load_error") or "the metastore entry names no metadata_location")
        return None
    state = ledger_path(report.state_dir, listed.table) if report.state_dir else None
    try:
        return prepare_catalog_verification(
            listed, kms, table_name=listed.table, catalog_uri=report.metastore, state=state, full=report.full,
            limits=replace(limits, file_io=file_io_for(location, properties), properties=None))
    except TableInputError as exc:
        _unchecked(entry, REASON_UNREADABLE, str(exc))
    except LedgerError as exc:
        _unchecked(entry, REASON_LEDGER, str(exc))
    except Exception as exc:  # noqa: BLE001 - e.g. an unsupported scheme, a verifier bug: this table only
        _unchecked(entry, REASON_INTERNAL, f"cannot verify this table: {exception_line(exc)}")
    return None


def _unchecked(entry: TableAudit, reason: str, detail: str) -> None:
    entry.state, entry.reason, entry.detail = STATE_UNCHECKED, reason, detail


def _summarise(entry: TableAudit, report: TableReport, plan: PreparedVerification, kms: KeyManagementClient | None,
               limits: Limits) -> None:
    """Fill ``entry`` from a finished verification: verdict, reason, counts, keys, ledger."""
    meta = plan.meta
    entry.report = report
    entry.key_id, entry.format_version = meta.key_id, meta.format_version
    entry.table_location, entry.table_uuid = meta.table_location, meta.table_uuid
    entry.encrypted = meta.encrypted
    entry.mode, entry.snapshot_ids = report.mode, list(report.snapshot_ids)
    summary = report.summary()
    entry.files, entry.by_status = summary["files"], dict(summary["by_status"])
    entry.checks = [c.to_dict() for c in report.checks if c.status != OK]
    entry.readable_by = report.readable_by
    entry.declared_readers = list(declared_readers(meta.properties or {}))
    bad = report.not_ok()
    entry.findings = [f.to_dict() for f in bad[:MAX_LISTED_FINDINGS]]
    key_errors = [c for c in report.checks if c.status == KEY_ERROR] + [f for f in bad if f.status == KEY_ERROR]
    if not entry.encrypted:
        entry.state, entry.reason = STATE_UNENCRYPTED, PLAINTEXT
        entry.detail = ("format-version {}: Iceberg encrypts tables of format-version 3 and later only".format(
            meta.format_version) if meta.format_version < 3 else "no encryption.key-id: the table is not encrypted")
    elif report.ok:
        entry.state = STATE_OK
    elif key_errors:
        entry.state, entry.reason = STATE_UNCHECKED, KEY_ERROR
        entry.detail = key_errors[0].detail
    else:
        entry.state = STATE_FAILED
        failed = report.failed_checks()
        first = failed[0] if failed else bad[0]
        entry.reason = first.status
        entry.detail = (f"{first.name}: {first.detail}" if isinstance(first, TableCheck)
                        else f"{first.kind} {first.path}: {first.detail}")
        if len(failed) + len(bad) > 1:
            entry.detail += f" (and {len(failed) + len(bad) - 1} more)"
    _keys(entry, plan, kms, limits)
    _compromised(entry)
    stats_findings = [f.path for f in report.files if f.kind in (STATISTICS, PARTITION_STATISTICS)
                      and f.status == PLAINTEXT]
    unsealed = [s.path for s in meta.statistics if not s.key_metadata]  # Iceberg recorded no key for it
    entry.plaintext_statistics = sorted({*stats_findings, *unsealed})
    ledger = plan.ledger
    if ledger is not None and ledger.last is not None:
        entry.last_verified = {"snapshot_id": ledger.last.snapshot_id, "verified_at": ledger.last.verified_at,
                               "ledger": ledger.path, "advanced": bool(report.ledger and report.ledger.get("advanced")),
                               "files_verified": ledger.last.files_verified}


def _keys(entry: TableAudit, plan: PreparedVerification, kms: KeyManagementClient | None, limits: Limits) -> None:
    """The KEKs (master key version, age, rotation) and what ``keys prune`` would remove."""
    meta = plan.meta
    asked = kms if kms is not None and not plan.keys.kms_timed_out else None
    try:
        inventory = call_with_timeout(build_inventory, meta, asked, timeout=limits.kms_timeout,
                                      what="the KMS calls for master key versions")
    except KmsTimeoutError:
        inventory = build_inventory(meta, None)
    entry.keks = [{"key_id": k.key_id, "master_key_id": k.master_key_id, "master_key_version": k.master_key_version,
                   "current_master_key_version": k.current_master_key_version, "created": k.created,
                   "age_days": k.age_days, "rotation_due": k.rotation_due, "outdated": k.outdated,
                   "in_use": k.in_use, "snapshots": len(k.snapshot_ids), "note": k.note,
                   "compromised": k.compromised, "resealed_snapshots": len(k.resealed_snapshot_ids)}
                  for k in inventory.keks]
    if not meta.key_id:
        return
    try:
        entry.prunable_keks, entry.prunable_entries, _ = prunable_keys(meta)
    except PyicebergCryptoError as exc:
        entry.checks.append({"name": "prunable-keys", "status": WARN, "detail": str(exc)})


def _compromised(entry: TableAudit) -> None:
    """A table whose KEKs depend on a compromised master key version is not OK (FAILED, reason
    COMPROMISED_KEY), even when every file verifies: the leaked material still opens it."""
    leaked = entry.compromised
    if not leaked or entry.state not in (STATE_OK, STATE_FAILED):
        return
    keks = [k["key_id"] for k in entry.keks if k.get("compromised")]
    unfinished = sum(k.get("resealed_snapshots") or 0 for k in entry.keks)
    versions = " ".join(f"--compromised-version {v.replace('@', ':')}" for v in leaked)
    text = (f"depends on compromised master key version(s) {', '.join(leaked)} (KEK(s) {', '.join(keks)}): "
            f"re-encrypt it (pyiceberg-crypto keys reencrypt CATALOG.{entry.table} {versions} --kms ...)")
    if unfinished:
        text = (f"has an unfinished re-encryption: {unfinished} live snapshot(s) were written before it, and the "
                f"compromised material opened them: run it again (pyiceberg-crypto keys reencrypt "
                f"CATALOG.{entry.table} --kms ...)")
    if entry.state == STATE_OK:
        entry.state, entry.reason, entry.detail = STATE_FAILED, REASON_COMPROMISED, text
    else:
        entry.detail = f"{entry.detail}; it also {text}"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# --- where the files of all tables are checked --------------------------------------------------

def local_batch_runner(threads: int | None = None, processes: int | None = None) -> BatchRunner:
    """Check the batch on this machine: one :func:`~pyiceberg_crypto.verify.runners.local_runner` for the tables that read
    files alike (usually all of them), so long batches use a worker process per core.
    ``processes`` 0 or 1: threads only. InvalidArgumentError for a negative count."""
    for name, value in (("threads", threads), ("processes", processes)):
        if value is not None and value < 0:
            raise InvalidArgumentError(f"{name} must not be negative (None: from the CPUs), got {value!r}")

    def run(jobs: list[tuple[int, FileTask]], file_ios: dict[int, FileIO]) -> list[tuple[int, FileFinding]]:
        groups: dict[bytes, list[tuple[int, FileTask]]] = {}
        ios: dict[bytes, FileIO] = {}
        for index, task in jobs:
            key = _io_key(file_ios[index])
            groups.setdefault(key, []).append((index, task))
            ios[key] = file_ios[index]
        out = []
        for key, group in groups.items():
            found = local_runner(ios[key], threads=threads, processes=processes)([task for _, task in group])
            out += [(index, finding) for (index, _), finding in zip(group, found)]  # local_runner keeps the order
        return out

    run.where = {"where": "local"}
    return run


def _io_key(file_io: FileIO) -> bytes:
    try:
        return pickle.dumps(file_io)
    except Exception:  # noqa: BLE001 - an unpicklable FileIO is its own group
        return repr(id(file_io)).encode()


class SparkBatchRunner:
    """Check the batch in **one** Spark job (its job group is recorded in :attr:`where`, and the
    report's ``run``); a batch of at most ``driver_max_files`` files (and 256 MiB) is checked on
    the driver instead (:func:`~pyiceberg_crypto.verify.runners.on_the_driver`, as the verifier decides)."""

    def __init__(self, spark, parallelism: int | None = None, driver_max_files: int = DEFAULT_DRIVER_MAX_FILES,
                 description: str | None = None):
        self.spark, self.parallelism, self.driver_max_files = spark, parallelism, driver_max_files
        self.description = description or "pyiceberg-crypto audit"
        self.where: dict[str, Any] = {}
        self._on_driver = local_batch_runner(threads=2, processes=0)

    def __call__(self, jobs: list[tuple[int, FileTask]], file_ios: dict[int, FileIO]) -> list[tuple[int, FileFinding]]:
        if on_the_driver((task for _, task in jobs), self.driver_max_files):
            self.where = {"where": "driver"}
            return self._on_driver(jobs, file_ios)
        distinct: list[FileIO] = []
        keys: dict[bytes, int] = {}
        io_of: dict[int, int] = {}
        for index, file_io in file_ios.items():  # ship each distinct FileIO once, not once per table
            key = _io_key(file_io)
            if key not in keys:
                keys[key] = len(distinct)
                distinct.append(file_io)
            io_of[index] = keys[key]
        group = f"pyiceberg-crypto-audit-{uuid.uuid4().hex[:12]}"
        shipped = [(index, io_of[index], task) for index, task in jobs]
        result, slices = in_one_spark_job(self.spark, shipped, partial(audit_partition, distinct),
                                          parallelism=self.parallelism, description=self.description, job_group=group)
        self.where = {"where": "spark", "job_group": group, "spark_tasks": slices}
        return result


def audit_partition(file_ios: list[FileIO], jobs):
    """Runs in a Spark Python worker: check each file of one partition, with its table's FileIO."""
    for index, io_index, task in jobs:
        yield index, check_file(task, file_ios[io_index])
