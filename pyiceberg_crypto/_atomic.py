"""Write a file atomically: a reader sees the old file or the new one, never half of it.

Every file the package writes goes through here (token, TLS and key files, the keystore, the
verification ledger, the audit's JSON, HTML and Prometheus files, decrypted Parquet, downloaded
jars)::

    from pyiceberg_crypto._atomic import atomic_writer, write_atomically

    write_atomically("/etc/kms/token", token_bytes, mode=0o600)   # secrets: 0600

    with atomic_writer("report.html", mode=0o644, text=True) as out:   # the rest: 0644
        out.write(page)          # an exception here leaves the old report.html as it was

The steps: a temporary file in the same directory (so the rename stays on one file system),
written, flushed and fsynced; its mode set (``fchmod``, whatever the umask) *before* the rename,
so the file never appears with a wider mode; ``os.replace`` over the target (a symlink at the
target is replaced, never followed); then the directory fsynced where the platform allows, so the
rename survives a crash. On any error the temporary file is removed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Iterator
from typing import IO

from pyiceberg_crypto._deprecated import renamed_classes
from pyiceberg_crypto.errors import FileAccessError

#: Mode of files only their owner may read: keys, tokens, the keystore, decrypted data.
PRIVATE = 0o600
#: Mode of everything else (reports, certificates, jars).
PUBLIC = 0o644


def write_error(path: str, code: int | None, reason: str | None) -> FileAccessError:
    """The error of a file that could not be written: an ``OSError`` (``errno``, ``strerror`` and
    ``filename`` are the system's) whose message names the file and the reason; the previous file,
    if any, is unchanged."""
    code = code or errno.EIO
    if code == errno.ENOENT:
        message = f"cannot write {path}: its directory {os.path.dirname(os.path.abspath(path))} does not exist"
    else:
        message = f"cannot write {path}: {reason}"
    return FileAccessError(message, errno=code, filename=path, strerror=reason)


def _failed(path: str, exc: OSError) -> FileAccessError:
    return write_error(path, exc.errno, exc.strerror or str(exc))


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike, *, mode: int, text: bool = False,
                  encoding: str = "utf-8") -> Iterator[IO]:
    """A file object on a temporary file next to ``path``; when the block ends without an
    exception, it becomes ``path`` with ``mode`` (0600 for secrets, 0644 otherwise).

    An exception inside the block removes the temporary file and propagates unchanged (``path``
    keeps its old content). The temporary file's name is the file object's ``name`` (for a check
    of the bytes written before they land: flush first). Raises :class:`~pyiceberg_crypto.errors.FileAccessError` when
    the file cannot be created, synced or renamed."""
    target = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(target))
    try:
        fd, temporary = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise _failed(target, exc) from None
    try:
        # opener: the descriptor mkstemp made (0600, O_EXCL), under the temporary file's name.
        with open(temporary, "w" if text else "wb", encoding=encoding if text else None,
                  opener=lambda _path, _flags: fd) as handle:
            yield handle
            try:
                handle.flush()
                os.fsync(handle.fileno())
                os.fchmod(handle.fileno(), mode)
            except OSError as exc:
                raise _failed(target, exc) from None
        try:
            os.replace(temporary, target)
        except OSError as exc:
            raise _failed(target, exc) from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _sync_directory(directory)


def write_atomically(path: str | os.PathLike, data: bytes | str, *, mode: int) -> None:
    """Write ``data`` (bytes, or text as UTF-8) to ``path`` atomically with ``mode``; see :func:`atomic_writer`."""
    with atomic_writer(path, mode=mode, text=isinstance(data, str)) as out:
        try:
            out.write(data)
        except OSError as exc:  # the disk is full, ...
            raise _failed(os.fspath(path), exc) from None


def _sync_directory(directory: str) -> None:
    """Make a rename in ``directory`` durable (not possible everywhere, e.g. on Windows: skipped)."""
    with contextlib.suppress(OSError):
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


__all__ = ["PRIVATE", "PUBLIC", "atomic_writer", "write_atomically", "write_error"]

#: Old names, kept for one release (CHANGELOG.md).
__getattr__ = renamed_classes(__name__, {"AtomicWriteError": FileAccessError})
