"""The pure settings builders: Spark, catalog, metastore, jar and table settings as plain dicts.

Nothing here starts Spark or imports pyspark: each builder checks its arguments and returns a new
``{key: value}`` dict you can print, diff, or hand to :mod:`.session` and :mod:`.render`::

    from pyiceberg_crypto import config

    settings = config.spark_settings("lake", warehouse="/data/warehouse")       # jars, catalog, metastore
    extra = config.catalog_settings("other", warehouse="/data/wh2", kms_name="vault")  # one more catalog
    props = config.table_properties("orders-master-key", readers=["spark", "trino"])

``table_properties(spark=...)`` also asks the session's KMS about the key, through :mod:`.checks`.
Import the names from :mod:`pyiceberg_crypto.config` (this module is where they are defined).
Every setting: docs/reference/settings.md.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

from pyiceberg_crypto import jars as _jars
from pyiceberg_crypto.catalog.kinds import (
    ENCRYPTING_REST_CATALOG_IMPL,
    HIVE,
    REST,
    asks_for_encryption,
    plaintext_reason,
    session_catalogs,
)
from pyiceberg_crypto.engines import (
    DEFAULT_DATA_KEY_LENGTH,
    ENGINES,
    mode_conflicts,
    parse_readers,
    row_level_properties,
)
from pyiceberg_crypto.errors import InvalidArgumentError, SetupError
from pyiceberg_crypto.properties import (
    AES_KEY_LENGTHS,
    DATA_KEY_LENGTH,
    DEFAULT_KMS_NAME,
    FORMAT_VERSION,
    KEY_ID,
    KMS_IMPL,
    KMS_NAME_PROPERTY,
    KMS_SERVICE_PROPERTY,
    PYTHON_KMS_IMPL,
    READERS_PROPERTY,
)

__all__ = ["ACCELERATORS", "ICEBERG_VERSION", "JAR_MODES", "catalog_settings", "comet_settings", "embedded_metastore_settings", "jar_settings",
           "kms_service_properties", "refuse_plaintext_catalogs", "s3_catalog_properties", "spark_settings",
           "table_properties"]

ICEBERG_VERSION = _jars.ICEBERG_VERSION
JAR_MODES = ("auto", "packages", "local")
#: ``spark_settings(accelerator=...)``: Apache DataFusion Comet, the native reader (Spark 4.1 only).
COMET = "comet"
ACCELERATORS = (COMET,)
#: Iceberg's SQL extensions (CALL procedures, row-level commands on Spark 3.5), always in ``spark.sql.extensions``.
ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
#: The bridge jar's readers guard (``spark_settings(readers_guard=True)``): on a table whose
#: ``pyiceberg-crypto.readers`` names trino it refuses ``ALTER TABLE`` to a merge-on-read mode and a
#: DELETE/UPDATE/MERGE that would write deletion vectors (docs/how-to/trino.md).
READERS_GUARD_EXTENSIONS = "io.pyicebergcrypto.bridge.ReadersGuardExtensions"
S3_FILE_IO = "org.apache.iceberg.aws.s3.S3FileIO"
S3_SCHEMES = ("s3", "s3a", "s3n")
#: Catalog properties that would put credentials into printable settings: refused.
SECRET_PROPERTIES = ("s3.access-key-id", "s3.secret-access-key", "s3.session-token")

#: The property names and key sizes are defined once, in :mod:`pyiceberg_crypto.properties`
#: (``config.PYTHON_KMS_IMPL``, ``config.KMS_NAME_PROPERTY`` and ``config.KMS_SERVICE_PROPERTY`` are those).

#: The package's logger, ``pyiceberg_crypto.config`` (its name from before the split into modules).
log = logging.getLogger(__package__)

#: The log4j 2 configuration ``spark_settings(quiet_logs=True)`` gives the driver (shipped in the package).
QUIET_LOG4J = Path(__file__).resolve().parent.parent / "_log" / "log4j2-quiet.properties"
LOG4J_OPTION = "-Dlog4j2.configurationFile"
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"

#: The catalog kinds (``catalog_type=``; :func:`pyiceberg_crypto.catalog.kinds.catalog_kind`), defined
#: once, in :mod:`pyiceberg_crypto.catalog.kinds`: Iceberg's Hive catalog, and a REST catalog.
SUPPORTED_CATALOG_TYPES = (HIVE, REST)
#: The bridge's REST catalog with table encryption is ``ENCRYPTING_REST_CATALOG_IMPL`` (``catalog-impl``;
#: Iceberg's own ``type=rest`` writes ``encryption.key-id`` tables in plaintext in 1.12.0,
#: apache/iceberg#16672): :mod:`pyiceberg_crypto.catalog.kinds` knows which catalogs encrypt.
#: Spark lines whose bundled Hive metastore lacks HIVE-26882 (pyspark 3.5: hive-metastore-2.3.9).
LINES_WITHOUT_METASTORE_SWAP = ("3.5",)


def spark_settings(
    catalog: str = "local",
    *,
    warehouse: str | Path,
    catalog_type: str = HIVE,
    uri: str | None = None,
    metastore_uri: str | None = None,
    metastore_dir: str | Path | None = None,
    kms_name: str = DEFAULT_KMS_NAME,
    kms_impl: str = PYTHON_KMS_IMPL,
    jars: str = "auto",
    jars_dir: str | Path | None = None,
    spark_version: str | None = None,
    kafka: bool = False,
    hive_lock: bool = False,
    s3_endpoint: str | None = None,
    s3_region: str | None = None,
    s3_path_style_access: bool | None = None,
    extra_catalog_properties: Mapping[str, str] | None = None,
    kms_service: str | Sequence[str] | None = None,
    kms_token_file: str | Path | None = None,
    kms_certificate_sha256: str | None = None,
    quiet_logs: bool = True,
    accelerator: str | None = None,
    readers_guard: bool = True,
) -> dict[str, str]:
    """Spark settings for an Iceberg catalog whose tables are encrypted through a KMS.

    Args:
        catalog: Spark catalog name (tables are ``<catalog>.<db>.<table>``).
        warehouse: warehouse location (a local path or a URI such as ``s3a://bucket/wh``).
        catalog_type: ``"hive"`` (Iceberg's Hive catalog, which wires encryption itself) or ``"rest"``
            (the bridge's ``EncryptingRestCatalog`` over a REST catalog server at ``uri``; no metastore).
        uri: ``http(s)://...`` of the REST catalog server (``catalog_type="rest"`` only).
        metastore_uri: ``thrift://...`` of an external Hive metastore; None for embedded Derby.
        metastore_dir: directory of the embedded Derby database (default: ``<warehouse>/../metastore``).
        kms_name: name under which the Python KMS is registered (see ``pyiceberg_crypto.bridge``).
        kms_impl: Java ``KeyManagementClient`` class; the Python bridge by default.
        jars: how the jars reach the driver and executors. ``"packages"``: every jar as a Maven
            coordinate in ``spark.jars.packages``, resolved by Spark (the Iceberg runtime from
            Maven Central or your ``spark.jars.repositories`` mirror, the bridge from the
            repository inside this package) and shipped to executors by Spark. ``"local"``: jar
            files in ``spark.jars``, from ``jars_dir`` (or ``$PYICEBERG_CRYPTO_JARS``), for offline
            clusters (``pyiceberg-crypto jars download DIR`` fills it). ``"auto"`` (default):
            ``"local"`` when a directory is given or ``$PYICEBERG_CRYPTO_JARS`` is set, else
            ``"packages"``. The bridge jar always comes from this package.
        jars_dir: directory of local jars (implies ``jars="local"`` under ``"auto"``).
        spark_version: the pyspark version the settings are for (default: the installed one);
            it picks the runtime (Spark 3.5 -> ``..-3.5_2.12``, 4.1 -> ``..-4.1_2.13``).
        kafka: add Spark's Kafka connector (``spark-sql-kafka-0-10`` for the Spark line, through
            the same channel as the other jars) for ``readStream.format("kafka")``; local jars
            need ``pyiceberg-crypto jars download DIR --kafka``.
        hive_lock: use the metastore lock for commits instead of the HIVE-26882 atomic swap.
        s3_endpoint: endpoint of an S3-compatible server (``http://127.0.0.1:9000``); None for AWS.
        s3_region: ``client.region`` of the S3 client.
        s3_path_style_access: ``http://endpoint/bucket/key`` addressing (MinIO, moto need it).
        extra_catalog_properties: more ``spark.sql.catalog.<catalog>.*`` properties.
        kms_service: ``HOST:PORT`` of a ``pyiceberg-crypto kms serve`` service: every JVM calls it
            directly, with no Python driver (``spark-sql``, Spark Connect, the Thrift server, JVM
            jobs). Instead of ``kms_name``; see :func:`kms_service_properties`. A list (or
            ``"HOST:PORT,HOST:PORT"``) names replicas (``kms serve --replica``) the JVMs fail over between.
        kms_token_file: the service's ``--token-file`` (required with ``kms_service``); the JVMs
            read the token from it, it never becomes a setting.
        kms_certificate_sha256: the pin the service prints (required unless it listens on loopback).
        quiet_logs: give the driver JVM this package's log4j 2 configuration
            (:data:`QUIET_LOG4J`: Spark's WARN level without the embedded metastore's, DataNucleus'
            and Hadoop's start-up chatter) through ``-Dlog4j2.configurationFile`` in
            ``spark.driver.extraJavaOptions``. ``False``: Spark's own logging (its defaults, or your
            ``log4j2.properties``). A builder whose ``spark.driver.extraJavaOptions`` already names a
            ``-Dlog4j2.configurationFile`` keeps it (:func:`configure_spark_with_encryption`).
        accelerator: ``"comet"``: Apache DataFusion Comet reads the tables natively
            (:func:`comet_settings`: its plugin, shuffle manager, off-heap memory and native Iceberg
            scan; its jar through the same channel as the Iceberg runtime, and with local jars on the
            driver's and the executors' class path too). Spark 4.1 only. None (default): Spark's scan.
        readers_guard: add the bridge jar's :data:`READERS_GUARD_EXTENSIONS` to ``spark.sql.extensions``
            (after Iceberg's): on a table whose ``pyiceberg-crypto.readers`` names ``trino``, Spark refuses
            ``ALTER TABLE ... SET TBLPROPERTIES`` to a merge-on-read ``write.*.mode`` and a DELETE, UPDATE
            or MERGE that would write deletion vectors, with one line naming the table, the reader and
            the way out. ``False``: Iceberg's extensions only (verify and the audit still warn).

    Returns:
        A new dict of Spark configuration keys to string values.

    Raises:
        InvalidArgumentError: on an unknown catalog type, a bad metastore URI, or an empty name.
        SetupError: the pyspark is not 3.5.x or 4.1.x (the message names the lines).
        SetupError: a local jar is missing (the message says how to download it).
        InvalidArgumentError: an unknown ``accelerator``, or ``"comet"`` on Spark 3.5 (the message
            names the line and what is supported).
    """
    if jars not in JAR_MODES:
        raise InvalidArgumentError(f"jars must be one of {', '.join(map(repr, JAR_MODES))}, got {jars!r}")
    if accelerator is not None and accelerator not in ACCELERATORS:
        raise InvalidArgumentError(f"accelerator must be None or one of {', '.join(map(repr, ACCELERATORS))}, "
                                   f"got {accelerator!r}")

    s3 = _uses_s3(warehouse, s3_endpoint, s3_region, s3_path_style_access)
    settings: dict[str, str] = {}
    settings.update(jar_settings(jars, jars_dir=jars_dir, aws=s3, kafka=kafka, spark_version=spark_version,
                                 comet=accelerator == COMET))
    if accelerator == COMET:
        settings.update(comet_settings())
    settings["spark.sql.extensions"] = (f"{ICEBERG_EXTENSIONS},{READERS_GUARD_EXTENSIONS}" if readers_guard
                                        else ICEBERG_EXTENSIONS)
    settings.update(
        catalog_settings(
            catalog,
            warehouse=warehouse,
            catalog_type=catalog_type,
            uri=uri,
            metastore_uri=metastore_uri,
            kms_name=kms_name,
            kms_impl=kms_impl,
            hive_lock=hive_lock,
            s3_endpoint=s3_endpoint,
            s3_region=s3_region,
            s3_path_style_access=s3_path_style_access,
            extra_catalog_properties=extra_catalog_properties,
            kms_service=kms_service,
            kms_token_file=kms_token_file,
            kms_certificate_sha256=kms_certificate_sha256,
        )
    )
    if metastore_uri is None and catalog_type == HIVE:
        settings.update(embedded_metastore_settings(metastore_dir or _default_metastore_dir(warehouse)))
        line = _jars.spark_line(spark_version)
        if not hive_lock and line.spark in LINES_WITHOUT_METASTORE_SWAP:
            log.warning(
                "Spark %s bundles the Hive 2.3.9 metastore, which lacks HIVE-26882: the embedded metastore "
                "commits without compare-and-swap, safe for one writer at a time only. For concurrent writers "
                "use metastore_uri= of a Hive 2.3.10+/4.x metastore server (docs: Installation, Spark 3.5).", line.spark)
    if quiet_logs:
        _add_java_option(settings, f"{LOG4J_OPTION}={QUIET_LOG4J.as_uri()}")
    return settings


def _add_java_option(settings: dict[str, str], option: str) -> None:
    existing = settings.get(DRIVER_JAVA_OPTIONS)
    settings[DRIVER_JAVA_OPTIONS] = f"{existing} {option}" if existing else option


def catalog_settings(
    catalog: str,
    *,
    warehouse: str | Path,
    catalog_type: str = HIVE,
    uri: str | None = None,
    metastore_uri: str | None = None,
    kms_name: str = DEFAULT_KMS_NAME,
    kms_impl: str = PYTHON_KMS_IMPL,
    hive_lock: bool = False,
    s3_endpoint: str | None = None,
    s3_region: str | None = None,
    s3_path_style_access: bool | None = None,
    extra_catalog_properties: Mapping[str, str] | None = None,
    kms_service: str | Sequence[str] | None = None,
    kms_token_file: str | Path | None = None,
    kms_certificate_sha256: str | None = None,
) -> dict[str, str]:
    """Only the ``spark.sql.catalog.<catalog>*`` settings (no jars, extensions or metastore).

    Useful to add a catalog to a running session (``spark.conf.set(k, v)`` for each item) that
    shares the session's metastore, e.g. one that uses another registered KMS. An S3 warehouse
    needs the ``iceberg-aws-bundle`` jar on the session's classpath (:func:`spark_settings` adds it).
    ``catalog_type="rest"`` renders ``catalog-impl`` (the bridge's ``EncryptingRestCatalog``) and ``uri``
    instead of ``type`` (Iceberg refuses both) and no metastore settings.
    """
    _require_identifier("catalog", catalog)
    _require_nonempty("warehouse", str(warehouse))
    _require_nonempty("kms_name", kms_name)
    if catalog_type not in SUPPORTED_CATALOG_TYPES:
        raise InvalidArgumentError(
            f"unknown catalog type {catalog_type!r}: Iceberg {ICEBERG_VERSION} supports table "
            f"encryption from Spark only with {', '.join(SUPPORTED_CATALOG_TYPES)} catalogs "
            "(rest: the bridge's EncryptingRestCatalog)"
        )
    if catalog_type == REST:
        if uri is None or not uri.startswith(("http://", "https://")):
            raise InvalidArgumentError(f"catalog_type='rest' needs uri= of the REST catalog server (http(s)://host:port), "
                                       f"got {uri!r}")
        if metastore_uri is not None or hive_lock:
            raise InvalidArgumentError("metastore_uri and hive_lock are Hive catalog settings: a REST catalog has no metastore")
    elif uri is not None:
        raise InvalidArgumentError("uri= is the REST catalog server's address (catalog_type='rest'); "
                                   "a Hive metastore goes in metastore_uri=")
    if metastore_uri is not None and not metastore_uri.startswith("thrift://"):
        raise InvalidArgumentError(f"metastore_uri must look like thrift://host:port, got {metastore_uri!r}")
    prefix = f"spark.sql.catalog.{catalog}"
    settings = {
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": catalog_type,
        f"{prefix}.warehouse": _as_uri(warehouse),
        f"{prefix}.{KMS_IMPL}": kms_impl,
        f"{prefix}.{KMS_NAME_PROPERTY}": kms_name,
        f"{prefix}.hadoop.iceberg.engine.hive.lock-enabled": "true" if hive_lock else "false",
    }
    if kms_service is not None or kms_token_file is not None:
        del settings[f"{prefix}.{KMS_NAME_PROPERTY}"]  # a service, not a registered name
        if kms_service is None or kms_token_file is None:
            raise InvalidArgumentError("kms_service and kms_token_file go together: the service's HOST:PORT and "
                                       "the file its --token-file wrote")
        for key, value in kms_service_properties(kms_service, kms_token_file, kms_certificate_sha256).items():
            settings[f"{prefix}.{key}"] = value
    elif kms_certificate_sha256 is not None:
        raise InvalidArgumentError("kms_certificate_sha256 pins a KMS service's certificate: pass kms_service too")
    if catalog_type == REST:
        del settings[f"{prefix}.type"], settings[f"{prefix}.hadoop.iceberg.engine.hive.lock-enabled"]
        settings[f"{prefix}.catalog-impl"] = ENCRYPTING_REST_CATALOG_IMPL
        settings[f"{prefix}.uri"] = str(uri)
    if metastore_uri is not None:
        settings[f"{prefix}.uri"] = metastore_uri
    if _uses_s3(warehouse, s3_endpoint, s3_region, s3_path_style_access):
        for key, value in s3_catalog_properties(s3_endpoint, s3_region, s3_path_style_access).items():
            settings[f"{prefix}.{key}"] = value
    for key in SECRET_PROPERTIES:
        if key in (extra_catalog_properties or {}):
            raise InvalidArgumentError(
                f"{key} would put a credential into printable settings: set AWS_ACCESS_KEY_ID / "
                "AWS_SECRET_ACCESS_KEY (or a profile / role) in the environment that starts Spark instead"
            )
    for key, value in (extra_catalog_properties or {}).items():
        settings[f"{prefix}.{key}"] = str(value)
    refuse_plaintext_catalogs(settings)
    return settings


def refuse_plaintext_catalogs(settings: Mapping[str, str]) -> None:
    """InvalidArgumentError when ``settings`` configure an Iceberg catalog with a KMS (or a default
    ``encryption.key-id``) that Iceberg 1.12.0 would ignore, writing its tables in plaintext (e.g.
    Iceberg's own ``type=rest``: :mod:`pyiceberg_crypto.catalog.kinds`); the message names the
    setting that encrypts::

        refuse_plaintext_catalogs({"spark.sql.catalog.lake": "org.apache.iceberg.spark.SparkCatalog",
                                   "spark.sql.catalog.lake.type": "rest", ...})   # InvalidArgumentError
    """
    for name, properties in sorted(session_catalogs(settings).items()):
        reason = plaintext_reason(properties) if asks_for_encryption(properties) else None
        if reason:
            raise InvalidArgumentError(f"catalog {name!r} has a KMS but would write its tables in plaintext: {reason}")


def kms_service_properties(
    address: str | Sequence[str], token_file: str | Path, certificate_sha256: str | None = None,
    kms_timeout: float | None = None, kms_attempt_timeout: float | None = None
) -> dict[str, str]:
    """Catalog properties with which the bridge's ``PythonKmsClient`` calls a ``kms serve`` service.

    >>> kms_service_properties("127.0.0.1:9600", "/run/lake/kms.token")  # doctest: +NORMALIZE_WHITESPACE
    {'pyiceberg-crypto.kms-service': '127.0.0.1:9600',
     'pyiceberg-crypto.kms-service.token-file': '/run/lake/kms.token'}

    The token is read from ``token_file`` by each JVM that can (the driver always must); executors
    that cannot get it inside their tasks, from the driver. A service on any address but loopback
    speaks TLS: ``certificate_sha256`` (printed by ``kms serve``) pins its certificate.
    ``kms_timeout``: seconds a JVM waits to connect and for one call (default: the bridge's 60 s),
    rendered as the property ``pyiceberg-crypto.kms-service.timeout-ms``; with replicas, the
    whole call's bound, failovers included.

    ``address`` may list replicas (``kms serve --replica`` with the same token and TLS files): a
    list of ``HOST:PORT``, or one string of them separated by commas, rendered as
    ``HOST:PORT,HOST:PORT``. Each JVM starts at one of them and fails over to the next.
    ``kms_attempt_timeout``: with replicas, seconds one replica has to answer one call before the
    next is tried (default: the bridge's 10 s; at most ``kms_timeout``), rendered as
    ``pyiceberg-crypto.kms-service.attempt-timeout-ms``: a replica that hangs costs a call this long.

    >>> kms_service_properties(["127.0.0.1:9600", "127.0.0.1:9700"], "/run/lake/kms.token")[
    ...     "pyiceberg-crypto.kms-service"]
    '127.0.0.1:9600,127.0.0.1:9700'
    """
    entries = [part.strip() for part in address.split(",")] if isinstance(address, str) else [
        str(part).strip() for part in address]
    if not entries or entries == [""]:
        raise InvalidArgumentError(f"kms_service must be HOST:PORT (e.g. 127.0.0.1:9600), got {address!r}")
    all_loopback = True
    for entry in entries:
        host, sep, port = entry.rpartition(":")
        bare_host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        if not sep or not bare_host or not port.isdigit() or not 0 < int(port) < 65536:
            where = f"{address!r}" if len(entries) == 1 else f"{entry!r} in {address!r}"
            raise InvalidArgumentError(f"kms_service must be HOST:PORT (e.g. 127.0.0.1:9600), got {where}")
        all_loopback = all_loopback and bare_host in ("127.0.0.1", "localhost")  # no TLS there
    if len(set(entries)) != len(entries):
        raise InvalidArgumentError(f"kms_service lists a replica twice: {address!r}")
    joined = ",".join(entries)
    properties = {
        KMS_SERVICE_PROPERTY: joined,
        f"{KMS_SERVICE_PROPERTY}.token-file": str(Path(token_file).absolute()),
    }
    if certificate_sha256 is not None:
        pin = certificate_sha256.strip().replace(":", "").lower()
        if len(pin) != 64 or any(c not in "0123456789abcdef" for c in pin):
            raise InvalidArgumentError("kms_certificate_sha256 must be the 64 hex digits kms serve prints, "
                                       f"got {len(certificate_sha256)} characters")
        properties[f"{KMS_SERVICE_PROPERTY}.certificate-sha256"] = pin
    elif not all_loopback:
        raise InvalidArgumentError(f"the KMS service {joined} is not on loopback, so it speaks TLS: pass "
                                   "kms_certificate_sha256 (kms serve prints it, and writes it to its status file)")
    for name, seconds, suffix in (("kms_timeout", kms_timeout, "timeout-ms"),
                                  ("kms_attempt_timeout", kms_attempt_timeout, "attempt-timeout-ms")):
        if seconds is not None:
            from pyiceberg_crypto.kms.bounded import kms_timeout_millis  # here: config stays light to import

            if seconds <= 0:
                raise InvalidArgumentError(f"{name} must be positive (seconds), got {seconds}")
            properties[f"{KMS_SERVICE_PROPERTY}.{suffix}"] = str(kms_timeout_millis(seconds))
    return properties


def s3_catalog_properties(
    endpoint: str | None = None, region: str | None = None, path_style_access: bool | None = None
) -> dict[str, str]:
    """Iceberg catalog properties for ``S3FileIO`` (no credentials: those come from the environment).

    >>> s3_catalog_properties("http://127.0.0.1:9000", "us-east-1", True)
    {'io-impl': 'org.apache.iceberg.aws.s3.S3FileIO', 's3.endpoint': 'http://127.0.0.1:9000', \
's3.path-style-access': 'true', 'client.region': 'us-east-1'}
    """
    props = {"io-impl": S3_FILE_IO}
    if endpoint is not None:
        if not endpoint.startswith(("http://", "https://")):
            raise InvalidArgumentError(f"s3_endpoint must look like http(s)://host:port, got {endpoint!r}")
        props["s3.endpoint"] = endpoint
    if path_style_access is not None:
        props["s3.path-style-access"] = "true" if path_style_access else "false"
    if region is not None:
        _require_nonempty("s3_region", region)
        props["client.region"] = region
    return props


def embedded_metastore_settings(metastore_dir: str | Path) -> dict[str, str]:
    """Hadoop settings for an in-process Hive metastore on embedded Derby in ``metastore_dir``.

    The directory is created if missing (Derby needs it to exist for its log file).
    """
    _require_nonempty("metastore_dir", str(metastore_dir))
    directory = Path(metastore_dir).absolute()
    directory.mkdir(parents=True, exist_ok=True)
    return {
        "spark.hadoop.javax.jdo.option.ConnectionURL": (
            f"jdbc:derby:;databaseName={directory / 'metastore_db'};create=true"
        ),
        "spark.hadoop.datanucleus.schema.autoCreateAll": "true",
        "spark.hadoop.hive.metastore.schema.verification": "false",
        "spark.hadoop.hive.metastore.warehouse.dir": _as_uri(directory / "hive-warehouse"),
        # Iceberg owns the schema; Hive's positional type check would refuse reordered columns
        # (ALTER COLUMN ... FIRST/AFTER) with CommitStateUnknownException (Iceberg docs, Hive).
        "spark.hadoop.hive.metastore.disallow.incompatible.col.type.changes": "false",
        # Keep Derby's log out of the current directory.
        "spark.driver.extraJavaOptions": f"-Dderby.stream.error.file={directory / 'derby.log'}",
    }


def jar_settings(
    jars: str = "auto",
    *,
    jars_dir: str | Path | None = None,
    aws: bool = False,
    kafka: bool = False,
    spark_version: str | None = None,
    comet: bool = False,
) -> dict[str, str]:
    """Only the jar settings: the bridge jar, plus the Iceberg runtime for the pyspark line (and
    the AWS bundle with ``aws``, Spark's Kafka connector with ``kafka``, Comet's jar with ``comet``).

    ``"packages"``: every jar as a Maven coordinate (the bridge's from the repository inside this
    package); ``"local"``: every jar as a file in ``spark.jars``. Never both channels at once: a
    PySpark builder with both ships only ``spark.jars`` to executors (:mod:`pyiceberg_crypto.jars`).

    >>> jar_settings("packages", spark_version="3.5.9")["spark.jars.packages"].split(",")[0]
    'org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.12.0'

    Raises:
        SetupError: pyspark (or ``spark_version``) is not a supported line.
        SetupError: ``"local"`` without a directory, or a jar missing from it.
    """
    if jars not in JAR_MODES:
        raise InvalidArgumentError(f"jars must be one of {', '.join(JAR_MODES)}, got {jars!r}")
    line = _jars.spark_line(spark_version)
    directory = Path(jars_dir) if jars_dir is not None else _jars.local_jars_dir()
    if jars == "auto":
        jars = "local" if directory is not None else "packages"
    artifacts = _jars.artifacts(line, aws=aws, kafka=kafka, local=jars == "local", comet=comet)
    if jars == "packages":  # one channel for every jar, the bridge's included (pyiceberg_crypto.jars)
        return {
            "spark.jars.packages": ",".join(a.coordinate for a in [*artifacts, _jars.bridge_artifact()]),
            "spark.jars.repositories": _jars.bridge_repository().as_uri(),
        }
    if directory is None:
        raise SetupError(
            f"jars='local' needs a directory of jars: pass jars_dir=... or set {_jars.JARS_DIR_ENV} "
            "(fill it with `pyiceberg-crypto jars download DIR`)"
        )
    local = [str(_jars.local_jar(directory, artifact)) for artifact in artifacts]
    settings = {"spark.jars": ",".join([str(_jars.bridge_jar()), *local])}
    if comet:  # Comet's plugin and shuffle manager load before spark.jars do: the JVMs' class path too
        jar = str(_jars.local_jar(directory, _jars.comet_artifact(line)))
        settings.update({"spark.driver.extraClassPath": jar, "spark.executor.extraClassPath": jar})
    return settings


def comet_settings() -> dict[str, str]:
    """The settings that turn on Apache DataFusion Comet's native Iceberg reader (no jars: those
    come from :func:`jar_settings` with ``comet=True``; :func:`spark_settings` with
    ``accelerator="comet"`` adds both).

    >>> comet_settings()["spark.plugins"]
    'org.apache.spark.CometPlugin'

    Comet needs off-heap memory (1g here; raise ``spark.memory.offHeap.size`` for real work). A
    scan Comet cannot run natively (a 24-byte data key) falls back to Spark's, and the reason is in
    ``EXPLAIN EXTENDED`` and in a driver log warning. Comet's Iceberg writer stays off (Comet's
    default); on an encrypted table it falls back to Iceberg's writer anyway.
    """
    return {
        "spark.plugins": "org.apache.spark.CometPlugin",
        "spark.shuffle.manager": "org.apache.spark.sql.comet.execution.shuffle.CometShuffleManager",
        "spark.comet.enabled": "true",
        "spark.comet.exec.enabled": "true",
        "spark.comet.exec.shuffle.enabled": "true",
        "spark.comet.scan.icebergNative.enabled": "true",
        "spark.memory.offHeap.enabled": "true",
        "spark.memory.offHeap.size": "1g",
        "spark.comet.explain.fallback.enabled": "true",
        "spark.sql.extendedExplainProviders": "org.apache.comet.ExtendedExplainInfo",
    }


def table_properties(
    key_id: str,
    *,
    data_key_length: int | None = None,
    format_version: int = 3,
    extra: Mapping[str, str] | None = None,
    spark=None,
    catalog: str | None = None,
    readers: str | Sequence[str] | None = None,
) -> dict[str, str]:
    """Table properties that turn on encryption for ``CREATE TABLE ... TBLPROPERTIES``.

    >>> table_properties("k1", data_key_length=32)
    {'encryption.key-id': 'k1', 'format-version': '3', 'encryption.data-key-length': '32'}

    ``readers``: the engines that must read the table (names of :data:`pyiceberg_crypto.engines.ENGINES`:
    ``spark``, ``trino``, ``jvm-free``, ``comet``; ``comet`` with a 24-byte data key is refused: it
    would fall back to Spark's scan). The profile sets what they need to keep reading it after
    every DELETE, UPDATE and MERGE, and records them in ``pyiceberg-crypto.readers`` (which
    ``verify`` and the audit check against the table's files)::

        >>> table_properties("k1", readers=("trino",))  # doctest: +NORMALIZE_WHITESPACE
        {'encryption.key-id': 'k1', 'format-version': '3', 'write.delete.mode': 'copy-on-write',
         'write.update.mode': 'copy-on-write', 'write.merge.mode': 'copy-on-write',
         'pyiceberg-crypto.readers': 'trino'}

    Trino 483 reads only Parquet when encrypted; on format 3 a merge-on-read change writes a
    deletion vector (Puffin), so the profile chooses copy-on-write. An ``extra`` that sets a mode
    back to merge-on-read for such a reader is refused.

    With ``spark``, the KMS registered for Spark catalog ``catalog`` (default: the session's current
    catalog) must know master key ``key_id`` first (:func:`pyiceberg_crypto.bridge.check_key_id`): Iceberg accepts an unknown
    key id at CREATE and fails only at the first INSERT.

    Raises:
        InvalidArgumentError: missing key id, DEK length not 16/24/32, or a format version below 3;
            an InvalidArgumentError when the catalog's KMS does not know the key.
    """
    _require_nonempty("key_id", key_id)
    if spark is not None:
        from pyiceberg_crypto.config.checks import require_known_key  # only with a session: py4j

        require_known_key(spark, key_id, catalog=catalog)
    if format_version < 3:
        raise InvalidArgumentError(f"encryption needs format-version >= 3, got {format_version}")
    props = {KEY_ID: key_id, FORMAT_VERSION: str(format_version)}
    if data_key_length is not None:
        if data_key_length not in AES_KEY_LENGTHS:
            raise InvalidArgumentError(
                f"data_key_length must be one of {AES_KEY_LENGTHS} bytes, got {data_key_length!r}"
            )
        props[DATA_KEY_LENGTH] = str(data_key_length)
    names = parse_readers(readers) if readers is not None else ()
    profile = row_level_properties(names)
    for key, value in (extra or {}).items():
        if key in props:
            raise InvalidArgumentError(f"extra property {key!r} conflicts with an encryption property")
        if key == READERS_PROPERTY and names:
            raise InvalidArgumentError(f"extra property {key!r} conflicts with readers={readers!r}: give one of them")
        props[key] = str(value)
    conflicts = mode_conflicts({**profile, **props}, names)
    length = data_key_length or DEFAULT_DATA_KEY_LENGTH
    for name in names:  # an accelerator (comet) that would fall back on this data key
        native = sorted(ENGINES[name].native_key_lengths)
        if native and length not in native:
            conflicts.append(f"readers names {name}, which reads natively only {' or '.join(map(str, native))}-byte "
                             f"data keys: a {length * 8}-bit data key falls back to Spark's scan; use "
                             f"data_key_length={' or '.join(map(str, native))}")
    if conflicts:
        raise InvalidArgumentError("; ".join(conflicts))
    props.update({k: v for k, v in profile.items() if k not in props})
    if names:
        props[READERS_PROPERTY] = ",".join(names)
    return props


def _uses_s3(warehouse: str | Path, *s3_arguments) -> bool:
    scheme = str(warehouse).split("://", 1)[0] if "://" in str(warehouse) else ""
    return scheme in S3_SCHEMES or any(argument is not None for argument in s3_arguments)


def _default_metastore_dir(warehouse: str | Path) -> Path:
    text = str(warehouse)
    if "://" in text and not text.startswith("file:"):
        raise InvalidArgumentError("metastore_dir is required when the warehouse is not a local path")
    path = Path(text.removeprefix("file://").removeprefix("file:"))
    return path.absolute().parent / (path.name + "-metastore")


def _as_uri(location: str | Path) -> str:
    text = str(location)
    if "://" in text or text.startswith("file:"):
        return text
    return Path(text).absolute().as_uri()


def _require_nonempty(name: str, value: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgumentError(f"{name} is required (a non-empty string), got {value!r}")


def _require_identifier(name: str, value: str) -> None:
    _require_nonempty(name, value)
    if not value.replace("_", "").isalnum():
        raise InvalidArgumentError(f"{name} must be letters, digits and '_', got {value!r}")
