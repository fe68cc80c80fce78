"""An order-independent fingerprint of a table's rows at one snapshot, per partition of its current
spec: the row count and the sum (as a 38-digit decimal: no overflow) of the 64-bit ``xxhash64`` of
each row's canonical serialization (``to_json`` of a struct of every column, by name: nulls, nested
values and types included), so two tables with the same rows have the same fingerprint whatever
their file layout. The hash is not cryptographic, and need not be: it catches a row lost, changed
or copied twice (the comparison's job); the copy's authenticity is the verifier's proof. It costs
about a third of a SHA-256 of the same serialization (2 million rows on 2 cores: 1.0 s vs 2.8 s)::

    fingerprint = rows_fingerprint(spark, "lake.db.orders", snapshot_id, columns, partition_keys)
    fingerprint == rows_fingerprint(spark, "lake.db.orders__encrypting", other_id, columns, partition_keys)

The partition key of a row is computed from the row (Iceberg's ``system`` transform functions), not
from the file it is in, so a table whose older files were written under an older spec is grouped
like its copy.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RowsFingerprint"]  # the functions are the encrypt run's helpers

#: Iceberg transform (``PartitionField.transform().toString()``) -> Spark function of the catalog's ``system``.
_TIME_FUNCTIONS = {"year": "years", "month": "months", "day": "days", "hour": "hours"}


@dataclass(frozen=True)
class RowsFingerprint:
    """``{partition key (JSON): (rows, hash sum)}`` of one table at one snapshot."""

    partitions: dict[str, tuple[int, int]]

    @property
    def rows(self) -> int:
        return sum(count for count, _ in self.partitions.values())

    def differences(self, other: RowsFingerprint) -> list[str]:
        """The partitions whose count or hash differ (``key: count a vs count b``), sorted."""
        keys = sorted(set(self.partitions) | set(other.partitions))
        return [f"{key}: {self.partitions.get(key, (0, 0))[0]} row(s) vs {other.partitions.get(key, (0, 0))[0]}"
                + ("" if self.partitions.get(key, (0, 0))[0] != other.partitions.get(key, (0, 0))[0] else
                   " (same count, different rows)")
                for key in keys if self.partitions.get(key) != other.partitions.get(key)]


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def partition_key_expressions(catalog: str, fields: list[tuple[str, str, str]]) -> list[tuple[str, str]]:
    """(name, Spark SQL expression) of each partition field ``(name, transform, source column)``
    (void fields have no key)."""
    out = []
    for name, transform, source in fields:
        column = ".".join(quote(part) for part in source.split("."))
        if transform == "identity":
            expression = column
        elif transform.startswith(("bucket[", "truncate[")):
            kind, argument = transform[:-1].split("[", 1)
            expression = f"{quote(catalog)}.system.{kind}({int(argument)}, {column})"
        elif transform in _TIME_FUNCTIONS:
            expression = f"{quote(catalog)}.system.{_TIME_FUNCTIONS[transform]}({column})"
        else:  # void (and anything unknown: no grouping by it, the hash still covers the rows)
            continue
        out.append((name, expression))
    return out


def rows_fingerprint(spark, table: str, snapshot_id: int | None, columns: list[str],
                     keys: list[tuple[str, str]]) -> RowsFingerprint:
    """The fingerprint of ``table`` (``catalog.db.name``) at ``snapshot_id`` (None: no rows)."""
    if snapshot_id is None:
        return RowsFingerprint({})
    row = "to_json(struct(" + ", ".join(quote(c) for c in columns) + "))"
    key = ("to_json(named_struct(" + ", ".join(f"'{name}', {expression}" for name, expression in keys) + "))"
           if keys else "'{}'")
    query = (f"SELECT {key} AS k, count(*) AS n, "
             f"sum(CAST(xxhash64({row}) AS DECIMAL(38, 0))) AS h "
             f"FROM {table} VERSION AS OF {int(snapshot_id)} GROUP BY 1")
    return RowsFingerprint({str(r["k"]): (int(r["n"]), int(r["h"] or 0)) for r in spark.sql(query).collect()})
