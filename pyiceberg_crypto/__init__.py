"""pyiceberg-crypto: encrypted Apache Iceberg tables from PySpark, with a KMS written in Python.

Packages, bottom-up as they depend on each other (docs/explanation/architecture.md):

- :mod:`pyiceberg_crypto.errors`   the exception root (``PyicebergCryptoError``) and ``TableInputError``
- :mod:`pyiceberg_crypto.formats`  pure-Python AGS1, key metadata and Parquet encryption codecs
- :mod:`pyiceberg_crypto.io`       reading table files by URI (regular files only, bounded; confinement)
- :mod:`pyiceberg_crypto.kms`      the Python KMS API and shipped KMS implementations
- :mod:`pyiceberg_crypto.jars`     the JVM artifacts (bridge jar, Iceberg runtime by Spark line)
- :mod:`pyiceberg_crypto.config`   Spark / catalog / table settings (plain dicts)
- :mod:`pyiceberg_crypto.bridge`   registers a Python KMS so Iceberg's JVM can call it (Py4J); the KMS service
- :mod:`pyiceberg_crypto.testing` a metastore and an S3 server on loopback, pytest fixtures
- :mod:`pyiceberg_crypto.table`    the table model: metadata, keys, manifests, catalog lookup, ``Limits``
- :mod:`pyiceberg_crypto.verify`   table-level verification (full, incremental, ledger)
- :mod:`pyiceberg_crypto.read`     the JVM-free reader (``read_table``, ``scan``)
- :mod:`pyiceberg_crypto.keys`     key lifecycle: the key inventory, re-wrapping and pruning KEKs
- :mod:`pyiceberg_crypto.demo`     the demo jobs; :mod:`pyiceberg_crypto.testing` writers for tests
- :mod:`pyiceberg_crypto.exit_status` the exit statuses of every command
- :mod:`pyiceberg_crypto.cli`      the ``pyiceberg-crypto`` command (a leaf: nothing imports it)
"""

__version__ = "0.1.0"
