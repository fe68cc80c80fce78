"""The Kafka broker of the streaming tests (started once per test process) and their helpers."""

from pyiceberg_crypto.services.pytest_plugin import kafka_broker  # noqa: F401
