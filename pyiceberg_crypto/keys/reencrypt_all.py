"""Catalog-wide re-encryption after a compromise: find every table of a catalog that still depends
on the compromised master key versions, and re-encrypt them, one after another or several at a
time, with a report a re-run resumes from (issue 42)::

    found = dependent_tables({"type": "hive", "uri": "thrift://hms:9083"}, "lake", [("orders-key", "1")], kms)
    found.tables, found.unchecked                   # ["lake.shop.orders", ...], {table: why}
    run = reencrypt_catalog(found, "lake", reencrypt_and_prove, report="all.json", parallel=2)
    run.ok, run.done, run.not_proven, run.failed    # {table: its document}, ..., {table: why it stopped}
    carried_dependent("orders.json", "lake.shop.orders")   # what an unfinished one-table run recorded

The tables are found by the JVM-free where-used listing (:func:`~.where_used.where_used_in_listing`:
the Hive metastore over Thrift or the REST catalog over HTTP; only metadata.json files are read),
or through the Spark session's catalog. A table that cannot be checked is not provably free of the
material: it is reported (``unchecked``) and makes the outcome not OK, as a table whose
re-encryption failed does. One table's failure never stops or hides the others
(:func:`~pyiceberg_crypto.each_table.run_each`). The report (:class:`CatalogReencryption`) is
rewritten as each table ends; a re-run given the same file carries the tables the unfinished run
proved into its own (``resumed``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pyiceberg_crypto.each_table import (
    FAILED,
    STARTED,
    Earlier,
    RunReport,
    TableEvent,
    check_work,
    read_document,
    run_each,
)
from pyiceberg_crypto.errors import InvalidArgumentError
from pyiceberg_crypto.keys.where_used import where_used_in_catalog, where_used_in_listing
from pyiceberg_crypto.kms.base import KeyManagementClient
from pyiceberg_crypto.properties import CATALOG_TIMEOUT_SECONDS
from pyiceberg_crypto.safe_text import escape_text

__all__ = ["CatalogReencryption", "DependentTables", "EachOutcome", "carried_dependent", "dependent_tables",
           "earlier_proofs", "reencrypt_catalog", "reencrypt_each"]

T = TypeVar("T")


@dataclass
class DependentTables:
    """The tables that depend on the material (sorted), and those that could not be checked."""

    tables: list[str] = field(default_factory=list)
    unchecked: dict[str, str] = field(default_factory=dict)
    checked: int = 0


def dependent_tables(properties: dict[str, str] | None, catalog: str, compromised_master_keys: Iterable[tuple[str, str]],
                     kms: KeyManagementClient, *, namespaces: list[str] | None = None,
                     timeout: float = CATALOG_TIMEOUT_SECONDS, spark=None) -> DependentTables:
    """Every table of the catalog with these settings (``{"type": "hive", "uri": "thrift://..."}``
    or ``{"type": "rest", "uri": "http://..."}``; None: the catalog of the Spark session ``spark``)
    that has a KEK wrapped by one of the ``(master key id, version)`` pairs, named
    ``catalog.db.table``. Raises TableInputError when the catalog cannot be listed;
    InvalidArgumentError when no version is named, or neither settings nor a session are given."""
    compromised_master_keys = list(compromised_master_keys)
    if not compromised_master_keys:
        raise InvalidArgumentError("name the compromised master key versions: [(key id, version), ...]")
    if properties is None and spark is None:
        raise InvalidArgumentError("give the catalog's settings, or the Spark session whose catalog lists the tables")
    found = DependentTables()
    tables: set[str] = set()
    checked: set[str] = set()
    for key_id, version in compromised_master_keys:
        if properties is None:
            uses = where_used_in_catalog(spark, catalog, key_id, version, kms)
        else:
            uses = where_used_in_listing(properties, key_id, version, kms, catalog=catalog, timeout=timeout,
                                         namespaces=namespaces)
        tables.update(use.table for use in uses.uses)
        checked.update(uses.checked)
        found.unchecked.update(uses.unchecked)
    found.tables, found.checked = sorted(tables), len(checked)
    return found


@dataclass
class CatalogReencryption(RunReport[dict[str, Any]]):
    """The run of :func:`reencrypt_catalog` and its report (``keys reencrypt --all-tables
    --report``): per table, its document (``{"table", "reencrypt", "before", "proof", ...}``) when
    proven (``done``) or when its proof is not OK (``not_proven``), or why it stopped (``failed``);
    the tables the listing could not check (``unchecked``), and those ``resumed`` from an earlier
    run's report. ``ok`` once ``finished`` with nothing failed, unproven or unchecked."""

    tables: list[str] = field(default_factory=list)
    unchecked: dict[str, str] = field(default_factory=dict)
    not_proven: dict[str, dict[str, Any]] = field(default_factory=dict)
    finished: bool = False

    @property
    def ok(self) -> bool:
        return self.finished and not (self.unchecked or self.not_proven or self.failed)

    def to_dict(self) -> dict[str, Any]:
        return {"catalog": self.catalog, "tables": list(self.tables), "unchecked": dict(self.unchecked),
                "resumed": sorted(self.carried), "done": dict(self.done), "not_proven": dict(self.not_proven),
                "failed": dict(self.failed), "ok": self.ok, "finished": self.finished}

    def usable(self, path: str, document: Any) -> bool:
        """An earlier report is resumed from when it is this catalog's and did not end with every
        table proven; any other readable file is started afresh (overwritten)."""
        return isinstance(document, dict) and document.get("catalog") == self.catalog and not document.get("ok")

    def earlier_of(self, path: str, document: dict[str, Any]) -> Earlier:
        done = document.get("done")
        failed = document.get("failed")
        return Earlier(path, document,
                       {str(t): d for t, d in done.items() if isinstance(d, dict)} if isinstance(done, dict) else {},
                       {str(t): str(w) for t, w in failed.items()} if isinstance(failed, dict) else {})

    def record(self, table: str, *, result: dict[str, Any] | None = None, error: BaseException | None = None,
               seconds: float = 0.0) -> str:
        proof = (result or {}).get("proof")
        if error is None and isinstance(proof, dict) and not proof.get("ok"):
            with self.lock:
                self.not_proven[table] = result  # type: ignore[assignment]
                return ""
        return super().record(table, result=result, error=error, seconds=seconds)


def earlier_proofs(path: str, catalog: str) -> dict[str, dict[str, Any]]:
    """The tables an earlier ``--all-tables`` run of ``catalog`` proved, from its report at
    ``path``, when that run did not end with every table proven (stopped, or some failed); else
    none. ReportError when the file cannot be read (too large, not JSON)."""
    earlier = CatalogReencryption(path=path, catalog=catalog).resume()
    return earlier.done if earlier is not None else {}


def carried_dependent(path: str, table: str) -> list[str]:
    """The dependent files an earlier, unfinished one-table run of ``table`` recorded in its report
    at ``path``: what depended before it, what it carried, the exposed files on storage (none when
    the file is absent, another table's, or finished). ReportError when it cannot be read."""
    earlier = read_document(path)
    if not isinstance(earlier, dict) or earlier.get("table") != table or earlier.get("finished", True):
        return []
    before = earlier.get("before") or {}
    exposed = [f.get("path") for f in ((before.get("storage") or {}).get("findings") or [])
               if isinstance(f, dict) and f.get("finding") == "EXPOSED_FILE"]
    return sorted({*map(str, before.get("dependent") or []), *map(str, earlier.get("carried_dependent") or []),
                   *map(str, filter(None, exposed))})


def reencrypt_catalog(found: DependentTables, catalog: str, reencrypt_one: Callable[[str], dict[str, Any]], *,
                      report: str | None = None, parallel: int = 1,
                      progress: Callable[[str], None] | None = None) -> CatalogReencryption:
    """``reencrypt_one(table)`` (the table's JSON document, its ``"proof"`` with ``"ok"``) for each
    of ``found.tables``, ``parallel`` at a time. With ``report``: the tables an unfinished earlier
    run of ``catalog`` proved there (:func:`earlier_proofs`) that no longer depend are carried over
    (``resumed``); the report is written when the run starts, after each table and at the end.
    ``progress``: one line per table as it starts, and per failure.

    Raises (nothing has run): ReportError when the earlier report cannot be read or the report
    cannot be written; InvalidArgumentError for a bad ``parallel`` or ``reencrypt_one``."""
    check_work(reencrypt_one, parallel)
    say = progress or (lambda _line: None)
    run = CatalogReencryption(path=report, catalog=catalog, tables=list(found.tables), unchecked=dict(found.unchecked))
    earlier = run.resume()
    resumed = run.carry(earlier, rerun=found.tables) if earlier is not None else []
    if resumed:
        say(f"resumed from {escape_text(report or '')}: {len(resumed)} table(s) proven by an earlier run "
            f"({', '.join(escape_text(t) for t in resumed)})")
    run.save()
    run_each(found.tables, reencrypt_one, parallel=parallel, report=run, progress=_lines(say))
    run.finished = True
    run.save()
    return run


@dataclass
class EachOutcome(Generic[T]):
    """What :func:`reencrypt_each` did: every table's result, or why it stopped."""

    done: dict[str, T] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failed

    def to_dict(self, result: Callable[[T], Any] = lambda r: r) -> dict[str, Any]:
        return {"ok": self.ok, "done": {t: result(r) for t, r in self.done.items()}, "failed": dict(self.failed)}


def reencrypt_each(tables: list[str], reencrypt_one: Callable[[str], T], *,
                   progress: Callable[[str], None] | None = None, parallel: int = 1) -> EachOutcome[T]:
    """Deprecated: :func:`~pyiceberg_crypto.each_table.run_each` (this is it, with one line per
    table as it starts and per failure to ``progress``). Goes in the next release."""
    warnings.warn("pyiceberg_crypto.keys.reencrypt_each is pyiceberg_crypto.each_table.run_each; it goes in the next "
                  "release", DeprecationWarning, stacklevel=2)
    run = run_each(tables, reencrypt_one, parallel=parallel, progress=_lines(progress or (lambda _line: None)))
    return EachOutcome(dict(run.done), dict(run.failed))


def _lines(say: Callable[[str], None]) -> Callable[[TableEvent], None]:
    """A table's start (``[2/5] lake.db.t``) and failure (``[2/5] lake.db.t: FAILED: why``) as lines."""

    def tell(event: TableEvent) -> None:
        if event.status == STARTED:
            say(f"[{event.index}/{event.of}] {escape_text(event.table)}")
        elif event.status == FAILED:
            say(f"[{event.index}/{event.of}] {escape_text(event.table)}: FAILED: {event.detail}")

    return tell
