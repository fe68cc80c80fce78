"""The row comparison's fingerprint (pyiceberg_crypto.adopt.rows) on real Iceberg tables: equal for
the same rows in any order and file layout, different for a row changed, a null moved, a row copied
twice in place of another, or a row moved to another partition."""

from __future__ import annotations

import uuid

import pytest

from pyiceberg_crypto.adopt.rows import rows_fingerprint

#: make test runs the adopt tests in the cluster lane, which ends first (the marker `balance`, pyproject.toml).
pytestmark = pytest.mark.balance

COLUMNS = ["id", "name", "note", "p"]
KEYS = [("p", "`p`")]
ROWS = "(1, 'a', NULL, 1), (2, NULL, 'x', 1), (3, 'c', 'y', 2), (4, 'd', 'z', 2)"


def _table(spark, lake, values: str, files: int = 1) -> tuple[str, int]:
    table = f"{lake['schema']}.fp_{uuid.uuid4().hex[:6]}"
    spark.sql(f"CREATE TABLE {table} (id bigint, name string, note string, p int) USING iceberg PARTITIONED BY (p)")
    rows = [r.strip() for r in values.strip("() ").split("), (")]
    for part in range(files):  # the same rows over `files` commits, in reverse order
        chunk = rows[::-1][part::files]
        if chunk:
            spark.sql(f"INSERT INTO {table} VALUES " + ", ".join(f"({r})" for r in chunk))
    snapshot = spark.sql(f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at DESC LIMIT 1").first()[0]
    return table, snapshot


def test_adopt_fingerprint_tells_the_same_rows_from_changed_ones(spark, lake):
    def fingerprint(values: str, files: int = 1):
        return rows_fingerprint(spark, *_table(spark, lake, values, files), COLUMNS, KEYS)

    original = fingerprint(ROWS)
    assert original.rows == 4 and set(original.partitions) == {'{"p":1}', '{"p":2}'}
    assert fingerprint(ROWS, files=3) == original  # other order, other files
    changed = {
        "a value changed": ROWS.replace("'c'", "'C'"),
        "a null moved to the next column": ROWS.replace("(1, 'a', NULL, 1)", "(1, NULL, 'a', 1)"),
        "a row copied twice in place of another": ROWS.replace("(4, 'd', 'z', 2)", "(3, 'c', 'y', 2)"),
        "a row in another partition": ROWS.replace("(4, 'd', 'z', 2)", "(4, 'd', 'z', 1)"),
    }
    for what, values in changed.items():
        other = fingerprint(values)
        assert other != original, what
        assert original.differences(other), what
    same_count = original.differences(fingerprint(changed["a value changed"]))
    assert same_count == ['{"p":2}: 2 row(s) vs 2 (same count, different rows)']
