"""Deletion vectors (Puffin ``deletion-vector-v1``): Java-made reference blobs and tamper cases.

The reference blobs in ``fixtures/deletion_vectors`` were cut out of a Puffin file written by
Iceberg 1.12.0's ``BaseDVFileWriter`` (see ``fixtures/make_deletion_vectors.py``); each ``.json``
lists the positions as ``range()`` arguments. Structural tampering re-seals the vector (fixes up
the length prefix and the CRC) so the structural check, not the CRC, has to catch it.
"""

from __future__ import annotations

import json
import random
import struct
import zlib
from pathlib import Path

import pytest

from pyiceberg_crypto.errors import FormatError
from pyiceberg_crypto.formats.deletion_vector import MAGIC, DeletionVector, parse_deletion_vector

FIXTURES = Path(__file__).parent / "fixtures" / "deletion_vectors"
CASES = ["empty", "small", "high_keys", "dense_range", "sparse_bitmap", "mixed"]
NAME = "s3://bucket/wh/db/t/data/00001-dv.puffin"


def load(case: str) -> tuple[bytes, dict, list[int]]:
    blob = (FIXTURES / f"{case}.bin").read_bytes()
    side = json.loads((FIXTURES / f"{case}.json").read_text())
    expected = sorted({p for r in side["ranges"] for p in range(*r)})
    return blob, side, expected


def vector_of(blob: bytes) -> bytes:
    """The Roaring part of a blob (after length prefix and magic, before the CRC)."""
    return blob[8:-4]


def seal(vector: bytes) -> bytes:
    """A well-formed blob around ``vector``: length prefix, magic, vector, CRC."""
    body = MAGIC + vector
    return struct.pack(">I", len(body)) + body + struct.pack(">I", zlib.crc32(body))


def rejects(blob: bytes, pattern: str, **kwargs) -> FormatError:
    with pytest.raises(FormatError, match=pattern) as info:
        parse_deletion_vector(blob, name=NAME, **kwargs)
    err = info.value
    assert err.file == NAME and str(err).startswith(NAME + ": ")
    assert isinstance(err, FormatError)
    return err


# --- an independent little encoder for hand-made (hostile) vectors --------------------------------

def bitmap32(containers, *, run_cookie=None, offsets=None, cards=None) -> bytes:
    """A 32-bit Roaring bitmap. ``containers``: list of (key16, kind, payload) with kind 'array'
    (sorted values), 'bitset' (set of values) or 'run' ((start, length-1) pairs). ``cards``
    overrides the descriptive header's cardinalities; ``offsets`` the offset header."""
    size = len(containers)
    has_run = any(kind == "run" for _, kind, _ in containers) if run_cookie is None else run_cookie
    bodies, real_cards = [], []
    for _, kind, payload in containers:
        if kind == "array":
            bodies.append(struct.pack(f"<{len(payload)}H", *payload))
            real_cards.append(len(payload))
        elif kind == "bitset":
            bodies.append(sum(1 << v for v in payload).to_bytes(8192, "little"))
            real_cards.append(len(payload))
        else:
            bodies.append(struct.pack("<H", len(payload)) + b"".join(struct.pack("<HH", s, n) for s, n in payload))
            real_cards.append(sum(n + 1 for _, n in payload))
    cards = real_cards if cards is None else cards
    if has_run:
        out = struct.pack("<I", 12347 | (size - 1) << 16)
        flags = bytearray((size + 7) // 8)
        for i, (_, kind, _) in enumerate(containers):
            if kind == "run":
                flags[i // 8] |= 1 << (i % 8)
        out += bytes(flags)
        with_offsets = size >= 4
    else:
        out = struct.pack("<II", 12346, size)
        with_offsets = True
    out += b"".join(struct.pack("<HH", k, c - 1) for (k, _, _), c in zip(containers, cards))
    if with_offsets:
        start = len(out) + 4 * size
        if offsets is None:
            offsets = []
            for body in bodies:
                offsets.append(start)
                start += len(body)
        out += struct.pack(f"<{size}I", *offsets)
    return out + b"".join(bodies)


def vector64(bitmaps) -> bytes:
    """The portable 64-bit layout: count, then (key32, 32-bit bitmap bytes) pairs."""
    return struct.pack("<Q", len(bitmaps)) + b"".join(struct.pack("<I", k) + bm for k, bm in bitmaps)


def encode(positions) -> bytes:
    """Blob for a set of positions, choosing container types like Roaring does (runs if smaller)."""
    by_key: dict[int, dict[int, list[int]]] = {}
    for p in sorted(set(positions)):
        by_key.setdefault(p >> 32, {}).setdefault((p >> 16) & 0xFFFF, []).append(p & 0xFFFF)
    bitmaps = []
    for key, chunks in sorted(by_key.items()):
        containers = []
        for ck, vals in sorted(chunks.items()):
            runs, start = [], vals[0]
            for a, b in zip(vals, vals[1:] + [None]):
                if b != a + 1:
                    runs.append((start, a - start))
                    start = b
            if 2 + 4 * len(runs) < min(2 * len(vals), 8192):
                containers.append((ck, "run", runs))
            elif len(vals) <= 4096:
                containers.append((ck, "array", vals))
            else:
                containers.append((ck, "bitset", set(vals)))
        bitmaps.append((key, bitmap32(containers)))
    return seal(vector64(bitmaps))


# --- Java reference vectors --------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES)
def test_java_vector_decodes_to_its_positions(case):
    blob, side, expected = load(case)
    dv = parse_deletion_vector(blob, name=NAME, expected_cardinality=side["cardinality"])
    assert isinstance(dv, DeletionVector)
    assert dv.cardinality == len(dv) == side["cardinality"] == len(expected)
    assert list(dv.positions()) == expected
    assert dv.max_position == (expected[-1] if expected else None)
    sample = expected[:200] + expected[-200:] + random.Random(case).sample(expected, min(200, len(expected)))
    assert all(p in dv for p in sample)
    absent = {0, 2, 6, 999, 65534, 65536, 1 << 32, (1 << 32) + 4, (expected[-1] + 1) if expected else 1} - set(expected)
    assert not any(p in dv for p in absent)
    assert -1 not in dv


def test_java_vectors_cover_every_container_kind_and_cookie():
    kinds, cookies = set(), set()
    for case in CASES:
        blob, _, _ = load(case)
        kinds |= {c.kind for c in parse_deletion_vector(blob)._containers}
        vector = vector_of(blob)
        if struct.unpack_from("<Q", vector)[0]:
            cookies.add(struct.unpack_from("<I", vector, 12)[0] & 0xFFFF)  # first bitmap's cookie
    assert kinds == {"array", "bitset", "run"}
    assert cookies == {12346, 12347}


def test_java_empty_bitmaps_below_the_largest_key():
    # Java writes an empty 32-bit bitmap for key 0 when all positions are >= 2^32
    blob, _, expected = load("high_keys")
    vector = vector_of(blob)
    assert struct.unpack_from("<QI", vector) == (3, 0)
    assert struct.unpack_from("<II", vector, 12) == (12346, 0)
    assert list(parse_deletion_vector(blob).positions()) == expected


def test_expected_cardinality_mismatch():
    blob, side, _ = load("small")
    rejects(blob, r"vector holds 5 positions, expected cardinality 6", expected_cardinality=6)


# --- tampering with the real bytes: length, magic, CRC, truncation, trailing bytes ------------

@pytest.mark.parametrize("case", ["small", "dense_range", "mixed"])
def test_flipped_bit_in_vector_fails_crc(case):
    blob, _, _ = load(case)
    for offset in (8, 12, len(blob) // 2, len(blob) - 5):
        bad = bytearray(blob)
        bad[offset] ^= 0x10
        err = rejects(bytes(bad), r"CRC-32 mismatch: stored 0x[0-9a-f]{8}, computed 0x[0-9a-f]{8}")
        assert err.location == "CRC"


def test_flipped_crc_byte_fails_crc():
    blob, _, _ = load("small")
    bad = blob[:-1] + bytes([blob[-1] ^ 1])
    rejects(bad, "CRC-32 mismatch")


@pytest.mark.parametrize("offset", [4, 5, 6, 7])
def test_bad_magic(offset):
    blob, _, _ = load("sparse_bitmap")
    bad = bytearray(blob)
    bad[offset] ^= 0x01
    err = rejects(bytes(bad), r"bad magic .*, expected d1 d3 39 64")
    assert err.location == "magic"


@pytest.mark.parametrize("delta", [-1, 1, 1 << 24])
def test_bad_length_prefix(delta):
    blob, _, _ = load("mixed")
    declared = struct.unpack(">I", blob[:4])[0] + delta
    bad = struct.pack(">I", declared) + blob[4:]
    err = rejects(bad, rf"length prefix says {declared} bytes of magic \+ vector, but the {len(blob)}-byte blob holds {len(blob) - 8}")
    assert err.location == "length prefix"


@pytest.mark.parametrize("case", ["small", "sparse_bitmap", "mixed"])
def test_truncated_blob(case):
    blob, _, _ = load(case)
    for keep in (len(blob) - 1, len(blob) - 4, len(blob) // 2, 13):
        rejects(blob[:keep], r"blob truncated or bad length prefix")
    for keep in (0, 3, 11):
        rejects(blob[:keep], rf"blob is {keep} bytes, too short")


def test_appended_byte():
    blob, _, _ = load("small")
    rejects(blob + b"\x00", r"trailing bytes or bad length prefix")
    # the same byte inside a re-sealed vector: the Roaring structure has to notice it
    err = rejects(seal(vector_of(blob) + b"\x00"), r"1 trailing bytes after the last bitmap")
    assert err.location == "vector"


@pytest.mark.parametrize("case", ["small", "high_keys", "dense_range", "sparse_bitmap", "mixed"])
def test_truncated_vector_resealed(case):
    blob, _, _ = load(case)
    vector = vector_of(blob)
    cuts = sorted({1, 7, 8, 10, 13, 17, 21, 30, len(vector) // 2, len(vector) - 1} & set(range(len(vector))))
    for cut in cuts:
        with pytest.raises(FormatError, match=r"truncated|cannot fit") as info:
            parse_deletion_vector(seal(vector[:cut]), name=NAME)
        assert info.value.file == NAME


def test_truncated_vector_messages_name_the_structure():
    blob, _, _ = load("dense_range")  # 1 bitmap, run cookie, 4 run containers, offset header
    vector = vector_of(blob)
    rejects(seal(vector[:5]), r"vector header: truncated bitmap count: needs 8 bytes")
    rejects(seal(vector[:14]), r"vector header: bitmap count 1 cannot fit: 6 bytes left")
    rejects(seal(vector[:20]), r"bitmap 0 \(key 0\): truncated descriptive header of 4 containers")
    rejects(seal(vector[:40]), r"bitmap 0 \(key 0\): truncated offset header of 4 containers")
    err = rejects(seal(vector[:-3]), r"truncated run container of 1 runs")
    assert err.location == "bitmap 0 (key 0), container 3 (chunk 0x0003)"
    blob, _, _ = load("high_keys")  # bitmap 2 (key 2) starts at vector offset 52
    rejects(seal(vector_of(blob)[:58]), r"bitmap 2 \(key 2\): truncated cookie header: needs 4 bytes")
    blob, _, _ = load("sparse_bitmap")
    rejects(seal(vector_of(blob)[:-1]), r"container 0 \(chunk 0x0001\): truncated bitset container: needs 8192 bytes")
    blob, _, _ = load("small")
    rejects(seal(vector_of(blob)[:-1]), r"container 0 \(chunk 0x0000\): truncated array container of 5 values")


# --- re-sealed structural damage on real bytes ---------------------------------------------------

def test_bitset_cardinality_disagrees_with_header():
    blob, _, _ = load("sparse_bitmap")
    vector = bytearray(vector_of(blob))
    # vector: count(8) key(4) cookie(4) size(4) | key16(2) card-1(2) | offset(4) | bitset
    assert struct.unpack_from("<IIHH", vector, 12) == (12346, 1, 1, 21845)
    struct.pack_into("<H", vector, 22, 21844)
    err = rejects(seal(bytes(vector)), r"descriptive header says cardinality 21845, the bitset holds 21846")
    assert err.location == "bitmap 0 (key 0), container 0 (chunk 0x0001)"


def test_run_cardinality_disagrees_with_header():
    blob, _, _ = load("dense_range")
    vector = bytearray(vector_of(blob))
    # run cookie with 4 containers: cookie(4) runflags(1) then 4 (key16, card-1) pairs
    assert struct.unpack_from("<IB", vector, 12) == (12347 | 3 << 16, 0x0F)
    assert struct.unpack_from("<HH", vector, 17) == (0, 65535 - 1000)
    struct.pack_into("<H", vector, 19, 65535 - 1001)
    err = rejects(seal(bytes(vector)), r"descriptive header says cardinality 64535, the runs hold 64536")
    assert err.location == "bitmap 0 (key 0), container 0 (chunk 0x0000)"


def test_array_cardinality_disagrees_with_header():
    blob, _, _ = load("small")  # one array container of 5 values: a smaller count leaves bytes over
    vector = bytearray(vector_of(blob))
    assert struct.unpack_from("<HH", vector, 20) == (0, 4)
    struct.pack_into("<H", vector, 22, 3)
    rejects(seal(bytes(vector)), r"2 trailing bytes after the last bitmap")
    struct.pack_into("<H", vector, 22, 5)
    rejects(seal(bytes(vector)), r"truncated array container of 6 values")


def test_offset_header_disagrees():
    blob, _, _ = load("small")
    vector = bytearray(vector_of(blob))
    assert struct.unpack_from("<I", vector, 24)[0] == 16
    struct.pack_into("<I", vector, 24, 17)
    rejects(seal(bytes(vector)), r"offset header says the container is at byte 17, it is at byte 16")


def test_bitmap_count_that_cannot_fit():
    blob, _, _ = load("small")
    vector = bytearray(vector_of(blob))
    struct.pack_into("<Q", vector, 0, 1 << 40)
    rejects(seal(bytes(vector)), rf"bitmap count {1 << 40} cannot fit")


def test_keys_not_strictly_increasing_in_real_bytes():
    blob, _, _ = load("high_keys")  # keys 0, 1, 2
    vector = bytearray(vector_of(blob))
    # key 0's empty bitmap is 8 bytes, so key 1 sits at 8 + 4 + 8
    assert struct.unpack_from("<I", vector, 20)[0] == 1
    struct.pack_into("<I", vector, 20, 0)
    err = rejects(seal(bytes(vector)), r"bitmap keys not strictly increasing: key 0 after key 0")
    assert err.location == "bitmap 1 (key 0)"


# --- hand-made hostile vectors -------------------------------------------------------------------

def test_encoder_round_trip_random_sets():
    rng = random.Random(7)
    for _ in range(30):
        positions = set()
        for _ in range(rng.randint(0, 6)):
            base = rng.choice([0, 1 << 16, 5 << 16, 1 << 32, (3 << 32) + (7 << 16)])
            kind = rng.choice(["sparse", "dense", "run"])
            if kind == "sparse":
                positions |= {base + rng.randrange(65536) for _ in range(rng.randint(1, 300))}
            elif kind == "dense":
                positions |= {base + v for v in rng.sample(range(65536), rng.randint(4097, 9000))}
            else:
                s = rng.randrange(65536)
                positions |= set(range(base + s, base + min(65536, s + rng.randint(1, 70000))))
        dv = parse_deletion_vector(encode(positions))
        assert list(dv.positions()) == sorted(positions)
        assert dv.cardinality == len(positions)


def test_hostile_run_container_over_max_positions():
    # 10 bytes of container declare 65536 positions
    vector = vector64([(0, bitmap32([(0, "run", [(0, 65535)])]))])
    assert parse_deletion_vector(seal(vector)).cardinality == 65536
    err = rejects(seal(vector), r"more than max_positions=1000 deleted positions \(at least 65536\)", max_positions=1000)
    assert err.location == "bitmap 0 (key 0)"
    # many keys of full runs: refused as soon as the running total passes the limit
    many = vector64([(k, bitmap32([(c, "run", [(0, 65535)]) for c in range(4)])) for k in range(64)])
    rejects(seal(many), r"bitmap 3 \(key 3\): more than max_positions=1000000 deleted positions \(at least 1048576\)",
            max_positions=1_000_000)
    assert parse_deletion_vector(seal(many), max_positions=64 * 4 * 65536).cardinality == 64 * 4 * 65536


def test_run_overflowing_65535():
    vector = vector64([(0, bitmap32([(0, "run", [(65000, 600)])], cards=[601]))])
    err = rejects(seal(vector), r"run 0 \(start 65000, length 601\) ends at 65600, past 65535")
    assert err.location == "bitmap 0 (key 0), container 0 (chunk 0x0000)"


def test_runs_overlapping_or_unsorted():
    vector = vector64([(0, bitmap32([(0, "run", [(10, 5), (12, 1)])]))])
    rejects(seal(vector), r"run 1 starts at 12, not after the previous run's end 15")
    # adjacent runs are not overlapping
    ok = vector64([(0, bitmap32([(0, "run", [(10, 5), (16, 1)])]))])
    assert list(parse_deletion_vector(seal(ok)).positions()) == list(range(10, 18))


def test_keys_not_strictly_increasing():
    empty = bitmap32([])
    one = bitmap32([(0, "array", [1])])
    rejects(seal(vector64([(2, one), (1, one)])), r"bitmap keys not strictly increasing: key 1 after key 2")
    rejects(seal(vector64([(0, empty), (0, one)])), r"key 0 after key 0")


def test_key_with_sign_bit():
    rejects(seal(vector64([(1 << 31, bitmap32([(0, "array", [1])]))])), r"key 2147483648 sets the sign bit")


def test_container_keys_not_increasing():
    for keys in ([3, 1], [2, 2]):
        vector = vector64([(0, bitmap32([(keys[0], "array", [1]), (keys[1], "array", [2])]))])
        err = rejects(seal(vector), rf"container keys not increasing: 0x{keys[1]:04x} after 0x{keys[0]:04x}")
        assert err.location == "bitmap 0 (key 0), container 1"


def test_array_values_not_increasing():
    for values, msg in (([1, 5, 3], r"3 after 5 \(index 2\)"), ([7, 7], r"7 after 7 \(index 1\)")):
        vector = vector64([(0, bitmap32([(4, "array", values)]))])
        err = rejects(seal(vector), r"array values not increasing: " + msg)
        assert err.location == "bitmap 0 (key 0), container 0 (chunk 0x0004)"


def test_bad_cookie():
    vector = vector64([(0, struct.pack("<II", 12345, 0))])
    rejects(seal(vector), r"bad cookie 0x00003039")


def test_too_many_containers_without_run_cookie():
    vector = vector64([(0, struct.pack("<II", 12346, 65537))])
    rejects(seal(vector), r"container count 65537 exceeds 65536")


def test_declared_containers_past_the_end():
    vector = vector64([(0, struct.pack("<II", 12346, 60000))])
    rejects(seal(vector), r"truncated descriptive header of 60000 containers: needs 240000 bytes")


def test_run_cookie_without_offsets_below_threshold():
    containers = [(0, "run", [(0, 9)]), (1, "array", [3]), (2, "bitset", set(range(0, 10000, 2)))]
    vector = vector64([(0, bitmap32(containers))])
    dv = parse_deletion_vector(seal(vector))
    expected = list(range(10)) + [65536 + 3] + [2 * 65536 + v for v in range(0, 10000, 2)]
    assert list(dv.positions()) == expected


# --- keep_mask -----------------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["empty", "small", "dense_range", "sparse_bitmap"])
def test_keep_mask_matches_positions(case):
    blob, _, expected = load(case)
    dv = parse_deletion_vector(blob, name=NAME)
    num_rows = (expected[-1] + 1 if expected else 0) + 100
    mask = dv.keep_mask(num_rows)
    assert isinstance(mask, bytearray) and len(mask) == num_rows
    deleted = set(expected)
    assert [i for i, keep in enumerate(mask) if not keep] == expected
    assert set(mask) <= {0, 1}
    assert all(mask[i] == 1 for i in range(num_rows) if i not in deleted)


def test_keep_mask_partial_bitset_container():
    # bitset container whose chunk extends past num_rows: only the first num_rows flags are written
    values = set(range(0, 9000, 2))
    blob = seal(vector64([(0, bitmap32([(0, "bitset", values)]))]))
    dv = parse_deletion_vector(blob)
    mask = dv.keep_mask(8999)
    assert len(mask) == 8999
    assert [i for i in range(8999) if not mask[i]] == sorted(values)


def test_keep_mask_rejects_positions_past_the_file():
    blob, _, expected = load("dense_range")
    dv = parse_deletion_vector(blob, name=NAME)
    with pytest.raises(FormatError, match=rf"position {expected[-1]} is past the file's {expected[-1]} rows") as info:
        dv.keep_mask(expected[-1])
    assert info.value.file == NAME
    assert len(dv.keep_mask(expected[-1] + 1)) == expected[-1] + 1
    # a vector reaching past 2^32 is refused before anything is allocated
    blob, _, expected = load("mixed")
    with pytest.raises(FormatError, match=rf"position {expected[-1]} is past the file's 1000 rows"):
        parse_deletion_vector(blob, name=NAME).keep_mask(1000)
    assert parse_deletion_vector(load("empty")[0]).keep_mask(3) == bytearray(b"\x01\x01\x01")
