"""Iceberg schemas in Arrow, and a data file's columns matched to them by field id.

Iceberg identifies columns by field id, never by name or position (spec "Schema Evolution"): a
renamed column keeps its id, a dropped and re-added one gets a new id, reordering changes nothing.
So a file written under an older schema is read by id::

    schema = IcebergSchema.from_metadata(doc, snapshot)       # the schema a read uses
    schema.arrow_schema                                        # Arrow types, current names
    table = project(file_table, schema.fields)                 # file columns -> read schema

Type promotions Iceberg allows (int -> long, float -> double, widening decimal precision) are
casts; a column the file does not have is null (or its ``initial-default``).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from pyiceberg_crypto._deprecated import renamed_classes
from pyiceberg_crypto.formats.parquet.structs import SchemaElementF
from pyiceberg_crypto.errors import InvalidArgumentError

__all__ = ["Field", "IcebergSchema", "arrow_type"]

#: Old names, kept for one release (CHANGELOG.md).
__getattr__ = renamed_classes(__name__, {"SchemaError": InvalidArgumentError})

FIELD_ID_KEY = b"PARQUET:field_id"  # how PyArrow exposes a Parquet field id on an Arrow field
_DECIMAL = re.compile(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)")
_FIXED = re.compile(r"fixed\[\s*(\d+)\s*\]")
_PRIMITIVES = {
    "boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(), "float": pa.float32(),
    "double": pa.float64(), "date": pa.date32(), "time": pa.time64("us"),
    "timestamp": pa.timestamp("us"), "timestamptz": pa.timestamp("us", tz="UTC"),
    "timestamp_ns": pa.timestamp("ns"), "timestamptz_ns": pa.timestamp("ns", tz="UTC"),
    "string": pa.string(), "uuid": pa.binary(16), "binary": pa.binary(), "unknown": pa.null(),
}


@dataclass(frozen=True)
class Field:
    """One Iceberg field: id, name, Arrow type and, for nested types, its children by role."""

    field_id: int
    name: str
    required: bool
    type: Any  # the Iceberg type as in the metadata JSON (a string or a dict)
    arrow_type: pa.DataType
    children: tuple[Field, ...] = ()  # struct fields; list: (element,); map: (key, value)
    initial_default: Any = None

    @property
    def arrow_field(self) -> pa.Field:
        return pa.field(self.name, self.arrow_type, nullable=not self.required,
                        metadata={FIELD_ID_KEY: str(self.field_id).encode()})


@dataclass(frozen=True)
class IcebergSchema:
    schema_id: int | None
    fields: tuple[Field, ...]

    @property
    def arrow_schema(self) -> pa.Schema:
        return pa.schema([f.arrow_field for f in self.fields])

    def select(self, columns: list[str] | None) -> IcebergSchema:
        """The top-level ``columns`` (by their current names, in the order given)."""
        if columns is None:
            return self
        by_name = {f.name: f for f in self.fields}
        unknown = [c for c in columns if c not in by_name]
        if unknown:
            raise InvalidArgumentError(f"no column {', '.join(map(repr, unknown))} in the table schema "
                                       f"(columns: {', '.join(by_name)})")
        return IcebergSchema(self.schema_id, tuple(by_name[c] for c in columns))

    @classmethod
    def from_json(cls, doc: dict) -> IcebergSchema:
        try:
            return cls(doc.get("schema-id"), tuple(_field(f) for f in doc["fields"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidArgumentError(f"unreadable schema {doc.get('schema-id') if isinstance(doc, dict) else ''}: "
                                       f"{type(exc).__name__}: {exc}") from None

    @classmethod
    def from_metadata(cls, doc: dict, schema_id: int | None) -> IcebergSchema:
        """Schema ``schema_id`` of a metadata.json document (None: the current schema)."""
        schemas = doc.get("schemas")
        if not schemas and isinstance(doc.get("schema"), dict):  # format v1 metadata
            return cls.from_json(doc["schema"])
        wanted = doc.get("current-schema-id") if schema_id is None else schema_id
        for schema in schemas or []:
            if isinstance(schema, dict) and schema.get("schema-id") == wanted:
                return cls.from_json(schema)
        raise InvalidArgumentError(f"schema {wanted} is not in the table metadata")


def arrow_type(iceberg_type: Any) -> pa.DataType:
    """The Arrow type of an Iceberg type (spec "Schemas and Data Types")."""
    return _field({"id": 0, "name": "_", "required": False, "type": iceberg_type}).arrow_type


def _field(doc: dict) -> Field:
    kind = doc["type"]
    fid, name, required = int(doc["id"]), str(doc["name"]), bool(doc.get("required", False))
    default = doc.get("initial-default")
    if isinstance(kind, str):
        return Field(fid, name, required, kind, _primitive(kind), (), default)
    nested = kind["type"]
    if nested == "struct":
        children = tuple(_field(f) for f in kind["fields"])
        return Field(fid, name, required, kind, pa.struct([c.arrow_field for c in children]), children, default)
    if nested == "list":
        element = _field({"id": kind["element-id"], "name": "element", "required": kind.get("element-required", False),
                          "type": kind["element"]})
        return Field(fid, name, required, kind, pa.list_(element.arrow_field), (element,), default)
    if nested == "map":
        key = _field({"id": kind["key-id"], "name": "key", "required": True, "type": kind["key"]})
        value = _field({"id": kind["value-id"], "name": "value", "required": kind.get("value-required", False),
                        "type": kind["value"]})
        return Field(fid, name, required, kind, pa.map_(key.arrow_field, value.arrow_field), (key, value), default)
    raise InvalidArgumentError(f"column {name!r}: unsupported type {nested!r}")


def _primitive(kind: str) -> pa.DataType:
    if kind in _PRIMITIVES:
        return _PRIMITIVES[kind]
    match = _DECIMAL.fullmatch(kind)
    if match:
        return pa.decimal128(int(match.group(1)), int(match.group(2)))
    match = _FIXED.fullmatch(kind)
    if match:
        return pa.binary(int(match.group(1)))
    raise InvalidArgumentError(f"unsupported Iceberg type {kind!r} (variant, geometry and geography are not read yet)")


# --- Parquet: which leaf columns hold the wanted fields ---------------------------------------


def parquet_leaves(elements: list, field_ids: set[int]) -> list[int]:
    """Leaf column ordinals of the top-level fields whose field id is in ``field_ids``, from a
    Parquet footer's SchemaElement list (depth-first, ``num_children`` per group; spec
    parquet-format "Metadata")."""
    leaves: list[int] = []
    pos, leaf = 1, 0  # element 0 is the root
    root_children = elements[0].get(SchemaElementF.NUM_CHILDREN, 0) if elements else 0
    for _ in range(root_children):
        wanted = elements[pos].get(SchemaElementF.FIELD_ID) in field_ids
        pos, count = _subtree(elements, pos)
        if wanted:
            leaves.extend(range(leaf, leaf + count))
        leaf += count
    return leaves


def _subtree(elements: list, pos: int) -> tuple[int, int]:
    """(position after the subtree at ``pos``, number of leaves in it)."""
    stack, leaves = [1], 0
    while stack:
        stack[-1] -= 1
        element = elements[pos]
        pos += 1
        children = element.get(SchemaElementF.NUM_CHILDREN, 0) or 0
        if children:
            stack.append(children)
        else:
            leaves += 1
        while stack and stack[-1] == 0:
            stack.pop()
    return pos, leaves


# --- projection: a file's Arrow columns onto the read schema ----------------------------------


def field_id(arrow_field: pa.Field) -> int | None:
    value = (arrow_field.metadata or {}).get(FIELD_ID_KEY)
    return int(value) if value is not None else None


def project(table: pa.Table, fields: tuple[Field, ...]) -> pa.Table:
    """The file's ``table`` as the read schema: columns matched by field id, renamed, promoted;
    missing ones null (or their initial default)."""
    by_id = {field_id(f): i for i, f in enumerate(table.schema)}
    columns = []
    for target in fields:
        index = by_id.get(target.field_id)
        if index is None:
            columns.append(_missing(target, table.num_rows))
        else:
            column = table.column(index)
            source = table.schema.field(index)
            columns.append(pa.chunked_array([_array(chunk, source, target) for chunk in column.chunks],
                                            type=target.arrow_type) if column.num_chunks else
                           pa.chunked_array([], type=target.arrow_type))
    return pa.Table.from_arrays(columns, schema=pa.schema([f.arrow_field for f in fields]))


def _missing(target: Field, rows: int) -> pa.Array:
    """A column the file does not have: its ``initial-default`` (spec "Default values"), else nulls."""
    if target.initial_default is not None and not target.children:
        return pa.repeat(default_scalar(target), rows)
    return pa.nulls(rows, type=target.arrow_type)


def default_scalar(target: Field) -> pa.Scalar:
    """A primitive ``initial-default`` in the spec's JSON single-value serialization as an Arrow
    scalar: numbers and booleans as they are, binary / fixed as hex, the rest as their text form
    (decimal "14.20", date "2017-11-16", timestamp "2017-11-16T22:31:08.123456", uuid)."""
    value, kind = target.initial_default, target.type
    try:
        if kind in ("binary",) or str(kind).startswith("fixed"):
            return pa.scalar(bytes.fromhex(value), type=target.arrow_type)
        if kind == "uuid":
            return pa.scalar(uuid.UUID(value).bytes, type=target.arrow_type)
        if isinstance(value, str) and kind != "string":
            return pa.scalar(value).cast(target.arrow_type)
        return pa.scalar(value, type=target.arrow_type)
    except (ValueError, TypeError, pa.ArrowException) as exc:
        raise InvalidArgumentError(f"column {target.name!r}: initial-default {value!r} is not a {kind}: {exc}") from None


def _array(array: pa.Array, source: pa.Field, target: Field) -> pa.Array:
    """One file column chunk as ``target``'s type (recursing into nested types by field id)."""
    if isinstance(array.type, pa.ExtensionType):  # e.g. arrow.uuid: Iceberg's type is its storage
        array = array.storage
    if not target.children:
        return array if array.type == target.arrow_type else array.cast(target.arrow_type)
    if isinstance(target.arrow_type, pa.StructType):
        children = {field_id(source.type.field(i)): i for i in range(source.type.num_fields)}
        arrays = []
        for child in target.children:
            index = children.get(child.field_id)
            arrays.append(_missing(child, len(array)) if index is None else
                          _array(array.field(index), source.type.field(index), child))
        return pa.StructArray.from_arrays(arrays, fields=[c.arrow_field for c in target.children],
                                          mask=array.is_null() if array.null_count else None)
    if isinstance(target.arrow_type, pa.MapType):
        keys = _array(array.keys, source.type.key_field, target.children[0])
        items = _array(array.items, source.type.item_field, target.children[1])
        return pa.MapArray.from_arrays(array.offsets, keys, items, type=target.arrow_type,
                                       mask=array.is_null() if array.null_count else None)
    values = _array(array.values, source.type.value_field, target.children[0])
    return pa.ListArray.from_arrays(array.offsets, values, type=target.arrow_type,
                                    mask=array.is_null() if array.null_count else None)
