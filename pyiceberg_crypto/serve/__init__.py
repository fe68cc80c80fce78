"""``kms serve``: one Python KMS served to JVMs and AWS clients, through faces that are equals.

- :mod:`.served_kms`  the KMS itself, once: its factory, reload, the one call timeout (``kms_timeout``)
- :mod:`.py4j`        the Py4J face: Iceberg's JVMs through the bridge's ``PythonKmsClient`` (token, TLS pin)
- :mod:`.aws`         the AWS KMS face: the AWS KMS JSON 1.1 API over HTTPS with SigV4 (Trino, boto3)
- :mod:`.metrics`     ``/metrics`` and ``/healthz`` over every running face

Usage::

    from pyiceberg_crypto.serve.py4j import Py4jFace
    from pyiceberg_crypto.serve.served_kms import ServedKms

    served = ServedKms(lambda: load_kms("keystore", {"keystore.path": "/etc/lake/keys.json"})).start()
    face = Py4jFace(served, token_file="/run/lake/kms.token", listen="127.0.0.1:9600").start()

The command line is ``pyiceberg-crypto kms serve`` (:mod:`pyiceberg_crypto.cli.kms_cmd`). The
in-process bridge (``register_kms``, the callback server both use) is :mod:`pyiceberg_crypto.bridge`.
"""

#: A map of the package: import its modules (nothing is re-exported here).
__all__: list[str] = []
