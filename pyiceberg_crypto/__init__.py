"""pyiceberg-crypto: encrypted Apache Iceberg tables from PySpark, with a KMS written in Python.

Packages, bottom-up as they depend on each other (docs/explanation/architecture.md):

- :mod:`pyiceberg_crypto.errors`   every exception class, under one root (``PyicebergCryptoError``)
- :mod:`pyiceberg_crypto.properties` the property names and AES key sizes, defined once
- :mod:`pyiceberg_crypto.formats`  pure-Python AGS1, key metadata and Parquet encryption codecs
- :mod:`pyiceberg_crypto.io`       reading table files by URI (FileIO: regular files only, bounded; confinement)
- :mod:`pyiceberg_crypto.kms`      the Python KMS API and shipped KMS implementations
- :mod:`pyiceberg_crypto.jars`     the JVM artifacts (bridge jar, Iceberg runtime by Spark line)
- :mod:`pyiceberg_crypto.config`   Spark / catalog / table settings (plain dicts)
- :mod:`pyiceberg_crypto.bridge`   registers a Python KMS so Iceberg's JVMs can call it (Py4J, in process)
- :mod:`pyiceberg_crypto.table`    the table model: metadata, keys, manifests, ``Limits``
- :mod:`pyiceberg_crypto.catalog`  catalogs: which encrypt, a table's entry (Hive, REST, through Spark), commits
- :mod:`pyiceberg_crypto.verify`   table-level verification (full, incremental, ledger)
- :mod:`pyiceberg_crypto.read`     the JVM-free reader (``read_table``, ``scan``)
- :mod:`pyiceberg_crypto.keys`     key lifecycle: the key inventory, re-wrapping, pruning, re-encryption
- :mod:`pyiceberg_crypto.audit`    the lake audit: every table of a catalog, one report
- :mod:`pyiceberg_crypto.serve`    ``kms serve``: one served KMS, a Py4J face and an AWS KMS face as equals
- :mod:`pyiceberg_crypto.demo`     the demo jobs
- :mod:`pyiceberg_crypto.testing`  the test kit: loopback servers, pytest fixtures, writers (nothing imports it)
- :mod:`pyiceberg_crypto.exit_status` the exit statuses of every command
- :mod:`pyiceberg_crypto.cli`      the ``pyiceberg-crypto`` command (a leaf: nothing imports it)
"""

__version__ = "0.1.0"
