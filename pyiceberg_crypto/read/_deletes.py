"""Apply a data file's deletes to its rows (spec "Row-level Deletes").

Position deletes and deletion vectors remove rows by position in the data file; equality deletes
remove rows whose values in the equality columns equal a deleted tuple (null matches null).
Which delete files apply was decided by the plan (:mod:`pyiceberg_crypto.read.plan`).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from pyiceberg_crypto.errors import FormatError, ReadIntegrityError
from pyiceberg_crypto.io import FileIO
from pyiceberg_crypto.read._files import (
    OnceCache,
    read_deletion_vector,
    read_equality_deletes,
    read_position_deletes,
)
from pyiceberg_crypto.read.plan import ReadTask
from pyiceberg_crypto.read.schema import field_id


class DeleteCaches:
    """Delete files shared by many data files, each read once per scan."""

    def __init__(self):
        self.puffin, self.positions, self.equality = OnceCache(), OnceCache(), OnceCache()


def equality_field_ids(task: ReadTask) -> set[int]:
    """Columns the data file must be read with so its equality deletes can be applied."""
    return {i for delete in task.equality_deletes for i in delete.equality_ids}


def apply_deletes(task: ReadTask, table: pa.Table, file_io: FileIO, caches: DeleteCaches,
                  row_ranges: list[tuple[int, int]] | None = None) -> pa.Table:
    """``table`` (all rows of ``task.data`` in file order, or the rows of ``row_ranges``: the
    positions it holds when row groups were skipped) without its deleted rows."""
    if not (task.deletion_vectors or task.position_deletes or task.equality_deletes):
        return table
    rows = table.num_rows
    mask = None
    if task.deletion_vectors or task.position_deletes:
        positions = task.data.record_count if row_ranges is not None else rows
        keep = _position_keep(task, positions, file_io, caches)
        if row_ranges is not None:
            keep = b"".join(keep[start:end] for start, end in row_ranges)
        mask = pa.Array.from_buffers(pa.uint8(), rows, [None, pa.py_buffer(keep)]).cast(pa.bool_())
    if task.equality_deletes:
        by_id = {field_id(f): i for i, f in enumerate(table.schema)}
        for delete in task.equality_deletes:
            deleted = read_equality_deletes(delete, file_io, caches.equality)
            if deleted.num_rows == 0 or rows == 0:
                continue
            columns = [table.column(by_id[i]) if i in by_id else pa.nulls(rows, deleted.column(n).type)
                       for n, i in enumerate(delete.equality_ids)]
            hit = pc.invert(equality_deleted(columns, deleted))
            mask = hit if mask is None else pc.and_(mask, hit)
    return table if mask is None else table.filter(mask)


def _position_keep(task: ReadTask, rows: int, file_io: FileIO, caches: DeleteCaches) -> bytearray:
    """One byte per row position of the data file: 1 kept, 0 deleted by a DV or position delete."""
    keep: bytearray | None = None
    for delete in task.deletion_vectors:  # one per data file in a v3 table
        vector = read_deletion_vector(delete, file_io, caches.puffin)
        if keep is None:
            try:
                keep = vector.keep_mask(rows)  # runs and bitmaps written as slices, not position by position
            except FormatError as exc:
                raise ReadIntegrityError(f"{exc.reason} (data file {task.data.path})", file=delete.path) from None
        else:
            _clear(keep, vector.positions(), delete.path, task.data.path)
    if keep is None:
        keep = bytearray(b"\x01") * rows
    for delete in task.position_deletes:
        _clear(keep, read_position_deletes(delete, file_io, caches.positions).get(task.data.path, ()), delete.path,
               task.data.path)
    return keep


def equality_deleted(columns: list, deleted: pa.Table) -> pa.Array:
    """Which rows (``columns``: the data file's equality columns) equal a deleted key tuple, null
    matching null, as a boolean array: a hash semi-join in Arrow (one column: ``is_in``)."""
    rows = len(columns[0])
    keys = [deleted.column(n).cast(column.type) for n, column in enumerate(columns)]  # int -> long etc.
    if len(columns) == 1:
        return pc.is_in(columns[0], value_set=keys[0].combine_chunks(), skip_nulls=False)
    names = [f"k{n}" for n in range(len(columns))]
    # Arrow's joins never match null keys: rows with a null key are compared in Python (few, usually).
    has_null = _any([pc.is_null(c) for c in columns])
    left = pa.table({**dict(zip(names, columns)), "__row": pa.array(range(rows), pa.int64())})
    right = pa.table(dict(zip(names, keys))).group_by(names).aggregate([])
    hit = left.join(right, keys=names, join_type="left semi").column("__row")
    deleted_rows = bytearray(rows)
    for row in hit.to_pylist():
        deleted_rows[row] = 1
    null_rows = pc.indices_nonzero(has_null).to_pylist()
    if null_rows:
        tuples = set(zip(*[k.to_pylist() for k in keys]))
        values = [c.take(pa.array(null_rows)).to_pylist() for c in columns]
        for row, key in zip(null_rows, zip(*values)):
            if key in tuples:
                deleted_rows[row] = 1
    return pa.Array.from_buffers(pa.uint8(), rows, [None, pa.py_buffer(deleted_rows)]).cast(pa.bool_())


def _any(masks: list) -> pa.Array:
    result = masks[0]
    for mask in masks[1:]:
        result = pc.or_(result, mask)
    return result


def _clear(keep: bytearray, positions, delete_path: str, data_path: str) -> None:
    rows = len(keep)
    for pos in positions:
        if not 0 <= pos < rows:
            raise ReadIntegrityError(f"deletes position {pos} of {data_path}, which has {rows} rows", file=delete_path)
        keep[pos] = 0
