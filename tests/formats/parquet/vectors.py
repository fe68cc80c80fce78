"""Encrypted Parquet reference files written by real parquet-java / Iceberg in the test JVM.

The pure-Python PARE verifier is tested against these files. Python chooses the keys and AAD
prefixes (``os.urandom``) and describes each file; ``io.pyicebergcrypto.testkit.ParquetVectors``
(Java) writes it with parquet-java's ``FileEncryptionProperties`` and records the rows it wrote::

    def test_something(parquet_vectors):            # session fixture (see conftest.py)
        for vector in parquet_vectors:
            vector.path, vector.footer_key, vector.column_keys, vector.aad_prefix ...
            vector.rows                             # what Java wrote, in the JSON convention below

    def test_iceberg(iceberg_data_files):           # files Iceberg wrote through Spark SQL
        for data_file in iceberg_data_files:
            data_file.path, data_file.dek, data_file.aad_prefix, data_file.spark_rows ...

Row convention ("JSON rows", shared by Java's reader and :func:`rows_from_arrow`): a dict per row;
structs are dicts, lists are lists, nulls None; STRING as str, other binaries as lowercase hex,
DECIMAL as plain decimal text ("-49.63"), timestamps as int microseconds since the epoch (UTC),
booleans, ints and doubles as themselves.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

#: Leaf columns of ParquetVectors.SCHEMA, dotted paths, in schema order.
ALL_COLUMNS: tuple[str, ...] = (
    "id",
    "name",
    "score",
    "flag",
    "amount",
    "ts",
    "address.city",
    "address.zip",
    "tags.list.element",
    "payload",
)

#: Features a vector may claim (checked against parquet-java by test_vectors_java_roundtrip.py).
FEATURES = frozenset(
    {
        "dictionary",
        "page_v2",
        "column_index",
        "offset_index",
        "bloom_filter",
        "multi_row_group",
        "multi_page",
        "nested",
        "optional",
        "footer_key_metadata",
        "column_key_metadata",
    }
)


def _key_summary(key: bytes | None) -> str:
    return "None" if key is None else f"<{len(key) * 8}-bit key>"


@dataclass(frozen=True)
class ParquetVector:
    """One encrypted Parquet file written by parquet-java, and everything needed to read it.

    Key fields are hidden from ``repr`` (only their sizes are shown).
    """

    name: str
    path: Path
    footer_key: bytes | None = field(repr=False)
    #: dotted column path -> its own key; columns encrypted with the footer key are not listed.
    column_keys: dict[str, bytes] = field(repr=False)
    unencrypted_columns: set[str]
    aad_prefix: bytes | None = field(repr=False)
    aad_prefix_stored: bool
    algorithm: str  # "AES_GCM_V1" | "AES_GCM_CTR_V1"
    plaintext_footer: bool
    features: frozenset[str]
    #: the rows Java wrote, in the JSON-row convention (see the module docstring).
    rows: list[dict[str, Any]] = field(repr=False)
    rows_path: Path = field(repr=False)
    codec: str = "UNCOMPRESSED"
    bloom_filter_columns: frozenset[str] = frozenset()
    footer_key_metadata: bytes | None = None
    column_key_metadata: dict[str, bytes] = field(default_factory=dict)
    rows_per_row_group: int = 150
    rows_per_page: int = 50

    @property
    def footer_key_columns(self) -> set[str]:
        """Columns encrypted with the footer key."""
        return set(ALL_COLUMNS) - set(self.column_keys) - self.unencrypted_columns

    @property
    def uniform(self) -> bool:
        """True when every column is encrypted with the footer key (one key for the whole file)."""
        return not self.column_keys and not self.unencrypted_columns

    def __repr__(self) -> str:  # keys never shown; only their sizes
        return (
            f"ParquetVector(name={self.name!r}, path={str(self.path)!r}, "
            f"footer_key={_key_summary(self.footer_key)}, "
            f"column_keys={{{', '.join(f'{k!r}: {_key_summary(v)}' for k, v in self.column_keys.items())}}}, "
            f"unencrypted_columns={sorted(self.unencrypted_columns)}, "
            f"aad_prefix={'None' if self.aad_prefix is None else f'<{len(self.aad_prefix)} bytes>'}, "
            f"aad_prefix_stored={self.aad_prefix_stored}, algorithm={self.algorithm!r}, "
            f"plaintext_footer={self.plaintext_footer}, codec={self.codec!r}, "
            f"features={sorted(self.features)})"
        )


@dataclass(frozen=True)
class VectorMode:
    """How one vector is written (keys are drawn at generation time)."""

    name: str
    algorithm: str = "AES_GCM_V1"
    footer_key_bits: int = 128
    plaintext_footer: bool = False
    aad_prefix: bool = False
    aad_prefix_stored: bool = True
    column_key_bits: Mapping[str, int] = field(default_factory=dict)  # own-key columns
    footer_key_columns: tuple[str, ...] = ()  # listed explicitly (per-column mode)
    complete: bool = False  # columns not listed get the footer key
    footer_key_metadata: bytes | None = None
    dictionary: bool = True
    page_v2: bool = False
    bloom: tuple[str, ...] = ()
    codec: str = "UNCOMPRESSED"
    rows: int = 200
    rows_per_row_group: int = 150
    rows_per_page: int = 50

    @property
    def per_column(self) -> bool:
        return bool(self.column_key_bits or self.footer_key_columns)

    def unencrypted(self) -> set[str]:
        if not self.per_column or self.complete:
            return set()
        return set(ALL_COLUMNS) - set(self.column_key_bits) - set(self.footer_key_columns)


#: Every mode the spec defines, each combined with a few page-level features.
MODES: tuple[VectorMode, ...] = (
    VectorMode("uniform_gcm", bloom=("id", "payload"), codec="ZSTD"),
    VectorMode(
        "uniform_ctr_aes256",
        algorithm="AES_GCM_CTR_V1",
        footer_key_bits=256,
        footer_key_metadata=b"footer-k1",
        bloom=("id",),
        codec="SNAPPY",
    ),
    VectorMode("uniform_gcm_aes192_page_v2", footer_key_bits=192, page_v2=True, bloom=("ts",)),
    VectorMode(
        "uniform_ctr_page_v2_plain",
        algorithm="AES_GCM_CTR_V1",
        page_v2=True,
        dictionary=False,
        bloom=("payload", "name"),
        codec="ZSTD",
    ),
    VectorMode(
        "per_column_gcm",
        column_key_bits={"name": 256, "payload": 128, "tags.list.element": 192},
        footer_key_columns=("id", "score"),
        bloom=("id", "payload", "ts"),
    ),
    VectorMode(
        "per_column_complete_ctr",
        algorithm="AES_GCM_CTR_V1",
        footer_key_bits=256,
        column_key_bits={"name": 128, "address.zip": 256, "ts": 192},
        complete=True,
        page_v2=True,
        bloom=("ts", "id"),
        codec="SNAPPY",
    ),
    VectorMode(
        "plaintext_footer_gcm",
        plaintext_footer=True,
        column_key_bits={"name": 128, "address.zip": 192},
        footer_key_columns=("id", "payload"),
        bloom=("id", "payload", "ts"),
    ),
    VectorMode(
        "plaintext_footer_ctr_uniform",
        algorithm="AES_GCM_CTR_V1",
        plaintext_footer=True,
        footer_key_metadata=b"footer-k2",
        bloom=("id",),
    ),
    VectorMode("aad_prefix_stored_gcm", aad_prefix=True, aad_prefix_stored=True, bloom=("id",)),
    # What Iceberg 1.11.0 writes: uniform, AES_GCM_V1, 16-byte DEK, AAD prefix not stored, ZSTD.
    VectorMode(
        "aad_prefix_not_stored_gcm",
        aad_prefix=True,
        aad_prefix_stored=False,
        bloom=("id",),
        codec="ZSTD",
    ),
    VectorMode(
        "plaintext_footer_aad_not_stored_ctr",
        algorithm="AES_GCM_CTR_V1",
        plaintext_footer=True,
        aad_prefix=True,
        aad_prefix_stored=False,
        column_key_bits={"amount": 256},
        footer_key_columns=("id", "tags.list.element"),
        page_v2=True,
        bloom=("id", "amount"),
    ),
    VectorMode("single_row_gcm", rows=1, dictionary=False),
)


def _features(mode: VectorMode) -> frozenset[str]:
    features = {"column_index", "offset_index"}
    if mode.rows > 1:
        features |= {"nested", "optional"}  # row 0 has a null struct and an empty list
    if mode.dictionary:
        features.add("dictionary")
    if mode.page_v2:
        features.add("page_v2")
    if mode.bloom:
        features.add("bloom_filter")
    if mode.rows > mode.rows_per_row_group:
        features.add("multi_row_group")
    if min(mode.rows, mode.rows_per_row_group) > mode.rows_per_page:
        features.add("multi_page")
    if mode.footer_key_metadata is not None:
        features.add("footer_key_metadata")
    if mode.column_key_bits:
        features.add("column_key_metadata")
    return frozenset(features)


def load_json_rows(path: Path) -> list[dict[str, Any]]:
    """Rows from a JSON-lines file written by ParquetVectors (one JSON object per line)."""
    with open(path, encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def _random_bytes(label: str, length: int) -> bytes:
    return os.urandom(length)


def generate_parquet_vectors(
    jvm: Any,
    directory: Path,
    modes: Iterable[VectorMode] = MODES,
    key_bytes: Callable[[str, int], bytes] = _random_bytes,
) -> list[ParquetVector]:
    """Write one file per mode into ``directory`` through parquet-java. Keys and AAD prefixes come
    from ``key_bytes(label, length)``: ``os.urandom`` by default, derived from the label for the
    committed vectors (tests/formats/fixtures/make_java_vectors.py)."""
    testkit = jvm.io.pyicebergcrypto.testkit.ParquetVectors
    vectors = []
    for mode in modes:
        path = directory / f"{mode.name}.parquet"
        rows_path = directory / f"{mode.name}.expected.jsonl"
        footer_key = key_bytes(f"{mode.name}/footer", mode.footer_key_bits // 8)
        aad_prefix = key_bytes(f"{mode.name}/aad", 12) if mode.aad_prefix else None
        column_keys = {
            column: key_bytes(f"{mode.name}/{column}", bits // 8) for column, bits in mode.column_key_bits.items()
        }
        column_key_metadata = {column: f"key-{column}".encode() for column in column_keys}

        spec = (
            testkit.spec(str(path), str(rows_path))
            .footerKey(footer_key)
            .algorithm(mode.algorithm)
            .plaintextFooter(mode.plaintext_footer)
            .dictionary(mode.dictionary)
            .pageV2(mode.page_v2)
            .codec(mode.codec)
            .rows(mode.rows)
            .rowGroupRows(mode.rows_per_row_group)
            .pageRows(mode.rows_per_page)
            .completeColumnEncryption(mode.complete)
        )
        if mode.footer_key_metadata is not None:
            spec.footerKeyMetadata(mode.footer_key_metadata)
        if aad_prefix is not None:
            spec.aadPrefix(aad_prefix, mode.aad_prefix_stored)
        for column, key in column_keys.items():
            spec.columnKey(column, key, column_key_metadata[column])
        for column in mode.footer_key_columns:
            spec.footerKeyColumn(column)
        for column in mode.bloom:
            spec.bloomFilter(column)
        spec.write()

        vectors.append(
            ParquetVector(
                name=mode.name,
                path=path,
                footer_key=footer_key,
                column_keys=column_keys,
                unencrypted_columns=mode.unencrypted(),
                aad_prefix=aad_prefix,
                aad_prefix_stored=mode.aad_prefix_stored if aad_prefix is not None else False,
                algorithm=mode.algorithm,
                plaintext_footer=mode.plaintext_footer,
                features=_features(mode),
                rows=load_json_rows(rows_path),
                rows_path=rows_path,
                codec=mode.codec,
                bloom_filter_columns=frozenset(mode.bloom),
                footer_key_metadata=mode.footer_key_metadata,
                column_key_metadata=column_key_metadata,
                rows_per_row_group=mode.rows_per_row_group,
                rows_per_page=mode.rows_per_page,
            )
        )
    return vectors


# ---- reading through parquet-java ----


def java_keys(
    jvm: Any,
    footer_key: bytes | None = None,
    column_keys: Mapping[str, bytes] | None = None,
    aad_prefix: bytes | None = None,
) -> Any:
    """A Java ``ParquetVectors.Keys`` (decryption keys) for :func:`java_read_rows` / inspect."""
    keys = jvm.io.pyicebergcrypto.testkit.ParquetVectors.keys()
    if footer_key is not None:
        keys.footer(footer_key)
    if aad_prefix is not None:
        keys.aadPrefix(aad_prefix)
    for column, key in (column_keys or {}).items():
        keys.column(column, key)
    return keys


def vector_java_keys(jvm: Any, vector: ParquetVector) -> Any:
    """All the keys of ``vector``, as Java decryption keys."""
    return java_keys(jvm, vector.footer_key, vector.column_keys, vector.aad_prefix)


def java_read_rows(jvm: Any, path: Path, out: Path, keys: Any = None) -> list[dict[str, Any]]:
    """Rows of any Parquet file as parquet-java reads them (JSON rows); ``keys`` from java_keys().

    ``keys=None`` reads without decryption properties (plaintext Parquet, e.g. decrypted output).
    """
    jvm.io.pyicebergcrypto.testkit.ParquetVectors.readJsonLines(str(path), keys, str(out))
    return load_json_rows(out)


def java_inspect(jvm: Any, path: Path, keys: Any = None) -> dict[str, Any]:
    """parquet-java's view of the file's layout (row groups, columns, pages, indexes, blooms)."""
    return json.loads(jvm.io.pyicebergcrypto.testkit.ParquetVectors.inspect(str(path), keys))


# ---- PyArrow ----


def _json_value(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _json_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.timezone.utc)
        delta = value - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return value


def rows_from_arrow(table: Any) -> list[dict[str, Any]]:
    """A ``pyarrow.Table`` as JSON rows (same convention as Java's reader), for comparisons."""
    return [_json_value(row) for row in table.to_pylist()]


def read_with_pyarrow(vector: ParquetVector) -> Any:
    """PyArrow's own decryption of ``vector`` (a ``pyarrow.Table``), or None if unsupported.

    pyarrow 26 has ``pyarrow.parquet.encryption.create_decryption_properties(footer_key, *,
    aad_prefix=None, check_footer_integrity=True, allow_plaintext_files=False)``, documented as
    "only uniform encryption (single key for footer and all columns)"; per-column keys need the
    KMS-based ``CryptoFactory`` (key metadata in its own JSON format), which parquet-java's raw
    key metadata does not follow. So: uniform vectors only.

    Also not page-v2 vectors: parquet-java writes a v2 data page as ``header, repetition levels,
    definition levels (both PLAINTEXT), encrypted values``; Arrow C++ expects the levels inside
    the encrypted page module and fails on columns with levels ("Written ciphertext length ...
    overflows int32"). See :func:`pyarrow_fails_on_parquet_java_page_v2`.
    """
    if not vector.uniform or vector.footer_key is None or "page_v2" in vector.features:
        return None
    import pyarrow.parquet as pq
    from pyarrow.parquet import encryption

    properties = encryption.create_decryption_properties(
        vector.footer_key, aad_prefix=vector.aad_prefix
    )
    return pq.read_table(vector.path, decryption_properties=properties)


def pyarrow_fails_on_parquet_java_page_v2(vector: ParquetVector) -> bool:
    """True if PyArrow cannot decrypt this uniform page-v2 vector (the known incompatibility)."""
    import pyarrow.parquet as pq
    from pyarrow.parquet import encryption

    properties = encryption.create_decryption_properties(vector.footer_key, aad_prefix=vector.aad_prefix)
    try:
        pq.read_table(vector.path, decryption_properties=properties)
    except OSError as error:
        return "ciphertext length" in str(error)
    return False


# ---- Iceberg data files (written by Iceberg 1.11.0 through Spark SQL) ----

ICEBERG_CATALOG = "javakms_pq"
ICEBERG_TABLE = f"{ICEBERG_CATALOG}.pq_vectors.encrypted_rows"
ICEBERG_MASTER_KEY_ID = "pq-master"


@dataclass(frozen=True)
class IcebergDataFile:
    """One encrypted data file of an Iceberg table, with its key material from Iceberg's metadata.

    ``spark_rows``: the rows Spark reads from this file, as Python values (``Row.asDict(recursive=
    True)``; ``ts`` as a UTC-aware datetime). ``rows``: the same rows in the JSON-row convention
    (via :func:`rows_from_arrow`'s value rules), comparable with :func:`rows_from_arrow` output.
    """

    path: Path
    location: str
    dek: bytes = field(repr=False)
    aad_prefix: bytes = field(repr=False)
    spark_rows: list[dict[str, Any]] = field(repr=False)
    rows: list[dict[str, Any]] = field(repr=False)

    def __repr__(self) -> str:
        return (
            f"IcebergDataFile(path={str(self.path)!r}, dek=<{len(self.dek) * 8}-bit key>, "
            f"aad_prefix=<{len(self.aad_prefix)} bytes>, rows={len(self.rows)})"
        )


def register_iceberg_catalog(spark: Any, warehouse: Path) -> None:
    """Register catalog ``javakms_pq`` (Hive, JavaMemoryKms with a fresh master key) at run time."""
    prefix = f"spark.sql.catalog.{ICEBERG_CATALOG}"
    master_key = base64.b64encode(os.urandom(16)).decode()
    settings = {
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": "hive",
        f"{prefix}.warehouse": warehouse.absolute().as_uri(),
        f"{prefix}.encryption.kms-impl": "io.pyicebergcrypto.testkit.JavaMemoryKms",
        f"{prefix}.testkit.master-key.{ICEBERG_MASTER_KEY_ID}": master_key,
        f"{prefix}.hadoop.iceberg.engine.hive.lock-enabled": "false",
    }
    for key, value in settings.items():
        spark.conf.set(key, value)


_ICEBERG_ROWS_SQL = """
SELECT
  id,
  CASE WHEN id % 7 = 3 THEN NULL ELSE concat('name-', CAST(id % 5 AS STRING)) END AS name,
  CASE WHEN id % 11 = 5 THEN NULL ELSE CAST(id * 1.37 - 50 AS DECIMAL(10, 2)) END AS amount,
  timestamp_micros(1700000000000000 + id * 1000003) AS ts,
  CAST(id AS DOUBLE) / 4 AS score,
  id % 3 = 0 AS flag,
  CASE WHEN id % 13 = 0 THEN NULL
       ELSE named_struct('city', concat('city-', CAST(id % 3 AS STRING)),
                         'zip', CASE WHEN id % 4 = 1 THEN NULL ELSE CAST(10000 + id AS INT) END)
  END AS address,
  CASE WHEN id % 9 = 2 THEN NULL
       ELSE transform(filter(sequence(0, 3), j -> j < id % 4),
                      j -> CASE WHEN (id + j) % 5 = 0 THEN NULL ELSE concat('t', CAST(j AS STRING)) END)
  END AS tags
FROM range({start}, {stop}, 1, {partitions})
"""


def _local_path(location: str) -> Path:
    parsed = urlparse(location)
    return Path(unquote(parsed.path)) if parsed.scheme in ("file", "") else Path(location)


def create_iceberg_data_files(spark: Any, jvm: Any, warehouse: Path) -> list[IcebergDataFile]:
    """Create an encrypted Iceberg v3 table through Spark SQL and return its data files + keys."""
    register_iceberg_catalog(spark, warehouse)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {ICEBERG_CATALOG}.pq_vectors")
    spark.sql(f"DROP TABLE IF EXISTS {ICEBERG_TABLE}")
    spark.sql(
        f"CREATE TABLE {ICEBERG_TABLE} (id bigint, name string, amount decimal(10,2), "
        "ts timestamp, score double, flag boolean, address struct<city: string, zip: int>, "
        "tags array<string>) USING iceberg "
        f"TBLPROPERTIES ('encryption.key-id'='{ICEBERG_MASTER_KEY_ID}', 'format-version'='3')"
    )
    for start, stop, partitions in ((0, 200, 2), (200, 320, 1)):
        spark.sql(
            f"INSERT INTO {ICEBERG_TABLE} "
            + _ICEBERG_ROWS_SQL.format(start=start, stop=stop, partitions=partitions)
        )

    table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, ICEBERG_TABLE)
    keys_by_location = {}
    for line in jvm.io.pyicebergcrypto.testkit.ParquetVectors.dataFileKeys(table).splitlines():
        location, dek, aad = line.split("\t")
        keys_by_location[location] = (base64.b64decode(dek), base64.b64decode(aad))

    spark_rows: dict[str, list[dict[str, Any]]] = {location: [] for location in keys_by_location}
    query = f"SELECT *, unix_micros(ts) AS __ts_micros, _file AS __file FROM {ICEBERG_TABLE} ORDER BY id"
    for row in spark.sql(query).collect():
        values = row.asDict(recursive=True)
        micros = values.pop("__ts_micros")
        values["ts"] = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=micros)
        spark_rows[values.pop("__file")].append(values)

    return [
        IcebergDataFile(
            path=_local_path(location),
            location=location,
            dek=dek,
            aad_prefix=aad,
            spark_rows=spark_rows[location],
            rows=[_json_value(row) for row in spark_rows[location]],
        )
        for location, (dek, aad) in sorted(keys_by_location.items())
    ]
