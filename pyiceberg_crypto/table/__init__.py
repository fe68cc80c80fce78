"""The table model: what an encrypted Iceberg table is, read once, shared by every feature.

The verifier (:mod:`pyiceberg_crypto.verify`), the reader (:mod:`pyiceberg_crypto.read`) and the key
commands (:mod:`pyiceberg_crypto.keys`) all start here, on top of the byte formats
(:mod:`pyiceberg_crypto.formats`), file access (:mod:`pyiceberg_crypto.io`) and the KMS API
(:mod:`pyiceberg_crypto.kms`)::

    from pyiceberg_crypto.table import Limits, TableKeys, TableMetadata, read_metadata

    raw = read_metadata(file_io, location, Limits().max_metadata_bytes)
    meta = TableMetadata.parse(raw, location)
    keys = TableKeys(meta, kms)
    list_key = keys.manifest_list_key(meta.current_snapshot)   # StandardKeyMetadata of the manifest list

Read it top-down in this order:

- :mod:`.metadata`      the metadata.json: snapshots, ``encryption-keys``, statistics files
- :mod:`.keys`          the envelope's top: master key (KMS) -> KEKs -> each snapshot's manifest-list key
- :mod:`.key_inventory` every KEK, its age and master key version (no key bytes)
- :mod:`.manifests`     what manifest entries mean: statuses, the kind of file each names, their shape
- :mod:`.limits`        ``Limits``: how far a walk trusts the table and how it reads its files
- :mod:`.file_kinds`, :mod:`.statuses`  the vocabulary findings are written in

A table by its catalog name: :mod:`pyiceberg_crypto.catalog` (``spark.catalog_table``, ``entry.catalog_entry``).
"""

from pyiceberg_crypto.table.keys import KeyLookupError, TableKeys
from pyiceberg_crypto.table.limits import Limits
from pyiceberg_crypto.table.metadata import (
    EncryptionKey,
    Snapshot,
    StatisticsFile,
    TableMetadata,
    metadata_hash,
    read_metadata,
)

__all__ = ["EncryptionKey", "KeyLookupError", "Limits", "Snapshot", "StatisticsFile", "TableKeys", "TableMetadata",
           "metadata_hash", "read_metadata"]
