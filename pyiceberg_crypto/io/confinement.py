"""Confinement: the verifier reads a file only if it lies under one of the table's own locations.

The paths a verifier follows come from files an attacker may have written (metadata.json, and
the manifests it leads to), so a path is data, not an order: ``/etc/shadow``, ``/dev/zero``, a
``..`` walk out of the table, or a symlink inside the table that points elsewhere must never be
opened. One rule, used by the plan before any task exists (so Spark tasks only ever receive
confined paths)::

    rule = Confinement.for_table(meta.table_location, meta.properties)
    rule.refusal("file:/wh/db.db/t/data/00000-0-x.parquet")   # None: inside, may be read
    rule.refusal("file:/etc/passwd")                            # "outside the table's locations ..."

Roots: the table ``location`` plus the ``write.data.path``, ``write.metadata.path`` (and legacy
``write.folder-storage.path`` / ``write.object-storage.path``) the table declares, and any the
operator adds explicitly (``--allow-location``). A path matches a root when it has the same scheme
and authority and its normalised path is the root's or below it; a path with a ``..`` segment is
refused outright (Iceberg never writes one). For local files the resolved path (symlinks
followed) must be inside the resolved root too.
"""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pyiceberg_crypto.io import local_path

__all__ = ["Confinement", "location_is_under", "normalised_location"]

#: Table properties that name where Iceberg writes the table's files.
LOCATION_PROPERTIES = ("write.data.path", "write.metadata.path", "write.folder-storage.path",
                       "write.object-storage.path")


@dataclass(frozen=True)
class _Root:
    scheme: str
    authority: str
    path: str  # normalised, no trailing slash (except "/")

    def contains(self, scheme: str, authority: str, path: str) -> bool:
        if (scheme, authority) != (self.scheme, self.authority):
            return False
        return path == self.path or path.startswith(self.path.rstrip("/") + "/")


def _split(uri: str) -> tuple[str, str, str]:
    """(scheme, authority, path) as the FileIOs read them: no URL decoding, and ``?`` / ``#`` are
    part of the path (LocalFileIO opens the text after ``file:`` as it is; S3 keys are the text
    after the bucket). ``file:`` and bare paths are ``file``; s3a/s3n are s3."""
    scheme, sep, rest = uri.partition("://")
    if not sep:  # file:/a, a bare path, or a string that is not a URI: all local
        return "file", "", local_path(uri)
    scheme = {"s3a": "s3", "s3n": "s3"}.get(scheme.lower(), scheme.lower())
    if scheme == "file":
        return "file", "", local_path(uri)  # file:///a (an authority other than empty is kept in the path)
    authority, _, path = rest.partition("/")
    return scheme, authority, "/" + path


def normalised_location(uri: str) -> tuple[str, str, str]:
    """(scheme, authority, path) of a location written any of the ways a user or Iceberg writes it,
    for comparing two locations (not for deciding what to read: :meth:`Confinement.refusal` does
    that). A local one (``file:/a``, ``file:///a``, ``/a``, ``a/b`` relative to the current
    directory, with ``..`` or trailing slashes) becomes its absolute, symlink-resolved path; any
    other keeps its scheme (``s3a``/``s3n`` are ``s3``) and authority, its path normalised."""
    scheme, authority, path = _split(uri)
    if scheme == "file":
        return scheme, "", os.path.realpath(os.path.abspath(path or "/"))
    return scheme, authority.lower(), posixpath.normpath(path) if path.strip("/") else "/"


def location_is_under(uri: str, roots: Iterable[str]) -> bool:
    """Whether ``uri`` is one of ``roots`` or below one, both sides :func:`normalised_location`::

        location_is_under("wh/db/t/metadata/v1.metadata.json", ["file:/home/me/wh/db/t/"])  # run in /home/me
    """
    target = normalised_location(uri)
    return any(_Root(*normalised_location(root)).contains(*target) for root in roots if root)


def _has_dot_dot(path: str) -> bool:
    return ".." in path.split("/")


class Confinement:
    """The set of locations a verification may read; ``Confinement.unconfined()`` allows all."""

    def __init__(self, roots: Iterable[str], *, enabled: bool = True):
        self.enabled = enabled
        self.locations = [r for r in dict.fromkeys(roots) if r]
        self._roots = []
        for root in self.locations:
            scheme, authority, path = _split(root)
            self._roots.append(_Root(scheme, authority, posixpath.normpath(path) if path else "/"))
        file_roots = [r for r in self._roots if r.scheme == "file"]
        self._real_roots = file_roots + [_Root("file", "", os.path.realpath(r.path)) for r in file_roots]
        self._real_dirs: dict[str, str] = {}  # resolved directories, per verification (files share them)

    def _realpath(self, path: str) -> str:
        """``os.path.realpath(path)``, resolving each directory once per run (plans name thousands
        of files in a few directories) and the file itself only when it is a symlink."""
        directory, name = posixpath.split(path)
        real_dir = self._real_dirs.get(directory)
        if real_dir is None:
            real_dir = self._real_dirs[directory] = os.path.realpath(directory)
        candidate = posixpath.join(real_dir, name)
        try:
            if stat.S_ISLNK(os.lstat(candidate).st_mode):
                return os.path.realpath(candidate)
        except OSError:  # missing: the check of the file itself reports it
            pass
        return candidate

    @classmethod
    def for_table(cls, table_location: str | None, properties: Mapping[str, str] | None = None,
                  extra: Iterable[str] = ()) -> Confinement:
        props = properties or {}
        return cls([table_location or "", *(props.get(p, "") for p in LOCATION_PROPERTIES), *extra])

    @classmethod
    def unconfined(cls) -> Confinement:
        return cls([], enabled=False)

    def refusal(self, uri: str) -> str | None:
        """Why ``uri`` must not be read (None when it may)."""
        if not self.enabled:
            return None
        scheme, authority, path = _split(uri)
        if _has_dot_dot(path):
            return "its path has a '..' segment (Iceberg never writes one): not read"
        if not self._roots:
            return "the table metadata names no location to confine reads to: not read"
        normal = posixpath.normpath(path) if path else "/"
        inside = [root for root in self._roots if root.contains(scheme, authority, normal)]
        if not inside:
            return (f"outside the table's locations ({', '.join(self.locations)}): not read "
                    "(--allow-location adds a location a table really spans)")
        if scheme == "file":  # symlinks followed: the file itself must be inside a (resolved) root too
            real = self._realpath(normal)
            if not any(root.contains("file", "", real) for root in self._real_roots):
                return f"a symbolic link to {real}, outside the table's locations: not read"
        return None
