"""What a file of an Iceberg table is, named as the verifier's report and the reader name it.

The kind comes from whatever references the file: a snapshot names its manifest list, a manifest
list its manifests, a manifest entry a data or delete file (:func:`.manifests.entry_kind`), the
table metadata its statistics files::

    from pyiceberg_crypto.table.file_kinds import DATA, MANIFEST
"""

__all__ = ["DATA", "DELETION_VECTOR", "EQUALITY_DELETE", "KINDS", "MANIFEST", "MANIFEST_LIST",
           "PARTITION_STATISTICS", "POSITION_DELETE", "STATISTICS"]

DATA = "data"
POSITION_DELETE = "position-delete"
EQUALITY_DELETE = "equality-delete"
DELETION_VECTOR = "deletion-vector"
MANIFEST = "manifest"
MANIFEST_LIST = "manifest-list"
STATISTICS = "statistics"
PARTITION_STATISTICS = "partition-statistics"
KINDS = (DATA, POSITION_DELETE, EQUALITY_DELETE, DELETION_VECTOR, MANIFEST, MANIFEST_LIST,
         STATISTICS, PARTITION_STATISTICS)
