"""Catalog-wide re-encryption after a compromise: find every table of a catalog that still depends
on the compromised master key versions, and re-encrypt them, one after another or several at a time (issue 42)::

    found = dependent_tables({"type": "hive", "uri": "thrift://hms:9083"}, "lake", [("orders-key", "1")], kms)
    found.tables, found.unchecked                   # ["lake.shop.orders", ...], {table: why}
    outcome = reencrypt_each(found.tables, lambda table: reencrypt_table(spark, table, ...), progress=print, parallel=2)
    outcome.ok, outcome.done, outcome.failed       # {table: result}, {table: why it stopped}

The tables are found by the JVM-free where-used listing (:func:`~.where_used.where_used_in_listing`:
the Hive metastore over Thrift or the REST catalog over HTTP; only metadata.json files are read).
A table that cannot be checked is not provably free of the material: it is reported (``unchecked``)
and makes the outcome not OK, as a table whose re-encryption failed does. One table's failure never
stops or hides the others: each is tried, and the outcome names every failure with its reason.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pyiceberg_crypto.errors import InvalidArgumentError
from pyiceberg_crypto.keys.where_used import where_used_in_listing
from pyiceberg_crypto.kms.base import KeyManagementClient
from pyiceberg_crypto.properties import CATALOG_TIMEOUT_SECONDS
from pyiceberg_crypto.safe_text import exception_line

__all__ = ["DependentTables", "EachOutcome", "dependent_tables", "reencrypt_each"]

T = TypeVar("T")


@dataclass
class DependentTables:
    """The tables that depend on the material (sorted), and those that could not be checked."""

    tables: list[str] = field(default_factory=list)
    unchecked: dict[str, str] = field(default_factory=dict)
    checked: int = 0


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


def dependent_tables(properties: dict[str, str], catalog: str, compromised_master_keys: Iterable[tuple[str, str]],
                     kms: KeyManagementClient, *, namespaces: list[str] | None = None,
                     timeout: float = CATALOG_TIMEOUT_SECONDS) -> DependentTables:
    """Every table of the catalog with these settings (``{"type": "hive", "uri": "thrift://..."}``
    or ``{"type": "rest", "uri": "http://..."}``) that has a KEK wrapped by one of the
    ``(master key id, version)`` pairs, named ``catalog.db.table``. Raises TableInputError when the
    catalog cannot be listed; InvalidArgumentError when no version is named."""
    compromised_master_keys = list(compromised_master_keys)
    if not compromised_master_keys:
        raise InvalidArgumentError("name the compromised master key versions: [(key id, version), ...]")
    found = DependentTables()
    tables: set[str] = set()
    checked: set[str] = set()
    for key_id, version in compromised_master_keys:
        uses = where_used_in_listing(properties, key_id, version, kms, catalog=catalog, timeout=timeout,
                                     namespaces=namespaces)
        tables.update(use.table for use in uses.uses)
        checked.update(uses.checked)
        found.unchecked.update(uses.unchecked)
    found.tables, found.checked = sorted(tables), len(checked)
    return found


def reencrypt_each(tables: list[str], reencrypt_one: Callable[[str], T], *,
                   progress: Callable[[str], None] | None = None, parallel: int = 1) -> EachOutcome[T]:
    """Run ``reencrypt_one(table)`` for each table, ``parallel`` at a time (threads sharing one Spark
    session: Spark runs their jobs side by side); an exception stops that table only (its one-line
    reason is kept, never key material), the others go on. The outcome lists the tables in the
    given order. InvalidArgumentError when ``reencrypt_one`` is not callable or ``parallel`` < 1."""
    if not callable(reencrypt_one):
        raise InvalidArgumentError(f"reencrypt_one must be a function of the table name, got {type(reencrypt_one).__name__}")
    if not isinstance(parallel, int) or parallel < 1:
        raise InvalidArgumentError(f"parallel must be a whole number of tables at a time (>= 1), got {parallel!r}")
    say = progress or (lambda _message: None)
    lock = threading.Lock()
    done: dict[str, T] = {}
    failed: dict[str, str] = {}

    def one(number: int, table: str) -> None:
        with lock:
            say(f"[{number}/{len(tables)}] {table}")
        try:
            result = reencrypt_one(table)
        except Exception as exc:  # noqa: BLE001 - one table's failure is its entry, the others go on
            with lock:
                failed[table] = exception_line(exc)
                say(f"[{number}/{len(tables)}] {table}: FAILED: {failed[table]}")
            return
        with lock:
            done[table] = result

    if parallel == 1:
        for number, table in enumerate(tables, 1):
            one(number, table)
    else:
        with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="reencrypt") as pool:
            for future in [pool.submit(one, number, table) for number, table in enumerate(tables, 1)]:
                future.result()
    outcome: EachOutcome[T] = EachOutcome()
    outcome.done = {t: done[t] for t in tables if t in done}
    outcome.failed = {t: failed[t] for t in tables if t in failed}
    return outcome
