"""Section 2, PARE: verify and decrypt one large encrypted Parquet file.

Two files with the same kind of data (``id`` bigint, ``category`` string with 100 values:
dictionary pages; ``name`` 64-char hex string and ``score`` random double: plain pages after the
dictionary fallback; ``ts`` timestamp), written in the same run:

* by Iceberg through Spark (an encrypted table, one data file: parquet-java, encrypted footer,
  AAD prefix not stored), keys from the table's ``files`` metadata table (``key_metadata``);
* by PyArrow (``create_encryption_properties``, AAD prefix not stored), the same key/AAD scheme.

Timed on each, from the page cache, one thread:

* raw AES-GCM (reference): read the file, then ``AESGCM.decrypt`` of exactly the GCM modules the
  verifier authenticates (bodies located by a first, untimed walk; no parsing, no checks);
* ``verify_parquet`` (every module authenticated) and ``decrypt_parquet`` to plaintext ``PAR1``
  (written to a sink that discards the bytes, so disk speed is not measured);
* PyArrow's native decrypting read ``pq.read_table(..., decryption_properties=
  create_decryption_properties(footer_key, aad_prefix=...), use_threads=False)``: decrypts,
  decompresses and decodes into Arrow (more work than ours; the reference a user would compare).

GB/s = stored file bytes / seconds.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pyarrow.parquet import encryption as pe

from bench.context import CATALOG, MASTER_KEY_ID, Context
from bench.harness import Goal, Row, Section, per_second, time_interleaved
from pyiceberg_crypto import config
from pyiceberg_crypto.formats.key_metadata import StandardKeyMetadata
from pyiceberg_crypto.formats.parquet.decrypt import decrypt_parquet
from pyiceberg_crypto.formats.parquet.modules import GCM_OVERHEAD, NONCE_LENGTH, ModuleCipher
from pyiceberg_crypto.formats.parquet.reader import ParquetFileReader, ParquetKeys
from pyiceberg_crypto.formats.parquet.verify import verify_parquet

TITLE = "2. PARE: verify and decrypt one encrypted Parquet file"
DESCRIPTION = (
    "One data file written by Iceberg through Spark (parquet-java, encrypted footer, AAD prefix not "
    "stored; keys from the table's `files` metadata table) and one written by PyArrow with the same "
    "key scheme; columns `id` bigint, `category` (100 values: dictionary pages), `name` (64-char hex) "
    "and `score` (random double): plain pages after the dictionary fallback, `ts` timestamp; zstd. "
    "One thread, warm page cache, contenders take turns in each repeat; GB/s = stored file bytes / s. References: raw AES-GCM = read the "
    "file (1 MiB `readinto`) + `AESGCM.decrypt_into` of exactly the GCM modules the verifier opens, "
    "held in memory (no parsing, no checks, no allocation); "
    "PyArrow `read_table(..., decryption_properties=create_decryption_properties(footer_key, "
    "aad_prefix=...), use_threads=False)` (decrypts, decompresses and decodes to Arrow). "
    "`decrypt_parquet` writes to a sink that discards the bytes."
)


class DiscardingSink:
    """A binary sink that counts and drops bytes (decrypt speed without disk speed)."""

    def __init__(self) -> None:
        self.size = 0

    def write(self, data) -> int:
        self.size += len(data)
        return len(data)


def iceberg_data_file(ctx: Context, rows: int) -> tuple[Path, ParquetKeys]:
    """One encrypted data file written by Iceberg (one Spark task); its path and keys."""
    spark = ctx.spark
    table = f"{CATALOG}.db.pare_source"
    spark.sql(f"DROP TABLE IF EXISTS {table} PURGE")
    props = config.table_properties(MASTER_KEY_ID)
    spark.sql(f"CREATE TABLE {table} (id bigint, category string, name string, score double, ts timestamp) "
              f"USING iceberg {config.tblproperties_sql(props)}")
    spark.sql(
        f"INSERT INTO {table} SELECT id, concat('category-', id % 100), sha2(cast(id AS string), 256), "
        f"rand(7), timestamp_micros(1700000000000000 + id * 1000) FROM range(0, {rows}, 1, 1)")
    files = spark.sql(f"SELECT file_path, key_metadata FROM {table}.files").collect()
    if len(files) != 1:
        raise RuntimeError(f"expected one data file, Iceberg wrote {len(files)}")
    key = StandardKeyMetadata.parse(bytes(files[0].key_metadata))
    path = Path(files[0].file_path.removeprefix("file:"))
    return path, ParquetKeys(footer_key=key.encryption_key, aad_prefix=key.aad_prefix)


def arrow_table(rows: int) -> pa.Table:
    """The same kind of columns as the Iceberg file (pure PyArrow, no numpy)."""
    ids = pa.array(range(rows), pa.int64())
    names = pa.StringArray.from_buffers(
        rows, pa.array(range(0, 64 * (rows + 1), 64), pa.int32()).buffers()[1],
        pa.py_buffer(os.urandom(32 * rows).hex().encode()))
    categories = pa.array([f"category-{i}" for i in range(100)]).take(pa.array([i % 100 for i in range(rows)]))
    micros = pc.add(pc.multiply(ids, 1000), 1_700_000_000_000_000)
    return pa.table({
        "id": ids,
        "category": categories,
        "name": names,
        "score": pc.random(rows),
        "ts": micros.cast(pa.timestamp("us")),
    })


def pyarrow_data_file(path: Path, rows: int) -> ParquetKeys:
    """An encrypted Parquet file written by PyArrow (AAD prefix not stored, as Iceberg does)."""
    key, prefix = os.urandom(16), os.urandom(16)
    properties = pe.create_encryption_properties(key, aad_prefix=prefix, store_aad_prefix=False)
    pq.write_table(arrow_table(rows), path, encryption_properties=properties, compression="zstd")
    return ParquetKeys(footer_key=key, aad_prefix=prefix)


class _RecordingCipher(ModuleCipher):
    """A ModuleCipher that remembers every GCM module it opened (body and AAD)."""

    def __init__(self, key: bytes, modules: list[tuple[bytes, bytes, bytes]]):
        super().__init__(key)
        self._modules = modules

    def decrypt_gcm(self, body, aad: bytes) -> bytes:
        self._modules.append((self._key, bytes(body), bytes(aad)))
        return super().decrypt_gcm(body, aad)


class _RecordingReader(ParquetFileReader):
    def __init__(self, *args, modules, **kwargs):
        self._recorded = modules
        super().__init__(*args, **kwargs)

    def _cipher(self, key: bytes) -> ModuleCipher:
        cipher = self._ciphers.get(key)
        if cipher is None:
            cipher = self._ciphers[key] = _RecordingCipher(key, self._recorded)
        return cipher


def gcm_modules(path: Path, keys: ParquetKeys) -> list[tuple[bytes, bytes, bytes]]:
    """``(key, nonce|ciphertext|tag, aad)`` of every GCM module a full verification opens."""
    modules: list[tuple[bytes, bytes, bytes]] = []
    with open(path, "rb") as f:
        reader = _RecordingReader(f, keys, modules=modules)
        for info in reader.column_chunks():
            for _ in reader.pages(info):
                pass
            reader.column_index(info)
            reader.offset_index(info)
            reader.bloom_filter(info)
    return modules


def raw_gcm(path: Path, modules: list[tuple[bytes, bytes, bytes]]) -> None:
    """Read the file (1 MiB ``readinto`` into one buffer), then decrypt each recorded module into
    one preallocated buffer: the cost floor of any verifier of this file."""
    buffer = bytearray(1 << 20)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buffer):
            pass
    ciphers: dict[bytes, AESGCM] = {}
    out = memoryview(bytearray(max(len(body) for _, body, _ in modules)))
    for key, body, aad in modules:
        gcm = ciphers.get(key) or ciphers.setdefault(key, AESGCM(key))
        view = memoryview(body)
        gcm.decrypt_into(view[:NONCE_LENGTH], view[NONCE_LENGTH:], aad, out[: len(body) - GCM_OVERHEAD])


def verify(path: Path, keys: ParquetKeys) -> None:
    with open(path, "rb") as f:
        report = verify_parquet(f, keys, name=str(path))
    if not report.ok:
        raise RuntimeError(f"verification failed: {report.failures or report.not_verifiable}")


def decrypt(path: Path, keys: ParquetKeys) -> None:
    with open(path, "rb") as f:
        decrypt_parquet(f, DiscardingSink(), keys, name=str(path))


def pyarrow_read(path: Path, keys: ParquetKeys) -> None:
    properties = pe.create_decryption_properties(keys.footer_key, aad_prefix=keys.aad_prefix)
    pq.read_table(path, decryption_properties=properties, use_threads=False)


def file_rows(label: str, tag: str, path: Path, keys: ParquetKeys, repeats: int) -> list[Row]:
    size = path.stat().st_size
    modules = gcm_modules(path, keys)
    section = "PARE"
    name = f"{label} ({size / 2**20:.0f} MiB, {len(modules)} GCM modules)"
    times = time_interleaved({
        "raw": lambda: raw_gcm(path, modules),
        "verify": lambda: verify(path, keys),
        "decrypt": lambda: decrypt(path, keys),
        "arrow": lambda: pyarrow_read(path, keys),
    }, repeats)
    raw, ours_verify, ours_decrypt, arrow = times["raw"], times["verify"], times["decrypt"], times["arrow"]
    gbps = lambda seconds: per_second(size, seconds, 1e9)  # noqa: E731
    return [
        Row(section, f"raw{tag}", f"{name}: raw read + AES-GCM of its modules", "GB/s", gbps(raw),
            short="raw AES-GCM"),
        Row(section, f"arrow{tag}", f"{name}: PyArrow `read_table` (decrypt + decode)", "GB/s", gbps(arrow),
            short="PyArrow"),
        Row(section, f"verify{tag}", f"{name}: `verify_parquet`", "GB/s", gbps(ours_verify),
            refs=(f"raw{tag}", f"arrow{tag}"), headline=True),
        Row(section, f"decrypt{tag}", f"{name}: `decrypt_parquet` to plaintext", "GB/s", gbps(ours_decrypt),
            refs=(f"raw{tag}", f"arrow{tag}"), headline=not tag),
    ]


def run(ctx: Context) -> Section:
    sizes = ctx.sizes
    directory = ctx.data_dir / "pare"
    directory.mkdir(parents=True, exist_ok=True)
    ctx.log(f"PARE: Iceberg writes {sizes.parquet_rows:,} rows")
    iceberg_path, iceberg_keys = iceberg_data_file(ctx, sizes.parquet_rows)
    ctx.log(f"PARE: PyArrow writes {sizes.parquet_rows:,} rows")
    arrow_path = directory / "pyarrow.parquet"
    arrow_keys = pyarrow_data_file(arrow_path, sizes.parquet_rows)
    section = Section(TITLE, DESCRIPTION)
    ctx.log("PARE: timing the Iceberg-written file")
    section.rows += file_rows("Iceberg file", "", iceberg_path, iceberg_keys, sizes.goal_repeats)
    ctx.log("PARE: timing the PyArrow-written file")
    section.rows += file_rows("PyArrow file", "_arrow", arrow_path, arrow_keys, sizes.goal_repeats)
    section.goals = GOALS
    return section


_PYTHON_PER_PAGE = ("What remains is Python work per page: decoding page headers, per-page bookkeeping and, on "
                    "the Iceberg file, its column and offset indexes (profile: bench/README.md).")
#: Issue 24, item 1.
GOALS = [
    Goal("`verify_parquet` vs raw AES-GCM, Iceberg file", "verify", 0.90, ref="raw", why=_PYTHON_PER_PAGE),
    Goal("`verify_parquet` vs raw AES-GCM, PyArrow file", "verify_arrow", 0.90, ref="raw_arrow", why=_PYTHON_PER_PAGE),
    Goal("`decrypt_parquet` vs raw AES-GCM, Iceberg file", "decrypt", 0.60, ref="raw", why=_PYTHON_PER_PAGE),
    Goal("`decrypt_parquet` vs raw AES-GCM, PyArrow file", "decrypt_arrow", 0.60, ref="raw_arrow",
         why=_PYTHON_PER_PAGE),
]
