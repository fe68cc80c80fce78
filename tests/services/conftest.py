"""The loopback services' fixtures, as a user's suite would get them."""

from pyiceberg_crypto.services.pytest_plugin import hive_metastore, s3_environment, s3_server  # noqa: F401
