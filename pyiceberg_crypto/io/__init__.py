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

import errno
import fcntl
import importlib
import os
import stat
from collections.abc import Mapping
from typing import BinaryIO, Protocol, runtime_checkable

from pyiceberg_crypto._deprecated import renamed_classes
from pyiceberg_crypto.errors import FileAccessError, TableInputError

__all__ = ["SCHEMES", "FileIO", "LocalFileIO", "file_io_for", "local_path", "not_regular_file", "read_bounded", "too_large"]

#: Old names, kept for one release (CHANGELOG.md).
__getattr__ = renamed_classes(__name__, {"FileTooLargeError": FileAccessError, "NotRegularFileError": FileAccessError,
                                         "InvalidLocationError": TableInputError, "UnsupportedSchemeError": TableInputError})


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


def not_regular_file(path: str, file_type: str) -> FileAccessError:
    """The error for a path that names a FIFO, device, socket or directory: refused, never read (it
    could block or never end). ``errno.EINVAL``; ``file_type`` says what it is (``"FIFO"``, ...)."""
    err = FileAccessError(f"not a regular file ({file_type})", errno=errno.EINVAL, filename=path)
    err.file_type = file_type  # type: ignore[attr-defined]
    return err


def too_large(size: int | None, limit: int) -> FileAccessError:
    """The error for a file larger than the limit set for it (e.g. ``--max-metadata-bytes``): ``errno.EFBIG``."""
    shown = f"{size} bytes" if size is not None else "more bytes"
    return FileAccessError(f"{shown}, more than the limit of {limit} bytes", errno=errno.EFBIG)


_FILE_TYPES = ((stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
               (stat.S_ISSOCK, "socket"), (stat.S_ISDIR, "directory"), (stat.S_ISLNK, "symbolic link"))


def file_type_name(mode: int) -> str:
    """What ``st_mode`` describes, in words: ``"regular file"``, ``"FIFO"``, ``"directory"``, ..."""
    if stat.S_ISREG(mode):
        return "regular file"
    return next((name for test, name in _FILE_TYPES if test(mode)), "special file")


def regular_file_size(path: str) -> int:
    """``st_size`` of a regular file (symbolic links followed); a :class:`~pyiceberg_crypto.errors.FileAccessError` otherwise."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise not_regular_file(path, file_type_name(st.st_mode))
    return st.st_size


def open_regular_file(path: str) -> BinaryIO:
    """Open a regular file for reading without ever blocking on what the path really is.

    The path is stat'ed first (a FIFO, socket or device is refused before any open), then opened
    with ``O_NONBLOCK`` (a FIFO swapped in between is not waited for) and checked again with
    ``fstat`` on the open descriptor, which is what is read.
    """
    regular_file_size(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a socket (or a FIFO without writer) appeared in between
            raise not_regular_file(path, "socket or FIFO") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise not_regular_file(path, file_type_name(mode))
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


#: Default limit on the size of a table's metadata.json (the verifier's ``--max-metadata-bytes``).
DEFAULT_MAX_METADATA_BYTES = 64 * 1024 * 1024


def read_bounded(file_io: FileIO, uri: str, limit: int) -> bytes:
    """The whole content of ``uri`` if it holds at most ``limit`` bytes, else a
    :class:`~pyiceberg_crypto.errors.FileAccessError` (``errno.EFBIG``).

    The stored size is checked before reading, and at most ``limit + 1`` bytes are read (a file
    that grows after the check is still refused): a huge, sparse or endless file costs nothing.
    """
    size = file_io.size(uri)
    if size > limit:
        raise too_large(size, limit)
    with file_io.open(uri) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise too_large(None, limit)
    return data


class LocalFileIO:
    """Files on the local file system (``file:`` URIs or plain paths).

    Only regular files are read: a FIFO, device, socket or directory in place of a table file
    raises a :class:`~pyiceberg_crypto.errors.FileAccessError` (``errno.EINVAL``) from :meth:`open` and :meth:`size`, without blocking.
    """

    def open(self, uri: str) -> BinaryIO:
        return open_regular_file(local_path(uri))

    def size(self, uri: str) -> int:
        return regular_file_size(local_path(uri))

    def exists(self, uri: str) -> bool:
        return os.path.isfile(local_path(uri))

    def list_files(self, uri: str) -> list[str]:
        """Every file under the directory ``uri``, as ``file:`` URIs (symbolic links not followed)."""
        root = local_path(uri).rstrip("/") or "/"
        return sorted(f"file:{os.path.join(folder, name)}" for folder, _dirs, names in os.walk(root) for name in names)

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
        TableInputError: the scheme is not supported (the message lists the supported ones).
    """
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else "file"  # file:/a and plain paths
    if scheme == "file":
        return LocalFileIO()
    target = SCHEMES.get(scheme)
    if target is None:
        supported = ", ".join(["file", *sorted(SCHEMES)])
        raise TableInputError(f"no FileIO for {scheme}:// locations (supported: {supported})")
    module_name, _, factory = target.partition(":")
    return getattr(importlib.import_module(module_name), factory)(dict(properties or {}))
