"""A class-data sharing archive (JDK CDS, a dynamic archive, JEP 350) per server: a JVM that finds
none for its Java, main class, options and class path writes one when it ends
(``-XX:ArchiveClassesAtExit``, to a name of its own); the service's stop puts it in place
(:func:`publish_class_archive`: only after an exit the JVM made itself, never after a SIGKILL, and
never over another); the next start maps the classes from it, parsed and verified
(``-XX:SharedArchiveFile``). The archives live in :func:`class_archive_dir`: ``.cache/jvm/servers``
of a source checkout, else ``$XDG_CACHE_HOME/pyiceberg-crypto/jvm`` (``~/.cache``);
``$PYICEBERG_CRYPTO_JVM_CACHE`` overrides, and ``off`` there turns them off. The JVM is quiet about
them (``-Xlog:cds=off,cds+dynamic=off``): tests read servers' output.

Measured (Java 17.0.15, tests/cluster/test_yarn.py on the loaded 2-core machine): YARN's
ResourceManager and NodeManagers took 56 CPU seconds without archives, 42 with them.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import time
from collections.abc import Sequence
from pathlib import Path

#: Where the servers' class-data sharing archives are kept; ``off``: none made or used.
JVM_CACHE_ENV = "PYICEBERG_CRYPTO_JVM_CACHE"
#: The JVM says nothing about its archive (made, used, missing, not matching).
QUIET_ARCHIVE_OPTIONS = ("-Xlog:cds=off,cds+dynamic=off",)
_DUMP_OPTION = "-XX:ArchiveClassesAtExit="
_PARTIAL_SUFFIX = ".partial"
#: A partial archive left this long is a dead process's (a JVM writes it while it exits).
_STALE_PARTIAL_SECONDS = 3600


def class_archive_dir() -> Path | None:
    """Where the servers' archives are kept: ``$PYICEBERG_CRYPTO_JVM_CACHE``; else ``.cache/jvm/servers``
    of the source checkout this module is in; else ``$XDG_CACHE_HOME/pyiceberg-crypto/jvm``
    (``~/.cache/...``), never beside the installed package. None when it is ``off``."""
    configured = os.environ.get(JVM_CACHE_ENV)
    if configured:
        return None if configured == "off" else Path(configured)
    root = Path(__file__).resolve().parents[2]
    if (root / "pyproject.toml").is_file() and (root / "testkit" / "pyproject.toml").is_file():
        return root / ".cache" / "jvm" / "servers"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pyiceberg-crypto" / "jvm"


def _expanded_classpath(classpath: Sequence[str]) -> list[Path] | None:
    """The class path as the ``java`` launcher expands it (``dir/*``: the directory's ``.jar`` files in
    the order the directory lists them), without its trailing directories; None when a directory
    comes before a jar (Java 17 refuses to write an archive then: "Cannot have non-empty directory
    in paths")."""
    entries: list[Path] = []
    for item in classpath:
        if item.endswith("/*"):
            directory = Path(item[:-2])
            with contextlib.suppress(OSError):
                entries += [Path(e.path) for e in os.scandir(directory) if e.name.endswith((".jar", ".JAR"))]
        else:
            entries.append(Path(item))
    while entries and entries[-1].is_dir():
        entries.pop()  # no class of the servers is in one; the JVM checks them not against the archive
    if any(entry.is_dir() for entry in entries):
        return None
    return entries


def _archive_key(java: str, main_class: str, jvm_options: Sequence[str], classpath: Sequence[str]) -> str | None:
    """A digest of what the JVM checks an archive against: its build (``libjvm.so``), the main class,
    the options and each class path jar's path, size and time; None when no archive can be made."""
    entries = _expanded_classpath(classpath)
    if entries is None:
        return None
    digest = hashlib.sha256()
    home = Path(java).resolve().parents[1]
    for part in (str(Path(java).resolve()), main_class, *jvm_options):
        digest.update(part.encode() + b"\0")
    for path in [home / "lib" / "server" / "libjvm.so", home / "lib" / "modules", *entries]:
        try:
            stat = path.stat()
            digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
        except OSError:
            digest.update(f"{path}\0missing\0".encode())
    return digest.hexdigest()[:20]


def class_archive_options(main_class: str, classpath: Sequence[str], jvm_options: Sequence[str],
                          java: str) -> list[str]:
    """The options that use this server's archive, or (none made yet) write one at exit to a name
    of this JVM's own; ``[]`` when archives are off, the cache is not writable or the class path
    cannot have one."""
    directory = class_archive_dir()
    key = _archive_key(java, main_class, jvm_options, classpath) if directory else None
    if key is None:
        return []
    archive = directory / f"{main_class.rsplit('.', 1)[-1]}-{key}.jsa"
    if archive.is_file():
        return [f"-XX:SharedArchiveFile={archive}", *QUIET_ARCHIVE_OPTIONS]
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for stale in directory.glob(f"*{_PARTIAL_SUFFIX}"):
            with contextlib.suppress(OSError):
                if time.time() - stale.stat().st_mtime > _STALE_PARTIAL_SECONDS:
                    stale.unlink()
    except OSError:
        return []
    if not os.access(directory, os.W_OK):
        return []
    partial = archive.with_name(f"{archive.name}.{os.getpid()}-{secrets.token_hex(4)}{_PARTIAL_SUFFIX}")
    return [f"{_DUMP_OPTION}{partial}", *QUIET_ARCHIVE_OPTIONS]


def publish_class_archive(args: Sequence[str] | str, returncode: int | None) -> Path | None:
    """After a JVM started with :func:`java_command` ended (``args``: its command, ``returncode``: its
    exit status): put the archive it wrote in place, if it exited itself (a status >= 0: SIGTERM
    included, the JVM's shutdown writes it), unless another is there already; after a signal it
    did not handle (SIGKILL: a half-written file, or none) remove what it left. Returns the archive
    put in place."""
    if isinstance(args, str) or returncode is None:
        return None
    partial = next((Path(a[len(_DUMP_OPTION):]) for a in args if a.startswith(_DUMP_OPTION)), None)
    if partial is None:
        return None
    try:
        if returncode < 0 or not partial.is_file():
            return None
        archive = partial.with_name(partial.name.split(".jsa.", 1)[0] + ".jsa")
        try:
            os.link(partial, archive)  # atomic, and never over another JVM's archive
        except FileExistsError:
            return None
        return archive
    except OSError:
        return None
    finally:
        with contextlib.suppress(OSError):
            partial.unlink()
