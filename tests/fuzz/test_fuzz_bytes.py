"""Fuzzing the byte formats (property c): random multi-byte changes, truncations, insertions and
deletions of the table's real files (a manifest list, a manifest and a Puffin deletion vector:
AGS1 header and blocks; a Parquet data file: FileCryptoMetaData, footer, module length prefixes,
page headers), aimed at the offsets where structures begin as often as anywhere.

Each changed file is checked as the verifier checks it, ``check_file(FileTask(...), LocalFileIO())``
with the file's real key metadata, and once more with the trusted length removed from it (so that
truncations and insertions reach the parsers instead of the length check). Properties: it never
raises, stays within the time and memory bounds, and is never OK when the bytes changed; the swap
detector's :func:`~pyiceberg_crypto.verify._forensics.authenticates_as` (which reads the footer or
the first block of a failing file) never raises either. (Single-byte changes of whole small files:
``tests/verify/test_tamper_more.py``.)
"""

from __future__ import annotations

import os
import struct
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyiceberg_crypto.formats import ags1
from pyiceberg_crypto.formats.key_metadata import StandardKeyMetadata
from pyiceberg_crypto.formats.parquet.reader import ParquetFileReader, ParquetKeys
from pyiceberg_crypto.io import LocalFileIO, local_path
from pyiceberg_crypto.verify.checks import FileTask, check_file
from pyiceberg_crypto.verify._forensics import authenticates_as
from pyiceberg_crypto.verify.report import DATA, DELETION_VECTOR, MANIFEST, MANIFEST_LIST, OK
from tests.fuzz.conftest import fuzz_settings
from tests.fuzz.harness import FuzzTable, bounded


@dataclass(repr=False)
class Target:
    name: str
    data: bytes
    task: FileTask  # with the real key metadata and trusted length
    offsets: list[int]  # where structures begin

    def __repr__(self) -> str:
        return f"Target({self.name!r}, {len(self.data)} bytes)"

    def _repr_pretty_(self, printer, cycle) -> None:  # Hypothesis's printer would list the fields
        printer.text(repr(self))


def _parquet_offsets(data: bytes, key: StandardKeyMetadata, path: str) -> list[int]:
    """Page and column chunk starts (module length prefixes, page headers), FileCryptoMetaData,
    the footer module, its length and the magics."""
    footer_length = struct.unpack("<I", data[-8:-4])[0]
    footer_start = len(data) - 8 - footer_length
    offsets = {0, 4, footer_start, len(data) - 8, len(data) - 4}
    with open(local_path(path), "rb") as handle:
        reader = ParquetFileReader(handle, ParquetKeys(footer_key=key.encryption_key, aad_prefix=key.aad_prefix))
        for info in reader.column_chunks():
            start, end = reader.chunk_range(info)
            offsets |= {start, end}
            offsets |= {page.offset for page in reader.pages(info)}
    # FileCryptoMetaData is a short Thrift struct: its fields and the footer module's length prefix
    offsets |= set(range(footer_start, min(footer_start + 48, len(data))))
    return sorted(offsets)


def _ags1_offsets(data: bytes) -> list[int]:
    header, nonce = ags1.HEADER_LENGTH, ags1.HEADER_LENGTH + ags1.NONCE_LENGTH
    return sorted({0, 4, header, nonce, len(data) - ags1.TAG_LENGTH, len(data)})


@pytest.fixture(scope="module")
def targets(fuzz_table: FuzzTable) -> list[Target]:
    current = max(fuzz_table.lists.values(), key=lambda l: len(l.records))
    deletes = next(m for m in fuzz_table.manifests.values() if m.records[0]["data_file"]["content"] != 0)
    parquet = min((p for p in fuzz_table.data_keys if p.endswith(".parquet")),
                  key=lambda p: fuzz_table.data_keys[p].file_length or 0)
    puffin = next(p for p in fuzz_table.data_keys if p.endswith(".puffin"))
    out = []
    for name, kind, fmt, path, key in [
        ("manifest list", MANIFEST_LIST, "AVRO", current.path, current.key),
        ("manifest", MANIFEST, "AVRO", deletes.path, deletes.key),
        ("deletion vector", DELETION_VECTOR, "PUFFIN", puffin, fuzz_table.data_keys[puffin]),
        ("parquet", DATA, "PARQUET", parquet, fuzz_table.data_keys[parquet]),
    ]:
        data = Path(local_path(path)).read_bytes()
        record_count = None
        if kind == DATA:
            entry = next(e for m in fuzz_table.manifests.values() for e in m.records
                         if e["data_file"]["file_path"] == path)
            record_count = entry["data_file"]["record_count"]
        task = FileTask(path, kind, fmt, key_metadata=key.serialize(), expected_size=key.file_length,
                        record_count=record_count)
        assert check_file(task, LocalFileIO()).status == OK
        offsets = _parquet_offsets(data, key, path) if fmt == "PARQUET" else _ags1_offsets(data)
        out.append(Target(name, data, task, offsets))
    return out


INTERESTING_INT32 = [0, 1, 4, 8, 0x7F, 0x80, 0xFF, 0x7FFF_FFFF, 0x8000_0000, 0xFFFF_FFFF, 0xFFFF_FFF0]


@st.composite
def mutated(draw, target: Target) -> tuple[bytes, list[str]]:
    """``target``'s bytes after 1 to 4 operations, and what they were."""
    data = bytearray(target.data)
    steps = []
    for _ in range(draw(st.integers(1, 4), label="operations")):
        size = len(data)
        near = [min(max(o + d, 0), size) for o in target.offsets for d in (-2, -1, 0, 1, 2)]
        at = draw(st.sampled_from(near) | st.integers(0, size) | st.integers(max(size - 64, 0), size), label="offset")
        op = draw(st.sampled_from(["xor", "overwrite", "int32", "truncate", "insert", "delete", "copy"]), label="op")
        if op == "xor" and at < size:
            mask = draw(st.binary(min_size=1, max_size=8).map(lambda b: bytes(x or 0x01 for x in b)), label="mask")
            for i, m in enumerate(mask[: size - at]):
                data[at + i] ^= m
        elif op == "overwrite" and at < size:
            chunk = draw(st.binary(min_size=1, max_size=16), label="bytes")
            data[at:at + len(chunk)] = chunk
        elif op == "int32":
            value = draw(st.sampled_from(INTERESTING_INT32 + [size, size - at, (size - at) + 1, (size - at) - 1]),
                         label="int32")
            data[at:at + 4] = struct.pack("<I", value % 2**32)
        elif op == "truncate":
            del data[at:]
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=32) | st.sampled_from([b"\x00" * 4, b"\xff" * 4,
                                                                                   b"PARE", b"AGS1"]), label="bytes")
        elif op == "delete":
            del data[at:at + draw(st.integers(1, 32), label="count")]
        elif op == "copy" and size:  # a stretch of the file again elsewhere (a moved module or block)
            start = draw(st.sampled_from(target.offsets) | st.integers(0, size - 1), label="from") % size
            data[at:at] = data[start:start + draw(st.integers(1, 64), label="count")]
        steps.append(f"{op}@{at}")
    return bytes(data), _Steps(steps)


class _Short(tuple):
    def __repr__(self) -> str:
        return f"<{len(self[0])} bytes after {list(self[1])}>"

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(repr(self))


class _Steps(list):
    """The operations applied (short in Hypothesis's report: the bytes themselves are not printed)."""


def _without_trusted_length(task: FileTask) -> FileTask:
    key = StandardKeyMetadata.parse(task.key_metadata)
    return FileTask(task.path, task.kind, task.file_format, key_metadata=StandardKeyMetadata(
        key.encryption_key, key.aad_prefix, None).serialize(), expected_size=None, record_count=task.record_count)


@fuzz_settings(4.0)
@given(data=st.data())
def test_byte_mutations_are_never_ok(fuzz_table, targets, data):
    target = data.draw(st.sampled_from(targets), label="file")
    changed, steps = data.draw(mutated(target).map(_Short), label="mutation")
    path = fuzz_table.root / "fuzz-bytes" / f"{uuid.uuid4().hex}.bin"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(changed)
    try:
        for task in (target.task, _without_trusted_length(target.task)):
            task = FileTask(f"file:{path}", task.kind, task.file_format, key_metadata=task.key_metadata,
                            expected_size=task.expected_size, record_count=task.record_count)
            finding = bounded(lambda task=task: check_file(task, LocalFileIO()))
            if changed != target.data:
                assert finding.status != OK, f"{target.name} {steps}: {finding}"
            with open(path, "rb") as handle:
                bounded(lambda handle=handle, task=task: authenticates_as(handle, len(changed), task))
    finally:
        os.unlink(path)
