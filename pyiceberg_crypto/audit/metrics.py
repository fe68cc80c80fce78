"""The catalog audit as a Prometheus textfile for the node exporter's textfile collector::

    report.write_prometheus("/var/lib/node_exporter/textfile/lake_audit.prom")
    text = render_prometheus(report.to_dict())

Per table (label ``table="namespace.name"``, plus ``catalog``): ``..._table_ok``,
``..._table_encrypted``, ``..._table_files{status=...}``, ``..._table_kek_oldest_age_days``,
``..._table_kek_rotation_due``, ``..._table_compromised_keks``, ``..._table_prunable_keks``, ``..._table_plaintext_statistics``,
``..._table_last_verified_timestamp_seconds`` (with a ledger); for the lake: ``..._ok``,
``..._tables{state=...}``, ``..._timestamp_seconds``, ``..._duration_seconds``. Only counts and
verdicts: no paths, no key material. Alert on, e.g., ``pyiceberg_crypto_audit_table_ok == 0`` or
``time() - pyiceberg_crypto_audit_timestamp_seconds > 2 * 86400`` (the nightly run stopped).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pyiceberg_crypto.safe_text import escape_text

PREFIX = "pyiceberg_crypto_audit"


def _escape(value: str) -> str:
    """A label value as the exposition format wants it (backslash, double quote, newline escaped),
    after unsafe characters (lone surrogates, controls) are written as escapes (:func:`escape_text`)."""
    return escape_text(value).replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")


def _labels(**labels: Any) -> str:
    return "{" + ",".join(f'{name}="{_escape(value)}"' for name, value in labels.items()) + "}"


def _number(value: float | int | bool) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return repr(float(value)) if isinstance(value, float) else str(value)


def _epoch(iso: str | None) -> float | None:
    if not iso:
        return None
    try:
        return datetime.fromisoformat(iso).timestamp()
    except ValueError:
        return None


def render_prometheus(doc: dict[str, Any]) -> str:
    """The textfile of a :meth:`~pyiceberg_crypto.audit.lake.CatalogReport.to_dict` document."""
    catalog = doc.get("catalog") or ""
    families: list[tuple[str, str, list[tuple[str, float | int | bool]]]] = []

    def family(name: str, help_text: str) -> list:
        samples: list = []
        families.append((f"{PREFIX}_{name}", help_text, samples))
        return samples

    ok = family("ok", "1 when every Iceberg table of the catalog is encrypted and verified OK")
    ok.append((_labels(catalog=catalog), doc["ok"]))
    family("error", "1 when no audit could be made (the catalog could not be listed): see the JSON report").append(
        (_labels(catalog=catalog), bool(doc.get("error"))))
    tables = family("tables", "tables of the catalog by audit state")
    for state, count in doc["summary"]["by_state"].items():
        tables.append((_labels(catalog=catalog, state=state), count))
    finished = _epoch(doc.get("finished_at"))
    if finished is not None:
        family("timestamp_seconds", "when the audit finished (Unix time)").append((_labels(catalog=catalog), finished))
    family("duration_seconds", "wall time of the audit").append(
        (_labels(catalog=catalog), float(doc.get("timings", {}).get("total", 0.0))))

    table_ok = family("table_ok", "1 when the table is encrypted and every check and file is OK")
    encrypted = family("table_encrypted", "1 when the table is configured for encryption (format v3 + encryption.key-id)")
    files = family("table_files", "files checked in this run, by verification status")
    oldest = family("table_kek_oldest_age_days", "age of the table's oldest KEK in days")
    due = family("table_kek_rotation_due", "KEKs past Iceberg's rotation age (730 days)")
    leaked = family("table_compromised_keks", "KEKs wrapped by a master key version marked compromised")
    prunable = family("table_prunable_keks", "KEKs that `pyiceberg-crypto keys prune` would remove")
    stats = family("table_plaintext_statistics", "statistics files stored in plaintext")
    verified = family("table_last_verified_timestamp_seconds", "when the table's ledger last recorded an OK run")
    for table in doc["tables"]:
        if not table["iceberg"]:
            continue
        labels = _labels(catalog=catalog, table=table["table"])
        table_ok.append((labels, table["ok"]))
        encrypted.append((labels, table["encrypted"]))
        for status, count in table["by_status"].items():
            files.append((_labels(catalog=catalog, table=table["table"], status=status), count))
        if table.get("oldest_kek_days") is not None:
            oldest.append((labels, float(table["oldest_kek_days"])))
        due.append((labels, sum(1 for k in table["keks"] if k.get("rotation_due"))))
        leaked.append((labels, sum(1 for k in table["keks"] if k.get("compromised"))))
        prunable.append((labels, len(table["prunable_keks"])))
        stats.append((labels, len(table["plaintext_statistics"])))
        when = _epoch((table.get("last_verified") or {}).get("verified_at"))
        if when is not None:
            verified.append((labels, when))

    lines = []
    for name, help_text, samples in families:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} gauge")
        lines += [f"{name}{labels} {_number(value)}" for labels, value in samples]
    return "\n".join(lines) + "\n"
