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

from pyiceberg_crypto.formats.errors import FormatError

MAX_DEPTH = 64


class ThriftError(FormatError):
    """Bytes that are not a well-formed Thrift compact structure."""


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


class _Reader:
    def __init__(self, buf: bytes | memoryview, pos: int):
        self.buf = memoryview(buf)
        self.pos = pos

    def byte(self) -> int:
        if self.pos >= len(self.buf):
            raise ThriftError(f"unexpected end of data at byte {self.pos}")
        b = self.buf[self.pos]
        self.pos += 1
        return b

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise ThriftError(f"length {n} at byte {self.pos} runs past the end of the data")
        out = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return out

    def varint(self) -> int:
        result = shift = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 63:
                raise ThriftError(f"varint too long at byte {self.pos}")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def value(self, ttype: int, depth: int) -> Any:
        if ttype in (TType.BOOL, TType.BOOL_FALSE):  # inside containers: one byte, 1 = true
            return self.byte() == TType.BOOL
        if ttype == TType.BYTE:
            b = self.byte()
            return b - 256 if b > 127 else b
        if ttype in (TType.I16, TType.I32, TType.I64):
            return self.zigzag()
        if ttype == TType.DOUBLE:
            return _struct.unpack("<d", self.take(8))[0]
        if ttype == TType.BINARY:
            return self.take(self.varint())
        if ttype == TType.UUID:
            return self.take(16)
        if ttype in (TType.LIST, TType.SET):
            header = self.byte()
            size, elem = header >> 4, header & 0x0F
            if size == 15:
                size = self.varint()
            if size > len(self.buf) - self.pos:  # every element takes at least one byte
                raise ThriftError(f"list of {size} elements at byte {self.pos} cannot fit")
            elem = TType.BOOL if elem == TType.BOOL_FALSE else elem
            return TList(elem, [self.value(elem, depth + 1) for _ in range(size)], ttype == TType.SET)
        if ttype == TType.MAP:
            size = self.varint()
            if size == 0:
                return TMap(0, 0, [])
            kv = self.byte()
            if size > len(self.buf) - self.pos:
                raise ThriftError(f"map of {size} entries at byte {self.pos} cannot fit")
            kt, vt = kv >> 4, kv & 0x0F
            return TMap(kt, vt, [(self.value(kt, depth + 1), self.value(vt, depth + 1)) for _ in range(size)])
        if ttype == TType.STRUCT:
            return self.struct(depth + 1)
        raise ThriftError(f"unknown type id {ttype} at byte {self.pos}")

    def struct(self, depth: int) -> TStruct:
        if depth > MAX_DEPTH:
            raise ThriftError("structures nested too deeply")
        out = TStruct()
        last = 0
        while True:
            header = self.byte()
            ttype = header & 0x0F
            if header == TType.STOP:
                return out
            if ttype == TType.STOP:  # readers take any type-0 byte as STOP; writers write only 0x00
                raise ThriftError(f"malformed STOP byte 0x{header:02x} at byte {self.pos - 1}")
            delta = header >> 4
            fid = last + delta if delta else self.zigzag()
            last = fid
            if ttype in (TType.BOOL, TType.BOOL_FALSE):  # field bools live in the type nibble
                out.fields[fid] = (TType.BOOL, ttype == TType.BOOL)
            else:
                out.fields[fid] = (ttype, self.value(ttype, depth))


def decode_struct(buf: bytes | memoryview, pos: int = 0) -> tuple[TStruct, int]:
    """Decode one struct starting at ``pos``; returns it and the offset just past its STOP byte."""
    reader = _Reader(buf, pos)
    return reader.struct(0), reader.pos


# ---------------------------------------------------------------------------------------------
# encoding


def _varint(n: int, out: bytearray) -> None:
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _zigzag(n: int, out: bytearray) -> None:
    _varint((n << 1) ^ (n >> 63), out)


def _write_value(ttype: int, value: Any, out: bytearray) -> None:
    if ttype in (TType.BOOL, TType.BOOL_FALSE):
        out.append(TType.BOOL if value else TType.BOOL_FALSE)
    elif ttype == TType.BYTE:
        out.append(value & 0xFF)
    elif ttype in (TType.I16, TType.I32, TType.I64):
        _zigzag(value, out)
    elif ttype == TType.DOUBLE:
        out += _struct.pack("<d", value)
    elif ttype == TType.BINARY:
        _varint(len(value), out)
        out += value
    elif ttype == TType.UUID:
        out += value
    elif ttype in (TType.LIST, TType.SET):
        size = len(value.items)
        elem = value.elem_type
        if size < 15:
            out.append((size << 4) | elem)
        else:
            out.append(0xF0 | elem)
            _varint(size, out)
        for item in value.items:
            _write_value(elem, item, out)
    elif ttype == TType.MAP:
        _varint(len(value.items), out)
        if value.items:
            out.append((value.key_type << 4) | value.value_type)
            for k, v in value.items:
                _write_value(value.key_type, k, out)
                _write_value(value.value_type, v, out)
    elif ttype == TType.STRUCT:
        _write_struct(value, out)
    else:
        raise ThriftError(f"cannot encode type id {ttype}")


def _write_struct(struct: TStruct, out: bytearray) -> None:
    last = 0
    for fid in sorted(struct.fields):
        ttype, value = struct.fields[fid]
        wire = (TType.BOOL if value else TType.BOOL_FALSE) if ttype in (TType.BOOL, TType.BOOL_FALSE) else ttype
        delta = fid - last
        if 0 < delta <= 15:
            out.append((delta << 4) | wire)
        else:
            out.append(wire)
            _zigzag(fid, out)
        last = fid
        if wire not in (TType.BOOL, TType.BOOL_FALSE):
            _write_value(ttype, value, out)
    out.append(TType.STOP)


def encode_struct(struct: TStruct) -> bytes:
    """Serialise a struct (fields in ascending id order, as Thrift-generated writers do)."""
    out = bytearray()
    _write_struct(struct, out)
    return bytes(out)
