"""Spark and table settings for encrypted Iceberg tables, as plain ``{key: value}`` dicts you can
print and diff; nothing is hidden in a session object::

    from pyspark.sql import SparkSession
    from pyiceberg_crypto import config

    settings = config.spark_settings(catalog="lake", warehouse="/data/warehouse")
    builder = config.configure_spark_with_encryption(SparkSession.builder.master("local[2]"), settings)
    spark = builder.getOrCreate()

    props = config.table_properties(key_id="orders-master-key")
    spark.sql("CREATE TABLE lake.db.orders (id bigint, v string) USING iceberg "
              + config.tblproperties_sql(props))

The same settings render as ``--conf`` arguments (:func:`spark_conf_args`) or ``spark-defaults.conf``
lines (:func:`spark_defaults_lines`). The metastore is an embedded Derby one by default
(``metastore_uri="thrift://host:9083"``: an external one); an ``s3://`` warehouse selects ``S3FileIO``,
whose credentials are never settings. Every setting: docs/reference/settings.md; S3 warehouses:
docs/how-to/services.md; commits without the metastore's lock (HIVE-26882, ``hive_lock=True``):
docs/explanation/security.md#commit-safety-with-the-embedded-metastore.

Import every name from here. By job: :mod:`.settings` the pure builders (no pyspark), :mod:`.render`
the ``--conf``/defaults/SQL renderings, :mod:`.session` builders and sessions, :mod:`.checks` checks
against a running session and its KMS (``table_properties(spark=...)``, ``declare_readers``).
"""

from __future__ import annotations

from pyiceberg_crypto._deprecated import renamed_classes

# In the order the API page shows them (docs/reference/api/config.md): by job, as the modules are.
from pyiceberg_crypto.config.settings import (
    ACCELERATORS,
    COMET,
    DRIVER_JAVA_OPTIONS,
    ICEBERG_EXTENSIONS,
    ICEBERG_VERSION,
    JAR_MODES,
    LINES_WITHOUT_METASTORE_SWAP,
    LOG4J_OPTION,
    QUIET_LOG4J,
    READERS_GUARD_EXTENSIONS,
    S3_FILE_IO,
    S3_SCHEMES,
    SECRET_PROPERTIES,
    SUPPORTED_CATALOG_TYPES,
    log,
    spark_settings,
    catalog_settings,
    refuse_plaintext_catalogs,
    kms_service_properties,
    s3_catalog_properties,
    embedded_metastore_settings,
    jar_settings,
    comet_settings,
    table_properties,
)
from pyiceberg_crypto.config.checks import declare_readers
from pyiceberg_crypto.config.render import tblproperties_sql, spark_conf_args, spark_conf_lines, spark_defaults_lines
from pyiceberg_crypto.config.session import (
    CLASS_PATH_SETTINGS,
    LIST_SETTINGS,
    configure_spark_with_encryption,
    local_spark_builder,
    session_for_catalog,
)

# Defined elsewhere, importable from here as before the split (config.HIVE, config.PYTHON_KMS_IMPL, ...).
from pyiceberg_crypto.catalog.kinds import (
    ENCRYPTING_REST_CATALOG_IMPL,
    HIVE,
    REST,
    asks_for_encryption,
    plaintext_reason,
    session_catalogs,
)
from pyiceberg_crypto.engines import ENGINES, mode_conflicts, parse_readers, row_level_properties
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

__all__ = ["ACCELERATORS", "ICEBERG_VERSION", "JAR_MODES", "KMS_NAME_PROPERTY", "KMS_SERVICE_PROPERTY", "PYTHON_KMS_IMPL",
           "catalog_settings", "comet_settings", "configure_spark_with_encryption", "declare_readers", "embedded_metastore_settings",
           "jar_settings", "kms_service_properties", "local_spark_builder", "refuse_plaintext_catalogs",
           "s3_catalog_properties", "session_for_catalog", "spark_conf_args", "spark_conf_lines",
           "spark_defaults_lines", "spark_settings", "table_properties", "tblproperties_sql"]

#: Old names, kept for one release (CHANGELOG.md).
__getattr__ = renamed_classes(__name__, {"ConfigError": InvalidArgumentError})
