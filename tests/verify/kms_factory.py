"""KMS factories for ``pyiceberg-crypto verify --kms tests.verify.kms_factory:...`` in tests.

The session's master keys are random per run: the ``verify_kms_keys`` fixture puts them here."""

from pyiceberg_crypto.kms import InMemoryKms

MASTER_KEYS: dict[str, bytes] = {}


def session_kms() -> InMemoryKms:
    return InMemoryKms(MASTER_KEYS)


def wrong_master_key() -> InMemoryKms:
    return InMemoryKms.with_random_keys(*MASTER_KEYS)


def raising():
    raise RuntimeError("the KMS endpoint is not configured")


def not_a_kms():
    return "not a KMS"


def none():
    return None


class _Refusing:
    def wrap_key(self, key, wrapping_key_id):
        raise PermissionError(f"access to {wrapping_key_id!r} denied")

    unwrap_key = wrap_key


class _Garbage:
    def wrap_key(self, key, wrapping_key_id):
        return b"x"

    def unwrap_key(self, wrapped, wrapping_key_id):
        return "not bytes"


def refusing():
    return _Refusing()


def garbage():
    return _Garbage()
