"""The confinement tests use the verifier's tables and KMS keys (tests/verify/conftest.py); the
loopback Hive metastore fixture comes from tests/conftest.py."""

from tests.verify.conftest import verify_kms_keys  # noqa: F401 - the session's keys for the KMS factory
