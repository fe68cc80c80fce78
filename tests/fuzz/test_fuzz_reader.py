"""The JVM-free reader under the fuzzing harness: on a manifest or manifest list whose records were
changed (re-encrypted and re-chained, so the crypto passes and the reader's own checks are what is
tested), ``read_table`` either returns rows or raises its two documented errors, within the
bounds; and it never returns rows of a table the verifier does not find OK in full (the reader
trusts nothing the verifier would reject). On the bytes: a flipped bit or a cut anywhere in a live
data file or deletion-vector file fails the read."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyiceberg_crypto.io import local_path
from pyiceberg_crypto.errors import TableInputError
from pyiceberg_crypto.read import ReadIntegrityError, read_table
from pyiceberg_crypto.verify import verify_metadata
from tests.fuzz.conftest import fuzz_settings
from tests.fuzz.harness import FuzzTable, bounded
from tests.fuzz.test_fuzz_avro import mutate_one_field


def read_and_verify(table: FuzzTable, location: str) -> None:
    def read():
        try:
            return read_table(location, table.kms(), max_workers=2), None
        except (ReadIntegrityError, TableInputError) as exc:
            return None, exc

    rows, error = bounded(read)
    if rows is None:  # a mutated table may be refused: with a message
        assert str(error), "an error without a message"
        return

    def verify():
        try:
            return verify_metadata(location, table.kms())
        except TableInputError:
            return None

    report = bounded(verify)
    assert report is not None and not report.not_ok(), (
        f"the reader returned {rows.num_rows} rows, the verifier says: "
        f"{[(f.kind, f.status, f.detail[:80]) for f in report.not_ok()] if report else 'unreadable metadata'}")


@fuzz_settings(0.5)
@given(data=st.data())
def test_reader_on_manifest_mutations(fuzz_table, data):
    path_of = data.draw(st.sampled_from(sorted(fuzz_table.manifests)), label="manifest")
    _, _, _, _, records = mutate_one_field(data, fuzz_table, fuzz_table.manifests[path_of])
    with fuzz_table.variant(manifests={path_of: records}) as location:
        read_and_verify(fuzz_table, location)


@fuzz_settings(0.5)
@given(data=st.data())
def test_reader_on_manifest_list_mutations(fuzz_table, data):
    snapshot_id = data.draw(st.sampled_from(sorted(fuzz_table.lists)), label="snapshot")
    _, _, _, _, records = mutate_one_field(data, fuzz_table, fuzz_table.lists[snapshot_id])
    with fuzz_table.variant(lists={snapshot_id: records}) as location:
        read_and_verify(fuzz_table, location)


def test_every_byte_flip_or_truncation_of_a_live_file_fails_the_read(fuzz_table):
    """Data files (PARE) and the deletion vectors' Puffin file (AGS1): each byte the read depends on
    is authenticated, so any flipped bit or cut anywhere in them fails the read (seeded positions)."""
    assert read_table(fuzz_table.metadata_location, fuzz_table.kms()).num_rows > 0
    live = sorted({local_path(r["data_file"]["file_path"]) for m in fuzz_table.manifests.values()
                   for r in m.records if r["status"] != 2})
    assert any(p.endswith(".puffin") for p in live) and any(p.endswith(".parquet") for p in live)
    rng = random.Random(17)
    for path in live:
        original = Path(path).read_bytes()
        for attempt in range(16):
            data = bytearray(original)
            if attempt % 4:
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
            else:
                del data[rng.randrange(len(data)):]
            Path(path).write_bytes(bytes(data))
            try:
                with pytest.raises(ReadIntegrityError):
                    read_table(fuzz_table.metadata_location, fuzz_table.kms())
            finally:
                Path(path).write_bytes(original)
