"""Python KMS API (:class:`KeyManagementClient`) and shipped KMS implementations."""

from pyiceberg_crypto.kms.base import KeyGenerationResult, KeyManagementClient, KmsError, UnknownKeyError
from pyiceberg_crypto.kms.memory import InMemoryKms

__all__ = ["InMemoryKms", "KeyGenerationResult", "KeyManagementClient", "KmsError", "UnknownKeyError"]
