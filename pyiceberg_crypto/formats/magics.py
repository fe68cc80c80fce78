"""The first bytes of the plaintext file formats an Iceberg table holds: such a file where
encryption was asked for is a leak::

    from pyiceberg_crypto.formats.magics import plaintext_format

    plaintext_format(b"PAR1")   # "Parquet"
    plaintext_format(b"ORC\\x0a") # "ORC" (its magic is three bytes)
    plaintext_format(b"PARE")   # None: encrypted Parquet
"""

from __future__ import annotations

from pyiceberg_crypto.formats.parquet.reader import MAGIC_PLAIN

__all__ = ["AVRO_MAGIC", "ORC_MAGIC", "PLAINTEXT_MAGICS", "PUFFIN_MAGIC", "plaintext_format"]

AVRO_MAGIC = b"Obj\x01"
PUFFIN_MAGIC = b"PFA1"
ORC_MAGIC = b"ORC"
#: Magic -> format name, for the plaintext formats of an Iceberg table.
PLAINTEXT_MAGICS = {AVRO_MAGIC: "Avro", PUFFIN_MAGIC: "Puffin", MAGIC_PLAIN: "Parquet", ORC_MAGIC: "ORC"}


def plaintext_format(head: bytes) -> str | None:
    """The plaintext format a file's first bytes start with (``head``: at least 4 of them when the
    file has them), or None."""
    for magic, name in PLAINTEXT_MAGICS.items():
        if head.startswith(magic):
            return name
    return None
