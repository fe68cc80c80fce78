"""Which Iceberg catalogs encrypt: the ones that honour ``encryption.key-id``, and the ones that
silently write such a table in plaintext::

    from pyiceberg_crypto.catalog.kinds import asks_for_encryption, catalog_kind, plaintext_reason

    props = {"type": "rest", "uri": "http://127.0.0.1:8181", "encryption.kms-impl": "..."}
    asks_for_encryption(props)    # True: a KMS (or a default encryption.key-id) is configured
    plaintext_reason(props)       # "Iceberg's own REST catalog (type=rest) ... catalog-impl=io.pyicebergcrypto..."
    catalog_kind(props)           # "rest": how a table of this catalog is looked up

Measured on Iceberg 1.12.0 (and its source, 1.11.0 to main): only ``HiveCatalog`` creates the
catalog's ``encryption.kms-impl`` client and only ``HiveTableOperations`` overrides
``TableOperations.encryption()``. Every other catalog (``type=rest``, ``hadoop``, ``jdbc``,
``glue``, ``nessie``, the in-memory one) uses the plaintext encryption manager: a table created
with ``encryption.key-id`` and ``format-version`` 3 is accepted and written in plaintext (``PAR1``
Parquet, plain Avro manifests) with no error. The bridge's ``EncryptingRestCatalog`` is the REST
catalog that encrypts (apache/iceberg#13225 is the upstream work).

Pure functions of a catalog's properties (the ``spark.sql.catalog.<name>.*`` settings without
their prefix), at the catalog package's base: they import only the bottom layer, so the builders
(:mod:`pyiceberg_crypto.config`) use them to refuse a plaintext setup, and ``register_kms``
(:mod:`pyiceberg_crypto.bridge`) to warn about one it finds in a session.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyiceberg_crypto.errors import CatalogError
from pyiceberg_crypto.properties import KEY_ID, KMS_IMPL, KMS_NAME_PROPERTY, KMS_SERVICE_PROPERTY, KMS_TYPE

__all__ = ["ENCRYPTING_REST_CATALOG_IMPL", "HIVE", "REST", "REST_CATALOG_IMPLS", "asks_for_encryption", "catalog_kind",
           "plaintext_reason", "session_catalogs"]

#: The catalog kinds this package knows, defined here once: Iceberg's Hive catalog, and a REST catalog.
HIVE, REST = "hive", "rest"
#: The bridge's REST catalog with table encryption (``catalog-impl``).
ENCRYPTING_REST_CATALOG_IMPL = "io.pyicebergcrypto.rest.EncryptingRestCatalog"
#: Iceberg's own REST catalog (``catalog-impl``), which ignores ``encryption.key-id`` in 1.12.0.
ICEBERG_REST_CATALOG_IMPL = "org.apache.iceberg.rest.RESTCatalog"
#: Iceberg's ``catalog-impl`` classes that ignore ``encryption.key-id`` in 1.12.0.
PLAINTEXT_CATALOG_IMPLS = (
    ICEBERG_REST_CATALOG_IMPL,
    "org.apache.iceberg.hadoop.HadoopCatalog",
    "org.apache.iceberg.jdbc.JdbcCatalog",
    "org.apache.iceberg.aws.glue.GlueCatalog",
    "org.apache.iceberg.nessie.NessieCatalog",
    "org.apache.iceberg.inmemory.InMemoryCatalog",
    "org.apache.iceberg.snowflake.SnowflakeCatalog",
    "org.apache.iceberg.gcp.bigquery.BigQueryMetastoreCatalog",
)
#: Catalog properties that ask for encryption: a KMS for the catalog, or a key id every new table gets.
KMS_PROPERTIES = (KMS_IMPL, KMS_TYPE, KMS_NAME_PROPERTY, KMS_SERVICE_PROPERTY)
DEFAULT_KEY_PROPERTIES = (f"table-default.{KEY_ID}", f"table-override.{KEY_ID}")
#: Spark catalog classes of Iceberg (``spark.sql.catalog.<name>``).
ICEBERG_SPARK_CATALOGS = ("org.apache.iceberg.spark.SparkCatalog", "org.apache.iceberg.spark.SparkSessionCatalog")


def asks_for_encryption(properties: Mapping[str, str]) -> bool:
    """Whether a catalog's settings ask for encrypted tables: a KMS, or a default ``encryption.key-id``."""
    return any(properties.get(key) for key in (*KMS_PROPERTIES, *DEFAULT_KEY_PROPERTIES))


def plaintext_reason(properties: Mapping[str, str]) -> str | None:
    """Why a catalog with these settings writes ``encryption.key-id`` tables in plaintext, naming the
    setting that encrypts; None when it encrypts (or is a ``catalog-impl`` this package cannot judge)."""
    impl = properties.get("catalog-impl")
    kind = properties.get("type")
    if impl:
        if impl in PLAINTEXT_CATALOG_IMPLS:
            return (f"catalog-impl={impl} ignores encryption.key-id in Iceberg 1.12.0 (only the Hive catalog "
                    f"encrypts): {_remedy(f'catalog-impl={impl}' if impl == ICEBERG_REST_CATALOG_IMPL else None)}")
        return None
    if kind is None or kind.lower() == HIVE:
        return None
    return (f"type={kind} ignores encryption.key-id in Iceberg 1.12.0 and writes such tables in plaintext "
            f"(only the Hive catalog encrypts): {_remedy('type=rest' if kind.lower() == REST else None)}")


def _remedy(rest_setting: str | None) -> str:
    """The setting that encrypts: the bridge's REST catalog instead of ``rest_setting`` (Iceberg's)."""
    if rest_setting:
        return (f"use catalog-impl={ENCRYPTING_REST_CATALOG_IMPL} instead of {rest_setting} (config.catalog_settings("
                "catalog_type='rest', uri=...) renders it)")
    return "use a Hive catalog (type=hive) or the bridge's REST catalog (config.catalog_settings(catalog_type=...))"


def session_catalogs(conf: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """The Iceberg catalogs of flat Spark settings: ``{name: properties without the prefix}``."""
    found: dict[str, dict[str, str]] = {}
    prefix = "spark.sql.catalog."
    for key, value in conf.items():
        rest = key[len(prefix):] if key.startswith(prefix) else None
        if rest and "." not in rest and value in ICEBERG_SPARK_CATALOGS:
            found.setdefault(rest, {})
    for name, properties in found.items():
        start = f"{prefix}{name}."
        properties.update({key[len(start):]: value for key, value in conf.items() if key.startswith(start)})
    return found


#: ``catalog-impl`` values that are REST catalogs (the bridge's encrypting one, and Iceberg's).
REST_CATALOG_IMPLS = (ENCRYPTING_REST_CATALOG_IMPL, ICEBERG_REST_CATALOG_IMPL)


def catalog_kind(properties: dict[str, str], catalog: str = "?") -> str:
    """:data:`HIVE` or :data:`REST`: how a table of a catalog with these settings is looked up.
    CatalogError for any other catalog (e.g. ``type=hadoop``: no catalog service to ask)."""
    if properties.get("type") == REST or properties.get("catalog-impl") in REST_CATALOG_IMPLS:
        return REST
    if properties.get("type", HIVE) == HIVE or "catalog-impl" in properties:
        return HIVE  # a catalog-impl of our own is a Hive catalog (a subclass of Iceberg's HiveCatalog)
    raise CatalogError(f"catalog {catalog!r} is of type {properties.get('type')!r}: the verifier reads Hive "
                       "and REST catalogs")
