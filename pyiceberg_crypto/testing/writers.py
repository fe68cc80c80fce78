"""Writers for tests and benchmarks: AGS1 streams and sealed manifest-list key metadata, byte for
byte as Iceberg Java writes them (the tests check that Java reads what these write).

The verifier (:mod:`pyiceberg_crypto.verify`) and the reader (:mod:`pyiceberg_crypto.read`) never
import this module: what checks a writer shares nothing with one (``tests/test_layers.py``
enforces it)::

    from pyiceberg_crypto.testing import Ags1Writer, encrypt_bytes, decrypt_bytes

    stream = encrypt_bytes(b"plaintext", key, aad_prefix)           # a whole AGS1 file
    assert decrypt_bytes(stream, key, aad_prefix) == b"plaintext"
    sealed = encrypt_manifest_list_key_metadata(kek, key_metadata, kek_timestamp)
"""

from __future__ import annotations

import io
import os
from typing import BinaryIO

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from pyiceberg_crypto.formats.ags1 import (
    DEFAULT_BLOCK_SIZE,
    NONCE_LENGTH,
    Ags1Reader,
    block_aad,
    build_header,
    check_key,
)

__all__ = ["Ags1Writer", "decrypt_bytes", "encrypt_bytes", "encrypt_manifest_list_key_metadata"]


class Ags1Writer(io.RawIOBase):
    """Encrypting, write-only stream producing AGS1 that Iceberg's ``AesGcmInputFile`` reads.

    Blocks of ``block_size`` plaintext bytes (default 1 MiB, as Iceberg; other sizes are spec-valid
    but Iceberg Java cannot read them), each with a fresh ``os.urandom`` nonce. An empty plaintext
    is written as Iceberg does: header + one empty block. ``target`` (path or binary file object)
    is closed on close only when a path was given::

        with Ags1Writer(buf, key, aad_prefix) as w:
            w.write(b"...")
        w.plaintext_length, w.encrypted_length
    """

    def __init__(
        self,
        target: str | os.PathLike | BinaryIO,
        key: bytes,
        aad_prefix: bytes = b"",
        *,
        block_size: int = DEFAULT_BLOCK_SIZE,
    ):
        super().__init__()
        header = build_header(block_size)
        self._aesgcm = AESGCM(check_key(key))
        self._aad_prefix = bytes(aad_prefix or b"")
        if isinstance(target, (str, os.PathLike)):
            self._file, self._owns = open(target, "wb"), True
        else:
            self._file, self._owns = target, False
        self.block_size = block_size
        self._pending = bytearray()
        self._index = 0
        self.plaintext_length = 0
        self.encrypted_length = len(header)
        self._file.write(header)

    def __repr__(self) -> str:
        return f"Ags1Writer(block_size={self.block_size}, plaintext_length={self.plaintext_length})"

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self._checkClosed()
        view = memoryview(data).cast("B")
        self._pending += view
        self.plaintext_length += len(view)
        while len(self._pending) >= self.block_size:
            self._emit(bytes(self._pending[: self.block_size]))
            del self._pending[: self.block_size]
        return len(view)

    def tell(self) -> int:
        return self.plaintext_length

    def close(self) -> None:
        if self.closed:
            return
        try:
            if self._pending or self._index == 0:  # the partial last block, or Iceberg's empty block
                self._emit(bytes(self._pending))
                self._pending.clear()
            self._file.flush()
        finally:
            if self._owns:
                self._file.close()
            super().close()

    def _emit(self, plain: bytes) -> None:
        nonce = os.urandom(NONCE_LENGTH)
        sealed = self._aesgcm.encrypt(nonce, plain, block_aad(self._aad_prefix, self._index))
        self._file.write(nonce)
        self._file.write(sealed)
        self._index += 1
        self.encrypted_length += NONCE_LENGTH + len(sealed)


def encrypt_bytes(
    plaintext: bytes, key: bytes, aad_prefix: bytes = b"", *, block_size: int = DEFAULT_BLOCK_SIZE
) -> bytes:
    """Whole-buffer convenience: the AGS1 encryption of ``plaintext``."""
    out = io.BytesIO()
    with Ags1Writer(out, key, aad_prefix, block_size=block_size) as writer:
        writer.write(plaintext)
    return out.getvalue()


def decrypt_bytes(
    stream: bytes,
    key: bytes,
    aad_prefix: bytes = b"",
    *,
    length: int | None = None,
    file_length: int | None = None,
    name: str | None = None,
) -> bytes:
    """Whole-buffer convenience: authenticate and decrypt an AGS1 byte string."""
    trusted = {"length": length, "file_length": file_length}
    with Ags1Reader(io.BytesIO(stream), key, aad_prefix, name=name, **trusted) as reader:
        return reader.read()


def encrypt_manifest_list_key_metadata(
    kek: bytes, key_metadata: bytes, kek_timestamp: str
) -> bytes:
    """Seal ``key_metadata`` with ``kek`` (random nonce), AAD = ``kek_timestamp`` as UTF-8."""
    nonce = os.urandom(NONCE_LENGTH)
    aad = kek_timestamp.encode("utf-8")
    return nonce + AESGCM(check_key(kek)).encrypt(nonce, bytes(key_metadata), aad)
