"""Where the Java jars this package needs are found.

``make jars`` (run by ``make setup``) builds the bridge with Maven and copies it, together with the
pinned Iceberg Spark runtime fetched from Maven Central, into ``pyiceberg_crypto/_jars/``.
Set ``PYICEBERG_CRYPTO_JARS`` to another directory to use jars from elsewhere.
"""

from __future__ import annotations

import os
from pathlib import Path

BRIDGE_JAR_NAME = "pyiceberg-crypto-bridge.jar"
ICEBERG_RUNTIME_JAR_NAME = "iceberg-spark-runtime-4.1_2.13-1.12.0.jar"
#: AWS SDK v2 bundle for S3FileIO / AwsKeyManagementClient; added to the classpath only when needed.
AWS_BUNDLE_JAR_NAME = "iceberg-aws-bundle-1.12.0.jar"


class JarNotFoundError(FileNotFoundError):
    """A required jar is missing; the message says how to build or fetch it."""


def jar_dir() -> Path:
    """The directory holding the jars (``$PYICEBERG_CRYPTO_JARS`` or the package's ``_jars``)."""
    override = os.environ.get("PYICEBERG_CRYPTO_JARS")
    return Path(override) if override else Path(__file__).parent / "_jars"


def bridge_jar() -> Path:
    """Path of the bridge jar (KMS client + test-vector helpers)."""
    return _require(BRIDGE_JAR_NAME)


def iceberg_runtime_jar() -> Path:
    """Path of the pinned ``iceberg-spark-runtime`` jar."""
    return _require(ICEBERG_RUNTIME_JAR_NAME)


def aws_bundle_jar() -> Path:
    """Path of the pinned ``iceberg-aws-bundle`` jar (AWS SDK v2 for S3FileIO and AWS KMS)."""
    return _require(AWS_BUNDLE_JAR_NAME)


def _require(name: str) -> Path:
    path = jar_dir() / name
    if not path.is_file():
        raise JarNotFoundError(
            f"{path} is missing: run `make jars` in the pyiceberg-crypto checkout "
            "(builds the bridge with Maven and fetches the Iceberg runtime), "
            "or point PYICEBERG_CRYPTO_JARS at a directory that has it"
        )
    return path
