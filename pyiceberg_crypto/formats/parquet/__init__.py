"""Pure-Python Parquet Modular Encryption (PARE) verifier and decryptor (no JVM, no PyArrow).

Modules, bottom-up: :mod:`.thrift` (compact protocol codec), :mod:`.structs` (field ids and
typed views), :mod:`.aad` (module AADs), :mod:`.modules` (GCM/CTR module framing, footer
signature), :mod:`.reader` (both layouts, module-by-module access), :mod:`.verify` (report as
data), :mod:`.decrypt` (plaintext PAR1 output).

Usage::

    from pyiceberg_crypto.formats.parquet import ParquetKeys, verify_parquet, decrypt_parquet
    with open(path, "rb") as f:
        report = verify_parquet(f, ParquetKeys(footer_key=dek, aad_prefix=prefix), name=path)
"""

from pyiceberg_crypto.formats.parquet.decrypt import DecryptResult, decrypt_parquet
from pyiceberg_crypto.formats.parquet.reader import ParquetFileReader, ParquetKeys
from pyiceberg_crypto.formats.parquet.verify import VerificationReport, verify_parquet

__all__ = ["DecryptResult", "ParquetFileReader", "ParquetKeys", "VerificationReport", "decrypt_parquet", "verify_parquet"]
