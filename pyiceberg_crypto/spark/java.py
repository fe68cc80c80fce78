"""Java objects seen from Python through Py4J: an exception's class and first line, and Java
collections as Python lists and dicts::

    from pyiceberg_crypto.spark.java import java_class, java_line, java_list, java_map

    except Py4JJavaError as exc:
        raise SomeError(f"the commit failed: {java_line(exc)}")   # "ValidationException: ..."
    snapshots = java_list(table_metadata.snapshots())            # a java.util.List or Collection
    refs = java_map(table_metadata.refs())                       # {name: SnapshotRef}
    files = java_list(ManifestFiles.read(manifest, io), jvm)     # any Iterable: copied on the Java side

Collections are read by size and index: Py4J would iterate them and learn the end from the
``NoSuchElementException`` that ``next()`` throws, which PySpark's error conversion turns into about
13 ms of JVM questions per loop (a small table's re-encryption looped ~70 times: a second of its cost).
"""

from __future__ import annotations

from typing import Any

from pyiceberg_crypto.errors import ArgumentTypeError

__all__ = ["java_class", "java_line", "java_list", "java_map"]


def java_class(exc: BaseException) -> str:
    """The Java class name of a Py4J error (``org.apache.iceberg.exceptions.CommitFailedException``),
    else the Python exception's type name."""
    java = getattr(exc, "java_exception", None)
    return java.getClass().getName() if java is not None else type(exc).__name__


def java_line(exc: BaseException) -> str:
    """The first line of a Py4J error's Java exception (``ValidationException: ...``; no stack), else
    of the Python exception; its type name when it has no text."""
    text = str(getattr(exc, "java_exception", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


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
    """The entries of a Java ``Map`` (``None``: empty) as a dict, in the map's iteration order.

    Raises ArgumentTypeError: not a Java Map."""
    if mapping is None:
        return {}
    if not hasattr(mapping, "keySet"):
        raise ArgumentTypeError(f"java_map: not a Java Map: {type(mapping).__name__}")
    return {key: mapping.get(key) for key in java_list(mapping.keySet())}
