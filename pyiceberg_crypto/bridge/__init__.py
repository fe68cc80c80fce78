"""The bridge between Iceberg's JVMs (driver and executors) and a Python KMS (Py4J, authenticated, loopback by default)."""

from pyiceberg_crypto.bridge.adapter import KmsCallStats, OperationStats
from pyiceberg_crypto.bridge.key_check import KeyCheckSkippedWarning, UnknownMasterKeyError, check_key_id
from pyiceberg_crypto.bridge.registration import (
    BridgeError,
    KmsRegistration,
    PlaintextCatalogWarning,
    register_kms,
    registered,
    unregister_all,
    warn_about_plaintext_catalogs,
)

__all__ = ["BridgeError", "KeyCheckSkippedWarning", "KmsCallStats", "KmsRegistration", "OperationStats",
           "PlaintextCatalogWarning", "UnknownMasterKeyError", "check_key_id", "register_kms", "registered",
           "unregister_all", "warn_about_plaintext_catalogs"]
