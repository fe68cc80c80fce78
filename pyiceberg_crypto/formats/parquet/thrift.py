"""A small Thrift *compact protocol* decoder and encoder, generic (schema-less).

Parquet serialises every metadata structure (footer, page headers, indexes, crypto metadata)
with the Thrift compact protocol. We decode into a generic tree of :class:`TStruct` (field id ->
typed value) and encode that tree back, byte for byte, so the decryptor can rewrite a few
offsets and keep every field it does not know (new Parquet fields survive a round trip).

Why our own ~200 lines instead of a library: the ``thrift`` package needs generated code from
``parquet.thrift`` (and a build step), and the typed bindings in PyArrow are C++ internals.
The verifier must not depend on either; a generic decoder is small, easy to test exhaustively
(round trips with hypothesis + real footers written by parquet-java), and lets us bound sizes and
depth on hostile input.

Usage::

    struct, end = decode_struct(buf, 0)
    struct.get(3)                       # value of field 3, or None
    struct.set(3, TType.I64, 42)
    assert decode_struct(encode_struct(struct), 0)[0] == struct

Wire format: Thrift compact protocol spec (thrift/doc/specs/thrift-compact-protocol.md).
"""

from __future__ import annotations

import struct as _struct
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from pyiceberg_crypto._deprecated import renamed_classes
from pyiceberg_crypto.errors import ArgumentTypeError, FormatError

__all__ = ["FieldSpec", "StructSpec", "TList", "TMap", "TStruct", "TType", "check_types",
           "decode_struct", "encode_struct"]

#: Old names, kept for one release (CHANGELOG.md).
__getattr__ = renamed_classes(__name__, {"ThriftError": FormatError})

MAX_DEPTH = 64


class TType(IntEnum):
    """Compact-protocol type ids. BOOL is stored as TRUE (1); FALSE (2) only appears on the wire."""

    STOP = 0
    BOOL = 1
    BOOL_FALSE = 2
    BYTE = 3
    I16 = 4
    I32 = 5
    I64 = 6
    DOUBLE = 7
    BINARY = 8
    LIST = 9
    SET = 10
    MAP = 11
    STRUCT = 12
    UUID = 13


@dataclass
class TList:
    """A list or set value: element type and items."""

    elem_type: int
    items: list[Any] = field(default_factory=list)
    is_set: bool = False


@dataclass
class TMap:
    key_type: int
    value_type: int
    items: list[tuple[Any, Any]] = field(default_factory=list)


@dataclass
class TStruct:
    """A decoded struct: ``fields[fid] = (ttype, value)``; unions are structs with one field."""

    fields: dict[int, tuple[int, Any]] = field(default_factory=dict)

    def get(self, fid: int, default: Any = None) -> Any:
        entry = self.fields.get(fid)
        return default if entry is None else entry[1]

    def has(self, fid: int) -> bool:
        return fid in self.fields

    def set(self, fid: int, ttype: int, value: Any) -> None:
        self.fields[fid] = (int(ttype), value)

    def remove(self, fid: int) -> None:
        self.fields.pop(fid, None)

    def shallow_copy(self) -> TStruct:
        """A new struct with the same field values (for changing top-level fields only)."""
        return TStruct(dict(self.fields))

    def copy(self) -> TStruct:
        """A deep copy (structs, lists and maps are copied; scalars are immutable)."""
        return TStruct({fid: (t, _copy_value(t, v)) for fid, (t, v) in self.fields.items()})


def _copy_value(ttype: int, value: Any) -> Any:
    if ttype == TType.STRUCT:
        return value.copy()
    if ttype in (TType.LIST, TType.SET):
        return TList(value.elem_type, [_copy_value(value.elem_type, v) for v in value.items], value.is_set)
    if ttype == TType.MAP:
        return TMap(
            value.key_type,
            value.value_type,
            [(_copy_value(value.key_type, k), _copy_value(value.value_type, v)) for k, v in value.items],
        )
    return value


# ---------------------------------------------------------------------------------------------
# decoding


# The decoder is one recursive function over ``bytes`` with the common cases inlined (field
# headers, one-byte varints, binaries, nested structs): page headers are decoded once per page,
# so this is the verifier's Python hot spot. Running off the end of the data surfaces as
# IndexError (indexing) and is turned into a FormatError by :func:`decode_struct`; slices are
# bounds-checked explicitly because slicing never raises.

# Plain ints (not TType members) on the hot path: enum attribute lookups cost more than the work.
_BOOL, _BOOL_FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE = 1, 2, 3, 4, 5, 6, 7
_BINARY, _LIST, _SET, _MAP, _STRUCT, _UUID = 8, 9, 10, 11, 12, 13
_INTEGERS = frozenset({_I16, _I32, _I64})
_IS_TRUE = (_BOOL).__eq__  # a list bool is one byte, 1 = true (as _value reads it)
_TRUE_FIELD, _FALSE_FIELD = (TType.BOOL, True), (TType.BOOL, False)  # shared: tuples are immutable


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """A ULEB128 varint at ``pos``: (value, position after it)."""
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise FormatError(f"varint too long at byte {pos}")


def _take(buf: bytes, pos: int, n: int) -> tuple[bytes, int]:
    if n < 0 or pos + n > len(buf):
        raise FormatError(f"length {n} at byte {pos} runs past the end of the data")
    return buf[pos : pos + n], pos + n


def _value(buf: bytes, pos: int, ttype: int, depth: int) -> tuple[Any, int]:
    """One value of type ``ttype`` at ``pos`` (not a field bool): (value, position after it)."""
    if ttype in _INTEGERS:
        n, pos = _varint(buf, pos)
        return (n >> 1) ^ -(n & 1), pos
    if ttype == _BINARY:
        n, pos = _varint(buf, pos)
        return _take(buf, pos, n)
    if ttype == _STRUCT:
        return _struct_at(buf, pos, depth + 1)
    if ttype in (_BOOL, _BOOL_FALSE):  # inside containers: one byte, 1 = true
        return buf[pos] == _BOOL, pos + 1
    if ttype == _BYTE:
        b = buf[pos]
        return (b - 256 if b > 127 else b), pos + 1
    if ttype == _DOUBLE:
        data, pos = _take(buf, pos, 8)
        return _struct.unpack("<d", data)[0], pos
    if ttype == _UUID:
        return _take(buf, pos, 16)
    if ttype in (_LIST, _SET):
        header = buf[pos]
        pos += 1
        size, elem = header >> 4, header & 0x0F
        if size == 15:
            size, pos = _varint(buf, pos)
        if size > len(buf) - pos:  # every element takes at least one byte
            raise FormatError(f"list of {size} elements at byte {pos} cannot fit")
        elem = _BOOL if elem == _BOOL_FALSE else elem
        items = []
        append = items.append
        if elem in _INTEGERS:  # page indexes hold long lists of these: no call per element
            for _ in range(size):
                n, pos = _varint(buf, pos)
                append((n >> 1) ^ -(n & 1))
        elif elem == _BINARY:
            for _ in range(size):
                n, pos = _varint(buf, pos)
                item, pos = _take(buf, pos, n)
                append(item)
        elif elem == _STRUCT:
            for _ in range(size):
                item, pos = _struct_at(buf, pos, depth + 2)
                append(item)
        elif elem == _BOOL:  # ColumnIndex.null_pages: one byte each, 1 = true (size fits: checked above)
            items = list(map(_IS_TRUE, buf[pos : pos + size]))
            pos += size
        else:
            for _ in range(size):
                item, pos = _value(buf, pos, elem, depth + 1)
                append(item)
        return TList(elem, items, ttype == _SET), pos
    if ttype == _MAP:
        size, pos = _varint(buf, pos)
        if size == 0:
            return TMap(0, 0, []), pos
        kv = buf[pos]
        pos += 1
        if size > len(buf) - pos:
            raise FormatError(f"map of {size} entries at byte {pos} cannot fit")
        kt, vt = kv >> 4, kv & 0x0F
        entries = []
        for _ in range(size):
            k, pos = _value(buf, pos, kt, depth + 1)
            v, pos = _value(buf, pos, vt, depth + 1)
            entries.append((k, v))
        return TMap(kt, vt, entries), pos
    raise FormatError(f"unknown type id {ttype} at byte {pos}")


def _struct_at(buf: bytes, pos: int, depth: int) -> tuple[TStruct, int]:
    if depth > MAX_DEPTH:
        raise FormatError("structures nested too deeply")
    fields: dict[int, tuple[int, Any]] = {}
    last = 0
    while True:
        header = buf[pos]
        pos += 1
        ttype = header & 0x0F
        if ttype == 0:  # STOP
            if header:  # readers take any type-0 byte as STOP; writers write only 0x00
                raise FormatError(f"malformed STOP byte 0x{header:02x} at byte {pos - 1}")
            return TStruct(fields), pos
        delta = header >> 4
        if delta:
            fid = last + delta
        else:
            n, pos = _varint(buf, pos)
            fid = (n >> 1) ^ -(n & 1)
        last = fid
        if ttype == 5 or ttype == 6 or ttype == 4:  # I32, I64, I16: zigzag varint
            n = buf[pos]
            pos += 1
            if n >= 0x80:  # _varint inlined (sizes and CRCs take 3-5 bytes: one call saved each)
                n &= 0x7F
                shift = 7
                while True:
                    b = buf[pos]
                    pos += 1
                    n |= (b & 0x7F) << shift
                    if b < 0x80:
                        break
                    shift += 7
                    if shift > 63:
                        raise FormatError(f"varint too long at byte {pos}")
            fields[fid] = (ttype, (n >> 1) ^ -(n & 1))
        elif ttype == 8:  # BINARY: length varint, bytes
            n = buf[pos]
            if n < 0x80:
                pos += 1
            else:
                n, pos = _varint(buf, pos)
            end = pos + n
            if end > len(buf):
                raise FormatError(f"length {n} at byte {pos} runs past the end of the data")
            fields[fid] = (ttype, buf[pos:end])
            pos = end
        elif ttype == 12:  # STRUCT
            value, pos = _struct_at(buf, pos, depth + 1)
            fields[fid] = (ttype, value)
        elif ttype == 1 or ttype == 2:  # field bools live in the type nibble
            fields[fid] = _TRUE_FIELD if ttype == 1 else _FALSE_FIELD
        else:
            value, pos = _value(buf, pos, ttype, depth)
            fields[fid] = (ttype, value)


def decode_struct(
    buf: bytes | bytearray | memoryview, pos: int = 0, spec: StructSpec | None = None
) -> tuple[TStruct, int]:
    """Decode one struct starting at ``pos``; returns it and the offset just past its STOP byte.
    With ``spec``, the fields it names must have the wire types it gives (:func:`check_types`)."""
    data = buf if type(buf) is bytes else bytes(buf)
    try:
        value, end = _struct_at(data, pos, 0)
    except IndexError:
        raise FormatError(f"unexpected end of data ({len(data)} bytes)") from None
    if spec is not None:
        check_types(value, spec)
    return value, end


# ---------------------------------------------------------------------------------------------
# field types


@dataclass(frozen=True)
class FieldSpec:
    """What the IDL says one field is: its wire type and, for structs and lists, what is inside."""

    name: str
    ttype: int
    struct: StructSpec | None = None  # a STRUCT field's struct, or the struct a LIST holds
    elem: int | None = None  # a LIST field's element type


@dataclass(frozen=True)
class StructSpec:
    """The fields of one IDL struct that a reader relies on (others are not checked)."""

    name: str
    fields: dict[int, FieldSpec]


def check_types(value: TStruct, spec: StructSpec) -> None:
    """Raise :class:`FormatError` when a field ``spec`` names has another wire type than the IDL's.

    A generic decoder takes whatever type a field header says, so one flipped bit in a header can
    turn a ``binary`` into a ``list`` that still parses; generated Thrift code would skip such a
    field, and code that reads it by id would get a value of the wrong kind. Checked here, it is a
    malformed structure named by its field instead.
    """
    for fid, (ttype, item) in value.fields.items():
        field_spec = spec.fields.get(fid)
        if field_spec is None:
            continue
        where = f"{spec.name}.{field_spec.name} (field {fid})"
        if ttype != field_spec.ttype:
            raise FormatError(f"{where} has wire type {_type_name(ttype)}, the IDL says {_type_name(field_spec.ttype)}")
        if ttype == TType.STRUCT and field_spec.struct is not None:
            check_types(item, field_spec.struct)
        elif ttype == TType.LIST and field_spec.elem is not None:
            if item.elem_type != field_spec.elem:
                raise FormatError(
                    f"{where} holds {_type_name(item.elem_type)} elements, the IDL says {_type_name(field_spec.elem)}"
                )
            if field_spec.struct is not None:
                for element in item.items:
                    check_types(element, field_spec.struct)


def _type_name(ttype: int) -> str:
    return TType(ttype).name.lower() if ttype in TType._value2member_map_ else f"type {ttype}"


# ---------------------------------------------------------------------------------------------
# encoding


def _write_varint(n: int, out: bytearray) -> None:
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _write_zigzag(n: int, out: bytearray) -> None:
    _write_varint((n << 1) ^ (n >> 63), out)


def _write_value(ttype: int, value: Any, out: bytearray) -> None:
    if ttype in (_BOOL, _BOOL_FALSE):
        out.append(_BOOL if value else _BOOL_FALSE)
    elif ttype == _BYTE:
        out.append(value & 0xFF)
    elif ttype in (_I16, _I32, _I64):
        _write_zigzag(value, out)
    elif ttype == _DOUBLE:
        out += _struct.pack("<d", value)
    elif ttype == _BINARY:
        _write_varint(len(value), out)
        out += value
    elif ttype == _UUID:
        out += value
    elif ttype in (_LIST, _SET):
        size = len(value.items)
        elem = value.elem_type
        if size < 15:
            out.append((size << 4) | elem)
        else:
            out.append(0xF0 | elem)
            _write_varint(size, out)
        for item in value.items:
            _write_value(elem, item, out)
    elif ttype == _MAP:
        _write_varint(len(value.items), out)
        if value.items:
            out.append((value.key_type << 4) | value.value_type)
            for k, v in value.items:
                _write_value(value.key_type, k, out)
                _write_value(value.value_type, v, out)
    elif ttype == _STRUCT:
        _write_struct(value, out)
    else:
        raise FormatError(f"cannot encode type id {ttype}")


def _write_struct(struct: TStruct, out: bytearray) -> None:
    # Integers, binaries and nested structs inlined: decrypt_parquet re-encodes every page header.
    last = 0
    append = out.append
    for fid, (ttype, value) in sorted(struct.fields.items()):
        wire = ((_BOOL if value else _BOOL_FALSE) if ttype == _BOOL or ttype == _BOOL_FALSE else ttype)
        delta = fid - last
        if 0 < delta <= 15:
            append((delta << 4) | wire)
        else:
            append(wire)
            _write_zigzag(fid, out)
        last = fid
        if wire == _I32 or wire == _I64 or wire == _I16:
            n = (value << 1) ^ (value >> 63)
            while n > 0x7F:
                append((n & 0x7F) | 0x80)
                n >>= 7
            append(n)
        elif wire == _STRUCT:
            _write_struct(value, out)
        elif wire == _BINARY:
            n = len(value)
            while n > 0x7F:
                append((n & 0x7F) | 0x80)
                n >>= 7
            append(n)
            out += value
        elif wire != _BOOL and wire != _BOOL_FALSE:
            _write_value(ttype, value, out)
    append(0)


def encode_struct(struct: TStruct) -> bytes:
    """Serialise a struct (fields in ascending id order, as Thrift-generated writers do)."""
    if not isinstance(struct, TStruct):
        raise ArgumentTypeError(f"encode_struct takes a TStruct, got {type(struct).__name__}")
    out = bytearray()
    _write_struct(struct, out)
    return bytes(out)
