"""The JVM artifacts a session needs, chosen from the running pyspark, and where they come from.

- **The bridge jar** (``pyiceberg-crypto-bridge.jar``: the Python-KMS ``KeyManagementClient`` and
  the loopback metastore) ships inside this package (``_jars/``), built by Maven when the wheel is
  built. It matches this package's version and runs on Java 11+. The build also lays it out as a
  one-artifact Maven repository (``_jars/maven``, :func:`bridge_artifact`).
- **The Iceberg Spark runtime** (and ``iceberg-aws-bundle`` when S3 or AWS KMS is used) is chosen
  by the pyspark line: Spark 3.5 -> ``iceberg-spark-runtime-3.5_2.12:1.12.0``, Spark 4.1 ->
  ``iceberg-spark-runtime-4.1_2.13:1.12.0``.

Every jar of a session travels by **one channel**, so that Spark ships all of them to executors:

- ``packages`` (default): Maven coordinates in ``spark.jars.packages``, the bridge's from the
  package's own repository (``spark.jars.repositories=file://.../_jars/maven``), the Iceberg
  runtime's from Maven Central (or your mirror). Never ``spark.jars`` beside them: a PySpark
  builder that sets both replaces the jar list spark-submit resolved with its own ``spark.jars``,
  so executors in other JVMs never fetch the packages (``ClassNotFoundException`` on the first
  write; measured on local-cluster and a standalone cluster, FINDINGS.md).
- ``local`` (offline / air-gapped): jar files in ``spark.jars``: download the pinned jars once
  into a directory (``pyiceberg-crypto jars download DIR``, checked against SHA-256 sums pinned
  here) and set ``PYICEBERG_CRYPTO_JARS=DIR`` (or pass ``jars_dir=`` to
  :func:`pyiceberg_crypto.config.spark_settings`)::

      >>> runtime_artifact(spark_line("3.5.9")).coordinate
      'org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.12.0'

Two optional sets for streaming from Kafka:

- **Spark's Kafka connector** (``kafka=True`` in :func:`pyiceberg_crypto.config.spark_settings`):
  ``spark-sql-kafka-0-10`` for the Spark line (:func:`kafka_connector_artifacts`) and, as local
  jars, what it needs beyond Spark's own jars (``spark-token-provider-kafka-0-10``,
  ``kafka-clients``, ``commons-pool2``).
- **A Kafka broker** for tests and trying things by hand (:mod:`pyiceberg_crypto.services.kafka`):
  Apache Kafka's server jars and their dependencies, a Maven resolution done once and pinned
  here with SHA-256s (:data:`KAFKA_BROKER_JARS`), downloaded once into :func:`kafka_broker_dir`.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pyiceberg_crypto.errors import PyicebergCryptoError

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
}

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

#: The Apache Kafka broker run by :mod:`pyiceberg_crypto.services.kafka` (KRaft, Java 17+).
KAFKA_VERSION = "4.1.2"
#: ``kafka_2.13`` at :data:`KAFKA_VERSION` with its runtime dependencies (a Maven resolution done
#: once) plus ``log4j-slf4j-impl`` (Kafka's own distribution ships a binding; the POM has none),
#: each with the SHA-256 of the file on Maven Central (their .sha1 files agree).
KAFKA_BROKER_JARS: tuple[tuple[str, str], ...] = (
    ("at.yawk.lz4:lz4-java:1.10.1", "a58a84c4271e50df4c96ed916ccb7e48a869f8ed9cdcda1ad5d3d4c33b0214a3"),
    ("com.dynatrace.hash4j:hash4j:0.22.0", "23028a3fd006e530bf495f551083208187cafd8f80624d048eba56442f16a50e"),
    ("com.fasterxml.jackson.core:jackson-annotations:2.19.4", "ab26383fa3c10c0df1ffd1bb035d81161c059b1af71927d73c24473c058baa16"),
    ("com.fasterxml.jackson.core:jackson-core:2.19.4", "466ae4dc4f7054f51525f4211df411d9a64d65cc169995d32bf49e20e6f586e5"),
    ("com.fasterxml.jackson.core:jackson-databind:2.19.4", "b781c431be870deb0bf84421e99e774c256a701f4ba678df80248f55cd16ff74"),
    ("com.fasterxml.jackson.dataformat:jackson-dataformat-csv:2.19.4", "fc06cf56909e43e0cdc84ad5e23069fcc4d503a8833bda348f47e50e8f1ac92c"),
    ("com.fasterxml.jackson.dataformat:jackson-dataformat-yaml:2.19.4", "998e652806c49ca59e2b6432c4edc37580c4702cb6189d10e6053d0b7982c2e7"),
    ("com.fasterxml.jackson.datatype:jackson-datatype-jdk8:2.19.4", "c0e0dc3039f9a37a099b2602838f833ea8c15c56445a0eb5463d0c7e0c355da2"),
    ("com.github.ben-manes.caffeine:caffeine:3.2.0", "ec411dfdf0c03f25218648ce89861630b71680e5858a9a7278ebac8e55cab3d7"),
    ("com.github.luben:zstd-jni:1.5.6-10", "b6c3237e24b8252a5a9c3a0e1ae30ef8f323412e74bd358548b7a9e527d676df"),
    ("com.google.re2j:re2j:1.8", "7b52c72156dd7f98b3237a5b35c1d34fba381b21048c89208913ad80a45dfbd7"),
    ("com.typesafe.scala-logging:scala-logging_2.13:3.9.5", "87a3017d3f43e6ace7566fe4c3d615134c6914ff871c8d64bb32ca1d996d0545"),
    ("com.yammer.metrics:metrics-core:2.2.0", "6b7a14a6f34c10f8683f7b5e2f39df0f07b58c7dff0e468ebbc713905c46979c"),
    ("commons-beanutils:commons-beanutils:1.11.0", "9e44ba68ec9a3f21286fa2a8bbb003b735c0f69101bb43144b79f4f8aaa74709"),
    ("commons-collections:commons-collections:3.2.2", "eeeae917917144a68a741d4c0dff66aa5c5c5fd85593ff217bced3fc8ca783b8"),
    ("commons-digester:commons-digester:2.1", "e0b2b980a84fc6533c5ce291f1917b32c507f62bcad64198fff44368c2196a3d"),
    ("commons-logging:commons-logging:1.3.5", "6d7a744e4027649fbb50895df9497d109f98c766a637062fe8d2eabbb3140ba4"),
    ("commons-validator:commons-validator:1.10.1", "ed74711a78d793ca37f6075e4a1e93d107233dfd20d0bb17e32bad88d38e56aa"),
    ("net.sf.jopt-simple:jopt-simple:5.0.4", "df26cc58f235f477db07f753ba5a3ab243ebe5789d9f89ecf68dd62ea9a66c28"),
    ("net.sourceforge.argparse4j:argparse4j:0.7.0", "65ceb669d88f63306c680f8088bbf765bbca72d288a61a03703000076c3d3f56"),
    ("org.apache.kafka:kafka-clients:4.1.2", "afe861c05067f4018a3148d73c1ed1e5fc90808757c15b043527d7e535a5d431"),
    ("org.apache.kafka:kafka-coordinator-common:4.1.2", "0e6697b6827fa635b4686ec9754b1c5583f4997e9bc0f33a8518f1dee518a454"),
    ("org.apache.kafka:kafka-group-coordinator-api:4.1.2", "781f932fb3e3824420e7554ef745b57e1827dd801cfc71bf8fd31eef56e60638"),
    ("org.apache.kafka:kafka-group-coordinator:4.1.2", "1925a002ef7c527b72a0877ed0d9f3a5f88a08d130d1ed2bdfcc40457ded354b"),
    ("org.apache.kafka:kafka-metadata:4.1.2", "ccc29f5423cf5fbe63b47871dbce00a16e05a38bd0d531b3bf21e5c71ba54fac"),
    ("org.apache.kafka:kafka-raft:4.1.2", "01f6717d07472b577a1cfe1cdf4d098b14a1dae4e35574164712801bd2a55cce"),
    ("org.apache.kafka:kafka-server-common:4.1.2", "0f1d8fb9478ca0e3eea23b81064749738b9bff705704067e2fe8d62047e5fc07"),
    ("org.apache.kafka:kafka-server:4.1.2", "2b849f1c9d3d9a08a5ea4c2f0479c552592cd770d72263d8d1610701a9b3e8d4"),
    ("org.apache.kafka:kafka-share-coordinator:4.1.2", "fffacfaa46e7f25696f673035f86669422ae81889dfd28d8fec29500ee888310"),
    ("org.apache.kafka:kafka-storage-api:4.1.2", "79910cc7d0e3d3a9d9ce6f30f6f000cd355321f604a0f6c73c948389d1b41457"),
    ("org.apache.kafka:kafka-storage:4.1.2", "902a08f775a9957e1546ecec8e22fbda73b84be9dfbdf04cce7a023dd60bf8b9"),
    ("org.apache.kafka:kafka-tools-api:4.1.2", "6d4d6a33b0dcd2180e7489c58c0089f8fb502e7a095cdd46f57755df462f00ae"),
    ("org.apache.kafka:kafka-transaction-coordinator:4.1.2", "20939d46e1e65a34d6a59b447f0a5e63721678abbfdc948a5f9422930d71612c"),
    ("org.apache.kafka:kafka_2.13:4.1.2", "965af2d9c19be0c169110eb18468a0bee24e24d14071a57c7f8a57bc4d3f990e"),
    ("org.apache.logging.log4j:log4j-api:2.25.3", "e886682920fa0fb9d6eb6395dcb4de088443f8646c89c5e5846e168e327f406f"),
    ("org.apache.logging.log4j:log4j-core:2.25.3", "362b7fcb65b73aa46cc4bc53abf4eb216f444a83b5d1a037cb6fdfff0ae9f0f9"),
    ("org.apache.logging.log4j:log4j-slf4j-impl:2.25.3", "f835ac2bf1a895d5e687b4ebf238bff05316dd672e572dff235024b6e320bcc9"),
    ("org.bitbucket.b_c:jose4j:0.9.6", "7314af50cde9c99e8eaf43eee617a23edcc6bb43036221064355094999d837ef"),
    ("org.hdrhistogram:HdrHistogram:2.2.2", "22d1d4316c4ec13a68b559e98c8256d69071593731da96136640f864fa14fad8"),
    ("org.jspecify:jspecify:1.0.0", "1fad6e6be7557781e4d33729d49ae1cdc8fdda6fe477bb0cc68ce351eafdfbab"),
    ("org.pcollections:pcollections:4.0.2", "2bbeef5797a241300c4f7513cd546239629ed7deda4fc0c31df90bb95f5f13ef"),
    ("org.scala-lang:scala-library:2.13.16", "1ebb2b6f9e4eb4022497c19b1e1e825019c08514f962aaac197145f88ed730f1"),
    ("org.scala-lang:scala-reflect:2.13.16", "fb49ccd9cac7464486ab993cda20a3c1569d8ef26f052e897577ad2a4970fb1d"),
    ("org.slf4j:slf4j-api:1.7.36", "d3ef575e3e4979678dc01bf1dcce51021493b4d11fb7f1be8ad982877c16a1c0"),
    ("org.xerial.snappy:snappy-java:1.1.10.7", "4c766cb3f855415ee734b2392949a0b6f12a60879334a74518deaf6270d32e36"),
    ("org.yaml:snakeyaml:2.4", "ef779af5d29a9dde8cc70ce0341f5c6f7735e23edff9685ceaa9d35359b7bb7f"),
)
PINNED_SHA256.update((f"{c.split(':')[1]}-{c.split(':')[2]}.jar", sha) for c, sha in KAFKA_BROKER_JARS)

#: The H2 database jar under the test REST catalog server (:mod:`pyiceberg_crypto.services.rest`):
#: its ``JdbcCatalog`` keeps namespaces and table pointers in an H2 file. 2.3.232 runs on Java 11.
H2_JAR: tuple[str, str] = ("com.h2database:h2:2.3.232",
                           "8dae62d22db8982c3dcb3826edb9c727c5d302063a67eef7d63d82de401f07d3")
PINNED_SHA256["h2-2.3.232.jar"] = H2_JAR[1]


class JarNotFoundError(PyicebergCryptoError, FileNotFoundError):
    """A required jar is missing; the message says how to build or fetch it."""


class UnsupportedSparkError(PyicebergCryptoError, RuntimeError):
    """The installed pyspark is not a line Iceberg ships a runtime for; the message lists them."""


class UnsupportedJavaError(PyicebergCryptoError, RuntimeError):
    """The JVM is too old for the bridge jar (or for the Spark line); the message says which is needed."""


class ChecksumError(PyicebergCryptoError, RuntimeError):
    """A downloaded jar does not match its pinned SHA-256."""


def installed_pyspark_version() -> str:
    """The version of the importable pyspark (a clear error when there is none)."""
    try:
        import pyspark
    except ImportError as exc:
        raise UnsupportedSparkError(
            f"pyspark is not installed: install a supported one ({PYSPARK_REQUIREMENT!r})"
        ) from exc
    return pyspark.__version__


def spark_line(pyspark_version: str | None = None) -> SparkLine:
    """The supported Spark line of ``pyspark_version`` (default: the installed pyspark).

    Raises:
        UnsupportedSparkError: for 3.4, 4.0, 4.2+ and anything else without an Iceberg runtime.
    """
    version = pyspark_version or installed_pyspark_version()
    match = re.match(r"(\d+)\.(\d+)", version)
    line = SUPPORTED_SPARK_LINES.get(f"{match.group(1)}.{match.group(2)}") if match else None
    if line is None:
        supported = " and ".join(f"Spark {s.spark}.x (Scala {s.scala})" for s in SUPPORTED_SPARK_LINES.values())
        raise UnsupportedSparkError(
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


def artifacts(line: SparkLine, *, aws: bool = False, kafka: bool = False, local: bool = False) -> list[MavenArtifact]:
    """The artifacts a session on ``line`` needs: the Iceberg runtime, the AWS bundle when ``aws``,
    Spark's Kafka connector when ``kafka`` (with the jars it needs beyond Spark's when ``local``:
    local jar files do not bring their dependencies, Maven coordinates do)."""
    found = [runtime_artifact(line)] + ([aws_bundle_artifact()] if aws else [])
    return found + (kafka_connector_artifacts(line, with_dependencies=local) if kafka else [])


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


def kafka_broker_artifacts() -> list[MavenArtifact]:
    """The jars of the Kafka broker (:data:`KAFKA_BROKER_JARS`), every one pinned by SHA-256."""
    return [MavenArtifact(*coordinate.split(":")) for coordinate, _ in KAFKA_BROKER_JARS]


def kafka_broker_dir(jars_dir: str | os.PathLike | None = None) -> Path:
    """Where the broker's jars are kept: ``<jars_dir>/kafka-<version>``, by default
    ``$PYICEBERG_CRYPTO_JARS/kafka-<version>`` when that is set, else
    ``~/.cache/pyiceberg-crypto/kafka-<version>`` (``$XDG_CACHE_HOME`` respected)."""
    base = Path(jars_dir) if jars_dir is not None else local_jars_dir()
    if base is None:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pyiceberg-crypto"
    return base / f"kafka-{KAFKA_VERSION}"


def kafka_broker_jars(directory: str | os.PathLike | None = None, *, download_missing: bool = True,
                      repository: str = MAVEN_CENTRAL, log=None) -> list[Path]:
    """The broker's jar files in ``directory`` (default :func:`kafka_broker_dir`), downloaded and
    SHA-256-checked first when missing (offline: fill the directory once with
    ``pyiceberg-crypto jars download DIR --kafka-broker``).

    Raises:
        JarNotFoundError: a jar is missing and ``download_missing`` is False.
        ChecksumError, OSError: as :func:`download`.
    """
    target = Path(directory) if directory is not None else kafka_broker_dir()
    wanted = kafka_broker_artifacts()
    missing = [a for a in wanted if not (target / a.file_name).is_file()]
    if missing and not download_missing:
        raise JarNotFoundError(
            f"{target} lacks {len(missing)} of the Kafka broker's jars ({missing[0].file_name}, ...): run "
            f"`pyiceberg-crypto jars download {target} --kafka-broker`")
    return download(target, wanted, repository=repository, log=log)  # present jars: SHA-256 only


def h2_artifact() -> MavenArtifact:
    """H2 (:data:`H2_JAR`), the database of the test REST catalog server."""
    return MavenArtifact(*H2_JAR[0].split(":"))


def rest_catalog_jars(directory: str | os.PathLike | None = None, *, download_missing: bool = True,
                      repository: str = MAVEN_CENTRAL, log=None) -> list[Path]:
    """The jars the test REST catalog server needs beyond pyspark's and the bridge jar: the Iceberg
    runtime (:func:`local_jar` of :func:`runtime_artifact`) and H2 (:data:`H2_JAR`), in ``directory``
    (default ``$PYICEBERG_CRYPTO_JARS``, else ``~/.cache/pyiceberg-crypto``), downloaded and
    SHA-256-checked first when missing.

    Raises:
        JarNotFoundError: a jar is missing and ``download_missing`` is False.
        ChecksumError, OSError: as :func:`download`.
    """
    base = Path(directory) if directory is not None else local_jars_dir()
    if base is None:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pyiceberg-crypto"
    wanted = [runtime_artifact(spark_line()), h2_artifact()]
    missing = [a for a in wanted if not (base / a.file_name).is_file()]
    if missing and not download_missing:
        raise JarNotFoundError(f"{base} lacks {missing[0].file_name}: copy it there from Maven Central "
                               f"({missing[0].coordinate})")
    return download(base, wanted, repository=repository, log=log)


def check_java_version(specification_version: str, line: SparkLine | None = None) -> int:
    """Raise :class:`UnsupportedJavaError` unless the JVM's ``java.specification.version`` can run
    the bridge (Java 11+) and, when ``line`` is given, that Spark line. Returns the major version.

    >>> check_java_version("17")
    17
    """
    text = specification_version.strip()
    major = int(text.split(".")[1]) if text.startswith("1.") else int(text.split(".")[0])
    if major < MIN_JAVA:
        raise UnsupportedJavaError(
            f"this Spark driver runs on Java {major}: pyiceberg-crypto's bridge jar needs Java {MIN_JAVA} or "
            "newer (Spark 3.5 supports 11 and 17, Spark 4.1 needs 17); set JAVA_HOME to such a JDK"
        )
    if line is not None and major < min(line.java):
        raise UnsupportedJavaError(
            f"Spark {line.spark} needs Java {min(line.java)} or newer, this JVM is Java {major}: set JAVA_HOME"
        )
    return major


def bridge_jar() -> Path:
    """Path of the bridge jar shipped in this package."""
    path = Path(__file__).parent / "_jars" / BRIDGE_JAR_NAME
    if not path.is_file():
        raise JarNotFoundError(
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
        JarNotFoundError: the repository is missing or stale (an install without its Java part,
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
    raise JarNotFoundError(
        f"{versions} holds no copy of {jar} (SHA-256 {digest[:16]}...): the bridge's Maven layout is missing "
        "or stale. Reinstall the wheel, or in a checkout run `make jars`"
    )


def local_jars_dir() -> Path | None:
    """``$PYICEBERG_CRYPTO_JARS`` as a path, or None when unset."""
    value = os.environ.get(JARS_DIR_ENV)
    return Path(value) if value else None


def local_jar(directory: Path, artifact: MavenArtifact) -> Path:
    """``directory/<artifact file>``, or :class:`JarNotFoundError` saying how to download it."""
    path = Path(directory) / artifact.file_name
    if not path.is_file():
        raise JarNotFoundError(
            f"{path} is missing: download the pinned jars with `pyiceberg-crypto jars download {directory}` "
            f"(add --spark, --aws and --kafka as needed), or copy {artifact.coordinate} there"
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
        ChecksumError: a download does not match its pinned digest.
        OSError: the repository cannot be reached (the message names the URL).
    """
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
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
        with tempfile.NamedTemporaryFile(dir=target, prefix=".download-", delete=False) as tmp:
            try:
                with urllib.request.urlopen(url, timeout=60) as response:
                    while chunk := response.read(1 << 20):
                        tmp.write(chunk)
            except OSError as exc:
                os.unlink(tmp.name)
                raise OSError(f"cannot download {url}: {exc}") from exc
        if not _digest_ok(Path(tmp.name), artifact, repository):
            os.unlink(tmp.name)
            raise ChecksumError(f"{url} does not match its pinned SHA-256: refusing it")
        os.replace(tmp.name, path)
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
