"""Catalogs: which ones encrypt, and asking them for a table's entry and committing to them.

- :mod:`.kinds`   which Iceberg catalogs encrypt, and how a catalog is asked (``HIVE``, ``REST``);
  pure functions of catalog properties, at the package's base (the builders and the bridge use them)
- :mod:`.hive`    a Hive metastore's Thrift API from Python (no JVM)
- :mod:`.rest`    an Iceberg REST catalog's HTTP API from Python (no JVM)
- :mod:`.spark`   a table through a Spark session: catalog settings, the kept metastore client, the KMS
- :mod:`.entry`   one table's entry or every table's, from whichever of the above fits
- :mod:`.commit`  the JVM-free commits of a changed metadata.json (Hive compare-and-swap, REST)

Usage::

    from pyiceberg_crypto.catalog.entry import catalog_entry, list_tables

    entry = catalog_entry({"uri": "thrift://hms:9083"}, "lake.db.orders")
    entry.parameters["metadata_location"]

The catalog-properties dict (the ``spark.sql.catalog.<name>.*`` settings without their prefix) is
called ``properties`` everywhere.
"""

#: A map of the package: import its modules (nothing is re-exported here).
__all__: list[str] = []
