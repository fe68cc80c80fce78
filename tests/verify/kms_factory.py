"""KMS factories for ``pyiceberg-crypto verify --kms tests.verify.kms_factory:...`` in tests.

The session's master keys are random per run: the ``verify_kms_keys`` fixture puts them here."""

import time

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


# --- hostile or broken KMSs (tests/verify/test_hostile_input.py) -------------------------------

#: How long a hanging KMS call sleeps: far longer than any test's --kms-timeout (the sleeps are
#: the behaviour under test, a call that never comes back).
HANG_SECONDS = 600


class _Hanging:
    """A KMS whose calls never come back (an unreachable endpoint without its own timeout)."""

    calls = 0

    def wrap_key(self, key, wrapping_key_id):
        type(self).calls += 1
        time.sleep(HANG_SECONDS)

    unwrap_key = wrap_key


class _RaisingUnwrap:
    """A KMS whose unwrap fails with a multi-line message carrying a terminal escape."""

    def wrap_key(self, key, wrapping_key_id):
        raise NotImplementedError

    def unwrap_key(self, wrapped, wrapping_key_id):
        raise ConnectionError("endpoint refused\nsecond line \x1b[31mred")


def hanging():
    return _Hanging()


def hanging_factory():
    time.sleep(HANG_SECONDS)


def raising_unwrap():
    return _RaisingUnwrap()
