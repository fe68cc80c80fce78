"""Pure-Python codecs of the encrypted files Iceberg writes: bytes and keys in, plaintext or a
located :class:`~pyiceberg_crypto.formats.errors.IntegrityError` out. No JVM, no table model.

- :mod:`.ags1`               AES GCM Stream (manifests, manifest lists, deletion vectors): reader, verifier
- :mod:`.key_metadata`       Iceberg's ``StandardKeyMetadata`` (a file's DEK, AAD prefix, trusted length)
- :mod:`.manifest_list_key`  the seal of a manifest list's key metadata under a KEK
- :mod:`.parquet`            Parquet modular encryption (``PARE``): Thrift, modules, reader, verify, decrypt
- :mod:`.deletion_vector`    Puffin ``deletion-vector-v1`` (portable Roaring bitmaps)
- :mod:`.errors`             the integrity and format errors, each naming file, block/module and reason

Writers (for tests and benchmarks) live in :mod:`pyiceberg_crypto.testing`.
"""

#: A map of the package: import its modules (nothing is re-exported here).
__all__: list[str] = []
