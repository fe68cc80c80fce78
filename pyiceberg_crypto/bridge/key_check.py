"""Check, before ``CREATE TABLE``, that the KMS a catalog uses knows a table's master key::

    check_key_id(spark, "orders-key", catalog="lake")     # UnknownMasterKeyError if it does not
    props = table_properties("orders-key", spark=spark, catalog="lake")   # the same check, then the properties

Why here and not in Iceberg: Iceberg 1.12.0 calls no KMS at ``CREATE TABLE``. The table's
``encryption.key-id`` is only stored; the first KEK is wrapped by the first commit that writes a
snapshot (the first INSERT), so a key id the KMS does not know is accepted at CREATE and the
first INSERT fails, its cause deep in a stack trace. The check asks the Python KMS registered for
the catalog (:func:`pyiceberg_crypto.bridge.register_kms`, catalog property
``pyiceberg-crypto.kms-name``) to wrap a throw-away random key with the master key: the one
operation every KMS has, and the one Iceberg will ask for. No key bytes are kept or shown.
"""

from __future__ import annotations

import os
import warnings

from pyiceberg_crypto.errors import ConfigError
from pyiceberg_crypto.properties import KMS_IMPL, KMS_NAME_PROPERTY, KMS_SERVICE_PROPERTY, PYTHON_KMS_IMPL
from pyiceberg_crypto.errors import NotASparkSessionError, PyicebergCryptoError
from pyiceberg_crypto.kms.bounded import DEFAULT_KMS_TIMEOUT_SECONDS, KmsTimeoutError, call_with_timeout
from pyiceberg_crypto.kms.registrations import registered
from pyiceberg_crypto.safe_text import exception_line

__all__ = ["KeyCheckSkippedWarning", "UnknownMasterKeyError", "check_key_id"]


class UnknownMasterKeyError(ConfigError):
    """The catalog's KMS cannot wrap with this master key (unknown key id, or the KMS refused)."""


class KeyCheckSkippedWarning(PyicebergCryptoError, UserWarning):
    """The master key could not be checked in this process (the catalog uses ``kms serve``)."""


def check_key_id(spark, key_id: str, *, catalog: str | None = None,
                 timeout: float | None = DEFAULT_KMS_TIMEOUT_SECONDS) -> None:
    """Raise :class:`UnknownMasterKeyError` unless the KMS of Spark catalog ``catalog`` (default:
    the session's current catalog, which must then be one the session configures) can wrap with
    master key ``key_id`` (what Iceberg asks of it at the table's first commit).

    The message names the key id, the KMS (registration name and class) and what to do. A catalog
    that uses a KMS service (``pyiceberg-crypto kms serve``) cannot be checked from here: a
    :class:`KeyCheckSkippedWarning` says so. ConfigError: no KMS registered under the catalog's
    ``pyiceberg-crypto.kms-name``, or an empty key id."""
    if not key_id or not isinstance(key_id, str):
        raise ConfigError(f"key_id must be a master key id (encryption.key-id), got {key_id!r}")
    if not callable(getattr(getattr(spark, "conf", None), "get", None)):
        raise NotASparkSessionError(f"check_key_id needs a SparkSession (its catalog settings), got "
                                    f"{type(spark).__name__}")
    if catalog is None:
        catalog = spark.catalog.currentCatalog()
        if not spark.conf.get(f"spark.sql.catalog.{catalog}", None):
            raise ConfigError(f"no catalog given and the session's current catalog {catalog!r} is not one it "
                              "configures (spark.sql.catalog.NAME): pass catalog= (the name in config.spark_settings)")
    prefix = f"spark.sql.catalog.{catalog}"
    service = spark.conf.get(f"{prefix}.{KMS_SERVICE_PROPERTY}", None)
    if service:
        warnings.warn(f"master key {key_id!r} not checked: catalog {catalog!r} uses the KMS service {service} "
                      "(pyiceberg-crypto kms serve); check it there (pyiceberg-crypto keystore list on its keystore)",
                      KeyCheckSkippedWarning, stacklevel=2)
        return
    implementation = spark.conf.get(f"{prefix}.{KMS_IMPL}", None)
    if implementation and implementation != PYTHON_KMS_IMPL:
        warnings.warn(f"master key {key_id!r} not checked: catalog {catalog!r} uses the JVM KMS {implementation}, "
                      "not a Python KMS; its first commit is the check", KeyCheckSkippedWarning, stacklevel=2)
        return
    name = spark.conf.get(f"{prefix}.{KMS_NAME_PROPERTY}", "default")
    registration = registered(name)
    if registration is None or not registration.active:
        raise ConfigError(f"no Python KMS is registered under {name!r} (catalog {catalog!r}): call "
                          f"register_kms(spark, kms, name={name!r}) before creating tables")
    kms = registration.kms
    described = f"the KMS registered as {name!r} for catalog {catalog!r} ({type(kms).__name__})"
    try:
        call_with_timeout(kms.wrap_key, os.urandom(32), key_id, timeout=timeout,
                          what=f"the KMS call wrap_key for {key_id!r}")
    except KmsTimeoutError as exc:
        raise UnknownMasterKeyError(f"master key {key_id!r} could not be checked: {exc}") from None
    except Exception as exc:  # the KMS's own error: unknown key, no permission, unreachable
        raise UnknownMasterKeyError(
            f"{described} cannot wrap with master key {key_id!r}: {exception_line(exc)}. Tables with "
            f"'encryption.key-id'='{key_id}' would fail at their first INSERT: create the key in that KMS "
            "(keystore: pyiceberg-crypto keystore add KEYSTORE KEY_ID) or use a key id it knows") from None
