"""The Thrift compact codec: generic round trips, known encodings, hostile input, and
re-encoding real footers written by parquet-java byte for byte."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyiceberg_crypto.errors import FormatError
from pyiceberg_crypto.formats.parquet.aad import ModuleType, module_aad
from pyiceberg_crypto.formats.parquet.reader import ParquetFileReader, ParquetKeys
from pyiceberg_crypto.formats.parquet.thrift import TList, TMap, TStruct, TType, decode_struct, encode_struct

SCALARS = {
    TType.BOOL: st.booleans(),
    TType.BYTE: st.integers(-128, 127),
    TType.I16: st.integers(-(2**15), 2**15 - 1),
    TType.I32: st.integers(-(2**31), 2**31 - 1),
    TType.I64: st.integers(-(2**63), 2**63 - 1),
    TType.DOUBLE: st.floats(allow_nan=False),
    TType.BINARY: st.binary(max_size=40),
}


def values(depth: int):
    scalar = st.sampled_from(list(SCALARS)).flatmap(lambda t: SCALARS[t].map(lambda v: (t, v)))
    if depth == 0:
        return scalar
    elem = st.sampled_from(list(SCALARS))
    lists = elem.flatmap(lambda t: st.lists(SCALARS[t], max_size=20).map(lambda items: (TType.LIST, TList(t, items))))
    maps = st.lists(st.tuples(SCALARS[TType.BINARY], SCALARS[TType.I32]), max_size=4).map(
        lambda items: (TType.MAP, TMap(TType.BINARY, TType.I32, items) if items else TMap(0, 0, []))
    )
    return st.one_of(scalar, lists, maps, structs(depth - 1).map(lambda s: (TType.STRUCT, s)))


def structs(depth: int = 2):
    return st.dictionaries(st.integers(1, 300), values(depth), max_size=6).map(TStruct)


@settings(max_examples=300, deadline=None)
@given(structs())
def test_round_trip(struct):
    encoded = encode_struct(struct)
    decoded, end = decode_struct(encoded + b"trailing", 0)
    assert decoded == struct and end == len(encoded)
    assert encode_struct(decoded) == encoded


def test_known_encoding():
    # field 1 i32 = 1 (delta 1, type 5, zigzag 2); field 20 binary "ab" (long form); bool field 21
    struct = TStruct({1: (TType.I32, 1), 20: (TType.BINARY, b"ab"), 21: (TType.BOOL, False)})
    assert encode_struct(struct) == bytes([0x15, 0x02, 0x08, 0x28, 0x02]) + b"ab" + bytes([0x12, 0x00])
    big_list = TStruct({2: (TType.LIST, TList(TType.I32, list(range(20))))})
    assert encode_struct(big_list)[:3] == bytes([0x29, 0xF5, 20])


@pytest.mark.parametrize(
    "data",
    [b"", b"\x15", b"\x18\x10ab", b"\x19\xf5\xff\xff\xff\x0f", b"\x1c" * 200, b"\x1e", b"\x16\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"],
)
def test_hostile_input_is_a_thrift_error(data):
    with pytest.raises(FormatError):
        decode_struct(data, 0)


def test_real_footers_round_trip_byte_for_byte(parquet_vectors):
    """parquet-java's serialised FileMetaData re-encodes to the same bytes (no field lost)."""
    for vector in parquet_vectors:
        keys = ParquetKeys(vector.footer_key, dict(vector.column_keys), vector.aad_prefix)
        with open(vector.path, "rb") as f:
            footer = ParquetFileReader(f, keys).footer
        metadata = footer.metadata
        assert metadata.get(3) == len(vector.rows)  # num_rows
        if vector.plaintext_footer:
            data = vector.path.read_bytes()
            length = int.from_bytes(data[-8:-4], "little")
            stored = data[-8 - length : -8 - 28]
            assert encode_struct(metadata) == stored, vector.name
        else:
            assert decode_struct(encode_struct(metadata), 0)[0] == metadata


def test_module_aad_layout():
    file_aad = b"prefix" + b"unique"
    assert module_aad(file_aad, ModuleType.FOOTER) == file_aad + b"\x00"
    assert module_aad(file_aad, ModuleType.DATA_PAGE, 1, 2, 3) == file_aad + bytes([2, 1, 0, 2, 0, 3, 0])
    assert module_aad(file_aad, ModuleType.COLUMN_INDEX, 258, 0) == file_aad + bytes([6, 2, 1, 0, 0])
    with pytest.raises(ValueError):
        module_aad(file_aad, ModuleType.DICTIONARY_PAGE, 0, 0, 1)
    with pytest.raises(ValueError):
        module_aad(file_aad, ModuleType.DATA_PAGE_HEADER, 0, 0)
    with pytest.raises(ValueError):
        module_aad(file_aad, ModuleType.DATA_PAGE, 0, 0, 40000)


def test_a_spec_checks_the_wire_types_of_the_fields_it_names_at_any_depth():
    from pyiceberg_crypto.formats.parquet.structs import ROW_GROUP_SPEC

    def row_group(column_meta_field: tuple) -> bytes:
        meta = TStruct()
        meta.set(*column_meta_field)
        chunk = TStruct()
        chunk.set(3, TType.STRUCT, meta)
        chunk.set(99, TType.LIST, TList(TType.I32, [1]))  # a field the spec does not name: any type
        group = TStruct()
        group.set(1, TType.LIST, TList(TType.STRUCT, [chunk]))
        return encode_struct(group)

    decoded, _ = decode_struct(row_group((7, TType.I64, 123)), 0, ROW_GROUP_SPEC)  # well typed: passes
    assert decoded.get(1).items[0].get(3).get(7) == 123
    with pytest.raises(FormatError, match=r"ColumnMetaData.total_compressed_size \(field 7\) has wire type binary, the IDL says i64"):
        decode_struct(row_group((7, TType.BINARY, b"123")), 0, ROW_GROUP_SPEC)
    wrong_elements = TStruct()
    wrong_elements.set(1, TType.LIST, TList(TType.BINARY, [b"chunk"]))
    with pytest.raises(FormatError, match=r"RowGroup.columns \(field 1\) holds binary elements, the IDL says struct"):
        decode_struct(encode_struct(wrong_elements), 0, ROW_GROUP_SPEC)
    assert decode_struct(encode_struct(wrong_elements), 0)[0] == wrong_elements  # without a spec: generic
