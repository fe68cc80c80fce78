"""Java collections as Python lists and dicts, without Py4J's end-of-iteration exception.

Py4J iterates a Java collection with its ``Iterator`` and learns the end from the
``NoSuchElementException`` that ``next()`` throws. In a PySpark driver every such exception goes
through PySpark's error conversion (``pyspark.errors.exceptions.captured``), which asks the JVM
about a dozen ``instanceof`` questions: about 13 ms per loop over a collection, however short. A
small table's re-encryption looped ~70 times: about a second of its fixed cost. These functions
ask the size first and fetch by index instead (one call per element, none that fails)::

    from pyiceberg_crypto.table._java_collections import java_list, java_map

    snapshots = java_list(table_metadata.snapshots())            # a java.util.List or Collection
    refs = java_map(table_metadata.refs())                       # {name: SnapshotRef}
    files = java_list(ManifestFiles.read(manifest, io), jvm)     # any Iterable: copied on the Java side
"""

from __future__ import annotations

from typing import Any

from pyiceberg_crypto.errors import ArgumentTypeError

def java_list(collection, jvm=None) -> list[Any]:
    """The elements of a Java ``List``, ``Set`` or array (``None``: empty), in order; of any other
    ``Iterable`` given ``jvm``, the gateway's JVM view (``spark.sparkContext._jvm``): it is first
    copied into an ``ArrayList`` on the Java side (Iceberg's relocated Guava ``Lists.newArrayList``).

    Raises ArgumentTypeError: another Iterable without ``jvm``."""
    from py4j.java_collections import JavaArray, JavaList, JavaSet

    if collection is None:
        return []
    if isinstance(collection, JavaList):
        return [collection.get(index) for index in range(int(collection.size()))]
    if isinstance(collection, JavaArray):
        return [collection[index] for index in range(len(collection))]
    if isinstance(collection, JavaSet):  # a set, a map's key set
        return java_list(collection.toArray())
    if jvm is None:
        raise ArgumentTypeError("java_list: a Java Iterable that is not a List or Set needs jvm= to copy it")
    return java_list(jvm.org.apache.iceberg.relocated.com.google.common.collect.Lists.newArrayList(collection))


def java_map(mapping) -> dict[Any, Any]:
    """The entries of a Java ``Map`` (``None``: empty) as a dict, in the map's iteration order."""
    if mapping is None:
        return {}
    return {key: mapping.get(key) for key in java_list(mapping.keySet())}
