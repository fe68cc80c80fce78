"""The reference vectors Java made, committed under ``tests/formats/fixtures/java/``: read without a JVM.

``python -m tests.formats.fixtures.make_java_vectors`` made them with Iceberg's and parquet-java's
own classes in a Spark JVM (the test kit's ``Ags1Vectors`` and ``ParquetVectors``);
``tests/formats/test_java_fixtures.py`` (``jvm``) checks them against Java again. Every input
(keys, AAD prefixes, plaintexts) is derived from a label with :func:`derive`, so Java's
deterministic outputs can be compared byte for byte::

    from tests.formats import java_fixtures

    vector = java_fixtures.ags1("iceberg-k16-1048577")    # what Iceberg's AesGcmOutputFile wrote
    vector.data, vector.key, vector.aad_prefix, vector.plaintext
    java_fixtures.key_metadata()                          # StandardKeyMetadata bytes from Iceberg
    java_fixtures.manifest_list_keys()                    # EncryptionUtil envelopes from Iceberg
    java_fixtures.parquet_vectors(tmp_dir)                # parquet-java files, as ParquetVector

AGS1 files are stored compactly, because Iceberg's 1 MiB blocks make the real files megabytes of
random bytes: ``ags1.json`` describes each file (key, AAD prefix, plaintext label and length, block
size, the SHA-256 and length of the file Java wrote) and ``ags1_nonces.bin`` holds the 12-byte
nonces Java drew, block after block. :func:`ags1` rebuilds the file with AES-GCM from those nonces
(independently of ``pyiceberg_crypto.formats.ags1``) and checks its SHA-256 against Java's: the
bytes the tests read are exactly the bytes Java wrote.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import shutil
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "java"
NONCE_LENGTH = 12


def derive(label: str, length: int) -> bytes:
    """``length`` deterministic bytes for ``label`` (SHAKE-256): the vectors' keys and plaintexts."""
    return hashlib.shake_256(label.encode()).digest(length)


def _unhex(value: str | None) -> bytes | None:
    return None if value is None else bytes.fromhex(value)


# --- AGS1 -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ags1Vector:
    """One AGS1 stream Java wrote: by Iceberg's ``AesGcmOutputFile`` (``writer="iceberg-stream"``,
    1 MiB blocks) or framed around Iceberg's ``Ciphers.AesGcmEncryptor`` (``"ciphers-framing"``)."""

    name: str
    writer: str
    key: bytes = field(repr=False)
    aad_prefix: bytes | None = field(repr=False)
    block_size: int
    plaintext: bytes = field(repr=False)
    data: bytes = field(repr=False)


@functools.lru_cache(maxsize=1)
def ags1_index() -> dict[str, dict[str, Any]]:
    """``ags1.json``: name -> description (see the module docstring)."""
    entries = json.loads((FIXTURES / "ags1.json").read_text())["files"]
    return {entry["name"]: entry for entry in entries}


@functools.lru_cache(maxsize=1)
def _nonces() -> bytes:
    return (FIXTURES / "ags1_nonces.bin").read_bytes()


def ags1_names(writer: str | None = None) -> list[str]:
    """Names of the committed AGS1 streams (of one ``writer`` if given)."""
    return [name for name, entry in ags1_index().items() if writer in (None, entry["writer"])]


def assemble_ags1(plaintext: bytes, key: bytes, aad_prefix: bytes | None, block_size: int, nonces: bytes) -> bytes:
    """The AGS1 stream with these nonces: header, then per block nonce + AES-GCM(block, prefix + LE32 index)."""
    cipher = AESGCM(key)
    prefix = aad_prefix or b""
    parts = [b"AGS1" + struct.pack("<I", block_size)]
    count = len(nonces) // NONCE_LENGTH
    for index in range(count):
        nonce = nonces[index * NONCE_LENGTH : (index + 1) * NONCE_LENGTH]
        block = plaintext[index * block_size : (index + 1) * block_size]
        parts.append(nonce + cipher.encrypt(nonce, block, prefix + struct.pack("<I", index)))
    return b"".join(parts)


def nonces_of(data: bytes, block_size: int) -> bytes:
    """The nonces of an AGS1 stream (the first 12 bytes of every encrypted block)."""
    step = block_size + 28
    return b"".join(data[offset : offset + NONCE_LENGTH] for offset in range(8, len(data), step))


@functools.lru_cache(maxsize=None)
def ags1(name: str) -> Ags1Vector:
    """The AGS1 stream ``name`` exactly as Java wrote it (rebuilt from its nonces, SHA-256 checked)."""
    entry = ags1_index()[name]
    plaintext = derive(entry["plaintext_label"], entry["plaintext_length"])
    assert hashlib.sha256(plaintext).hexdigest() == entry["plaintext_sha256"], f"{name}: plaintext drifted"
    key, aad_prefix = bytes.fromhex(entry["key"]), _unhex(entry["aad_prefix"])
    start, count = entry["nonce_offset"], entry["block_count"]
    nonces = _nonces()[start : start + count * NONCE_LENGTH]
    data = assemble_ags1(plaintext, key, aad_prefix, entry["block_size"], nonces)
    assert len(data) == entry["length"] and hashlib.sha256(data).hexdigest() == entry["sha256"], (
        f"{name}: the rebuilt stream is not the one Java wrote"
    )
    return Ags1Vector(name, entry["writer"], key, aad_prefix, entry["block_size"], plaintext, data)


# --- StandardKeyMetadata and the manifest-list key envelope -----------------------------------


def key_metadata() -> dict[str, Any]:
    """``key_metadata.json``: ``{"vectors": [{key, aad_prefix, file_length, java}], "with_length": {...}}``
    with bytes as lowercase hex: what Iceberg's ``StandardKeyMetadata`` encoder wrote."""
    return json.loads((FIXTURES / "key_metadata.json").read_text())


def manifest_list_keys() -> list[dict[str, Any]]:
    """``manifest_list_key.json``: ``[{kek, timestamp, key_metadata, envelope}]`` (hex), the envelopes
    Iceberg's ``EncryptionUtil`` wrote (random nonces: check by decrypting)."""
    return json.loads((FIXTURES / "manifest_list_key.json").read_text())["envelopes"]


# --- parquet-java ------------------------------------------------------------------------------


def parquet_vectors(directory: Path) -> list[Any]:
    """The committed parquet-java files, copied into ``directory``, as ``vectors.ParquetVector``."""
    from tests.formats.parquet.vectors import ParquetVector, load_json_rows

    source = FIXTURES / "parquet"
    directory.mkdir(parents=True, exist_ok=True)
    vectors = []
    for description in sorted(source.glob("*.json")):
        meta = json.loads(description.read_text())
        name = meta["name"]
        path, rows_path = directory / f"{name}.parquet", directory / f"{name}.expected.jsonl"
        shutil.copyfile(source / f"{name}.parquet", path)
        rows_path.write_bytes(gzip.decompress((source / meta["rows_file"]).read_bytes()))
        vectors.append(
            ParquetVector(
                name=name,
                path=path,
                footer_key=_unhex(meta["footer_key"]),
                column_keys={column: bytes.fromhex(key) for column, key in meta["column_keys"].items()},
                unencrypted_columns=set(meta["unencrypted_columns"]),
                aad_prefix=_unhex(meta["aad_prefix"]),
                aad_prefix_stored=meta["aad_prefix_stored"],
                algorithm=meta["algorithm"],
                plaintext_footer=meta["plaintext_footer"],
                features=frozenset(meta["features"]),
                rows=load_json_rows(rows_path),
                rows_path=rows_path,
                codec=meta["codec"],
                bloom_filter_columns=frozenset(meta["bloom_filter_columns"]),
                footer_key_metadata=_unhex(meta["footer_key_metadata"]),
                column_key_metadata={c: bytes.fromhex(v) for c, v in meta["column_key_metadata"].items()},
                rows_per_row_group=meta["rows_per_row_group"],
                rows_per_page=meta["rows_per_page"],
            )
        )
    return vectors


def describe_parquet_vector(vector: Any) -> dict[str, Any]:
    """The JSON description of a ``ParquetVector`` (keys as hex), as committed beside its file."""

    def hexed(value: bytes | None) -> str | None:
        return None if value is None else value.hex()

    return {
        "name": vector.name,
        "footer_key": hexed(vector.footer_key),
        "column_keys": {column: key.hex() for column, key in sorted(vector.column_keys.items())},
        "unencrypted_columns": sorted(vector.unencrypted_columns),
        "aad_prefix": hexed(vector.aad_prefix),
        "aad_prefix_stored": vector.aad_prefix_stored,
        "algorithm": vector.algorithm,
        "plaintext_footer": vector.plaintext_footer,
        "features": sorted(vector.features),
        "codec": vector.codec,
        "bloom_filter_columns": sorted(vector.bloom_filter_columns),
        "footer_key_metadata": hexed(vector.footer_key_metadata),
        "column_key_metadata": {c: v.hex() for c, v in sorted(vector.column_key_metadata.items())},
        "rows_per_row_group": vector.rows_per_row_group,
        "rows_per_page": vector.rows_per_page,
    }
