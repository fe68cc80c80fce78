"""Where table files are read from: one small interface, a local implementation, and a resolver.

The verifier reads every file through a :class:`FileIO`, so the same walk runs on a local
warehouse and on object storage::

    from pyiceberg_crypto.io import file_io_for

    io = file_io_for("file:/data/warehouse/db.db/t/metadata/00001-....metadata.json")
    with io.open(path) as f:          # a seekable binary file object
        header = f.read(4)
    io.size(path), io.exists(path)

A ``FileIO`` must be picklable: the Spark verification job ships it to Python workers. It must
never hold secrets in its ``repr``. Schemes are resolved by :func:`file_io_for`; object stores
register themselves in :data:`SCHEMES` (module path of a factory taking catalog properties).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from typing import BinaryIO, Protocol, runtime_checkable


@runtime_checkable
class FileIO(Protocol):
    """Read-only access to the files of a table, addressed by the URIs Iceberg stores."""

    def open(self, uri: str) -> BinaryIO:
        """A seekable binary file object; raises FileNotFoundError when the file is missing."""

    def size(self, uri: str) -> int:
        """Stored length in bytes; raises FileNotFoundError when the file is missing."""

    def exists(self, uri: str) -> bool:
        """True when the file exists."""


def local_path(uri: str) -> str:
    """The local path of a ``file:`` URI (``file:/a``, ``file:///a``) or of a plain path."""
    if uri.startswith("file://"):
        return uri[len("file://"):]
    if uri.startswith("file:"):
        return uri[len("file:"):]
    return uri


class LocalFileIO:
    """Files on the local file system (``file:`` URIs or plain paths)."""

    def open(self, uri: str) -> BinaryIO:
        return open(local_path(uri), "rb")

    def size(self, uri: str) -> int:
        return os.stat(local_path(uri)).st_size

    def exists(self, uri: str) -> bool:
        return os.path.isfile(local_path(uri))

    def __repr__(self) -> str:
        return "LocalFileIO()"


#: URI scheme -> "module:factory" of a FileIO built from catalog properties (imported lazily so
#: optional dependencies are needed only when such a table is read).
SCHEMES: dict[str, str] = {
    "s3": "pyiceberg_crypto.io.s3:file_io_from_properties",
    "s3a": "pyiceberg_crypto.io.s3:file_io_from_properties",
    "s3n": "pyiceberg_crypto.io.s3:file_io_from_properties",
}


def file_io_for(uri: str, properties: Mapping[str, str] | None = None) -> FileIO:
    """The FileIO able to read ``uri`` (a table location or any file of the table).

    Raises:
        ValueError: the scheme is not supported (the message lists the supported ones).
    """
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else "file"  # file:/a and plain paths
    if scheme == "file":
        return LocalFileIO()
    target = SCHEMES.get(scheme)
    if target is None:
        supported = ", ".join(["file", *sorted(SCHEMES)])
        raise ValueError(f"no FileIO for {scheme}:// locations (supported: {supported})")
    module_name, _, factory = target.partition(":")
    return getattr(importlib.import_module(module_name), factory)(dict(properties or {}))
