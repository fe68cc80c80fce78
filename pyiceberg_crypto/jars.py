"""The JVM artifacts a session needs, chosen from the running pyspark, and where they come from.

- **The bridge jar** (``pyiceberg-crypto-bridge.jar``: the Python-KMS ``KeyManagementClient`` and
  the encrypting REST catalog) ships inside this package (``_jars/``), also laid out as a
  one-artifact Maven repository (``_jars/maven``, :func:`bridge_artifact`).
- **The Iceberg Spark runtime** (and ``iceberg-aws-bundle`` when S3 or AWS KMS is used) is chosen
  by the pyspark line; **Spark's Kafka connector** (``kafka=True``) likewise
  (:func:`kafka_connector_artifacts`)::

      >>> runtime_artifact(spark_line("3.5.9")).coordinate
      'org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.12.0'

Every jar of a session travels by **one channel**, so that Spark ships all of them to executors:
``packages`` (default: Maven coordinates in ``spark.jars.packages``, the bridge's from the
package's own repository) or ``local`` (offline: jar files in ``spark.jars``, downloaded once with
``pyiceberg-crypto jars download DIR``, checked against SHA-256 sums pinned here, and found through
``PYICEBERG_CRYPTO_JARS=DIR`` or ``jars_dir=`` of :func:`pyiceberg_crypto.config.spark_settings`).
Never both: docs/explanation/facts.md#spark-jars-and-packages.

The test kit's servers pin their own jars in :mod:`pyiceberg_crypto.testing.jars`, fetched by this
module's :func:`download`. Versions and channels: docs/install.md, docs/how-to/offline-jars.md,
docs/how-to/stream.md (the Kafka connector's jars).
"""

from __future__ import annotations

import hashlib
import os
import re
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pyiceberg_crypto._deprecated import renamed_classes
from pyiceberg_crypto._atomic import PUBLIC, atomic_writer
from pyiceberg_crypto.errors import FileAccessError, InvalidArgumentError, SetupError

__all__ = ["BRIDGE_ARTIFACT", "BRIDGE_GROUP", "BRIDGE_JAR_NAME", "COMET_SPARK_LINES", "COMET_VERSION",
           "ICEBERG_VERSION", "JARS_DIR_ENV", "MAVEN_CENTRAL", "MIN_JAVA", "PINNED_SHA256", "PYSPARK_REQUIREMENT", "MavenArtifact", "SparkLine",
           "artifacts", "aws_bundle_artifact", "bridge_artifact", "bridge_jar", "bridge_repository",
           "check_java_version", "comet_artifact", "download", "installed_pyspark_version",
           "kafka_connector_artifacts", "local_jar", "local_jars_dir", "runtime_artifact", "spark_line"]

#: Old names, kept for one release (CHANGELOG.md).
__getattr__ = renamed_classes(__name__, {"JarNotFoundError": SetupError, "UnsupportedSparkError": SetupError,
                                         "UnsupportedJavaError": SetupError, "ChecksumError": SetupError,
                                         "JarDirectoryError": FileAccessError})

ICEBERG_VERSION = "1.12.0"
BRIDGE_JAR_NAME = "pyiceberg-crypto-bridge.jar"
#: The bridge as a Maven artifact: group and artifact id (its version carries the jar's digest).
BRIDGE_GROUP = "io.pyicebergcrypto"
BRIDGE_ARTIFACT = "pyiceberg-crypto-bridge"
#: Environment variable naming a directory of local jars (offline clusters).
JARS_DIR_ENV = "PYICEBERG_CRYPTO_JARS"
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
#: The oldest Java the bridge jar's bytecode runs on (compiled with ``--release 11``).
MIN_JAVA = 11


@dataclass(frozen=True)
class SparkLine:
    """A Spark release line that Iceberg ships a runtime for."""

    spark: str  # "3.5"
    scala: str  # "2.12"
    java: tuple[int, ...]  # Java versions this Spark line supports and the bridge runs on


#: The Spark lines Iceberg 1.12.0 ships runtimes for (none for 4.0 or 4.2+: Maven Central).
SUPPORTED_SPARK_LINES: dict[str, SparkLine] = {
    "3.5": SparkLine("3.5", "2.12", (11, 17)),
    "4.1": SparkLine("4.1", "2.13", (17, 21)),
}
#: The pyspark requirement that matches :data:`SUPPORTED_SPARK_LINES` (also in pyproject.toml).
PYSPARK_REQUIREMENT = "pyspark>=3.5,!=4.0.*,<4.2"


@dataclass(frozen=True)
class MavenArtifact:
    group: str
    artifact: str
    version: str

    @property
    def coordinate(self) -> str:
        """``group:artifact:version``, as ``spark.jars.packages`` takes it."""
        return f"{self.group}:{self.artifact}:{self.version}"

    @property
    def file_name(self) -> str:
        return f"{self.artifact}-{self.version}.jar"

    def url(self, repository: str = MAVEN_CENTRAL) -> str:
        path = "/".join([*self.group.split("."), self.artifact, self.version, self.file_name])
        return f"{repository.rstrip('/')}/{path}"


#: SHA-256 of the pinned jars as published on Maven Central (their .sha1 files agree).
PINNED_SHA256 = {
    "iceberg-spark-runtime-3.5_2.12-1.12.0.jar": "8dd8c90e54ed1a20f2461309d047a255ee56382eb7c0a46162b27a4936fd86dc",
    "iceberg-spark-runtime-4.1_2.13-1.12.0.jar": "3123c3798af642dd537230923548e013ef41cc28b6626e5225808cf5670a0f82",
    "iceberg-aws-bundle-1.12.0.jar": "dd7e49ffa4ac9b215bed846581991259e3aec9bb2fa08d6cec029c46cd66d957",
    # Spark's Kafka connector and what it needs beyond Spark's jars (kafka_connector_artifacts)
    "spark-sql-kafka-0-10_2.13-4.1.3.jar": "cb31ffd9c8f5527dba061db8af671d295562092e4f3f5ff42fc249fab8a8fde6",
    "spark-token-provider-kafka-0-10_2.13-4.1.1.jar": "e510adc37b03d01d0a190d0dab472b5538e05eaa77454f7e9477156d7a6820ae",
    "kafka-clients-3.9.1.jar": "7568b998572d256f0b7bc0afdc1b7a2588b8b08415c62ce314c864a6851ae9d9",
    "commons-pool2-2.12.1.jar": "5273c8bc8c0dca2211175c0d27efbd7228efae99689aac001a8e1ef8e872e9ef",
    "spark-sql-kafka-0-10_2.12-3.5.7.jar": "184f8bd4a3cd22299c49090d88b894f81fd7546b4ee64879519a0d76a685dbb8",
    "spark-token-provider-kafka-0-10_2.12-3.5.7.jar": "9701914db5c6d09628b58d2d2c1ccd2c9ea28f32f83dd6cb21f98b8237531ff4",
    "kafka-clients-3.4.1.jar": "9d0a9058c8ede79db6e54ae378ed16fe8d1bead2894635a4aa6aa0b7981668c6",
    "commons-pool2-2.11.1.jar": "ea0505ee7515e58b1ac0e686e4d1a5d9f7d808e251a61bc371aa0595b9963f83",
    # Apache DataFusion Comet, the native reader (comet_artifact; its .sha1 agrees)
    "comet-spark-spark4.1_2.13-1.2.0.jar": "5055c43dca9e8cce83c33b1ff25646d1436c94698ca48beb3475bf60843b8d37",
}

#: Apache DataFusion Comet (``spark_settings(accelerator="comet")``): the version, and the Spark
#: lines its jar is served for here and measured with Iceberg 1.12.0 (4.1 only: no 3.5 jar is served).
COMET_VERSION = "1.2.0"
COMET_SPARK_LINES = ("4.1",)

#: ``spark-sql-kafka-0-10`` per Spark line: (connector, its token provider, its kafka-clients, its
#: commons-pool2). Spark 4.1: 4.1.3, the first 4.1 connector without SPARK-55271 (4.1.0-4.1.2 fail
#: the first micro-batch after a restart from a checkpoint with an uncommitted batch:
#: ``NullPointerException ... KafkaMicroBatchStream.metrics``), with the 4.1.1 token provider for
#: local jars (the newest 4.1 one Maven Central serves here; the module did not change). Spark
#: 3.5: 3.5.7, the newest 3.5 patch release whose connector and token provider are both served.
KAFKA_CONNECTORS: dict[str, tuple[str, str, str, str]] = {
    "3.5": ("3.5.7", "3.5.7", "3.4.1", "2.11.1"),
    "4.1": ("4.1.3", "4.1.1", "3.9.1", "2.12.1"),
}



def installed_pyspark_version() -> str:
    """The version of the importable pyspark (a clear error when there is none)."""
    try:
        import pyspark
    except ImportError as exc:
        raise SetupError(
            f"pyspark is not installed: install a supported one ({PYSPARK_REQUIREMENT!r})"
        ) from exc
    return pyspark.__version__


def spark_line(pyspark_version: str | None = None) -> SparkLine:
    """The supported Spark line of ``pyspark_version`` (default: the installed pyspark).

    Raises:
        SetupError: for 3.4, 4.0, 4.2+ and anything else without an Iceberg runtime.
    """
    version = pyspark_version or installed_pyspark_version()
    match = re.match(r"(\d+)\.(\d+)", version)
    line = SUPPORTED_SPARK_LINES.get(f"{match.group(1)}.{match.group(2)}") if match else None
    if line is None:
        supported = " and ".join(f"Spark {s.spark}.x (Scala {s.scala})" for s in SUPPORTED_SPARK_LINES.values())
        raise SetupError(
            f"pyspark {version} is not supported: Iceberg {ICEBERG_VERSION} ships Spark runtimes for "
            f"{supported} only; install one of those ({PYSPARK_REQUIREMENT!r})"
        )
    return line


def runtime_artifact(line: SparkLine) -> MavenArtifact:
    """``iceberg-spark-runtime-<spark>_<scala>`` at the pinned Iceberg version."""
    return MavenArtifact("org.apache.iceberg", f"iceberg-spark-runtime-{line.spark}_{line.scala}", ICEBERG_VERSION)


def aws_bundle_artifact() -> MavenArtifact:
    """``iceberg-aws-bundle`` (AWS SDK v2 for ``S3FileIO`` and ``AwsKeyManagementClient``)."""
    return MavenArtifact("org.apache.iceberg", "iceberg-aws-bundle", ICEBERG_VERSION)


def artifacts(line: SparkLine, *, aws: bool = False, kafka: bool = False, local: bool = False,
              comet: bool = False) -> list[MavenArtifact]:
    """The artifacts a session on ``line`` needs: the Iceberg runtime, the AWS bundle when ``aws``,
    Spark's Kafka connector when ``kafka`` (with the jars it needs beyond Spark's when ``local``:
    local jar files do not bring their dependencies, Maven coordinates do), Comet when ``comet``
    (:func:`comet_artifact`: InvalidArgumentError on a line without it)."""
    found = [runtime_artifact(line)] + ([aws_bundle_artifact()] if aws else [])
    found += kafka_connector_artifacts(line, with_dependencies=local) if kafka else []
    return found + ([comet_artifact(line)] if comet else [])


def comet_artifact(line: SparkLine) -> MavenArtifact:
    """Apache DataFusion Comet's Spark jar for ``line`` (one jar: its native library inside).

    >>> comet_artifact(spark_line("4.1.4")).coordinate
    'org.apache.datafusion:comet-spark-spark4.1_2.13:1.2.0'

    Raises:
        InvalidArgumentError: a Spark line Comet is not served for here (3.5): the message names
            the line and what is supported.
    """
    if line.spark not in COMET_SPARK_LINES:
        raise InvalidArgumentError(
            f"Comet is not supported on Spark {line.spark}: Comet {COMET_VERSION} is served and measured with "
            f"Iceberg {ICEBERG_VERSION} here for Spark {' and '.join(COMET_SPARK_LINES)} only "
            f"(comet-spark-spark4.1_2.13). Use pyspark 4.1, or no accelerator on Spark {line.spark}")
    return MavenArtifact("org.apache.datafusion", f"comet-spark-spark{line.spark}_{line.scala}", COMET_VERSION)


def kafka_connector_artifacts(line: SparkLine, *, with_dependencies: bool = False) -> list[MavenArtifact]:
    """``spark-sql-kafka-0-10`` for ``line`` (:data:`KAFKA_CONNECTORS`); ``with_dependencies`` adds
    the jars it needs beyond Spark's own (what local jars must list; Spark's ``--packages``
    resolves them itself).

    >>> [a.coordinate for a in kafka_connector_artifacts(spark_line("4.1.4"))]
    ['org.apache.spark:spark-sql-kafka-0-10_2.13:4.1.3']
    """
    version, token_provider, clients, pool = KAFKA_CONNECTORS[line.spark]
    connector = [MavenArtifact("org.apache.spark", f"spark-sql-kafka-0-10_{line.scala}", version)]
    if not with_dependencies:
        return connector
    return connector + [
        MavenArtifact("org.apache.spark", f"spark-token-provider-kafka-0-10_{line.scala}", token_provider),
        MavenArtifact("org.apache.kafka", "kafka-clients", clients),
        MavenArtifact("org.apache.commons", "commons-pool2", pool),
    ]


def check_java_version(specification_version: str, line: SparkLine | None = None) -> int:
    """Raise :class:`SetupError` unless the JVM's ``java.specification.version`` can run
    the bridge (Java 11+) and, when ``line`` is given, that Spark line. Returns the major version.

    >>> check_java_version("17")
    17
    """
    text = str(specification_version).strip()
    try:
        major = int(text.split(".")[1]) if text.startswith("1.") else int(text.split(".")[0])
    except (ValueError, IndexError):
        raise SetupError(f"cannot read a Java version from java.specification.version {text!r}") from None
    if major < MIN_JAVA:
        raise SetupError(
            f"this Spark driver runs on Java {major}: pyiceberg-crypto's bridge jar needs Java {MIN_JAVA} or "
            "newer (Spark 3.5 supports 11 and 17, Spark 4.1 needs 17); set JAVA_HOME to such a JDK"
        )
    if line is not None and major < min(line.java):
        raise SetupError(
            f"Spark {line.spark} needs Java {min(line.java)} or newer, this JVM is Java {major}: set JAVA_HOME"
        )
    return major


def bridge_jar() -> Path:
    """Path of the bridge jar shipped in this package."""
    path = Path(__file__).parent / "_jars" / BRIDGE_JAR_NAME
    if not path.is_file():
        raise SetupError(
            f"{path} is missing: this pyiceberg-crypto was installed without its Java part. Install a "
            "built wheel (pip builds one with Maven from the sdist), or in a checkout run `make jars`"
        )
    return path


def bridge_repository() -> Path:
    """The Maven repository inside this package that holds the bridge jar (``_jars/maven``)."""
    return bridge_jar().parent / "maven"


def bridge_artifact() -> MavenArtifact:
    """The bridge jar as a Maven artifact of :func:`bridge_repository`, for ``spark.jars.packages``.

    Its version is ``<bridge version>-<SHA-256 prefix of the jar>``; the artifact is checked to hold
    the same bytes as :func:`bridge_jar`, so both channels always ship the same classes.

    Raises:
        SetupError: the repository is missing or stale (an install without its Java part,
            or a checkout whose jar was rebuilt by hand): the message says how to rebuild.
    """
    jar = bridge_jar()
    digest = _file_digest(jar, "sha256")
    versions = bridge_repository().joinpath(*BRIDGE_GROUP.split("."), BRIDGE_ARTIFACT)
    for directory in sorted(versions.glob(f"*-{digest[:16]}")):
        artifact = MavenArtifact(BRIDGE_GROUP, BRIDGE_ARTIFACT, directory.name)
        candidate = directory / artifact.file_name
        if candidate.is_file() and _file_digest(candidate, "sha256") == digest:
            return artifact
    raise SetupError(
        f"{versions} holds no copy of {jar} (SHA-256 {digest[:16]}...): the bridge's Maven layout is missing "
        "or stale. Reinstall the wheel, or in a checkout run `make jars`"
    )


def local_jars_dir() -> Path | None:
    """``$PYICEBERG_CRYPTO_JARS`` as a path, or None when unset."""
    value = os.environ.get(JARS_DIR_ENV)
    return Path(value) if value else None


def local_jar(directory: Path, artifact: MavenArtifact) -> Path:
    """``directory/<artifact file>``, or :class:`SetupError` saying how to download it."""
    path = Path(directory) / artifact.file_name
    if not path.is_file():
        raise SetupError(
            f"{path} is missing: download the pinned jars with `pyiceberg-crypto jars download {directory}` "
            f"(add --spark, --aws, --kafka and --comet as needed), or copy {artifact.coordinate} there"
        )
    return path


def download(
    directory: str | os.PathLike,
    artifacts_: Iterable[MavenArtifact],
    *,
    repository: str = MAVEN_CENTRAL,
    log=None,
) -> list[Path]:
    """Download ``artifacts_`` into ``directory`` (skipping files already there and intact).

    Each jar is checked against :data:`PINNED_SHA256` (or the repository's ``.sha1`` for a jar not
    pinned here) before it is renamed into place, so a partial or altered download never lands.

    Raises:
        SetupError: a download does not match its pinned digest.
        OSError: the repository cannot be reached (the message names the URL).
        FileAccessError: ``directory`` cannot be made (an OSError too).
    """
    target = Path(directory)
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise FileAccessError(f"cannot use {target} as the jars directory: {exc.strerror or exc}") from None
    paths = []
    for artifact in artifacts_:
        path = target / artifact.file_name
        if path.is_file() and _digest_ok(path, artifact, repository):
            if log:
                log(f"present  {path}")
            paths.append(path)
            continue
        url = artifact.url(repository)
        if log:
            log(f"download {url}")
        # A jar is no secret: 0644. It lands only when its digest matched (else the temporary
        # file is removed and the old jar, if any, stays).
        with atomic_writer(path, mode=PUBLIC) as tmp:
            try:
                with urllib.request.urlopen(url, timeout=60) as response:
                    while chunk := response.read(1 << 20):
                        tmp.write(chunk)
            except OSError as exc:
                raise OSError(f"cannot download {url}: {exc}") from exc
            tmp.flush()
            if not _digest_ok(Path(tmp.name), artifact, repository):
                raise SetupError(f"{url} does not match its pinned SHA-256: refusing it")
        paths.append(path)
    return paths


def _digest_ok(path: Path, artifact: MavenArtifact, repository: str) -> bool:
    pinned = PINNED_SHA256.get(artifact.file_name)
    if pinned is not None:
        return _file_digest(path, "sha256") == pinned
    with urllib.request.urlopen(artifact.url(repository) + ".sha1", timeout=60) as response:
        published = response.read().decode("ascii", "replace").split()[0]
    return _file_digest(path, "sha1") == published


def _file_digest(path: Path, algorithm: str) -> str:
    digest = hashlib.new(algorithm)
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
