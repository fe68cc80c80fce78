"""Shared helpers for the AGS1 tests: the Java reference class and small file utilities."""

from __future__ import annotations

import os
from pathlib import Path

MIB = 1024 * 1024


def java_vectors(jvm):
    """Iceberg-backed reference helpers (jars/src/main/java/io/pyicebergcrypto/testkit/Ags1Vectors.java)."""
    return jvm.io.pyicebergcrypto.testkit.Ags1Vectors


def random_bytes(n: int) -> bytes:
    return os.urandom(n)


def write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)
