"""The loopback services' fixtures, as a user's suite would get them."""

from pyiceberg_crypto.testing.pytest_plugin import s3_environment, s3_server  # noqa: F401

# hive_metastore: tests/conftest.py (one metastore for the whole test process)
