"""The Kafka broker of the streaming tests (started once per test process), as a user's suite gets it."""

from pyiceberg_crypto.testing.pytest_plugin import kafka_broker

__all__ = ["kafka_broker"]
