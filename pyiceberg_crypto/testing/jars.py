"""The jars of the test kit's Java servers, pinned by SHA-256 and fetched with the package's one
Maven resolver (:func:`pyiceberg_crypto.jars.download`): the Kafka broker
(:mod:`.kafka`) and the loopback REST catalog's database (:mod:`.rest`). Offline, fill a
directory once with ``python -m pyiceberg_crypto.testing jars DIR --kafka-broker --rest-catalog``.

The loopback servers' own classes are in ``pyiceberg-crypto-testing.jar`` beside this module
(:func:`testing_jar`), never in the production bridge jar.
"""

from __future__ import annotations

import os
from pathlib import Path

from pyiceberg_crypto import jars
from pyiceberg_crypto.errors import SetupError

TESTING_JAR_NAME = "pyiceberg-crypto-testing.jar"


def testing_jar() -> Path:
    """The test kit's jar (the loopback REST catalog and metastore classes) shipped in this package."""
    path = Path(__file__).parent / "_jars" / TESTING_JAR_NAME
    if not path.is_file():
        raise SetupError(
            f"{path} is missing: this pyiceberg-crypto was installed without its Java part (in a checkout, "
            "run `make jars`)")
    return path


#: The Apache Kafka broker run by :mod:`pyiceberg_crypto.testing.kafka` (KRaft, Java 17+).
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
jars.PINNED_SHA256.update((f"{c.split(':')[1]}-{c.split(':')[2]}.jar", sha) for c, sha in KAFKA_BROKER_JARS)

#: The H2 database jar under the test REST catalog server (:mod:`pyiceberg_crypto.testing.rest`):
#: its ``JdbcCatalog`` keeps namespaces and table pointers in an H2 file. 2.3.232 runs on Java 11.
H2_JAR: tuple[str, str] = ("com.h2database:h2:2.3.232",
                           "8dae62d22db8982c3dcb3826edb9c727c5d302063a67eef7d63d82de401f07d3")
jars.PINNED_SHA256["h2-2.3.232.jar"] = H2_JAR[1]


def kafka_broker_artifacts() -> list[jars.MavenArtifact]:
    """The jars of the Kafka broker (:data:`KAFKA_BROKER_JARS`), every one pinned by SHA-256."""
    return [jars.MavenArtifact(*coordinate.split(":")) for coordinate, _ in KAFKA_BROKER_JARS]


def kafka_broker_dir(jars_dir: str | os.PathLike | None = None) -> Path:
    """Where the broker's jars are kept: ``<jars_dir>/kafka-<version>``, by default
    ``$PYICEBERG_CRYPTO_JARS/kafka-<version>`` when that is set, else
    ``~/.cache/pyiceberg-crypto/kafka-<version>`` (``$XDG_CACHE_HOME`` respected)."""
    base = Path(jars_dir) if jars_dir is not None else jars.local_jars_dir()
    if base is None:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pyiceberg-crypto"
    return base / f"kafka-{KAFKA_VERSION}"


def kafka_broker_jars(directory: str | os.PathLike | None = None, *, download_missing: bool = True,
                      repository: str = jars.MAVEN_CENTRAL, log=None) -> list[Path]:
    """The broker's jar files in ``directory`` (default :func:`kafka_broker_dir`), downloaded and
    SHA-256-checked first when missing (offline: fill the directory once with
    ``python -m pyiceberg_crypto.testing jars DIR --kafka-broker``).

    Raises:
        SetupError: a jar is missing and ``download_missing`` is False.
        SetupError, OSError: as :func:`~pyiceberg_crypto.jars.download`.
    """
    target = Path(directory) if directory is not None else kafka_broker_dir()
    wanted = kafka_broker_artifacts()
    missing = [a for a in wanted if not (target / a.file_name).is_file()]
    if missing and not download_missing:
        raise SetupError(
            f"{target} lacks {len(missing)} of the Kafka broker's jars ({missing[0].file_name}, ...): run "
            f"`python -m pyiceberg_crypto.testing jars {target.parent} --kafka-broker`")
    return jars.download(target, wanted, repository=repository, log=log)  # present jars: SHA-256 only


def h2_artifact() -> jars.MavenArtifact:
    """H2 (:data:`H2_JAR`), the database of the test REST catalog server."""
    return jars.MavenArtifact(*H2_JAR[0].split(":"))


def rest_catalog_jars(directory: str | os.PathLike | None = None, *, download_missing: bool = True,
                      repository: str = jars.MAVEN_CENTRAL, log=None) -> list[Path]:
    """The jars the test REST catalog server needs beyond pyspark's and the bridge jar: the Iceberg
    runtime (:func:`~pyiceberg_crypto.jars.local_jar` of :func:`~pyiceberg_crypto.jars.runtime_artifact`) and H2 (:data:`H2_JAR`), in ``directory``
    (default ``$PYICEBERG_CRYPTO_JARS``, else ``~/.cache/pyiceberg-crypto``), downloaded and
    SHA-256-checked first when missing.

    Raises:
        SetupError: a jar is missing and ``download_missing`` is False.
        SetupError, OSError: as :func:`~pyiceberg_crypto.jars.download`.
    """
    base = Path(directory) if directory is not None else jars.local_jars_dir()
    if base is None:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pyiceberg-crypto"
    wanted = [jars.runtime_artifact(jars.spark_line()), h2_artifact()]
    missing = [a for a in wanted if not (base / a.file_name).is_file()]
    if missing and not download_missing:
        raise SetupError(f"{base} lacks {missing[0].file_name}: copy it there from Maven Central "
                               f"({missing[0].coordinate})")
    return jars.download(base, wanted, repository=repository, log=log)
