"""AES GCM Stream ("AGS1"): Iceberg's encrypted file format for manifests and manifest lists.

Spec: ``specs/ags1-aes-gcm-stream-spec.txt`` (Iceberg "AES GCM Stream file format extension")::

    file        = Magic("AGS1") BlockLength(int32 LE) CipherBlock_0 ... CipherBlock_n-1
    CipherBlock = nonce(12) ciphertext(len = plain block length) tag(16)
    block AAD   = AAD prefix + block index as int32 LE

Every block but the last holds ``BlockLength`` plaintext bytes. Any ``BlockLength`` > 0 is read
(Iceberg Java writes and reads only 1 MiB). Empty plaintext: Iceberg writes the header plus one
empty block (36 bytes), which this module writes and reads; a header with no block at all (the
spec's literal n = 0) is read as empty plaintext too. An empty block after other blocks is
rejected (spec: "the last block has a non-zero length").

Usage (the writer for tests and benchmarks is :class:`pyiceberg_crypto.testing.Ags1Writer`)::

    with Ags1Reader("m.avro", key, aad_prefix, file_length=stored) as r:   # seekable decrypt
        r.seek(10); r.read(5)
    report = verify_ags1(open("m.avro", "rb"), key, aad_prefix, file_length=stored)

Trusted lengths: Iceberg's key metadata records the *encrypted* (stored) length; pass it as
``file_length``. ``length`` is a trusted *plaintext* length. Either catches truncation at a block
boundary, which a file alone cannot reveal. All failures are :class:`~pyiceberg_crypto.formats.errors.IntegrityError` subclasses
naming the file, the block and the reason.
"""

from __future__ import annotations

import io
import os
import struct
from dataclasses import dataclass
from typing import BinaryIO

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from pyiceberg_crypto.errors import InvalidArgumentError
from pyiceberg_crypto.formats.errors import (
    BadBlockLengthError,
    BadMagicError,
    ExtraDataError,
    InvalidKeyError,
    LengthMismatchError,
    TagMismatchError,
    TruncatedError,
)
from pyiceberg_crypto.properties import AES_KEY_LENGTHS

__all__ = ["DEFAULT_BLOCK_SIZE", "HEADER_LENGTH", "MAGIC", "MAX_BLOCK_INDEX", "MAX_BLOCK_SIZE", "Ags1Layout",
           "Ags1Reader", "Ags1Report", "ExtraDataBeyondTrustedLengthError", "TruncatedBelowTrustedLengthError",
           "block_aad", "build_header", "check_key", "check_last_block", "check_trusted_lengths", "encrypted_length",
           "layout", "parse_header", "read_layout", "verify_ags1"]

MAGIC = b"AGS1"
HEADER_LENGTH = 8  # magic + int32 block length
NONCE_LENGTH = 12
TAG_LENGTH = 16
BLOCK_OVERHEAD = NONCE_LENGTH + TAG_LENGTH
DEFAULT_BLOCK_SIZE = 1024 * 1024  # Iceberg's Ciphers.PLAIN_BLOCK_SIZE
MAX_BLOCK_SIZE = 2**31 - 1  # BlockLength is a Java int
_HAS_DECRYPT_INTO = hasattr(AESGCM, "decrypt_into")


class TruncatedBelowTrustedLengthError(TruncatedError, LengthMismatchError):
    """The file is shorter than its trusted length (both a truncation and a length mismatch)."""


class ExtraDataBeyondTrustedLengthError(ExtraDataError, LengthMismatchError):
    """The file is longer than its trusted length (both extra data and a length mismatch)."""


# ------------------------------------------------------------------ small pure functions


def check_key(key: bytes) -> bytes:
    """Return ``key`` as bytes if it is an AES key (16, 24 or 32 bytes), else raise FormatError."""
    if not isinstance(key, (bytes, bytearray, memoryview)):
        raise InvalidKeyError(f"AES key must be bytes, got {type(key).__name__}")
    key = bytes(key)
    if len(key) not in AES_KEY_LENGTHS:
        raise InvalidKeyError(f"invalid AES key length {len(key)} bytes (must be 16, 24 or 32)")
    return key


def build_header(block_size: int = DEFAULT_BLOCK_SIZE) -> bytes:
    """Spec "File structure": ``b"AGS1"`` + plain block length as int32 little endian."""
    if not 0 < block_size <= MAX_BLOCK_SIZE:
        raise InvalidArgumentError(f"AGS1 block size must be in 1..{MAX_BLOCK_SIZE}, got {block_size}")
    return MAGIC + struct.pack("<i", block_size)


def parse_header(header: bytes, *, file: str | None = None) -> int:
    """Validate an 8-byte AGS1 header and return the plain block length.

    >>> parse_header(b"AGS1\\x00\\x00\\x10\\x00")
    1048576
    """
    if len(header) < HEADER_LENGTH:
        raise TruncatedError(
            f"file ends inside the {HEADER_LENGTH}-byte header ({len(header)} bytes)",
            file=file,
            location="header",
        )
    if header[:4] != MAGIC:
        raise BadMagicError(
            f"magic is {bytes(header[:4])!r}, expected b'AGS1'", file=file, location="header"
        )
    (block_size,) = struct.unpack_from("<i", header, 4)
    if block_size <= 0:
        raise BadBlockLengthError(
            f"block length {block_size} (must be > 0)", file=file, location="header"
        )
    return block_size


#: The last block index an int32 holds (spec "Additional Authenticated Data").
MAX_BLOCK_INDEX = 2**31 - 1


def block_aad(aad_prefix: bytes, index: int) -> bytes:
    """Spec "Additional Authenticated Data": AAD prefix + block index as 4-byte little endian
    (an int32: InvalidArgumentError for an index outside 0..2**31-1)."""
    if not 0 <= index <= MAX_BLOCK_INDEX:
        raise InvalidArgumentError(f"AGS1 block index must be in 0..{MAX_BLOCK_INDEX}, got {index}")
    return bytes(aad_prefix) + struct.pack("<i", index)


def encrypted_length(plaintext_length: int, block_size: int = DEFAULT_BLOCK_SIZE) -> int:
    """Stored length of ``plaintext_length`` bytes as Iceberg writes them (empty -> one empty block)."""
    if plaintext_length < 0 or not 0 < block_size <= MAX_BLOCK_SIZE:
        raise InvalidArgumentError(f"a plaintext length >= 0 and a block size in 1..{MAX_BLOCK_SIZE}, got "
                                   f"{plaintext_length} and {block_size}")
    blocks = max(1, -(-plaintext_length // block_size))
    return HEADER_LENGTH + plaintext_length + blocks * BLOCK_OVERHEAD


def check_last_block(cipher_length: int, index: int, *, file: str | None = None) -> None:
    """A last (short) cipher block must hold nonce + tag and, unless it is the only block, at least
    one plaintext byte (spec "Cipher Block structure": the last block has a non-zero length)."""
    if cipher_length < BLOCK_OVERHEAD:
        raise TruncatedError(
            f"last block has {cipher_length} bytes, fewer than nonce + tag ({BLOCK_OVERHEAD})",
            file=file,
            location=f"block {index}",
        )
    if cipher_length == BLOCK_OVERHEAD and index > 0:
        raise ExtraDataError(
            "empty block after the last block (spec: the last block has a non-zero length)",
            file=file,
            location=f"block {index}",
        )


@dataclass(frozen=True)
class Ags1Layout:
    """Block geometry of an AGS1 file, derived from its header and stored length alone."""

    block_size: int  # plain block length from the header
    encrypted_length: int  # stored file length
    block_count: int  # 0 only for a header-only (empty) file
    last_block_plain_length: int
    plaintext_length: int

    @property
    def cipher_block_size(self) -> int:
        return self.block_size + BLOCK_OVERHEAD

    def block_offset(self, index: int) -> int:
        """Position of cipher block ``index`` in the file."""
        return HEADER_LENGTH + index * self.cipher_block_size

    def plain_block_length(self, index: int) -> int:
        return self.last_block_plain_length if index == self.block_count - 1 else self.block_size


def layout(block_size: int, stored_length: int, *, file: str | None = None) -> Ags1Layout:
    """Derive the block geometry from the stored length (spec "Cipher Block structure").

    Raises TruncatedError when the file ends inside the header or inside a block's nonce/tag,
    ExtraDataError for an empty block after other blocks.
    """
    if stored_length < HEADER_LENGTH:
        raise TruncatedError(
            f"file ends inside the header ({stored_length} bytes)", file=file, location="header"
        )
    body = stored_length - HEADER_LENGTH
    cipher_block = block_size + BLOCK_OVERHEAD
    full, rest = divmod(body, cipher_block)
    if rest == 0:
        count, last = full, (block_size if full else 0)
    else:
        check_last_block(rest, full, file=file)
        count, last = full + 1, rest - BLOCK_OVERHEAD
    plain = (count - 1) * block_size + last if count else 0
    return Ags1Layout(block_size, stored_length, count, last, plain)


def check_trusted_lengths(
    geometry: Ags1Layout,
    *,
    length: int | None = None,
    file_length: int | None = None,
    file: str | None = None,
) -> None:
    """Compare the file with trusted lengths (spec "File length"); raise on any difference."""
    checks = []
    cipher_block = geometry.cipher_block_size
    if file_length is not None:
        end_block = (file_length - HEADER_LENGTH) // cipher_block
        checks.append(("stored", file_length, geometry.encrypted_length, end_block))
    if length is not None:
        checks.append(("plaintext", length, geometry.plaintext_length, length // geometry.block_size))
    for kind, trusted, actual, trusted_end_block in checks:
        if trusted < 0:
            raise InvalidArgumentError(f"trusted {kind} length must be >= 0, got {trusted}")
        if actual < trusted:  # location: the first block (partly) missing
            missing = geometry.plaintext_length // geometry.block_size
            raise TruncatedBelowTrustedLengthError(
                f"{kind} length {actual} is shorter than the trusted length {trusted}",
                file=file,
                location=f"block {missing}",
            )
        if actual > trusted:  # location: the block where the trusted file should end
            raise ExtraDataBeyondTrustedLengthError(
                f"{kind} length {actual} is longer than the trusted length {trusted}",
                file=file,
                location=f"block {max(trusted_end_block, 0)}",
            )


# ------------------------------------------------------------------ file object helpers


def _open(
    source: str | os.PathLike | BinaryIO, name: str | None
) -> tuple[BinaryIO, str | None, bool]:
    """(file object, label for errors, whether we opened it) for a path or an open binary file."""
    if isinstance(source, (str, os.PathLike)):
        return open(source, "rb"), name or os.fspath(source), True
    if name is None and isinstance(getattr(source, "name", None), str):
        name = source.name
    return source, name, False


def _read_exact(fileobj: BinaryIO, size: int) -> bytes:
    chunks, remaining = [], size
    while remaining > 0:
        chunk = fileobj.read(remaining)
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _readinto_exact(fileobj: BinaryIO, view: memoryview) -> int:
    got = 0
    while got < len(view):
        n = fileobj.readinto(view[got:])
        if not n:
            break
        got += n
    return got


def _stored_length(fileobj: BinaryIO) -> int:
    here = fileobj.tell()
    end = fileobj.seek(0, io.SEEK_END)
    fileobj.seek(here)
    return end


def read_layout(fileobj: BinaryIO, *, name: str | None = None) -> Ags1Layout:
    """Header facts and block geometry of a seekable AGS1 file object (no key needed)."""
    fileobj.seek(0)
    block_size = parse_header(_read_exact(fileobj, HEADER_LENGTH), file=name)
    return layout(block_size, _stored_length(fileobj), file=name)


# ------------------------------------------------------------------ reader


class Ags1Reader(io.RawIOBase):
    """Seekable, read-only plaintext view of an AGS1 file; decrypts only the blocks it touches.

    ``source`` is a path or a seekable binary file object (not closed by us unless we opened it).
    The header and stored length are checked at construction; each block's tag when first read::

        with Ags1Reader(path, key, aad_prefix, file_length=km.file_length) as r:
            r.seek(-100, io.SEEK_END)
            tail = r.read()
    """

    def __init__(
        self,
        source: str | os.PathLike | BinaryIO,
        key: bytes,
        aad_prefix: bytes = b"",
        *,
        length: int | None = None,
        file_length: int | None = None,
        name: str | None = None,
    ):
        super().__init__()
        self._aesgcm = AESGCM(check_key(key))
        self._aad_prefix = bytes(aad_prefix or b"")
        self._file, self.name, self._owns = _open(source, name)
        try:
            self.layout = read_layout(self._file, name=self.name)
            check_trusted_lengths(
                self.layout, length=length, file_length=file_length, file=self.name
            )
        except BaseException:
            if self._owns:
                self._file.close()
            raise
        self._pos = 0
        self._block_index = -1
        self._block = b""
        #: How many blocks were decrypted (and authenticated) so far; random access touches few.
        self.blocks_decrypted = 0

    def __repr__(self) -> str:  # never shows key material
        return f"Ags1Reader(name={self.name!r}, plaintext_length={self.layout.plaintext_length})"

    # io.RawIOBase protocol
    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        self._checkClosed()
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._checkClosed()
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.layout.plaintext_length}
        if whence not in base:
            raise ValueError(f"invalid whence {whence}")
        position = base[whence] + offset
        if position < 0:
            raise ValueError(f"negative seek position {position}")
        self._pos = position
        return position

    def readinto(self, buffer) -> int:
        self._checkClosed()
        out = memoryview(buffer).cast("B")
        written = 0
        while written < len(out) and self._pos < self.layout.plaintext_length:
            index, offset = divmod(self._pos, self.layout.block_size)
            block = self._load_block(index)
            n = min(len(out) - written, len(block) - offset)
            out[written : written + n] = block[offset : offset + n]
            written += n
            self._pos += n
        return written

    def readall(self) -> bytes:
        return self.read(max(0, self.layout.plaintext_length - self._pos))

    def close(self) -> None:
        if not self.closed and self._owns:
            self._file.close()
        self._block = b""
        super().close()

    def authenticate_block(self, index: int) -> None:
        """Decrypt and authenticate block ``index`` without reading from it (the one empty block
        of an empty plaintext is the only block no read touches)."""
        self._checkClosed()
        self._load_block(index)

    def _load_block(self, index: int) -> bytes:
        if index != self._block_index:
            geometry = self.layout
            self._file.seek(geometry.block_offset(index))
            size = geometry.plain_block_length(index) + BLOCK_OVERHEAD
            data = _read_exact(self._file, size)
            if len(data) < size:
                raise TruncatedError(
                    f"block has {len(data)} of {size} bytes (file shrank while reading?)",
                    file=self.name,
                    location=f"block {index}",
                )
            self._block = _decrypt_block(self._aesgcm, data, self._aad_prefix, index, self.name)
            self._block_index = index
            self.blocks_decrypted += 1
        return self._block


def _decrypt_block(
    aesgcm: AESGCM, data: bytes, aad_prefix: bytes, index: int, name: str | None
) -> bytes:
    try:
        return aesgcm.decrypt(data[:NONCE_LENGTH], data[NONCE_LENGTH:], block_aad(aad_prefix, index))
    except InvalidTag:
        raise TagMismatchError(_TAG_REASON, file=name, location=f"block {index}") from None


_TAG_REASON = (
    "GCM tag mismatch (tampered bytes, wrong key or AAD prefix, or a block moved from another "
    "position or file)"
)


# ------------------------------------------------------------------ fast verification


@dataclass(frozen=True)
class Ags1Report:
    """Result of :func:`verify_ags1` (or header facts only, when ``authenticated`` is False)."""

    file: str | None
    block_size: int
    block_count: int
    plaintext_length: int
    encrypted_length: int
    authenticated: bool  # every block's tag checked with the given key and AAD prefix


def verify_ags1(
    source: str | os.PathLike | BinaryIO,
    key: bytes,
    aad_prefix: bytes = b"",
    length: int | None = None,
    name: str | None = None,
    *,
    file_length: int | None = None,
) -> Ags1Report:
    """Authenticate every block of an AGS1 file, fast (one AESGCM object, reused buffers).

    A seekable source is checked against its stored length first (precise TruncatedError /
    ExtraDataError before any decryption); a non-seekable stream is read to its end and the
    plaintext length compared afterwards. Returns an :class:`Ags1Report`; raises IntegrityError.
    """
    aesgcm = AESGCM(check_key(key))
    prefix = bytes(aad_prefix or b"")
    fileobj, label, owns = _open(source, name)
    try:
        seekable = getattr(fileobj, "seekable", lambda: False)()
        if seekable:
            geometry = read_layout(fileobj, name=label)
            check_trusted_lengths(geometry, length=length, file_length=file_length, file=label)
            fileobj.seek(HEADER_LENGTH)
            block_size = geometry.block_size
        else:
            block_size = parse_header(_read_exact(fileobj, HEADER_LENGTH), file=label)
        max_bytes = geometry.encrypted_length - HEADER_LENGTH if seekable else None
        count, plain, stored = _verify_blocks(fileobj, aesgcm, prefix, block_size, label, max_bytes)
        if not seekable:
            geometry = Ags1Layout(block_size, stored, count, 0, plain)
            check_trusted_lengths(geometry, length=length, file_length=file_length, file=label)
        return Ags1Report(label, block_size, count, plain, stored, True)
    finally:
        if owns:
            fileobj.close()


def _verify_blocks(
    fileobj: BinaryIO,
    aesgcm: AESGCM,
    prefix: bytes,
    block_size: int,
    label: str | None,
    max_bytes: int | None = None,
) -> tuple[int, int, int]:
    """Decrypt blocks from the current position to EOF: (block count, plaintext, stored length)."""
    cipher_size = block_size + BLOCK_OVERHEAD
    if max_bytes is not None:  # don't allocate a huge declared block for a small file
        buffer_size = max(BLOCK_OVERHEAD, min(cipher_size, max_bytes))
    else:
        buffer_size = cipher_size
    buffer = bytearray(buffer_size)
    plain_buffer = None
    if _HAS_DECRYPT_INTO:  # cryptography >= 45: decrypt without allocating
        plain_buffer = memoryview(bytearray(buffer_size - BLOCK_OVERHEAD))
    view = memoryview(buffer)
    aad = bytearray(prefix + b"\0\0\0\0")
    index = plain = 0
    while True:
        got = _readinto_exact(fileobj, view)
        if got == 0:
            break
        if got < cipher_size:  # a short read: this must be a valid last block
            check_last_block(got, index, file=label)
        struct.pack_into("<i", aad, len(prefix), index)
        nonce, body = view[:NONCE_LENGTH], view[NONCE_LENGTH:got]
        try:
            if plain_buffer is not None:
                aesgcm.decrypt_into(nonce, body, aad, plain_buffer[: got - BLOCK_OVERHEAD])
            else:
                aesgcm.decrypt(nonce, body, aad)
        except InvalidTag:
            raise TagMismatchError(_TAG_REASON, file=label, location=f"block {index}") from None
        plain += got - BLOCK_OVERHEAD
        index += 1
        if got < cipher_size:  # a short read means end of file: that was the last block
            break
    return index, plain, HEADER_LENGTH + plain + index * BLOCK_OVERHEAD
