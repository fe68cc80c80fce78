"""The in-process bridge between Iceberg's JVMs (driver and executors) and a Python KMS: registration
(``register_kms``), the authenticated Py4J callback server (loopback by default; its handshake and
limits; TLS and the operator's files are :mod:`pyiceberg_crypto.listener`'s) and the adapter the JVM
calls. ``kms serve`` (:mod:`pyiceberg_crypto.serve`) serves through the same callback server."""

from pyiceberg_crypto._deprecated import renamed_classes
from pyiceberg_crypto.errors import InvalidArgumentError, SetupError
from pyiceberg_crypto.bridge.adapter import KmsCallStats, OperationStats
from pyiceberg_crypto.bridge.key_check import KeyCheckSkippedWarning, check_key_id
from pyiceberg_crypto.bridge.registration import (
    KmsRegistration,
    PlaintextCatalogWarning,
    register_kms,
    registered,
    unregister_all,
    warn_about_plaintext_catalogs,
)

__all__ = [ "KeyCheckSkippedWarning", "KmsCallStats", "KmsRegistration", "OperationStats",
           "PlaintextCatalogWarning", "check_key_id", "register_kms", "registered",
           "unregister_all", "warn_about_plaintext_catalogs"]

#: Old names, kept for one release (CHANGELOG.md).
__getattr__ = renamed_classes(__name__, {"BridgeError": SetupError, "UnknownMasterKeyError": InvalidArgumentError})
