"""The catalog audit as a Prometheus textfile for the node exporter's textfile collector::

    report.write_prometheus("/var/lib/node_exporter/textfile/lake_audit.prom")
    text = render_prometheus(report.to_dict())

Per table (label ``table="namespace.name"``, plus ``catalog``): ``..._table_ok``,
``..._table_encrypted``, ``..._table_files{status=...}``, ``..._table_kek_oldest_age_days``,
``..._table_kek_rotation_due``, ``..._table_compromised_keks``, ``..._table_prunable_keks``, ``..._table_plaintext_statistics``,
``..._table_last_verified_timestamp_seconds`` (with a ledger), ``..._table_readable{engine=...}``
(1/0: can the engine read the current snapshot; :mod:`pyiceberg_crypto.engines`),
``..._table_declared_reader_blocked``; for the lake: ``..._ok``,
``..._tables{state=...}``, ``..._timestamp_seconds``, ``..._duration_seconds``. Only counts and
verdicts: no paths, no key material. Alert on, e.g., ``pyiceberg_crypto_audit_table_ok == 0`` or
``time() - pyiceberg_crypto_audit_timestamp_seconds > 2 * 86400`` (the nightly run stopped), or
``pyiceberg_crypto_audit_table_declared_reader_blocked == 1`` (a table made for Trino holds what
Trino cannot read).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pyiceberg_crypto._prometheus import gauge, render
from pyiceberg_crypto.safe_text import escape_text

__all__ = ["PREFIX", "render_prometheus"]

PREFIX = "pyiceberg_crypto_audit"


def _epoch(iso: str | None) -> float | None:
    if not iso:
        return None
    try:
        return datetime.fromisoformat(iso).timestamp()
    except ValueError:
        return None


def render_prometheus(doc: dict[str, Any]) -> str:
    """The textfile of a :meth:`~pyiceberg_crypto.audit.lake.CatalogReport.to_dict` document; a
    field the document lacks is rendered as absent (no sample), never an exception."""
    catalog = escape_text(doc.get("catalog") or "")
    families: list[tuple[str, str, tuple[str, ...], dict]] = []

    def family(name: str, help_text: str, *labels: str) -> dict:
        samples: dict = {}
        families.append((f"{PREFIX}_{name}", help_text, ("catalog", *labels), samples))
        return samples

    family("ok", "1 when every Iceberg table of the catalog is encrypted and verified OK")[(catalog,)] = bool(doc.get("ok"))
    family("error", "1 when no audit could be made (the catalog could not be listed): see the JSON report")[
        (catalog,)] = bool(doc.get("error"))
    tables = family("tables", "tables of the catalog by audit state", "state")
    for state, count in (doc.get("summary") or {}).get("by_state", {}).items():
        tables[(catalog, state)] = count
    finished = _epoch(doc.get("finished_at"))
    if finished is not None:
        family("timestamp_seconds", "when the audit finished (Unix time)")[(catalog,)] = finished
    family("duration_seconds", "wall time of the audit")[(catalog,)] = float(doc.get("timings", {}).get("total", 0.0))

    table_ok = family("table_ok", "1 when the table is encrypted and every check and file is OK", "table")
    encrypted = family("table_encrypted", "1 when the table is configured for encryption (format v3 + encryption.key-id)",
                       "table")
    files = family("table_files", "files checked in this run, by verification status", "table", "status")
    oldest = family("table_kek_oldest_age_days", "age of the table's oldest KEK in days", "table")
    due = family("table_kek_rotation_due", "KEKs past Iceberg's rotation age (730 days)", "table")
    leaked = family("table_compromised_keks", "KEKs wrapped by a master key version marked compromised", "table")
    prunable = family("table_prunable_keks", "KEKs that `pyiceberg-crypto keys prune` would remove", "table")
    stats = family("table_plaintext_statistics", "statistics files stored in plaintext", "table")
    verified = family("table_last_verified_timestamp_seconds", "when the table's ledger last recorded an OK run", "table")
    readable = family("table_readable", "1 when the engine can read the table's current snapshot, 0 when it cannot "
                      "(no sample: not known)", "table", "engine")
    blocked = family("table_declared_reader_blocked", "1 when the table's pyiceberg-crypto.readers names an engine "
                     "that cannot read it (or its modes will write what that engine cannot read)", "table")
    for table in doc.get("tables") or []:
        if not table.get("iceberg"):
            continue
        key = (catalog, escape_text(table.get("table", "")))
        keks = table.get("keks") or []
        table_ok[key] = bool(table.get("ok"))
        encrypted[key] = bool(table.get("encrypted"))
        for status, count in (table.get("by_status") or {}).items():
            files[(*key, escape_text(status))] = count
        if table.get("oldest_kek_days") is not None:
            oldest[key] = float(table["oldest_kek_days"])
        due[key] = sum(1 for k in keks if k.get("rotation_due"))
        leaked[key] = sum(1 for k in keks if k.get("compromised"))
        prunable[key] = len(table.get("prunable_keks") or [])
        stats[key] = len(table.get("plaintext_statistics") or [])
        for answer in table.get("readable_by") or []:
            if answer.get("readable") is not None:
                readable[(*key, escape_text(answer.get("engine", "")))] = bool(answer["readable"])
        blocked[key] = bool(table.get("declared_reader_blocked"))
        when = _epoch((table.get("last_verified") or {}).get("verified_at"))
        if when is not None:
            verified[key] = when
    return render([gauge(name, help_text, samples, labels) for name, help_text, labels, samples in families])
