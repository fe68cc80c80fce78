"""The Arrow semi-join that applies equality deletes equals the spec's rule, checked row by row
against a Python reference: a row is deleted when its key tuple equals a deleted tuple, null
matching null (spec "Equality Delete Files"), with int keys read as long after a promotion."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from pyiceberg_crypto.read._deletes import equality_deleted


def reference(columns: list[list], deleted: list[tuple]) -> list[bool]:
    keys = set(deleted)
    return [tuple(values) in keys for values in zip(*columns)]


@pytest.mark.parametrize("width", [1, 2, 3])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_semi_join_equals_the_reference_with_nulls(width, seed):
    rng = random.Random(seed * 10 + width)
    pools = [[None, 0, 1, 2, 3], [None, "a", "b", "é"], [None, 10, 20]]
    types = [pa.int64(), pa.string(), pa.int32()]
    rows = [[rng.choice(pools[c]) for c in range(width)] for _ in range(400)]
    deleted = {tuple(rng.choice(pools[c]) for c in range(width)) for _ in range(3 if width == 1 else 12)}
    columns = [pa.chunked_array([pa.array([r[c] for r in rows[:150]], types[c]),
                                 pa.array([r[c] for r in rows[150:]], types[c])]) for c in range(width)]
    delete_table = pa.table({f"k{c}": pa.array([d[c] for d in deleted], types[c]) for c in range(width)})
    got = equality_deleted(columns, delete_table).to_pylist()
    expected = reference([[r[c] for r in rows] for c in range(width)], list(deleted))
    assert got == expected and any(expected) and not all(expected)


def test_keys_written_before_an_int_to_long_promotion_still_match():
    data = [pa.chunked_array([pa.array([1, 2, 3, None], pa.int64())])]
    deleted = pa.table({"k0": pa.array([2, None], pa.int32())})
    assert equality_deleted(data, deleted).to_pylist() == [False, True, False, True]
