"""Python KMS API (:class:`KeyManagementClient`) and shipped KMS implementations.

Shipped KMSs (short names for :func:`~pyiceberg_crypto.kms.loader.load_kms` and ``--kms``):

- ``keystore``: :class:`KeystoreKms`, master keys in a local keystore file, with rotation;
- ``aws``: :class:`AwsKms`, AWS KMS through boto3 (``pip install pyiceberg-crypto[aws]``);
- ``vault``: :class:`VaultTransitKms`, Vault / OpenBao Transit through hvac (``pip install pyiceberg-crypto[vault]``);
- ``gcp``: :class:`GcpKms`, Google Cloud KMS through google-cloud-kms (``pip install pyiceberg-crypto[gcp]``);
- ``azure``: :class:`AzureKeyVaultKms`, Azure Key Vault / Managed HSM keys through azure-keyvault-keys
  (``pip install pyiceberg-crypto[azure]``);
- ``kmip``: :class:`KmipKms`, a KMIP server or HSM (AES-GCM Encrypt/Decrypt over mutual TLS) through PyKMIP
  (``pip install pyiceberg-crypto[kmip]``);
- :class:`InMemoryKms` for demos and tests.

Any of them, or your own ``module:factory``, by name: ``load_kms("keystore", properties)``.
"""

from pyiceberg_crypto._deprecated import renamed_classes
from pyiceberg_crypto.errors import FileAccessError, IntegrityError, InvalidArgumentError, KmsError, UnknownKeyError
from pyiceberg_crypto.kms.aws import AwsKms
from pyiceberg_crypto.kms.azure import AzureKeyVaultKms
from pyiceberg_crypto.kms.base import KeyGenerationResult, KeyManagementClient
from pyiceberg_crypto.kms.gcp import GcpKms
from pyiceberg_crypto.kms.keystore import KeystoreKms
from pyiceberg_crypto.kms.kmip import KmipKms
from pyiceberg_crypto.kms.loader import load_kms
from pyiceberg_crypto.kms.memory import InMemoryKms
from pyiceberg_crypto.kms.vault import VaultTransitKms

__all__ = [
    "AwsKms",
    "AzureKeyVaultKms",
    "GcpKms",
    "InMemoryKms",
    "KeyGenerationResult",
    "KeyManagementClient",
    "KeystoreKms",
    "KmipKms",
    "KmsError",
    "UnknownKeyError",
    "VaultTransitKms",
    "load_kms",
]

#: Old names, kept for one release (CHANGELOG.md).
__getattr__ = renamed_classes(__name__, {"KeystoreError": KmsError, "InsecureKeystoreError": FileAccessError,
                                         "MalformedKeystoreError": IntegrityError,
                                         "KmsLoadError": InvalidArgumentError})
