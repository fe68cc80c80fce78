"""First-level check of a table directory: does every file start with its encrypted magic?

This is the cheap, key-less look the demo prints before the real verification (the whole-table
walk with keys is :func:`pyiceberg_crypto.verify.verify_metadata`). Results are data, not text::

    for finding in scan_table_files("/warehouse/db.db/orders"):
        print(finding.kind, finding.magic, finding.ok, finding.path)

Expected magics (Iceberg >= 1.11 with ``encryption.key-id`` set):
    data files (Parquet)             ``PARE``  Parquet modular encryption, encrypted footer
    deletion vectors (Puffin)        ``AGS1``  AES GCM Stream
    manifests, manifest lists (Avro) ``AGS1``  AES GCM Stream
    statistics (Puffin)              ``AGS1``  (Iceberg 1.12.0 writes them in plaintext: flagged)
    ``*.metadata.json``              plaintext by design: holds schema and key ids, no data
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pyiceberg_crypto.errors import FileAccessError
from pyiceberg_crypto.io import open_regular_file

__all__ = ["MagicFinding", "scan_table_files"]

EXPECTED_MAGIC = {"data": b"PARE", "deletion-vector": b"AGS1", "manifest": b"AGS1", "manifest-list": b"AGS1",
                  "statistics": b"AGS1", "partition-statistics": b"PARE"}


@dataclass(frozen=True)
class MagicFinding:
    """One file of a table, what it should be, and what its first bytes are."""

    path: Path
    kind: str  # a key of EXPECTED_MAGIC, or "unknown"
    magic: bytes

    @property
    def expected_magic(self) -> bytes | None:
        return EXPECTED_MAGIC.get(self.kind)

    @property
    def ok(self) -> bool:
        """True when the file starts with the magic its kind must have."""
        return self.expected_magic is not None and self.magic == self.expected_magic

    @property
    def magic_text(self) -> str:
        return self.magic.decode("ascii", "replace") if self.magic.isascii() else self.magic.hex()


def table_location(spark, table: str) -> str:
    """Location URI of an Iceberg ``table`` (e.g. ``"lake.db.orders"``) through a SparkSession:
    the directory above its metadata files."""
    metadata_file = spark.sql(f"SELECT file FROM {table}.metadata_log_entries").first()[0]
    return metadata_file.rsplit("/metadata/", 1)[0]


def classify(relative: Path) -> str | None:
    """Kind of a file from its path relative to the table location; None for files not checked."""
    name = relative.name
    if name.endswith(".crc") or name.endswith(".metadata.json") or name == "version-hint.text":
        return None
    top = relative.parts[0] if relative.parts else ""
    if top == "data":
        if name.endswith(".parquet"):
            return "data"
        return "deletion-vector" if name.endswith(".puffin") else "unknown"
    if top == "metadata":
        if name.endswith(".avro"):
            return "manifest-list" if name.startswith("snap-") else "manifest"
        if name.endswith(".stats"):
            return "statistics"
        if name.startswith("partition-stats-"):
            return "partition-statistics"
    return "unknown"


def scan_table_files(location: str | os.PathLike) -> list[MagicFinding]:
    """Every data / manifest / manifest-list file under a local table location, sorted by path.

    Files this check does not know (e.g. Puffin files) are reported with kind ``"unknown"`` and
    ``ok=False`` so nothing passes silently. A FIFO, socket or device is not opened: it is
    reported with an empty magic (never OK).
    """
    root = Path(str(location).removeprefix("file://").removeprefix("file:"))
    findings = []
    for directory, _, names in os.walk(root):
        for name in names:
            path = Path(directory) / name
            kind = classify(path.relative_to(root))
            if kind is None:
                continue
            findings.append(MagicFinding(path, kind, _first_bytes(path, 4)))
    return sorted(findings, key=lambda f: (f.kind, str(f.path)))


def _first_bytes(path: Path, count: int) -> bytes:
    """The first ``count`` bytes of a regular file; empty for anything else (never blocks)."""
    try:
        with open_regular_file(str(path)) as handle:
            return handle.read(count)
    except FileAccessError:
        return b""
