"""Encrypt the whole lake: every plaintext table of a catalog (the audit's ``UNENCRYPTED`` list),
several at a time in one Spark session, with progress, a report, and a resume from it (issue 51)::

    from pyiceberg_crypto.adopt import encrypt_tables, unencrypted_tables

    listing = unencrypted_tables(spark, "lake", namespaces=["shop", "web"])
    listing.tables, listing.skipped            # ["lake.shop.orders", ...], {table: why not}
    outcome = encrypt_tables(spark, "lake", "lake-key", namespaces=["shop", "web"], parallel=2,
                             report="encrypt-lake.json", progress=print)
    outcome.ok, outcome.done, outcome.failed    # {table: AdoptResult dict}, {table: why it stopped}
    encrypt_tables(spark, "lake", "lake-key", resume="encrypt-lake.json")   # after a crash or a failure
    encrypt_tables(spark, "lake", "lake-key", dry_run=True).planned         # what it would do, nothing changed

The tables are listed as the audit lists them (:func:`pyiceberg_crypto.catalog.entry.list_tables`)
and are its ``UNENCRYPTED`` ones; not the plaintext originals an earlier run kept, nor staging
tables (``<name>__encrypting``; one whose original is gone puts that name on the list, and
:func:`~.encrypt.encrypt_table` finishes the swap). Each table runs
:func:`~.encrypt.encrypt_table` on :func:`pyiceberg_crypto.each_table.run_each`: one table's
failure never stops the others; the report (:class:`LakeOutcome`) is saved after each table.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, ClassVar

from pyiceberg_crypto import config
from pyiceberg_crypto._deprecated import renamed_classes
from pyiceberg_crypto.adopt.encrypt import PLAINTEXT_NAME, SOURCE_UUID, STAGING_SUFFIX, Prove, encrypt_table
from pyiceberg_crypto.catalog.entry import ListedTable, list_tables
from pyiceberg_crypto.catalog.spark import activate_session, catalog_properties
from pyiceberg_crypto.each_table import DONE, FAILED, Earlier, RunReport, TableEvent, run_each
from pyiceberg_crypto.errors import CatalogError, IntegrityError, InvalidArgumentError, OperationError, ReportError, TableInputError
from pyiceberg_crypto.io import DEFAULT_MAX_METADATA_BYTES, file_io_for
from pyiceberg_crypto.safe_text import exception_line
from pyiceberg_crypto.table.metadata import TableMetadata, read_metadata

__all__ = ["DONE", "FAILED", "PLANNED", "SKIPPED", "LakeListing", "LakeOutcome", "encrypt_each",
           "encrypt_tables", "read_report", "unencrypted_tables"]

#: Old names, kept for one release (CHANGELOG.md).
__getattr__ = renamed_classes(__name__, {"ReportFileError": ReportError})

#: A table's status in the outcome and the report (DONE and FAILED: :mod:`pyiceberg_crypto.each_table`'s).
SKIPPED, PLANNED = "skipped", "planned"
REPORT_VERSION = 1
#: The ``kind`` of the report.
REPORT_KIND = "pyiceberg-crypto encrypt --all-tables"

#: ``progress(event)``: one dict per table as it finishes: ``{"table", "status", "n", "of", "seconds",
#: "detail"}`` (status done / failed / skipped), plus ``{"event": "listed", ...}`` first.
LakeProgress = Callable[[dict[str, Any]], None]


@dataclass
class LakeListing:
    """What :func:`unencrypted_tables` found: the tables to encrypt (``catalog.ns.name``, sorted),
    those left alone with why, and those an earlier run left unfinished."""

    catalog: str
    namespaces: list[str] | None = None
    tables: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    unfinished: dict[str, str] = field(default_factory=dict)  # table -> what an earlier run left
    listed: int = 0  # Iceberg tables listed


@dataclass
class LakeOutcome(RunReport[dict[str, Any]]):
    """What :func:`encrypt_each` / :func:`encrypt_tables` did, and its report (``path``, saved by
    :func:`~pyiceberg_crypto.each_table.run_each`). ``ok``: no table failed and the report was written."""

    KIND: ClassVar[str | None] = REPORT_KIND

    key_id: str | None = None
    dry_run: bool = False
    unverified: list[str] = field(default_factory=list)  # failed: the copy differs or the proof failed (no swap)
    skipped: dict[str, str] = field(default_factory=dict)  # table -> why it was not run
    planned: dict[str, str] = field(default_factory=dict)  # dry run: table -> what would happen
    namespaces: list[str] | None = None
    started_at: str = ""
    finished_at: str = ""

    def to_dict(self) -> dict[str, Any]:
        tables: dict[str, dict[str, Any]] = {}
        for table, why in self.skipped.items():
            tables[table] = {"status": SKIPPED, "detail": why}
        for table, what in self.planned.items():
            tables[table] = {"status": PLANNED, "detail": what}
        for table, result in self.done.items():
            tables[table] = {"status": DONE, "result": result, "seconds": self.seconds.get(table)}
        for table, why in self.failed.items():
            tables[table] = {"status": FAILED, "detail": why, "seconds": self.seconds.get(table),
                             "verification_failed": table in self.unverified}
        return {"version": REPORT_VERSION, "kind": REPORT_KIND, "ok": self.ok,
                "catalog": self.catalog, "namespaces": self.namespaces, "key_id": self.key_id, "dry_run": self.dry_run,
                "started_at": self.started_at, "finished_at": self.finished_at or None,
                "finished": bool(self.finished_at),
                "counts": {DONE: len(self.done), FAILED: len(self.failed), SKIPPED: len(self.skipped),
                           PLANNED: len(self.planned)},
                "tables": dict(sorted(tables.items()))}

    def usable(self, path: str, document: Any) -> bool:
        if not isinstance(document, dict) or not isinstance(document.get("tables"), dict):
            raise ReportError(f"{path} is not the report of {REPORT_KIND}")
        return super().usable(path, document)

    def earlier_of(self, path: str, document: dict[str, Any]) -> Earlier:
        done = {t: e for t, e in document["tables"].items() if isinstance(e, dict) and e.get("status") == DONE}
        return Earlier(path, document, {t: e.get("result") or {} for t, e in done.items()},
                       {t: str(e.get("detail")) for t, e in document["tables"].items()
                        if isinstance(e, dict) and e.get("status") == FAILED},
                       {t: e.get("seconds") or 0.0 for t, e in done.items()})

    def describe(self, error: BaseException) -> str:
        return str(error).splitlines()[0] if isinstance(error, (OperationError, IntegrityError)) else exception_line(error)

    def record(self, table: str, *, result: Any = None, error: BaseException | None = None,
               seconds: float = 0.0) -> str:
        with self.lock:
            if isinstance(error, IntegrityError):
                self.unverified.append(table)
            return super().record(table, result=result.to_dict() if error is None else None, error=error,
                                  seconds=seconds)


def unencrypted_tables(spark, catalog: str, *, namespaces: Sequence[str] | None = None) -> LakeListing:
    """The plaintext Iceberg tables of Spark catalog ``catalog`` (a Hive or a REST catalog), as the
    audit reports them ``UNENCRYPTED``, to encrypt; see the module's doc for what is left alone.

    Raises:
        TableInputError: the catalog is not one of the session's, a namespace does not exist, or
            the catalog cannot be listed (nothing has changed).
    """
    try:
        properties = catalog_properties(spark, catalog)
        listing = list_tables(properties, list(namespaces) if namespaces is not None else None, spark=spark)
    except CatalogError as exc:
        raise TableInputError(f"cannot list the tables of catalog {catalog!r}: {exc}") from None
    found = LakeListing(catalog, sorted(namespaces) if namespaces is not None else None)
    metas: dict[str, TableMetadata] = {}
    for listed in listing:
        full = f"{catalog}.{listed.table}"
        if listed.parameters is None or not listed.is_iceberg:
            failure = (listed.parameters or {}).get("list_error")
            if failure:
                found.skipped[full] = f"cannot list this namespace: {failure}"
            continue
        found.listed += 1
        try:
            metas[listed.table] = _metadata(listed, properties)
        except (TableInputError, CatalogError) as exc:
            found.skipped[full] = f"cannot read its metadata: {exc}"
        except Exception as exc:  # noqa: BLE001 - e.g. an unsupported scheme: this table only
            found.skipped[full] = f"cannot read its metadata: {exception_line(exc)}"
    kept_originals: dict[str, str] = {}
    for table, meta in metas.items():
        namespace = table.rsplit(".", 1)[0]
        plaintext = meta.properties.get(PLAINTEXT_NAME)
        if plaintext and meta.encrypted:
            kept_originals[f"{namespace}.{plaintext}"] = table
    tables = set()
    for table, meta in metas.items():
        full = f"{catalog}.{table}"
        if table.endswith(STAGING_SUFFIX):
            original = table[: -len(STAGING_SUFFIX)]
            if meta.properties.get(SOURCE_UUID):
                what = "staging table of an earlier run" + ("" if original in metas else
                                                              " whose original was renamed: the run finishes the swap")
                found.unfinished[f"{catalog}.{original}"] = what
                tables.add(f"{catalog}.{original}")
            found.skipped[full] = (f"a staging table ({STAGING_SUFFIX}): encrypting {catalog}.{original} uses it"
                                   if meta.encrypted else
                                   f"named like a staging table ({STAGING_SUFFIX}) but not one: rename it to encrypt it")
        elif table in kept_originals:
            found.skipped[full] = (f"the plaintext original {catalog}.{kept_originals[table]} was encrypted from: "
                                   f"kept until it is purged (DROP TABLE {full} PURGE)")
        elif not meta.encrypted:
            tables.add(full)
    found.tables = sorted(tables)
    return found


def _metadata(listed: ListedTable, properties: dict[str, str]) -> TableMetadata:
    location = (listed.parameters or {}).get("metadata_location")
    if listed.served_metadata is not None:
        return TableMetadata.from_document(listed.served_metadata, location or "")
    if not location:
        raise TableInputError((listed.parameters or {}).get("load_error") or "the catalog names no metadata_location")
    raw = read_metadata(file_io_for(location, properties), location, DEFAULT_MAX_METADATA_BYTES)
    return TableMetadata.parse(raw, location)


def encrypt_tables(spark, catalog: str, key_id: str, *, namespaces: Sequence[str] | None = None, parallel: int = 1,
                   report: str | None = None, resume: str | None = None, dry_run: bool = False,
                   progress: LakeProgress | None = None, prove: Prove | None = None,
                   **options: Any) -> LakeOutcome:
    """Encrypt every plaintext table of ``catalog`` (:func:`unencrypted_tables`) under master key
    ``key_id``: :func:`encrypt_each` over the listing. ``options`` go to
    :func:`~.encrypt.encrypt_table` (``format_version``, ``data_key_length``, ``refs``, ``on_change``,
    ``purge_now``, ``purge_after``, ``max_rounds``; not ``keep_original``, one name for one table).
    ``resume``: the report of an earlier run (it must exist); without it, an existing ``report`` is
    resumed from. The ``listed`` progress event names it (``resumed_from``).

    Raises:
        TableInputError: unknown catalog or namespace, a report that cannot be resumed from
            (:class:`~pyiceberg_crypto.errors.ReportError`); InvalidArgumentError: bad options.
            Nothing has changed then.
    """
    if resume:
        earlier = read_report(resume, catalog)
    else:  # the report of an earlier run, at report: resumed from
        found = LakeOutcome(path=report, catalog=catalog).resume() if report else None
        earlier, resume = (found.document, report) if found is not None else (None, None)
    _check_options(key_id, parallel, options)
    listing = unencrypted_tables(spark, catalog, namespaces=namespaces)
    say = progress or (lambda _event: None)

    def told(event: dict[str, Any]) -> None:
        say({**event, "resumed_from": resume} if event.get("event") == "listed" else event)

    return encrypt_each(spark, listing.tables, key_id, parallel=parallel, report=report, earlier=earlier,
                        dry_run=dry_run, progress=told, prove=prove, skipped=listing.skipped,
                        unfinished=listing.unfinished, catalog=catalog,
                        namespaces=listing.namespaces, **options)


def _check_options(key_id: str, parallel: int, options: dict[str, Any]) -> None:
    if not isinstance(parallel, int) or isinstance(parallel, bool) or parallel < 1:
        raise InvalidArgumentError(f"parallel must be a whole number of tables at a time (>= 1), got {parallel!r}")
    if options.get("keep_original"):
        raise InvalidArgumentError("keep_original names one table: encrypt that table alone (encrypt_table)")
    if "fail_at" in options and options["fail_at"] is not None:
        raise InvalidArgumentError("fail_at is for one table's crash tests (encrypt_table)")
    config.table_properties(key_id, data_key_length=options.get("data_key_length"),
                            format_version=options.get("format_version", 3))


def encrypt_each(spark, tables: Sequence[str], key_id: str, *, parallel: int = 1, report: str | None = None,
                 earlier: dict[str, Any] | None = None, dry_run: bool = False, progress: LakeProgress | None = None,
                 prove: Prove | None = None, skipped: dict[str, str] | None = None,
                 unfinished: dict[str, str] | None = None, catalog: str | None = None,
                 namespaces: list[str] | None = None, **options: Any) -> LakeOutcome:
    """:func:`~.encrypt.encrypt_table` for each of ``tables`` (``catalog.ns.name``), ``parallel`` at a
    time (threads sharing the one Spark session; :func:`~pyiceberg_crypto.each_table.run_each`); a
    table that fails is named with its one-line reason, the others go on. ``earlier``
    (:func:`read_report`): the tables it records as done are skipped, saying so, and stay done in
    the new report. ``report``: the JSON document of :meth:`LakeOutcome.to_dict`, written atomically
    when the run starts and after each table. ``dry_run``: nothing runs and nothing is written;
    ``outcome.planned`` says what would happen. ``progress(event)``: one event per table as it
    finishes (see :data:`LakeProgress`)."""
    _check_options(key_id, parallel, options)
    outcome = LakeOutcome(path=None if dry_run else report, catalog=catalog, key_id=key_id, dry_run=dry_run,
                          namespaces=namespaces, started_at=_now())
    say = progress or (lambda _event: None)
    outcome.skipped.update(skipped or {})
    done_earlier = outcome.carry(outcome.earlier_of(report or "", earlier)) if earlier else []
    for table in done_earlier:  # done earlier (and no longer plaintext): stays done in the report
        outcome.skipped.pop(table, None)
    todo = [table for table in tables if table not in outcome.done]
    total = len(todo)
    say({"event": "listed", "tables": total, "done_earlier": len(done_earlier), "skipped": len(outcome.skipped)})
    for table in done_earlier:
        say({"table": table, "status": SKIPPED, "n": None, "of": total, "seconds": 0.0,
             "detail": "done by an earlier run (its report)"})
    options = {"format_version": 3, **options}
    if dry_run:
        for number, table in enumerate(todo, 1):
            what = (f"would encrypt under master key {key_id!r} (format {options['format_version']})"
                    + (f"; {(unfinished or {})[table]}: would finish it" if table in (unfinished or {}) else "")
                    + ("; then purge the original" if options.get("purge_now") or options.get("purge_after") is not None
                       else "; the original kept (renamed) until purged"))
            outcome.planned[table] = what
            say({"table": table, "status": PLANNED, "n": number, "of": total, "seconds": 0.0, "detail": what})
        outcome.finished_at = _now()
        return outcome
    outcome.save()  # ReportError when it cannot be written: nothing has run

    def work(table: str):
        activate_session(spark)
        return encrypt_table(spark, table, key_id, prove=prove, **options)

    def ended(event: TableEvent) -> None:
        if event.status == DONE:
            say({"table": event.table, "status": DONE, "n": event.finished, "of": event.of,
                 "seconds": outcome.seconds[event.table], "detail": _done_detail(event.result)})
        elif event.status == FAILED:
            say({"table": event.table, "status": FAILED, "n": event.finished, "of": event.of,
                 "seconds": outcome.seconds[event.table], "detail": event.detail})

    run_each(todo, work, parallel=parallel, report=outcome, progress=ended)
    outcome.done = dict(sorted(outcome.done.items()))
    outcome.finished_at = _now()
    outcome.save(during=True)
    return outcome


def _done_detail(result) -> str:
    compared = result.compared or {}
    detail = ("encrypted by an earlier run" if result.swapped and not compared else
              f"encrypted: {compared.get('rows')} row(s) in {compared.get('partitions')} partition(s) compared")
    return detail + ("; original purged" if result.purged else
                     f"; original kept as {result.plaintext_table}" if result.plaintext_table else "")


def read_report(path: str, catalog: str | None = None) -> dict[str, Any]:
    """The report of an earlier ``encrypt --all-tables`` run, to resume from
    (:class:`~pyiceberg_crypto.errors.ReportError` when there is none, it cannot be read, is too
    large, is not such a report, or is another catalog's)."""
    earlier = LakeOutcome(path=path, catalog=catalog).resume(required=True)
    return earlier.document if earlier is not None else {}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
