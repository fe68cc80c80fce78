"""Encrypted Parquet files written by Arrow C++ (PyArrow 26), for cross-implementation tests.

The pure-Python verifier was built against parquet-java (see vectors.py); these files come from
the other major implementation. PyArrow offers two ways to encrypt, and both are used:

* ``api="kms"``: ``CryptoFactory`` + ``EncryptionConfiguration`` with ``double_wrapping=False``.
  Arrow draws every DEK itself and asks the KMS to wrap it; :class:`RecordingKms` remembers each
  DEK it is asked to wrap (keyed by an opaque token it returns as the "wrapped key"), and every
  own-key column uses its own master key id, so the wrap calls say which DEK belongs to which
  column. This is the only route to per-column keys and plaintext columns.
* ``api="direct"``: ``create_encryption_properties(footer_key, aad_prefix=..., store_aad_prefix=...)``
  (uniform encryption only); the only route to an AAD prefix, stored or not stored.

Usage::

    vectors = generate_arrow_vectors(tmp_dir)          # list[ArrowVector], one per ARROW_MODES
    v = vectors[0]
    v.path, v.footer_key, v.column_keys, v.aad_prefix, v.table   # table: what Arrow wrote
    read_with_pyarrow(v)                               # PyArrow's own decryption of the file

API facts found on pyarrow 26.0.1 (checked by the tests):

* Bloom filters cannot be combined with encryption: ``write_table(..., bloom_filter_options=...,
  encryption_properties=...)`` fails at close with "Not yet implemented: Encryption is not
  currently supported with bloom filter" (even for a plaintext column of an encrypted file).
* A "footer key column" (own ColumnCryptoMetaData saying ENCRYPTION_WITH_FOOTER_KEY next to
  own-key columns) cannot be produced from Python: the CryptoFactory gives every listed column
  its own DEK (listing a column under the footer's master key id still draws a separate DEK),
  and the direct API is uniform only.
* ``CryptoFactory`` ignores ``plaintext_footer=True`` when ``uniform_encryption=True`` (the file
  gets an encrypted footer; arrow cpp/src/parquet/encryption/crypto_factory.cc sets the plaintext
  footer only inside ``if (!uniform_encryption)``). The direct API honours it.
* ``data_key_length_bits`` sets the length of every DEK the CryptoFactory draws (footer too).
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from tests.formats.parquet.vectors import ALL_COLUMNS, _key_summary

#: Leaf columns of :func:`arrow_table`, dotted paths (Arrow's compliant 3-level lists), in order:
#: the same schema as the parquet-java vectors, so both writers are checked on identical columns.
ARROW_COLUMNS: tuple[str, ...] = ALL_COLUMNS

FOOTER_MASTER_KEY = "mk-footer"


def column_master_key(path: str) -> str:
    """Each own-key column gets its own master key id, so wrap calls identify its DEK."""
    return f"mk-{path}"


@dataclass(frozen=True)
class ArrowMode:
    """How one Arrow vector is written (keys are drawn at generation time)."""

    name: str
    api: str  # "kms" (CryptoFactory) | "direct" (create_encryption_properties)
    algorithm: str = "AES_GCM_V1"
    key_bits: int = 128  # every DEK (kms: data_key_length_bits; direct: the footer key)
    plaintext_footer: bool = False
    own_key_columns: tuple[str, ...] = ()  # kms only; empty = uniform encryption
    plaintext_columns: bool = True  # kms per-column: columns not listed stay plaintext
    aad_prefix: bool = False  # direct only
    store_aad_prefix: bool = True
    dictionary: bool = True
    dictionary_pagesize_limit: int | None = None  # small: Arrow falls back to PLAIN mid-chunk
    page_v2: bool = False
    page_index: bool = True
    page_checksum: bool = False
    codec: str = "snappy"
    rows: int = 300
    row_group_size: int = 100
    max_rows_per_page: int = 40

    @property
    def uniform(self) -> bool:
        return not self.own_key_columns


#: Every mode Arrow can write from Python, each combined with a few page-level features.
ARROW_MODES: tuple[ArrowMode, ...] = (
    ArrowMode("kms_uniform_gcm_aes128", "kms"),
    ArrowMode(
        "kms_uniform_ctr_aes256_page_v2",
        "kms",
        algorithm="AES_GCM_CTR_V1",
        key_bits=256,
        page_v2=True,
        dictionary=False,
        codec="zstd",
    ),
    ArrowMode(
        "kms_per_column_gcm_aes192_page_v2",
        "kms",
        key_bits=192,
        own_key_columns=("name", "address.zip", "tags.list.element", "payload"),
        page_v2=True,
        page_checksum=True,
        dictionary_pagesize_limit=256,
    ),
    ArrowMode(
        "kms_all_columns_own_keys_ctr_aes256",
        "kms",
        algorithm="AES_GCM_CTR_V1",
        key_bits=256,
        own_key_columns=ARROW_COLUMNS,
        plaintext_columns=False,
        page_index=False,
        codec="none",
    ),
    ArrowMode(
        "kms_plaintext_footer_per_column_gcm",
        "kms",
        plaintext_footer=True,
        own_key_columns=("name", "amount", "tags.list.element"),
    ),
    # (CryptoFactory ignores plaintext_footer with uniform_encryption: hence own keys here.)
    ArrowMode(
        "kms_plaintext_footer_all_columns_own_keys_ctr_aes192_page_v2",
        "kms",
        algorithm="AES_GCM_CTR_V1",
        key_bits=192,
        plaintext_footer=True,
        own_key_columns=ARROW_COLUMNS,
        plaintext_columns=False,
        page_v2=True,
    ),
    ArrowMode(
        "direct_aad_stored_gcm_aes256",
        "direct",
        key_bits=256,
        aad_prefix=True,
        store_aad_prefix=True,
        dictionary_pagesize_limit=256,
        page_checksum=True,
    ),
    # What Iceberg writes (uniform, AES_GCM_V1, 16-byte DEK, AAD prefix not stored), by Arrow.
    ArrowMode("direct_aad_not_stored_gcm_aes128", "direct", aad_prefix=True, store_aad_prefix=False, codec="zstd"),
    ArrowMode(
        "direct_aad_not_stored_plaintext_footer_ctr_aes192_page_v2",
        "direct",
        algorithm="AES_GCM_CTR_V1",
        key_bits=192,
        plaintext_footer=True,
        aad_prefix=True,
        store_aad_prefix=False,
        page_v2=True,
    ),
    ArrowMode(
        "direct_plaintext_footer_aad_stored_gcm_page_v2",
        "direct",
        plaintext_footer=True,
        aad_prefix=True,
        page_v2=True,
        codec="zstd",
    ),
    ArrowMode("direct_single_row_gcm", "direct", rows=1, page_index=False),
)


@dataclass(frozen=True)
class ArrowVector:
    """One encrypted Parquet file written by Arrow C++, and everything needed to read it.

    Key fields are hidden from ``repr`` (only their sizes are shown).
    """

    mode: ArrowMode
    path: Path
    footer_key: bytes = field(repr=False)
    #: dotted column path -> its own DEK; empty for uniform encryption.
    column_keys: dict[str, bytes] = field(repr=False)
    unencrypted_columns: frozenset[str]
    aad_prefix: bytes | None = field(repr=False)
    #: the expected contents: the table handed to ``pq.write_table``.
    table: Any = field(repr=False)
    features: frozenset[str] = frozenset()
    #: kms vectors only: token -> DEK ledger, to let PyArrow decrypt its own file again.
    ledger: dict[str, tuple[str, bytes]] = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str:
        return self.mode.name

    @property
    def algorithm(self) -> str:
        return self.mode.algorithm

    @property
    def plaintext_footer(self) -> bool:
        return self.mode.plaintext_footer

    @property
    def aad_prefix_stored(self) -> bool:
        return self.aad_prefix is not None and self.mode.store_aad_prefix

    @property
    def encrypted_columns(self) -> tuple[str, ...]:
        return tuple(c for c in ARROW_COLUMNS if c not in self.unencrypted_columns)

    def __repr__(self) -> str:  # keys never shown; only their sizes
        return (
            f"ArrowVector(name={self.name!r}, path={str(self.path)!r}, "
            f"footer_key={_key_summary(self.footer_key)}, "
            f"column_keys={{{', '.join(f'{k!r}: {_key_summary(v)}' for k, v in self.column_keys.items())}}}, "
            f"unencrypted_columns={sorted(self.unencrypted_columns)}, "
            f"aad_prefix={'None' if self.aad_prefix is None else f'<{len(self.aad_prefix)} bytes>'}, "
            f"features={sorted(self.features)})"
        )


# ---- the table ----


def arrow_table(rows: int) -> Any:
    """A deterministic table with flat, optional (nulls), decimal, timestamp, struct and list columns."""
    import pyarrow as pa

    epoch = dt.datetime(2023, 11, 14, tzinfo=dt.timezone.utc)
    ids = range(rows)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array([None if i % 7 == 3 else f"name-{i % 5}" for i in ids], pa.string()),
            "score": pa.array([i / 4 for i in ids], pa.float64()),
            "flag": pa.array([i % 3 == 0 for i in ids], pa.bool_()),
            "amount": pa.array(
                [None if i % 11 == 5 else Decimal(i * 137 - 5000).scaleb(-2) for i in ids], pa.decimal128(10, 2)
            ),
            "ts": pa.array([epoch + dt.timedelta(microseconds=i * 1_000_003) for i in ids], pa.timestamp("us", tz="UTC")),
            "address": pa.array(
                [
                    None if i % 13 == 0 else {"city": f"city-{i % 3}", "zip": None if i % 4 == 1 else 10000 + i}
                    for i in ids
                ],
                pa.struct([pa.field("city", pa.string()), pa.field("zip", pa.int32())]),
            ),
            "tags": pa.array(
                [
                    None if i % 9 == 2 else [None if (i + j) % 5 == 0 else f"t{j}" for j in range(i % 4)]
                    for i in ids
                ],
                pa.list_(pa.string()),
            ),
            # distinct per row: a dictionary of these outgrows a small dictionary page limit
            "payload": pa.array([hashlib.sha256(b"row %d" % i).digest()[: 8 + i % 17] for i in ids], pa.binary()),
        }
    )


# ---- keys ----


def recording_kms_factory(ledger: dict[str, tuple[str, bytes]]) -> Any:
    """A ``CryptoFactory`` KMS client factory whose clients record the DEKs they wrap.

    The "wrapped key" handed back to Arrow is an opaque token (``base64("<master id>#<n>")``),
    never key bytes; ``unwrap_key`` looks the token up again, so PyArrow can read the file back.
    """
    from pyarrow.parquet import encryption as pe

    class RecordingKms(pe.KmsClient):
        def __init__(self, _config: Any):
            super().__init__()

        def wrap_key(self, key_bytes: bytes, master_key_identifier: str) -> str:
            token = base64.b64encode(f"{master_key_identifier}#{len(ledger)}".encode()).decode()
            ledger[token] = (master_key_identifier, bytes(key_bytes))
            return token

        def unwrap_key(self, wrapped_key: str, master_key_identifier: str) -> bytes:
            master, key = ledger[wrapped_key]
            if master != master_key_identifier:
                raise ValueError(f"key wrapped with {master}, not {master_key_identifier}")
            return key

    return RecordingKms


def _dek_of(ledger: dict[str, tuple[str, bytes]], master: str) -> bytes:
    found = [key for m, key in ledger.values() if m == master]
    if len(found) != 1:
        raise AssertionError(f"expected exactly one DEK wrapped with {master!r}, got {len(found)}")
    return found[0]


def _kms_properties(mode: ArrowMode, ledger: dict[str, tuple[str, bytes]]) -> Any:
    from pyarrow.parquet import encryption as pe

    options: dict[str, Any] = dict(
        encryption_algorithm=mode.algorithm,
        plaintext_footer=mode.plaintext_footer,
        double_wrapping=False,
        data_key_length_bits=mode.key_bits,
        cache_lifetime=dt.timedelta(minutes=5),
    )
    if mode.uniform:
        config = pe.EncryptionConfiguration(FOOTER_MASTER_KEY, uniform_encryption=True, **options)
    else:
        columns = {column_master_key(c): [c] for c in mode.own_key_columns}
        config = pe.EncryptionConfiguration(FOOTER_MASTER_KEY, column_keys=columns, **options)
    factory = pe.CryptoFactory(recording_kms_factory(ledger))
    return factory.file_encryption_properties(pe.KmsConnectionConfig(), config)


# ---- writing ----


def _features(mode: ArrowMode) -> frozenset[str]:
    features = {"nested", "optional"} if mode.rows > 1 else set()
    if mode.page_index:
        features |= {"column_index", "offset_index"}
    if mode.dictionary:
        features.add("dictionary")
        if mode.dictionary_pagesize_limit is not None:
            features.add("dictionary_fallback")
    if mode.page_v2:
        features.add("page_v2")
    if mode.page_checksum:
        features.add("page_checksum")
    if mode.rows > mode.row_group_size:
        features.add("multi_row_group")
    if min(mode.rows, mode.row_group_size) > mode.max_rows_per_page:
        features.add("multi_page")
    if mode.api == "kms":
        features.add("footer_key_metadata")
        if not mode.uniform:
            features.add("column_key_metadata")
    if not mode.uniform and mode.plaintext_columns:
        features.add("plaintext_columns")
    return frozenset(features)


def write_arrow_vector(mode: ArrowMode, directory: Path) -> ArrowVector:
    """Write one file for ``mode`` into ``directory`` with PyArrow; keys from ``os.urandom``/Arrow."""
    import pyarrow.parquet as pq
    from pyarrow.parquet import encryption as pe

    if mode.api == "direct" and not mode.uniform:
        raise ValueError("the direct API encrypts uniformly only")
    if mode.api == "kms" and mode.aad_prefix:
        raise ValueError("the CryptoFactory has no AAD prefix option")
    path = directory / f"{mode.name}.parquet"
    table = arrow_table(mode.rows)
    ledger: dict[str, tuple[str, bytes]] = {}  # token -> (master key id, DEK)
    aad_prefix = os.urandom(16) if mode.aad_prefix else None
    if mode.api == "kms":
        properties = _kms_properties(mode, ledger)
    else:
        footer_key = os.urandom(mode.key_bits // 8)
        properties = pe.create_encryption_properties(
            footer_key,
            aad_prefix=aad_prefix,
            store_aad_prefix=mode.store_aad_prefix,
            encryption_algorithm=mode.algorithm,
            plaintext_footer=mode.plaintext_footer,
        )
    options: dict[str, Any] = {}
    if mode.dictionary_pagesize_limit is not None:
        # the limit is checked after each write batch: small batches make the fallback happen
        # inside a chunk (dictionary page, RLE_DICTIONARY pages, then PLAIN pages)
        options.update(dictionary_pagesize_limit=mode.dictionary_pagesize_limit, write_batch_size=10)
    pq.write_table(
        table,
        path,
        encryption_properties=properties,
        row_group_size=mode.row_group_size,
        max_rows_per_page=mode.max_rows_per_page,
        use_dictionary=mode.dictionary,
        data_page_version="2.0" if mode.page_v2 else "1.0",
        write_page_index=mode.page_index,
        write_page_checksum=mode.page_checksum,
        compression=mode.codec,
        **options,
    )
    if mode.api == "kms":  # the DEKs Arrow drew, one wrap call each
        footer_key = _dek_of(ledger, FOOTER_MASTER_KEY)
        column_keys = {c: _dek_of(ledger, column_master_key(c)) for c in mode.own_key_columns}
        if len(ledger) != 1 + len(column_keys):
            raise AssertionError(f"{len(ledger)} wrap calls for {1 + len(column_keys)} DEKs")
    else:
        column_keys = {}
    unencrypted = set(ARROW_COLUMNS) - set(column_keys) if not mode.uniform else set()
    return ArrowVector(
        mode=mode,
        path=path,
        footer_key=footer_key,
        column_keys=column_keys,
        unencrypted_columns=frozenset(unencrypted),
        aad_prefix=aad_prefix,
        table=table,
        features=_features(mode),
        ledger=dict(ledger),
    )


def generate_arrow_vectors(directory: Path, modes: Iterable[ArrowMode] = ARROW_MODES) -> list[ArrowVector]:
    """One Arrow-written encrypted file per mode in ``directory``."""
    return [write_arrow_vector(mode, directory) for mode in modes]


# ---- reading with PyArrow itself ----


def pyarrow_decryption_properties(vector: ArrowVector) -> Any:
    """The decryption properties PyArrow needs for ``vector`` (its own key management)."""
    from pyarrow.parquet import encryption as pe

    if vector.mode.api == "direct":
        return pe.create_decryption_properties(vector.footer_key, aad_prefix=vector.aad_prefix)
    ledger = dict(vector.ledger)
    factory = pe.CryptoFactory(recording_kms_factory(ledger))
    return factory.file_decryption_properties(pe.KmsConnectionConfig())


def read_with_pyarrow(vector: ArrowVector) -> Any:
    """PyArrow's own decryption of ``vector`` (a ``pyarrow.Table``)."""
    import pyarrow.parquet as pq

    return pq.read_table(vector.path, decryption_properties=pyarrow_decryption_properties(vector))
