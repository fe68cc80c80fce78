"""The verifier's fast page walk (``pages(..., reuse_buffers=True)``: modules read through a
read-ahead window, a module cut by the window's end moved to the front) gives the same results
whatever the window size: the same report and plaintext on parquet-java's files, the same file
bytes from every window move, and the same failure (class and module) for a flipped byte."""

from __future__ import annotations

import io
import itertools
import random

import pytest

from pyiceberg_crypto.formats.errors import TagMismatchError
from pyiceberg_crypto.formats.parquet import reader as reader_module
from pyiceberg_crypto.formats.parquet.aad import ModuleType
from pyiceberg_crypto.formats.parquet.decrypt import decrypt_parquet
from pyiceberg_crypto.formats.parquet.errors import ModuleRef
from pyiceberg_crypto.formats.parquet.reader import ParquetFileReader, ParquetKeys
from pyiceberg_crypto.formats.parquet.verify import verify_parquet
from tests.formats.parquet.vectors import MODES

MODE_NAMES = [mode.name for mode in MODES]
#: 1 byte: every module read takes the general path; 100: windows cut most modules; 4096: some.
WINDOWS = (1, 100, 4096)


def keys_of(vector) -> ParquetKeys:
    return ParquetKeys(vector.footer_key, dict(vector.column_keys), vector.aad_prefix)


def verify_and_decrypt(data: bytes, keys: ParquetKeys):
    report = verify_parquet(io.BytesIO(data), keys, name="vector")
    out = io.BytesIO()
    try:
        decrypt_parquet(io.BytesIO(data), out, keys, name="vector")
    except Exception as exc:  # noqa: BLE001 - compared by type and module below
        return report, (type(exc), getattr(exc, "module", None))
    return report, out.getvalue()


def summary(report):
    return (report.ok, report.authenticated, report.unauthenticated, report.v2_pages_with_plaintext_levels,
            [(type(e), e.module) for e in report.failures])


@pytest.fixture(params=MODE_NAMES)
def vector(request, parquet_vector_by_name):
    return parquet_vector_by_name[request.param]


def test_window_size_changes_nothing(vector, monkeypatch):
    data = vector.path.read_bytes()
    keys = keys_of(vector)
    report, plaintext = verify_and_decrypt(data, keys)
    assert report.ok and isinstance(plaintext, bytes) and plaintext[:4] == b"PAR1"
    for window in WINDOWS:
        monkeypatch.setattr(reader_module, "READ_WINDOW", window)
        small_report, small_plaintext = verify_and_decrypt(data, keys)
        assert summary(small_report) == summary(report), window
        assert small_plaintext == plaintext, window


def test_read_view_returns_the_file_bytes_after_every_window_move(parquet_vector_by_name, monkeypatch):
    vector = parquet_vector_by_name[MODE_NAMES[0]]
    data = vector.path.read_bytes()
    monkeypatch.setattr(reader_module, "READ_WINDOW", 64)
    reader = ParquetFileReader(io.BytesIO(data), keys_of(vector))
    ref = ModuleRef(ModuleType.DATA_PAGE, 0, 0)
    rng = random.Random(24)
    offset = 0
    for _ in range(2000):
        # mostly forward (a walk: windows cut reads and carry their tail), sometimes back or far
        step = rng.choice((0, 1, 3, 30, 63, 64, 65, 200)) if rng.random() < 0.9 else rng.randrange(-offset, len(data) - offset)
        offset = min(max(offset + step, 0), len(data) - 1)
        length = rng.choice((0, 1, 4, 17, 64, 65, 300))
        length = min(length, len(data) - offset)
        assert bytes(reader._read_view(offset, length, ref)) == data[offset : offset + length], (offset, length)


@pytest.mark.parametrize("window", [4096, 2 << 20])
def test_interleaved_walks_give_the_pages_of_the_general_path(parquet_vector_by_name, monkeypatch, window):
    """Two chunks walked in turns with ``reuse_buffers`` (each walk moves the shared window) give
    the same pages as the general path (a fresh copy of every page, no window)."""
    monkeypatch.setattr(reader_module, "READ_WINDOW", window)
    for mode in (m.name for m in MODES if m.algorithm == "AES_GCM_V1"):
        vector = parquet_vector_by_name[mode]
        data, keys = vector.path.read_bytes(), keys_of(vector)
        general = ParquetFileReader(io.BytesIO(data), keys)
        chunks = [info for info in general.column_chunks() if info.encrypted][:2]
        expected = [[(p.page_type, p.ordinal, p.offset, bytes(p.data)) for p in general.pages(info)] for info in chunks]
        reader = ParquetFileReader(io.BytesIO(data), keys)
        walks = [reader.pages(reader.column_chunk(info.row_group, info.column), reuse_buffers=True) for info in chunks]
        got: list[list] = [[] for _ in walks]
        for k in itertools.islice(itertools.cycle(range(len(walks))), 4 * sum(map(len, expected))):
            page = next(walks[k], None)  # one page at a time: page.data is valid until the next page
            if page is not None:
                got[k].append((page.page_type, page.ordinal, page.offset, bytes(page.data)))
        assert got == expected, mode


def page_module_offsets(data: bytes, keys: ParquetKeys) -> list[int]:
    """File offsets of the page and page header modules of the first encrypted chunk."""
    offsets = []
    reader = ParquetFileReader(io.BytesIO(data), keys)
    info = next(i for i in reader.column_chunks() if i.encrypted)
    for page in reader.pages(info):
        header_length = int.from_bytes(data[page.offset : page.offset + 4], "little")
        offsets += [page.offset, page.offset + 4 + header_length + page.plaintext_levels]
    return offsets


@pytest.mark.parametrize("mode", [m.name for m in MODES if m.algorithm == "AES_GCM_V1"][:2])
def test_flipped_byte_fails_the_same_way_with_every_window(mode, parquet_vector_by_name, monkeypatch):
    vector = parquet_vector_by_name[mode]
    data = vector.path.read_bytes()
    keys = keys_of(vector)
    offsets = page_module_offsets(data, keys)
    picked = sorted({offsets[0], offsets[1], offsets[len(offsets) // 2], offsets[-1]})
    for module_offset in picked:
        for where in (0, 4, 20):  # length prefix, nonce, ciphertext
            tampered = bytearray(data)
            tampered[module_offset + where] ^= 0x40
            expected = None
            for window in (reader_module.READ_WINDOW, *WINDOWS):
                monkeypatch.setattr(reader_module, "READ_WINDOW", window)
                outcome = verify_and_decrypt(bytes(tampered), keys)
                got = (summary(outcome[0]), outcome[1])
                assert not outcome[0].ok and isinstance(outcome[1], tuple), (module_offset, where, window)
                if expected is None:
                    expected = got
                    if where == 20:  # inside the GCM body: the tag check is what fails
                        assert outcome[0].failures[0].__class__ is TagMismatchError
                assert got == expected, (module_offset, where, window)
            monkeypatch.undo()
