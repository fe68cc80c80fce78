"""KMS factories for ``pyiceberg-crypto verify --kms tests.verify.kms_factory:...`` in tests.

The session's master keys are random per run: the ``verify_kms_keys`` fixture puts them here."""

from pyiceberg_crypto.kms import InMemoryKms

MASTER_KEYS: dict[str, bytes] = {}


def session_kms() -> InMemoryKms:
    return InMemoryKms(MASTER_KEYS)


def wrong_master_key() -> InMemoryKms:
    return InMemoryKms.with_random_keys(*MASTER_KEYS)
