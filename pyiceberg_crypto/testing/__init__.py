"""The test kit: real services on loopback and reference writers, for tests, benchmarks and
trying the package. Not the product: nothing outside this package imports it
(``tests/test_layers.py`` enforces it), and the production bridge jar holds none of its Java side
(the loopback servers' classes ship in the separate ``pyiceberg-crypto-testing.jar``).

Start one by hand (the documented command; ``--help`` lists them)::

    python -m pyiceberg_crypto.testing rest --directory /tmp/rest       # an Iceberg REST catalog
    python -m pyiceberg_crypto.testing metastore --directory /tmp/hms   # a Hive metastore

or from Python: each is a context manager (``start`` waits until ready, ``stop`` / ``kill`` end it)
that logs to a file in its directory::

    from pyiceberg_crypto.testing import S3Server, StandaloneMetastore

    with StandaloneMetastore("/tmp/hms") as metastore, S3Server("/tmp/s3", bucket="lake") as s3:
        print(metastore.uri, s3.endpoint)

Services, all bound to 127.0.0.1: :class:`~pyiceberg_crypto.testing.metastore.StandaloneMetastore`,
:class:`~pyiceberg_crypto.testing.s3.S3Server`, :class:`~pyiceberg_crypto.testing.kafka.KafkaBroker`,
:class:`~pyiceberg_crypto.testing.openbao.OpenBaoServer`, and pytest fixtures starting them once per
session (:mod:`pyiceberg_crypto.testing.pytest_plugin`); what each runs: docs/how-to/services.md.
Writers (:mod:`.writers`): AGS1 streams and sealed manifest-list key metadata, byte for byte as
Iceberg Java writes them, for tests of the verifier and the reader.
"""

from pyiceberg_crypto.testing._process import ServiceError
from pyiceberg_crypto.testing.kafka import KafkaBroker
from pyiceberg_crypto.testing.metastore import StandaloneMetastore
from pyiceberg_crypto.testing.openbao import OpenBaoServer
from pyiceberg_crypto.testing.rest import RestCatalogServer
from pyiceberg_crypto.testing.s3 import S3Server
from pyiceberg_crypto.testing.writers import Ags1Writer, decrypt_bytes, encrypt_bytes, encrypt_manifest_list_key_metadata

__all__ = ["Ags1Writer", "KafkaBroker", "OpenBaoServer", "RestCatalogServer", "S3Server", "ServiceError", "StandaloneMetastore",
           "decrypt_bytes", "encrypt_bytes", "encrypt_manifest_list_key_metadata"]
