"""Safe token and key files: the operator's files that a KMS listener (the bridge's, ``kms serve``'s) trusts.

A token or TLS key planted or swapped by another user would hand that user the KMS, so these files
(and their directories) must belong to the running user and not be writable by others::

    from pyiceberg_crypto.listener.files import check_operator_directory, read_operator_file, write_private_file

    check_operator_directory(token_file.parent, "token")      # created 0700 when missing
    write_private_file(token_file, token_bytes)                # 0600, atomically
    token = read_operator_file(token_file, "token", private=True)   # no symlink, owner only
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from pyiceberg_crypto._atomic import PRIVATE, write_atomically
from pyiceberg_crypto.errors import FileAccessError


__all__ = ["check_operator_directory", "read_operator_file", "write_private_file"]


def check_operator_directory(directory: str | os.PathLike, what: str) -> None:
    """``directory`` (created 0700 if missing) must belong to the running user (or root) and not be
    group- or world-writable: anyone who can write it can replace the files in it."""
    directory = Path(directory)
    if not directory.exists():
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = directory.stat()
    if info.st_uid not in (os.geteuid(), 0):
        raise FileAccessError(f"the {what} directory {directory} belongs to uid {info.st_uid}, not to this user "
                              f"(uid {os.geteuid()}): its owner could replace the files in it")
    if info.st_mode & 0o022:
        raise FileAccessError(f"the {what} directory {directory} is writable by "
                              f"{'everyone' if info.st_mode & 0o002 else 'its group'} (mode "
                              f"{stat.S_IMODE(info.st_mode):o}): other users could replace the files in it; "
                              "use a directory only this user can write (chmod go-w, or another directory)")


def read_operator_file(path: str | os.PathLike, what: str, *, private: bool = False, limit: int = 1 << 20) -> bytes:
    """Read a file that must belong to the running user, without following a symlink (O_NOFOLLOW),
    a regular file of at most ``limit`` bytes; ``private``: not readable by others either."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise FileAccessError(f"the {what} {path} is a symlink: refused (point the option at the file itself)") from None
        raise FileAccessError(f"cannot read the {what} {path}: {exc.strerror or exc}", errno=exc.errno,
                              filename=str(path), strerror=exc.strerror) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise FileAccessError(f"the {what} {path} is not a regular file")
        if info.st_uid != os.geteuid():
            raise FileAccessError(f"the {what} {path} belongs to uid {info.st_uid}, not to this user "
                                  f"(uid {os.geteuid()}): refused, another user may have planted it")
        if private and info.st_mode & 0o077:
            raise FileAccessError(f"the {what} {path} is readable by other users: chmod 600 it")
        if info.st_mode & 0o022:
            raise FileAccessError(f"the {what} {path} is writable by other users: chmod go-w it")
        if info.st_size > limit:
            raise FileAccessError(f"the {what} {path} is larger than {limit} bytes")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read(limit + 1)
    finally:
        os.close(fd)


def write_private_file(path: str | os.PathLike, data: bytes, *, mode: int = PRIVATE) -> None:
    """Write ``data`` to ``path`` with ``mode`` (0600), atomically (a reader sees the old or the new
    file; a symlink at ``path`` is replaced, never followed): :func:`pyiceberg_crypto._atomic.write_atomically`."""
    write_atomically(path, data, mode=mode)
