"""One encrypted file of a table, authenticated, as Arrow.

Parquet (``PARE``): the package's own decryptor
(:func:`pyiceberg_crypto.formats.parquet.decrypt_parquet`) opens the footer and every page module
of the selected column chunks with AES-GCM under the file's DEK and AAD prefix (a moved, swapped
or altered module fails its tag), after checking the trusted length; it refuses unauthenticated
(``AES_GCM_CTR_V1``) pages; it writes plaintext ``PAR1`` in memory that PyArrow decodes. Column
chunks not selected are not read at all. Why not PyArrow's own decryption
(``pyarrow.parquet.encryption.create_decryption_properties``, recent PyArrow only)? It would
authenticate the GCM modules too, but it does not know the trusted length and decodes CTR files
without a tag, it is not in every PyArrow a platform brings, and on an Iceberg file it measured
slower than our decryptor followed by PyArrow's plaintext decoding (bench/RESULTS.md, sections 2
and 7). The checks are the verifier's, so a file the reader accepts is one ``verify`` reports OK.

Avro data files and Puffin deletion vectors (``AGS1``): every block is decrypted and
authenticated in one pass (the verifier's :func:`~pyiceberg_crypto.verify.checks.check_and_decrypt`).

Anything not OK raises :class:`~pyiceberg_crypto.read.plan.ReadIntegrityError` naming the file
and the module or block; nothing from that file is returned.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Future

import pyarrow as pa
import pyarrow.parquet as pq

from pyiceberg_crypto.errors import FormatError, IntegrityError, ReadIntegrityError
from pyiceberg_crypto.formats.deletion_vector import DeletionVector, parse_deletion_vector
from pyiceberg_crypto.formats.parquet import ParquetKeys, decrypt_parquet
from pyiceberg_crypto.formats.parquet.decrypt import RowGroups
from pyiceberg_crypto.io import FileIO
from pyiceberg_crypto.read._avro import avro_to_arrow
from pyiceberg_crypto.read.plan import ContentFile
from pyiceberg_crypto.read.schema import Field, field_id, parquet_leaves
from pyiceberg_crypto.verify.checks import (
    PARQUET_ENCRYPTED_MAGIC,
    check_and_decrypt,
    preflight,
    status_of,
    stored_size,
)
from pyiceberg_crypto.verify.report import UNVERIFIABLE, FileFinding

POSITION_DELETE_PATH_ID = 2147483546  # spec "Position Delete Files": file_path
POSITION_DELETE_POS_ID = 2147483545  # pos


#: Row ranges ``[(first position, end position), ...]`` of a file that a table holds, in order.
RowRanges = list[tuple[int, int]]


def read_data_file(content: ContentFile, file_io: FileIO, fields: tuple[Field, ...], field_ids: set[int],
                   row_groups: RowGroups | None = None) -> tuple[pa.Table, RowRanges | None]:
    """The file's columns with the given top-level field ids (file names and types, field ids in
    the Arrow field metadata); ``fields`` is the read schema (used for Avro). ``row_groups``: a
    Parquet row group selection (:func:`decrypt_parquet`); the ranges of the file's row positions
    the table holds come back with it (None: every row)."""
    if content.file_format == "PARQUET":
        return read_parquet_row_groups(content, file_io, field_ids, row_groups)
    if content.file_format == "AVRO":
        return avro_to_arrow(_ags1_plaintext(content, file_io), content.path, fields, field_ids,
                             content.record_count), None
    raise ReadIntegrityError(f"{content.file_format} data files are not read (Iceberg encrypts Parquet and Avro)",
                             file=content.path, status=UNVERIFIABLE)


def read_parquet(content: ContentFile, file_io: FileIO, field_ids: set[int] | None) -> pa.Table:
    """An encrypted Parquet file, authenticated module by module, decoded by PyArrow."""
    return read_parquet_row_groups(content, file_io, field_ids)[0]


def read_parquet_row_groups(content: ContentFile, file_io: FileIO, field_ids: set[int] | None,
                            row_groups: RowGroups | None = None) -> tuple[pa.Table, RowRanges | None]:
    """:func:`read_parquet` of the selected row groups only, with the row ranges they hold (None:
    all of them were selected)."""
    task = content.task()
    size = stored_size(task, file_io)
    if isinstance(size, FileFinding):
        raise ReadIntegrityError.from_finding(size)
    out = io.BytesIO()
    leaves = (lambda elements: parquet_leaves(elements, field_ids)) if field_ids is not None else None
    try:
        with file_io.open(content.path) as handle:
            checked = preflight(task, handle, size)  # the verifier's checks before any decryption
            if isinstance(checked, FileFinding):
                raise ReadIntegrityError.from_finding(checked)
            key, trusted, magic = checked
            if magic != PARQUET_ENCRYPTED_MAGIC:
                raise ReadIntegrityError(f"bad magic {magic!r}, expected {PARQUET_ENCRYPTED_MAGIC!r}",
                                         file=content.path, location="header")
            keys = ParquetKeys(footer_key=key.encryption_key, aad_prefix=key.aad_prefix)
            result = decrypt_parquet(handle, out, keys, name=content.path, expected_size=trusted, leaf_columns=leaves,
                                     row_groups=row_groups)
    except ReadIntegrityError:
        raise
    except IntegrityError as err:
        raise ReadIntegrityError(err.reason, file=content.path, location=err.location,
                                 status=status_of(err, True)) from None
    except FormatError as exc:
        raise ReadIntegrityError(f"not readable: {exc}", file=content.path, status=UNVERIFIABLE) from None
    except OSError as exc:
        raise ReadIntegrityError(f"cannot read it: {exc.strerror or exc}", file=content.path, status=UNVERIFIABLE) from None
    if result.unauthenticated:  # AES_GCM_CTR_V1 pages carry no tag: Iceberg never writes them
        raise ReadIntegrityError(f"pages without authentication tags: {result.unauthenticated}", file=content.path,
                                 status=UNVERIFIABLE)
    if content.kind == "data" and result.num_rows != content.record_count:
        raise ReadIntegrityError(f"authenticated, but it holds {result.num_rows} rows and the manifest entry says "
                                 f"{content.record_count}", file=content.path, location="footer")
    parquet = pq.ParquetFile(pa.BufferReader(out.getbuffer()))
    names = [f.name for f in parquet.schema_arrow if field_ids is None or field_id(f) in field_ids]
    if not result.skipped_row_groups:
        return parquet.read(columns=names, use_threads=False), None
    kept = result.selected_row_groups or []
    starts = [0]
    for index in range(parquet.metadata.num_row_groups):
        starts.append(starts[-1] + parquet.metadata.row_group(index).num_rows)
    ranges = [(starts[i], starts[i + 1]) for i in kept]
    if not kept:
        return parquet.schema_arrow.empty_table().select(names), ranges
    return parquet.read_row_groups(kept, columns=names, use_threads=False), ranges


def _ags1_plaintext(content: ContentFile, file_io: FileIO) -> bytes:
    """An AGS1 file's plaintext, every block authenticated, or ReadIntegrityError."""
    finding, plaintext = check_and_decrypt(content.task(), file_io)
    if finding.status != "OK" or plaintext is None:
        raise ReadIntegrityError.from_finding(finding)
    return plaintext


# --- delete files ---------------------------------------------------------------------------


class OnceCache:
    """Each key computed once, shared by threads (a Puffin file holding many DVs is read once)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._futures: dict[Hashable, Future] = {}

    def get(self, key: Hashable, compute: Callable[[], object]):
        with self._lock:
            future = self._futures.get(key)
            owner = future is None
            if owner:
                future = self._futures[key] = Future()
        if owner:
            try:
                future.set_result(compute())
            except BaseException as exc:
                future.set_exception(exc)
        return future.result()


def read_deletion_vector(content: ContentFile, file_io: FileIO, puffin_files: OnceCache) -> DeletionVector:
    """The deletion vector ``content`` points at (its blob in a Puffin file), authenticated."""
    # Keyed by what the entry claims, not the path alone: DV entries sharing a Puffin file that
    # disagree about its length or key are each checked against their own claim.
    claim = (content.path, content.size, content.key_metadata)
    plaintext = puffin_files.get(claim, lambda: _ags1_plaintext(content, file_io))
    offset, size = content.content_offset, content.content_size
    if offset is None or size is None or offset < 0 or size < 0 or offset + size > len(plaintext):
        raise ReadIntegrityError(f"the manifest places the deletion vector at offset {offset}, {size} bytes, "
                                 f"outside the {len(plaintext)}-byte Puffin file", file=content.path)
    try:
        # The authenticated manifest entry's record count bounds what the blob may expand to.
        return parse_deletion_vector(plaintext[offset:offset + size], name=content.path,
                                     max_positions=content.record_count, expected_cardinality=content.record_count)
    except FormatError as exc:  # its reason and place in the blob (the file is named once, here)
        where = f"blob at {offset}" + (f", {exc.location}" if exc.location else "")
        raise ReadIntegrityError(f"authenticated, but not the deletion vector the manifest describes: {exc.reason}",
                                 file=content.path, location=where) from None


def read_position_deletes(content: ContentFile, file_io: FileIO, cache: OnceCache) -> dict[str, list[int]]:
    """A position delete file as {data file path: deleted positions}."""
    def load() -> dict[str, list[int]]:
        table = read_parquet(content, file_io, {POSITION_DELETE_PATH_ID, POSITION_DELETE_POS_ID})
        ids = {field_id(f): f.name for f in table.schema}
        if POSITION_DELETE_PATH_ID not in ids or POSITION_DELETE_POS_ID not in ids:
            raise ReadIntegrityError("authenticated, but not a position delete file (no file_path / pos columns)",
                                     file=content.path, status=UNVERIFIABLE)
        paths = table.column(ids[POSITION_DELETE_PATH_ID]).to_pylist()
        positions = table.column(ids[POSITION_DELETE_POS_ID]).to_pylist()
        found: dict[str, list[int]] = {}
        for path, pos in zip(paths, positions):
            found.setdefault(path, []).append(pos)
        return found
    return cache.get(content.path, load)


def read_equality_deletes(content: ContentFile, file_io: FileIO, cache: OnceCache) -> pa.Table:
    """An equality delete file as an Arrow table of the deleted key tuples: one column per
    ``equality_ids`` entry, in that order (nulls kept: Iceberg's equality deletes match null to null)."""
    def load() -> pa.Table:
        ids = set(content.equality_ids)
        if content.file_format == "PARQUET":
            table = read_parquet(content, file_io, ids)
        else:
            raise ReadIntegrityError(f"{content.file_format} equality delete files are not read yet", file=content.path,
                                     status=UNVERIFIABLE)
        by_id = {field_id(f): i for i, f in enumerate(table.schema)}
        missing = [i for i in content.equality_ids if i not in by_id]
        if missing:
            raise ReadIntegrityError(f"equality delete file lacks equality field(s) {missing}", file=content.path)
        return pa.table({f"k{n}": table.column(by_id[i]) for n, i in enumerate(content.equality_ids)})
    return cache.get(content.path, load)


__all__ = ["OnceCache", "read_data_file", "read_deletion_vector", "read_equality_deletes", "read_parquet",
           "read_position_deletes"]
