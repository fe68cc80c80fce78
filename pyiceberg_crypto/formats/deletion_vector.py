"""Decoder of Iceberg deletion vectors: the Puffin blob type ``deletion-vector-v1`` (pure Python).

Layout (Iceberg ``format/puffin-spec.md``, section "deletion-vector-v1 blob type")::

    length   4 bytes big-endian = len(magic + vector)
    magic    D1 D3 39 64
    vector   a portable 64-bit Roaring bitmap (RoaringFormatSpec, "Extension for 64-bit implementations")
    crc      4 bytes big-endian CRC-32 of magic + vector

Usage::

    from pyiceberg_crypto.formats.deletion_vector import parse_deletion_vector, DeletionVectorError

    blob = puffin_bytes[dv.content_offset: dv.content_offset + dv.content_size_in_bytes]
    try:
        dv = parse_deletion_vector(blob, name="s3://b/t/data/00000-dv.puffin", max_positions=num_rows)
    except DeletionVectorError as err:
        print(err.file, err.location, err.reason)
    dv.cardinality            # number of deleted rows
    dv.positions()            # array('Q') of deleted positions, ascending
    17 in dv                  # membership without expanding
    mask = dv.keep_mask(num_rows)   # bytearray, 1 = row kept, 0 = deleted

The vector's layout, and why hostile input costs nothing: docs/explanation/formats.md#deletion-vectors.
"""

from __future__ import annotations

import array
import itertools
import operator
import struct
import sys
import zlib
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field

from pyiceberg_crypto.errors import InvalidArgumentError
from pyiceberg_crypto.formats.errors import FormatError, LocatedError

__all__ = ["MAGIC", "DeletionVector", "DeletionVectorError", "parse_deletion_vector"]

MAGIC = b"\xd1\xd3\x39\x64"
LENGTH_SIZE = 4
CRC_SIZE = 4

# RoaringFormatSpec "General layout" constants
SERIAL_COOKIE_NO_RUNCONTAINER = 12346
SERIAL_COOKIE = 12347
NO_OFFSET_THRESHOLD = 4
ARRAY_MAX = 4096  # "a cardinality of up and including 4096 indicates an array container"
BITSET_BYTES = 8192  # "Bitset containers are stored using exactly 8KB"
MAX_CONTAINERS = 1 << 16
# smallest serialized 32-bit bitmap (empty, no-run cookie + count) plus its 4-byte key
MIN_BITMAP_ENTRY = 4 + 8

ARRAY, BITSET, RUN = "array", "bitset", "run"

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_BE32 = struct.Struct(">I")
# '0'/'1' characters of a binary string -> 1/0 "kept" flags, and -> 0/1 "deleted" flags
_KEEP_FLAGS = bytes.maketrans(b"01", b"\x01\x00")
_DELETED_FLAGS = bytes.maketrans(b"01", b"\x00\x01")


class DeletionVectorError(LocatedError, FormatError):
    """A ``deletion-vector-v1`` blob is malformed, corrupted or over the caller's limits.

    Attributes:
        file: the caller's name for the Puffin file (or None).
        location: where in the blob, e.g. ``"bitmap 1 (key 1), container 2 (chunk 0x0005)"``.
        reason: a short human-readable reason.
    """


@dataclass(frozen=True)
class _Container:
    base: int  # the 64-bit position of value 0 of this container: key32 << 32 | key16 << 16
    kind: str  # ARRAY, BITSET or RUN
    cardinality: int
    data: object = field(repr=False)  # array('H') | bytes (8 KiB) | tuple of (start, stop) pairs

    @property
    def last(self) -> int:
        """The largest position in the container."""
        if self.kind == ARRAY:
            return self.base + self.data[-1]
        if self.kind == RUN:
            return self.base + self.data[-1][1] - 1
        return self.base + int.from_bytes(self.data, "little").bit_length() - 1

    def flags(self, table: bytes) -> bytes:
        """A bitset container as 65536 bytes (one per value), '0'/'1' bits mapped through ``table``."""
        bits = format(int.from_bytes(self.data, "little"), "065536b")[::-1]
        return bits.encode("ascii").translate(table)


@dataclass(frozen=True)
class DeletionVector:
    """The deleted row positions of one data file, decoded from a ``deletion-vector-v1`` blob.

    ``cardinality`` is the number of deleted positions. Positions are 0-based row numbers in the
    data file, in ``[0, 2**63)``.
    """

    cardinality: int
    name: str | None = field(default=None, compare=False)
    _containers: tuple[_Container, ...] = field(default=(), repr=False)

    def __len__(self) -> int:
        return self.cardinality

    @property
    def max_position(self) -> int | None:
        """The largest deleted position, or None when nothing is deleted."""
        return self._containers[-1].last if self._containers else None

    def positions(self) -> array.array:
        """All deleted positions, ascending, as an ``array('Q')``."""
        out = array.array("Q")
        for c in self._containers:
            if c.kind == ARRAY:
                out.extend(map(c.base.__add__, c.data))
            elif c.kind == RUN:
                for start, stop in c.data:
                    out.extend(range(c.base + start, c.base + stop))
            else:
                out.extend(itertools.compress(range(c.base, c.base + MAX_CONTAINERS), c.flags(_DELETED_FLAGS)))
        return out

    def __contains__(self, pos: object) -> bool:
        if not isinstance(pos, int) or pos < 0:
            return False
        base = pos & ~0xFFFF
        i = bisect_left(self._containers, base, key=_base_of)
        if i == len(self._containers) or self._containers[i].base != base:
            return False
        c = self._containers[i]
        low = pos & 0xFFFF
        if c.kind == ARRAY:
            j = bisect_left(c.data, low)
            return j < len(c.data) and c.data[j] == low
        if c.kind == RUN:
            j = bisect_right(c.data, (low, MAX_CONTAINERS + 1)) - 1
            return j >= 0 and c.data[j][0] <= low < c.data[j][1]
        return bool(c.data[low >> 3] >> (low & 7) & 1)

    def keep_mask(self, num_rows: int) -> bytearray:
        """A ``bytearray`` of ``num_rows`` flags: 1 = row kept, 0 = row deleted.

        Raises DeletionVectorError if a deleted position is ``>= num_rows`` (the vector does not
        belong to a file of that many rows).
        """
        if num_rows < 0:
            raise InvalidArgumentError(f"num_rows must be >= 0, got {num_rows}")
        last = self.max_position
        if last is not None and last >= num_rows:
            raise DeletionVectorError(f"position {last} is past the file's {num_rows} rows", file=self.name)
        mask = bytearray(b"\x01") * num_rows
        for c in self._containers:
            base = c.base
            if c.kind == ARRAY:
                for v in c.data:
                    mask[base + v] = 0
            elif c.kind == RUN:
                for start, stop in c.data:
                    mask[base + start: base + stop] = bytes(stop - start)
            else:
                end = min(base + MAX_CONTAINERS, num_rows)
                mask[base:end] = c.flags(_KEEP_FLAGS)[: end - base]
        return mask


def _base_of(c: _Container) -> int:
    return c.base


def _u16_array(raw: bytes) -> array.array:
    """Little-endian uint16 values."""
    vals = array.array("H", raw)
    if sys.byteorder == "big":
        vals.byteswap()
    return vals


class _Reader:
    """Bounds-checked little-endian reads over the blob, with error context."""

    def __init__(self, blob: bytes, pos: int, end: int, name: str | None):
        self.blob = blob
        self.pos = pos
        self.end = end
        self.name = name
        self.where: list[str] = []

    def fail(self, reason: str) -> DeletionVectorError:
        return DeletionVectorError(reason, file=self.name, location=", ".join(self.where) or None)

    def need(self, n: int, what: str) -> None:
        if n > self.end - self.pos:
            raise self.fail(
                f"truncated {what}: needs {n} bytes at blob offset {self.pos}, "
                f"only {self.end - self.pos} left in the vector"
            )

    def take(self, n: int, what: str) -> bytes:
        self.need(n, what)
        data = self.blob[self.pos: self.pos + n]
        self.pos += n
        return data

    def u16(self, what: str) -> int:
        return _U16.unpack(self.take(2, what))[0]

    def u32(self, what: str) -> int:
        return _U32.unpack(self.take(4, what))[0]

    def u64(self, what: str) -> int:
        return _U64.unpack(self.take(8, what))[0]


def parse_deletion_vector(
    blob: bytes,
    *,
    name: str | None = None,
    max_positions: int | None = None,
    expected_cardinality: int | None = None,
) -> DeletionVector:
    """Decode and fully validate one ``deletion-vector-v1`` blob (its bytes, as cut out of the Puffin file).

    Args:
        blob: the blob bytes (length prefix, magic, vector, CRC).
        name: the Puffin file's name, used in error messages.
        max_positions: reject vectors with more deleted positions than this (checked from the
            headers before any expansion), e.g. the data file's row count.
        expected_cardinality: the blob's ``cardinality`` property / the delete file's record
            count; a different count is rejected.

    Raises:
        DeletionVectorError: naming ``name``, the place in the blob and what is wrong.
    """
    blob = bytes(blob)
    size = len(blob)

    def fail(reason: str, location: str | None = None) -> DeletionVectorError:
        return DeletionVectorError(reason, file=name, location=location)

    # puffin-spec "deletion-vector-v1": combined length of vector and magic, 4 bytes big-endian
    if size < LENGTH_SIZE + len(MAGIC) + CRC_SIZE:
        raise fail(f"blob is {size} bytes, too short for the length prefix, magic and CRC (12 bytes)")
    declared = _BE32.unpack_from(blob, 0)[0]
    held = size - LENGTH_SIZE - CRC_SIZE
    if declared != held:
        what = "blob truncated or bad length prefix" if declared > held else "trailing bytes or bad length prefix"
        raise fail(
            f"length prefix says {declared} bytes of magic + vector, but the {size}-byte blob holds {held} ({what})",
            "length prefix",
        )
    # "A 4-byte magic sequence, D1 D3 39 64"
    magic = blob[LENGTH_SIZE: LENGTH_SIZE + len(MAGIC)]
    if magic != MAGIC:
        raise fail(f"bad magic {magic.hex(' ')}, expected {MAGIC.hex(' ')}", "magic")
    # "A CRC-32 checksum of the magic bytes and serialized vector as 4 bytes, big-endian"
    crc_offset = LENGTH_SIZE + declared
    stored_crc = _BE32.unpack_from(blob, crc_offset)[0]
    actual_crc = zlib.crc32(blob[LENGTH_SIZE:crc_offset])
    if stored_crc != actual_crc:
        raise fail(f"CRC-32 mismatch: stored 0x{stored_crc:08x}, computed 0x{actual_crc:08x}", "CRC")

    r = _Reader(blob, LENGTH_SIZE + len(MAGIC), crc_offset, name)
    containers: list[_Container] = []
    total = 0

    def count(n: int) -> None:
        nonlocal total
        total += n
        if max_positions is not None and total > max_positions:
            raise r.fail(f"more than max_positions={max_positions} deleted positions (at least {total})")

    # RoaringFormatSpec "Extension for 64-bit implementations": uint64 number of buckets
    r.where = ["vector header"]
    bitmap_count = r.u64("bitmap count")
    if bitmap_count * MIN_BITMAP_ENTRY > r.end - r.pos:
        raise r.fail(
            f"bitmap count {bitmap_count} cannot fit: {r.end - r.pos} bytes left, "
            f"each bitmap needs at least {MIN_BITMAP_ENTRY}"
        )
    last_key = -1
    for b in range(bitmap_count):
        r.where = [f"bitmap {b}"]
        # "first writing as int/uint32 the most significant 32 bits of the bucket"
        key = r.u32("bitmap key")
        r.where = [f"bitmap {b} (key {key})"]
        if key <= last_key:
            raise r.fail(f"bitmap keys not strictly increasing: key {key} after key {last_key}")
        if key >= 1 << 31:
            # puffin-spec: "the most significant bit must be 0"
            raise r.fail(f"key {key} sets the sign bit of the 64-bit positions")
        last_key = key
        _parse_bitmap32(r, key << 32, containers, count)
    if r.pos != r.end:
        r.where = ["vector"]
        raise r.fail(f"{r.end - r.pos} trailing bytes after the last bitmap (blob offset {r.pos})")
    if expected_cardinality is not None and total != expected_cardinality:
        raise fail(f"vector holds {total} positions, expected cardinality {expected_cardinality}")
    return DeletionVector(total, name, tuple(containers))


def _parse_bitmap32(r: _Reader, key_base: int, containers: list[_Container], count) -> None:
    """One standard 32-bit Roaring bitmap (RoaringFormatSpec "General layout") at ``r.pos``."""
    start = r.pos
    where = list(r.where)
    # 1. Cookie header
    cookie = r.u32("cookie header")
    if cookie == SERIAL_COOKIE_NO_RUNCONTAINER:
        size = r.u32("container count")
        if size > MAX_CONTAINERS:
            raise r.fail(f"container count {size} exceeds {MAX_CONTAINERS}")
        run_flags = b""
        has_offsets = True
    elif cookie & 0xFFFF == SERIAL_COOKIE:
        size = (cookie >> 16) + 1
        run_flags = r.take((size + 7) // 8, f"run-container bitset of {size} containers")
        has_offsets = size >= NO_OFFSET_THRESHOLD
    else:
        raise r.fail(f"bad cookie 0x{cookie:08x} (expected {SERIAL_COOKIE_NO_RUNCONTAINER} or {SERIAL_COOKIE} in the low 16 bits)")

    # 2. Descriptive header: (key, cardinality - 1) pairs of uint16
    header = r.take(4 * size, f"descriptive header of {size} containers")
    pairs = _u16_array(header)  # interleaved key, cardinality - 1
    ckeys = pairs[0::2]
    cards = [c + 1 for c in pairs[1::2]]
    for i in range(1, size):
        if ckeys[i] <= ckeys[i - 1]:
            r.where = where + [f"container {i}"]
            raise r.fail(f"container keys not increasing: 0x{ckeys[i]:04x} after 0x{ckeys[i - 1]:04x}")
    # no expansion happens before the caller's limit is checked against the declared cardinalities
    count(sum(cards))

    # 3. Offset header (absolute offsets from the cookie); checked against the actual layout below
    offsets = None
    if has_offsets:
        raw = r.take(4 * size, f"offset header of {size} containers")
        offsets = struct.unpack(f"<{size}I", raw)

    # 4. Container storage
    for i in range(size):
        ck, card = ckeys[i], cards[i]
        r.where = where + [f"container {i} (chunk 0x{ck:04x})"]
        if offsets is not None and offsets[i] != r.pos - start:
            raise r.fail(f"offset header says the container is at byte {offsets[i]}, it is at byte {r.pos - start}")
        base = key_base | ck << 16
        if run_flags and run_flags[i >> 3] >> (i & 7) & 1:
            n_runs = r.u16("run count")
            raw = r.take(4 * n_runs, f"run container of {n_runs} runs")
            vals = _u16_array(raw)
            runs = []
            prev_stop = 0
            content = 0
            for j in range(n_runs):
                s, length = vals[2 * j], vals[2 * j + 1]
                stop = s + length + 1
                if stop > MAX_CONTAINERS:
                    raise r.fail(f"run {j} (start {s}, length {length + 1}) ends at {stop - 1}, past 65535")
                if j and s <= prev_stop - 1:
                    raise r.fail(f"run {j} starts at {s}, not after the previous run's end {prev_stop - 1}")
                runs.append((s, stop))
                prev_stop = stop
                content += stop - s
            if content != card:
                raise r.fail(f"descriptive header says cardinality {card}, the runs hold {content}")
            containers.append(_Container(base, RUN, card, tuple(runs)))
        elif card <= ARRAY_MAX:
            raw = r.take(2 * card, f"array container of {card} values")
            vals = _u16_array(raw)
            if not all(map(operator.lt, vals, vals[1:])):
                j = next(j for j in range(1, card) if vals[j] <= vals[j - 1])
                raise r.fail(f"array values not increasing: {vals[j]} after {vals[j - 1]} (index {j})")
            containers.append(_Container(base, ARRAY, card, vals))
        else:
            raw = r.take(BITSET_BYTES, "bitset container")
            content = int.from_bytes(raw, "little").bit_count()
            if content != card:
                raise r.fail(f"descriptive header says cardinality {card}, the bitset holds {content}")
            containers.append(_Container(base, BITSET, card, raw))
    r.where = where
