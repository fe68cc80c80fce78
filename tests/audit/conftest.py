"""The audit's tests use the verifier's tables and KMS keys (tests/verify/conftest.py)."""

from tests.verify.conftest import verify_kms_keys  # noqa: F401 - the session's keys for the KMS factory
