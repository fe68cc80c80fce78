"""Iceberg schemas in Arrow and projection by field id (pure: no Spark). The Spark comparisons in
test_read_vs_spark.py cover the same code on files Iceberg wrote."""

from __future__ import annotations

import io
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pyiceberg_crypto.errors import InvalidArgumentError
from pyiceberg_crypto.formats.parquet import ParquetFileReader
from pyiceberg_crypto.formats.parquet.structs import FileMetaDataF
from pyiceberg_crypto.read.schema import FIELD_ID_KEY, IcebergSchema, parquet_leaves, project


def fid(name, type_, i, nullable=True):
    return pa.field(name, type_, nullable, metadata={FIELD_ID_KEY: str(i).encode()})


SCHEMA = {"schema-id": 3, "fields": [
    {"id": 1, "name": "id", "required": True, "type": "long"},
    {"id": 2, "name": "point", "required": False, "type": {"type": "struct", "fields": [
        {"id": 5, "name": "x", "required": False, "type": "double"},
        {"id": 7, "name": "z", "required": False, "type": "double"}]}},
    {"id": 3, "name": "tags", "required": False, "type": {
        "type": "list", "element-id": 6, "element": "string", "element-required": False}},
    {"id": 4, "name": "added", "required": False, "type": "int", "initial-default": 7},
    {"id": 8, "name": "price", "required": False, "type": "decimal(12, 2)"},
]}


def file_table() -> pa.Table:
    """A file written under an older schema: id as int, point.x named 'px', a dropped column."""
    schema = pa.schema([
        fid("dropped", pa.string(), 9),
        fid("old_id", pa.int32(), 1),
        fid("point", pa.struct([fid("px", pa.float64(), 5), fid("y", pa.float64(), 11)]), 2),
        fid("tags", pa.list_(fid("element", pa.string(), 6)), 3),
        fid("price", pa.decimal128(9, 2), 8),
    ])
    return pa.table([["a", "b"], [1, 2], [{"px": 0.5, "y": 1.0}, None], [["t"], None], [1, None]], schema=schema)


def test_arrow_types_and_current_schema():
    schema = IcebergSchema.from_metadata({"current-schema-id": 3, "schemas": [SCHEMA]}, None)
    arrow = schema.arrow_schema
    assert arrow.field("id").type == pa.int64() and not arrow.field("id").nullable
    assert arrow.field("point").type == pa.struct([fid("x", pa.float64(), 5), fid("z", pa.float64(), 7)])
    assert arrow.field("price").type == pa.decimal128(12, 2)
    with pytest.raises(InvalidArgumentError, match="schema 4 is not in the table metadata"):
        IcebergSchema.from_metadata({"current-schema-id": 4, "schemas": [SCHEMA]}, None)
    with pytest.raises(InvalidArgumentError, match="unsupported Iceberg type 'variant'"):
        IcebergSchema.from_json({"fields": [{"id": 1, "name": "v", "required": False, "type": "variant"}]})


def test_project_matches_by_field_id_renames_promotes_and_fills():
    schema = IcebergSchema.from_json(SCHEMA)
    projected = project(file_table(), schema.fields)
    assert projected.schema == schema.arrow_schema
    assert projected.to_pylist() == [
        {"id": 1, "point": {"x": 0.5, "z": None}, "tags": ["t"], "added": 7, "price": Decimal("1.00")},
        {"id": 2, "point": None, "tags": None, "added": 7, "price": None},
    ]


def test_select_keeps_the_order_asked_and_names_unknown_columns():
    schema = IcebergSchema.from_json(SCHEMA)
    assert [f.name for f in schema.select(["tags", "id"]).fields] == ["tags", "id"]
    with pytest.raises(InvalidArgumentError, match=r"no column 'nope' in the table schema \(columns: id, point"):
        schema.select(["id", "nope"])


def test_parquet_leaves_of_nested_top_level_fields():
    sink = io.BytesIO()
    pq.write_table(file_table(), sink)
    reader = ParquetFileReader(io.BytesIO(sink.getvalue()))
    elements = list(reader.footer.metadata.get(FileMetaDataF.SCHEMA).items)
    # leaves: dropped(0) old_id(1) point.px(2) point.y(3) tags.list.element(4) price(5)
    assert parquet_leaves(elements, {2}) == [2, 3]
    assert parquet_leaves(elements, {1, 3}) == [1, 4]
    assert parquet_leaves(elements, {8, 9}) == [0, 5]
    assert parquet_leaves(elements, {5}) == []  # only top-level ids select
