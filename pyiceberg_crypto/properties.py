"""The names, sizes and shared defaults this package and Iceberg agree on, defined once.

Table properties (``CREATE TABLE ... TBLPROPERTIES``), catalog properties (the
``spark.sql.catalog.<name>.*`` settings without their prefix) and the AES key sizes::

    from pyiceberg_crypto.properties import AES_KEY_LENGTHS, KEY_ID

    metadata.properties.get(KEY_ID)          # the table's master key id, or None: not encrypted
    len(dek) in AES_KEY_LENGTHS              # 16, 24 or 32 bytes (AES-128/192/256)

Nothing here imports the package: every layer may use these names.
"""

from __future__ import annotations

__all__ = ["AES_KEY_LENGTHS", "CATALOG_TIMEOUT_SECONDS", "DATA_KEY_LENGTH", "DEFAULT_KMS_NAME", "FORMAT_VERSION", "KEY_ID", "KMS_IMPL",
           "KMS_NAME_PROPERTY", "KMS_SERVICE_PROPERTY", "KMS_TYPE", "PYTHON_KMS_IMPL", "FRESH_KEK_PROPERTY",
           "RESEALED_UP_TO_PROPERTY", "REENCRYPT_JOURNAL_PROPERTY", "READERS_PROPERTY"]

# Table properties (Iceberg's TableProperties).
#: The table's master key id in the KMS: setting it makes a table encrypted.
KEY_ID = "encryption.key-id"
#: The length in bytes of the data encryption keys Iceberg makes for the table (default 16).
DATA_KEY_LENGTH = "encryption.data-key-length"
#: The table format version; encryption needs 3.
FORMAT_VERSION = "format-version"

#: The engines a table is made for (``spark,trino``): ``config.table_properties(readers=...)`` sets
#: it, ``verify`` and the audit report a named engine that cannot read the current snapshot
#: (:mod:`pyiceberg_crypto.engines`).
READERS_PROPERTY = "pyiceberg-crypto.readers"

# Catalog properties.
#: Iceberg's catalog property naming the ``KeyManagementClient`` class the catalog uses.
KMS_IMPL = "encryption.kms-impl"
#: Iceberg's catalog property naming a KMS by type (``aws``, ``azure``, ``gcp``) instead.
KMS_TYPE = "encryption.kms-type"
#: The catalog property naming the registered Python KMS the bridge should call.
KMS_NAME_PROPERTY = "pyiceberg-crypto.kms-name"
#: The catalog property naming a ``pyiceberg-crypto kms serve`` service (HOST:PORT) instead.
KMS_SERVICE_PROPERTY = "pyiceberg-crypto.kms-service"
#: The name a Python KMS is registered under when none is given.
DEFAULT_KMS_NAME = "default"
#: The Java class (in ``jars/``) that implements Iceberg's ``KeyManagementClient`` by calling Python.
PYTHON_KMS_IMPL = "io.pyicebergcrypto.bridge.PythonKmsClient"

#: The AES key lengths in bytes (AES-128, AES-192, AES-256) of master keys, KEKs and DEKs.
AES_KEY_LENGTHS = (16, 24, 32)

#: Seconds one call to a catalog asked directly (a Hive metastore over Thrift, a REST catalog over
#: HTTP) may take: ``timeout=`` of the catalog functions, ``--metastore-timeout`` of the commands.
#: (A KMS call's is ``kms_timeout``: :data:`pyiceberg_crypto.kms.bounded.DEFAULT_KMS_TIMEOUT_SECONDS`.)
CATALOG_TIMEOUT_SECONDS = 30.0

# KEK properties ``keys reencrypt`` sets (Iceberg itself reads only ``KEY_TIMESTAMP``).
#: On a KEK made by the re-encryption after a compromise: when (ISO 8601, UTC).
FRESH_KEK_PROPERTY = "REENCRYPTED_AFTER_COMPROMISE"
#: On that KEK: the table's last sequence number when it re-sealed older snapshots' manifest-list
#: keys. A snapshot at or below it was written before the re-encryption: the compromised material
#: opened it (the run is unfinished while one is live).
RESEALED_UP_TO_PROPERTY = "RESEALED_UP_TO_SEQUENCE"
#: On that KEK, while a re-encryption of the table is unfinished: when (ms since the epoch) the
#: first run that has not finished committed it, before it wrote any file (the journal). A later
#: run removes what storage holds from then until its own start that no commit reached (a killed
#: run's leftovers, whatever their age), and removes the entry once its sweep is done.
REENCRYPT_JOURNAL_PROPERTY = "REENCRYPT_UNFINISHED_SINCE_MS"
