"""The loopback Hive metastore fixture, as a user's suite would get it."""

from pyiceberg_crypto.services.pytest_plugin import hive_metastore  # noqa: F401
